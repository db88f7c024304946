"""Activation functions: Relu and its relatives, Tanh and sigmoid-like curves, Gelu, Clip,
SwiGLU.

They follow the NumPy references of ``heterocc.ops.activation``; float-only ones take
float32/float64 (float16 has no native LLVM conversion), and NaN propagates through
every clamp as it does in NumPy.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from .. import te
from ..errors import CompileError
from ..ops.activation import prelu_slope_shape
from .common import elementwise, float_only, require_native
from .elementwise import clamp, is_float_dtype, nan_maximum, nan_minimum, unary
from .registry import register_compute

#: below this magnitude expm1 and log1p use their Taylor series (5 terms: relative error
#: under 2e-16), above it exp(x) - 1 and log(1 + x) in float64 lose at most 1.2e-13.
_SERIES_LIMIT = 1e-3


def _horner(x, coefficients):
    """``c0 + c1 x + c2 x**2 + ...`` for Python-float coefficients."""
    value = te.const(coefficients[-1], x.dtype)
    for c in reversed(coefficients[:-1]):
        value = value * x + te.const(c, x.dtype)
    return value


def _in_float64(fn):
    """``fn`` evaluated in float64 and rounded back to the argument's dtype.

    The usual cancellation-free tricks for expm1/log1p (Kahan's) are undone by the
    fast-math reassociation the code generator allows, so precision comes from float64.
    """

    def wrapped(x):
        return te.cast(x.dtype, fn(te.cast("float64", x)))

    return wrapped


@_in_float64
def expm1(x):
    """``e**x - 1``, accurate near 0 (-1 at -inf, inf at inf)."""
    series = x * _horner(x, [1.0, 1 / 2, 1 / 6, 1 / 24, 1 / 120])
    return te.if_then_else(te.fabs(x) < te.const(_SERIES_LIMIT, x.dtype), series,
                           te.exp(x) - te.const(1.0, x.dtype))


@_in_float64
def log1p(x):
    """``log(1 + x)`` for x >= 0, accurate near 0."""
    series = x * _horner(x, [1.0, -1 / 2, 1 / 3, -1 / 4, 1 / 5])
    return te.if_then_else(x < te.const(_SERIES_LIMIT, x.dtype), series,
                           te.log(x + te.const(1.0, x.dtype)))


def sigmoid(x):
    """1 / (1 + e**-x): e**-x overflows to inf only where the result is 0 anyway."""
    one = te.const(1.0, x.dtype)
    return one / (one + te.exp(-x))


def softplus(x):
    """log(1 + e**x) without overflow: max(x, 0) + log1p(e**-|x|)."""
    return nan_maximum(x, te.const(0.0, x.dtype)) + log1p(te.exp(-te.fabs(x)))


def read_once(x):
    """``x`` itself when reading it is a plain load (an input, or a stage the target
    materializes: a reduction or a kept stage), else a materialized copy.

    An activation that reads its input many times would otherwise copy the whole
    inlined expression of the input each time; along a chain of such activations the
    copies multiply, until lowering and code generation take minutes."""
    if isinstance(x.op, te.PlaceholderOp) or x.op.reduce_axis or x.op.attrs.get("keep"):
        return x
    return te.compute(tuple(x.shape), lambda *i: x[i], name=f"{x.op.name}_once",
                      dtype=x.dtype, attrs={"keep": True})


def _float_activation(name: str, make_fn: Callable, *, reads_input_often: bool):
    """The compute of a float-only unary activation; ``make_fn(dtype, attrs)`` gives the
    scalar function, which reads its argument more than twice if ``reads_input_often``."""

    def compute(inputs, attrs, out_types):
        dtype = out_types[0].dtype
        float_only(dtype, name)
        x = read_once(inputs[0]) if reads_input_often else inputs[0]
        return [elementwise([x], out_types[0], make_fn(dtype, attrs), name.lower())]

    return compute


def _relu(dtype, attrs):
    return lambda x: nan_maximum(x, te.const(0, dtype))


def _leaky_relu(dtype, attrs):
    alpha = te.const(attrs["alpha"], dtype)
    return lambda x: te.if_then_else(x >= te.const(0.0, dtype), x, alpha * x)


def _thresholded_relu(dtype, attrs):
    alpha = te.const(attrs["alpha"], dtype)
    return lambda x: te.if_then_else(x > alpha, x, te.const(0.0, dtype))


def _hard_sigmoid(dtype, attrs):
    alpha, beta = te.const(attrs["alpha"], dtype), te.const(attrs["beta"], dtype)
    return lambda x: clamp(alpha * x + beta, te.const(0.0, dtype), te.const(1.0, dtype))


def _hard_swish(dtype, attrs):
    sixth, half = te.const(1.0 / 6.0, dtype), te.const(0.5, dtype)
    zero, one = te.const(0.0, dtype), te.const(1.0, dtype)
    # maxnum/minnum (which drop a NaN) are exact here: the factor is NaN only where x is,
    # and the product with x is NaN there anyway; the factor x / 6 + 1/2 is never -0.
    # Reading x twice (NumPy's clamp reads its argument four times) lets the function
    # stay one expression, which a convolution finishes in its register tile.
    return lambda x: x * te.minimum(te.maximum(x * sixth + half, zero), one)


def _elu(dtype, attrs):
    alpha = te.const(attrs["alpha"], dtype)
    return lambda x: te.if_then_else(x > te.const(0.0, dtype), x, alpha * expm1(x))


def _selu(dtype, attrs):
    elu = _elu(dtype, attrs)
    gamma = te.const(attrs["gamma"], dtype)
    return lambda x: gamma * elu(x)


def _celu(dtype, attrs):
    alpha = te.const(attrs["alpha"], dtype)
    zero = te.const(0.0, dtype)
    if attrs["alpha"] > 0:
        # max(0, x) + min(0, alpha * expm1(x / alpha)) has one nonzero term for alpha > 0
        return lambda x: te.if_then_else(x > zero, x, alpha * expm1(x / alpha))
    return lambda x: nan_maximum(x, zero) + nan_minimum(zero, alpha * expm1(x / alpha))


def _softsign(dtype, attrs):
    return lambda x: x / (te.const(1.0, dtype) + te.fabs(x))


def _gelu(dtype, attrs):
    half, one = te.const(0.5, dtype), te.const(1.0, dtype)
    if attrs["approximate"] == "tanh":
        scale, cubic = te.const(math.sqrt(2 / math.pi), dtype), te.const(0.044715, dtype)
        # tanh in float64 rounded to dtype, for the reason erf is below: a vector float32
        # tanh (libmvec's AVX2 one has several ulp of error) shows through 1 + tanh
        return lambda x: half * x * (one + te.cast(dtype, te.tanh(
            te.cast("float64", scale * (x + cubic * x * x * x)))))
    if attrs["approximate"] != "none":
        raise CompileError(f"Gelu approximate={attrs['approximate']!r} has no TE compute")
    root_two = te.const(math.sqrt(2), dtype)
    # erf in float64 rounded to dtype, as the reference does: 1 + erf cancels for x << 0,
    # so a float32 erf's last-bit error would show in the result
    return lambda x: half * x * (one + te.cast(dtype, te.erf(te.cast("float64", x / root_two))))


def _swish(dtype, attrs):
    alpha = te.const(attrs["alpha"], dtype)
    return lambda x: x * sigmoid(alpha * x)


_FLOAT_ACTIVATIONS = {
    "LeakyRelu": _leaky_relu,
    "ThresholdedRelu": _thresholded_relu,
    "HardSigmoid": _hard_sigmoid,
    "HardSwish": _hard_swish,
    "Sigmoid": lambda dtype, attrs: sigmoid,
    "Softplus": lambda dtype, attrs: softplus,
    "Softsign": _softsign,
    "Elu": _elu,
    "Selu": _selu,
    "Celu": _celu,
    "Gelu": _gelu,
    "Mish": lambda dtype, attrs: lambda x: x * te.tanh(softplus(x)),
    "Swish": _swish,
}

#: activations whose scalar function reads its argument more than twice
_READ_INPUT_OFTEN = frozenset({"Softplus", "Elu", "Selu", "Celu", "Gelu", "Mish"})

for _op, _make in _FLOAT_ACTIVATIONS.items():
    register_compute(_op)(_float_activation(_op, _make,
                                            reads_input_often=_op in _READ_INPUT_OFTEN))


@register_compute("Relu")
def relu(inputs, attrs, out_types):
    """max(x, 0), on floats and signed integers."""
    dtype = out_types[0].dtype
    return [elementwise(inputs[:1], out_types[0], _relu(dtype, attrs), "relu")]


@register_compute("Shrink")
def shrink(inputs, attrs, out_types):
    """x + bias below -lambd, x - bias above lambd, else 0; on integers the float
    attributes promote the arithmetic to float64 and the result truncates back, as in
    NumPy."""
    dtype = out_types[0].dtype
    work = dtype if is_float_dtype(dtype) else "float64"
    bias, lambd = te.const(attrs["bias"], work), te.const(attrs["lambd"], work)
    zero = te.const(0.0, work)

    def fn(x):
        x = te.cast(work, x)
        value = te.if_then_else(x < -lambd, x + bias,
                                te.if_then_else(x > lambd, x - bias, zero))
        return te.cast(dtype, value)

    return [elementwise([read_once(inputs[0])], out_types[0], fn, "shrink")]


@register_compute("PRelu")
def prelu(inputs, attrs, out_types):
    """x for x >= 0, slope * x below; the slope broadcasts to x (a 1-D slope of C
    entries runs along axis 1, as in opset < 7 models)."""
    x, slope = read_once(inputs[0]), inputs[1]
    dtype = out_types[0].dtype
    view = prelu_slope_shape(tuple(x.shape), tuple(slope.shape))
    if view is None:
        raise CompileError(f"PRelu slope {list(slope.shape)} does not fit X {list(x.shape)}")
    if tuple(view) != tuple(slope.shape):
        per_channel = slope
        slope = te.compute(view, lambda c, *rest: per_channel[c], name="prelu_slope",
                           dtype=per_channel.dtype)
    zero = te.const(0, dtype)
    return [elementwise([x, slope], out_types[0],
                        lambda v, s: te.if_then_else(v >= zero, v, s * v), "prelu")]


@register_compute("Clip")
def clip(inputs, attrs, out_types):
    """x limited to [low, high] (inputs since opset 11, ``min``/``max`` attributes
    before); everything becomes high when low > high, as in NumPy."""
    x, low, high = (list(inputs) + [None, None])[:3]
    dtype = out_types[0].dtype

    def bound(tensor, legacy_value):
        if tensor is not None:
            return tensor[(0,) * tensor.ndim]  # a one-element tensor, of rank 0 or more
        return None if legacy_value is None else te.const(legacy_value, dtype)

    for tensor in (low, high):
        if tensor is not None and math.prod(tensor.shape) != 1:
            raise CompileError(f"Clip bounds must hold one element, got {list(tensor.shape)}")

    def body(*index):
        value = x[index]
        lo, hi = bound(low, attrs.get("min")), bound(high, attrs.get("max"))
        if lo is not None and hi is not None:
            return clamp(value, lo, hi)
        if lo is not None:
            return nan_maximum(value, lo)
        return nan_minimum(value, hi) if hi is not None else value

    require_native([dtype], "Clip")
    return [te.compute(tuple(out_types[0].shape), body, name="clip", dtype=dtype)]


@register_compute("SwiGLU")
def swiglu(inputs, attrs, out_types):
    """Swish_alpha(A) * B (same shapes, no broadcasting)."""
    out = out_types[0]
    float_only(out.dtype, "SwiGLU")
    swish = _swish(out.dtype, attrs)
    return [elementwise(inputs[:2], out, lambda a, b: swish(a) * b, "swiglu")]


register_compute("Tanh")(unary(
    "Tanh", lambda dtype, attrs: lambda x: te.call_intrin("tanh", x), floats_only=True))
