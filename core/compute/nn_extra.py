"""Transposed convolution, Lp pooling, MaxUnpool and Col2Im: N-d computes whose taps
are guarded by their bounds (a guarded load is only made where it lands inside)."""

from __future__ import annotations

import itertools

import numpy as np

from .. import te
from ..errors import CompileError
from ..ops.nn import _unpooled_shape, conv_transpose_geometry, pool_geometry
from ..tir import expr as tx
from .common import float_only
from .reduction import reduce_stage
from .registry import register_compute
from .scatter import UpdateSearch, scatter_by_search

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
    natural = _unpooled_shape(x.shape, attrs["kernel_shape"], attrs["strides"], attrs["pads"])
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
