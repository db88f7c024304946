"""Schedules: *how* a set of computes runs. One Stage per tensor holds its iteration
axes, the split/fuse relations between them, the loop order, per-loop annotations and
where the stage is attached (root, inlined, or inside another stage's loop)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import CompileError
from ..tir import expr as tx
from ..tir.stmt import THREAD_TAGS, ForKind
from ..tir.visitor import Mutator, substitute
from .intrin import TensorIntrin
from .schedule_reads import reads_of
from .tensor import (
    REDUCE,
    ComputeOp,
    IterVar,
    PlaceholderOp,
    Reduce,
    Tensor,
    TensorLoad,
    compute,
)


@dataclass(eq=False)
class Split:
    """``parent = outer * inner_extent + inner``; ``factor`` fixes the inner extent or
    ``nparts`` the outer one (the other is derived when the parent's extent is known)."""

    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: int | None
    nparts: int | None


@dataclass(eq=False)
class Fuse:
    """``fused = outer * inner_extent + inner``."""

    outer: IterVar
    inner: IterVar
    fused: IterVar


ROOT, INLINE, AT = "root", "inline", "at"


@dataclass(eq=False)
class Stage:
    """The schedule of one tensor. Primitives mutate it in place."""

    tensor: Tensor
    axis: list[IterVar]
    reduce_axis: list[IterVar]
    body: tx.Expr | None
    leaf_iter_vars: list[IterVar] = field(default_factory=list)
    relations: list[Split | Fuse] = field(default_factory=list)
    loop_kinds: dict[IterVar, tuple[ForKind, str | None]] = field(default_factory=dict)
    tensorized: dict[IterVar, TensorIntrin] = field(default_factory=dict)
    #: whether a tensorized reduction's init vectorizes the innermost loop the intrinsic
    #: covers in the update (:meth:`tensorize`'s ``vectorize_init``)
    vectorize_init: bool = False
    attach: str = ROOT
    attach_stage: Stage | None = None
    attach_iter_var: IterVar | None = None
    scope: str = "global"

    @property
    def name(self) -> str:
        return self.tensor.name

    @property
    def is_placeholder(self) -> bool:
        return self.body is None

    @property
    def op(self):
        return self.tensor.op

    def _error(self, message: str) -> CompileError:
        return CompileError(f"stage {self.name!r}: {message}")

    def _check_leaf(self, iv: IterVar, primitive: str) -> int:
        if self.is_placeholder:
            raise self._error(f"{primitive}: a placeholder has no loops to schedule")
        for position, leaf in enumerate(self.leaf_iter_vars):
            if leaf is iv:
                return position
        names = ", ".join(leaf.name for leaf in self.leaf_iter_vars)
        raise self._error(
            f"{primitive}: {getattr(iv, 'name', iv)!r} is not one of its current loops "
            f"({names}); split/fuse replace their inputs by their outputs")

    def require_unscheduled(self, primitive: str) -> None:
        """Raise unless no loop primitive or placement touched this stage yet: for the
        primitives that replace its computation by new stages (``cache_write``,
        ``rfactor``)."""
        if self.relations or self.loop_kinds or self.attach != ROOT:
            raise CompileError(f"{primitive}: stage {self.name!r} was already scheduled; "
                               f"call {primitive} before split/fuse/reorder/annotations on it")

    # --------------------------------------------------------------- loop structure

    def split(self, parent: IterVar, factor: int | None = None,
              nparts: int | None = None) -> tuple[IterVar, IterVar]:
        """Split loop ``parent`` into (outer, inner) with inner extent ``factor`` or outer
        extent ``nparts``; factors need not divide the extent (the tail is guarded)."""
        position = self._check_leaf(parent, "split")
        if (factor is None) == (nparts is None):
            raise self._error("split needs exactly one of factor= or nparts=")
        given = factor if factor is not None else nparts
        if int(given) < 1:
            raise self._error(f"split of {parent.name!r} by {given}: must be at least 1")
        outer = IterVar(tx.Var(parent.name + ".outer"), 0, parent.kind)
        inner = IterVar(tx.Var(parent.name + ".inner"), 0, parent.kind)
        self.relations.append(Split(parent, outer, inner,
                                    None if factor is None else int(factor),
                                    None if nparts is None else int(nparts)))
        self.leaf_iter_vars[position:position + 1] = [outer, inner]
        return outer, inner

    def fuse(self, *ivs: IterVar) -> IterVar:
        """Fuse adjacent loops (outermost first) into one."""
        if len(ivs) < 2:
            raise self._error("fuse needs at least two loops")
        positions = [self._check_leaf(iv, "fuse") for iv in ivs]
        if positions != list(range(positions[0], positions[0] + len(ivs))):
            raise self._error("fuse needs adjacent loops given outermost first; reorder first")
        if len({iv.kind for iv in ivs}) > 1:
            raise self._error("cannot fuse a reduction loop with a data-parallel loop")
        fused = ivs[0]
        for inner in ivs[1:]:
            result = IterVar(tx.Var(f"{fused.name}.{inner.name}.fused"), 0, inner.kind)
            self.relations.append(Fuse(fused, inner, result))
            fused = result
        self.leaf_iter_vars[positions[0]:positions[-1] + 1] = [fused]
        return fused

    def reorder(self, *ivs: IterVar) -> None:
        """Put the given loops, in the given order, at the positions they occupy."""
        positions = sorted(self._check_leaf(iv, "reorder") for iv in ivs)
        if len(set(positions)) != len(positions):
            raise self._error("reorder lists a loop twice")
        for position, iv in zip(positions, ivs):
            self.leaf_iter_vars[position] = iv

    def tile(self, x: IterVar, y: IterVar, x_factor: int,
             y_factor: int) -> tuple[IterVar, IterVar, IterVar, IterVar]:
        """Split ``x`` and ``y`` and order the loops (x_outer, y_outer, x_inner, y_inner)."""
        xo, xi = self.split(x, x_factor)
        yo, yi = self.split(y, y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    # --------------------------------------------------------------- loop annotations

    def _annotate(self, iv: IterVar, kind: ForKind, tag: str | None = None) -> None:
        self._check_leaf(iv, kind.value)
        self.loop_kinds[iv] = (kind, tag)

    def parallel(self, iv: IterVar) -> None:
        """Run the iterations of ``iv`` across CPU cores."""
        if iv.kind == REDUCE:
            raise self._error(
                f"parallel: {iv.name!r} is a reduction loop, whose iterations write the same "
                "element; parallelize a data-parallel loop (or rfactor the reduction)")
        self._annotate(iv, ForKind.PARALLEL)

    def vectorize(self, iv: IterVar) -> None:
        """Run ``iv`` as SIMD vector operations (its extent becomes the lane count)."""
        self._annotate(iv, ForKind.VECTORIZED)

    def unroll(self, iv: IterVar, explicit: bool = True) -> None:
        """Replicate the body of ``iv`` once per iteration: in the TIR (``explicit``, so
        that the copies' constant indices are resolved before code generation: a tile's
        accumulators become registers), or by the code generator's compiler from a hint
        (a long inner loop whose copies index nothing by it: the TIR, and every pass over
        it, stays one body long)."""
        self._annotate(iv, ForKind.UNROLLED if explicit else ForKind.UNROLL_HINT)

    def bind(self, iv: IterVar, thread_tag: str) -> None:
        """Bind ``iv`` to a GPU axis (``blockIdx.x``, ``threadIdx.x``, ``vthread``...)."""
        if thread_tag not in THREAD_TAGS:
            raise self._error(f"bind: unknown thread tag {thread_tag!r}; use one of "
                              f"{', '.join(THREAD_TAGS)}")
        self._annotate(iv, ForKind.THREAD_BINDING, thread_tag)

    def tensorize(self, iv: IterVar, intrin: TensorIntrin, vectorize_init: bool = False
                  ) -> None:
        """Replace the loops from ``iv`` inwards by the hardware intrinsic ``intrin``.
        ``vectorize_init``: a reduction's init (its identity stored before the update)
        takes the innermost of those loops, which no schedule annotates, as a vector
        loop: one vector store per tile row, for a code generator that vectorizes loops
        (the CPU's: LLVM formed the same store from a scalar loop per row at 13-16% of
        its time on int8 models); off, the init stays scalar loops, as an accelerator's
        code generator that recognises them as clearing its accumulators expects."""
        self._check_leaf(iv, "tensorize")
        self.tensorized[iv] = intrin
        self.vectorize_init = self.vectorize_init or vectorize_init

    # --------------------------------------------------------------- placement

    def compute_at(self, parent: Stage, iv: IterVar) -> None:
        """Compute this stage inside loop ``iv`` of ``parent``, only the region that
        ``parent``'s inner loops read (found by bound inference when lowering)."""
        parent._check_leaf(iv, "compute_at")
        if self.is_placeholder:
            raise self._error("compute_at: a placeholder is not computed")
        self.attach, self.attach_stage, self.attach_iter_var = AT, parent, iv

    def compute_inline(self) -> None:
        """Substitute this stage's expression into every reader instead of storing it."""
        if self.is_placeholder or isinstance(self.body, Reduce):
            raise self._error("compute_inline: only a non-reduction compute can be inlined")
        self.attach, self.attach_stage, self.attach_iter_var = INLINE, None, None

    def compute_root(self) -> None:
        """Compute this stage in its own top-level loop nest (the default)."""
        self.attach, self.attach_stage, self.attach_iter_var = ROOT, None, None

    def set_scope(self, scope: str) -> None:
        """Memory scope of this stage's buffer when it is an intermediate."""
        self.scope = scope


def _stage_for(tensor: Tensor) -> Stage:
    if isinstance(tensor.op, PlaceholderOp):
        return Stage(tensor, [], [], None)
    op: ComputeOp = tensor.op
    stage = Stage(tensor, list(op.axis), list(op.reduce_axis), op.body)
    stage.leaf_iter_vars = [*stage.axis, *stage.reduce_axis]
    return stage


class _ReplaceReads(Mutator):
    def __init__(self, old: Tensor, new: Tensor):
        self.old, self.new = old, new

    def visit_TensorLoad(self, node: TensorLoad) -> tx.Expr:
        node = self.generic(node)
        return TensorLoad(self.new, node.indices) if node.tensor is self.old else node


class Schedule:
    """Stages of every tensor reachable from ``outputs``, producers before consumers."""

    def __init__(self, outputs: list[Tensor]):
        self.outputs = list(outputs)
        self.stages: list[Stage] = []
        self._by_tensor: dict[int, Stage] = {}
        for tensor in self.outputs:
            self._visit(tensor)

    def _visit(self, tensor: Tensor) -> None:
        if id(tensor) in self._by_tensor:
            return
        if isinstance(tensor.op, ComputeOp):
            for producer in reads_of(tensor.op.body):
                self._visit(producer)
        stage = _stage_for(tensor)
        self._by_tensor[id(tensor)] = stage
        self.stages.append(stage)

    def __getitem__(self, tensor: Tensor) -> Stage:
        try:
            return self._by_tensor[id(tensor)]
        except KeyError:
            raise CompileError(f"tensor {tensor.name!r} is not part of this schedule") from None

    def _insert_before(self, stage: Stage, anchor: Stage) -> None:
        self.stages.insert(self.stages.index(anchor), stage)
        self._by_tensor[id(stage.tensor)] = stage

    def cache_read(self, tensor: Tensor, scope: str, readers: list[Tensor]) -> Tensor:
        """A copy of ``tensor`` in ``scope`` that ``readers`` read instead of it."""
        reader_stages = [self[r] for r in readers]
        for stage in reader_stages:
            if stage.is_placeholder or tensor not in reads_of(stage.body):
                raise CompileError(f"cache_read: {stage.name!r} does not read {tensor.name!r}")
        name = f"{tensor.name}.{scope}"
        cache = compute(tensor.shape, lambda *idx: tensor[idx], name=name)
        stage = _stage_for(cache)
        stage.scope = scope
        self._insert_before(stage, min(reader_stages, key=self.stages.index))
        for reader in reader_stages:
            reader.body = _ReplaceReads(tensor, cache).expr(reader.body)
        return cache

    def cache_write(self, tensor: Tensor, scope: str) -> Tensor:
        """Compute ``tensor`` into a new ``scope`` buffer, then copy it out; returns the
        cache tensor (schedule it with compute_at into ``tensor``'s stage)."""
        stage = self[tensor]
        if stage.is_placeholder:
            raise CompileError(f"cache_write: {tensor.name!r} is a placeholder")
        stage.require_unscheduled("cache_write")
        new_axis = tuple(IterVar(tx.Var(iv.name + ".c"), iv.extent) for iv in stage.axis)
        body = substitute(stage.body, {old.var: new.var for old, new in zip(stage.axis, new_axis)})
        name = f"{tensor.name}.{scope}"
        cache = Tensor(name, tensor.shape, tensor.dtype, ComputeOp(name, new_axis, body))
        cache_stage = _stage_for(cache)
        cache_stage.scope = scope
        self._insert_before(cache_stage, stage)
        stage.body = cache[tuple(iv.var for iv in stage.axis)]
        stage.reduce_axis = []
        stage.leaf_iter_vars = list(stage.axis)
        return cache

    def rfactor(self, tensor: Tensor, axis: IterVar, factor: int,
                keep: str = "inner") -> Tensor:
        """Split reduction ``axis`` of ``tensor`` (``k = ko * factor + ki``) and turn one
        of its parts into a data-parallel axis of a new stage: returns ``rf``, of shape
        ``(*tensor.shape, kept)``, holding partial results reduced over everything but
        the kept part, and ``tensor`` becomes the reduction of ``rf`` over that last
        axis (its stage's ``reduce_axis`` is then that one axis).

        ``keep="inner"`` keeps ``ki`` (``factor`` partials, each over every ``factor``-th
        element: vectorize rf's last axis for vector accumulators, reduced across lanes
        once at the end); ``keep="outer"`` keeps ``ko`` (``ceil(extent / factor)``
        partials of ``factor`` consecutive elements each: run them in parallel when the
        output has too few points to keep the cores busy). A ``factor`` that does not
        divide the extent leaves the last chunk short: its missing elements are the
        combiner's identity and read nothing out of bounds. Call it before any other
        primitive on ``tensor``'s stage."""
        stage = self[tensor]
        if not isinstance(stage.body, Reduce):
            raise CompileError(f"rfactor: {tensor.name!r} is not a reduction")
        stage.require_unscheduled("rfactor")
        if not any(iv is axis for iv in stage.reduce_axis):
            names = ", ".join(iv.name for iv in stage.reduce_axis)
            raise CompileError(f"rfactor: {getattr(axis, 'name', axis)!r} is not a reduction "
                               f"axis of {tensor.name!r} ({names})")
        if keep not in ("inner", "outer"):
            raise CompileError(f"rfactor: keep must be 'inner' or 'outer', not {keep!r}")
        if not 1 <= int(factor) <= axis.extent:
            raise CompileError(f"rfactor of {tensor.name!r}: factor {factor} must be in "
                               f"[1, {axis.extent}] (the extent of {axis.name!r})")
        factor = int(factor)
        parts = -(-axis.extent // factor)
        reduction: Reduce = stage.body
        rf_axis = tuple(IterVar(tx.Var(iv.name + ".rf"), iv.extent) for iv in stage.axis)
        kept_extent, other_extent = (factor, parts) if keep == "inner" else (parts, factor)
        kept = IterVar(tx.Var(f"{axis.name}.{keep}"), kept_extent)
        other = IterVar(tx.Var(f"{axis.name}.{'outer' if keep == 'inner' else 'inner'}"),
                        other_extent, REDUCE)
        ko, ki = (other, kept) if keep == "inner" else (kept, other)
        position = ko.var * factor + ki.var
        last, short = axis.extent - 1, axis.extent % factor != 0
        # clamped, so that the short last chunk reads in bounds; its value is discarded
        index = tx.minimum(position, last) if short else position
        source = substitute(reduction.source, {
            **{old.var: new.var for old, new in zip(stage.axis, rf_axis)},
            axis.var: index + axis.min})
        if short:
            source = tx.select(position <= last, source, reduction.identity())
        rf_reduce = tuple(other if iv is axis else iv for iv in reduction.axis)
        name = f"{tensor.name}.rf"
        rf = Tensor(name, (*tensor.shape, kept_extent), tensor.dtype,
                    ComputeOp(name, (*rf_axis, kept),
                              Reduce(reduction.combiner, source, rf_reduce)))
        self._insert_before(_stage_for(rf), stage)
        final = IterVar(tx.Var(f"{axis.name}.{keep}.v"), kept_extent, REDUCE)
        stage.body = Reduce(reduction.combiner,
                            rf[(*(iv.var for iv in stage.axis), final.var)], (final,))
        stage.reduce_axis = [final]
        stage.leaf_iter_vars = [*stage.axis, final]
        return rf


def create_schedule(outputs: Tensor | list[Tensor]) -> Schedule:
    """The default schedule of ``outputs``: every stage at root, loops in axis order."""
    return Schedule(outputs if isinstance(outputs, list | tuple) else [outputs])

