"""Convolution, dense layers and pooling."""

from __future__ import annotations

import numpy as np

from .. import te
from ..errors import CompileError
from ..ops.layout import blocked_conv_geometry
from ..ops.nn import conv_geometry
from .common import broadcast_load, float_only, require_native
from .registry import register_compute


def _pad(x, pads_begin, pads_end, value, name, lead: int | None = None,
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


@register_compute("Conv")
def conv(inputs, attrs, out_types):
    """Direct NCHW convolution (any group count, stride, dilation, padding), tagged for
    ``schedule_conv2d_nchw``. A strided convolution reads its (padded) input through a
    phase-split copy, so every load the schedule vectorizes is contiguous."""
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    if x.ndim != 4:
        raise CompileError(f"{x.ndim - 2}-D convolution has no TE compute (2-D only)")
    if not x.dtype.startswith("float") or x.dtype == "float16":
        raise CompileError(f"Conv on {x.dtype} has no TE compute")
    kernel, strides, dilations, pads, (oh, ow) = conv_geometry(x.shape, w.shape, attrs)
    group = attrs["group"]
    n, c = x.shape[:2]
    o = w.shape[0]
    cg, og = c // group, o // group
    sy, sx = strides
    dy, dx = dilations
    rc = te.reduce_axis(cg, "rc")
    ry = te.reduce_axis(kernel[0], "ry")
    rx = te.reduce_axis(kernel[1], "rx")
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
        data = _pad(x, pads[:2], pads[2:], 0.0, "conv_pad")
        if sx > 1:
            data = _phase_split_columns(data, sx, "conv_phases")

        def read(nn, channel, y, xx):
            row = y * sy + ry * dy
            if sx == 1:
                return data[nn, channel, row, xx + rx * dx]
            return data[nn, channel, row, (rx * dx) % sx, xx + (rx * dx) // sx]

    def body(nn, k, y, xx):
        channel = (k // og) * cg + rc if group > 1 else rc
        return te.sum(read(nn, channel, y, xx) * w[k, rc, ry, rx], axis=[rc, ry, rx])

    y = te.compute((n, o, oh, ow), body, name="conv", dtype=x.dtype,
                   attrs={"schedule": "conv2d_nchw"})
    if b is None:
        return [y]
    return [te.compute(y.shape, lambda nn, k, i, j: y[nn, k, i, j] + b[k], name="conv_bias",
                       dtype=x.dtype)]


@register_compute("ConvNCHWc")
def conv_nchwc(inputs, attrs, out_types):
    """Blocked convolution (dense or depthwise) over NCHW[x]c data and packed weights,
    tagged for ``schedule_conv2d_nchwc``. The padded input is materialized ahead (a
    guarded read in the tile's inner loop would cost a select per multiply-add); the
    output channel block is the innermost axis, so the schedule vectorizes over it: a
    dense convolution multiplies one broadcast input element by a weight vector, a
    depthwise one an input vector (contiguous whatever the stride) by a weight vector."""
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    float_only(x.dtype, "ConvNCHWc")
    try:
        geometry = blocked_conv_geometry(x.shape, w.shape, attrs)
    except ValueError as exc:
        raise CompileError(f"ConvNCHWc: {exc}") from None
    sy, sx = attrs["strides"]
    dy, dx = attrs["dilations"]
    pads = attrs["pads"]
    depthwise = attrs["group"] != 1
    data = _pad(x, pads[:2], pads[2:], 0.0, "conv_pad", lead=2,
                attrs=None if depthwise else {"keep": True})
    ry = te.reduce_axis(geometry["kernel"][0], "ry")
    rx = te.reduce_axis(geometry["kernel"][1], "rx")
    if not depthwise:
        rco = te.reduce_axis(x.shape[1], "rco")
        rci = te.reduce_axis(x.shape[4], "rci")

        def body(n, ko, yy, xx, ki):
            return te.sum(data[n, rco, yy * sy + ry * dy, xx * sx + rx * dx, rci]
                          * w[ko, rco, ry, rx, rci, ki], axis=[rco, ry, rx, rci])
    else:
        def body(n, ko, yy, xx, ki):
            return te.sum(data[n, ko, yy * sy + ry * dy, xx * sx + rx * dx, ki]
                          * w[ko, 0, ry, rx, 0, ki], axis=[ry, rx])

    # the workload travels with the compute: a tuning log's config for it is looked up
    # when the kernel is scheduled (``heterocc.tuning.apply.blocked_conv_tiles``)
    workload = {"input_shape": tuple(x.shape), "weight_shape": tuple(w.shape),
                "strides": tuple(attrs["strides"]), "pads": tuple(pads),
                "dilations": tuple(attrs["dilations"]), "group": attrs["group"]}
    y = te.compute(geometry["out_shape"], body, name="conv_nchwc", dtype=x.dtype,
                   attrs={"schedule": "conv2d_nchwc", "blocked_conv": workload})
    if b is None:
        return [y]
    return [te.compute(y.shape, lambda n, ko, yy, xx, ki: y[n, ko, yy, xx, ki] + b[ko, ki],
                       name="conv_bias", dtype=x.dtype)]


def matmul(a, b, name: str = "matmul", dtype: str | None = None) -> te.Tensor:
    """The plain product of ``a`` and ``b`` under ``numpy.matmul``'s rules:
    ``out[..., i, j] = sum_k a[..., i, k] * b[..., k, j]``, batch axes broadcast (a 1-D
    operand is a row or a column whose axis the output drops).

    No layout is decided here: the compute is tagged ``{"schedule": "matmul"}`` so that a
    target recognises it and packs, blocks or stages its operands as its schedule needs
    (the CPU reads B through column panels, the GPU through shared memory)."""
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

    return te.compute(shape, body, name=name, dtype=dtype or a.dtype,
                      attrs={"schedule": "matmul"})


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
    """``combiner`` (te.max / te.sum) over each output point's window of ``data``. A 2-D
    pooling of an NCHW[x]c tensor (a window of one over its channel block) is tagged for
    ``schedule_pool_nchwc``, which vectorizes over the block."""
    axes = [te.reduce_axis(k, f"r{d}") for d, k in enumerate(kernel)]

    def body(*index):
        n, c, *spatial = index
        window = tuple(i * s + r for i, s, r in zip(spatial, strides, axes))
        return combiner(data[(n, c, *window)], axis=axes)

    blocked = len(kernel) == 3 and kernel[-1] == 1 and strides[-1] == 1
    return te.compute(out_shape, body, name=name, dtype=data.dtype,
                      attrs={"schedule": "pool_nchwc"} if blocked else None)


@register_compute("MaxPool")
def max_pool(inputs, attrs, out_types):
    if len(out_types) > 1:
        raise CompileError("MaxPool with Indices has no TE compute")
    x = inputs[0]
    kernel, strides, pads = _pool_geometry(x, attrs, out_types[0])
    lowest = float(np.finfo(x.dtype).min) if x.dtype.startswith("float") else \
        int(np.iinfo(x.dtype).min)
    half = len(pads) // 2
    data = _pad(x, pads[:half], pads[half:], lowest, "maxpool_pad")
    return [_window_reduction(data, kernel, strides, out_types[0].shape, te.max, "maxpool")]


@register_compute("AveragePool")
def average_pool(inputs, attrs, out_types):
    x = inputs[0]
    kernel, strides, pads = _pool_geometry(x, attrs, out_types[0])
    if any(pads) and not attrs["count_include_pad"]:
        raise CompileError("AveragePool excluding padding has no TE compute")
    half = len(pads) // 2
    data = _pad(x, pads[:half], pads[half:], 0.0, "avgpool_pad")
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
