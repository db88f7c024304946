"""Quantization ops: (de)quantize linear, dynamic quantization and the integer /
quantized-linear forms of convolution and matrix multiplication.

Rounding is half to even (``np.rint``) and results saturate to the range of the
quantized type; integer products accumulate in int32, as the accelerator does.
"""

from __future__ import annotations

import numpy as np

from ..ir.types import FLOAT_DTYPES, TensorType, dtype_from_onnx
from .common import dtype_attribute, normalize_axis, require_dtype
from .nn import CONV_ATTRS, conv_nd, infer_conv, matmul_shape
from .registry import FusionKind, InferContext, register_op

#: the integer types a quantized tensor may have (the IR has no 2/4-bit or float8 types)
QUANT_DTYPES = ("int8", "uint8", "int16", "uint16", "int32")
#: 8-bit types of the QLinear* / *Integer ops
BYTE_DTYPES = ("int8", "uint8")


# --------------------------------------------------------------------------- shared helpers


def saturate_round(values: np.ndarray, dtype) -> np.ndarray:
    """Round half to even and saturate to the range of integer ``dtype``."""
    info = np.iinfo(dtype)
    return np.clip(np.rint(values), info.min, info.max).astype(dtype)


def quant_param_layout(ctx: InferContext, name: str, param: TensorType, x: TensorType) -> None:
    """Check that scale/zero point ``param`` is per-tensor, per-axis or blocked for ``x``.

    ``axis`` and ``block_size`` come from the node's attributes; a per-tensor
    parameter ignores them.
    """
    if param.size == 1 and param.ndim <= 1:
        return
    axis = normalize_axis(ctx, ctx.attrs["axis"], x.ndim)
    block_size = ctx.attrs["block_size"]
    if block_size:
        if block_size < 0:
            raise ctx.error(f"block_size {block_size} must be positive")
        blocks = -(-x.shape[axis] // block_size)
        expected = x.shape[:axis] + (blocks,) + x.shape[axis + 1:]
        if param.shape != expected:
            raise ctx.error(f"{name} {param} must have shape {expected} for blocked "
                            f"quantization of {x} along axis {axis} in blocks of {block_size}")
        return
    if param.shape != (x.shape[axis],):
        raise ctx.error(f"{name} {param} must be a scalar or have shape ({x.shape[axis]},) "
                        f"(per-axis along axis {axis} of {x}); set block_size for blocked "
                        "quantization")


def expand_quant_param(param: np.ndarray, shape: tuple[int, ...], axis: int,
                       block_size: int) -> np.ndarray:
    """``param`` (per-tensor, per-axis or blocked) made broadcastable against ``shape``."""
    if param.size == 1 and param.ndim <= 1:
        return param.reshape(())
    axis = axis % len(shape)
    if block_size:
        return np.repeat(param, block_size, axis=axis).take(range(shape[axis]), axis=axis)
    return param.reshape([-1 if i == axis else 1 for i in range(len(shape))])


# --------------------------------------------------------------------------- (de)quantize


def _quantized_dtype(ctx: InferContext) -> str:
    """QuantizeLinear's output type: the zero point's, else output_dtype, else uint8."""
    requested = dtype_attribute(ctx, "output_dtype", QUANT_DTYPES)
    if ctx.has(2):
        dtype = ctx.type(2).dtype
        if requested and requested != dtype:
            raise ctx.error(f"output_dtype {requested} differs from the zero point's {dtype}")
    else:
        dtype = requested or "uint8"
    require_dtype(ctx, "the quantized output", dtype, QUANT_DTYPES)
    return dtype


def _infer_quantize(ctx: InferContext):
    x, scale = ctx.type(0), ctx.type(1)
    require_dtype(ctx, "x", x.dtype, FLOAT_DTYPES + ("int32",))
    require_dtype(ctx, "y_scale", scale.dtype, FLOAT_DTYPES + ("int32",))
    dtype_attribute(ctx, "precision", FLOAT_DTYPES)
    dtype = _quantized_dtype(ctx)
    quant_param_layout(ctx, "y_scale", scale, x)
    if ctx.has(2):
        if ctx.type(2).shape != scale.shape:
            raise ctx.error(f"y_zero_point {ctx.type(2)} must have the shape of y_scale {scale}")
    return [TensorType(x.shape, dtype)]


@register_op("QuantizeLinear", infer=_infer_quantize, fusion=FusionKind.BROADCAST,
             attrs={"axis": 1, "block_size": 0, "output_dtype": 0, "precision": 0,
                    "saturate": 1})
def quantize_linear(x, y_scale, y_zero_point=None, *, axis, block_size, output_dtype,
                    precision, saturate):
    """ONNX QuantizeLinear: saturate(round_half_even(x / scale) + zero_point).

    Per-tensor, per-axis or blocked scales.  ``saturate`` only concerns float8
    outputs, which the IR does not have; integer outputs always saturate.
    """
    if y_zero_point is not None:
        dtype = y_zero_point.dtype
    else:
        dtype = np.dtype(dtype_from_onnx(output_dtype)) if output_dtype else np.dtype(np.uint8)
    scale = expand_quant_param(y_scale, x.shape, axis, block_size)
    if precision:
        compute = np.dtype(dtype_from_onnx(precision))
        x, scale = x.astype(compute, copy=False), scale.astype(compute, copy=False)
    # integers in float64 are exact, so adding the zero point cannot round again
    q = np.rint(x / scale).astype(np.float64)
    if y_zero_point is not None:
        q = q + expand_quant_param(y_zero_point, x.shape, axis, block_size)
    return saturate_round(q, dtype)


def _infer_dequantize(ctx: InferContext):
    x, scale = ctx.type(0), ctx.type(1)
    require_dtype(ctx, "x", x.dtype, QUANT_DTYPES)
    require_dtype(ctx, "x_scale", scale.dtype, FLOAT_DTYPES)
    quant_param_layout(ctx, "x_scale", scale, x)
    if ctx.has(2):
        zero = ctx.type(2)
        # a one-element scale with a scalar zero point (or the reverse) is per-tensor too
        per_tensor = zero.size == 1 and scale.size == 1 and max(zero.ndim, scale.ndim) <= 1
        if zero.dtype != x.dtype or (zero.shape != scale.shape and not per_tensor):
            raise ctx.error(f"x_zero_point {zero} must have x's dtype {x.dtype} and the shape "
                            f"of x_scale {scale}")
    dtype = dtype_attribute(ctx, "output_dtype", FLOAT_DTYPES) or scale.dtype
    return [TensorType(x.shape, dtype)]


@register_op("DequantizeLinear", infer=_infer_dequantize, fusion=FusionKind.BROADCAST,
             attrs={"axis": 1, "block_size": 0, "output_dtype": 0})
def dequantize_linear(x, x_scale, x_zero_point=None, *, axis, block_size, output_dtype):
    """ONNX DequantizeLinear: (x - zero_point) * scale, per-tensor, per-axis or blocked.

    The difference is exact in int64 and the product is rounded once, to the
    output type.
    """
    dtype = np.dtype(dtype_from_onnx(output_dtype)) if output_dtype else x_scale.dtype
    centered = x.astype(np.int64)
    if x_zero_point is not None:
        centered = centered - expand_quant_param(x_zero_point, x.shape, axis,
                                                 block_size).astype(np.int64)
    scale = expand_quant_param(x_scale, x.shape, axis, block_size).astype(np.float64)
    return (centered * scale).astype(dtype)


def _infer_dynamic_quantize(ctx: InferContext):
    x = ctx.type(0)
    require_dtype(ctx, "x", x.dtype, ("float32",))
    return [TensorType(x.shape, "uint8"), TensorType((), "float32"), TensorType((), "uint8")]


# Its global min/max reduction feeds every element, so it is never fused.
@register_op("DynamicQuantizeLinear", infer=_infer_dynamic_quantize, fusion=FusionKind.OPAQUE)
def dynamic_quantize_linear(x):
    """ONNX DynamicQuantizeLinear: uint8 quantization with a range that includes 0."""
    high = np.float32(max(0.0, float(np.max(x)))) if x.size else np.float32(0)
    low = np.float32(min(0.0, float(np.min(x)))) if x.size else np.float32(0)
    scale = np.float32((high - low) if high != low else 1.0) / np.float32(255)
    zero_point = np.rint(np.clip(np.float32(0) - low / scale, 0, 255))
    y = saturate_round(np.rint(x / scale).astype(np.float64) + zero_point, np.uint8)
    return y, np.array(scale, np.float32), np.array(zero_point, np.uint8)


# --------------------------------------------------------------------------- integer products


def _centered(values: np.ndarray, zero_point: np.ndarray | None, axis: int) -> np.ndarray:
    """``values - zero_point`` in int32; a 1-D zero point runs along ``axis``."""
    out = values.astype(np.int32)
    if zero_point is None:
        return out
    return out - _per_axis(zero_point.astype(np.int32), out.ndim, axis)


def _check_zero_point(ctx: InferContext, index: int, name: str, operand: TensorType,
                      per_axis_size: int) -> None:
    """A zero point must be a scalar or 1-D of ``per_axis_size``, with its operand's dtype."""
    if not ctx.has(index):
        return
    zero = ctx.type(index)
    if zero.dtype != operand.dtype:
        raise ctx.error(f"{name} {zero} must have its operand's dtype {operand.dtype}")
    if zero.size != 1 and zero.shape != (per_axis_size,):
        raise ctx.error(f"{name} {zero} must be a scalar or have shape ({per_axis_size},)")


def _check_scale(ctx: InferContext, index: int, name: str, per_axis_size: int) -> None:
    scale = ctx.type(index)
    require_dtype(ctx, name, scale.dtype, FLOAT_DTYPES)
    if scale.size != 1 and scale.shape != (per_axis_size,):
        raise ctx.error(f"{name} {scale} must be a scalar or have shape ({per_axis_size},)")


def _output_zero_point_dtype(ctx: InferContext, index: int) -> str:
    """The output type, given by the per-tensor output zero point at ``index``."""
    zero = ctx.type(index)
    require_dtype(ctx, "y_zero_point", zero.dtype, BYTE_DTYPES)
    if zero.size != 1:
        raise ctx.error(f"y_zero_point {zero} must be a scalar")
    return zero.dtype


def requantize(acc: np.ndarray, multiplier: np.ndarray, zero_point: np.ndarray | None,
               dtype) -> np.ndarray:
    """int32 accumulators to ``dtype``: round_half_even(acc * multiplier) + zero point.

    The multiplier (in_scale * w_scale / out_scale) is formed in the scales' own
    type, as ONNX does, and applied in float64, which holds every int32 exactly.
    """
    scaled = acc.astype(np.float64) * multiplier.astype(np.float64)
    if zero_point is not None:
        scaled = scaled + zero_point.astype(np.float64)
    return saturate_round(scaled, dtype)


def _per_axis(values: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    """A scalar or 1-D per-axis ``values`` made broadcastable along ``axis`` of rank ``ndim``."""
    if values.size == 1:
        return values.reshape(())
    return values.reshape([-1 if i == axis % ndim else 1 for i in range(ndim)])


def _check_conv_operands(ctx: InferContext, x_index: int, w_index: int):
    x, w = ctx.type(x_index), ctx.type(w_index)
    require_dtype(ctx, "x", x.dtype, BYTE_DTYPES)
    require_dtype(ctx, "w", w.dtype, BYTE_DTYPES)
    return x, w


def _conv_types(ctx: InferContext, x_index: int, w_index: int, bias_index: int | None,
                dtype: str) -> TensorType:
    """Output type of an integer conv, reusing Conv's shape checks on the operands."""
    operands = [ctx.types[x_index], ctx.types[w_index]]
    if bias_index is not None and ctx.has(bias_index):
        operands.append(ctx.types[bias_index])
    plain = InferContext(ctx.op, operands, [None] * len(operands), ctx.attrs, 1, ctx.node)
    return TensorType(infer_conv(plain)[0].shape, dtype)


def _infer_conv_integer(ctx: InferContext):
    x, w = _check_conv_operands(ctx, 0, 1)
    _check_zero_point(ctx, 2, "x_zero_point", x, 1)
    _check_zero_point(ctx, 3, "w_zero_point", w, w.shape[0])
    return [_conv_types(ctx, 0, 1, None, "int32")]


@register_op("ConvInteger", infer=_infer_conv_integer, fusion=FusionKind.OUT_FUSABLE,
             attrs=CONV_ATTRS)
def conv_integer(x, w, x_zero_point=None, w_zero_point=None, **attrs):
    """ONNX ConvInteger: conv of zero-point-centered 8-bit operands, int32 result."""
    return conv_nd(_centered(x, x_zero_point, 1), _centered(w, w_zero_point, 0),
                   acc_dtype=np.int32, **attrs)


def _infer_qlinear_conv(ctx: InferContext):
    x, w = _check_conv_operands(ctx, 0, 3)
    channels = w.shape[0]
    _check_scale(ctx, 1, "x_scale", 1)
    _check_scale(ctx, 4, "w_scale", channels)
    _check_scale(ctx, 6, "y_scale", 1)
    _check_zero_point(ctx, 2, "x_zero_point", x, 1)
    _check_zero_point(ctx, 5, "w_zero_point", w, channels)
    dtype = _output_zero_point_dtype(ctx, 7) if ctx.has(7) else x.dtype
    if ctx.has(8) and ctx.type(8).dtype != "int32":
        raise ctx.error(f"bias B {ctx.type(8)} must be int32")
    return [_conv_types(ctx, 0, 3, 8, dtype)]


@register_op("QLinearConv", infer=_infer_qlinear_conv, fusion=FusionKind.OUT_FUSABLE,
             attrs=CONV_ATTRS)
def qlinear_conv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
                 y_zero_point=None, B=None, **attrs):  # noqa: N803  (ONNX name)
    """ONNX QLinearConv: int32 conv of centered operands (+ int32 bias), requantized.

    ``w_scale`` and ``w_zero_point`` may be per output channel.
    """
    acc = conv_nd(_centered(x, x_zero_point, 1), _centered(w, w_zero_point, 0), B,
                  acc_dtype=np.int32, **attrs)
    multiplier = x_scale * _per_axis(w_scale, acc.ndim, 1) / y_scale
    dtype = y_zero_point.dtype if y_zero_point is not None else x.dtype
    return requantize(acc, multiplier, y_zero_point, dtype)


def _matmul_row_count(shape: tuple[int, ...]) -> int:
    return shape[-2] if len(shape) > 1 else 1


def _infer_integer_matmul(ctx: InferContext, a_index: int, b_index: int) -> tuple[int, ...]:
    a, b = ctx.type(a_index), ctx.type(b_index)
    require_dtype(ctx, "A", a.dtype, BYTE_DTYPES)
    require_dtype(ctx, "B", b.dtype, BYTE_DTYPES)
    return matmul_shape(ctx, a.shape, b.shape)


def _infer_matmul_integer(ctx: InferContext):
    shape = _infer_integer_matmul(ctx, 0, 1)
    a, b = ctx.type(0), ctx.type(1)
    _check_zero_point(ctx, 2, "a_zero_point", a, _matmul_row_count(a.shape))
    _check_zero_point(ctx, 3, "b_zero_point", b, b.shape[-1])
    return [TensorType(shape, "int32")]


def _centered_matmul_operands(a, a_zero_point, b, b_zero_point):
    """int32 ``a`` and ``b`` less their zero points (per row of A, per column of B)."""
    return _centered(a, a_zero_point, -2 if a.ndim > 1 else 0), _centered(b, b_zero_point, -1)


@register_op("MatMulInteger", infer=_infer_matmul_integer, fusion=FusionKind.OUT_FUSABLE)
def matmul_integer(a, b, a_zero_point=None, b_zero_point=None):
    """ONNX MatMulInteger: matmul of zero-point-centered 8-bit operands, int32 result.

    A 1-D a_zero_point runs along A's rows, a 1-D b_zero_point along B's columns.
    """
    a32, b32 = _centered_matmul_operands(a, a_zero_point, b, b_zero_point)
    return np.matmul(a32, b32)


def _infer_qlinear_matmul(ctx: InferContext):
    shape = _infer_integer_matmul(ctx, 0, 3)
    a, b = ctx.type(0), ctx.type(3)
    rows, cols = _matmul_row_count(a.shape), b.shape[-1]
    _check_scale(ctx, 1, "a_scale", rows)
    _check_scale(ctx, 4, "b_scale", cols)
    _check_scale(ctx, 6, "y_scale", 1)
    _check_zero_point(ctx, 2, "a_zero_point", a, rows)
    _check_zero_point(ctx, 5, "b_zero_point", b, cols)
    return [TensorType(shape, _output_zero_point_dtype(ctx, 7))]


@register_op("QLinearMatMul", infer=_infer_qlinear_matmul, fusion=FusionKind.OUT_FUSABLE)
def qlinear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    """ONNX QLinearMatMul: int32 matmul of centered operands, requantized to y's type."""
    a32, b32 = _centered_matmul_operands(a, a_zero_point, b, b_zero_point)
    acc = np.matmul(a32, b32)
    # a per-row scale lies along the output's rows, a per-column one along its columns
    multiplier = _per_axis(a_scale, 2, 0) * _per_axis(b_scale, 1, 0) / y_scale
    return requantize(acc, multiplier, y_zero_point, y_zero_point.dtype)
