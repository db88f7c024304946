"""Neural-network ops: convolution, dense, pooling, normalization."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ..ir.types import FLOAT_DTYPES, TensorType
from .common import broadcasts_to, require_dtype
from .registry import REQUIRED, FusionKind, InferContext, register_op


def resolve_conv_padding(in_spatial, kernel, strides, dilations, pads, auto_pad, ctx=None):
    """Explicit (begin..., end...) pads for a conv/pool window, honouring auto_pad."""
    n = len(in_spatial)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begins, ends = [], []
        for size, k, s, d in zip(in_spatial, kernel, strides, dilations):
            out = -(-size // s)
            total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
            small, big = total // 2, total - total // 2
            begins.append(small if auto_pad == "SAME_UPPER" else big)
            ends.append(big if auto_pad == "SAME_UPPER" else small)
        return begins + ends
    if auto_pad == "VALID":
        return [0] * (2 * n)
    if auto_pad not in ("NOTSET", ""):
        raise (ctx.error if ctx else ValueError)(f"unknown auto_pad {auto_pad!r}")
    pads = list(pads) if pads else [0] * (2 * n)
    if len(pads) != 2 * n:
        raise (ctx.error if ctx else ValueError)(f"pads {pads} must have {2 * n} entries")
    return pads


def conv_geometry(x_shape, w_shape, attrs, ctx=None):
    """(kernel, strides, dilations, pads, output spatial dims) of a Conv."""
    spatial = tuple(x_shape[2:])
    kernel = list(attrs.get("kernel_shape") or w_shape[2:])
    n = len(spatial)
    strides = list(attrs.get("strides") or [1] * n)
    dilations = list(attrs.get("dilations") or [1] * n)
    pads = resolve_conv_padding(spatial, kernel, strides, dilations, attrs.get("pads"),
                                attrs.get("auto_pad", "NOTSET"), ctx)
    out = []
    for i in range(n):
        eff = (kernel[i] - 1) * dilations[i] + 1
        size = (spatial[i] + pads[i] + pads[i + n] - eff) // strides[i] + 1
        if size <= 0:
            msg = f"window {eff} does not fit spatial dim {spatial[i]} with pads {pads}"
            raise (ctx.error(msg) if ctx else ValueError(msg))
        out.append(size)
    return kernel, strides, dilations, pads, out


CONV_ATTRS = {"auto_pad": "NOTSET", "dilations": None, "group": 1, "kernel_shape": None,
               "pads": None, "strides": None}


def infer_conv(ctx: InferContext):
    x, w = ctx.type(0), ctx.type(1)
    if x.ndim < 3 or w.ndim != x.ndim:
        raise ctx.error(f"input {x} and weight {w} must have the same rank >= 3")
    group = ctx.attrs["group"]
    if x.shape[1] != w.shape[1] * group:
        raise ctx.error(f"input has {x.shape[1]} channels, weight expects "
                        f"{w.shape[1]} x group {group}")
    if w.shape[0] % group:
        raise ctx.error(f"{w.shape[0]} output channels do not split into {group} groups")
    if ctx.has(2) and ctx.type(2).shape != (w.shape[0],):
        raise ctx.error(f"bias shape {ctx.type(2).shape} must be ({w.shape[0]},)")
    *_, out = conv_geometry(x.shape, w.shape, ctx.attrs, ctx)
    return [TensorType((x.shape[0], w.shape[0], *out), x.dtype)]


def conv_nd(x, w, b=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
            pads=None, strides=None, acc_dtype=None):
    """N-d grouped convolution (cross-correlation) in NumPy, accumulating in ``acc_dtype``."""
    attrs = dict(auto_pad=auto_pad, dilations=dilations, kernel_shape=kernel_shape, pads=pads,
                 strides=strides)
    kernel, strides, dilations, pads, out = conv_geometry(x.shape, w.shape, attrs)
    n = len(kernel)
    acc = np.dtype(acc_dtype or x.dtype)
    xp = np.pad(x.astype(acc, copy=False),
                [(0, 0), (0, 0)] + [(pads[i], pads[i + n]) for i in range(n)])
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    windows = np.lib.stride_tricks.sliding_window_view(xp, eff, axis=tuple(range(2, 2 + n)))
    sl = tuple(slice(None, o * s, s) for o, s in zip(out, strides))
    dl = tuple(slice(None, None, d) for d in dilations)
    windows = windows[(slice(None), slice(None)) + sl + dl]  # N C out... k...
    batch, channels = x.shape[0], x.shape[1]
    cg, mg = channels // group, w.shape[0] // group
    windows = windows.reshape(batch, group, cg, *out, *kernel)
    wg = w.astype(acc, copy=False).reshape(group, mg, cg, *kernel)
    letters = "defghijk"[:n]
    klet = "pqrstuvw"[:n]
    y = np.einsum(f"ngc{letters}{klet},gmc{klet}->ngm{letters}", windows, wg, optimize=True)
    y = y.reshape(batch, group * mg, *out)
    if b is not None:
        y = y + b.astype(acc, copy=False).reshape((1, -1) + (1,) * n)
    return y


@register_op("Conv", infer=infer_conv, fusion=FusionKind.OUT_FUSABLE, attrs=CONV_ATTRS)
def conv(x, w, b=None, **attrs):
    """ONNX Conv: N-d, grouped, dilated, strided, padded (explicit or auto_pad)."""
    return conv_nd(x, w, b, **attrs).astype(x.dtype, copy=False)


# --------------------------------------------------------------------------- ConvTranspose

_CONV_TRANSPOSE_ATTRS = {**CONV_ATTRS, "output_padding": None, "output_shape": None}


def conv_transpose_geometry(x_shape, w_shape, attrs, ctx=None):
    """(kernel, strides, dilations, pads, output spatial dims) of a ConvTranspose.

    ``output_shape`` (spatial, or full N, C, spatial...) wins over explicit pads;
    otherwise pads are explicit or derived from auto_pad as ONNX specifies.
    """
    fail = ctx.error if ctx else ValueError
    spatial = tuple(x_shape[2:])
    n = len(spatial)
    kernel = list(attrs.get("kernel_shape") or w_shape[2:])
    strides = list(attrs.get("strides") or [1] * n)
    dilations = list(attrs.get("dilations") or [1] * n)
    extra = list(attrs.get("output_padding") or [0] * n)
    if len(extra) != n:
        raise fail(f"output_padding {extra} must have {n} entries")
    full = [(size - 1) * s + (k - 1) * d + 1 + e
            for size, s, k, d, e in zip(spatial, strides, kernel, dilations, extra)]
    auto_pad = attrs.get("auto_pad", "NOTSET")
    requested = attrs.get("output_shape")
    if requested is not None:
        requested = list(requested)[-n:]
        if len(requested) != n:
            raise fail(f"output_shape {attrs.get('output_shape')} must name {n} spatial dims")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER") or (requested and not attrs.get("pads")):
        target = requested or [size * s for size, s in zip(spatial, strides)]
        # a negative total (output larger than the taps reach) pads the output with zeros
        totals = [f - t for f, t in zip(full, target)]
        small = [t // 2 for t in totals]
        big = [t - t // 2 for t in totals]
        pads = small + big if auto_pad == "SAME_UPPER" else big + small
        return kernel, strides, dilations, pads, target
    pads = resolve_conv_padding(spatial, kernel, strides, dilations, attrs.get("pads"),
                                auto_pad, ctx)
    out = requested or [f - pads[i] - pads[i + n] for i, f in enumerate(full)]
    if any(size <= 0 for size in out):
        raise fail(f"output spatial dims {out} are not positive; check pads {pads}")
    return kernel, strides, dilations, pads, out


def _infer_conv_transpose(ctx: InferContext):
    x, w = ctx.type(0), ctx.type(1)
    if x.ndim < 3 or w.ndim != x.ndim:
        raise ctx.error(f"input {x} and weight {w} must have the same rank >= 3")
    group = ctx.attrs["group"]
    if w.shape[0] != x.shape[1]:
        raise ctx.error(f"input has {x.shape[1]} channels but weight {w} expects {w.shape[0]}"
                        " (ConvTranspose weights are C_in x C_out/group x kernel)")
    if x.shape[1] % group:
        raise ctx.error(f"{x.shape[1]} input channels do not split into {group} groups")
    channels = w.shape[1] * group
    if ctx.has(2) and ctx.type(2).shape != (channels,):
        raise ctx.error(f"bias shape {ctx.type(2).shape} must be ({channels},)")
    *_, out = conv_transpose_geometry(x.shape, w.shape, ctx.attrs, ctx)
    return [TensorType((x.shape[0], channels, *out), x.dtype)]


def conv_transpose_nd(x, w, b=None, *, auto_pad="NOTSET", dilations=None, group=1,
                      kernel_shape=None, output_padding=None, output_shape=None, pads=None,
                      strides=None, acc_dtype=None):
    """N-d grouped transposed convolution in NumPy, accumulating in ``acc_dtype``."""
    attrs = dict(auto_pad=auto_pad, dilations=dilations, kernel_shape=kernel_shape,
                 output_padding=output_padding, output_shape=output_shape, pads=pads,
                 strides=strides)
    kernel, strides, dilations, pads, out = conv_transpose_geometry(x.shape, w.shape, attrs)
    n = len(kernel)
    acc = np.dtype(acc_dtype or x.dtype)
    batch, channels, spatial = x.shape[0], x.shape[1], x.shape[2:]
    cg, mg = channels // group, w.shape[1]
    letters = "defghijk"[:n]
    klet = "pqrstuvw"[:n]
    xg = x.astype(acc, copy=False).reshape(batch, group, cg, *spatial)
    wg = w.astype(acc, copy=False).reshape(group, cg, mg, *kernel)
    # every (input pixel, kernel tap) product, then scattered to its output pixel
    taps = np.einsum(f"ngc{letters},gcm{klet}->ngm{letters}{klet}", xg, wg, optimize=True)
    # the canvas covers every tap and the requested output window, which a negative
    # pad moves before the first tap
    shift = [max(-pads[i], 0) for i in range(n)]
    canvas = [shift[i] + max((size - 1) * s + (k - 1) * d + 1, pads[i] + out[i])
              for i, (size, s, k, d) in enumerate(zip(spatial, strides, kernel, dilations))]
    y = np.zeros((batch, group, mg, *canvas), acc)
    for tap in np.ndindex(*kernel):
        target = tuple(slice(lead + t * d, lead + t * d + (size - 1) * s + 1, s)
                       for lead, t, d, size, s in zip(shift, tap, dilations, spatial, strides))
        y[(Ellipsis, *target)] += taps[(Ellipsis, *tap)]
    window = tuple(slice(shift[i] + pads[i], shift[i] + pads[i] + out[i]) for i in range(n))
    y = y[(Ellipsis, *window)].reshape(batch, group * mg, *out)
    if b is not None:
        y = y + b.astype(acc, copy=False).reshape((1, -1) + (1,) * n)
    return y


@register_op("ConvTranspose", infer=_infer_conv_transpose, fusion=FusionKind.OUT_FUSABLE,
             attrs=_CONV_TRANSPOSE_ATTRS)
def conv_transpose(x, w, b=None, **attrs):
    """ONNX ConvTranspose: N-d, grouped, dilated, output_padding / output_shape / auto_pad."""
    return conv_transpose_nd(x, w, b, **attrs).astype(x.dtype, copy=False)


# --------------------------------------------------------------------------- MatMul, Gemm


def matmul_shape(ctx: InferContext, a_shape, b_shape) -> tuple[int, ...]:
    """Output shape of numpy.matmul (1-D operands promoted, batch dims broadcast)."""
    if not a_shape or not b_shape:
        raise ctx.error(f"operands {a_shape} and {b_shape} must have rank >= 1")
    a = (1, *a_shape) if len(a_shape) == 1 else tuple(a_shape)
    b = (*b_shape, 1) if len(b_shape) == 1 else tuple(b_shape)
    if a[-1] != b[-2]:
        raise ctx.error(f"inner dimensions differ: {a_shape} @ {b_shape}")
    try:
        batch = tuple(np.broadcast_shapes(a[:-2], b[:-2]))
    except ValueError:
        raise ctx.error(f"batch dims of {a_shape} and {b_shape} do not broadcast") from None
    rows = (a[-2],) if len(a_shape) > 1 else ()
    cols = (b[-1],) if len(b_shape) > 1 else ()
    return batch + rows + cols


def _infer_matmul(ctx: InferContext):
    a, b = ctx.type(0), ctx.type(1)
    if a.dtype != b.dtype:
        raise ctx.error(f"operand dtypes differ: {a.dtype} and {b.dtype}")
    return [TensorType(matmul_shape(ctx, a.shape, b.shape), a.dtype)]


@register_op("MatMul", infer=_infer_matmul, fusion=FusionKind.OUT_FUSABLE)
def matmul(a, b):
    """ONNX MatMul: numpy.matmul semantics (N-d batch broadcasting, 1-D promotion)."""
    return np.matmul(a, b).astype(a.dtype, copy=False)


def _infer_gemm(ctx: InferContext):
    a, b = ctx.type(0), ctx.type(1)
    if a.ndim != 2 or b.ndim != 2:
        raise ctx.error(f"A {a} and B {b} must be 2-D")
    rows, inner = a.shape[::-1] if ctx.attrs["transA"] else a.shape
    inner_b, cols = b.shape[::-1] if ctx.attrs["transB"] else b.shape
    if inner != inner_b:
        raise ctx.error(f"inner dimensions differ ({inner} vs {inner_b}); check transA/transB")
    if ctx.has(2):
        c = ctx.type(2).shape
        if not broadcasts_to(c, (rows, cols)):
            raise ctx.error(f"C {c} does not broadcast to the output ({rows}, {cols})")
    return [TensorType((rows, cols), a.dtype)]


@register_op("Gemm", infer=_infer_gemm, fusion=FusionKind.OUT_FUSABLE,
             attrs={"alpha": 1.0, "beta": 1.0, "broadcast": 0, "transA": 0, "transB": 0})
def gemm(a, b, c=None, *, alpha, beta, broadcast, transA, transB):  # noqa: N803  (ONNX names)
    """ONNX Gemm: alpha * A' @ B' + beta * C, C unidirectionally broadcast.

    ``broadcast`` (opset < 7) only allowed what later opsets always allow.
    """
    a = a.T if transA else a
    b = b.T if transB else b
    dtype = a.dtype
    y = np.matmul(a, b)
    if alpha != 1.0:
        y = y * np.asarray(alpha, dtype if dtype.kind == "f" else np.float64)
    if c is not None:
        scaled = c if beta == 1.0 else c * np.asarray(beta, dtype if dtype.kind == "f"
                                                      else np.float64)
        y = y + scaled
    return y.astype(dtype, copy=False)


# --------------------------------------------------------------------------- pooling


@dataclass(frozen=True)
class PoolGeometry:
    """Where the windows of a pooling op lie: pads are (begin..., end...)."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]
    out: tuple[int, ...]

    @property
    def extents(self) -> tuple[int, ...]:
        """Span of each dilated window."""
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilations))


def pool_geometry(x_shape, attrs, ctx=None) -> PoolGeometry:
    """The window geometry of MaxPool/AveragePool/LpPool, honouring auto_pad and ceil_mode.

    With ceil_mode a last partial window is kept only if it starts inside the
    input or its begin padding (the rule ONNX Runtime and PyTorch follow).
    """
    fail = ctx.error if ctx else ValueError
    spatial = tuple(x_shape[2:])
    n = len(spatial)
    kernel = list(attrs["kernel_shape"])
    if len(kernel) != n:
        raise fail(f"kernel_shape {kernel} must have {n} entries for input shape {x_shape}")
    strides = list(attrs.get("strides") or [1] * n)
    dilations = list(attrs.get("dilations") or [1] * n)
    if len(strides) != n or len(dilations) != n:
        raise fail(f"strides {strides} and dilations {dilations} must have {n} entries")
    auto_pad = attrs.get("auto_pad", "NOTSET")
    pads = resolve_conv_padding(spatial, kernel, strides, dilations, attrs.get("pads"),
                                auto_pad, ctx)
    ceil_mode = bool(attrs.get("ceil_mode", 0)) and auto_pad in ("NOTSET", "")
    out = []
    for i in range(n):
        span = (kernel[i] - 1) * dilations[i] + 1
        room = spatial[i] + pads[i] + pads[i + n] - span
        size = (-(-room // strides[i]) if ceil_mode else room // strides[i]) + 1
        if ceil_mode and (size - 1) * strides[i] >= spatial[i] + pads[i]:
            size -= 1
        if size <= 0:
            raise fail(f"window {span} does not fit spatial dim {spatial[i]} with pads {pads}")
        out.append(size)
    return PoolGeometry(tuple(kernel), tuple(strides), tuple(dilations), tuple(pads), tuple(out))


def pool_windows(a: np.ndarray, geo: PoolGeometry, fill, pad_fill=None) -> np.ndarray:
    """View ``a[..., spatial...]`` as ``[..., out..., kernel...]`` windows.

    Explicit pads hold ``pad_fill`` (default ``fill``); the room a ceil_mode
    window needs past the end pads holds ``fill``.
    """
    n = len(geo.kernel)
    lead = [(0, 0)] * (a.ndim - n)
    padded = np.pad(a, lead + [(geo.pads[i], geo.pads[i + n]) for i in range(n)],
                    constant_values=fill if pad_fill is None else pad_fill)
    spatial = padded.shape[-n:]
    needed = [(o - 1) * s + e for o, s, e in zip(geo.out, geo.strides, geo.extents)]
    overflow = [max(need - size, 0) for need, size in zip(needed, spatial)]
    if any(overflow):
        padded = np.pad(padded, lead + [(0, extra) for extra in overflow], constant_values=fill)
    axes = tuple(range(a.ndim - n, a.ndim))
    windows = np.lib.stride_tricks.sliding_window_view(padded, geo.extents, axis=axes)
    starts = tuple(slice(None, (o - 1) * s + 1, s) for o, s in zip(geo.out, geo.strides))
    taps = tuple(slice(None, None, d) for d in geo.dilations)
    return windows[(Ellipsis, *starts, *taps)]


def pool_divisors(spatial, geo: PoolGeometry, count_include_pad, dtype=np.float64
                  ) -> np.ndarray:
    """AveragePool's divisor at each output position (shape ``geo.out``): the taps of its
    window inside the input, and inside the explicit pads where ``count_include_pad``;
    never the room a ceil_mode window takes past the end pads."""
    present = np.ones(tuple(spatial), dtype)
    return pool_windows(present, geo, 0, pad_fill=1 if count_include_pad else 0).sum(
        axis=_kernel_axes(len(geo.kernel)))


def _kernel_axes(n: int) -> tuple[int, ...]:
    return tuple(range(-n, 0))


def _check_pool_input(ctx: InferContext):
    x = ctx.type(0)
    if x.ndim < 3:
        raise ctx.error(f"input {x} must be N x C x spatial... (rank >= 3)")
    return x


def _pool_infer(index_output: bool = False):
    def infer(ctx: InferContext):
        x = _check_pool_input(ctx)
        geo = pool_geometry(x.shape, ctx.attrs, ctx)
        shape = (x.shape[0], x.shape[1], *geo.out)
        outputs = [TensorType(shape, x.dtype)]
        if index_output:
            outputs.append(TensorType(shape, "int64"))
        return outputs

    return infer


_POOL_ATTRS = {"auto_pad": "NOTSET", "ceil_mode": 0, "dilations": None,
               "kernel_shape": REQUIRED, "pads": None, "strides": None}


def _lowest(dtype: np.dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


@register_op("MaxPool", infer=_pool_infer(index_output=True), fusion=FusionKind.REDUCTION,
             attrs={**_POOL_ATTRS, "storage_order": 0})
def max_pool(x, *, storage_order, **attrs):
    """ONNX MaxPool with its Indices output (flat, row- or column-major per storage_order)."""
    geo = pool_geometry(x.shape, attrs)
    n = len(geo.kernel)
    windows = pool_windows(x, geo, _lowest(x.dtype))
    flat = windows.reshape(*windows.shape[:-n], -1)
    best = np.argmax(flat, axis=-1)
    y = np.take_along_axis(flat, best[..., None], axis=-1)[..., 0]
    spatial = x.shape[2:]
    positions = np.arange(int(np.prod(spatial)), dtype=np.int64)
    positions = (positions.reshape(spatial[::-1]).transpose() if storage_order
                 else positions.reshape(spatial))
    position_windows = pool_windows(positions, geo, -1)
    position_windows = position_windows.reshape(*geo.out, -1)
    local = np.take_along_axis(np.broadcast_to(position_windows, flat.shape), best[..., None],
                               axis=-1)[..., 0]
    planes = np.arange(x.shape[0] * x.shape[1], dtype=np.int64).reshape(
        x.shape[0], x.shape[1], *([1] * n))
    return y.astype(x.dtype, copy=False), local + planes * positions.size


def _accumulator(dtype: np.dtype) -> np.dtype:
    """Float type to sum windows in (float16 sums in float32 so pooling stays accurate)."""
    return np.dtype(np.float32) if dtype == np.float16 else dtype


@register_op("AveragePool", infer=_pool_infer(), fusion=FusionKind.REDUCTION,
             attrs={**_POOL_ATTRS, "count_include_pad": 0})
def average_pool(x, *, count_include_pad, **attrs):
    """ONNX AveragePool; count_include_pad counts explicit pads, never ceil_mode overflow."""
    geo = pool_geometry(x.shape, attrs)
    axes = _kernel_axes(len(geo.kernel))
    acc = _accumulator(x.dtype)
    sums = pool_windows(x.astype(acc, copy=False), geo, 0).sum(axis=axes)
    return (sums / pool_divisors(x.shape[2:], geo, count_include_pad, acc)).astype(
        x.dtype, copy=False)


def _lp_norm(windows: np.ndarray, p, axes) -> np.ndarray:
    return np.sum(np.abs(windows) ** p, axis=axes) ** (1.0 / p)


@register_op("LpPool", infer=_pool_infer(), fusion=FusionKind.REDUCTION,
             attrs={**_POOL_ATTRS, "p": 2})
def lp_pool(x, *, p, **attrs):
    """ONNX LpPool: the p-norm of each window (pads count as zeros)."""
    geo = pool_geometry(x.shape, attrs)
    acc = _accumulator(x.dtype)
    windows = pool_windows(x.astype(acc, copy=False), geo, 0)
    return _lp_norm(windows, p, _kernel_axes(len(geo.kernel))).astype(x.dtype, copy=False)


def _infer_global_pool(ctx: InferContext):
    x = _check_pool_input(ctx)
    return [TensorType(x.shape[:2] + (1,) * (x.ndim - 2), x.dtype)]


def _spatial_axes(x: np.ndarray) -> tuple[int, ...]:
    return tuple(range(2, x.ndim))


@register_op("GlobalAveragePool", infer=_infer_global_pool, fusion=FusionKind.REDUCTION)
def global_average_pool(x):
    """ONNX GlobalAveragePool: mean over every spatial axis, kept as size 1."""
    acc = _accumulator(x.dtype)
    return x.mean(axis=_spatial_axes(x), keepdims=True, dtype=acc).astype(x.dtype, copy=False)


@register_op("GlobalMaxPool", infer=_infer_global_pool, fusion=FusionKind.REDUCTION)
def global_max_pool(x):
    """ONNX GlobalMaxPool: max over every spatial axis, kept as size 1."""
    return x.max(axis=_spatial_axes(x), keepdims=True)


@register_op("GlobalLpPool", infer=_infer_global_pool, fusion=FusionKind.REDUCTION,
             attrs={"p": 2})
def global_lp_pool(x, *, p):
    """ONNX GlobalLpPool: p-norm over every spatial axis, kept as size 1."""
    acc = _accumulator(x.dtype)
    norm = _lp_norm(x.astype(acc, copy=False), p, _spatial_axes(x))
    return norm.reshape(x.shape[:2] + (1,) * (x.ndim - 2)).astype(x.dtype, copy=False)


# --------------------------------------------------------------------------- MaxUnpool


def unpooled_shape(x_shape, kernel, strides, pads) -> tuple[int, ...]:
    """The default output shape of MaxUnpool: the shape pooling with ``kernel``,
    ``strides`` and ``pads`` would have taken to ``x_shape``."""
    n = len(kernel)
    strides = list(strides or [1] * n)
    pads = list(pads or [0] * (2 * n))
    spatial = [(size - 1) * s - pads[i] - pads[i + n] + k
               for i, (size, s, k) in enumerate(zip(x_shape[2:], strides, kernel))]
    return (x_shape[0], x_shape[1], *spatial)


def _infer_max_unpool(ctx: InferContext):
    x = _check_pool_input(ctx)
    indices = ctx.type(1)
    if indices.shape != x.shape or indices.dtype != "int64":
        raise ctx.error(f"indices {indices} must be int64 with the shape of X {x}")
    if len(ctx.attrs["kernel_shape"]) != x.ndim - 2:
        raise ctx.error(f"kernel_shape {ctx.attrs['kernel_shape']} must have {x.ndim - 2} "
                        "entries")
    natural = unpooled_shape(x.shape, ctx.attrs["kernel_shape"], ctx.attrs["strides"],
                              ctx.attrs["pads"])
    if not ctx.has(2):
        return [TensorType(natural, x.dtype)]
    requested = tuple(int(v) for v in ctx.value(2).reshape(-1))
    if len(requested) != x.ndim or any(r < m for r, m in zip(requested, natural)):
        raise ctx.error(f"output_shape {requested} must have rank {x.ndim} and be at least "
                        f"the unpooled shape {natural}")
    return [TensorType(requested, x.dtype)]


@register_op("MaxUnpool", infer=_infer_max_unpool, fusion=FusionKind.OPAQUE,
             attrs={"kernel_shape": REQUIRED, "pads": None, "strides": None},
             shape_operands=(2,))
def max_unpool(x, indices, output_shape=None, *, kernel_shape, pads, strides):
    """ONNX MaxUnpool: scatter X to its Indices in the unpooled shape, zeros elsewhere.

    Indices address the unpooled shape; a larger ``output_shape`` extends it
    with zeros at the end of each axis (as the ONNX reference does).
    """
    natural = unpooled_shape(x.shape, kernel_shape, strides, pads)
    y = np.zeros(int(np.prod(natural)), x.dtype)
    y[indices.reshape(-1)] = x.reshape(-1)
    y = y.reshape(natural)
    if output_shape is None:
        return y
    out = np.zeros(tuple(int(v) for v in output_shape), x.dtype)
    out[tuple(slice(0, size) for size in natural)] = y
    return out


# --------------------------------------------------------------------------- Col2Im


def _col2im_geometry(ctx: InferContext, data: TensorType, image, block):
    n = len(image)
    if len(block) != n:
        raise ctx.error(f"image_shape {list(image)} and block_shape {list(block)} must have "
                        "the same length")
    strides = list(ctx.attrs["strides"] or [1] * n)
    dilations = list(ctx.attrs["dilations"] or [1] * n)
    pads = list(ctx.attrs["pads"] or [0] * (2 * n))
    if len(strides) != n or len(dilations) != n or len(pads) != 2 * n:
        raise ctx.error(f"strides {strides}, dilations {dilations} and pads {pads} must have "
                        f"{n}, {n} and {2 * n} entries")
    blocks = [(size + pads[i] + pads[i + n] - (k - 1) * d - 1) // s + 1
              for i, (size, k, d, s) in enumerate(zip(image, block, dilations, strides))]
    per_block = int(np.prod(block))
    if data.ndim != 3 or data.shape[1] % per_block or data.shape[2] != int(np.prod(blocks)):
        raise ctx.error(f"input {data} must be (N, C x {per_block}, {int(np.prod(blocks))}) "
                        f"for image {list(image)}, block {list(block)}")


def _infer_col2im(ctx: InferContext):
    data = ctx.type(0)
    image = [int(v) for v in ctx.value(1).reshape(-1)]
    block = [int(v) for v in ctx.value(2).reshape(-1)]
    _col2im_geometry(ctx, data, image, block)
    channels = data.shape[1] // int(np.prod(block))
    return [TensorType((data.shape[0], channels, *image), data.dtype)]


@register_op("Col2Im", infer=_infer_col2im, fusion=FusionKind.OPAQUE,
             attrs={"dilations": None, "pads": None, "strides": None}, shape_operands=(1, 2))
def col2im(data, image_shape, block_shape, *, dilations, pads, strides):
    """ONNX Col2Im: sum sliding blocks (columns) back into an N-d image."""
    image = [int(v) for v in image_shape]
    block = [int(v) for v in block_shape]
    n = len(image)
    strides = list(strides or [1] * n)
    dilations = list(dilations or [1] * n)
    pads = list(pads or [0] * (2 * n))
    padded = [size + pads[i] + pads[i + n] for i, size in enumerate(image)]
    blocks = [(size - (k - 1) * d - 1) // s + 1
              for size, k, d, s in zip(padded, block, dilations, strides)]
    batch = data.shape[0]
    columns = data.reshape(batch, -1, *block, *blocks)
    canvas = np.zeros((batch, columns.shape[1], *padded), data.dtype)
    for tap in np.ndindex(*block):
        target = tuple(slice(t * d, t * d + (count - 1) * s + 1, s)
                       for t, d, count, s in zip(tap, dilations, blocks, strides))
        canvas[(Ellipsis, *target)] += columns[(slice(None), slice(None), *tap)]
    return canvas[(Ellipsis, *(slice(pads[i], pads[i] + image[i]) for i in range(n)))]


# --------------------------------------------------------------------------- AffineGrid


def _infer_affine_grid(ctx: InferContext):
    theta = ctx.type(0)
    size = [int(v) for v in ctx.value(1).reshape(-1)]
    if len(size) not in (4, 5):
        raise ctx.error(f"size {size} must be (N, C, H, W) or (N, C, D, H, W)")
    spatial = len(size) - 2
    if theta.shape != (size[0], spatial, spatial + 1):
        raise ctx.error(f"theta {theta} must have shape ({size[0]}, {spatial}, {spatial + 1}) "
                        f"for size {size}")
    require_dtype(ctx, "theta", theta.dtype, FLOAT_DTYPES)
    return [TensorType((size[0], *size[2:], spatial), theta.dtype)]


def _normalized_positions(count: int, align_corners: int) -> np.ndarray:
    """Pixel centres (or corners, with align_corners) of one axis in [-1, 1]."""
    if align_corners:
        return np.linspace(-1.0, 1.0, count) if count > 1 else np.full(1, -1.0)
    return (2.0 * np.arange(count) + 1.0) / count - 1.0


@register_op("AffineGrid", infer=_infer_affine_grid, fusion=FusionKind.OPAQUE,
             attrs={"align_corners": 0}, shape_operands=(1,))
def affine_grid(theta, size, *, align_corners):
    """ONNX AffineGrid: the sampling grid (x, y[, z] last) of an affine transform."""
    spatial = [int(v) for v in size[2:]]
    axes = [_normalized_positions(count, align_corners) for count in spatial]
    # homogeneous points ordered (x, y[, z], 1): x runs along the last spatial axis
    mesh = np.meshgrid(*axes, indexing="ij")[::-1]
    points = np.stack([*mesh, np.ones(spatial)], axis=-1)
    grid = np.einsum("...k,nik->n...i", points, theta.astype(np.float64))
    return grid.astype(theta.dtype)


# --------------------------------------------------------------------------- GridSample

_GRID_SAMPLE_MODES = {"linear": "linear", "bilinear": "linear", "nearest": "nearest",
                      "cubic": "cubic", "bicubic": "cubic"}


def _infer_grid_sample(ctx: InferContext):
    x, grid = ctx.type(0), ctx.type(1)
    spatial = x.ndim - 2
    if x.ndim < 3 or grid.ndim != x.ndim or grid.shape[-1] != spatial:
        raise ctx.error(f"grid {grid} must be (N, out spatial..., {spatial}) for input {x}")
    if grid.shape[0] != x.shape[0]:
        raise ctx.error(f"grid {grid} and input {x} have different batch sizes")
    if ctx.attrs["mode"] not in _GRID_SAMPLE_MODES:
        raise ctx.error(f"mode {ctx.attrs['mode']!r} is not one of "
                        f"{', '.join(_GRID_SAMPLE_MODES)}")
    if ctx.attrs["padding_mode"] not in ("zeros", "border", "reflection"):
        raise ctx.error(f"padding_mode {ctx.attrs['padding_mode']!r} is not zeros, border or "
                        "reflection")
    return [TensorType((x.shape[0], x.shape[1], *grid.shape[1:-1]), x.dtype)]


def _reflect(coords: np.ndarray, low: float, high: float) -> np.ndarray:
    """Fold coordinates outside [low, high] back in, bouncing between the two borders."""
    span = high - low
    if span <= 0:
        return np.full_like(coords, low)
    below, above = coords < low, coords > high
    distance = np.where(below, low - coords, np.where(above, coords - high, 0))
    bounces = np.floor(distance / span)
    rest = distance - bounces * span
    even = bounces % 2 == 0
    from_low = np.where(even, low + rest, high - rest)
    from_high = np.where(even, high - rest, low + rest)
    return np.where(below, from_low, np.where(above, from_high, coords))


def _cubic_weights(t: np.ndarray) -> list[np.ndarray]:
    """Keys cubic convolution weights (a = -0.75) of the taps at -1, 0, 1, 2 from floor."""
    a = -0.75

    def near(d):  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _sample_taps(coords: np.ndarray, size: int, mode: str):
    """(integer index, weight) pairs that interpolate one axis at ``coords``."""
    if mode == "nearest":
        return [(coords.astype(np.int64), np.ones_like(coords))]
    base = np.floor(coords)
    frac = coords - base
    base = base.astype(np.int64)
    if mode == "linear":
        return [(base, 1 - frac), (base + 1, frac)]
    return [(base + offset, weight) for offset, weight in zip((-1, 0, 1, 2),
                                                             _cubic_weights(frac))]


def _fetch_index(index: np.ndarray, size: int, padding_mode: str, borders):
    """Index to read and whether it holds data (False: a zero from zeros padding)."""
    if padding_mode == "zeros":
        inside = (index >= 0) & (index < size)
        return np.clip(index, 0, size - 1), inside
    if padding_mode == "reflection":
        index = _reflect(index.astype(np.float64), *borders).astype(np.int64)
    return np.clip(index, 0, size - 1), np.ones(index.shape, bool)


@register_op("GridSample", infer=_infer_grid_sample, fusion=FusionKind.OPAQUE,
             attrs={"align_corners": 0, "mode": "linear", "padding_mode": "zeros"})
def grid_sample(x, grid, *, align_corners, mode, padding_mode):
    """ONNX GridSample: sample X at normalized grid points (nearest, N-linear, cubic),
    with zeros / border / reflection padding."""
    mode = _GRID_SAMPLE_MODES[mode]
    spatial = x.shape[2:]
    batch_index = np.arange(x.shape[0]).reshape((-1,) + (1,) * (grid.ndim - 2))
    taps_per_axis = []
    for axis, size in enumerate(spatial):
        # grid's last axis lists (x, y, z): the last spatial axis first
        coords = grid[..., len(spatial) - 1 - axis]
        if align_corners:
            coords = (coords + 1) / 2 * (size - 1)
            borders = (0.0, size - 1.0)
        else:
            coords = ((coords + 1) * size - 1) / 2
            borders = (-0.5, size - 0.5)
        if mode == "nearest":
            coords = np.rint(coords)
        outside = (coords < borders[0]) | (coords > borders[1])
        if padding_mode == "border":
            coords = np.where(outside, np.clip(coords, 0, size - 1), coords)
        elif padding_mode == "reflection":
            coords = np.where(outside, _reflect(coords, *borders), coords)
        taps = []
        for index, weight in _sample_taps(coords.astype(np.float64), size, mode):
            index, inside = _fetch_index(index, size, padding_mode, borders)
            taps.append((index, weight * inside))
        taps_per_axis.append(taps)
    channels_last = np.moveaxis(x, 1, -1).astype(np.float64)
    y = np.zeros(grid.shape[:-1] + (x.shape[1],))
    for corner in itertools.product(*taps_per_axis):
        indices = tuple(index for index, _ in corner)
        weight = np.prod([w for _, w in corner], axis=0)
        y += weight[..., None] * channels_last[(batch_index, *indices)]
    return np.moveaxis(y, -1, 1).astype(x.dtype)


# --------------------------------------------------------------------------- RoiAlign


def _infer_roi_align(ctx: InferContext):
    x, rois, indices = ctx.type(0), ctx.type(1), ctx.type(2)
    if x.ndim != 4:
        raise ctx.error(f"X {x} must be (N, C, H, W)")
    if rois.ndim != 2 or rois.shape[1] != 4 or rois.dtype != x.dtype:
        raise ctx.error(f"rois {rois} must be (num_rois, 4) of X's dtype {x.dtype}")
    if indices.shape != (rois.shape[0],) or indices.dtype not in ("int64", "int32"):
        raise ctx.error(f"batch_indices {indices} must be int64 of shape ({rois.shape[0]},)")
    if ctx.attrs["mode"] not in ("avg", "max"):
        raise ctx.error(f"mode {ctx.attrs['mode']!r} must be avg or max")
    if ctx.attrs["coordinate_transformation_mode"] not in ("half_pixel", "output_half_pixel"):
        raise ctx.error(f"coordinate_transformation_mode "
                        f"{ctx.attrs['coordinate_transformation_mode']!r} must be half_pixel "
                        "or output_half_pixel")
    return [TensorType((rois.shape[0], x.shape[1], ctx.attrs["output_height"],
                        ctx.attrs["output_width"]), x.dtype)]


def _roi_axis_samples(start: float, length: float, bins: int, per_bin: int, size: int):
    """Bilinear taps along one axis: (low, high, low weight, high weight, valid) per
    (bin, sample), following the RoiAlign sampling rule of ONNX Runtime."""
    step = length / bins
    positions = (start + np.arange(bins)[:, None] * step
                 + (np.arange(per_bin)[None, :] + 0.5) * step / per_bin)
    valid = (positions >= -1.0) & (positions <= size)
    positions = np.maximum(positions, 0.0)
    low = positions.astype(np.int64)
    clamped = low >= size - 1
    low = np.where(clamped, size - 1, low)
    high = np.where(clamped, size - 1, low + 1)
    positions = np.where(clamped, low, positions)
    high_weight = positions - low
    return low, high, 1.0 - high_weight, high_weight, valid


def _roi_corner(plane, rows, cols, row_weight, col_weight, valid) -> np.ndarray:
    """Weighted values of one bilinear corner: (C, out_h, grid_h, out_w, grid_w)."""
    values = plane[:, rows[:, :, None, None], cols[None, None, :, :]]
    return row_weight[:, :, None, None] * col_weight[None, None, :, :] * valid * values


@register_op("RoiAlign", infer=_infer_roi_align, fusion=FusionKind.OPAQUE,
             attrs={"coordinate_transformation_mode": "half_pixel", "mode": "avg",
                    "output_height": 1, "output_width": 1, "sampling_ratio": 0,
                    "spatial_scale": 1.0})
def roi_align(x, rois, batch_indices, *, coordinate_transformation_mode, mode, output_height,
              output_width, sampling_ratio, spatial_scale):
    """ONNX RoiAlign: bilinearly sampled average (or max of weighted corners) per bin."""
    half_pixel = coordinate_transformation_mode == "half_pixel"
    height, width = x.shape[2:]
    out = np.zeros((rois.shape[0], x.shape[1], output_height, output_width), np.float64)
    for r, (roi, image) in enumerate(zip(rois.astype(np.float64), batch_indices)):
        start = roi * spatial_scale - (0.5 if half_pixel else 0.0)
        extent_w, extent_h = start[2] - start[0], start[3] - start[1]
        if not half_pixel:  # legacy mode: malformed boxes become 1 x 1
            extent_w, extent_h = max(extent_w, 1.0), max(extent_h, 1.0)
        grid_h = sampling_ratio if sampling_ratio > 0 else int(np.ceil(extent_h / output_height))
        grid_w = sampling_ratio if sampling_ratio > 0 else int(np.ceil(extent_w / output_width))
        y_low, y_high, wy_low, wy_high, y_ok = _roi_axis_samples(
            start[1], extent_h, output_height, grid_h, height)
        x_low, x_high, wx_low, wx_high, x_ok = _roi_axis_samples(
            start[0], extent_w, output_width, grid_w, width)
        plane = x[int(image)].astype(np.float64)  # C, H, W
        valid = y_ok[:, :, None, None] & x_ok[None, None, :, :]
        corners = [_roi_corner(plane, rows, cols, row_weight, col_weight, valid)
                   for rows, row_weight in ((y_low, wy_low), (y_high, wy_high))
                   for cols, col_weight in ((x_low, wx_low), (x_high, wx_high))]
        if mode == "avg":
            out[r] = sum(corners).sum(axis=(2, 4)) / max(grid_h * grid_w, 1)
        else:
            out[r] = np.max(corners, axis=0).max(axis=(2, 4))
    return out.astype(x.dtype)


# --------------------------------------------------------------------------- DeformConv

_DEFORM_CONV_ATTRS = {"dilations": None, "group": 1, "kernel_shape": None, "offset_group": 1,
                      "pads": None, "strides": None}


def _infer_deform_conv(ctx: InferContext):
    plain = InferContext(ctx.op, [ctx.types[0], ctx.types[1], ctx.types[3]
                                  if ctx.has(3) else None],
                         [None] * 3, {**ctx.attrs, "auto_pad": "NOTSET"}, 1, ctx.node)
    out_type = infer_conv(plain)[0]
    x, offset = ctx.type(0), ctx.type(2)
    kernel, *_ = conv_geometry(x.shape, ctx.type(1).shape, {**ctx.attrs, "auto_pad": "NOTSET"})
    groups = ctx.attrs["offset_group"]
    if groups <= 0 or x.shape[1] % groups:
        raise ctx.error(f"{x.shape[1]} input channels do not split into offset_group={groups}")
    taps = groups * int(np.prod(kernel))
    out = out_type.shape[2:]
    expected = (x.shape[0], taps * len(kernel), *out)
    if offset.shape != expected:
        raise ctx.error(f"offset {offset} must have shape {expected} (batch, offset_group x "
                        "kernel taps x spatial dims, output spatial...)")
    if ctx.has(4) and ctx.type(4).shape != (x.shape[0], taps, *out):
        raise ctx.error(f"mask {ctx.type(4)} must have shape {(x.shape[0], taps, *out)}")
    return [out_type]


def _bilinear_gather(channels_last: np.ndarray, positions: list[np.ndarray]) -> np.ndarray:
    """Sample ``channels_last`` (N, spatial..., C) at fractional pixel ``positions`` (one
    array per spatial axis, leading axis N), reading zeros outside the image."""
    spatial = channels_last.shape[1:-1]
    batch = np.arange(channels_last.shape[0]).reshape((-1,) + (1,) * (positions[0].ndim - 1))
    taps_per_axis = []
    for coords, size in zip(positions, spatial):
        taps = []
        for index, weight in _sample_taps(coords, size, "linear"):
            index, inside = _fetch_index(index, size, "zeros", (0.0, size - 1.0))
            taps.append((index, weight * inside))
        taps_per_axis.append(taps)
    sampled = np.zeros(positions[0].shape + channels_last.shape[-1:])
    for corner in itertools.product(*taps_per_axis):
        weight = np.prod([w for _, w in corner], axis=0)
        sampled += weight[..., None] * channels_last[(batch, *(index for index, _ in corner))]
    return sampled


@register_op("DeformConv", infer=_infer_deform_conv, fusion=FusionKind.OPAQUE,
             attrs=_DEFORM_CONV_ATTRS)
def deform_conv(x, w, offset, b=None, mask=None, *, dilations, group, kernel_shape,
                offset_group, pads, strides):
    """ONNX DeformConv: each kernel tap reads X at its grid position plus a learned
    fractional offset (bilinear, zeros outside), scaled by an optional mask."""
    attrs = dict(dilations=dilations, kernel_shape=kernel_shape, pads=pads, strides=strides)
    kernel, strides, dilations, pads, out = conv_geometry(x.shape, w.shape, attrs)
    n = len(kernel)
    batch, channels = x.shape[:2]
    offset = offset.reshape(batch, offset_group, *kernel, n, *out).astype(np.float64)
    if mask is None:
        mask = np.ones((batch, offset_group, *kernel, *out))
    mask = mask.reshape(batch, offset_group, *kernel, *out)
    # undisturbed tap positions: (kernel..., out...) per spatial axis
    grids = np.meshgrid(*[np.arange(k) for k in kernel], *[np.arange(o) for o in out],
                        indexing="ij")
    base = [grids[a + n] * strides[a] - pads[a] + grids[a] * dilations[a] for a in range(n)]
    channels_last = np.moveaxis(x, 1, -1).astype(np.float64)
    per_group = channels // offset_group
    columns = []
    for g in range(offset_group):
        positions = [base[a] + offset[:, g, ..., a, *([slice(None)] * n)] for a in range(n)]
        sampled = _bilinear_gather(channels_last[..., g * per_group:(g + 1) * per_group],
                                   positions)  # N, kernel..., out..., Cg
        columns.append(np.moveaxis(sampled, -1, 1) * mask[:, g, None])
    columns = np.concatenate(columns, axis=1)  # N, C, kernel..., out...
    cg, mg = channels // group, w.shape[0] // group
    letters, klet = "defghijk"[:n], "pqrstuvw"[:n]
    y = np.einsum(f"ngc{klet}{letters},gmc{klet}->ngm{letters}",
                  columns.reshape(batch, group, cg, *kernel, *out),
                  w.astype(np.float64).reshape(group, mg, cg, *kernel), optimize=True)
    y = y.reshape(batch, group * mg, *out)
    if b is not None:
        y = y + b.astype(np.float64).reshape((1, -1) + (1,) * n)
    return y.astype(x.dtype)
