"""Arithmetic simplification and interval analysis of TIR.

Integer expressions are canonicalized as linear combinations of atoms (so
``(i*32 + j) - i*32`` becomes ``j``); floordiv/floormod by a constant and min/max
and comparisons are resolved with value ranges of the loop variables; guards that
the ranges prove true are removed by :func:`simplify_stmt`.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import weakref
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .expr import (
    COMPARE_OPS,
    Binary,
    Broadcast,
    BufferLoad,
    Cast,
    Expr,
    FloatImm,
    IntImm,
    Not,
    Ramp,
    Select,
    Var,
    is_bool,
    is_float,
    is_int,
    lanes_of,
    scalar_dtype,
)
from .functor import ExprFunctor
from .stmt import For, IfThenElse, SeqStmt, Stmt, seq
from .visitor import Mutator, collect_statements, field_names


@dataclass(frozen=True)
class Interval:
    """Inclusive integer bounds; ``-inf``/``inf`` where unknown."""

    lo: float
    hi: float

    @staticmethod
    def point(value: int) -> Interval:
        return Interval(value, value)

    @property
    def is_bounded(self) -> bool:
        return math.isfinite(self.lo) and math.isfinite(self.hi)


UNBOUNDED = Interval(-math.inf, math.inf)
Ranges = Mapping[Var, Interval]


def loop_range(loop: For) -> Interval | None:
    """The values ``loop``'s variable takes; None unless its bounds are constants."""
    if isinstance(loop.min, IntImm) and isinstance(loop.extent, IntImm):
        return Interval(loop.min.value, loop.min.value + loop.extent.value - 1)
    return None


def loop_ranges(stmt: Stmt) -> dict[Var, Interval]:
    """The range of every loop variable under ``stmt`` whose loop has constant bounds."""
    ranges = {}
    for loop in collect_statements(stmt, lambda n: isinstance(n, For)):
        bound = loop_range(loop)
        if bound is not None:
            ranges[loop.var] = bound
    return ranges


def _mul_bounds(a: Interval, b: Interval) -> Interval:
    products = []
    for x in (a.lo, a.hi):
        for y in (b.lo, b.hi):
            products.append(0 if x == 0 or y == 0 else x * y)
    return Interval(min(products), max(products))


def const_bound(expr: Expr, ranges: Ranges) -> Interval:
    """Bounds of integer ``expr`` given bounds of its variables (unbounded where unknown);
    a sub-expression shared by several parents is bounded once."""
    if isinstance(expr, IntImm):
        return Interval.point(expr.value)
    if isinstance(expr, Var):
        return ranges.get(expr, UNBOUNDED)
    return IntervalAnalysis(ranges).expr(expr)


class IntervalAnalysis(ExprFunctor):
    """Interval analysis of integer expressions: a ``visit_<Class>`` rule per node class
    bounds a node from the bounds of its operands (:meth:`expr`: each distinct node
    bounded once, leaves by their value or by ``ranges``); a node of a class with no
    rule is unbounded (a bool: ``[0, 1]``).

    Public so that a layer above TIR can bound its own expressions: a subclass adds
    rules for node classes of its own (TE's tensor reads, by what the tensor holds:
    :mod:`heterocc.compute.value_range`) and may narrow :meth:`expr`'s result."""

    def __init__(self, ranges: Ranges):
        self.ranges = ranges
        self.memo: dict[int, tuple[Expr, Interval]] = {}

    def expr(self, node: Expr) -> Interval:
        """The bounds of ``node`` (each distinct node analysed once)."""
        if isinstance(node, IntImm):  # leaves need no memo
            return Interval.point(node.value)
        if isinstance(node, Var):
            return self.ranges.get(node, UNBOUNDED)
        hit = self.memo.get(id(node))
        if hit is None:
            hit = self.memo[id(node)] = (node, self.dispatch(node))
        return hit[1]

    def visit_default(self, node: Expr) -> Interval:
        return Interval(0, 1) if is_bool(node.dtype) else UNBOUNDED

    def visit_Cast(self, node: Cast) -> Interval:
        if not is_float(node.value.dtype) and not is_float(node.dtype):
            return self.expr(node.value)
        return self.visit_default(node)

    def visit_Select(self, node: Select) -> Interval:
        if is_bool(node.dtype):
            return Interval(0, 1)
        t, f = self.expr(node.true_value), self.expr(node.false_value)
        return Interval(min(t.lo, f.lo), max(t.hi, f.hi))

    def visit_Binary(self, node: Binary) -> Interval:
        if is_bool(node.dtype):
            return Interval(0, 1)
        a, b = self.expr(node.a), self.expr(node.b)
        op = node.op
        if op == "add":
            return Interval(a.lo + b.lo, a.hi + b.hi)
        if op == "sub":
            return Interval(a.lo - b.hi, a.hi - b.lo)
        if op == "mul":
            return _mul_bounds(a, b)
        if op == "min":
            return Interval(min(a.lo, b.lo), min(a.hi, b.hi))
        if op == "max":
            return Interval(max(a.lo, b.lo), max(a.hi, b.hi))
        if op in ("floordiv", "floormod") and b.lo == b.hi and b.lo > 0:
            c = int(b.lo)
            if op == "floormod":
                if a.is_bounded and a.lo // c == a.hi // c:
                    return Interval(a.lo % c, a.hi % c)
                return Interval(0, c - 1)
            lo = a.lo // c if math.isfinite(a.lo) else -math.inf
            hi = a.hi // c if math.isfinite(a.hi) else math.inf
            return Interval(lo, hi)
        return UNBOUNDED


# ----------------------------------------------------------------------------- linear forms


class _Shape:
    """An interned structural key: structurally equal expressions get the same object,
    so comparing and hashing keys costs O(1) however large the expressions are."""

    __slots__ = ("parts", "__weakref__")

    def __init__(self, parts: tuple):
        self.parts = parts

    def __repr__(self) -> str:
        return f"_Shape{self.parts!r}"


#: every live key, by its parts (children as their keys): an entry lasts as long as an
#: expression (or a larger key) holds its key
_SHAPES: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


class _Identity:
    """An unhashable attribute value keyed by identity (held, so its id stays its own)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __eq__(self, other) -> bool:
        return isinstance(other, _Identity) and other.value is self.value

    def __hash__(self) -> int:
        return id(self.value)


def _float_key(value: float) -> str:
    """A float as a key part: its exact bits (``-0.0`` and ``0.0`` compare equal, yet
    ``min(x, -0.0)`` and ``min(x, 0.0)`` differ for a zero ``x``; a NaN equals no NaN,
    yet every NaN constant computes the same)."""
    return float(value).hex()


def _key_part(value):
    if isinstance(value, Expr):
        return structural_key(value)
    if isinstance(value, tuple):
        return tuple(_key_part(v) for v in value)
    if isinstance(value, float):
        return ("float", _float_key(value))
    if isinstance(value, str | int | bool) or value is None:
        return value
    try:  # Vars, buffers, tensors, iteration axes: hashed (and compared) by identity
        hash(value)
    except TypeError:
        return _Identity(value)
    return value


def structural_key(expr: Expr) -> _Shape:
    """A hashable key equal for structurally equal expressions (vars by identity); keys
    are interned and cached on the expression, so computing the key of an expression
    costs time linear in its distinct nodes (shared sub-expressions count once)."""
    cached = expr.__dict__.get("_structural_key")
    if cached is not None:
        return cached
    if type(expr) is Binary:  # most nodes: what the general case builds, without its loop
        parts: tuple = ("Binary", expr.op, structural_key(expr.a), structural_key(expr.b))
    elif isinstance(expr, Var):
        parts = ("var", expr)
    elif isinstance(expr, FloatImm):
        parts = ("FloatImm", _float_key(expr.value), expr.dtype)
    elif isinstance(expr, IntImm):
        parts = ("IntImm", expr.value, expr.dtype)
    else:
        parts = (type(expr).__name__,) + tuple(
            _key_part(getattr(expr, name)) for name in field_names(expr))
    shape = _SHAPES.get(parts)
    if shape is None:
        shape = _SHAPES[parts] = _Shape(parts)
    object.__setattr__(expr, "_structural_key", shape)
    return shape


def structurally_equal(a: Expr, b: Expr) -> bool:
    """Whether ``a`` and ``b`` are the same tree of nodes, variables by identity."""
    return structural_key(a) == structural_key(b)


@dataclass
class LinearForm:
    """``sum(coeff * atom) + constant`` over integer atoms, atoms keyed structurally."""

    terms: dict  # key -> [coeff, atom]
    constant: int

    def scaled(self, factor: int) -> LinearForm:
        return LinearForm({k: [c * factor, a] for k, (c, a) in self.terms.items()},
                          self.constant * factor)

    def plus(self, other: LinearForm) -> LinearForm:
        # the terms' [coeff, atom] lists are shared between forms, never changed in place
        terms = dict(self.terms)
        for key, term in other.terms.items():
            mine = terms.get(key)
            terms[key] = term if mine is None else [mine[0] + term[0], mine[1]]
        return LinearForm({k: v for k, v in terms.items() if v[0] != 0},
                          self.constant + other.constant)


def linear_form(expr: Expr) -> LinearForm:
    """``expr`` (an integer scalar) as a linear combination of its non-linear atoms.

    The form of a sum, difference or product by a constant is kept on the node (forms
    are never changed in place), so a node's form costs the combination of its
    operands' forms: a chain of sums decomposes in time linear in its length, however
    often its prefixes are asked for (the simplifier asks for each one's as it
    rebuilds the chain bottom-up)."""
    if isinstance(expr, IntImm):
        return LinearForm({}, expr.value)
    if not isinstance(expr, Binary):
        return LinearForm({structural_key(expr): [1, expr]}, 0)
    form = expr.__dict__.get("_linear_form")
    if form is not None:
        return form
    op = expr.op
    if op == "add":
        form = linear_form(expr.a).plus(linear_form(expr.b))
    elif op == "sub":
        form = linear_form(expr.a).plus(linear_form(expr.b).scaled(-1))
    elif op == "mul" and isinstance(expr.b, IntImm):
        form = linear_form(expr.a).scaled(expr.b.value)
    elif op == "mul" and isinstance(expr.a, IntImm):
        form = linear_form(expr.b).scaled(expr.a.value)
    else:
        form = LinearForm({structural_key(expr): [1, expr]}, 0)
    object.__setattr__(expr, "_linear_form", form)
    return form


def merge_div_mod(form: LinearForm) -> LinearForm:
    """``form`` with every ``k*c*(x // c) + k*(x % c)`` pair replaced by ``k*x`` (what
    splitting a fused index and recombining it produces)."""
    changed = True
    while changed:
        changed = False
        for key, (coeff, atom) in form.terms.items():
            if not (isinstance(atom, Binary) and atom.op == "floormod"
                    and isinstance(atom.b, IntImm)):
                continue
            quotient_key = structural_key(Binary("floordiv", atom.a, atom.b))
            partner = form.terms.get(quotient_key)
            if partner is None or partner[0] != coeff * atom.b.value:
                continue
            rest = {k: v for k, v in form.terms.items() if k not in (key, quotient_key)}
            form = LinearForm(rest, form.constant).plus(linear_form(atom.a).scaled(coeff))
            changed = True
            break
    return form


def _built_from(node: Binary, terms: dict, constant: int, dtype: str) -> Binary:
    """``node``, built by :func:`from_linear_form` of the form ``terms`` + ``constant``
    for ``dtype``, with that form kept on it: it is the form :func:`linear_form` finds
    in the node (its terms in the order built), and rebuilding the node from it gives
    the node again (the simplifier keeps such a node as it is)."""
    node.__dict__["_linear_form"] = LinearForm(terms, constant)  # frozen: not via setattr
    node.__dict__["_built_for"] = dtype
    return node


def built_from_its_form(node: Binary, dtype: str) -> bool:
    """Whether :func:`from_linear_form` built ``node`` for ``dtype`` from the form kept on
    it (so that building it again from that form gives an equal node)."""
    return node.__dict__.get("_built_for") == dtype


def from_linear_form(form: LinearForm, dtype: str) -> Expr:
    """The expression of ``form``: positive terms first, constant last. Each sum and
    product built keeps its form (see :func:`_built_from`), unless a coefficient is
    zero (which linear_form would drop from a sum)."""
    result: Expr | None = None
    ordered = list(form.terms.items())
    keep = True
    for _, (coeff, _) in ordered:
        if coeff <= 0:  # rare: a negative term (after the positive ones) or a zero one
            ordered.sort(key=lambda item: item[1][0] < 0)
            keep = all(coeff for _, (coeff, _) in ordered)
            break
    terms: dict = {}
    for key, (coeff, atom) in ordered:
        factor = coeff if result is None or coeff > 0 else -coeff
        term = atom if factor == 1 else Binary("mul", atom, IntImm(factor, dtype))
        if term is not atom and keep:
            _built_from(term, {key: [factor, atom]}, 0, dtype)
        terms[key] = [coeff, atom]
        if result is None:
            result = term
            continue
        result = Binary("add" if coeff > 0 else "sub", result, term)
        if keep:
            _built_from(result, dict(terms), 0, dtype)
    if result is None:
        return IntImm(form.constant, dtype)
    if form.constant:
        result = Binary("add" if form.constant > 0 else "sub", result,
                        IntImm(abs(form.constant), dtype))
        if keep:
            _built_from(result, terms, form.constant, dtype)
    return result


def _form_bound(form: LinearForm, ranges: Ranges) -> Interval:
    lo = hi = form.constant
    for coeff, atom in form.terms.values():
        b = _mul_bounds(const_bound(atom, ranges), Interval.point(coeff))
        lo, hi = lo + b.lo, hi + b.hi
    return Interval(lo, hi)


# ----------------------------------------------------------------------------- folding


def _np_scalar(imm: IntImm | FloatImm):
    return np.array(imm.value).astype(scalar_dtype(imm.dtype) if not is_bool(imm.dtype) else bool)


def _imm(value, dtype: str) -> Expr:
    if is_float(dtype):
        return FloatImm(float(value), dtype)
    return IntImm(int(value), dtype)


_NP_ARITH = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "floordiv": np.floor_divide, "floormod": np.mod, "min": np.minimum, "max": np.maximum,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "eq": np.equal, "ne": np.not_equal, "and": np.logical_and, "or": np.logical_or,
    "truncdiv": lambda a, b: np.trunc(np.divide(a, b)).astype(a.dtype) if a.dtype.kind == "f"
    else np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b)),
    "truncmod": np.fmod, "bitand": np.bitwise_and, "bitor": np.bitwise_or,
    "bitxor": np.bitwise_xor, "shl": np.left_shift, "shr": np.right_shift,
}


#: integer operations folded with Python's integers (exact, then wrapped into the dtype
#: as NumPy wraps): index arithmetic, most of what is folded, without NumPy's per-call cost
_INT_FOLDS = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul,
    "floordiv": operator.floordiv, "floormod": operator.mod, "min": min, "max": max,
}
_INT_COMPARES = {
    "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
    "eq": operator.eq, "ne": operator.ne,
}
#: (lowest value, number of values) of the signed integer dtypes folded so
_INT_RANGES = {"int64": (-2 ** 63, 2 ** 64), "int32": (-2 ** 31, 2 ** 32)}


def _fold_integers(op: str, a: IntImm, b: IntImm) -> Expr | None:
    """``a op b`` of two signed integer immediates of one dtype, None for other operations
    (and for a division by zero, left unfolded)."""
    low, count = _INT_RANGES[a.dtype]
    x, y = a.value, b.value
    if not (low <= x < low + count and low <= y < low + count):
        return None
    compare = _INT_COMPARES.get(op)
    if compare is not None:
        return IntImm(int(compare(x, y)), "bool")
    fold = _INT_FOLDS.get(op)
    if fold is None or (y == 0 and op in ("floordiv", "floormod")):
        return None
    value = fold(x, y)
    if not low <= value < low + count:
        value = (value - low) % count + low
    return IntImm(value, a.dtype)


def _fold_constants(node: Binary) -> Expr | None:
    a, b = node.a, node.b
    if type(a) is IntImm and type(b) is IntImm and a.dtype == b.dtype \
            and a.dtype in _INT_RANGES:
        folded = _fold_integers(node.op, a, b)
        if folded is not None:
            return folded
    if not (isinstance(a, IntImm | FloatImm) and isinstance(b, IntImm | FloatImm)):
        return None
    if node.op in ("floordiv", "floormod", "truncdiv", "truncmod") and node.b.value == 0:
        return None
    with np.errstate(all="ignore"):
        value = _NP_ARITH[node.op](_np_scalar(node.a), _np_scalar(node.b))
    return _imm(value.item(), node.dtype)


def _decide(op: str, diff: Interval) -> bool | None:
    """Truth of ``d op 0`` for every d in ``diff``, or None when it depends."""
    checks = {
        "lt": (diff.hi < 0, diff.lo >= 0), "le": (diff.hi <= 0, diff.lo > 0),
        "gt": (diff.lo > 0, diff.hi <= 0), "ge": (diff.lo >= 0, diff.hi < 0),
        "eq": (diff.lo == diff.hi == 0, diff.lo > 0 or diff.hi < 0),
        "ne": (diff.lo > 0 or diff.hi < 0, diff.lo == diff.hi == 0),
    }
    always, never = checks[op]
    return True if always else (False if never else None)


#: most multiples of a divisor the lanes of a divided ramp may straddle for the division
#: to become compares (each costs a compare, and a load at the quotient a scalar load)
MAX_STRADDLED = 2


def _constant_divisor(node: Expr) -> int | None:
    """``c`` when ``node`` is a vector quotient by ``broadcast(c)``, c > 0."""
    if isinstance(node, Binary) and node.op == "floordiv" and isinstance(node.b, Broadcast) \
            and isinstance(node.b.value, IntImm) and node.b.value.value > 0:
        return node.b.value.value
    return None


def _merge_vector_quotients(node: Binary) -> Binary:
    """A vector quotient of a quotient by constants as one quotient (floor(floor(x / p)
    / q) == floor(x / (p * q)) for positive p, q), before the inner one is simplified
    into compares; scalar ones stay (``merge_div_mod`` recombines them)."""
    outer = _constant_divisor(node)
    while outer is not None:
        inner = _constant_divisor(node.a)
        if inner is None:
            break
        divisor = IntImm(inner * outer, node.b.value.dtype)
        node = Binary("floordiv", node.a.a, Broadcast(divisor, node.b.lanes))
        outer = inner * outer
    return node


def _neighbour_steps(index: Expr):
    """``(q, [c1, c2, ...])`` when vector ``index`` is ``broadcast(q) + int(c1) + int(c2)
    + ...`` with ``cj = ramp >= broadcast(tj)``, one ramp and increasing thresholds (so
    each condition implies the ones before: a lane is at q + the number that hold; what
    a ramp divided by a constant it straddles becomes), else None."""
    conditions = []
    while isinstance(index, Binary) and index.op == "add" and isinstance(index.b, Cast) \
            and is_bool(index.b.value.dtype):
        conditions.append(index.b.value)
        index = index.a
    if not conditions or not isinstance(index, Broadcast):
        return None
    conditions.reverse()
    thresholds = []
    for condition in conditions:
        if not (isinstance(condition, Binary) and condition.op == "ge"
                and isinstance(condition.b, Broadcast)
                and isinstance(condition.b.value, IntImm)
                and structural_key(condition.a) is structural_key(conditions[0].a)):
            return None
        thresholds.append(condition.b.value.value)
    if any(low >= high for low, high in zip(thresholds, thresholds[1:])):
        return None
    return index.value, conditions


class Simplifier(Mutator):
    """Bottom-up rewriting with the variable ranges in ``ranges``.

    A node's rewriting depends only on the node and the ranges, so every distinct node
    is rewritten once while the ranges stay as they are: across all the statements of
    a loop body, not only within one expression (the copies of an unrolled body share
    every sub-expression that does not use the unrolled variable, and are simplified
    once for all of them). Entering or leaving a loop changes the ranges and starts
    afresh (sibling loops may bind one variable to different ranges)."""

    def __init__(self, ranges: Ranges | None = None):
        self.ranges: dict[Var, Interval] = dict(ranges or {})
        self._rewritten: dict[int, tuple[Expr, Expr]] = {}
        #: the variables of the single-iteration loops around, each by its one value
        self._values: dict[Var, Expr] = {}

    def expr(self, node: Expr) -> Expr:
        hit = self._rewritten.get(id(node))
        if hit is not None:
            return hit[1]
        result = self.dispatch(node)
        self._rewritten[id(node)] = (node, result)  # the node kept alive: its id its own
        return result

    def _set_range(self, var: Var, bound: Interval | None) -> None:
        """Bind (or, with None, unbind) ``var``'s range; rewritings under the old
        ranges no longer hold."""
        if bound is None:
            if self.ranges.pop(var, None) is None:
                return
        else:
            self.ranges[var] = bound
        self._rewritten = {}

    def visit_Binary(self, node: Binary) -> Expr:
        if type(node.b) is Broadcast:
            node = _merge_vector_quotients(node)
        a, b = self.expr(node.a), self.expr(node.b)
        if a is not node.a or b is not node.b:
            node = Binary(node.op, a, b)
        return self._binary(node)

    def _binary(self, node: Binary) -> Expr:
        """``node`` (whose operands are simplified already) simplified."""
        folded = _fold_constants(node)
        if folded is not None:
            return folded
        dtype = node.a.dtype  # a Binary's lanes are its operands'
        if lanes_of(dtype) > 1:
            return self._vector_binary(node)
        op = node.op
        if op in ("and", "or"):
            return self._logic(node)
        if is_float(dtype):
            return self._float_identities(node)
        if op in ("add", "sub", "mul"):
            form = merge_div_mod(linear_form(node))
            if form is node.__dict__.get("_linear_form") and built_from_its_form(node, dtype):
                return node  # it is what from_linear_form builds of its form: kept
            return from_linear_form(form, dtype)
        if op in ("floordiv", "floormod"):
            return self._div_mod(node)
        if node.op in ("min", "max"):
            return self._min_max(node)
        if node.op in COMPARE_OPS:
            diff = linear_form(node.a).plus(linear_form(node.b).scaled(-1))
            decided = _decide(node.op, _form_bound(diff, self.ranges))
            return node if decided is None else IntImm(int(decided), "bool")
        return node

    def _vector_binary(self, node: Binary) -> Expr:
        """Vector forms: an operation on two broadcasts is a broadcast; a ramp divided by
        a constant that its lanes never straddle a multiple of is a broadcast of one
        quotient (its remainder a ramp), so a per-channel table read at the channel of
        a vector of pixels is one scalar load; one whose lanes straddle a multiple or
        two is that quotient plus compares (no vector division)."""
        a, b = node.a, node.b
        if isinstance(a, Broadcast) and isinstance(b, Broadcast) and a.lanes == b.lanes:
            return Broadcast(self._binary(Binary(node.op, a.value, b.value)), a.lanes)
        ramp = self._ramp_arithmetic(node)
        if ramp is not None:
            return ramp
        if node.op not in ("floordiv", "floormod") or not (
                isinstance(b, Broadcast) and isinstance(b.value, IntImm) and b.value.value > 0):
            return node
        divisor = b.value
        if not (isinstance(a, Ramp) and isinstance(a.stride, IntImm) and a.stride.value >= 0):
            return node
        span = a.stride.value * (a.lanes - 1)
        quotient = self._binary(Binary("floordiv", a.base, divisor))
        remainder = self._binary(Binary("floormod", a.base, divisor))
        if self._in_one_period(a.base, span, divisor.value):
            if node.op == "floordiv":
                return Broadcast(quotient, a.lanes)
            return Ramp(remainder, a.stride, a.lanes)
        straddled = (divisor.value - 1 + span) // divisor.value
        if straddled > MAX_STRADDLED:
            return node
        # with r = base mod divisor the lanes are r + k*stride; past the j-th multiple
        # they are >= j * divisor: one scalar division and a vector compare per multiple
        lanes = Ramp(remainder, a.stride, a.lanes)
        quotients: Expr = Broadcast(quotient, a.lanes)
        for j in range(1, straddled + 1):
            past = Binary("ge", lanes, Broadcast(IntImm(j * divisor.value, divisor.dtype),
                                                 a.lanes))
            quotients = Binary("add", quotients, Cast(node.dtype, past))
        if node.op == "floordiv":
            return quotients
        return Binary("sub", Ramp(a.base, a.stride, a.lanes), Binary("mul", quotients, b))

    def _ramp_arithmetic(self, node: Binary) -> Ramp | None:
        """An integer ramp plus or minus a broadcast or another ramp, or times a
        broadcast, as one ramp (None for other forms): an index a code generator then
        reads or writes as one contiguous vector, not lane by lane."""
        a, b = node.a, node.b
        if not is_int(node.dtype) or node.op not in ("add", "sub", "mul"):
            return None
        if node.op == "add" and isinstance(a, Broadcast) and isinstance(b, Ramp):
            a, b = b, a
        if not isinstance(a, Ramp) or lanes_of(b.dtype) != a.lanes:
            return None
        if isinstance(b, Broadcast):
            base = self._binary(Binary(node.op, a.base, b.value))
            stride = a.stride if node.op != "mul" else self._binary(
                Binary("mul", a.stride, b.value))
            return Ramp(base, stride, a.lanes)
        if isinstance(b, Ramp) and node.op != "mul":
            return Ramp(self._binary(Binary(node.op, a.base, b.base)),
                        self._binary(Binary(node.op, a.stride, b.stride)), a.lanes)
        return None

    def _in_one_period(self, base: Expr, span: int, divisor: int) -> bool:
        """Whether ``base`` and ``base + span`` always have one quotient by ``divisor``:
        from the residues ``base`` can take (every term's coefficient a multiple of
        g = gcd(coefficients, divisor) leaves base mod divisor at most divisor - g + r,
        r the constant's residue), or from its range."""
        form = linear_form(base)
        step = divisor
        for coeff, _ in form.terms.values():
            step = math.gcd(step, coeff)
        if form.constant % step + span < step:
            return True
        bound = _form_bound(form, self.ranges)
        return bound.is_bounded and bound.lo // divisor == (bound.hi + span) // divisor

    def _logic(self, node: Binary) -> Expr:
        for mine, other in ((node.a, node.b), (node.b, node.a)):
            if isinstance(mine, IntImm):
                absorbing = 0 if node.op == "and" else 1
                return IntImm(absorbing, "bool") if mine.value == absorbing else other
        return node

    @staticmethod
    def _float_identities(node: Binary) -> Expr:
        a, b = node.a, node.b
        if node.op == "mul" and isinstance(b, FloatImm) and b.value == 1.0:
            return a
        if node.op == "mul" and isinstance(a, FloatImm) and a.value == 1.0:
            return b
        if node.op in ("add", "sub") and isinstance(b, FloatImm) and b.value == 0.0:
            return a
        if node.op == "add" and isinstance(a, FloatImm) and a.value == 0.0:
            return b
        return node

    def _div_mod(self, node: Binary) -> Expr:
        if not isinstance(node.b, IntImm) or node.b.value <= 0:
            return node
        c = node.b.value
        if c == 1:
            return node.a if node.op == "floordiv" else IntImm(0, node.dtype)
        form = linear_form(node.a)
        divisible = LinearForm({k: v for k, v in form.terms.items() if v[0] % c == 0}, 0)
        rest = LinearForm({k: v for k, v in form.terms.items() if v[0] % c != 0},
                          form.constant)
        rest_bound = _form_bound(rest, self.ranges)
        quotient_terms = LinearForm({k: [v[0] // c, v[1]] for k, v in divisible.terms.items()}, 0)
        if rest_bound.is_bounded and rest_bound.lo // c == rest_bound.hi // c:
            offset = int(rest_bound.lo // c)
            if node.op == "floordiv":
                return from_linear_form(quotient_terms.plus(LinearForm({}, offset)), node.dtype)
            return from_linear_form(rest.plus(LinearForm({}, -offset * c)), node.dtype)
        if not divisible.terms:
            return node
        # floor((c*X + r) / c) == X + floor(r / c) and (c*X + r) mod c == r mod c, always.
        rest_expr = from_linear_form(rest, node.dtype)
        if node.op == "floormod":
            return Binary("floormod", rest_expr, node.b)
        quotient = from_linear_form(quotient_terms, node.dtype)
        return Binary("add", quotient, Binary("floordiv", rest_expr, node.b))

    def _min_max(self, node: Binary) -> Expr:
        diff = linear_form(node.a).plus(linear_form(node.b).scaled(-1))
        bound = _form_bound(diff, self.ranges)
        a_smaller = bound.hi <= 0
        b_smaller = bound.lo >= 0
        if node.op == "min":
            return node.a if a_smaller else (node.b if b_smaller else node)
        return node.b if a_smaller else (node.a if b_smaller else node)

    def visit_Not(self, node: Not) -> Expr:
        node = self.generic(node)
        if isinstance(node.a, IntImm):
            return IntImm(1 - node.a.value, "bool")
        return node

    def visit_Select(self, node: Select) -> Expr:
        condition = self.expr(node.condition)
        if isinstance(condition, IntImm):
            # only the side chosen is simplified: an unrolled loop makes the index of a
            # select chain over its values (a Winograd transform's rows) a constant in
            # each copy, and the chain's other branches are dropped unseen
            return self.expr(node.true_value if condition.value else node.false_value)
        true_value, false_value = self.expr(node.true_value), self.expr(node.false_value)
        if (condition is node.condition and true_value is node.true_value
                and false_value is node.false_value):
            return node
        return Select(condition, true_value, false_value)

    def visit_Cast(self, node: Cast) -> Expr:
        node = self.generic(node)
        if isinstance(node.value, IntImm | FloatImm) and lanes_of(node.dtype) == 1:
            with np.errstate(all="ignore"):
                target = bool if is_bool(node.dtype) else node.dtype
                value = _np_scalar(node.value).astype(target).item()
            return _imm(value, node.dtype)
        return node

    def visit_Ramp(self, node: Ramp) -> Expr:
        return self.generic(node)

    def visit_Broadcast(self, node: Broadcast) -> Expr:
        return self.generic(node)

    def visit_BufferLoad(self, node: BufferLoad) -> Expr:
        node = self.generic(node)
        if len(node.indices) != 1 or node.predicate is not None:
            return node
        (index,) = node.indices
        if isinstance(index, Broadcast):
            # every lane reads one element: one scalar load
            return Broadcast(BufferLoad(node.buffer, (index.value,)), index.lanes)
        steps = _neighbour_steps(index)
        if steps is not None:
            # the lanes read one of a few neighbours (a row's table entry, for a vector of
            # pixels crossing into the next rows): a scalar load each and selects; past
            # the first clamped, for when no lane steps past the last element
            first, conditions = steps
            lanes = lanes_of(index.dtype)
            last = IntImm(node.buffer.size - 1, first.dtype)
            value: Expr = Broadcast(BufferLoad(node.buffer, (first,)), lanes)
            for j, condition in enumerate(conditions, start=1):
                at = self._binary(Binary("min", self._binary(
                    Binary("add", first, IntImm(j, first.dtype))), last))
                value = Select(condition, Broadcast(BufferLoad(node.buffer, (at,)), lanes),
                               value)
            return value
        return node

    # statements

    def visit_For(self, node: For) -> Stmt:
        lo, extent = self.expr(node.min), self.expr(node.extent)
        if isinstance(extent, IntImm) and extent.value <= 0:
            return SeqStmt(())
        if isinstance(lo, IntImm) and isinstance(extent, IntImm):
            if extent.value == 1 and node.thread_tag is None:
                return self._with_value(node.var, lo, node.body)
            self._set_range(node.var, Interval(lo.value, lo.value + extent.value - 1))
        body = self.stmt(node.body)
        self._set_range(node.var, None)
        if isinstance(body, SeqStmt) and not body.stmts:
            return body
        if lo is node.min and extent is node.extent and body is node.body:
            return node
        return dataclasses.replace(node, min=lo, extent=extent, body=body)

    def _with_value(self, var: Var, value: Expr, body: Stmt) -> Stmt:
        """``body`` simplified with ``var`` read as ``value`` (a single-iteration
        loop's body): what simplifying ``substitute(body, {var: value})`` gives, without
        first walking the body to copy what uses ``var``. Rewritings made without the
        binding (or with it) do not hold on the other side of it."""
        self._values[var] = value
        self._rewritten = {}
        try:
            return self.stmt(body)
        finally:
            del self._values[var]
            self._rewritten = {}

    def visit_Var(self, node: Var) -> Expr:
        return self._values.get(node, node)

    def visit_IfThenElse(self, node: IfThenElse) -> Stmt:
        condition = self.expr(node.condition)
        if isinstance(condition, IntImm):
            if condition.value:
                return self.stmt(node.then_case)
            return self.stmt(node.else_case) if node.else_case is not None else SeqStmt(())
        then_case = self.stmt(node.then_case)
        else_case = self.stmt(node.else_case) if node.else_case is not None else None
        return dataclasses.replace(node, condition=condition, then_case=then_case,
                                   else_case=else_case)

    def visit_SeqStmt(self, node: SeqStmt) -> Stmt:
        stmts = [self.stmt(s) for s in node.stmts]
        kept = [s for s in stmts if not (isinstance(s, SeqStmt) and not s.stmts)]
        return seq(kept) if kept else SeqStmt(())


def simplify(expr: Expr, ranges: Ranges | None = None) -> Expr:
    """``expr`` simplified, using the inclusive bounds ``ranges`` of its variables."""
    return Simplifier(ranges).expr(expr)


def simplify_stmt(stmt: Stmt, ranges: Ranges | None = None) -> Stmt:
    """``stmt`` with every expression simplified under the loop ranges, guards that are
    provably true (or false) resolved, and single-iteration loops replaced by their body."""
    return Simplifier(ranges).stmt(stmt)


def prove(condition: Expr, ranges: Ranges | None = None) -> bool:
    """Whether ``condition`` provably holds for every value in ``ranges``."""
    result = simplify(condition, ranges)
    return isinstance(result, IntImm) and result.value == 1
