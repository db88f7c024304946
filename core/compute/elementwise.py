"""Elementwise and broadcasting ops: arithmetic, comparison, logic, bitwise, unary math,
casts, Where and Identity (activations live in ``activation.py``).

Every compute follows the NumPy reference of ``heterocc.ops.elementwise`` exactly,
including the corner cases where LLVM's defaults differ from NumPy: float maximum and
minimum propagate NaN, integer division and remainder by zero give 0 (instead of
trapping), and shifts by out-of-range amounts give the sign fill.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import reduce

import numpy as np

from .. import te
from ..errors import CompileError
from ..ops.elementwise import legacy_operand_shape
from ..tir.expr import FloatImm, IntImm
from .common import elementwise, float_only
from .registry import register_compute

_UNARY_INTRINSICS = {
    "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Floor": "floor", "Ceil": "ceil",
    "Sin": "sin", "Cos": "cos", "Tan": "tan", "Erf": "erf", "Asin": "asin",
    "Acos": "acos", "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh",
    "Acosh": "acosh", "Atanh": "atanh", "Round": "round",  # round: half to even (roundeven)
}


def is_float_dtype(dtype: str) -> bool:
    return dtype.startswith("float")


def is_signed_int_dtype(dtype: str) -> bool:
    return dtype.startswith("int")


def _is_constant(value) -> bool:
    return isinstance(value, IntImm | FloatImm) and not _is_nan_constant(value)


def _is_nan_constant(value) -> bool:
    return isinstance(value, FloatImm) and math.isnan(value.value)


def _propagating_nan(result, operands):
    """``result`` (built from float ``operands`` with LLVM's NaN-ignoring min/max), or NaN
    where any operand is NaN, as NumPy's maximum/minimum give.

    Each operand is read twice at most (here and in ``result``): nesting the usual
    ``a >= b or a != a`` selects would copy the inner expression three times per level.
    """
    checks = [te.not_equal(v, v) for v in operands if not _is_constant(v)]
    if not checks:
        return result
    return te.if_then_else(reduce(te.logical_or, checks), te.const(math.nan, result.dtype),
                           result)


def _exact_pair(a, b, maximum: bool):
    """NumPy's ``maximum(a, b)`` (or ``minimum``) of two floats, bit for bit, as one
    select: ``b`` where ``a <= b`` (``a >= b``) or ``b`` is NaN, else ``a``.

    NumPy returns its second operand on a tie (so maximum(-0.0, +0.0) is +0.0 and
    maximum(+0.0, -0.0) is -0.0) and NaN where either operand is NaN; a NaN ``a``
    compares false and passes through. Once ``b`` is a (folded) constant, the select is
    one compare per bound, with no NaN test: x86 makes it a single max/min instruction
    where ``b`` is not zero (a tie can then only be of equal bits) and a compare plus a
    masked move or an ``and`` where it is (a tie of -0.0 and +0.0 must give ``b``), half
    the instructions of maxnum with a NaN fix-up. A constant ``a`` gets the mirror form
    (``a`` where ``b`` loses strictly).
    """
    if _is_nan_constant(a) or _is_nan_constant(b):
        return te.const(math.nan, a.dtype)
    if _is_constant(a) and not _is_constant(b):
        # b loses strictly (b < a for maximum): on a tie b wins
        return te.if_then_else(b < a if maximum else b > a, a, b)
    picks_b = a <= b if maximum else a >= b
    if not _is_constant(b):
        picks_b = te.logical_or(picks_b, te.not_equal(b, b))
    return te.if_then_else(picks_b, b, a)


def _nan_extremum(values, maximum: bool):
    """NumPy's maximum or minimum folded over ``values``, left to right (see
    :func:`_exact_pair`). Integers use TIR's min/max directly."""
    ignoring_nan = te.maximum if maximum else te.minimum
    if not is_float_dtype(values[0].dtype):
        return reduce(ignoring_nan, values)
    if sum(not _is_constant(v) for v in values) > 2:
        return _propagating_nan(_last_extreme(values, reduce(ignoring_nan, values), maximum),
                                values)
    return reduce(lambda a, b: _exact_pair(a, b, maximum), values)


def _last_extreme(values, extreme, maximum: bool):
    """The last of ``values`` (none NaN) that compares equal to their ``extreme``: what
    NumPy's left fold of maximum/minimum returns, since each step takes its second
    operand on a tie. So where the extreme is a zero, its sign is the last zero's.
    (The pairwise select of :func:`_exact_pair` reads its running result twice, which
    doubles the expression per input; this reads the extreme once per input.)"""
    result = values[0]
    for value in values[1:]:
        result = te.if_then_else(value >= extreme if maximum else value <= extreme,
                                 value, result)
    return result


def nan_maximum(*values):
    """``numpy.maximum`` of ``values``: unlike LLVM's maxnum, a NaN operand gives NaN."""
    return _nan_extremum(values, True)


def nan_minimum(*values):
    """``numpy.minimum`` of ``values``: unlike LLVM's minnum, a NaN operand gives NaN."""
    return _nan_extremum(values, False)


def clamp(x, low, high):
    """``minimum(maximum(x, low), high)`` as NumPy computes it, so high wins where low >
    high and a NaN ``x`` or bound gives NaN; one select per bound once the bounds are
    constants (see :func:`_exact_pair`).

    A bound wins a tie, so a zero at a zero bound takes the bound's sign. ``numpy.clip``
    (HardSigmoid's reference) lets ``x`` win instead, which differs only where ``x`` is
    a zero of the other sign; the bound's sign is kept there on purpose: float
    arithmetic here may drop an ``x + 0.0`` (the ``nsz`` flag), so the sign of a zero
    ``x`` is not reliable, while the bound's is."""
    return nan_minimum(nan_maximum(x, low), high)


def unary(name: str, make_fn: Callable, *, floats_only: bool = False):
    """The compute of a one-input op; ``make_fn(dtype, attrs)`` gives the scalar function."""

    def compute(inputs, attrs, out_types):
        dtype = inputs[0].dtype
        if floats_only:
            float_only(dtype, name)
        return [elementwise(inputs[:1], out_types[0], make_fn(dtype, attrs), name.lower())]

    return compute


for _op, _intrinsic in _UNARY_INTRINSICS.items():
    register_compute(_op)(unary(
        _op, lambda dtype, attrs, f=_intrinsic: lambda x: te.call_intrin(f, x),
        floats_only=True))


def _sign(dtype, attrs):
    one, zero = te.const(1, dtype), te.const(0, dtype)
    if dtype.startswith("uint"):
        return lambda x: te.if_then_else(x > zero, one, zero)
    minus_one = te.const(-1, dtype)
    # the last branch returns x itself so that 0 stays 0 and NaN stays NaN
    return lambda x: te.if_then_else(x > zero, one, te.if_then_else(x < zero, minus_one, x))


def _abs(dtype, attrs):
    if is_float_dtype(dtype):
        return te.fabs
    return lambda x: te.if_then_else(x < te.const(0, dtype), -x, x)


def _is_inf(dtype, attrs):
    positive, negative = te.const(math.inf, dtype), te.const(-math.inf, dtype)

    def fn(x):
        detected = te.const(False, "bool")
        if attrs["detect_positive"]:
            detected = te.equal(x, positive)
        if attrs["detect_negative"]:
            detected = te.logical_or(detected, te.equal(x, negative))
        return detected

    return fn


register_compute("Neg")(unary("Neg", lambda dtype, attrs: lambda x: -x))
register_compute("Abs")(unary("Abs", _abs))
register_compute("Sign")(unary("Sign", _sign))
register_compute("Reciprocal")(unary(
    "Reciprocal", lambda dtype, attrs: lambda x: te.const(1.0, dtype) / x, floats_only=True))
register_compute("IsNaN")(unary(
    "IsNaN", lambda dtype, attrs: lambda x: te.not_equal(x, x), floats_only=True))
register_compute("IsInf")(unary("IsInf", _is_inf, floats_only=True))
register_compute("Not", "BitwiseNot")(unary("Not", lambda dtype, attrs: lambda x: ~x))


# ---------------------------------------------------------------- binary ops


def binary_operands(inputs, attrs):
    """The two operands of a binary op; under opset < 7 ``broadcast=1, axis`` B is viewed
    with trailing unit dims so that NumPy broadcasting aligns it as the old rule does."""
    a, b = inputs[0], inputs[1]
    if attrs.get("broadcast") and attrs.get("axis") is not None:
        shape = legacy_operand_shape(tuple(a.shape), tuple(b.shape), attrs["axis"],
                                     CompileError)
        source = b
        b = te.compute(shape, lambda *i: source[tuple(i[:source.ndim])],
                       name="legacy_broadcast", dtype=source.dtype)
    return a, b


def _binary(name: str, make_fn: Callable):
    """The compute of a two-input broadcasting op; ``make_fn(dtype, attrs)`` (``dtype``
    that of the operands) gives the scalar function."""

    def compute(inputs, attrs, out_types):
        a, b = binary_operands(inputs, attrs)
        return [elementwise([a, b], out_types[0], make_fn(a.dtype, attrs), name.lower())]

    return compute


def _guarded_int_division(dtype: str, divide: Callable, by_minus_one: Callable):
    """``divide(a, b)`` on integers with NumPy's answers where the hardware traps:
    0 for a zero divisor, ``by_minus_one(a)`` for -1 (INT_MIN / -1 overflows).

    The divisor is replaced by 1 in those lanes, so no lane of a vector divides by zero.
    """
    zero, one = te.const(0, dtype), te.const(1, dtype)

    if not is_signed_int_dtype(dtype):
        def unsigned(a, b):
            by_zero = te.equal(b, zero)
            return te.if_then_else(by_zero, zero, divide(a, te.if_then_else(by_zero, one, b)))

        return unsigned

    minus_one = te.const(-1, dtype)

    def signed(a, b):
        by_zero, by_minus_one_ = te.equal(b, zero), te.equal(b, minus_one)
        safe = te.if_then_else(te.logical_or(by_zero, by_minus_one_), one, b)
        return te.if_then_else(by_zero, zero, te.if_then_else(
            by_minus_one_, by_minus_one(a), divide(a, safe)))

    return signed


def _div(dtype, attrs):
    if is_float_dtype(dtype):
        return lambda a, b: a / b
    return _guarded_int_division(dtype, te.truncdiv, lambda a: -a)


def _float_floor_mod(a, b):
    """``numpy.mod`` on floats: fmod, moved by one divisor where the signs differ."""
    remainder = te.truncmod(a, b)
    zero = te.const(0.0, a.dtype)
    needs_fix = te.logical_and(te.not_equal(remainder, zero),
                               te.not_equal(remainder < zero, b < zero))
    return te.if_then_else(needs_fix, remainder + b, remainder)


def _mod(dtype, attrs):
    if is_float_dtype(dtype):
        return te.truncmod if attrs["fmod"] else _float_floor_mod
    remainder = te.truncmod if attrs["fmod"] else (lambda a, b: a % b)
    return _guarded_int_division(dtype, remainder, lambda a: te.const(0, dtype))


def _bit_shift(dtype, attrs):
    bits = np.dtype(dtype).itemsize * 8
    zero = te.const(0, dtype)
    left = attrs["direction"] == "LEFT"

    def fn(x, amount):
        in_range = te.logical_and(amount >= zero, amount < te.const(bits, dtype))
        # shift by 0 outside the range so no lane computes an undefined shift
        safe = te.if_then_else(in_range, amount, zero)
        shifted = x << safe if left else x >> safe
        if left or not is_signed_int_dtype(dtype):
            fill = zero
        else:
            fill = te.if_then_else(x < zero, te.const(-1, dtype), zero)
        return te.if_then_else(in_range, shifted, fill)

    return fn


_ARITHMETIC = {
    "Add": lambda dtype, attrs: lambda a, b: a + b,
    "Sub": lambda dtype, attrs: lambda a, b: a - b,
    "Mul": lambda dtype, attrs: lambda a, b: a * b,
    "Div": _div,
    "Mod": _mod,
    "BitShift": _bit_shift,
    "BitwiseAnd": lambda dtype, attrs: lambda a, b: a & b,
    "BitwiseOr": lambda dtype, attrs: lambda a, b: a | b,
    "BitwiseXor": lambda dtype, attrs: lambda a, b: a ^ b,
    "Equal": lambda dtype, attrs: te.equal,
    "Less": lambda dtype, attrs: lambda a, b: a < b,
    "LessOrEqual": lambda dtype, attrs: lambda a, b: a <= b,
    "Greater": lambda dtype, attrs: lambda a, b: a > b,
    "GreaterOrEqual": lambda dtype, attrs: lambda a, b: a >= b,
    "And": lambda dtype, attrs: te.logical_and,
    "Or": lambda dtype, attrs: te.logical_or,
    "Xor": lambda dtype, attrs: te.not_equal,
}

for _op, _make in _ARITHMETIC.items():
    register_compute(_op)(_binary(_op, _make))


@register_compute("Pow")
def power(inputs, attrs, out_types):
    """Pow in the promoted dtype of base and exponent, cast to the base's dtype (as the
    reference does), when that dtype is a float."""
    base, exponent = binary_operands(inputs, attrs)
    work = np.result_type(base.dtype, exponent.dtype).name
    if work not in ("float32", "float64"):
        raise CompileError(
            f"Pow of {base.dtype} by {exponent.dtype} has no TE compute: integer powers "
            "switch to float64 when any exponent is negative, which only run time knows")
    out = out_types[0].dtype
    return [elementwise([base, exponent], out_types[0], lambda x, y: te.cast(
        out, te.power(te.cast(work, x), te.cast(work, y))), "pow")]


# ---------------------------------------------------------------- variadic ops


def _variadic(name: str, combine: Callable, *, floats_only: bool = False):
    """The compute of an op over any number of broadcast inputs, ``combine(*values)``."""

    def compute(inputs, attrs, out_types):
        if floats_only:
            float_only(out_types[0].dtype, name)
        given = [t for t in inputs if t is not None]
        return [elementwise(given, out_types[0], combine, name.lower())]

    return compute


def _sum(*values):
    return reduce(lambda a, b: a + b, values)


def _mean(*values):
    return _sum(*values) / te.const(float(len(values)), values[0].dtype)


register_compute("Max")(_variadic("Max", nan_maximum))
register_compute("Min")(_variadic("Min", nan_minimum))
register_compute("Sum")(_variadic("Sum", _sum))
register_compute("Mean")(_variadic("Mean", _mean, floats_only=True))


# ---------------------------------------------------------------- selection, copies, casts


@register_compute("Where")
def where(inputs, attrs, out_types):
    return [elementwise(inputs, out_types[0], te.if_then_else, "where")]


@register_compute("Identity", "Dropout")
def identity(inputs, attrs, out_types):
    """A copy; Dropout only in inference mode (no training_mode operand: its value, and
    so whether elements drop, is only known at run time)."""
    if len(out_types) > 1:
        raise CompileError("Dropout with its mask output has no TE compute")
    if len(inputs) > 2 and inputs[2] is not None:
        raise CompileError("Dropout with a training_mode input has no TE compute")
    return [elementwise(inputs[:1], out_types[0], lambda x: x, "identity")]


@register_compute("Cast", "CastLike")
def cast(inputs, attrs, out_types):
    """Conversion between native dtypes as NumPy's ``astype``: integers wrap, floats to
    integers truncate, anything to bool is ``!= 0`` (NaN is True).

    ``saturate`` and ``round_mode`` only concern float8 targets, which are not native.
    """
    target = out_types[0].dtype
    return [elementwise(inputs[:1], out_types[0], lambda x: te.cast(target, x), "cast")]
