"""``lower``: a Schedule to a TIR PrimFunc.

Each stage becomes a loop nest built from its leaf iteration variables; the root axes
are recovered from the split/fuse relations. Inlined stages are substituted into their
readers. A stage attached with ``compute_at`` gets the region its readers read inside
the attachment loop, found by symbolic interval analysis (bound inference), and a
buffer of that region's size allocated there. Non-dividing splits and partial regions
get guards, which the TIR pipeline removes where the loop ranges prove them true.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import CompileError
from ..tir import expr as tx
from ..tir.passes import lower_pipeline
from ..tir.simplify import (
    Interval,
    const_bound,
    linear_form,
    merge_div_mod,
    simplify,
    structural_key,
)
from ..tir.stmt import Allocate, BufferStore, For, ForKind, IfThenElse, PrimFunc, Stmt, seq
from ..tir.visitor import Mutator, collect, free_vars, substitute
from .intrin import BufferRegion, TensorIntrin
from .schedule import AT, INLINE, ROOT, Fuse, Schedule, Split, Stage
from .schedule_reads import reads_of
from .tensor import REDUCE, ConstantOp, IterVar, PlaceholderOp, Reduce, Tensor, TensorLoad
from .tensorize_check import check_tensorize

#: a compute's attribute: how many elements past its region (in its last axis) a vector
#: read of its readers may load, whose lanes they drop; a stage computed at a loop gets
#: them allocated (never computed), so the read stays inside its buffer
READ_SLACK = "read_slack"
#: a compute's attribute: the region of its last axis that a stage computed at a loop
#: computes is rounded up to a multiple of this (a flat axis of rows: whole rows, each
#: one vector loop, no partial last row); ``(axis, multiple)``: of that axis instead
#: (a flat axis before an innermost one that a tensorized step reads in whole runs)
REGION_MULTIPLE = "region_multiple"


@dataclass
class _Realization:
    """Where a tensor's computed values live: ``tensor[idx]`` is ``buffer[idx - bases]``."""

    buffer: tx.Buffer
    bases: tuple[tx.Expr, ...]


@dataclass
class _LoopNest:
    """A stage's loops: extent of every iteration variable, the value of every variable
    (relative to its root's start) in terms of the leaf loop variables, and the guards
    (condition, involves-reduction) that non-dividing splits need, with each guarded
    value's highest (``limits``: the split parent's value, below its extent)."""

    extents: dict[IterVar, int]
    values: dict[IterVar, tx.Expr]
    guards: list[tuple[tx.Expr, bool]]
    limits: list[tuple[tx.Expr, int]]
    init: Callable[[], Stmt] | None = None  #: the initializing store of a reduction


@dataclass(frozen=True)
class Limit:
    """A key of a ``relaxed`` mapping (:func:`symbolic_bounds`) beside its variables: the
    highest value the linear combination ``terms`` of relaxed variables takes, where a
    guard bounds it more tightly than its variables' extents (a non-dividing split's
    ``outer * factor + inner`` below the parent's extent)."""

    terms: frozenset


def limit_entry(value: tx.Expr, highest: int) -> tuple[Limit, int]:
    """The ``relaxed`` entry saying that integer ``value`` is at most ``highest``."""
    form = linear_form(value)
    return Limit(_terms_key(form)), highest - form.constant


def _terms_key(form) -> frozenset:
    return frozenset((key, coeff) for key, (coeff, _) in form.terms.items())


def _split_extents(split: Split, parent_extent: int) -> tuple[int, int]:
    if parent_extent == 0:
        return 0, 1
    if split.factor is not None:
        inner = min(split.factor, parent_extent)
        return -(-parent_extent // inner), inner
    outer = min(split.nparts, parent_extent)
    return outer, -(-parent_extent // outer)


def _loop_nest(stage: Stage, root_extents: dict[IterVar, int]) -> _LoopNest:
    extents = dict(root_extents)
    for relation in stage.relations:
        if isinstance(relation, Split):
            outer, inner = _split_extents(relation, extents[relation.parent])
            extents[relation.outer], extents[relation.inner] = outer, inner
        else:
            extents[relation.fused] = extents[relation.outer] * extents[relation.inner]
    values: dict[IterVar, tx.Expr] = {leaf: leaf.var for leaf in stage.leaf_iter_vars}
    guards, limits = [], []
    for relation in reversed(stage.relations):
        if isinstance(relation, Split):
            inner_extent = extents[relation.inner]
            value = values[relation.outer] * inner_extent + values[relation.inner]
            values[relation.parent] = value
            if extents[relation.outer] * inner_extent > extents[relation.parent]:
                guards.append((value < extents[relation.parent], relation.parent.kind == REDUCE))
                limits.append((value, extents[relation.parent] - 1))
        elif isinstance(relation, Fuse):
            fused, inner_extent = values[relation.fused], extents[relation.inner]
            values[relation.outer] = fused // inner_extent
            values[relation.inner] = fused % inner_extent
    return _LoopNest(extents, values, guards, limits)


def _bounds_of_atom(atom: tx.Expr, relaxed: dict[tx.Var, int]):
    if not (free_vars(atom) & relaxed.keys()):
        return atom, atom
    if isinstance(atom, tx.Var):
        return (tx.IntImm(0), tx.IntImm(relaxed[atom] - 1)) if atom in relaxed else (atom, atom)
    if isinstance(atom, tx.Cast) and tx.is_int(atom.dtype) and tx.is_int(atom.value.dtype):
        return symbolic_bounds(atom.value, relaxed)
    if isinstance(atom, tx.Select):
        t = symbolic_bounds(atom.true_value, relaxed)
        f = symbolic_bounds(atom.false_value, relaxed)
        if t is None or f is None:
            return None
        return tx.minimum(t[0], f[0]), tx.maximum(t[1], f[1])
    if isinstance(atom, tx.Binary) and atom.op in ("min", "max"):
        a, b = symbolic_bounds(atom.a, relaxed), symbolic_bounds(atom.b, relaxed)
        if a is None or b is None:
            return None
        combine = tx.minimum if atom.op == "min" else tx.maximum
        return combine(a[0], b[0]), combine(a[1], b[1])
    if (isinstance(atom, tx.Binary) and atom.op in ("floordiv", "floormod")
            and isinstance(atom.b, tx.IntImm) and atom.b.value > 0):
        a = symbolic_bounds(atom.a, relaxed)
        if a is None:
            return None
        if atom.op == "floordiv":
            return a[0] // atom.b, a[1] // atom.b
        return tx.IntImm(0), tx.IntImm(atom.b.value - 1)
    return None


def symbolic_bounds(expr: tx.Expr, relaxed: dict):
    """(lowest, highest) value of integer ``expr`` as expressions of its non-relaxed
    variables, when each relaxed variable ranges over ``[0, extent)``; None if unknown.
    A :class:`Limit` key of ``relaxed`` caps the highest value of its combination of
    variables wherever ``expr`` (or an operand of a division in it) is that combination
    plus a constant: a split's ``(outer * 16 + inner) // 14`` over a parent of 98
    iterations reaches 6, not the 7 of ``outer`` and ``inner``'s box.

    >>> o, i = tx.Var("o"), tx.Var("i")
    >>> simplify(symbolic_bounds((o * 16 + i) // 14, {o: 7, i: 16})[1])
    7
    >>> relaxed = dict([(o, 7), (i, 16), limit_entry(o * 16 + i, 97)])
    >>> simplify(symbolic_bounds((o * 16 + i) // 14, relaxed)[1])
    6
    """
    if not (free_vars(expr) & relaxed.keys()):
        return expr, expr
    # a fused index split and recombined (``(f // c) * c + f % c``) is ``f`` again: its
    # bounds are f's, not the box of its quotient's and remainder's
    form = merge_div_mod(linear_form(expr))
    lo: tx.Expr = tx.IntImm(form.constant)
    hi: tx.Expr = tx.IntImm(form.constant)
    for coeff, atom in form.terms.values():
        bounds = _bounds_of_atom(atom, relaxed)
        if bounds is None:
            return None
        low, high = (bounds[0] * coeff, bounds[1] * coeff) if coeff >= 0 else (
            bounds[1] * coeff, bounds[0] * coeff)
        lo, hi = lo + low, hi + high
    limit = relaxed.get(Limit(_terms_key(form)))
    if limit is not None:
        hi = tx.minimum(hi, tx.IntImm(limit + form.constant))
    return lo, hi


class _InlineExpander(Mutator):
    """Reads of inlined stages replaced by their bodies. Equal reads (one tensor at
    structurally equal indices: ``a[i] * a[i]``) share one expansion, so a chain of
    stages that each read their input several times stays linear in size."""

    def __init__(self, bodies: dict[int, tx.Expr], inlined: dict[int, Stage]):
        self.bodies, self.inlined = bodies, inlined
        self.expansions: dict[object, tx.Expr] = {}

    def visit_TensorLoad(self, node: TensorLoad) -> tx.Expr:
        node = self.generic(node)
        stage = self.inlined.get(id(node.tensor))
        if stage is None:
            return node
        key = structural_key(node)
        expansion = self.expansions.get(key)
        if expansion is None:
            mapping = {iv.var: index for iv, index in zip(stage.axis, node.indices)}
            expansion = self.expansions[key] = substitute(self.bodies[id(node.tensor)],
                                                          mapping)
        return expansion


class _LoadsToBuffers(Mutator):
    """Reads of tensors as reads of the buffers they are realized in, each index
    simplified; with ``whole_kept``, the indices of a buffer holding its whole tensor
    (bases 0) kept as they are (for a caller whose pipeline simplifies them after)."""

    def __init__(self, realized: dict[int, _Realization], whole_kept: bool = False):
        self.realized = realized
        self.whole_kept = whole_kept

    def visit_TensorLoad(self, node: TensorLoad) -> tx.Expr:
        node = self.generic(node)
        realization = self.realized.get(id(node.tensor))
        if realization is None and isinstance(node.tensor.op, ConstantOp):
            raise CompileError(
                f"constant tensor {node.tensor.name!r} is read but not in args: pass "
                "te.constant_tensors(outputs) among the args, and their data in the call")
        if realization is None:
            raise CompileError(
                f"tensor {node.tensor.name!r} is read but never computed: pass it in args "
                "(placeholders and outputs) or keep its stage in the schedule")
        indices = tuple(i if self.whole_kept and _is_zero(b) else simplify(i - b)
                        for i, b in zip(node.indices, realization.bases))
        return tx.BufferLoad(realization.buffer, indices)


def _is_zero(expr: tx.Expr) -> bool:
    return isinstance(expr, tx.IntImm) and expr.value == 0


class _Lowerer:
    def __init__(self, schedule: Schedule, args: list[Tensor], simplified_after: bool = False):
        self.schedule = schedule
        #: whether the TIR pipeline simplifies the function after (reads of whole
        #: tensors then keep their indices as they are: it simplifies them with the rest)
        self.simplified_after = simplified_after
        self.realized: dict[int, _Realization] = {}
        self.ranges: dict[tx.Var, Interval] = {}
        self.params = self._params(args)
        self.bodies = self._inline_bodies()
        self.attached: dict[tuple[int, int], list[Stage]] = {}
        #: the readers of each stage computed at a loop (checked once)
        self.readers_of: dict[int, list[Stage]] = {}
        #: each computed stage with the ids of the tensors its body reads (:meth:`_readers`)
        self._reads: list[tuple[Stage, set[int]]] | None = None
        self._check_attachments()

    def _params(self, args: list[Tensor]) -> list[tx.Buffer]:
        params, used_names = [], set()
        for tensor in args:
            if not isinstance(tensor, Tensor):
                raise CompileError(f"lower: args must be te.Tensor objects, got {tensor!r}")
            if isinstance(tensor.op, PlaceholderOp) and not self._reads(tensor):
                # an input nothing reads (e.g. a constant axes operand): a parameter
                # all the same, so the function keeps the caller's argument order
                params.append(self._param_buffer(tensor, used_names))
                continue
            stage = self.schedule[tensor]
            if stage.attach != ROOT:
                raise CompileError(
                    f"lower: argument {tensor.name!r} is {stage.attach}-scheduled; an argument "
                    "is computed into the caller's array, so it must stay at root")
            buffer = self._param_buffer(tensor, used_names)
            self.realized[id(tensor)] = _Realization(buffer, (tx.IntImm(0),) * tensor.ndim)
            params.append(buffer)
        missing = [t.name for t in self.schedule.outputs if id(t) not in self.realized]
        if missing:
            raise CompileError(f"lower: output(s) {', '.join(missing)} must be in args")
        return params

    def _reads(self, tensor: Tensor) -> bool:
        """Whether any stage of the schedule is this tensor's (i.e. something reads it)."""
        try:
            self.schedule[tensor]
        except CompileError:
            return False
        return True

    @staticmethod
    def _param_buffer(tensor: Tensor, used_names: set[str]) -> tx.Buffer:
        name = tensor.name
        while name in used_names:
            name += "_"
        used_names.add(name)
        return tx.Buffer(name, tensor.shape, tensor.dtype)

    def _inline_bodies(self) -> dict[int, tx.Expr]:
        inlined = {id(s.tensor): s for s in self.schedule.stages if s.attach == INLINE}
        bodies: dict[int, tx.Expr] = {}
        expander = _InlineExpander(bodies, inlined)
        for stage in self.schedule.stages:
            if not stage.is_placeholder:
                bodies[id(stage.tensor)] = expander.expr(stage.body)
        return bodies

    def _computed_stages(self) -> list[Stage]:
        return [s for s in self.schedule.stages if not s.is_placeholder and s.attach != INLINE]

    def _readers(self, tensor: Tensor) -> list[Stage]:
        reads = self._reads
        if reads is None:  # what each computed stage reads, found once for every tensor
            reads = self._reads = [
                (s, {id(load.tensor) for load in collect(
                    self.bodies[id(s.tensor)], lambda n: isinstance(n, TensorLoad))})
                for s in self._computed_stages()]
        return [s for s, read in reads if id(tensor) in read]

    def _check_attachments(self) -> None:
        for stage in self._computed_stages():
            if stage.attach != AT:
                continue
            parent, iv = stage.attach_stage, stage.attach_iter_var
            if parent.attach == INLINE or iv not in parent.leaf_iter_vars:
                raise CompileError(
                    f"stage {stage.name!r} is attached at {iv.name!r} of {parent.name!r}, which "
                    "is no longer one of its loops (inlined, split or fused afterwards)")
            readers = self._readers(stage.tensor)
            if not readers or not all(self._runs_inside(r, parent, iv) for r in readers):
                names = ", ".join(r.name for r in readers) or "nobody"
                raise CompileError(
                    f"stage {stage.name!r} is computed at {parent.name!r} but read by {names}; "
                    "compute_at needs each reader to be the attachment stage or a "
                    "stage computed inside that loop (attached there, or to a stage that is)")
            self.attached.setdefault((id(parent), id(iv)), []).append(stage)
            self.readers_of[id(stage)] = readers

    @staticmethod
    def _runs_inside(stage: Stage, parent: Stage, iv: IterVar) -> bool:
        """Whether ``stage`` is ``parent`` or runs inside its loop ``iv``: attached at
        ``iv`` or a loop within it, or to a stage that is (a chain of attachments)."""
        while stage is not parent:
            if stage.attach != AT:
                return False
            if stage.attach_stage is parent:
                leafs = parent.leaf_iter_vars
                return leafs.index(stage.attach_iter_var) >= leafs.index(iv)
            stage = stage.attach_stage
        return True

    # ------------------------------------------------------------------ emission

    def run(self) -> Stmt:
        allocations, stmts = [], []
        for stage in self._computed_stages():
            if stage.attach != ROOT:
                continue
            if id(stage.tensor) not in self.realized:
                buffer = tx.Buffer(stage.name, stage.tensor.shape, stage.tensor.dtype, stage.scope)
                self.realized[id(stage.tensor)] = _Realization(
                    buffer, (tx.IntImm(0),) * stage.tensor.ndim)
                allocations.append(buffer)
            domain = [(tx.IntImm(0), d) for d in stage.tensor.shape]
            stmts.append(self._emit_stage(stage, domain, attached=False))
        body = seq(stmts)
        for buffer in reversed(allocations):
            body = Allocate(buffer, body)
        return body

    def _emit_stage(self, stage: Stage, domain: list[tuple[tx.Expr, int]],
                    attached: bool) -> Stmt:
        root_extents = {iv: extent for iv, (_, extent) in zip(stage.axis, domain)}
        root_extents.update({iv: iv.extent for iv in stage.reduce_axis})
        nest = _loop_nest(stage, root_extents)
        coords = {iv.var: simplify(base + nest.values[iv])
                  for iv, (base, _) in zip(stage.axis, domain)}
        coords.update({iv.var: simplify(nest.values[iv] + iv.min) for iv in stage.reduce_axis})
        body = substitute(self.bodies[id(stage.tensor)], coords)
        spatial_guards = [cond for cond, is_reduce in nest.guards if not is_reduce]
        if attached:
            for iv, dim in zip(stage.axis, stage.tensor.shape):
                coordinate = coords[iv.var]
                spatial_guards += [coordinate >= 0, coordinate < dim]
        all_guards = spatial_guards + [cond for cond, is_reduce in nest.guards if is_reduce]
        buffer = self.realized[id(stage.tensor)].buffer
        store_at = tuple(nest.values[iv] for iv in stage.axis)
        leafs = stage.leaf_iter_vars

        def guarded(stmt: Stmt, guards: list[tx.Expr]) -> Stmt:
            if not guards:
                return stmt
            condition = guards[0]
            for guard in guards[1:]:
                condition = tx.logical_and(condition, guard)
            return IfThenElse(condition, stmt, likely=True)

        def to_buffers(expr: tx.Expr) -> tx.Expr:
            return _LoadsToBuffers(self.realized, self.simplified_after).expr(expr)

        if not isinstance(body, Reduce):
            def store() -> Stmt:
                return guarded(BufferStore(buffer, to_buffers(body), store_at), spatial_guards)
            return self._loops(stage, nest, body, leafs, 0, store, with_children=True)

        first_reduce = next(p for p, iv in enumerate(leafs) if iv.kind == REDUCE)

        def init() -> Stmt:
            return guarded(BufferStore(buffer, body.identity(), store_at), spatial_guards)

        nest.init = init

        def update() -> Stmt:
            current = tx.BufferLoad(buffer, store_at)
            value = body.combine(current, to_buffers(body.source))
            return guarded(BufferStore(buffer, value, store_at), all_guards)

        def reduction() -> Stmt:
            inner_spatial = [iv for iv in leafs[first_reduce:] if iv.kind != REDUCE]
            init_nest = self._loops(stage, nest, body, inner_spatial, 0, init, False)
            update_nest = self._loops(stage, nest, body, leafs, first_reduce, update, True)
            return seq([init_nest, update_nest])

        return self._loops(stage, nest, body, leafs[:first_reduce] + [None], 0, reduction, True)

    def _loops(self, stage: Stage, nest: _LoopNest, body: tx.Expr, leafs: list, position: int,
               innermost, with_children: bool) -> Stmt:
        """Loops over ``leafs[position:]`` around ``innermost()``; a ``None`` leaf marks
        where the innermost callback takes over (used to split reduction nests)."""
        if position == len(leafs) or leafs[position] is None:
            return innermost()
        iv = leafs[position]
        if with_children and iv in stage.tensorized:
            return self._tensorize(stage, nest, body, iv, stage.tensorized[iv])
        extent = nest.extents[iv]
        self.ranges[iv.var] = Interval(0, max(extent - 1, 0))
        producers, buffers = [], []
        if with_children:
            for child in self.attached.get((id(stage), id(iv)), []):
                buffer, stmt = self._emit_attached(child, stage, nest, body, iv)
                buffers.append(buffer)
                producers.append(stmt)
        inner = self._loops(stage, nest, body, leafs, position + 1, innermost, with_children)
        loop_body = seq([*producers, inner])
        for buffer in reversed(buffers):
            loop_body = Allocate(buffer, loop_body)
        kind, tag = stage.loop_kinds.get(iv, (ForKind.SERIAL, None))
        if (stage.vectorize_init and not with_children and kind is ForKind.SERIAL
                and position == len(leafs) - 1 and _inside_tensorized(stage, iv)):
            # a tensorized reduction's init, where its schedule asks (Stage.tensorize's
            # vectorize_init): its innermost loop, which the intrinsic covers in the
            # update (so no schedule annotates it), stores the identity as one vector
            kind = ForKind.VECTORIZED
        return For(iv.var, tx.IntImm(0), tx.IntImm(extent), kind, loop_body, tag)

    def _tensorize(self, stage: Stage, nest: _LoopNest, body: tx.Expr, iv: IterVar,
                   intrin: TensorIntrin) -> Stmt:
        """The loops from ``iv`` inwards replaced by ``intrin``'s implementation."""
        leafs = stage.leaf_iter_vars
        relaxed = {leaf.var: nest.extents[leaf] for leaf in leafs[leafs.index(iv):]}
        where = f"tensorize {intrin.name!r} at {stage.name!r}.{iv.name}"
        for condition, _ in nest.guards:
            if free_vars(condition) & relaxed.keys():
                raise CompileError(f"{where}: the loops it replaces have a non-dividing split "
                                   "tail; choose factors that divide the extents")
        for child in self.attached.get((id(stage), id(iv)), []):
            raise CompileError(f"{where}: stage {child.name!r} is attached inside it")
        own = self.realized[id(stage.tensor)]
        store_at = [nest.values[axis] for axis in stage.axis]
        output = self._intrin_region(own.buffer, [tx.IntImm(0)] * len(store_at), store_at,
                                     relaxed, intrin.compute, where)
        source = body.source if isinstance(body, Reduce) else body
        loads = collect(source, lambda n: isinstance(n, TensorLoad))
        declared = intrin.inputs
        read = reads_of(source)
        if len(read) != len(declared):
            raise CompileError(f"{where}: the stage reads {len(read)} tensors, the intrinsic "
                               f"declares {len(declared)} inputs")
        check_tensorize(body, intrin, read, store_at, output.shape, relaxed, where)
        inputs = []
        for tensor, placeholder in zip(read, declared):
            realization = self.realized.get(id(tensor))
            if realization is None:
                raise CompileError(f"{where}: input {tensor.name!r} is not computed before it")
            first = next(load for load in loads if load.tensor is tensor)
            inputs.append(self._intrin_region(realization.buffer, realization.bases,
                                              list(first.indices), relaxed, placeholder, where))
        position = leafs.index(iv)
        if nest.init is None or any(leaf.kind == REDUCE for leaf in leafs[:position]):
            return intrin.implement(inputs, output)
        if intrin.implement_reset is not None:  # it starts from the identity itself
            return intrin.implement_reset(inputs, output)
        computed = intrin.implement(inputs, output)
        # The intrinsic covers whole reductions: initialize its output region first.
        inner_spatial = [leaf for leaf in leafs[position:] if leaf.kind != REDUCE]
        return seq([self._loops(stage, nest, body, inner_spatial, 0, nest.init, False),
                    computed])

    def _intrin_region(self, buffer: tx.Buffer, bases, indices: list[tx.Expr],
                       relaxed: dict[tx.Var, int], declared: Tensor, where: str):
        starts, extents = [], []
        for index, base in zip(indices, bases):
            bounds = symbolic_bounds(index, relaxed)
            extent = None if bounds is None else simplify(bounds[1] - bounds[0] + 1, self.ranges)
            if not isinstance(extent, tx.IntImm):
                raise CompileError(f"{where}: the region of {buffer.name!r} has no constant "
                                   "size")
            starts.append(simplify(bounds[0] - base, self.ranges))
            extents.append(extent.value)
        region = BufferRegion(buffer, tuple(starts), tuple(extents))
        wanted = tuple(d for d in declared.shape if d != 1)
        if region.squeezed_shape != wanted or buffer.dtype != declared.dtype:
            raise CompileError(
                f"{where}: {buffer.name!r} region is {buffer.dtype}{list(region.shape)} but "
                f"the intrinsic's {declared.name!r} is {declared.dtype}{list(declared.shape)}")
        return region

    def _emit_attached(self, child: Stage, parent: Stage, nest: _LoopNest, parent_body: tx.Expr,
                       iv: IterVar) -> tuple[tx.Buffer, Stmt]:
        leafs = parent.leaf_iter_vars
        inner_leafs = leafs[leafs.index(iv) + 1:]
        relaxed: dict = {leaf.var: nest.extents[leaf] for leaf in inner_leafs}
        # a split wholly inside the region covers its parent's range only (a split
        # with a loop outside it keeps its last iteration's region whole: a constant
        # size, the positions past the parent computed and dropped)
        relaxed.update(limit_entry(value, highest) for value, highest in nest.limits
                       if free_vars(value) <= relaxed.keys())
        bases, extents = self._read_region(
            child, self._readers_inside(child, parent, parent_body, relaxed))
        attrs = child.tensor.op.attrs
        multiple = attrs.get(REGION_MULTIPLE, 1)
        axis, multiple = multiple if isinstance(multiple, tuple) else (-1, int(multiple))
        if extents and multiple > 1:  # whole rows of a flat axis: no partial last row
            extents[axis] = min(-(-extents[axis] // multiple) * multiple,
                                int(child.tensor.shape[axis]))
        # elements past the region that a vector read may load (its lanes past the
        # region dropped): allocated, never computed
        slack = int(attrs.get(READ_SLACK, 0))
        shape = (*extents[:-1], extents[-1] + slack) if extents else ()
        buffer = tx.Buffer(child.name, shape, child.tensor.dtype, child.scope)
        self.realized[id(child.tensor)] = _Realization(buffer, tuple(bases))
        stmt = self._emit_stage(child, list(zip(bases, extents)), attached=True)
        return buffer, stmt

    def _read_region(self, stage: Stage, reads: list[tuple[tx.Expr, dict[tx.Var, int]]]
                     ) -> tuple[list[tx.Expr], list[int]]:
        """(bases, extents) of the region of ``stage``'s tensor that the bodies of
        ``reads`` read together, each while its ``relaxed`` variables range over
        ``[0, extent)``."""
        loads = [(load, relaxed) for body, relaxed in reads
                 for load in collect(body, lambda n: isinstance(n, TensorLoad))
                 if load.tensor is stage.tensor]
        bases, extents = [], []
        for dim, shape in enumerate(stage.tensor.shape):
            # each distinct index once per reader: the reads of one tensor mostly share an
            # index in most dimensions (a Winograd transform's select chain reads its
            # input at a² points of one tile)
            indices = {(structural_key(load.indices[dim]), id(relaxed)):
                       (load.indices[dim], relaxed) for load, relaxed in loads}
            base, extent = self._region(
                [symbolic_bounds(index, relaxed) for index, relaxed in indices.values()],
                shape)
            bases.append(base)
            extents.append(extent)
        return bases, extents

    def _readers_inside(self, stage: Stage, parent: Stage, parent_body: tx.Expr,
                        relaxed: dict[tx.Var, int]) -> list[tuple[tx.Expr, dict[tx.Var, int]]]:
        """The bodies of ``stage``'s readers as they run inside one iteration of
        ``parent``'s loop, each with the variables it ranges over there: ``parent``'s
        own body, or a reader computed inside the loop as :meth:`_body_inside` finds it.
        The region ``stage`` is computed over is the union of what these read."""
        return [(parent_body, relaxed) if reader is parent
                else self._body_inside(reader, parent, parent_body, relaxed)
                for reader in self.readers_of[id(stage)]]

    def _body_inside(self, stage: Stage, parent: Stage, parent_body: tx.Expr,
                     relaxed: dict[tx.Var, int]) -> tuple[tx.Expr, dict[tx.Var, int]]:
        """``stage``'s body as it runs inside one iteration of ``parent``'s loop (whose
        inner loop variables ``relaxed`` ranges over; ``parent_body``: the parent's body
        in its loop variables), with what else it ranges over: each axis its region
        there (the union of its readers' reads, each reader other than ``parent`` itself
        found so) as base + a variable over the region's extent, each reduction axis its
        own range."""
        reads = self._readers_inside(stage, parent, parent_body, relaxed)
        bases, extents = self._read_region(stage, reads)
        ranges, mapping = {}, {}
        for _, read_ranges in reads:
            ranges.update(read_ranges)
        for iv, base, extent in zip(stage.axis, bases, extents):
            offset = tx.Var(f"{iv.var.name}.inside", iv.var.dtype)
            mapping[iv.var], ranges[offset] = base + offset, extent
        for iv in stage.reduce_axis:
            offset = tx.Var(f"{iv.var.name}.inside", iv.var.dtype)
            mapping[iv.var], ranges[offset] = iv.min + offset, iv.extent
        return substitute(self.bodies[id(stage.tensor)], mapping), ranges

    def _region(self, bounds: list, shape: int) -> tuple[tx.Expr, int]:
        """(base, extent) of the union of per-access bounds, clipped to the tensor."""
        if not bounds or any(b is None for b in bounds):
            return tx.IntImm(0), shape
        low, high = bounds[0]
        for other_low, other_high in bounds[1:]:
            low, high = tx.minimum(low, other_low), tx.maximum(high, other_high)
        low = simplify(low, self.ranges)
        extent_expr = simplify(high - low + 1, self.ranges)
        if isinstance(extent_expr, tx.IntImm):
            extent = extent_expr.value
        else:
            upper = const_bound(extent_expr, self.ranges).hi
            extent = int(upper) if math.isfinite(upper) else shape
        if extent >= shape:
            return tx.IntImm(0), shape
        return low, max(extent, 1)


def _inside_tensorized(stage: Stage, iv: IterVar) -> bool:
    """Whether ``iv`` is one of the loops a tensorize of ``stage`` replaces (at or inside
    its tensorize point)."""
    if not stage.tensorized:
        return False
    leafs = stage.leaf_iter_vars
    return iv in leafs and any(leafs.index(point) <= leafs.index(iv)
                               for point in stage.tensorized if point in leafs)


def lower(schedule: Schedule, args: list[Tensor], name: str = "main",
          optimize: bool = True) -> PrimFunc:
    """The PrimFunc computing ``schedule``; its parameters are the buffers of ``args``
    (placeholders and outputs, in that order of the call). ``optimize`` runs the TIR
    pipeline (guard removal, flatten, unroll, vectorize)."""
    lowerer = _Lowerer(schedule, list(args), simplified_after=optimize)
    func = PrimFunc(name, tuple(lowerer.params), lowerer.run())
    return lower_pipeline(func) if optimize else func
