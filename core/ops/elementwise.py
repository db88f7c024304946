"""Elementwise and broadcasting ops: arithmetic, comparison, logic, bitwise,
unary math, casts, Where, Identity and Dropout.

Activations (Relu, Sigmoid, Gelu, Clip, ...) live in ``activation.py``; the
dtype groups and inference helpers defined here are shared with it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import reduce
from typing import Any

import ml_dtypes
import numpy as np
from onnx import TensorProto

from ..errors import InputError, TypeInferenceError
from ..ir.types import (
    EXTENDED_DTYPES,
    FLOAT_DTYPES,
    INT_DTYPES,
    STRING_DTYPE,
    TensorType,
    dtype_from_onnx,
    np_dtype,
)
from .common import broadcast_shapes
from .registry import REQUIRED, FusionKind, InferContext, register_op

SIGNED_INT_DTYPES = ("int8", "int16", "int32", "int64")
NUMERIC_DTYPES = INT_DTYPES + FLOAT_DTYPES
SIGNED_DTYPES = SIGNED_INT_DTYPES + FLOAT_DTYPES
ALL_DTYPES = NUMERIC_DTYPES + ("bool",)
BOOL_DTYPES = ("bool",)

#: opset-1 memory-reuse hint of many ops; it never changes results, so it is accepted and ignored.
CONSUMED_INPUTS: dict[str, Any] = {"consumed_inputs": None}
#: opset < 7 binary ops: ``broadcast=1`` with ``axis`` aligns B to A's dims from ``axis`` on.
LEGACY_BROADCAST: dict[str, Any] = {"broadcast": 0, "axis": None}
_LEGACY_ATTRS = ("consumed_inputs", "broadcast", "axis")


# ---------------------------------------------------------------- type inference helpers

def check_dtype(ctx: InferContext, index: int, allowed: Sequence[str]) -> TensorType:
    """The type of input ``index``, or an error if its dtype is not in ``allowed``."""
    tensor_type = ctx.type(index)
    if tensor_type.dtype not in allowed:
        raise ctx.error(f"input {index} has dtype {tensor_type.dtype}, but {ctx.op} takes "
                        f"{', '.join(allowed)}; insert a Cast to one of them")
    return tensor_type


def check_scalar(ctx: InferContext, index: int) -> None:
    """An error unless optional input ``index``, when given, holds exactly one element."""
    if ctx.has(index) and ctx.type(index).size != 1:
        raise ctx.error(f"input {index} must be a scalar, got {ctx.type(index)}")


def common_dtype(ctx: InferContext, types: Sequence[TensorType]) -> str:
    """The one dtype shared by ``types``, or an error listing them."""
    if len({t.dtype for t in types}) > 1:
        raise ctx.error(f"inputs {', '.join(map(str, types))} must share one dtype; "
                        "insert a Cast so they match")
    return types[0].dtype


def given_inputs(ctx: InferContext, minimum: int) -> range:
    """Indices of the inputs of a (variadic) op: at least ``minimum``, none omitted."""
    if len(ctx.types) < minimum or any(t is None for t in ctx.types):
        raise ctx.error(f"needs at least {minimum} input(s) and no omitted ones, "
                        f"got {len(ctx.types)}")
    return range(len(ctx.types))


def unary_infer(allowed: Sequence[str], result_dtype: str | None = None):
    """Infer: one output shaped like input 0, with its dtype unless ``result_dtype``."""

    def infer(ctx: InferContext):
        x = check_dtype(ctx, 0, allowed)
        return [TensorType(x.shape, result_dtype or x.dtype)]

    return infer


def legacy_operand_shape(a_shape: tuple[int, ...], b_shape: tuple[int, ...], axis: int,
                         fail: Callable[[str], Exception]) -> tuple[int, ...]:
    """B's shape as NumPy broadcasting must see it under opset < 7 ``broadcast=1, axis``.

    The old rule lays B's dims over A's dims ``axis, axis+1, ...``; trailing ones
    make NumPy's right-aligned broadcasting do the same.
    """
    start = axis + len(a_shape) if axis < 0 else axis
    trailing = len(a_shape) - start - len(b_shape)
    if start < 0 or trailing < 0:
        raise fail(f"legacy broadcast axis {axis} cannot place B {b_shape} inside A {a_shape}")
    return (*b_shape, *(1,) * trailing)


def _broadcast_result_shape(ctx: InferContext, types: Sequence[TensorType]) -> tuple[int, ...]:
    shapes = [t.shape for t in types]
    if ctx.attrs.get("broadcast") and ctx.attrs.get("axis") is not None:
        shapes[1] = legacy_operand_shape(shapes[0], shapes[1], ctx.attrs["axis"], ctx.error)
    return broadcast_shapes(ctx, shapes)


def broadcast_infer(allowed: Sequence[str], result_dtype: str | None = None,
                    minimum_inputs: int = 2):
    """Infer: one output, the broadcast of all inputs, which share one dtype from ``allowed``.

    Honours the opset < 7 ``broadcast``/``axis`` attributes of ops that declare them.
    """

    def infer(ctx: InferContext):
        types = [check_dtype(ctx, i, allowed) for i in given_inputs(ctx, minimum_inputs)]
        dtype = common_dtype(ctx, types)
        return [TensorType(_broadcast_result_shape(ctx, types), result_dtype or dtype)]

    return infer


def with_checks(infer, *checks: Callable[[InferContext], None]):
    """``infer`` preceded by attribute checks that raise ``ctx.error``."""

    def checked_infer(ctx: InferContext):
        for check in checks:
            check(ctx)
        return infer(ctx)

    return checked_infer


def attr_choice(name: str, choices: Sequence[Any]) -> Callable[[InferContext], None]:
    """A check that attribute ``name`` is one of ``choices``."""

    def check(ctx: InferContext) -> None:
        if ctx.attrs[name] not in choices:
            raise ctx.error(f"attribute {name}={ctx.attrs[name]!r} is not supported; "
                            f"use one of {', '.join(map(repr, choices))}")

    return check


def _reference_error(op: str) -> Callable[[str], Exception]:
    return lambda message: TypeInferenceError(f"{op}: {message}")


def _op_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    """The attributes a compute function uses: the legacy ones are handled by the wrapper."""
    return {k: v for k, v in attrs.items() if k not in _LEGACY_ATTRS}


# ---------------------------------------------------------------- unary math

_erf_of_python_float = np.frompyfunc(math.erf, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    """The error function elementwise, in ``x``'s dtype (NumPy has no erf ufunc)."""
    exact = np.asarray(_erf_of_python_float(np.asarray(x, np.float64)), np.float64)
    return exact.astype(x.dtype)


def _is_inf(x: np.ndarray, *, detect_negative: int, detect_positive: int) -> np.ndarray:
    return ((x == np.inf) & bool(detect_positive)) | ((x == -np.inf) & bool(detect_negative))


def _register_unary(name: str, compute: Callable[..., np.ndarray], allowed: Sequence[str], *,
                    result_dtype: str | None = None, attrs: dict[str, Any] | None = None,
                    doc: str) -> None:
    def reference(x, **attrs):
        with np.errstate(all="ignore"):  # log(-1), 1/0 and friends give NaN/inf as in IEEE
            result = compute(x, **_op_attrs(attrs))
        return np.asarray(result).astype(result_dtype or x.dtype, copy=False)

    reference.__doc__ = doc
    reference.__name__ = reference.__qualname__ = f"reference_{name}"
    register_op(name, infer=unary_infer(allowed, result_dtype), fusion=FusionKind.ELEMWISE,
                attrs=attrs)(reference)


for _name, _compute, _allowed, _attrs, _doc in [
    ("Abs", np.abs, NUMERIC_DTYPES, CONSUMED_INPUTS, "|x|."),
    ("Neg", np.negative, SIGNED_DTYPES, CONSUMED_INPUTS, "-x."),
    ("Exp", np.exp, FLOAT_DTYPES, CONSUMED_INPUTS, "e**x."),
    ("Log", np.log, FLOAT_DTYPES, CONSUMED_INPUTS, "Natural logarithm."),
    ("Sqrt", np.sqrt, FLOAT_DTYPES, CONSUMED_INPUTS, "Square root."),
    ("Reciprocal", np.reciprocal, FLOAT_DTYPES, CONSUMED_INPUTS, "1/x."),
    ("Floor", np.floor, FLOAT_DTYPES, CONSUMED_INPUTS, "Round down."),
    ("Ceil", np.ceil, FLOAT_DTYPES, CONSUMED_INPUTS, "Round up."),
    ("Round", np.rint, FLOAT_DTYPES, None, "Round to nearest, halves to even."),
    ("Sign", np.sign, NUMERIC_DTYPES, None, "-1, 0 or 1."),
    ("Sin", np.sin, FLOAT_DTYPES, None, "Sine."),
    ("Cos", np.cos, FLOAT_DTYPES, None, "Cosine."),
    ("Tan", np.tan, FLOAT_DTYPES, None, "Tangent."),
    ("Asin", np.arcsin, FLOAT_DTYPES, None, "Arcsine."),
    ("Acos", np.arccos, FLOAT_DTYPES, None, "Arccosine."),
    ("Atan", np.arctan, FLOAT_DTYPES, None, "Arctangent."),
    ("Sinh", np.sinh, FLOAT_DTYPES, None, "Hyperbolic sine."),
    ("Cosh", np.cosh, FLOAT_DTYPES, None, "Hyperbolic cosine."),
    ("Asinh", np.arcsinh, FLOAT_DTYPES, None, "Inverse hyperbolic sine."),
    ("Acosh", np.arccosh, FLOAT_DTYPES, None, "Inverse hyperbolic cosine."),
    ("Atanh", np.arctanh, FLOAT_DTYPES, None, "Inverse hyperbolic tangent."),
    ("Erf", erf, FLOAT_DTYPES, None, "Gauss error function."),
    ("Not", np.logical_not, BOOL_DTYPES, None, "Logical not."),
    ("BitwiseNot", np.invert, INT_DTYPES, None, "Bitwise complement."),
]:
    _register_unary(_name, _compute, _allowed, attrs=_attrs, doc=_doc)

_register_unary("IsNaN", np.isnan, FLOAT_DTYPES, result_dtype="bool", doc="x is NaN.")
_register_unary("IsInf", _is_inf, FLOAT_DTYPES, result_dtype="bool",
                attrs={"detect_negative": 1, "detect_positive": 1},
                doc="x is +inf (if detect_positive) or -inf (if detect_negative).")


# ---------------------------------------------------------------- binary ops

def _truncating_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Division as ONNX defines it: true division for floats, C-style truncation for ints."""
    if a.dtype.kind == "f":
        return a / b
    quotient = np.floor_divide(a, b)
    if a.dtype.kind == "i":
        # floor and truncation differ by one where the division is inexact and signs differ
        quotient = quotient + ((np.remainder(a, b) != 0) & ((a < 0) != (b < 0)))
    return quotient


def _modulo(a: np.ndarray, b: np.ndarray, *, fmod: int) -> np.ndarray:
    return np.fmod(a, b) if fmod else np.mod(a, b)


def _shift(x: np.ndarray, y: np.ndarray, *, direction: str) -> np.ndarray:
    """BitShift per opset 28: right shifts of signed ints are arithmetic, and amounts that
    are negative or at least the bit width leave only the sign fill (-1 or 0)."""
    x, y = np.broadcast_arrays(x, y)
    in_range = (y >= 0) & (y < 8 * x.dtype.itemsize)
    amount = np.where(in_range, y, 0)
    if direction == "LEFT":
        # shift the two's-complement bits as unsigned so bits past the sign bit drop out
        unsigned = np.dtype(f"uint{8 * x.dtype.itemsize}")
        shifted = np.left_shift(x.astype(unsigned), amount.astype(unsigned)).astype(x.dtype)
        fill = np.zeros((), x.dtype)
    else:
        shifted = np.right_shift(x, amount.astype(x.dtype))
        fill = np.where(x < 0, -1, 0).astype(x.dtype) if x.dtype.kind == "i" else 0
    return np.where(in_range, shifted, fill)


def _power(base: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    """Pow in the wider of both dtypes, or float64 for negative integer exponents (which
    have no integer result); the caller casts back to the base's dtype."""
    work = np.result_type(base.dtype, exponent.dtype)
    if work.kind in "iu" and exponent.dtype.kind == "i" and (exponent < 0).any():
        work = np.dtype("float64")
    return np.power(base.astype(work), exponent.astype(work))


def _infer_pow(ctx: InferContext):
    base = check_dtype(ctx, 0, ("int32", "int64") + FLOAT_DTYPES)
    exponent = check_dtype(ctx, 1, NUMERIC_DTYPES)
    return [TensorType(_broadcast_result_shape(ctx, [base, exponent]), base.dtype)]


def _register_binary(name: str, compute: Callable[..., np.ndarray], allowed: Sequence[str], *,
                     result_dtype: str | None = None, attrs: dict[str, Any] | None = None,
                     checks: Sequence[Callable[[InferContext], None]] = (),
                     infer=None, doc: str) -> None:
    fail = _reference_error(name)

    def reference(a, b, **attrs):
        if attrs.get("broadcast") and attrs.get("axis") is not None:
            b = b.reshape(legacy_operand_shape(a.shape, b.shape, attrs["axis"], fail))
        with np.errstate(all="ignore"):  # integer wrap-around and x/0 follow C and IEEE
            result = compute(a, b, **_op_attrs(attrs))
        return np.asarray(result).astype(result_dtype or a.dtype, copy=False)

    reference.__doc__ = doc
    reference.__name__ = reference.__qualname__ = f"reference_{name}"
    infer = infer or broadcast_infer(allowed, result_dtype)
    register_op(name, infer=with_checks(infer, *checks), fusion=FusionKind.BROADCAST,
                attrs=attrs)(reference)


_ARITHMETIC_ATTRS = {**LEGACY_BROADCAST, **CONSUMED_INPUTS}

for _name, _compute, _doc in [
    ("Add", np.add, "a + b (wrapping for integers)."),
    ("Sub", np.subtract, "a - b (wrapping for integers)."),
    ("Mul", np.multiply, "a * b (wrapping for integers)."),
    ("Div", _truncating_divide, "a / b; integer division truncates toward zero."),
]:
    _register_binary(_name, _compute, NUMERIC_DTYPES, attrs=_ARITHMETIC_ATTRS, doc=_doc)

_register_binary("Pow", _power, NUMERIC_DTYPES, attrs=LEGACY_BROADCAST, infer=_infer_pow,
                 doc="x ** y in the dtype of x (the exponent may have another dtype).")
_register_binary("Mod", _modulo, NUMERIC_DTYPES, attrs={"fmod": 0},
                 checks=[attr_choice("fmod", (0, 1))],
                 doc="Remainder with the divisor's sign (fmod=0) or the dividend's (fmod=1).")
_register_binary("BitShift", _shift, INT_DTYPES, attrs={"direction": REQUIRED},
                 checks=[attr_choice("direction", ("LEFT", "RIGHT"))],
                 doc="x shifted by y bits, LEFT or RIGHT (arithmetic for signed x).")

for _name, _compute, _allowed, _attrs in [
    ("And", np.logical_and, BOOL_DTYPES, LEGACY_BROADCAST),
    ("Or", np.logical_or, BOOL_DTYPES, LEGACY_BROADCAST),
    ("Xor", np.logical_xor, BOOL_DTYPES, LEGACY_BROADCAST),
    ("Equal", np.equal, ALL_DTYPES + (STRING_DTYPE,), LEGACY_BROADCAST),
    ("Less", np.less, NUMERIC_DTYPES, LEGACY_BROADCAST),
    ("Greater", np.greater, NUMERIC_DTYPES, LEGACY_BROADCAST),
    ("LessOrEqual", np.less_equal, NUMERIC_DTYPES, None),
    ("GreaterOrEqual", np.greater_equal, NUMERIC_DTYPES, None),
]:
    _register_binary(_name, _compute, _allowed, result_dtype="bool", attrs=_attrs,
                     doc=f"Elementwise {_compute.__name__}, a bool tensor.")

for _name, _compute in [("BitwiseAnd", np.bitwise_and), ("BitwiseOr", np.bitwise_or),
                        ("BitwiseXor", np.bitwise_xor)]:
    _register_binary(_name, _compute, INT_DTYPES, doc=f"Elementwise {_compute.__name__}.")


# ---------------------------------------------------------------- variadic ops

def _register_variadic(name: str, combine: Callable[[np.ndarray, np.ndarray], np.ndarray],
                       allowed: Sequence[str], doc: str, *, average: bool = False) -> None:
    def reference(*inputs, consumed_inputs=None):
        result = reduce(combine, inputs)
        if average:
            result = result / len(inputs)
        return np.asarray(result).astype(inputs[0].dtype)  # a copy even for one input

    reference.__doc__ = doc
    reference.__name__ = reference.__qualname__ = f"reference_{name}"
    register_op(name, infer=broadcast_infer(allowed, minimum_inputs=1),
                fusion=FusionKind.BROADCAST, attrs=CONSUMED_INPUTS)(reference)


_register_variadic("Max", np.maximum, NUMERIC_DTYPES, "Elementwise maximum of all inputs.")
_register_variadic("Min", np.minimum, NUMERIC_DTYPES, "Elementwise minimum of all inputs.")
_register_variadic("Sum", np.add, FLOAT_DTYPES, "Elementwise sum of all inputs.")
_register_variadic("Mean", np.add, FLOAT_DTYPES, "Elementwise mean of all inputs.",
                   average=True)


# ---------------------------------------------------------------- Where, Identity

#: dtypes that selection and copies move unchanged (strings are NumPy object arrays)
_MOVABLE_DTYPES = ALL_DTYPES + (STRING_DTYPE,)


def _infer_where(ctx: InferContext):
    condition = check_dtype(ctx, 0, BOOL_DTYPES)
    x, y = check_dtype(ctx, 1, _MOVABLE_DTYPES), check_dtype(ctx, 2, _MOVABLE_DTYPES)
    dtype = common_dtype(ctx, [x, y])
    return [TensorType(broadcast_shapes(ctx, [condition.shape, x.shape, y.shape]), dtype)]


@register_op("Where", infer=_infer_where, fusion=FusionKind.BROADCAST)
def where(condition, x, y):
    """x where condition holds, else y (all three broadcast)."""
    return np.where(condition, x, y)


@register_op("Identity", infer=unary_infer(_MOVABLE_DTYPES + EXTENDED_DTYPES),
             fusion=FusionKind.ELEMWISE)
def identity(x):
    """A copy of x."""
    return x.copy()


# ---------------------------------------------------------------- casts

#: what Cast and CastLike convert between: the IR's dtypes plus the narrow storage formats
CASTABLE_DTYPES = ALL_DTYPES + EXTENDED_DTYPES
_ROUND_MODES = ("up", "down", "nearest")
#: float8 formats whose ``saturate`` clamps out-of-range values to the largest finite one
_SATURATING_FLOAT8 = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz")
_FLOAT32_EXPONENT_ALL_ONES = 0xFF  # NaN/inf in float32, NaN in float8e8m0
_FLOAT32_LARGEST_EXPONENT = 0xFE


def cast_target_dtype(to: int | str, fail: Callable[[str], Exception]) -> str:
    """The IR dtype of Cast's ``to`` (an ONNX element type, or its name as in opset 1)."""
    if isinstance(to, str):
        try:
            to = TensorProto.DataType.Value(to.upper())
        except ValueError:
            raise fail(f"unknown target type to={to!r}") from None
    try:
        dtype = dtype_from_onnx(int(to))
    except TypeInferenceError:
        dtype = None
    if dtype not in CASTABLE_DTYPES:
        known = int(to) in TensorProto.DataType.values()
        name = TensorProto.DataType.Name(int(to)) if known else "an unknown type"
        raise fail(f"casting to {name} (to={to}) is not supported; "
                   f"supported targets: {', '.join(CASTABLE_DTYPES)}")
    return dtype


def _to_float8_e8m0(x: np.ndarray, saturate: int, round_mode: str) -> np.ndarray:
    """float8e8m0 (a bare power of two, bias 127 like float32) from float32 bit patterns:
    keep the exponent field and round by the mantissa as ``round_mode`` says. NaN and
    inf give NaN; the sign is dropped (negative inputs are undefined in ONNX)."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(np.int32)
    mantissa = bits & 0x7FFFFF
    if round_mode == "up":
        bump = mantissa != 0
    elif round_mode == "nearest":
        at_least_half = (mantissa & 0x400000) != 0
        bump = at_least_half & (((mantissa & 0x3FFFFF) != 0) | (exponent > 0))
    else:
        bump = np.zeros(bits.shape, bool)
    if saturate:
        bump &= exponent != _FLOAT32_LARGEST_EXPONENT
    special = exponent == _FLOAT32_EXPONENT_ALL_ONES
    code = np.where(special, _FLOAT32_EXPONENT_ALL_ONES, exponent + bump)
    return code.astype(np.uint8).view(np_dtype("float8_e8m0fnu"))


def convert(x: np.ndarray, dtype: str, saturate: int = 1, round_mode: str = "up") -> np.ndarray:
    """``x`` cast to IR dtype ``dtype`` with ONNX Cast semantics.

    Integers wrap, floats round to nearest even; float8 targets clamp to their
    largest finite value when ``saturate`` (else overflow gives NaN or inf), and
    float8e8m0 rounds as ``round_mode`` says. Out-of-range float -> int casts
    are undefined in ONNX and follow NumPy's C cast.
    """
    with np.errstate(invalid="ignore", over="ignore"):
        if dtype == "float8_e8m0fnu":
            return _to_float8_e8m0(x, saturate, round_mode)
        if dtype in _SATURATING_FLOAT8 and saturate and x.dtype.kind != "b":
            if x.dtype.name in EXTENDED_DTYPES:
                x = x.astype(np.float32)  # exact: every narrow format fits in float32
            largest = float(ml_dtypes.finfo(np_dtype(dtype)).max)
            x = np.clip(x, -largest, largest)
        return x.astype(np_dtype(dtype))


_CAST_CHECKS = (attr_choice("saturate", (0, 1)), attr_choice("round_mode", _ROUND_MODES))


def _infer_cast(ctx: InferContext):
    x = check_dtype(ctx, 0, CASTABLE_DTYPES)
    return [TensorType(x.shape, cast_target_dtype(ctx.attrs["to"], ctx.error))]


def _infer_cast_like(ctx: InferContext):
    x = check_dtype(ctx, 0, CASTABLE_DTYPES)
    return [TensorType(x.shape, check_dtype(ctx, 1, CASTABLE_DTYPES).dtype)]


@register_op("Cast", infer=with_checks(_infer_cast, *_CAST_CHECKS), fusion=FusionKind.ELEMWISE,
             attrs={"to": REQUIRED, "saturate": 1, "round_mode": "up"})
def cast(x, *, to, saturate, round_mode):
    """x converted to the element type ``to`` (see ``convert`` for the rules)."""
    return convert(x, cast_target_dtype(to, _reference_error("Cast")), saturate, round_mode)


@register_op("CastLike", infer=with_checks(_infer_cast_like, *_CAST_CHECKS),
             fusion=FusionKind.ELEMWISE, attrs={"saturate": 1, "round_mode": "up"})
def cast_like(x, target_type, *, saturate, round_mode):
    """x converted to the dtype of ``target_type`` (whose values are not read)."""
    return convert(x, target_type.dtype.name, saturate, round_mode)


# ---------------------------------------------------------------- Dropout

_DEFAULT_DROPOUT_RATIO = 0.5


def _dropout_ratio(ratio_operand: np.ndarray | None, ratio_attr: float | None) -> float:
    """The drop ratio: the opset >= 12 input, else the older attribute, else the default."""
    if ratio_operand is not None:
        return float(np.asarray(ratio_operand).reshape(-1)[0])
    return _DEFAULT_DROPOUT_RATIO if ratio_attr is None else float(ratio_attr)


def _dropout_training_problem(ratio: float, training: bool, seed: int | None) -> str | None:
    """Why a training-mode Dropout cannot run, or None when it can."""
    if not training or ratio == 0:
        return None
    if not 0 <= ratio < 1:
        return f"ratio {ratio} must lie in [0, 1) in training mode"
    if seed is None:
        return ("training_mode=True with ratio > 0 drops random elements; give the node a "
                "'seed' attribute for reproducible results, or run with training_mode=False")
    return None


def _infer_dropout(ctx: InferContext):
    data = check_dtype(ctx, 0, FLOAT_DTYPES)
    if ctx.has(1):
        check_dtype(ctx, 1, FLOAT_DTYPES)
    if ctx.has(2):
        check_dtype(ctx, 2, BOOL_DTYPES)
    check_scalar(ctx, 1)
    check_scalar(ctx, 2)
    training = ctx.values[2] if ctx.has(2) else False
    ratio_known = not ctx.has(1) or ctx.values[1] is not None
    if training is not None and ratio_known:  # otherwise checked when it runs
        ratio = _dropout_ratio(ctx.values[1] if ctx.has(1) else None, ctx.attrs["ratio"])
        problem = _dropout_training_problem(ratio, bool(np.any(training)), ctx.attrs["seed"])
        if problem:
            raise ctx.error(problem)
    return [data, TensorType(data.shape, "bool")]


@register_op("Dropout", infer=_infer_dropout, fusion=FusionKind.ELEMWISE,
             attrs={"seed": None, "ratio": None, "is_test": 0, **CONSUMED_INPUTS})
def dropout(data, ratio_operand=None, training_mode_operand=None, *, seed=None, ratio=None,
            is_test=0, consumed_inputs=None):
    """Dropout: the identity in inference mode (with an all-True mask).

    In training mode with a ``seed``, the elements kept are those where
    ``numpy.random.RandomState(seed).uniform(0, 1, shape) >= ratio`` (as in
    ONNX's reference), scaled by 1 / (1 - ratio). Opset < 7 ``is_test`` is
    ignored: a compiler runs inference, which is what opset 7 made the only mode.
    """
    drop_ratio = _dropout_ratio(ratio_operand, ratio)
    training = training_mode_operand is not None and bool(np.any(training_mode_operand))
    problem = _dropout_training_problem(drop_ratio, training, seed)
    if problem:
        raise InputError(f"Dropout: {problem}")
    if not training or drop_ratio == 0:
        return data.copy(), np.ones(data.shape, bool)
    keep = np.random.RandomState(seed).uniform(0.0, 1.0, data.shape) >= drop_ratio
    return (data * keep * (1.0 / (1.0 - drop_ratio))).astype(data.dtype), keep
