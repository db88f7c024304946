"""TIR passes: flatten buffers to one dimension, remove provably-true guards, unroll and
vectorize loops, and the default pipeline that chains them before code generation."""

from __future__ import annotations

import dataclasses
import math

from ..errors import CompileError
from .expr import (
    INDEX_DTYPE,
    Binary,
    Broadcast,
    BufferLoad,
    Call,
    Cast,
    Expr,
    FloatImm,
    IntImm,
    Not,
    Ramp,
    Select,
    Var,
    is_int,
    lanes_of,
    maximum,
    minimum,
    with_lanes,
)
from .functor import ExprFunctor, StmtFunctor
from .simplify import (
    Interval,
    LinearForm,
    const_bound,
    from_linear_form,
    linear_form,
    loop_range,
    loop_ranges,
    simplify,
    simplify_stmt,
)
from .stmt import (
    Allocate,
    BufferStore,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    SeqStmt,
    Stmt,
    seq,
)
from .visitor import Mutator, StmtMutator, collect_statements, substitute, substitute_each

#: widest vector the vectorizer forms; wider vectorized loops stay scalar loops.
MAX_VECTOR_LANES = 64


def _row_major_offset(buffer, indices: tuple[Expr, ...]) -> Expr:
    if len(indices) != len(buffer.shape):
        raise CompileError(
            f"buffer {buffer.name!r} of shape {buffer.shape} accessed with {len(indices)} "
            "indices; give one index per dimension")
    offset: Expr = IntImm(0)
    for index, dim in zip(indices, buffer.shape):
        if offset.dtype == index.dtype == INDEX_DTYPE:  # what the operators build, directly
            offset = Binary("add", Binary("mul", offset, IntImm(int(dim))), index)
        else:  # another dtype or a vector index: promoted or broadcast
            offset = offset * dim + index
    return offset


class _Flattener(Mutator):
    def visit_BufferLoad(self, node: BufferLoad) -> Expr:
        node = self.generic(node)
        return BufferLoad(node.buffer, (_row_major_offset(node.buffer, node.indices),),
                          node.predicate)

    def visit_BufferStore(self, node: BufferStore) -> Stmt:
        node = self.generic(node)
        offset = _row_major_offset(node.buffer, node.indices)
        return BufferStore(node.buffer, node.value, (offset,))


def flatten_buffers(func: PrimFunc) -> PrimFunc:
    """Every multi-dimensional buffer access rewritten to one row-major index (buffers
    keep their logical shape, which codegen and the calling convention check)."""
    return _Flattener().func(func)


_NEGATED_COMPARE = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "ne": "eq"}


def _as_nonnegative_facts(condition: Expr) -> list[Expr]:
    """Integer comparisons implied by ``condition``, each as ``g`` with ``g >= 0``."""
    if isinstance(condition, Binary) and condition.op == "and":
        return _as_nonnegative_facts(condition.a) + _as_nonnegative_facts(condition.b)
    if isinstance(condition, Not):
        return _negated_facts(condition.a)
    if not isinstance(condition, Binary) or lanes_of(condition.a.dtype) > 1:
        return []
    if condition.op not in ("lt", "le", "gt", "ge", "eq") or not is_int(condition.a.dtype):
        return []
    a, b = condition.a, condition.b
    facts = {"lt": [b - a - 1], "le": [b - a], "gt": [a - b - 1], "ge": [a - b],
             "eq": [a - b, b - a]}
    return facts[condition.op]


def _negated_facts(condition: Expr) -> list[Expr]:
    """Facts (as in :func:`_as_nonnegative_facts`) implied by ``condition`` being false."""
    if isinstance(condition, Binary) and condition.op == "or":
        return _negated_facts(condition.a) + _negated_facts(condition.b)
    if isinstance(condition, Not):
        return _as_nonnegative_facts(condition.a)
    if isinstance(condition, Binary) and condition.op in _NEGATED_COMPARE:
        return _as_nonnegative_facts(Binary(_NEGATED_COMPARE[condition.op], condition.a,
                                            condition.b))
    return []


class _LoadBoundsGuard(Mutator):
    """Clamps each load index that the loop ranges and the enclosing guards do not prove
    inside its buffer, so no kernel ever reads out of bounds.

    A sub-expression shared by several parents is rewritten once: once for good when
    its rewriting never consulted the facts of enclosing guards and selects (the usual
    case: its loads are in bounds by the loop ranges alone), else once per set of facts."""

    def __init__(self):
        self.ranges: dict[Var, Interval] = {}
        self.facts: list[Expr] = []
        #: rewrites that hold under any facts, by id; and the others, by id and facts
        self._any_facts: dict[int, tuple[Expr, Expr]] = {}
        self._these_facts: dict[tuple[int, int], tuple[Expr, list, Expr]] = {}
        self._fact_uses = 0  # decisions that depended on the facts, so far

    def expr(self, node: Expr) -> Expr:
        hit = self._any_facts.get(id(node))
        if hit is not None:
            return hit[1]
        hit = self._these_facts.get((id(node), id(self.facts)))
        if hit is not None:
            self._fact_uses += 1  # the reader depends on these facts too
            return hit[2]
        uses = self._fact_uses
        result = self.dispatch(node)
        if self._fact_uses == uses:
            self._any_facts[id(node)] = (node, result)
        else:
            self._these_facts[(id(node), id(self.facts))] = (node, self.facts, result)
        return result

    def _nonnegative(self, expr: Expr) -> bool:
        # the expression's bounds as it is first (most loads are proven so, without
        # simplifying), then those of its simplified form (terms that cancel)
        if const_bound(expr, self.ranges).lo >= 0 \
                or const_bound(simplify(expr, self.ranges), self.ranges).lo >= 0:
            return True
        self._fact_uses += 1  # decided by the facts (other facts may decide otherwise)
        # the innermost facts first: a load under a chain of selects (a concatenation of
        # many inputs) is bounded by the conditions of the selects nearest it, so the
        # search stops after one or two facts instead of trying every enclosing one
        return any(const_bound(simplify(expr - fact, self.ranges), self.ranges).lo >= 0
                   for fact in reversed(self.facts))

    def visit_For(self, node: For) -> Stmt:
        bound = loop_range(node)
        if bound is not None:
            self.ranges[node.var] = bound
        self._any_facts, self._these_facts = {}, {}  # rewrites under other ranges
        try:
            return self.generic(node)
        finally:
            self._any_facts, self._these_facts = {}, {}

    def _under(self, facts: list[Expr], build):
        saved = self.facts
        self.facts = saved + facts if facts else saved
        try:
            return build()
        finally:
            self.facts = saved

    def visit_IfThenElse(self, node: IfThenElse) -> Stmt:
        condition = self.expr(node.condition)
        then_case = self._under(_as_nonnegative_facts(condition),
                                lambda: self.stmt(node.then_case))
        else_case = None if node.else_case is None else self._under(
            _negated_facts(condition), lambda: self.stmt(node.else_case))
        return dataclasses.replace(node, condition=condition, then_case=then_case,
                                   else_case=else_case)

    def visit_Select(self, node: Select) -> Expr:
        condition = self.expr(node.condition)
        true_value = self._under(_as_nonnegative_facts(condition),
                                 lambda: self.expr(node.true_value))
        false_value = self._under(_negated_facts(condition), lambda: self.expr(node.false_value))
        return Select(condition, true_value, false_value)

    def visit_BufferLoad(self, node: BufferLoad) -> Expr:
        node = self.generic(node)
        indices = []
        for index, dim in zip(node.indices, node.buffer.shape):
            if not (self._nonnegative(index) and self._nonnegative(IntImm(dim - 1) - index)):
                index = maximum(minimum(index, dim - 1), 0)
            indices.append(index)
        return BufferLoad(node.buffer, tuple(indices), node.predicate)


def guard_load_bounds(func: PrimFunc) -> PrimFunc:
    """Every load index not provably inside its buffer (from loop ranges and enclosing
    guards and selects) clamped into it; run on multi-dimensional indices (before
    :func:`flatten_buffers`). Lowered schedules are in bounds by construction, so this
    only changes computes whose own index expressions may leave the tensor."""
    return _LoadBoundsGuard().func(func)


def remove_true_guards(func: PrimFunc) -> PrimFunc:
    """Guards the loop ranges prove true removed, and expressions simplified."""
    return dataclasses.replace(func, body=simplify_stmt(func.body))


def _upper_conjuncts(condition: Expr) -> list[tuple[Expr, bool]]:
    """Conjuncts of ``condition`` as ``(d, strict)``: ``d < 0`` (strict) or ``d <= 0``."""
    if isinstance(condition, Binary) and condition.op == "and":
        return _upper_conjuncts(condition.a) + _upper_conjuncts(condition.b)
    if not isinstance(condition, Binary) or not is_int(condition.a.dtype):
        return []
    if lanes_of(condition.a.dtype) > 1:
        return []
    a, b = condition.a, condition.b
    forms = {"lt": (a - b, True), "le": (a - b, False), "gt": (b - a, True),
             "ge": (b - a, False)}
    return [forms[condition.op]] if condition.op in forms else []


def _divided_by(atom: Expr, var: Var) -> int | None:
    """``c`` where ``atom`` is ``var // c`` (a positive constant; 1 for ``var`` itself),
    else None: the atoms a guard grows with monotonically in ``var``."""
    if atom is var:
        return 1
    if (isinstance(atom, Binary) and atom.op == "floordiv" and atom.a is var
            and isinstance(atom.b, IntImm) and atom.b.value > 0):
        return atom.b.value
    return None


class _LoopPartitioner(StmtMutator):
    def __init__(self):
        self.ranges: dict[Var, Interval] = {}
        #: the ranges of the loops around the statement being visited
        self._around: dict[Var, Interval] = {}
        self._splitting = 0  # loops being split around the statement being visited

    def _threshold(self, loop: For, guards: list[IfThenElse],
                   ranges: dict[Var, Interval]) -> int | None:
        """First value of the loop variable from which some of the likely ``guards``
        inside may fail (every guard holds for all inner iterations below it)."""
        threshold = None
        for guard in guards:
            for difference, strict in _upper_conjuncts(guard.condition):
                form = linear_form(simplify(difference))
                # the guard grows with v itself or with v // c (a fused loop's outer index:
                # a tile that does not divide its loop, under a fused parallel loop)
                key, step = next(((k, _divided_by(atom, loop.var))
                                  for k, (_, atom) in form.terms.items()
                                  if _divided_by(atom, loop.var)), (None, None))
                if key is None or form.terms[key][0] <= 0:
                    continue
                coeff = form.terms[key][0]
                rest = dict(form.terms)
                del rest[key]
                rest_hi = const_bound(from_linear_form(
                    LinearForm(rest, form.constant), loop.var.dtype), ranges).hi
                if not math.isfinite(rest_hi):
                    continue
                # coeff * (v // step) + rest_hi < 0 (or <= 0) for every v below the
                # threshold (step 1: v itself).
                limit = -rest_hi - 1 if strict else -rest_hi
                first_failing = (int(limit // coeff) + 1) * step
                threshold = first_failing if threshold is None else min(threshold, first_failing)
        return threshold

    def visit_For(self, node: For) -> Stmt:
        if not (isinstance(node.min, IntImm) and isinstance(node.extent, IntImm)):
            return self.generic(node)
        start, end = node.min.value, node.min.value + node.extent.value
        self.ranges[node.var] = Interval(start, end - 1)
        guards = collect_statements(node.body,
                                    lambda n: isinstance(n, IfThenElse) and n.likely)
        if not guards:  # nothing to split at, here or in the loops inside
            return node
        split = self._threshold(node, guards, {**self.ranges, **loop_ranges(node.body)})
        if split is None or not start < split < end:
            self._around[node.var] = Interval(start, end - 1)
            try:
                return self.generic(node)
            finally:
                del self._around[node.var]
        self._splitting += 1
        try:
            if node.kind is ForKind.PARALLEL:
                result = self._partition_inside(node, start, split, end)
            else:
                parts = []
                for low, high in ((start, split), (split, end)):
                    self.ranges[node.var] = Interval(low, high - 1)
                    parts.append(dataclasses.replace(
                        node, min=IntImm(low), extent=IntImm(high - low),
                        body=self.stmt(node.body)))
                result = seq(parts)
        finally:
            self._splitting -= 1
        if self._splitting:
            return result  # simplified with the split around it
        # the parts simplified under their narrower ranges (the rest of the function is
        # as the last simplification left it)
        return simplify_stmt(result, self._around)

    def _partition_inside(self, node: For, start: int, split: int, end: int) -> Stmt:
        """A parallel loop stays one loop, its body split at ``split`` by a branch on
        the loop variable: the tail's iterations (a short last column panel) run on the
        thread pool beside the others, not serially after them all. Each branch reads
        the variable clamped into its part, so that its guards resolve as in a loop
        over that part alone."""
        bodies = []
        for low, high in ((start, split), (split, end)):
            self.ranges[node.var] = Interval(low, high - 1)
            clamped = minimum(node.var, IntImm(high - 1, node.var.dtype)) if low == start \
                else maximum(node.var, IntImm(low, node.var.dtype))
            bodies.append(self.stmt(substitute(node.body, {node.var: clamped})))
        self.ranges[node.var] = Interval(start, end - 1)
        branch = IfThenElse(Binary("lt", node.var, IntImm(split, node.var.dtype)), *bodies)
        return dataclasses.replace(node, body=branch)


def partition_loops(func: PrimFunc) -> PrimFunc:
    """Loops whose iterations make a likely guard (a split tail, a region clip) fail only
    from some point on are split there: the main part runs without the guard (removed by
    :func:`remove_true_guards`, so it can be vectorized), the tail keeps it. Where no
    loop is split the function is returned as it is; the parts of a split loop are
    simplified under their narrower ranges, the rest is left as the last simplification
    left it (in :func:`lower_pipeline`)."""
    body = _LoopPartitioner().stmt(func.body)
    if body is func.body:
        return func
    return dataclasses.replace(func, body=body)


class _BufferRenamer(Mutator):
    """Gives every buffer allocated inside a statement a fresh identity (one per copy)."""

    def __init__(self, suffix: str):
        self.suffix = suffix
        self.renamed: dict = {}

    def visit_Allocate(self, node: Allocate) -> Stmt:
        old = node.buffer
        self.renamed[old] = dataclasses.replace(old, name=old.name + self.suffix)
        return Allocate(self.renamed[old], self.stmt(node.body))

    def visit_BufferLoad(self, node: BufferLoad) -> Expr:
        node = self.generic(node)
        new = self.renamed.get(node.buffer)
        return node if new is None else dataclasses.replace(node, buffer=new)

    def visit_BufferStore(self, node: BufferStore) -> Stmt:
        node = self.generic(node)
        new = self.renamed.get(node.buffer)
        return node if new is None else dataclasses.replace(node, buffer=new)


class _VirtualThreadInjector(StmtMutator):
    def visit_For(self, node: For) -> Stmt:
        node = self.generic(node)
        if node.kind is not ForKind.THREAD_BINDING or node.thread_tag != "vthread":
            return node
        if not (isinstance(node.min, IntImm) and isinstance(node.extent, IntImm)):
            raise CompileError(f"virtual thread loop {node.var.name!r} needs constant bounds")
        bodies = substitute_each(node.body, node.var, [IntImm(node.min.value + k)
                                                       for k in range(node.extent.value)])
        return seq([_BufferRenamer(f".vt{k}").stmt(body) for k, body in enumerate(bodies)])


def inject_virtual_threads(func: PrimFunc) -> PrimFunc:
    """Loops bound to ``vthread`` replaced by one copy of their body per virtual thread,
    each with its own copies of the buffers allocated inside, so the copies share no
    scratch memory and a decoupled access-execute target can overlap them."""
    return _VirtualThreadInjector().func(func)


class _Unroller(StmtMutator):
    def visit_For(self, node: For) -> Stmt:
        node = self.generic(node)
        if node.kind is not ForKind.UNROLLED:
            return node
        if not (isinstance(node.min, IntImm) and isinstance(node.extent, IntImm)):
            return dataclasses.replace(node, kind=ForKind.SERIAL)
        return seq(substitute_each(node.body, node.var, [IntImm(node.min.value + k)
                                                         for k in range(node.extent.value)]))


def unroll_loops(func: PrimFunc) -> PrimFunc:
    """Unrolled loops with constant bounds replaced by copies of their body."""
    return _Unroller().func(func)


class _NotVectorizable(Exception):
    """The loop body has a form the vectorizer does not turn into vector operations."""


def _broadcast(expr: Expr, lanes: int) -> Expr:
    return expr if lanes_of(expr.dtype) == lanes else Broadcast(expr, lanes)


def _in_bounds(load: BufferLoad, ranges: dict[Var, Interval]) -> bool:
    """Whether every lane of flattened ``load`` reads inside its buffer for all values
    of the variables in ``ranges``."""
    (index,) = load.indices
    if isinstance(index, Broadcast):
        ends = [index.value]
    elif isinstance(index, Ramp) and isinstance(index.stride, IntImm):
        ends = [index.base, index.base + index.stride.value * (index.lanes - 1)]
    elif lanes_of(index.dtype) == 1:
        ends = [index]
    else:
        return False
    for end in ends:
        bound = const_bound(simplify(end, ranges), ranges)
        if not (bound.lo >= 0 and bound.hi <= load.buffer.size - 1):
            return False
    return True


class _PredicateLoads(Mutator):
    def __init__(self, predicate: Expr, ranges: dict[Var, Interval]):
        self.predicate, self.ranges = predicate, ranges

    def visit_BufferLoad(self, node: BufferLoad) -> Expr:
        node = self.generic(node)
        if _in_bounds(node, self.ranges):
            return node  # any lane may be read: the select discards the unchosen ones
        if lanes_of(node.dtype) == 1:
            raise _NotVectorizable("scalar load under a vector condition")
        predicate = self.predicate if node.predicate is None else Binary(
            "and", node.predicate, self.predicate)
        return BufferLoad(node.buffer, node.indices, predicate)


def _predicate_loads(expr: Expr, predicate: Expr, ranges: dict[Var, Interval]) -> Expr:
    """``expr`` with every load that might read outside its buffer reading only the
    lanes where ``predicate`` holds."""
    return _PredicateLoads(predicate, ranges).expr(expr)


class _LoopVectorizer(ExprFunctor, StmtFunctor):
    """Rewrites the body of ``for var in vectorized(min, lanes)`` into vector operations
    (each distinct node of the body's expressions once); ``ranges`` bounds the variables
    of the loops around it, None where they are not final yet (the loops around are
    still to be unrolled): a vector select, whose loads are predicated by what the
    ranges prove, is then not vectorized."""

    def __init__(self, var: Var, start: Expr, lanes: int,
                 ranges: dict[Var, Interval] | None = None):
        self.var, self.lanes = var, lanes
        self.ramp = Ramp(start, IntImm(1, var.dtype), lanes)
        self.ranges = None if ranges is None else dict(ranges)
        self._memo: dict[int, tuple[Expr, Expr]] = {}

    def expr(self, node: Expr) -> Expr:
        hit = self._memo.get(id(node))
        if hit is None:
            hit = self._memo[id(node)] = (node, self.dispatch(node))
        return hit[1]

    def visit_default(self, node, *args):
        raise _NotVectorizable(type(node).__name__)

    def visit_Var(self, node: Var) -> Expr:
        return self.ramp if node is self.var else node

    def visit_IntImm(self, node: IntImm | FloatImm) -> Expr:
        return node

    visit_FloatImm = visit_IntImm

    def visit_Not(self, node: Not) -> Expr:
        return Not(self.expr(node.a))

    def visit_Cast(self, node: Cast) -> Expr:
        value = self.expr(node.value)
        return Cast(with_lanes(node.dtype, lanes_of(value.dtype)), value)

    def visit_Call(self, node: Call) -> Expr:
        args = [self.expr(a) for a in node.args]
        if all(lanes_of(a.dtype) == 1 for a in args):
            return node
        return Call(node.name, tuple(_broadcast(a, self.lanes) for a in args),
                    with_lanes(node.dtype, self.lanes))

    def visit_BufferLoad(self, node: BufferLoad) -> Expr:
        (index,) = node.indices
        vindex = self.expr(index)
        return node if vindex is index else BufferLoad(node.buffer, (vindex,), node.predicate)

    def visit_Binary(self, node: Binary) -> Expr:
        a, b = self.expr(node.a), self.expr(node.b)
        if lanes_of(a.dtype) == 1 and lanes_of(b.dtype) == 1:
            return node if (a is node.a and b is node.b) else Binary(node.op, a, b)
        ramp_a, ramp_b = isinstance(a, Ramp), isinstance(b, Ramp)
        scalar_a, scalar_b = lanes_of(a.dtype) == 1, lanes_of(b.dtype) == 1
        if node.op in ("add", "sub"):
            if ramp_a and scalar_b:
                return Ramp(Binary(node.op, a.base, b), a.stride, a.lanes)
            if scalar_a and ramp_b:
                stride = b.stride if node.op == "add" else Binary("sub", IntImm(0), b.stride)
                return Ramp(Binary(node.op, a, b.base), stride, b.lanes)
            if ramp_a and ramp_b:
                return Ramp(Binary(node.op, a.base, b.base),
                            Binary(node.op, a.stride, b.stride), a.lanes)
        if node.op == "mul":
            if ramp_a and scalar_b:
                return Ramp(Binary("mul", a.base, b), Binary("mul", a.stride, b), a.lanes)
            if scalar_a and ramp_b:
                return Ramp(Binary("mul", a, b.base), Binary("mul", a, b.stride), b.lanes)
        return Binary(node.op, _broadcast(a, self.lanes), _broadcast(b, self.lanes))

    def visit_Select(self, node: Select) -> Expr:
        condition = self.expr(node.condition)
        true_value, false_value = self.expr(node.true_value), self.expr(node.false_value)
        if all(lanes_of(e.dtype) == 1 for e in (condition, true_value, false_value)):
            return node
        if lanes_of(condition.dtype) > 1:
            if self.ranges is None:
                raise _NotVectorizable("vector select before the ranges are final")
            # A vector select evaluates both sides in every lane: each side's loads only
            # read the lanes where that side is chosen.
            true_value = _predicate_loads(true_value, condition, self.ranges)
            false_value = _predicate_loads(false_value, Not(condition), self.ranges)
        return Select(condition, _broadcast(true_value, self.lanes),
                      _broadcast(false_value, self.lanes))

    def visit_BufferStore(self, node: BufferStore) -> Stmt:
        (index,) = node.indices
        vindex = self.expr(index)
        if lanes_of(vindex.dtype) == 1:
            raise _NotVectorizable("store index does not depend on the vectorized loop")
        value = _broadcast(self.expr(node.value), self.lanes)
        return BufferStore(node.buffer, value, (vindex,))

    def visit_SeqStmt(self, node: SeqStmt) -> Stmt:
        return SeqStmt(tuple(self.stmt(s) for s in node.stmts))

    def visit_IfThenElse(self, node: IfThenElse) -> Stmt:
        if lanes_of(self.expr(node.condition).dtype) > 1:
            raise _NotVectorizable("guard depends on the vectorized loop")
        else_case = self.stmt(node.else_case) if node.else_case is not None else None
        return dataclasses.replace(node, then_case=self.stmt(node.then_case),
                                   else_case=else_case)


class _Vectorizer(StmtMutator):
    """Vectorizes the vectorized loops; ``before_unrolling``: only those whose
    vectorization does not depend on the unrolled loops around them (their bodies
    hold no unrolled loop and no vector select), the others left for after."""

    def __init__(self, before_unrolling: bool = False):
        self.ranges: dict[Var, Interval] = {}
        self.before_unrolling = before_unrolling

    def visit_For(self, node: For) -> Stmt:
        bound = loop_range(node)
        if bound is not None:
            self.ranges[node.var] = bound
        node = self.generic(node)
        self.ranges.pop(node.var, None)
        if node.kind is not ForKind.VECTORIZED:
            return node
        lanes = node.extent.value if isinstance(node.extent, IntImm) else 0
        if 1 < lanes <= MAX_VECTOR_LANES:
            ranges = None if self.before_unrolling else self.ranges
            try:
                return _LoopVectorizer(node.var, node.min, lanes, ranges).stmt(node.body)
            except _NotVectorizable:
                pass
        if self.before_unrolling:
            return node  # tried again after unrolling
        # Left to LLVM's loop vectorizer, which may still vectorize it with checks.
        return dataclasses.replace(node, kind=ForKind.SERIAL)


def vectorize_loops(func: PrimFunc) -> PrimFunc:
    """Vectorized loops rewritten into vector loads, stores and arithmetic (ramps and
    broadcasts; loads under a vector select become predicated loads); a loop whose body
    cannot be (inner loops, guards or reductions along the vectorized axis) becomes a
    serial loop."""
    return _Vectorizer().func(func)


def lower_pipeline(func: PrimFunc) -> PrimFunc:
    """The default TIR pipeline between ``te.lower`` and code generation."""
    func = partition_loops(remove_true_guards(inject_virtual_threads(func)))
    func = guard_load_bounds(func)
    # flattened indices simplified once in the loop body, before unrolling copies it:
    # the copies then share what does not use the unrolled variables, kept as it is by
    # the simplification after (the same code, for less work than simplifying every
    # copy's flattened index from scratch)
    func = remove_true_guards(flatten_buffers(func))
    # Vectorized loops inside unrolled ones (a register tile's rows) are vectorized once,
    # before unrolling copies them: the vectorizer's rewriting is structural, the same
    # on each copy (one whose result would depend on the copy is left for after).
    unrolled = unroll_loops(_Vectorizer(before_unrolling=True).func(func))
    if unrolled is not func:  # else it is as the simplification above left it
        func = remove_true_guards(unrolled)
    if collect_statements(func.body, lambda n: isinstance(n, For)
                          and n.kind is ForKind.VECTORIZED):
        func = remove_true_guards(vectorize_loops(func))
    return func

