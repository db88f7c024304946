"""Elementwise and broadcasting ops."""

from __future__ import annotations

from .. import te
from ..errors import CompileError
from .common import elementwise, float_only
from .registry import register_compute

_UNARY_INTRINSICS = {
    "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Floor": "floor", "Ceil": "ceil",
    "Sin": "sin", "Cos": "cos", "Tan": "tan", "Tanh": "tanh", "Erf": "erf", "Asin": "asin",
    "Acos": "acos", "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh",
    "Acosh": "acosh", "Atanh": "atanh",
}


def _intrinsic(name: str):
    def compute(inputs, attrs, out_types):
        float_only(out_types[0].dtype, name)
        return [elementwise(inputs, out_types[0], lambda x: te.call_intrin(
            _UNARY_INTRINSICS[name], x), name.lower())]

    return compute


for _op in _UNARY_INTRINSICS:
    register_compute(_op)(_intrinsic(_op))


def _zero(dtype):
    return te.const(0, dtype)


@register_compute("Relu")
def relu(inputs, attrs, out_types):
    dtype = out_types[0].dtype
    return [elementwise(inputs, out_types[0], lambda x: te.maximum(x, _zero(dtype)), "relu")]


@register_compute("Neg")
def neg(inputs, attrs, out_types):
    return [elementwise(inputs, out_types[0], lambda x: -x, "neg")]


@register_compute("Abs")
def abs_(inputs, attrs, out_types):
    dtype = out_types[0].dtype
    if dtype.startswith("float"):
        return [elementwise(inputs, out_types[0], te.fabs, "abs")]
    return [elementwise(inputs, out_types[0],
                        lambda x: te.if_then_else(x < _zero(dtype), -x, x), "abs")]


@register_compute("Reciprocal")
def reciprocal(inputs, attrs, out_types):
    dtype = out_types[0].dtype
    float_only(dtype, "Reciprocal")
    return [elementwise(inputs, out_types[0], lambda x: te.const(1.0, dtype) / x, "reciprocal")]


@register_compute("Sigmoid")
def sigmoid(inputs, attrs, out_types):
    dtype = out_types[0].dtype
    float_only(dtype, "Sigmoid")
    one = te.const(1.0, dtype)
    return [elementwise(inputs, out_types[0], lambda x: one / (one + te.exp(-x)), "sigmoid")]


@register_compute("LeakyRelu")
def leaky_relu(inputs, attrs, out_types):
    dtype = out_types[0].dtype
    alpha = te.const(attrs["alpha"], dtype)
    return [elementwise(inputs, out_types[0], lambda x: te.if_then_else(
        x < _zero(dtype), x * alpha, x), "leaky_relu")]


@register_compute("HardSigmoid")
def hard_sigmoid(inputs, attrs, out_types):
    dtype = out_types[0].dtype
    a, b = te.const(attrs["alpha"], dtype), te.const(attrs["beta"], dtype)
    return [elementwise(inputs, out_types[0], lambda x: te.minimum(
        te.maximum(x * a + b, _zero(dtype)), te.const(1.0, dtype)), "hard_sigmoid")]


@register_compute("HardSwish")
def hard_swish(inputs, attrs, out_types):
    dtype = out_types[0].dtype
    sixth, half = te.const(1.0 / 6.0, dtype), te.const(0.5, dtype)
    return [elementwise(inputs, out_types[0], lambda x: x * te.minimum(
        te.maximum(x * sixth + half, _zero(dtype)), te.const(1.0, dtype)), "hard_swish")]


@register_compute("Clip")
def clip(inputs, attrs, out_types):
    x, lo, hi = (list(inputs) + [None, None])[:3]
    dtype = out_types[0].dtype
    shape = tuple(out_types[0].shape)
    lo_attr, hi_attr = attrs.get("min"), attrs.get("max")

    def body(*index):
        y = x[index]
        if lo is not None:
            y = te.maximum(y, lo[()])
        elif lo_attr is not None:
            y = te.maximum(y, te.const(lo_attr, dtype))
        if hi is not None:
            y = te.minimum(y, hi[()])
        elif hi_attr is not None:
            y = te.minimum(y, te.const(hi_attr, dtype))
        return y

    if (lo is not None and lo.shape != ()) or (hi is not None and hi.shape != ()):
        raise CompileError("Clip bounds must be scalars")
    return [te.compute(shape, body, name="clip", dtype=dtype)]


def _binary(name: str, fn):
    def compute(inputs, attrs, out_types):
        return [elementwise(inputs[:2], out_types[0], fn(out_types[0].dtype), name.lower())]

    return compute


def _div(dtype):
    if dtype.startswith("float"):
        return lambda a, b: a / b
    return te.truncdiv


register_compute("Add")(_binary("Add", lambda d: lambda a, b: a + b))
register_compute("Sub")(_binary("Sub", lambda d: lambda a, b: a - b))
register_compute("Mul")(_binary("Mul", lambda d: lambda a, b: a * b))
register_compute("Div")(_binary("Div", _div))


def _variadic(name: str, combine):
    def compute(inputs, attrs, out_types):
        given = [t for t in inputs if t is not None]

        def fn(*values):
            acc = values[0]
            for v in values[1:]:
                acc = combine(acc, v)
            if name == "Mean":
                acc = acc / te.const(float(len(values)), out_types[0].dtype)
            return acc

        return [elementwise(given, out_types[0], fn, name.lower())]

    return compute


register_compute("Max")(_variadic("Max", te.maximum))
register_compute("Min")(_variadic("Min", te.minimum))
register_compute("Sum")(_variadic("Sum", lambda a, b: a + b))


@register_compute("Mean")
def mean(inputs, attrs, out_types):
    float_only(out_types[0].dtype, "Mean")
    return _variadic("Mean", lambda a, b: a + b)(inputs, attrs, out_types)


@register_compute("Where")
def where(inputs, attrs, out_types):
    return [elementwise(inputs, out_types[0], te.if_then_else, "where")]


@register_compute("Identity", "Dropout")
def identity(inputs, attrs, out_types):
    if len(out_types) > 1:
        raise CompileError("Dropout with its mask output has no TE compute")
    return [elementwise(inputs[:1], out_types[0], lambda x: x, "identity")]


@register_compute("Cast")
def cast(inputs, attrs, out_types):
    src, dst = inputs[0].dtype, out_types[0].dtype
    if dst == "bool" or src == "bool" or "8" in dst and src.startswith("float"):
        raise CompileError(f"Cast {src} -> {dst} has no TE compute (saturation rules)")
    return [elementwise(inputs[:1], out_types[0], lambda x: te.cast(dst, x), "cast")]
