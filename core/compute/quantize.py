"""Quantization: (de)quantize linear, the integer and quantized-linear convolution and
matrix product (heterocc's integer Requantize is in ``qnn.py``).

Every compute is bit-exact with its NumPy reference (``heterocc.ops.quantize`` and
``heterocc.ops.qnn``): rounding is half to even in the dtype the reference rounds in,
zero points are added in float64 (exact for every integer involved), integer products
accumulate in int32 with wrap-around.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .. import te
from ..errors import CompileError
from ..ir.types import dtype_from_onnx
from .common import optional_input, require_native
from .nn import conv_frame, matmul, pad
from .reduction import reduce_stage, require_nonempty
from .registry import register_compute


def _division_dtype(a: str, b: str) -> str:
    """The dtype of NumPy's true division of ``a`` by ``b`` arrays."""
    return np.true_divide(np.ones(1, a), np.ones(1, b)).dtype.name


def _is_per_tensor(param) -> bool:
    return math.prod(param.shape) == 1 and param.ndim <= 1


def _param_at(param, index: Sequence, axis: int, block_size: int):
    """Quantization parameter ``param`` (per-tensor, per-axis or blocked along ``axis``)
    for the element at ``index``."""
    if _is_per_tensor(param):
        return param[(0,) * param.ndim]
    if block_size:
        return param[tuple(i // block_size if k == axis else i for k, i in enumerate(index))]
    return param[index[axis]]


def _saturating_cast(value, dtype: str):
    """Float ``value`` (integral already) clamped to integer ``dtype``'s range and
    converted, as ``np.clip(...).astype(dtype)``.

    NaN has no defined integer result (NumPy gives whatever the C cast does), so the
    clamp need not propagate it and ``value`` is read once instead of four times."""
    info = np.iinfo(dtype)
    low, high = te.const(float(info.min), value.dtype), te.const(float(info.max), value.dtype)
    return te.cast(dtype, te.minimum(te.maximum(value, low), high))


#: integer types whose every value (and every difference of two) float32 holds exactly
_NARROW = ("int8", "uint8", "int16", "uint16")


def _quantize_tail_dtype(work: str, out: str, zero_dtype: str | None) -> str:
    """The float type ``round(x / scale) + zero_point`` and its clamp run in: float32
    where the quotient is float32 and the output and zero point narrow integers, else
    float64 (the reference's). Exact: below 2**24 the float32 sum of the integral
    quotient and the zero point is the integer itself; from there on both types give
    sums beyond every narrow type's range, which the clamp saturates alike."""
    narrow = out in _NARROW and (zero_dtype is None or zero_dtype in _NARROW)
    return "float32" if work == "float32" and narrow else "float64"


@register_compute("QuantizeLinear")
def quantize_linear(inputs, attrs, out_types):
    """saturate(round_half_even(x / scale) + zero_point), per tensor, axis or block."""
    x, scale, zero_point = inputs[0], inputs[1], optional_input(inputs, 2)
    out = out_types[0].dtype
    dtypes = [x.dtype, scale.dtype, out] + ([zero_point.dtype] if zero_point is not None else [])
    require_native(dtypes, "QuantizeLinear")
    if attrs["precision"]:
        precision = dtype_from_onnx(attrs["precision"])
        require_native([precision], "QuantizeLinear precision")
        x_dtype = scale_dtype = precision
    else:
        x_dtype, scale_dtype = x.dtype, scale.dtype
    work = _division_dtype(x_dtype, scale_dtype)
    axis = attrs["axis"] % max(x.ndim, 1)
    block_size = attrs["block_size"]

    tail = _quantize_tail_dtype(work, out, None if zero_point is None else zero_point.dtype)

    def body(*index):
        # the operands pass through the precision dtype first, as the reference casts them
        numerator = te.cast(work, te.cast(x_dtype, x[index]))
        denominator = te.cast(work, te.cast(scale_dtype,
                                            _param_at(scale, index, axis, block_size)))
        q = te.cast(tail, te.call_intrin("round", numerator / denominator))
        if zero_point is not None:
            q = q + te.cast(tail, _param_at(zero_point, index, axis, block_size))
        return _saturating_cast(q, out)

    return [te.compute(tuple(out_types[0].shape), body, name="quantize", dtype=out)]


@register_compute("DequantizeLinear")
def dequantize_linear(inputs, attrs, out_types):
    """(x - zero_point) * scale: the difference exact in int64, the product in float64,
    rounded once to the output dtype."""
    x, scale, zero_point = inputs[0], inputs[1], optional_input(inputs, 2)
    out = out_types[0].dtype
    require_native([x.dtype, scale.dtype, out], "DequantizeLinear")
    axis = attrs["axis"] % max(x.ndim, 1)
    block_size = attrs["block_size"]

    def body(*index):
        centered = te.cast("int64", x[index])
        if zero_point is not None:
            centered = centered - te.cast("int64", _param_at(zero_point, index, axis,
                                                             block_size))
        # (float64, then rounded: a float32 product would be exact too, but the codegen
        # contracts float32 arithmetic into FMA with the ops a function fuses after it)
        product = te.cast("float64", centered) * te.cast(
            "float64", _param_at(scale, index, axis, block_size))
        return te.cast(out, product)

    return [te.compute(tuple(out_types[0].shape), body, name="dequantize", dtype=out)]


# ---------------------------------------------------------------- integer products


def _centered(tensor, zero_point, axis: int | None, name: str):
    """int32 ``tensor - zero_point``; a zero point with several entries runs along
    ``axis`` (an inlined stage)."""

    def body(*index):
        value = te.cast("int32", tensor[index])
        if zero_point is None:
            return value
        if _is_per_tensor(zero_point):
            offset = zero_point[(0,) * zero_point.ndim]
        else:
            offset = zero_point[index[axis]]
        return value - te.cast("int32", offset)

    return te.compute(tuple(tensor.shape), body, name=name, dtype="int32")


def _require_bytes(tensors, op: str) -> None:
    for t in tensors:
        if t is not None and t.dtype not in ("int8", "uint8"):
            raise CompileError(f"{op} on {t.dtype} has no TE compute (int8/uint8 only)")


def _integer_conv(x, w, bias, attrs, name: str, described: dict | None = None):
    """int32 direct NCHW convolution of centered operands ``x`` and ``w`` (+ int32 bias).
    ``described``: the attribute the result carries (see :func:`conv_integer`)."""
    frame = conv_frame(x, w, attrs, name)
    # padding is applied to the centered input, so padded positions contribute 0
    data = pad(x, frame.pads[:2], frame.pads[2:], 0, f"{name}_pad")
    rc, ry, rx = frame.rc, frame.ry, frame.rx
    (sy, sx), (dy, dx) = frame.strides, frame.dilations

    def body(batch, k, y, column):
        return te.sum(data[batch, frame.input_channel(k), y * sy + ry * dy,
                           column * sx + rx * dx] * w[k, rc, ry, rx], axis=[rc, ry, rx])

    acc = te.compute((frame.batch, frame.out_channels, *frame.out_size), body, name=name,
                     dtype="int32", attrs=described)
    if bias is None:
        return acc
    return te.compute(acc.shape, lambda b, k, y, column: acc[b, k, y, column] + bias[k],
                      name=f"{name}_bias", dtype="int32")


def _matmul_zero_point_axes(a, b):
    """Axes along which 1-D zero points of A (its rows) and B (its columns) run."""
    return (a.ndim - 2 if a.ndim > 1 else 0), b.ndim - 1


@register_compute("ConvInteger")
def conv_integer(inputs, attrs, out_types):
    """int32 convolution of zero-point-centered 8-bit operands (w's zero point may be
    per output channel). The result carries ``conv_integer``: its uncentered operands,
    zero points and attributes, from which a target may compute the same sums its own
    way (the CPU's dot-product instructions: ``targets/llvm/schedules/int8_conv.py``)."""
    x, w = inputs[0], inputs[1]
    x_zero, w_zero = optional_input(inputs, 2), optional_input(inputs, 3)
    _require_bytes([x, w], "ConvInteger")
    described = {"conv_integer": {"x": x, "w": w, "x_zero": x_zero, "w_zero": w_zero,
                                  "attrs": dict(attrs)}}
    return [_integer_conv(_centered(x, x_zero, 1, "x_centered"),
                          _centered(w, w_zero, 0, "w_centered"), None, attrs, "conv_integer",
                          described)]


# the input zero point, the one value in which quantized layers of one shape differ
# beside their weights and requantization tables, is read by the kernel (once per
# call), so that those layers share a kernel
conv_integer.unfolded_scalars = (2,)


@register_compute("MatMulInteger")
def matmul_integer(inputs, attrs, out_types):
    """int32 matmul of zero-point-centered 8-bit operands (A's zero point may be per row,
    B's per column)."""
    a, b = inputs[0], inputs[1]
    _require_bytes([a, b], "MatMulInteger")
    a_axis, b_axis = _matmul_zero_point_axes(a, b)
    return [matmul(_centered(a, optional_input(inputs, 2), a_axis, "a_centered"),
                   _centered(b, optional_input(inputs, 3), b_axis, "b_centered"),
                   "matmul_integer", "int32")]


def _requantized(acc, multiplier_at, zero_point, out: str, name: str):
    """round_half_even(acc * multiplier + zero_point) saturated to ``out``, in float64
    (exact for int32 accumulators); ``multiplier_at(index)`` gives the multiplier."""

    def body(*index):
        value = te.cast("float64", acc[index]) * multiplier_at(index)
        if zero_point is not None:
            value = value + te.cast("float64", zero_point[(0,) * zero_point.ndim])
        return _saturating_cast(te.call_intrin("round", value), out)

    return te.compute(acc.shape, body, name=name, dtype=out)


def _scale(tensor, index):
    """A scale tensor's entry at ``index`` (a one-element tensor ignores it)."""
    return tensor[(0,) * tensor.ndim] if math.prod(tensor.shape) == 1 else tensor[index]


def _scale_product(x_scale, w_scale, y_scale):
    """``lambda index: x_scale * w_scale[index] / y_scale`` in the scales' dtype, as the
    reference forms the multiplier, then widened to float64."""
    dtype = np.result_type(x_scale.dtype, w_scale.dtype, y_scale.dtype).name

    def at(w_index):
        product = te.cast(dtype, _scale(x_scale, ())) * te.cast(dtype, _scale(w_scale, w_index))
        return te.cast("float64", product / te.cast(dtype, _scale(y_scale, ())))

    return dtype, at


@register_compute("QLinearConv")
def qlinear_conv(inputs, attrs, out_types):
    """ConvInteger (+ int32 bias) requantized by x_scale * w_scale / y_scale (w_scale per
    output channel or not) to the output zero point's dtype."""
    x, x_scale, x_zero, w, w_scale, w_zero, y_scale = inputs[:7]
    y_zero, bias = optional_input(inputs, 7), optional_input(inputs, 8)
    _require_bytes([x, w], "QLinearConv")
    dtype, multiplier = _scale_product(x_scale, w_scale, y_scale)
    require_native([dtype], "QLinearConv scales")
    acc = _integer_conv(_centered(x, x_zero, 1, "x_centered"),
                        _centered(w, w_zero, 0, "w_centered"), bias, attrs, "qlinear_conv_acc")
    return [_requantized(acc, lambda index: multiplier((index[1],)), y_zero,
                         out_types[0].dtype, "qlinear_conv")]


@register_compute("QLinearMatMul")
def qlinear_matmul(inputs, attrs, out_types):
    """MatMulInteger requantized by a_scale * b_scale / y_scale (a_scale per row, b_scale
    per column, or per tensor) to y_zero_point's dtype."""
    a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = inputs[:8]
    _require_bytes([a, b], "QLinearMatMul")
    a_axis, b_axis = _matmul_zero_point_axes(a, b)
    acc = matmul(_centered(a, a_zero, a_axis, "a_centered"),
                 _centered(b, b_zero, b_axis, "b_centered"), "qlinear_matmul_acc", "int32")
    dtype = np.result_type(a_scale.dtype, b_scale.dtype, y_scale.dtype).name
    require_native([dtype], "QLinearMatMul scales")
    rows = a.ndim > 1 and math.prod(a_scale.shape) != 1
    columns = math.prod(b_scale.shape) != 1

    def multiplier(index):
        # a per-row scale lies along the output's rows, a per-column one along its columns
        row_scale = a_scale[index[-2] if b.ndim > 1 else index[-1]] if rows else \
            a_scale[(0,) * a_scale.ndim]
        column_scale = b_scale[index[-1]] if columns else b_scale[(0,) * b_scale.ndim]
        product = te.cast(dtype, row_scale) * te.cast(dtype, column_scale)
        return te.cast("float64", product / te.cast(dtype, _scale(y_scale, ())))

    return [_requantized(acc, multiplier, y_zero, out_types[0].dtype, "qlinear_matmul")]


@register_compute("DynamicQuantizeLinear")
def dynamic_quantize_linear(inputs, attrs, out_types):
    """uint8 quantization over the range [min(x, 0), max(x, 0)], in float32 as the
    reference computes it: scale = range / 255, zero point = round(-low / scale)."""
    x = inputs[0]
    require_native([x.dtype], "DynamicQuantizeLinear")
    require_nonempty(x.shape, "DynamicQuantizeLinear")
    axes = list(range(x.ndim))
    f32 = "float32"
    zero, one = te.const(0.0, f32), te.const(1.0, f32)
    high = reduce_stage(x, axes, "max", lambda i: x[i], "dql_max", f32, keepdims=False)
    low = reduce_stage(x, axes, "min", lambda i: x[i], "dql_min", f32, keepdims=False)

    def scale_body():
        top, bottom = te.maximum(high[()], zero), te.minimum(low[()], zero)
        spread = te.if_then_else(te.equal(top, bottom), one, top - bottom)
        return spread / te.const(255.0, f32)

    scale = te.compute((), scale_body, name="dql_scale", dtype=f32)
    zero_point = te.compute((), lambda: te.call_intrin("round", te.minimum(te.maximum(
        zero - te.minimum(low[()], zero) / scale[()], zero), te.const(255.0, f32))),
        name="dql_zero_point", dtype=f32)
    y = te.compute(x.shape, lambda *i: _saturating_cast(
        te.cast("float64", te.call_intrin("round", x[i] / scale[()]))
        + te.cast("float64", zero_point[()]), "uint8"), name="dql", dtype="uint8")
    return [y, scale, te.compute((), lambda: te.cast("uint8", zero_point[()]),
                                 name="dql_zero_point_u8", dtype="uint8")][:len(out_types)]
