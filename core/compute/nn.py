"""Convolution, matrix products and pooling, and the other ops of ``heterocc.ops.nn``.

* Conv, MatMul, Gemm, MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool: the
  anchors of fused functions. Products are plain (:func:`matmul`): how B is laid out
  or staged is each target's decision.
* ConvTranspose, LpPool, GlobalLpPool, MaxUnpool and Col2Im: N-d computes whose taps
  are guarded by their bounds (a guarded load is only made where it lands inside).
* AffineGrid, GridSample and RoiAlign (spatial sampling): coordinates are worked out in
  float64 inside the kernel (grids and boxes are data), following the references; each
  interpolation tap is a clamped load weighted by zero where the reference reads padding.
* DeformConv: taps moved by learned offsets, sampled bilinearly.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from .. import te
from ..errors import CompileError
from ..ops.nn import conv_geometry, conv_transpose_geometry, pool_geometry, unpooled_shape
from ..tir import expr as tx
from .common import F64, broadcast_load, f64, float_only, optional_input, require_native
from .indexing import UpdateSearch, scatter_by_search
from .reduction import extreme, reduce_stage, require_nonempty
from .registry import register_compute


def pad(x, pads_begin, pads_end, value, name, lead: int | None = None,
         attrs: dict | None = None):
    """``x`` padded with ``value`` on the spatial axes starting at ``lead`` (default: the
    trailing ones; a blocked NCHW[x]c tensor has its channel block after them).

    The load stays affine (no clamped index) so that it vectorizes; if_then_else
    only reads the side it selects, so the out-of-range index is never loaded.
    """
    if not any(pads_begin) and not any(pads_end):
        return x
    if lead is None:
        lead = x.ndim - len(pads_begin)
    spatial = x.shape[lead:lead + len(pads_begin)]
    shape = tuple(x.shape[:lead]) + tuple(
        d + b + e for d, b, e in zip(spatial, pads_begin, pads_end)) + tuple(
        x.shape[lead + len(pads_begin):])

    def body(*index):
        inside = None
        for k, (b, d) in enumerate(zip(pads_begin, spatial)):
            i = index[lead + k]
            cond = te.logical_and(i >= b, i < b + d)
            inside = cond if inside is None else te.logical_and(inside, cond)
        src = tuple(index[:lead]) + tuple(
            index[lead + k] - b for k, b in enumerate(pads_begin)) + tuple(
            index[lead + len(pads_begin):])
        return te.if_then_else(inside, x[src], te.const(value, x.dtype))

    return te.compute(shape, body, name=name, dtype=x.dtype, attrs=attrs)


def _phase_split_columns(data, stride: int, name: str):
    """``data`` with its columns regrouped by phase: ``out[..., r, p, j]`` is
    ``data[..., r, j * stride + p]`` (zero past the last column), materialized.

    A strided convolution reads columns ``x * stride + offset``; from this layout it
    reads ``[..., offset % stride, x + offset // stride]``, contiguous in ``x``, so its
    vectorized loads stay plain vector loads instead of gathers."""
    lead, width = data.shape[:-1], data.shape[-1]
    phase_width = -(-width // stride)

    def body(*index):
        *rest, phase, column = index
        source = column * stride + phase
        return te.if_then_else(source < width,
                               data[(*rest, te.minimum(source, width - 1))],
                               te.const(0.0, data.dtype))

    return te.compute((*lead, stride, phase_width), body, name=name, dtype=data.dtype,
                      attrs={"keep": True})


@dataclass(frozen=True)
class ConvFrame:
    """What every direct NCHW convolution compute starts from: the geometry of ``Conv``'s
    attributes for an input and a weight shape, and the reduction axes over one group's
    input channels (``rc``) and the kernel rows and columns (``ry``, ``rx``)."""

    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    pads: tuple[int, ...]
    out_size: tuple[int, int]
    group: int
    batch: int
    out_channels: int
    group_in: int  #: input channels per group
    group_out: int  #: output channels per group
    rc: te.IterVar
    ry: te.IterVar
    rx: te.IterVar

    def input_channel(self, out_channel):
        """The input channel output channel ``out_channel`` reads at reduction step ``rc``."""
        if self.group == 1:
            return self.rc
        return (out_channel // self.group_out) * self.group_in + self.rc


def conv_frame(x: te.Tensor, w: te.Tensor, attrs, what: str) -> ConvFrame:
    """The :class:`ConvFrame` of a 2-D convolution of ``x`` by ``w`` (``what`` names the op
    in the error a non-2-D one gets)."""
    if x.ndim != 4:
        raise CompileError(f"{x.ndim - 2}-D {what} has no TE compute (2-D only)")
    kernel, strides, dilations, pads, out_size = conv_geometry(x.shape, w.shape, attrs)
    group = attrs["group"]
    return ConvFrame(tuple(kernel), tuple(strides), tuple(dilations), tuple(pads),
                     tuple(out_size), group, x.shape[0], w.shape[0], x.shape[1] // group,
                     w.shape[0] // group, te.reduce_axis(x.shape[1] // group, "rc"),
                     te.reduce_axis(kernel[0], "ry"), te.reduce_axis(kernel[1], "rx"))


@register_compute("Conv")
def conv(inputs, attrs, out_types):
    """Direct NCHW convolution (any group count, stride, dilation, padding), tagged for
    ``schedule_conv2d_nchw``. A strided convolution reads its (padded) input through a
    phase-split copy, so every load the schedule vectorizes is contiguous."""
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    if not x.dtype.startswith("float") or x.dtype == "float16":
        raise CompileError(f"Conv on {x.dtype} has no TE compute")
    frame = conv_frame(x, w, attrs, "convolution")
    pads, (oh, ow) = frame.pads, frame.out_size
    (sy, sx), (dy, dx) = frame.strides, frame.dilations
    rc, ry, rx = frame.rc, frame.ry, frame.rx
    height, width = x.shape[2:]
    if sx > 1 and width % sx == 0:
        # Unpadded phases (a plain strided copy), padding decided where the tile reads
        # them: every column phase has the same width, so a read is in range exactly
        # when its phase column is, and the guarded load stays contiguous.
        phases = _phase_split_columns(x, sx, "conv_phases")

        def read(nn, channel, y, xx):
            row = y * sy + ry * dy - pads[0]
            offset = rx * dx - pads[1]
            column = xx + offset // sx
            inside = te.logical_and(te.logical_and(row >= 0, row < height),
                                    te.logical_and(column >= 0, column < width // sx))
            return te.if_then_else(inside, phases[nn, channel, row, offset % sx, column],
                                   te.const(0.0, x.dtype))
    else:
        data = pad(x, pads[:2], pads[2:], 0.0, "conv_pad")
        if sx > 1:
            data = _phase_split_columns(data, sx, "conv_phases")

        def read(nn, channel, y, xx):
            row = y * sy + ry * dy
            if sx == 1:
                return data[nn, channel, row, xx + rx * dx]
            return data[nn, channel, row, (rx * dx) % sx, xx + (rx * dx) // sx]

    def body(nn, k, y, xx):
        return te.sum(read(nn, frame.input_channel(k), y, xx) * w[k, rc, ry, rx],
                      axis=[rc, ry, rx])

    y = te.compute((frame.batch, frame.out_channels, oh, ow), body, name="conv", dtype=x.dtype)
    if b is None:
        return [y]
    return [te.compute(y.shape, lambda nn, k, i, j: y[nn, k, i, j] + b[k], name="conv_bias",
                       dtype=x.dtype)]


# -------------------------------------------------------------------------------- MatMul, Gemm

def matmul(a, b, name: str = "matmul", dtype: str | None = None) -> te.Tensor:
    """The plain product of ``a`` and ``b`` under ``numpy.matmul``'s rules:
    ``out[..., i, j] = sum_k a[..., i, k] * b[..., k, j]``, batch axes broadcast (a 1-D
    operand is a row or a column whose axis the output drops).

    No layout is decided here: a target recognises the product by its structure
    (``sum(A[..., i, k] * B[..., k, j])``) and packs, blocks or stages its operands as
    its schedule needs (the CPU reads B through column panels, the GPU through shared
    memory)."""
    if a.shape[-1] != b.shape[-2 if b.ndim > 1 else 0]:
        raise CompileError(f"matmul {name!r}: {list(a.shape)} x {list(b.shape)} do not "
                           "agree on the reduction axis")
    batch = np.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2]))
    shape = (*batch, *a.shape[-2:-1], *(b.shape[-1:] if b.ndim > 1 else ()))
    k = te.reduce_axis(a.shape[-1], "k")

    def body(*index):
        rest = list(index)
        j = rest.pop() if b.ndim > 1 else None
        i = rest.pop() if a.ndim > 1 else None
        a_index = (*_batch_index(a, rest), *(() if i is None else (i,)), k)
        b_index = (*_batch_index(b, rest), k, *(() if j is None else (j,)))
        return te.sum(a[a_index] * b[b_index], axis=k)

    return te.compute(shape, body, name=name, dtype=dtype or a.dtype)


def _batch_index(t, batch_index: list) -> tuple:
    """The batch part of ``t``'s index at the output's ``batch_index`` (right-aligned,
    an axis of extent 1 broadcast)."""
    axes = t.shape[:-2]
    offset = len(batch_index) - len(axes)
    return tuple(0 if dim == 1 else batch_index[offset + n] for n, dim in enumerate(axes))


@register_compute("MatMul")
def matmul_(inputs, attrs, out_types):
    """``numpy.matmul`` of any ranks: :func:`matmul`."""
    a, b = inputs[0], inputs[1]
    require_native([a.dtype, b.dtype], "MatMul")
    return [matmul(a, b, "matmul", out_types[0].dtype)]


@register_compute("Gemm")
def gemm(inputs, attrs, out_types):
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    if not a.dtype.startswith("float"):
        raise CompileError(f"Gemm on {a.dtype} has no TE compute")
    if attrs["transA"]:
        a = te.compute((a.shape[1], a.shape[0]), lambda i, j: a[j, i], name="gemm_at")
    if attrs["transB"]:
        b = te.compute((b.shape[1], b.shape[0]), lambda i, j: b[j, i], name="gemm_bt")
    prod = matmul(a, b, "gemm")
    alpha, beta = attrs["alpha"], attrs["beta"]
    shape = tuple(out_types[0].shape)
    if c is None and alpha == 1.0:
        return [prod]

    def body(i, j):
        value = prod[i, j] * te.const(alpha, a.dtype) if alpha != 1.0 else prod[i, j]
        if c is not None:
            bias = broadcast_load(c, shape, (i, j))
            value = value + (bias * te.const(beta, a.dtype) if beta != 1.0 else bias)
        return value

    return [te.compute(shape, body, name="gemm_out", dtype=out_types[0].dtype)]


# ------------------------------------------------------------------------------------- pooling

def _pool_geometry(x, attrs, out_type):
    """(kernel, strides, pads) of a pooling window over every axis after N and C: the
    2-D spatial ones, or those and the channel block of an NCHW[x]c tensor (window 1)."""
    spatial = x.ndim - 2
    if spatial < 1:
        raise CompileError("pooling needs a spatial axis")
    if attrs.get("ceil_mode") or any(d != 1 for d in attrs.get("dilations") or [1]):
        raise CompileError("pooling with ceil_mode or dilations has no TE compute")
    kernel = list(attrs["kernel_shape"])
    strides = list(attrs.get("strides") or [1] * spatial)
    _, _, _, pads, _ = conv_geometry(x.shape, (1, 1, *kernel),
                                     {**attrs, "dilations": [1] * spatial, "strides": strides})
    return kernel, strides, pads


def _window_reduction(data, kernel, strides, out_shape, combiner, name: str):
    """``combiner`` (te.max / te.sum) over each output point's window of ``data`` (for a
    2-D pooling of an NCHW[x]c tensor, a window of one over its channel block, which a
    CPU schedule vectorizes over)."""
    axes = [te.reduce_axis(k, f"r{d}") for d, k in enumerate(kernel)]

    def body(*index):
        n, c, *spatial = index
        window = tuple(i * s + r for i, s, r in zip(spatial, strides, axes))
        return combiner(data[(n, c, *window)], axis=axes)

    return te.compute(out_shape, body, name=name, dtype=data.dtype)


@register_compute("MaxPool")
def max_pool(inputs, attrs, out_types):
    if len(out_types) > 1:
        raise CompileError("MaxPool with Indices has no TE compute")
    x = inputs[0]
    kernel, strides, pads = _pool_geometry(x, attrs, out_types[0])
    lowest = float(np.finfo(x.dtype).min) if x.dtype.startswith("float") else \
        int(np.iinfo(x.dtype).min)
    half = len(pads) // 2
    data = pad(x, pads[:half], pads[half:], lowest, "maxpool_pad")
    return [_window_reduction(data, kernel, strides, out_types[0].shape, te.max, "maxpool")]


@register_compute("AveragePool")
def average_pool(inputs, attrs, out_types):
    x = inputs[0]
    kernel, strides, pads = _pool_geometry(x, attrs, out_types[0])
    if any(pads) and not attrs["count_include_pad"]:
        raise CompileError("AveragePool excluding padding has no TE compute")
    half = len(pads) // 2
    data = pad(x, pads[:half], pads[half:], 0.0, "avgpool_pad")
    total = _window_reduction(data, kernel, strides, out_types[0].shape, te.sum,
                              "avgpool_sum")
    scale = te.const(1.0 / int(np.prod(kernel)), x.dtype)
    return [te.compute(total.shape, lambda *i: total[i] * scale, name="avgpool",
                       dtype=x.dtype)]


@register_compute("GlobalAveragePool")
def global_average_pool(inputs, attrs, out_types):
    x = inputs[0]
    axes = [te.reduce_axis(d, f"r{k}") for k, d in enumerate(x.shape[2:])]
    lead = x.ndim - len(axes)
    total = te.compute(out_types[0].shape, lambda *i: te.sum(
        x[tuple(i[:lead]) + tuple(axes)], axis=axes), name="gap_sum", dtype=x.dtype)
    scale = te.const(1.0 / int(np.prod(x.shape[2:])), x.dtype)
    return [te.compute(total.shape, lambda *i: total[i] * scale, name="gap", dtype=x.dtype)]


@register_compute("GlobalMaxPool")
def global_max_pool(inputs, attrs, out_types):
    x = inputs[0]
    require_native([x.dtype], "GlobalMaxPool")
    require_nonempty(x.shape, "GlobalMaxPool")
    return [extreme(x, list(range(2, x.ndim)), True, "global_max_pool")]


# ---------------------------------------------------- ConvTranspose, LpPool, MaxUnpool, Col2Im

#: most (output element, input element) pairs MaxUnpool's search may visit
UNPOOL_MAX_WORK = 1 << 24


def _all(conditions) -> tx.Expr:
    result = te.const(True, "bool")
    for condition in conditions:
        result = te.logical_and(result, condition)
    return result


def _within(i, size: int) -> tx.Expr:
    return te.logical_and(i >= 0, i < size)


@register_compute("ConvTranspose")
def conv_transpose(inputs, attrs, out_types):
    """``y[n, m, o] = sum x[n, c, i] * w[c, m, k]`` over the taps with
    ``i * stride + k * dilation = o + pad_begin`` (per spatial axis), grouped."""
    x, w = inputs[:2]
    b = inputs[2] if len(inputs) > 2 else None
    float_only(x.dtype, "ConvTranspose")
    kernel, strides, dilations, pads, _ = conv_transpose_geometry(x.shape, w.shape, attrs)
    out = out_types[0]
    group = attrs["group"]
    cg, mg = x.shape[1] // group, w.shape[1]
    spatial = x.shape[2:]

    def body(n, m, *o):
        rc = te.reduce_axis(cg, "rc")
        taps = [te.reduce_axis(k, f"rk{d}") for d, k in enumerate(kernel)]
        channel = (m // mg) * cg + rc.var if group > 1 else rc.var
        offsets = [o[d] + pads[d] - taps[d].var * dilations[d] for d in range(len(kernel))]
        sources = [t // s if s > 1 else t for t, s in zip(offsets, strides)]
        hit = _all([te.logical_and(t >= 0, t < size * s) for t, size, s
                    in zip(offsets, spatial, strides)]
                   + [te.equal(t % s, 0) for t, s in zip(offsets, strides) if s > 1])
        product = x[(n, channel, *sources)] * w[(channel, m % mg if group > 1 else m,
                                                 *[t.var for t in taps])]
        return te.sum(te.if_then_else(hit, product, te.const(0.0, x.dtype)), axis=[rc, *taps])

    y = te.compute(out.shape, body, name="conv_transpose", dtype=x.dtype)
    if b is None:
        return [y]
    return [te.compute(out.shape, lambda n, m, *o: y[(n, m, *o)] + b[m],
                       name="conv_transpose_bias", dtype=x.dtype)]


def _lp_finish(total: te.Tensor, p: float, dtype: str, name: str) -> te.Tensor:
    root = te.const(1.0 / p, total.dtype)
    return te.compute(total.shape, lambda *i: te.cast(dtype, te.power(total[i], root)),
                      name=name, dtype=dtype)


def _lp_term(value, p: float):
    magnitude = te.fabs(value)
    if p == 1:
        return magnitude
    if p == 2:
        return magnitude * magnitude
    return te.power(magnitude, te.const(float(p), value.dtype))


@register_compute("LpPool")
def lp_pool(inputs, attrs, out_types):
    """The p-norm of each window; taps in the padding (or past the end, with ceil_mode)
    count as zeros."""
    x = inputs[0]
    float_only(x.dtype, "LpPool")
    geo = pool_geometry(x.shape, attrs)
    p = float(attrs["p"])
    spatial = x.shape[2:]

    def body(n, c, *o):
        taps = [te.reduce_axis(k, f"rk{d}") for d, k in enumerate(geo.kernel)]
        where = [o[d] * geo.strides[d] + taps[d].var * geo.dilations[d] - geo.pads[d]
                 for d in range(len(spatial))]
        inside = _all(_within(i, size) for i, size in zip(where, spatial))
        return te.sum(te.if_then_else(inside, _lp_term(x[(n, c, *where)], p),
                                      te.const(0.0, x.dtype)), axis=taps)

    total = te.compute(out_types[0].shape, body, name="lp_pool_sum", dtype=x.dtype)
    return [_lp_finish(total, p, x.dtype, "lp_pool")]


@register_compute("GlobalLpPool")
def global_lp_pool(inputs, attrs, out_types):
    x = inputs[0]
    float_only(x.dtype, "GlobalLpPool")
    p = float(attrs["p"])
    total = reduce_stage(x, list(range(2, x.ndim)), "sum", lambda i: _lp_term(x[i], p),
                         "global_lp_pool_sum", x.dtype)
    return [_lp_finish(total, p, x.dtype, "global_lp_pool")]


@register_compute("MaxUnpool")
def max_unpool(inputs, attrs, out_types):
    """Each output element of the unpooled region takes the (last) input element whose
    flat index names it; everything else is zero."""
    x, indices = inputs[:2]
    out = out_types[0]
    natural = unpooled_shape(x.shape, attrs["kernel_shape"], attrs["strides"], attrs["pads"])
    if int(np.prod(x.shape)) * int(np.prod(out.shape)) > UNPOOL_MAX_WORK:
        raise CompileError(f"MaxUnpool of {list(x.shape)} into {list(out.shape)} is too large "
                           "for its search compute")
    strides = [int(np.prod(natural[d + 1:])) for d in range(len(natural))]
    zeros = te.compute(out.shape, lambda *i: te.const(0, x.dtype), name="max_unpool_zeros",
                       dtype=x.dtype)

    def hits(index, position):
        flat = sum((te.cast("int64", i) * s for i, s in zip(index, strides)),
                   te.const(0, "int64"))
        # rows past the unpooled shape (a larger output_shape) are never hit
        inside = _all(i < size for i, size, o in zip(index, natural, out.shape) if size < o)
        return te.logical_and(inside, te.equal(indices[position], flat))

    search = UpdateSearch(tuple(x.shape), hits, lambda index, position: x[position])
    return [scatter_by_search(zeros, search, "none", "max_unpool")]


def _col2im_block(data_shape, image, channels: int, attrs) -> tuple[int, ...]:
    """The block shape, told from the shapes: its product is the column rows per channel
    and its sliding positions must number the columns; more than one fit raises."""
    n = len(image)
    strides = list(attrs["strides"] or [1] * n)
    dilations = list(attrs["dilations"] or [1] * n)
    pads = list(attrs["pads"] or [0] * (2 * n))
    per_block = data_shape[1] // channels
    padded = [size + pads[i] + pads[i + n] for i, size in enumerate(image)]
    fits = []
    for block in itertools.product(*[range(1, min(per_block, size) + 1) for size in padded]):
        if int(np.prod(block)) != per_block:
            continue
        counts = [(size - (k - 1) * d - 1) // s + 1
                  for size, k, d, s in zip(padded, block, dilations, strides)]
        if all(c > 0 for c in counts) and int(np.prod(counts)) == data_shape[2]:
            fits.append(block)
    if len(fits) != 1:
        raise CompileError(f"Col2Im: the block shape cannot be told from the shapes "
                           f"({len(fits)} fit); it runs on the NumPy reference")
    return fits[0]


@register_compute("Col2Im")
def col2im(inputs, attrs, out_types):
    """Pixel ``y`` sums column entry (tap ``k``, block ``b``) wherever
    ``b * stride + k * dilation = y + pad_begin`` per axis."""
    data = inputs[0]
    out = out_types[0]
    image = out.shape[2:]
    n = len(image)
    block = _col2im_block(data.shape, image, out.shape[1], attrs)
    strides = list(attrs["strides"] or [1] * n)
    dilations = list(attrs["dilations"] or [1] * n)
    pads = list(attrs["pads"] or [0] * (2 * n))
    counts = [(size + pads[i] + pads[i + n] - (k - 1) * d - 1) // s + 1
              for i, (size, k, d, s) in enumerate(zip(image, block, dilations, strides))]
    per_block = int(np.prod(block))

    def body(batch, c, *y):
        taps = [te.reduce_axis(k, f"rk{d}") for d, k in enumerate(block)]
        offsets = [y[d] + pads[d] - taps[d].var * dilations[d] for d in range(n)]
        sources = [t // s if s > 1 else t for t, s in zip(offsets, strides)]
        hit = _all([te.logical_and(t >= 0, t < count * s) for t, count, s
                    in zip(offsets, counts, strides)]
                   + [te.equal(t % s, 0) for t, s in zip(offsets, strides) if s > 1])
        row = c * per_block
        column = te.const(0, "int64")
        for d in range(n):
            row = row + taps[d].var * int(np.prod(block[d + 1:]))
            column = column * counts[d] + sources[d]
        return te.sum(te.if_then_else(hit, data[batch, row, column],
                                      te.const(0, data.dtype)), axis=taps)

    return [te.compute(out.shape, body, name="col2im", dtype=data.dtype)]


# ------------------------------------------ spatial sampling: AffineGrid, GridSample, RoiAlign

def _clip(value, low, high):
    return te.minimum(te.maximum(value, low), high)


@register_compute("AffineGrid")
def affine_grid(inputs, attrs, out_types):
    """``grid[n, p..., i] = theta[n, i, :] . (x, y[, z], 1)`` at the normalized position
    of each output point (x along the last spatial axis)."""
    theta = inputs[0]
    out = out_types[0]
    float_only(out.dtype, "AffineGrid")
    spatial = out.shape[1:-1]
    align = bool(attrs["align_corners"])

    def position(index, count: int):
        i = te.cast(F64, index)
        if align:
            return f64(-1.0) if count == 1 else f64(-1.0) + i * f64(2.0 / (count - 1))
        return (f64(2.0) * i + f64(1.0)) / f64(count) - f64(1.0)

    def body(n, *rest):
        *where, i = rest
        points = [position(where[len(spatial) - 1 - k], spatial[len(spatial) - 1 - k])
                  for k in range(len(spatial))] + [f64(1.0)]
        value = f64(0.0)
        for k, point in enumerate(points):
            value = value + point * te.cast(F64, theta[n, i, k])
        return te.cast(out.dtype, value)

    return [te.compute(out.shape, body, name="affine_grid", dtype=out.dtype)]


_GRID_MODES = {"linear": "linear", "bilinear": "linear", "nearest": "nearest",
               "cubic": "cubic", "bicubic": "cubic"}


def _reflect(coordinate, low: float, high: float):
    """Coordinates outside [low, high] folded back in, bouncing between the borders."""
    span = high - low
    if span <= 0:
        return f64(low)
    below, above = coordinate < f64(low), coordinate > f64(high)
    distance = te.if_then_else(below, f64(low) - coordinate,
                               te.if_then_else(above, coordinate - f64(high), f64(0.0)))
    bounces = te.floor(distance / f64(span))
    rest = distance - bounces * f64(span)
    even = te.equal(bounces - f64(2.0) * te.floor(bounces / f64(2.0)), f64(0.0))
    from_low = te.if_then_else(even, f64(low) + rest, f64(high) - rest)
    from_high = te.if_then_else(even, f64(high) - rest, f64(low) + rest)
    return te.if_then_else(below, from_low, te.if_then_else(above, from_high, coordinate))


def _cubic_weights(t):
    """Keys cubic convolution weights (a = -0.75) of the taps at -1, 0, 1, 2."""
    a = -0.75

    def near(d):
        return ((f64(a + 2) * d - f64(a + 3)) * d) * d + f64(1.0)

    def far(d):
        return ((f64(a) * d - f64(5 * a)) * d + f64(8 * a)) * d - f64(4 * a)

    one, two = f64(1.0), f64(2.0)
    return [far(t + one), near(t), near(one - t), far(two - t)]


def _source_coordinate(coordinate, size: int, mode: str, padding: str, align: bool):
    """The pixel coordinate normalized grid ``coordinate`` samples along an axis of
    ``size``, after rounding (nearest) and the padding mode's folding."""
    c, borders = _unnormalized(coordinate, size, align)
    if mode == "nearest":
        c = te.call_intrin("round", c)
    outside = te.logical_or(c < f64(borders[0]), c > f64(borders[1]))
    if padding == "border":
        return te.if_then_else(outside, _clip(c, f64(0.0), f64(size - 1)), c)
    if padding == "reflection":
        return te.if_then_else(outside, _reflect(c, *borders), c)
    return c


def _unnormalized(coordinate, size: int, align: bool):
    """Pixel coordinate of a normalized one, and the borders past which it pads."""
    if align:
        return (coordinate + f64(1.0)) / f64(2.0) * f64(size - 1), (0.0, size - 1.0)
    return ((coordinate + f64(1.0)) * f64(size) - f64(1.0)) / f64(2.0), (-0.5, size - 0.5)


def _axis_taps(c, size: int, mode: str, padding: str, align: bool):
    """(index, weight) taps interpolating one axis at pixel coordinate ``c``."""
    _, borders = _unnormalized(f64(0.0), size, align)
    if mode == "nearest":
        raw = [(te.cast("int64", c), f64(1.0))]
    else:
        base = te.floor(c)
        fraction = c - base
        start = te.cast("int64", base)
        if mode == "linear":
            raw = [(start, f64(1.0) - fraction), (start + 1, fraction)]
        else:
            raw = list(zip([start + k for k in (-1, 0, 1, 2)], _cubic_weights(fraction)))
    taps = []
    last = te.const(size - 1, "int64")
    for index, weight in raw:
        if padding == "zeros":
            inside = te.logical_and(index >= 0, index <= last)
            weight = te.if_then_else(inside, weight, f64(0.0))
        elif padding == "reflection":
            index = te.cast("int64", _reflect(te.cast(F64, index), *borders))
        taps.append((_clip(index, te.const(0, "int64"), last), weight))
    return taps


@register_compute("GridSample")
def grid_sample(inputs, attrs, out_types):
    """A sum over the corners of per-axis taps (1 nearest, 2 linear, 4 cubic)."""
    x, grid = inputs[:2]
    out = out_types[0]
    float_only(x.dtype, "GridSample")
    mode = _GRID_MODES[attrs["mode"]]
    spatial = x.shape[2:]
    rank = len(spatial)
    align = bool(attrs["align_corners"])
    padding = attrs["padding_mode"]

    def coordinate_body(*index):
        *where, axis = index
        value = f64(0.0)
        for a, size in enumerate(spatial):
            # grid's last axis lists (x, y[, z]): the last spatial axis first
            c = _source_coordinate(te.cast(F64, grid[(*where, rank - 1 - a)]), size, mode,
                                   padding, align)
            value = te.if_then_else(te.equal(axis, a), c, value)
        return value

    # the folded coordinates, and per axis and tap a table of its index and weight at
    # every output point, computed once: the folding and the corners read them often
    coordinates = te.compute(grid.shape, coordinate_body, name="grid_sample_coordinates",
                             dtype=F64, attrs={"keep": True})

    def taps_of(axis: int, where: tuple):
        return _axis_taps(coordinates[(*where, axis)], spatial[axis], mode, padding, align)

    tables = []
    for axis in range(rank):
        count = len(taps_of(axis, tuple(te.const(0, "int64") for _ in grid.shape[:-1])))
        tables.append([tuple(te.compute(
            grid.shape[:-1], lambda *w, axis=axis, k=k, part=part: taps_of(axis, w)[k][part],
            name=f"grid_sample_tap{axis}_{k}_{part}", dtype=dtype, attrs={"keep": True})
            for part, dtype in ((0, "int64"), (1, F64))) for k in range(count)])

    def body(n, channel, *where):
        point = (n, *where)
        value = f64(0.0)
        for corner in itertools.product(*tables):
            weight = corner[0][1][point]
            for _, w in corner[1:]:
                weight = weight * w[point]
            value = value + weight * te.cast(
                F64, x[(n, channel, *[index[point] for index, _ in corner])])
        return te.cast(out.dtype, value)

    return [te.compute(out.shape, body, name="grid_sample", dtype=out.dtype)]


def _roi_samples(start, length, bin_index, sample, bins: int, per_bin: int, size: int):
    """The bilinear taps of one RoiAlign sample along an axis: (low, high, low weight,
    high weight, valid), as the reference's ``_roi_axis_samples``."""
    step = length / f64(bins)
    offset = (te.cast(F64, sample) + f64(0.5)) * step / f64(per_bin)
    position = start + te.cast(F64, bin_index) * step + offset
    valid = te.logical_and(position >= f64(-1.0), position <= f64(size))
    position = te.maximum(position, f64(0.0))
    low = te.cast("int64", position)
    clamped = low >= size - 1
    low = te.if_then_else(clamped, te.const(size - 1, "int64"), low)
    high = te.if_then_else(clamped, te.const(size - 1, "int64"), low + 1)
    position = te.if_then_else(clamped, te.cast(F64, low), position)
    high_weight = position - te.cast(F64, low)
    return low, high, f64(1.0) - high_weight, high_weight, valid


@register_compute("RoiAlign")
def roi_align(inputs, attrs, out_types):
    """Average (or max of weighted corners) of a fixed ``sampling_ratio`` grid of
    bilinear samples per bin; an adaptive grid (ratio 0) depends on each box's size
    and runs on the NumPy reference."""
    x, rois, batch_indices = inputs[:3]
    out = out_types[0]
    float_only(x.dtype, "RoiAlign")
    ratio = attrs["sampling_ratio"]
    if ratio <= 0:
        raise CompileError("RoiAlign with an adaptive sampling grid (sampling_ratio 0) has "
                           "no TE compute")
    half_pixel = attrs["coordinate_transformation_mode"] == "half_pixel"
    height, width = x.shape[2:]
    bins_h, bins_w = attrs["output_height"], attrs["output_width"]
    scale = f64(attrs["spatial_scale"])
    shift = f64(0.5 if half_pixel else 0.0)
    average = attrs["mode"] == "avg"

    def box(r, k):
        return te.cast(F64, rois[r, k]) * scale - shift

    def extent(r, k):
        length = box(r, k + 2) - box(r, k)
        return length if half_pixel else te.maximum(length, f64(1.0))

    def axis_tables(k: int, bins: int, size: int, name: str):
        """Per (box, bin, sample) along the axis whose box corner is column ``k``: the
        five parts of its taps, computed once (every corner of every sample reads them)."""
        kinds = ("int64", "int64", F64, F64, "bool")
        return [te.compute((rois.shape[0], bins, ratio), lambda r, b, sample, part=part: (
            _roi_samples(box(r, k), extent(r, k), b, sample, bins, ratio, size)[part]),
            name=f"roi_align_{name}{part}", dtype=kind, attrs={"keep": True})
            for part, kind in enumerate(kinds)]

    rows, columns = axis_tables(1, bins_h, height, "y"), axis_tables(0, bins_w, width, "x")

    def body(r, channel, ph, pw):
        image = te.cast("int64", batch_indices[r])
        value = f64(0.0) if average else None
        for sy, sx in itertools.product(range(ratio), range(ratio)):
            y_low, y_high, wy_low, wy_high, y_ok = [t[r, ph, sy] for t in rows]
            x_low, x_high, wx_low, wx_high, x_ok = [t[r, pw, sx] for t in columns]
            ok = te.logical_and(y_ok, x_ok)
            for row, row_weight in ((y_low, wy_low), (y_high, wy_high)):
                for column, column_weight in ((x_low, wx_low), (x_high, wx_high)):
                    term = te.if_then_else(ok, row_weight * column_weight * te.cast(
                        F64, x[image, channel, row, column]), f64(0.0))
                    value = term if value is None else (
                        value + term if average else te.maximum(value, term))
        if average:
            value = value / f64(ratio * ratio)
        return te.cast(out.dtype, value)

    return [te.compute(out.shape, body, name="roi_align", dtype=out.dtype)]


# ---------------------------------------------------------------------------------- DeformConv

def _flat_tap(taps, kernel) -> te.Tensor:
    """Row-major flat index of the kernel tap ``taps`` (one index per spatial axis)."""
    flat = taps[0]
    for tap, size in zip(taps[1:], kernel[1:]):
        flat = flat * size + tap
    return flat


@register_compute("DeformConv")
def deform_conv(inputs, attrs, out_types):
    """Per (image, offset group, tap, output point): bilinear taps of the moved sample
    position (zeros outside, as GridSample's), computed once; the sampled columns, times
    the mask, feed a grouped convolution reduction in float64 like the reference."""
    x, w, offset = inputs[:3]
    b, mask = optional_input(inputs, 3), optional_input(inputs, 4)
    out = out_types[0]
    float_only(x.dtype, "DeformConv")
    geometry = {k: attrs[k] for k in ("dilations", "kernel_shape", "pads", "strides")}
    kernel, strides, dilations, pads, out_spatial = conv_geometry(x.shape, w.shape, geometry)
    rank = len(kernel)
    batch, channels = x.shape[:2]
    spatial = x.shape[2:]
    offset_groups = attrs["offset_group"]
    per_offset_group = channels // offset_groups
    taps_per_group = int(np.prod(kernel))
    table_shape = (batch, offset_groups, *kernel, *out_spatial)

    def position(axis: int, n, g, taps, where):
        """Pixel coordinate along ``axis`` sampled by tap ``taps`` at output ``where``."""
        tap = g * taps_per_group + _flat_tap(taps, kernel)
        moved = te.cast(F64, offset[(n, tap * rank + axis, *where)])
        base = where[axis] * strides[axis] - pads[axis] + taps[axis] * dilations[axis]
        return te.cast(F64, base) + moved

    def taps_of(axis: int, index):
        n, g, *rest = index
        taps, where = rest[:rank], rest[rank:]
        return _axis_taps(position(axis, n, g, taps, where), spatial[axis], "linear", "zeros",
                          True)

    zero_index = tuple(te.const(0, "int64") for _ in table_shape)
    tables = [[tuple(te.compute(
        table_shape, lambda *i, axis=axis, k=k, part=part: taps_of(axis, i)[k][part],
        name=f"deform_conv_tap{axis}_{k}_{part}", dtype=dtype, attrs={"keep": True})
        for part, dtype in ((0, "int64"), (1, F64)))
        for k in range(len(taps_of(axis, zero_index)))] for axis in range(rank)]

    def column_body(n, c, *rest):
        g = c // per_offset_group
        point = (n, g, *rest)
        value = te.const(0.0, F64)
        for corner in itertools.product(*tables):
            weight = corner[0][1][point]
            for _, more in corner[1:]:
                weight = weight * more[point]
            value = value + weight * te.cast(F64, x[(n, c, *[i[point] for i, _ in corner])])
        if mask is not None:
            taps = rest[:rank]
            value = value * te.cast(F64, mask[(n, g * taps_per_group + _flat_tap(taps, kernel),
                                               *rest[rank:])])
        return value

    columns = te.compute((batch, channels, *kernel, *out_spatial), column_body,
                         name="deform_conv_columns", dtype=F64, attrs={"keep": True})
    in_per_group, out_per_group = channels // attrs["group"], w.shape[0] // attrs["group"]

    def conv_body(n, m, *where):
        rc = te.reduce_axis(in_per_group, "rc")
        taps = [te.reduce_axis(k, f"rk{d}") for d, k in enumerate(kernel)]
        channel = (m // out_per_group) * in_per_group + rc.var
        tap_vars = [t.var for t in taps]
        return te.sum(columns[(n, channel, *tap_vars, *where)]
                      * te.cast(F64, w[(m, rc.var, *tap_vars)]), axis=[rc, *taps])

    total = te.compute(out.shape, conv_body, name="deform_conv_sum", dtype=F64)

    def finish(n, m, *where):
        value = total[(n, m, *where)]
        if b is not None:
            value = value + te.cast(F64, b[m])
        return te.cast(out.dtype, value)

    return [te.compute(out.shape, finish, name="deform_conv", dtype=out.dtype)]
