"""TIR expressions: immediates, variables, arithmetic, comparisons, select, casts,
intrinsic calls, buffer loads and the vector forms (ramp, broadcast) that the
vectorizer produces.

Every node is an immutable dataclass compared by identity (``==`` is *not*
overloaded, so nodes can key dicts); build comparisons with ``<``, ``<=``, ``>``,
``>=`` or :func:`equal` / :func:`not_equal`. Vector dtypes are written
``"float32x16"`` (scalar type, ``x``, lane count).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import TypeInferenceError
from ..ir.types import FLOAT_DTYPES, normalize_dtype

#: dtype of loop variables and of every index computation.
INDEX_DTYPE = "int64"

ARITH_OPS = ("add", "sub", "mul", "div", "floordiv", "floormod", "truncdiv", "truncmod", "min",
             "max")
#: integer-only operators: bitwise logic and shifts (right shifts are arithmetic on signed
#: dtypes, logical on unsigned ones).
BITWISE_OPS = ("bitand", "bitor", "bitxor", "shl", "shr")
COMPARE_OPS = ("lt", "le", "gt", "ge", "eq", "ne")
LOGIC_OPS = ("and", "or")


# ----------------------------------------------------------------------------- dtypes


def scalar_dtype(dtype: str) -> str:
    """``"float32x16"`` -> ``"float32"``; scalar dtypes map to themselves."""
    base, _, _ = dtype.partition("x")
    return base


def lanes_of(dtype: str) -> int:
    """Number of vector lanes of ``dtype`` (1 for a scalar)."""
    _, _, lanes = dtype.partition("x")
    return int(lanes) if lanes else 1


def with_lanes(dtype: str, lanes: int) -> str:
    """``dtype`` with its scalar type kept and ``lanes`` lanes."""
    base = scalar_dtype(dtype)
    return base if lanes == 1 else f"{base}x{lanes}"


def is_float(dtype: str) -> bool:
    return scalar_dtype(dtype) in FLOAT_DTYPES


def is_bool(dtype: str) -> bool:
    return scalar_dtype(dtype) == "bool"


def is_unsigned(dtype: str) -> bool:
    return scalar_dtype(dtype).startswith("uint")


def is_int(dtype: str) -> bool:
    return not is_float(dtype) and not is_bool(dtype)


def bits_of(dtype: str) -> int:
    return 1 if is_bool(dtype) else np.dtype(scalar_dtype(dtype)).itemsize * 8


# ----------------------------------------------------------------------------- nodes


class Expr:
    """Base of every TIR (and TE) expression; arithmetic operators build new nodes."""

    dtype: str

    def __add__(self, other):
        return binary("add", self, other)

    def __radd__(self, other):
        return binary("add", other, self)

    def __sub__(self, other):
        return binary("sub", self, other)

    def __rsub__(self, other):
        return binary("sub", other, self)

    def __mul__(self, other):
        return binary("mul", self, other)

    def __rmul__(self, other):
        return binary("mul", other, self)

    def __truediv__(self, other):
        return binary("div", self, other)

    def __rtruediv__(self, other):
        return binary("div", other, self)

    def __floordiv__(self, other):
        return binary("floordiv", self, other)

    def __rfloordiv__(self, other):
        return binary("floordiv", other, self)

    def __mod__(self, other):
        return binary("floormod", self, other)

    def __rmod__(self, other):
        return binary("floormod", other, self)

    def __neg__(self):
        return binary("sub", const(0, self.dtype), self)

    def __lt__(self, other):
        return binary("lt", self, other)

    def __le__(self, other):
        return binary("le", self, other)

    def __gt__(self, other):
        return binary("gt", self, other)

    def __ge__(self, other):
        return binary("ge", self, other)

    def __and__(self, other):
        return binary("and" if is_bool(self.dtype) else "bitand", self, other)

    def __or__(self, other):
        return binary("or" if is_bool(self.dtype) else "bitor", self, other)

    def __xor__(self, other):
        return binary("bitxor", self, other)

    def __lshift__(self, other):
        return binary("shl", self, other)

    def __rshift__(self, other):
        return binary("shr", self, other)

    def __invert__(self):
        return Not(self)

    def __bool__(self):
        raise TypeError(
            "a symbolic expression has no truth value; use select()/if_then_else() "
            "instead of Python 'if', and equal()/not_equal() instead of ==/!="
        )

    def __repr__(self) -> str:
        from .printer import expr_to_str

        return expr_to_str(self)


@dataclass(frozen=True, eq=False, repr=False)
class IntImm(Expr):
    """An integer (or bool) immediate of ``dtype``; build one with :func:`const`."""

    value: int
    dtype: str = INDEX_DTYPE


@dataclass(frozen=True, eq=False, repr=False)
class FloatImm(Expr):
    """A floating-point immediate of ``dtype``; build one with :func:`const`."""

    value: float
    dtype: str = "float32"


@dataclass(frozen=True, eq=False, repr=False)
class Var(Expr):
    """A scalar variable (loop index or parameter), identified by object identity."""

    name: str
    dtype: str = INDEX_DTYPE


@dataclass(frozen=True, eq=False, repr=False)
class Binary(Expr):
    """``op`` is one of ARITH_OPS, BITWISE_OPS, COMPARE_OPS or LOGIC_OPS; both sides share
    a dtype."""

    op: str
    a: Expr
    b: Expr

    @property
    def dtype(self) -> str:
        # kept on the node once found (nodes never change): a chain of sums asks its
        # operands down to the leaves
        found = self.__dict__.get("_dtype")
        if found is None:
            found = self.a.dtype
            if self.op in COMPARE_OPS:
                found = with_lanes("bool", lanes_of(found))
            self.__dict__["_dtype"] = found
        return found


@dataclass(frozen=True, eq=False, repr=False)
class Not(Expr):
    """Logical negation of a bool expression (lane by lane for a vector)."""

    a: Expr

    @property
    def dtype(self) -> str:
        return self.a.dtype


@dataclass(frozen=True, eq=False, repr=False)
class Select(Expr):
    """``true_value`` where ``condition`` holds, else ``false_value``; only the chosen side
    is evaluated when a side reads memory (so guarded loads never go out of bounds)."""

    condition: Expr
    true_value: Expr
    false_value: Expr

    @property
    def dtype(self) -> str:
        return self.true_value.dtype


@dataclass(frozen=True, eq=False, repr=False)
class Cast(Expr):
    """``value`` converted to ``dtype`` (C's conversion rules: float to int truncates
    toward zero); build one with :func:`cast`, which skips a cast to the same dtype."""

    dtype: str
    value: Expr


@dataclass(frozen=True, eq=False, repr=False)
class Call(Expr):
    """A call of ``name`` on ``args``, giving a ``dtype`` value.

    Two kinds of names: the math intrinsics of :data:`INTRINSICS` (``exp``, ``sqrt``,
    ``fma``...; built with :func:`call_intrin`, which checks the name and the argument
    count), which every code generator maps to its math library; and a target's own
    instructions, which a tensor intrinsic's implementation emits inside an
    :class:`~heterocc.tir.stmt.Evaluate` (the accelerator's GEMM, an SDK target's
    dot-product), usually with buffer regions' loads as arguments. Only the target whose
    code generator knows such a name can compile it; other code generators refuse the
    call naming it."""

    name: str
    args: tuple[Expr, ...]
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Buffer:
    """A named region of memory with a static shape, a dtype and a memory scope
    (``global``, ``local``, ``shared`` or any accelerator buffer name)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    scope: str = "global"

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __repr__(self) -> str:
        return f"Buffer({self.name}: {self.dtype}{list(self.shape)}, {self.scope})"


@dataclass(frozen=True, eq=False, repr=False)
class BufferLoad(Expr):
    """``buffer[indices]``: one element, or a vector of elements where an index is a
    :class:`Ramp` (its lanes give the load's)."""

    buffer: Buffer
    indices: tuple[Expr, ...]
    #: vector loads only: lanes whose bool is false are not read (they read as zero)
    predicate: Expr | None = None

    def __post_init__(self):
        object.__setattr__(self, "indices", as_index_tuple(self.indices))

    @property
    def dtype(self) -> str:
        lanes = max((lanes_of(i.dtype) for i in self.indices), default=1)
        return with_lanes(self.buffer.dtype, lanes)


@dataclass(frozen=True, eq=False, repr=False)
class Ramp(Expr):
    """The vector ``[base, base + stride, ..., base + (lanes - 1) * stride]``."""

    base: Expr
    stride: Expr
    lanes: int

    @property
    def dtype(self) -> str:
        return with_lanes(self.base.dtype, self.lanes)


@dataclass(frozen=True, eq=False, repr=False)
class Broadcast(Expr):
    """A scalar repeated over ``lanes`` lanes."""

    value: Expr
    lanes: int

    @property
    def dtype(self) -> str:
        return with_lanes(self.value.dtype, self.lanes)


# ----------------------------------------------------------------------------- builders


def const(value, dtype: str | None = None) -> Expr:
    """An immediate of ``dtype`` (inferred from the Python type when omitted)."""
    if dtype is None:
        dtype = "bool" if isinstance(value, bool) else (
            INDEX_DTYPE if isinstance(value, int | np.integer) else "float32")
    dtype = normalize_dtype(scalar_dtype(dtype))
    if is_float(dtype):
        return FloatImm(float(value), dtype)
    if is_int(dtype):
        info = np.iinfo(dtype)
        if not info.min <= int(value) <= info.max:
            raise TypeInferenceError(f"constant {value} does not fit in {dtype} "
                                     f"[{info.min}, {info.max}]; cast the other operand")
    return IntImm(int(value), dtype)


def as_expr(value, like: str | None = None) -> Expr:
    """``value`` as an Expr; Python numbers take the dtype ``like`` where it fits."""
    if isinstance(value, Expr):
        return value
    as_tir = getattr(value, "__tir_expr__", None)
    if as_tir is not None:
        return as_tir()
    if isinstance(value, bool | np.bool_):
        return const(bool(value), "bool")
    if isinstance(value, int | np.integer):
        return const(int(value), scalar_dtype(like) if like and not is_bool(like) else None)
    if isinstance(value, float | np.floating):
        return const(float(value), scalar_dtype(like) if like and is_float(like) else None)
    raise TypeInferenceError(f"cannot use {value!r} ({type(value).__name__}) in an expression")


def _promoted(a: str, b: str) -> str:
    return normalize_dtype(np.promote_types(scalar_dtype(a), scalar_dtype(b)))


def as_index_tuple(indices) -> tuple[Expr, ...]:
    """``indices`` (ints or expressions) as a tuple of index expressions."""
    return tuple(as_expr(i, INDEX_DTYPE) for i in indices)


def cast(dtype: str, value) -> Expr:
    """``value`` converted to ``dtype`` (no node when it already has it)."""
    value = as_expr(value)
    target = with_lanes(normalize_dtype(scalar_dtype(dtype)), lanes_of(value.dtype))
    return value if value.dtype == target else Cast(target, value)


def binary(op: str, a, b) -> Expr:
    """``a op b`` with NumPy-style promotion of mixed dtypes (Python numbers adopt the
    other side's dtype)."""
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        raise TypeInferenceError(f"binary {op!r} needs at least one expression operand")
    a = as_expr(a, b.dtype if isinstance(b, Expr) else None)
    b = as_expr(b, a.dtype)
    if scalar_dtype(a.dtype) != scalar_dtype(b.dtype):
        common = _promoted(a.dtype, b.dtype)
        a, b = cast(common, a), cast(common, b)
    if op == "div" and not is_float(a.dtype):
        raise TypeInferenceError(
            f"'/' on integer operands ({a.dtype}) is ambiguous; use '//' (floordiv) or cast "
            "to a float dtype")
    if op in LOGIC_OPS and not is_bool(a.dtype):
        raise TypeInferenceError(f"'{op}' needs bool operands, got {a.dtype}")
    if op in BITWISE_OPS and not is_int(a.dtype):
        raise TypeInferenceError(f"'{op}' needs integer operands, got {a.dtype}")
    la, lb = lanes_of(a.dtype), lanes_of(b.dtype)
    if la != lb:
        if la == 1:
            a = Broadcast(a, lb)
        elif lb == 1:
            b = Broadcast(b, la)
        else:
            raise TypeInferenceError(f"'{op}' on vectors of {la} and {lb} lanes")
    return Binary(op, a, b)


def equal(a, b) -> Expr:
    """The comparison ``a == b`` as an expression."""
    return binary("eq", a, b)


def not_equal(a, b) -> Expr:
    """The comparison ``a != b`` as an expression."""
    return binary("ne", a, b)


def truncdiv(a, b) -> Expr:
    """Division rounding toward zero (C semantics; ONNX Div on integers)."""
    return binary("truncdiv", a, b)


def truncmod(a, b) -> Expr:
    """Remainder with the sign of the dividend (C ``%``, ``fmod`` on floats)."""
    return binary("truncmod", a, b)


def minimum(a, b) -> Expr:
    """The smaller of ``a`` and ``b``; of two floats one of which is NaN, the other
    (C's ``fmin``: computes that must propagate NaN select it explicitly)."""
    return binary("min", a, b)


def maximum(a, b) -> Expr:
    """The larger of ``a`` and ``b``; of two floats one of which is NaN, the other
    (C's ``fmax``)."""
    return binary("max", a, b)


def logical_and(a, b) -> Expr:
    """``a and b`` of two bool expressions (both sides evaluated)."""
    return binary("and", a, b)


def logical_or(a, b) -> Expr:
    """``a or b`` of two bool expressions (both sides evaluated)."""
    return binary("or", a, b)


def select(condition, true_value, false_value) -> Expr:
    """``true_value if condition else false_value``; operands are promoted to one dtype."""
    condition = as_expr(condition)
    if not is_bool(condition.dtype):
        raise TypeInferenceError(f"select condition must be bool, got {condition.dtype}")
    true_value = as_expr(true_value, false_value.dtype if isinstance(false_value, Expr) else None)
    false_value = as_expr(false_value, true_value.dtype)
    if true_value.dtype != false_value.dtype:
        common = _promoted(true_value.dtype, false_value.dtype)
        true_value, false_value = cast(common, true_value), cast(common, false_value)
    return Select(condition, true_value, false_value)


def dtype_min(dtype: str) -> Expr:
    """The smallest value of ``dtype`` (-inf for floats)."""
    if is_float(dtype):
        return FloatImm(-math.inf, dtype)
    if is_bool(dtype):
        return IntImm(0, dtype)
    return IntImm(int(np.iinfo(dtype).min), dtype)


def dtype_max(dtype: str) -> Expr:
    """The largest value of ``dtype`` (+inf for floats)."""
    if is_float(dtype):
        return FloatImm(math.inf, dtype)
    if is_bool(dtype):
        return IntImm(1, dtype)
    return IntImm(int(np.iinfo(dtype).max), dtype)


# ----------------------------------------------------------------------------- intrinsics

#: name -> number of arguments; every intrinsic takes and returns one float dtype.
INTRINSICS: dict[str, int] = {
    "exp": 1, "exp2": 1, "log": 1, "log2": 1, "log10": 1, "sqrt": 1, "fabs": 1,
    "floor": 1, "ceil": 1, "trunc": 1, "round": 1, "sin": 1, "cos": 1, "tan": 1,
    "tanh": 1, "erf": 1, "asin": 1, "acos": 1, "atan": 1, "sinh": 1, "cosh": 1,
    "asinh": 1, "acosh": 1, "atanh": 1, "pow": 2, "fma": 3,
}


def call_intrin(name: str, *args) -> Expr:
    """A call of math intrinsic ``name``; integer arguments are converted to float32."""
    if name not in INTRINSICS:
        raise TypeInferenceError(
            f"unknown intrinsic {name!r}; known: {', '.join(sorted(INTRINSICS))}")
    if len(args) != INTRINSICS[name]:
        raise TypeInferenceError(f"intrinsic {name!r} takes {INTRINSICS[name]} argument(s)")
    first = next((a for a in args if isinstance(a, Expr)), None)
    dtype = first.dtype if first is not None and is_float(first.dtype) else "float32"
    exprs = tuple(cast(dtype, as_expr(a, dtype)) for a in args)
    return Call(name, exprs, dtype)


def _unary_intrin(name: str):
    def build(x) -> Expr:
        return call_intrin(name, x)

    build.__name__ = name
    build.__doc__ = f"Elementwise ``{name}`` of a float expression."
    return build


exp = _unary_intrin("exp")
log = _unary_intrin("log")
sqrt = _unary_intrin("sqrt")
fabs = _unary_intrin("fabs")
floor = _unary_intrin("floor")
ceil = _unary_intrin("ceil")
tanh = _unary_intrin("tanh")
erf = _unary_intrin("erf")
sin = _unary_intrin("sin")
cos = _unary_intrin("cos")


def power(x, y) -> Expr:
    """``x ** y`` on floats."""
    return call_intrin("pow", x, y)
