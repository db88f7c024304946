"""Activation functions: Relu and its relatives, sigmoid-like curves, Gelu, Clip, and the
gated SwiGLU."""

from __future__ import annotations

import functools
import math

import numpy as np

from ..ir.types import FLOAT_DTYPES, TensorType
from .common import broadcast_shapes, typed_input
from .elementwise import (
    CONSUMED_INPUTS,
    NUMERIC_DTYPES,
    SIGNED_DTYPES,
    attr_choice,
    check_dtype,
    check_scalar,
    common_dtype,
    erf,
    unary_infer,
    with_checks,
)
from .registry import FusionKind, InferContext, register_op

_FLOAT_UNARY = unary_infer(FLOAT_DTYPES)


def in_working_precision(compute):
    """Run ``compute`` on float32 copies of float16 operands (chains of exp/tanh lose too
    much in half precision) and return the dtype of the first operand."""

    @functools.wraps(compute)
    def wrapper(x, *operands, **attrs):
        widened = [a.astype(np.float32) if a is not None and a.dtype == np.float16 else a
                   for a in (x, *operands)]
        with np.errstate(over="ignore", under="ignore"):  # exp overflow saturates correctly
            result = compute(*widened, **attrs)
        return np.asarray(result).astype(x.dtype, copy=False)

    return wrapper


def sigmoid_of(x: np.ndarray) -> np.ndarray:
    """1 / (1 + e**-x) without overflow: e**-|x| never exceeds 1."""
    small = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + small), small / (1 + small))


def softplus_of(x: np.ndarray) -> np.ndarray:
    """log(1 + e**x) without overflow."""
    return np.logaddexp(0, x)


@register_op("Relu", infer=unary_infer(SIGNED_DTYPES), fusion=FusionKind.ELEMWISE,
             attrs=CONSUMED_INPUTS)
def relu(x, *, consumed_inputs=None):
    """max(x, 0)."""
    return np.maximum(x, np.zeros((), x.dtype))


@register_op("LeakyRelu", infer=_FLOAT_UNARY, fusion=FusionKind.ELEMWISE,
             attrs={"alpha": 0.01, **CONSUMED_INPUTS})
@in_working_precision
def leaky_relu(x, *, alpha, consumed_inputs=None):
    """x for x >= 0, alpha * x below."""
    return np.where(x >= 0, x, alpha * x)


_PRELU_DTYPES = FLOAT_DTYPES + ("int32", "int64", "uint32", "uint64")


def prelu_slope_shape(x_shape: tuple[int, ...], slope_shape: tuple[int, ...]):
    """The shape to view the slope in, or None if it does not fit ``x_shape``.

    ONNX broadcasts the slope to X unidirectionally; models from opset < 7
    give a per-channel slope of shape (C,), which is laid over axis 1.
    """
    try:
        if np.broadcast_shapes(x_shape, slope_shape) == tuple(x_shape):
            return tuple(slope_shape)
    except ValueError:
        pass
    if len(slope_shape) == 1 and len(x_shape) >= 2 and slope_shape[0] == x_shape[1]:
        return (slope_shape[0], *(1,) * (len(x_shape) - 2))
    return None


def _infer_prelu(ctx: InferContext):
    x, slope = check_dtype(ctx, 0, _PRELU_DTYPES), check_dtype(ctx, 1, _PRELU_DTYPES)
    common_dtype(ctx, [x, slope])
    if prelu_slope_shape(x.shape, slope.shape) is None:
        raise ctx.error(f"slope {slope} must broadcast to X {x} (or be per-channel, "
                        f"shape ({x.shape[1] if x.ndim > 1 else 'C'},))")
    return [x]


@register_op("PRelu", infer=_infer_prelu, fusion=FusionKind.BROADCAST, attrs=CONSUMED_INPUTS)
@in_working_precision
def prelu(x, slope, *, consumed_inputs=None):
    """x for x >= 0, slope * x below (slope broadcast to x)."""
    slope = slope.reshape(prelu_slope_shape(x.shape, slope.shape))
    return np.where(x >= 0, x, slope * x)


@register_op("Sigmoid", infer=_FLOAT_UNARY, fusion=FusionKind.ELEMWISE, attrs=CONSUMED_INPUTS)
@in_working_precision
def sigmoid(x, *, consumed_inputs=None):
    """1 / (1 + e**-x)."""
    return sigmoid_of(x)


@register_op("HardSigmoid", infer=_FLOAT_UNARY, fusion=FusionKind.ELEMWISE,
             attrs={"alpha": 0.2, "beta": 0.5, **CONSUMED_INPUTS})
@in_working_precision
def hard_sigmoid(x, *, alpha, beta, consumed_inputs=None):
    """max(0, min(1, alpha * x + beta))."""
    return np.clip(alpha * x + beta, 0, 1)


@register_op("HardSwish", infer=_FLOAT_UNARY, fusion=FusionKind.ELEMWISE)
@in_working_precision
def hard_swish(x):
    """x * max(0, min(1, x / 6 + 1/2))."""
    return x * np.clip(x / 6 + 0.5, 0, 1)


@register_op("Tanh", infer=_FLOAT_UNARY, fusion=FusionKind.ELEMWISE, attrs=CONSUMED_INPUTS)
@in_working_precision
def tanh(x, *, consumed_inputs=None):
    """Hyperbolic tangent."""
    return np.tanh(x)


@register_op("Softplus", infer=_FLOAT_UNARY, fusion=FusionKind.ELEMWISE)
@in_working_precision
def softplus(x):
    """log(1 + e**x)."""
    return softplus_of(x)


@register_op("Softsign", infer=_FLOAT_UNARY, fusion=FusionKind.ELEMWISE)
@in_working_precision
def softsign(x):
    """x / (1 + |x|)."""
    return x / (1 + np.abs(x))


@register_op("Elu", infer=_FLOAT_UNARY, fusion=FusionKind.ELEMWISE,
             attrs={"alpha": 1.0, **CONSUMED_INPUTS})
@in_working_precision
def elu(x, *, alpha, consumed_inputs=None):
    """x for x > 0, alpha * (e**x - 1) otherwise."""
    return np.where(x > 0, x, alpha * np.expm1(x))


@register_op("Selu", infer=_FLOAT_UNARY, fusion=FusionKind.ELEMWISE,
             attrs={"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875,
                    **CONSUMED_INPUTS})
@in_working_precision
def selu(x, *, alpha, gamma, consumed_inputs=None):
    """gamma * x for x > 0, gamma * alpha * (e**x - 1) otherwise."""
    return gamma * np.where(x > 0, x, alpha * np.expm1(x))


@register_op("Celu", infer=_FLOAT_UNARY, fusion=FusionKind.ELEMWISE, attrs={"alpha": 1.0})
@in_working_precision
def celu(x, *, alpha):
    """max(0, x) + min(0, alpha * (e**(x / alpha) - 1))."""
    return np.maximum(x, 0) + np.minimum(0, alpha * np.expm1(x / alpha))


@register_op("ThresholdedRelu", infer=_FLOAT_UNARY, fusion=FusionKind.ELEMWISE,
             attrs={"alpha": 1.0})
@in_working_precision
def thresholded_relu(x, *, alpha):
    """x for x > alpha, 0 otherwise."""
    return np.where(x > alpha, x, 0)


@register_op("Gelu", infer=with_checks(_FLOAT_UNARY, attr_choice("approximate", ("none", "tanh"))),
             fusion=FusionKind.ELEMWISE, attrs={"approximate": "none"})
@in_working_precision
def gelu(x, *, approximate):
    """x * Phi(x) with the normal CDF Phi exact (approximate='none') or by its tanh form."""
    if approximate == "tanh":
        # in float64, rounded once: in float32, 1 + tanh cancels for x << 0 and the
        # reference itself would be off by more than a compiled kernel may differ from it
        wide = np.asarray(x, np.float64)
        y = 0.5 * wide * (1 + np.tanh(math.sqrt(2 / math.pi) * (wide + 0.044715 * wide ** 3)))
        return y.astype(np.asarray(x).dtype)
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


@register_op("Mish", infer=_FLOAT_UNARY, fusion=FusionKind.ELEMWISE)
@in_working_precision
def mish(x):
    """x * tanh(softplus(x))."""
    return x * np.tanh(softplus_of(x))


@register_op("Swish", infer=_FLOAT_UNARY, fusion=FusionKind.ELEMWISE, attrs={"alpha": 1.0})
@in_working_precision
def swish(x, *, alpha):
    """x * sigmoid(alpha * x)."""
    return x * sigmoid_of(alpha * x)


@register_op("Shrink", infer=unary_infer(NUMERIC_DTYPES), fusion=FusionKind.ELEMWISE,
             attrs={"bias": 0.0, "lambd": 0.5})
@in_working_precision
def shrink(x, *, bias, lambd):
    """x + bias below -lambd, x - bias above lambd, 0 in between."""
    return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0))


def _infer_clip(ctx: InferContext):
    x = check_dtype(ctx, 0, NUMERIC_DTYPES)
    bounds = [check_dtype(ctx, i, NUMERIC_DTYPES) for i in (1, 2) if ctx.has(i)]
    common_dtype(ctx, [x, *bounds])
    check_scalar(ctx, 1)
    check_scalar(ctx, 2)
    broadcast_shapes(ctx, [x.shape] + [b.shape for b in bounds])
    return [TensorType(x.shape, x.dtype)]


def _clip_bound(operand: np.ndarray | None, legacy_value: float | None, dtype: np.dtype):
    """One bound as a scalar of ``dtype``: the input (opset >= 11), else the attribute."""
    if operand is not None:
        return np.asarray(operand).reshape(())
    return None if legacy_value is None else np.asarray(legacy_value).astype(dtype)


@register_op("Clip", infer=_infer_clip, fusion=FusionKind.BROADCAST,
             attrs={"min": None, "max": None, **CONSUMED_INPUTS})
def clip(x, low=None, high=None, *, min=None, max=None, consumed_inputs=None):
    """x limited to [low, high]; everything becomes high when low > high.

    The bounds are optional inputs since opset 11, ``min``/``max`` attributes before.
    """
    low, high = _clip_bound(low, min, x.dtype), _clip_bound(high, max, x.dtype)
    result = x if low is None else np.maximum(x, low)
    return (result if high is None else np.minimum(result, high)).astype(x.dtype)


# ------------------------------------------------------------------------------- SwiGLU

#: float formats SwiGLU takes (ONNX's T)
_SWIGLU_FLOATS = FLOAT_DTYPES + ("bfloat16",)


def _infer_swiglu(ctx: InferContext):
    gate = typed_input(ctx, 0, "A", _SWIGLU_FLOATS)
    value = typed_input(ctx, 1, "B", (gate.dtype,))
    if gate.shape != value.shape:
        raise ctx.error(f"A {gate} and B {value} must have identical shapes (SwiGLU does not "
                        "broadcast); Expand or Split them to match")
    return [gate]


@register_op("SwiGLU", infer=_infer_swiglu, fusion=FusionKind.ELEMWISE, attrs={"alpha": 1.0})
def swiglu(gate, value, *, alpha):
    """Swish_alpha(A) * B, with Swish_alpha(a) = a * sigmoid(alpha * a)."""
    return (swish(gate, alpha=alpha) * value).astype(gate.dtype, copy=False)
