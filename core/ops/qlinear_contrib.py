"""ONNX Runtime's quantized contrib ops (domain ``com.microsoft``), as written by
``onnxruntime.quantization`` in the QOperator format: ``QGemm``, ``QLinearAdd``,
``QLinearMul``, ``QLinearGlobalAveragePool``, ``QLinearAveragePool``,
``QLinearConcat``, ``QLinearSigmoid``, ``QLinearLeakyRelu`` and ``QLinearSoftmax``.

They live in the Graph IR as ``com.microsoft.<op>``; the ``expand_qoperator``
pass (``heterocc.passes.qoperator``) rewrites each into its QDQ form
(DequantizeLinear -> float op -> QuantizeLinear) before anything else sees it.

The NumPy references reproduce the arithmetic of ONNX Runtime's x86-64 CPU
kernels (MLAS), float32 roundings included, so that their integer results are
those of ONNX Runtime and not only those of the formula in the op's
documentation. Where the two differ, by one step of the output type (1 LSB)
at a near tie, the op's docstring says why; ``docs/quantized-ops.md`` sums it
up. The QDQ expansion computes the formula as ONNX QDQ semantics define it
(round half to even, then add the zero point), so it agrees with these
references to within the same 1 LSB.
"""

from __future__ import annotations

import numpy as np

from ..ir.types import TensorType
from .activation import sigmoid_of
from .common import broadcast_shapes, broadcasts_to, normalize_axis, require_dtype
from .nn import pool_geometry, pool_windows
from .reduction import softmax
from .registry import (
    MS_DOMAIN,
    REQUIRED,
    FusionKind,
    InferContext,
    get_op,
    register_op,
)

#: the 8-bit types of the quantized tensors
BYTE_DTYPES = ("int8", "uint8")

_F32 = np.float32


# --------------------------------------------------------------------------- type checks


def _check_scale(ctx: InferContext, index: int, name: str, per_axis: int = 1) -> None:
    """A float32 scale: one element, or ``per_axis`` elements (1-D) when that is > 1."""
    scale = ctx.type(index)
    require_dtype(ctx, name, scale.dtype, ("float32",))
    if scale.size != 1 and (per_axis == 1 or scale.shape != (per_axis,)):
        allowed = "one element" if per_axis == 1 else f"one element or shape ({per_axis},)"
        raise ctx.error(f"{name} {scale} must have {allowed}")


def _check_zero_point(ctx: InferContext, index: int, name: str, dtype: str,
                      per_axis: int = 1, required: bool = False) -> None:
    """An optional zero point of ``dtype`` with one (or ``per_axis``) elements."""
    if not ctx.has(index):
        if required:
            raise ctx.error(f"{name} (input {index}) is required")
        return
    zero = ctx.type(index)
    if zero.dtype != dtype:
        raise ctx.error(f"{name} {zero} must have the dtype {dtype} of its tensor")
    if zero.size != 1 and (per_axis == 1 or zero.shape != (per_axis,)):
        raise ctx.error(f"{name} {zero} must have one element"
                        + (f" or shape ({per_axis},)" if per_axis > 1 else ""))


def _quantized_input(ctx: InferContext, index: int, name: str) -> TensorType:
    x = ctx.type(index)
    require_dtype(ctx, name, x.dtype, BYTE_DTYPES)
    return x


def _check_unary(ctx: InferContext, zero_required: bool = False) -> TensorType:
    """X, X_scale, X_zero_point, Y_scale, Y_zero_point: the layout of the unary ops."""
    x = _quantized_input(ctx, 0, "X")
    _check_scale(ctx, 1, "X_scale")
    _check_zero_point(ctx, 2, "X_zero_point", x.dtype, required=zero_required)
    _check_scale(ctx, 3, "Y_scale")
    _check_zero_point(ctx, 4, "Y_zero_point", x.dtype, required=zero_required)
    return x


def _to_channels_first(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (shape[0], shape[-1], *shape[1:-1])


def _to_channels_last(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (shape[0], *shape[2:], shape[1])


# --------------------------------------------------------------------------- arithmetic


def _scalar(value: np.ndarray | None, dtype=None):
    """The one element of a per-tensor parameter (0 when absent)."""
    if value is None:
        return 0 if dtype is None else dtype(0)
    item = np.asarray(value).reshape(-1)[0]
    return item if dtype is None else dtype(item)


def _zero(value: np.ndarray | None) -> int:
    return int(_scalar(value))


def _dequantize(x: np.ndarray, scale, zero: int) -> np.ndarray:
    """``scale * (x - zero)`` as MLAS forms it: the integer difference, converted to
    float32 (exactly), times the float32 scale (rounded once)."""
    return (x.astype(np.int32) - zero).astype(_F32) * _F32(scale)


def _saturate(values: np.ndarray, dtype) -> np.ndarray:
    """Round half to even (the x86 conversion MLAS uses) and saturate to ``dtype``."""
    info = np.iinfo(dtype)
    return np.clip(np.rint(values), info.min, info.max).astype(dtype)


def _quantize(values: np.ndarray, scale, zero: int, dtype) -> np.ndarray:
    """MlasQuantizeLinear: round_half_even(float32(values / scale)) + zero, saturated."""
    info = np.iinfo(dtype)
    rounded = np.rint(values.astype(_F32) / _F32(scale)).astype(np.float64)
    return np.clip(rounded + zero, info.min, info.max).astype(dtype)


def _fma32(a: np.ndarray, b, c: np.ndarray) -> np.ndarray:
    """float32 fused multiply-add: ``a * b + c`` rounded once to float32.

    The product of an 8-bit integer and a float32 is exact in float64, and so is
    its sum with a float32 of similar magnitude, so the one rounding is the
    final cast.
    """
    return (np.asarray(a, np.float64) * np.float64(b) + np.asarray(c, np.float64)).astype(_F32)


def _scalar_operand(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> str | None:
    """Which operand ONNX Runtime's broadcaster hands to the kernel as one repeated
    element ('a' or 'b'), or None when both arrive as full spans.

    Its innermost span runs over the trailing output axes; an operand of one
    element, or whose innermost non-trivial output axis it broadcasts along,
    is a scalar for every span.
    """
    if int(np.prod(a_shape, dtype=np.int64)) == 1:
        return "a"
    if int(np.prod(b_shape, dtype=np.int64)) == 1:
        return "b"
    rank = max(len(a_shape), len(b_shape))
    a = (1,) * (rank - len(a_shape)) + tuple(a_shape)
    b = (1,) * (rank - len(b_shape)) + tuple(b_shape)
    for da, db in zip(reversed(a), reversed(b)):
        if max(da, db) == 1:
            continue
        if da == 1:
            return "a"
        if db == 1:
            return "b"
        return None
    return None


# --------------------------------------------------------------------------- QLinearAdd / Mul


def _infer_binary(ctx: InferContext):
    a = _quantized_input(ctx, 0, "A")
    b = _quantized_input(ctx, 3, "B")
    if a.dtype != b.dtype:
        raise ctx.error(f"A {a} and B {b} must have one dtype")
    for index, name in ((1, "A_scale"), (4, "B_scale"), (6, "C_scale")):
        _check_scale(ctx, index, name)
    for index, name in ((2, "A_zero_point"), (5, "B_zero_point"), (7, "C_zero_point")):
        _check_zero_point(ctx, index, name, a.dtype)
    return [TensorType(broadcast_shapes(ctx, [a.shape, b.shape]), a.dtype)]


@register_op("QLinearAdd", infer=_infer_binary, fusion=FusionKind.BROADCAST,
             domain=MS_DOMAIN)
def qlinear_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale,
                c_zero_point=None):
    """com.microsoft QLinearAdd: C = (A_scale (A - A_zp) + B_scale (B - B_zp)) / C_scale
    + C_zp, NumPy broadcasting, per-tensor parameters.

    As ONNX Runtime's AVX2 kernel computes it: with the float32 ratios
    ``ra = A_scale / C_scale``, ``rb = B_scale / C_scale`` and the constant
    ``k = C_zp - (ra A_zp + rb B_zp)``, ``C = round(fma(A, ra, fma(B, rb, k)))``
    (an operand the broadcaster repeats as one element is folded into ``k``
    first, with a separate multiply and add), rounding half to even and
    saturating. The zero point is added *before* rounding and the ratios are
    rounded to float32, so at a near tie the result can be 1 LSB from the
    exact formula and from the QDQ form (which rounds, then adds the zero
    point); ONNX Runtime's SSE2 (no FMA) and ARM (fixed-point) kernels have
    their own such ties.
    """
    dtype = a.dtype
    ra = _F32(_scalar(a_scale, _F32) / _scalar(c_scale, _F32))
    rb = _F32(_scalar(b_scale, _F32) / _scalar(c_scale, _F32))
    za, zb, zc = _zero(a_zero_point), _zero(b_zero_point), _zero(c_zero_point)
    fixed = _F32(_F32(zc) - (_F32(ra * _F32(za)) + _F32(rb * _F32(zb))))
    shape = np.broadcast_shapes(a.shape, b.shape)
    af = np.broadcast_to(a, shape).astype(_F32)
    bf = np.broadcast_to(b, shape).astype(_F32)
    scalar = _scalar_operand(a.shape, b.shape)
    if scalar == "a":
        folded = (fixed + af * ra).astype(_F32)
        total = _fma32(bf, rb, folded)
    elif scalar == "b":
        folded = (fixed + bf * rb).astype(_F32)
        total = _fma32(af, ra, folded)
    else:
        total = _fma32(af, ra, _fma32(bf, rb, np.broadcast_to(fixed, shape)))
    return _saturate(total, dtype)


@register_op("QLinearMul", infer=_infer_binary, fusion=FusionKind.BROADCAST,
             domain=MS_DOMAIN)
def qlinear_mul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale,
                c_zero_point=None):
    """com.microsoft QLinearMul: C = A_scale (A - A_zp) * B_scale (B - B_zp) / C_scale
    + C_zp, NumPy broadcasting, per-tensor parameters.

    As ONNX Runtime's kernel computes it: the exact integer product
    ``(A - A_zp)(B - B_zp)``, converted to float32, times the float32 ratio
    ``A_scale * B_scale / C_scale``, plus C_zp in float32, rounded half to even
    and saturated. The zero point is added before rounding and the ratio is
    rounded to float32, so at a near tie the result can be 1 LSB from the exact
    formula and from the QDQ form.
    """
    dtype = a.dtype
    ratio = _F32(_F32(_scalar(a_scale, _F32) * _scalar(b_scale, _F32))
                 / _scalar(c_scale, _F32))
    product = (a.astype(np.int32) - _zero(a_zero_point)) * \
        (b.astype(np.int32) - _zero(b_zero_point))
    scaled = (product.astype(_F32) * ratio).astype(_F32) + _F32(_zero(c_zero_point))
    return _saturate(scaled.astype(_F32), dtype)


# --------------------------------------------------------------------------- pooling


def _infer_global_pool(ctx: InferContext):
    x = _check_unary(ctx)
    if x.ndim < 3:
        raise ctx.error(f"X {x} must have rank 3 or more")
    first = 1 if ctx.attrs["channels_last"] else 2
    shape = x.shape[:first] + (1,) * (x.ndim - 2) + x.shape[first + x.ndim - 2:]
    return [TensorType(shape, x.dtype)]


@register_op("QLinearGlobalAveragePool", infer=_infer_global_pool,
             fusion=FusionKind.REDUCTION, attrs={"channels_last": 0}, domain=MS_DOMAIN)
def qlinear_global_average_pool(x, x_scale, x_zero_point, y_scale, y_zero_point=None, *,
                                channels_last):
    """com.microsoft QLinearGlobalAveragePool: the mean of each channel over every
    spatial axis, requantized; ``channels_last`` takes N x spatial... x C.

    As ONNX Runtime computes it: the exact int32 sum ``S - x_zp * n`` of the ``n``
    pixels, times the float32 scale ``x_scale / (y_scale * n)``, rounded half
    to even, plus y_zp, saturated. Scaling the sum by a rounded ``1 / n`` instead
    of dividing the float mean can move a near tie by 1 LSB against the QDQ
    form (DequantizeLinear -> GlobalAveragePool -> QuantizeLinear).
    """
    dtype = x.dtype
    axes = tuple(range(1, x.ndim - 1)) if channels_last else tuple(range(2, x.ndim))
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    total = x.astype(np.int64).sum(axis=axes, keepdims=True) - _zero(x_zero_point) * count
    scale = _F32(_scalar(x_scale, _F32) / _F32(_scalar(y_scale, _F32) * _F32(count)))
    scaled = total.astype(np.int32).astype(_F32) * scale
    info = np.iinfo(dtype)
    return np.clip(np.rint(scaled).astype(np.int64) + _zero(y_zero_point),
                   info.min, info.max).astype(dtype)


_POOL_ATTRS = {"auto_pad": "NOTSET", "ceil_mode": 0, "channels_last": 0,
               "count_include_pad": 0, "kernel_shape": REQUIRED, "pads": None,
               "strides": None}


def _pool_attrs(attrs: dict) -> dict:
    """The attributes of the float AveragePool (NCHW) that does the same pooling."""
    return {"auto_pad": attrs["auto_pad"], "ceil_mode": attrs["ceil_mode"],
            "count_include_pad": attrs["count_include_pad"], "dilations": None,
            "kernel_shape": attrs["kernel_shape"], "pads": attrs["pads"],
            "strides": attrs["strides"]}


def _infer_average_pool(ctx: InferContext):
    x = _check_unary(ctx)
    if x.ndim < 3:
        raise ctx.error(f"X {x} must have rank 3 or more")
    nchw = _to_channels_first(x.shape) if ctx.attrs["channels_last"] else x.shape
    geo = pool_geometry(nchw, ctx.attrs, ctx)
    shape = (nchw[0], nchw[1], *geo.out)
    return [TensorType(_to_channels_last(shape) if ctx.attrs["channels_last"] else shape,
                       x.dtype)]


@register_op("QLinearAveragePool", infer=_infer_average_pool, fusion=FusionKind.REDUCTION,
             attrs=_POOL_ATTRS, domain=MS_DOMAIN)
def qlinear_average_pool(x, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None, *,
                         channels_last, count_include_pad, **attrs):
    """com.microsoft QLinearAveragePool: AveragePool of the dequantized input,
    quantized again (``channels_last`` takes N x spatial... x C).

    As ONNX Runtime computes it: each window's dequantized float32 values summed
    in row-major order in float32, divided by the element count (the whole
    kernel with ``count_include_pad``, even where a ceil_mode window runs past
    the pads), then ``round(y / y_scale + y_zp)`` in float32. The zero point is
    added before rounding, so at a near tie the result can be 1 LSB from the QDQ
    form (which rounds, then adds it).
    """
    dtype = x.dtype
    if channels_last:
        x = np.moveaxis(x, -1, 1)
    geo = pool_geometry(x.shape, attrs)
    n = len(geo.kernel)
    values = _dequantize(x, _scalar(x_scale, _F32), _zero(x_zero_point))
    windows = pool_windows(values, geo, _F32(0))
    taps = windows.reshape(*windows.shape[:-n], -1)
    total = np.zeros(taps.shape[:-1], _F32)
    for k in range(taps.shape[-1]):  # one float32 addition per tap, in window order
        total = total + taps[..., k]
    if count_include_pad:
        counts = _F32(np.prod(geo.kernel))
    else:
        present = np.ones(x.shape[2:], _F32)
        counts = pool_windows(present, geo, _F32(0)).reshape(*geo.out, -1).sum(axis=-1)
    mean = (total / counts).astype(_F32)
    shifted = (mean / _scalar(y_scale, _F32)).astype(_F32) + _F32(_zero(y_zero_point))
    y = _saturate(shifted.astype(_F32), dtype)
    return np.moveaxis(y, 1, -1) if channels_last else y


# --------------------------------------------------------------------------- QLinearConcat


def _infer_concat(ctx: InferContext):
    tuples = len(ctx.types) - 2
    if tuples < 3 or tuples % 3:
        raise ctx.error(f"takes Y_scale, Y_zero_point and then (X, X_scale, X_zero_point) "
                        f"per input; got {len(ctx.types)} inputs")
    _check_scale(ctx, 0, "Y_scale")
    _check_zero_point(ctx, 1, "Y_zero_point", ctx.type(1).dtype, required=True)
    dtype = ctx.type(1).dtype
    require_dtype(ctx, "Y_zero_point", dtype, BYTE_DTYPES)
    tensors = []
    for k, index in enumerate(range(2, len(ctx.types), 3)):
        x = _quantized_input(ctx, index, f"input {k}")
        if x.dtype != dtype:
            raise ctx.error(f"input {k} {x} must have Y_zero_point's dtype {dtype}")
        _check_scale(ctx, index + 1, f"the scale of input {k}")
        _check_zero_point(ctx, index + 2, f"the zero point of input {k}", dtype, required=True)
        tensors.append(x)
    plain = InferContext(ctx.op, tensors, [None] * len(tensors), {"axis": ctx.attrs["axis"]},
                         1, ctx.node)
    return get_op("Concat").infer(plain)


@register_op("QLinearConcat", infer=_infer_concat, fusion=FusionKind.INJECTIVE,
             attrs={"axis": REQUIRED}, domain=MS_DOMAIN)
def qlinear_concat(y_scale, y_zero_point, *tuples, axis):
    """com.microsoft QLinearConcat: inputs (Y_scale, Y_zp, X0, X0_scale, X0_zp, X1, ...),
    each input requantized to Y's parameters, then concatenated along ``axis``.

    As ONNX Runtime computes it: an input with Y's scale and zero point is
    copied; any other goes through DequantizeLinear and MlasQuantizeLinear in
    float32 (``round(x_scale (x - x_zp) / y_scale) + y_zp``), which is the QDQ
    form exactly.
    """
    dtype = y_zero_point.dtype
    ys, yz = _scalar(y_scale, _F32), _zero(y_zero_point)
    parts = []
    for x, scale, zero in zip(tuples[0::3], tuples[1::3], tuples[2::3]):
        xs, xz = _scalar(scale, _F32), _zero(zero)
        if xs == ys and xz == yz:
            parts.append(x)
        else:
            parts.append(_quantize(_dequantize(x, xs, xz), ys, yz, dtype))
    return np.concatenate(parts, axis=axis)


# --------------------------------------------------------------------------- lookup-table ops


@register_op("QLinearSigmoid", infer=lambda ctx: [_check_unary(ctx)],
             fusion=FusionKind.ELEMWISE, domain=MS_DOMAIN)
def qlinear_sigmoid(x, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None):
    """com.microsoft QLinearSigmoid: quantize(sigmoid(dequantize(X))), per-tensor.

    Dequantization and quantization are ONNX Runtime's (float32, round half to
    even); the sigmoid here is the float32 rounding of the exact one, where ONNX
    Runtime tabulates MlasComputeLogistic, a polynomial approximation within a
    few float32 ulps, so a value within those ulps of a rounding tie can land
    1 LSB apart.
    """
    values = _dequantize(x, _scalar(x_scale, _F32), _zero(x_zero_point))
    with np.errstate(over="ignore", under="ignore"):
        y = sigmoid_of(values.astype(np.float64)).astype(_F32)
    return _quantize(y, _scalar(y_scale, _F32), _zero(y_zero_point), x.dtype)


@register_op("QLinearLeakyRelu", infer=lambda ctx: [_check_unary(ctx)],
             fusion=FusionKind.ELEMWISE, attrs={"alpha": 0.01}, domain=MS_DOMAIN)
def qlinear_leaky_relu(x, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None, *,
                       alpha):
    """com.microsoft QLinearLeakyRelu: quantize(leaky_relu(dequantize(X), alpha)).

    ONNX Runtime's lookup table holds exactly this float32 computation, which is
    also the QDQ form's.
    """
    values = _dequantize(x, _scalar(x_scale, _F32), _zero(x_zero_point))
    y = np.where(values >= 0, values, (values * _F32(alpha)).astype(_F32))
    return _quantize(y, _scalar(y_scale, _F32), _zero(y_zero_point), x.dtype)


def _infer_softmax(ctx: InferContext) -> TensorType:
    x = _check_unary(ctx)
    normalize_axis(ctx, ctx.attrs["axis"], x.ndim)
    return x


def softmax_normalizes_one_axis(ndim: int, axis: int, opset: int) -> bool:
    """Whether the Softmax of ONNX ``opset`` normalizes ``axis`` of an ``ndim``-D input
    alone: from opset 13 on, or the last axis; before 13 it flattens the dimensions from
    ``axis`` on into one."""
    return opset >= 13 or axis % max(ndim, 1) == ndim - 1


@register_op("QLinearSoftmax", infer=lambda ctx: [_infer_softmax(ctx)],
             fusion=FusionKind.OPAQUE, attrs={"axis": -1, "opset": REQUIRED},
             domain=MS_DOMAIN)
def qlinear_softmax(x, x_scale, x_zero_point=None, y_scale=None, y_zero_point=None, *,
                    axis, opset):
    """com.microsoft QLinearSoftmax: quantize(softmax(dequantize(X))) along ``axis``, as
    the Softmax of ``opset`` normalizes (before 13: the dimensions from ``axis`` on as
    one), per-tensor.

    Dequantization and quantization are ONNX Runtime's (float32, round half to even);
    the softmax is the float32 rounding of the exact one, where ONNX Runtime sums a
    table of exponentials held as 32-bit fixed-point integers (scaled to the row's
    length so that a row's sum fits), then divides: a value within that fixed point's
    step of a rounding tie lands 1 LSB apart (2-5% of the outputs at output scales of
    0.001-0.01, none at 1/256; ``tests/ops/test_qlinear_contrib.py``).
    """
    values = _dequantize(x, _scalar(x_scale, _F32), _zero(x_zero_point)).astype(np.float64)
    axis %= max(x.ndim, 1)
    if not softmax_normalizes_one_axis(x.ndim, axis, opset):
        values = values.reshape(*x.shape[:axis], -1)
    y = softmax(values, axis=axis).reshape(x.shape).astype(_F32)
    return _quantize(y, _scalar(y_scale, _F32), _zero(y_zero_point), x.dtype)


# --------------------------------------------------------------------------- QGemm


def _infer_qgemm(ctx: InferContext):
    a = _quantized_input(ctx, 0, "A")
    b = _quantized_input(ctx, 3, "B")
    if a.ndim != 2 or b.ndim != 2:
        raise ctx.error(f"A {a} and B {b} must be 2-D")
    rows, inner = a.shape[::-1] if ctx.attrs["transA"] else a.shape
    inner_b, cols = b.shape[::-1] if ctx.attrs["transB"] else b.shape
    if inner != inner_b:
        raise ctx.error(f"inner dimensions differ ({inner} vs {inner_b}); check transA/transB")
    _check_scale(ctx, 1, "a_scale")
    _check_zero_point(ctx, 2, "a_zero_point", a.dtype, required=True)
    _check_scale(ctx, 4, "b_scale", cols)
    _check_zero_point(ctx, 5, "b_zero_point", b.dtype, cols, required=True)
    if ctx.has(6):
        c = ctx.type(6)
        require_dtype(ctx, "C", c.dtype, ("int32",))
        if not broadcasts_to(c.shape, (rows, cols)):
            raise ctx.error(f"C {c} does not broadcast to the output ({rows}, {cols})")
    dtype = "float32"
    if ctx.has(7):
        _check_scale(ctx, 7, "y_scale")
    if ctx.has(8):
        if not ctx.has(7):
            raise ctx.error("y_zero_point needs y_scale")
        zero = ctx.type(8)
        require_dtype(ctx, "y_zero_point", zero.dtype, BYTE_DTYPES)
        if zero.size != 1:
            raise ctx.error(f"y_zero_point {zero} must have one element")
        dtype = zero.dtype
    return [TensorType((rows, cols), dtype)]


@register_op("QGemm", infer=_infer_qgemm, fusion=FusionKind.OUT_FUSABLE,
             attrs={"alpha": 1.0, "transA": 0, "transB": 0}, domain=MS_DOMAIN)
def qgemm(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c=None, y_scale=None,
          y_zero_point=None, *, alpha, transA, transB):  # noqa: N803  (ONNX names)
    """com.microsoft QGemm: ``alpha (A' - a_zp)(B' - b_zp) a_scale b_scale`` plus the
    int32 bias C, which shares the product's scale ``alpha a_scale b_scale``;
    quantized to y's parameters, or float32 when y_zero_point is absent.

    b_scale and b_zero_point may be per output column. As ONNX Runtime computes
    it: the exact int32 accumulator plus C, converted to float32, times the
    float32 scale ``alpha * a_scale * b_scale (/ y_scale)`` (rounded at each
    step), then rounded half to even, plus y_zp, saturated. (Like ONNX Runtime,
    a y_scale without y_zero_point gives a float output divided by y_scale.)
    Rounding the scale to float32 can move a near tie by 1 LSB against an exact
    requantization.
    """
    a = a.T if transA else a
    b = b.T if transB else b
    cols = b.shape[1]
    a32 = a.astype(np.int32) - _zero(a_zero_point)
    b_zero = np.asarray(b_zero_point).astype(np.int32).reshape(-1)
    b32 = b.astype(np.int32) - (b_zero if b_zero.size > 1 else b_zero[0])
    acc = np.matmul(a32.astype(np.int64), b32.astype(np.int64))
    if c is not None:
        acc = acc + c.astype(np.int64)
    acc = acc.astype(np.int32)
    b_scales = np.broadcast_to(np.asarray(b_scale, _F32).reshape(-1), (cols,))
    scales = (_F32(_F32(alpha) * _scalar(a_scale, _F32)) * b_scales).astype(_F32)
    if y_scale is not None:
        scales = (scales / _scalar(y_scale, _F32)).astype(_F32)
    scaled = (acc.astype(_F32) * scales).astype(_F32)
    if y_zero_point is None:
        return scaled
    dtype = y_zero_point.dtype
    info = np.iinfo(dtype)
    return np.clip(np.rint(scaled).astype(np.int64) + _zero(y_zero_point),
                   info.min, info.max).astype(dtype)
