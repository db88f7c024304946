"""The NCHW conv2d and depthwise conv2d templates (the plain layout, for models compiled
without the blocked one)."""

from __future__ import annotations

import numpy as np

from heterocc.sdk import te
from heterocc.sdk.tuning import Config, ConfigSpace, Knob, Template, split_options

from .common import _random_inputs
from .matmul import _closest

# ------------------------------------------------------------------ conv2d, depthwise
#
# Workloads: conv2d (n, c, h, w, k, r, s, stride, pad, dtype);
#            depthwise (n, c, h, w, r, s, stride, pad, dtype).


def _out_size(size: int, kernel: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - kernel) // stride + 1


def _padded(data: te.Tensor, pad: int, name: str) -> te.Tensor:
    """``data`` zero-padded by ``pad`` on both spatial axes. The load keeps an affine
    index (no clamping) so that it vectorizes; the select never evaluates the side it
    does not choose, so out-of-range indices are not read."""
    if pad == 0:
        return data
    n, c, h, w = data.shape
    zero = te.const(0, data.dtype)

    def element(b, ch, y, x):
        inside = te.logical_and(te.logical_and(y >= pad, y < h + pad),
                                te.logical_and(x >= pad, x < w + pad))
        return te.if_then_else(inside, data[b, ch, y - pad, x - pad], zero)

    return te.compute((n, c, h + 2 * pad, w + 2 * pad), element, name=name)


def _padding_knob(pad: int) -> Knob:
    """Whether the zero padding is computed inside the convolution's loads or copied
    into a padded buffer first."""
    return Knob("padding", "layout", ("inline", "copy") if pad else ("inline",))


def _schedule_padding(s: te.Schedule, padded: te.Tensor, data: te.Tensor,
                      config: Config) -> None:
    if padded is data:
        return
    if config["padding"] == "inline":
        s[padded].compute_inline()
        return
    b, ch, y, x = s[padded].op.axis
    s[padded].parallel(s[padded].fuse(b, ch))
    s[padded].vectorize(x)


def _conv_space(args: tuple) -> ConfigSpace:
    n, c, h, w, k, r, s, stride, pad, dtype = args
    out_w = _out_size(w, s, stride, pad)
    return ConfigSpace((
        Knob("tile_channels", "split", split_options(k, (4, 8, 16, 32))),
        Knob("tile_columns", "vectorize", split_options(out_w, (4, 8, 16, 32))),
        Knob("reduce_order", "order", ("channel_outer", "kernel_outer")),
        Knob("unroll_channels", "unroll", (True, False)),
        Knob("parallel", "parallel", ("rows", "channel_tiles")),
        _padding_knob(pad),
    ))


def _conv_default(args: tuple) -> dict:
    space = _conv_space(args)
    knobs = {knob.name: knob.options for knob in space.knobs}
    return {"tile_channels": _closest(knobs["tile_channels"], 16),
            "tile_columns": _closest(knobs["tile_columns"], 16),
            "reduce_order": "channel_outer", "unroll_channels": True, "parallel": "rows",
            "padding": "inline"}


def _schedule_tiled_output(s: te.Schedule, out: te.Tensor, row_factor: int,
                           column_factor: int, tile_factor: int | None,
                           parallel: str) -> te.Tensor:
    """Tile an NCHW output: (n, channel tiles, row tiles, column tiles) outside, the
    (channel, row, column) tile inside, each tile accumulated in a local buffer (which is
    returned, for its reduction loops to be ordered)."""
    local = s.cache_write(out, "local")
    stage = s[out]
    b, ch, y, x = stage.op.axis
    if tile_factor is not None:
        cho, chi = stage.split(ch, tile_factor)
    else:
        cho, chi = ch, None
    yo, yi = stage.split(y, row_factor)
    xo, xi = stage.split(x, column_factor)
    inner = [iv for iv in (chi, yi) if iv is not None]
    stage.reorder(b, cho, yo, xo, *inner, xi)
    stage.parallel(stage.fuse(b, cho, yo) if parallel == "rows" else stage.fuse(b, cho))
    for iv in inner:
        stage.unroll(iv)
    stage.vectorize(xi)
    s[local].compute_at(stage, xo)
    return local


def _instantiate_conv(args: tuple, config: Config):
    n, c, h, w, k, r, s_, stride, pad, dtype = args
    data = te.placeholder((n, c, h, w), dtype, "data")
    weight = te.placeholder((k, c, r, s_), dtype, "weight")
    padded = _padded(data, pad, "data.pad")
    rc, ry, rx = te.reduce_axis(c, "rc"), te.reduce_axis(r, "ry"), te.reduce_axis(s_, "rx")
    out = te.compute(
        (n, k, _out_size(h, r, stride, pad), _out_size(w, s_, stride, pad)),
        lambda b, ch, y, x: te.sum(padded[b, rc, y * stride + ry, x * stride + rx]
                                   * weight[ch, rc, ry, rx], axis=[rc, ry, rx]),
        name="conv")
    s = te.create_schedule(out)
    _schedule_padding(s, padded, data, config)
    local = _schedule_tiled_output(s, out, 1, config["tile_columns"], config["tile_channels"],
                                   config["parallel"])
    lb, lk, ly, lx = s[local].op.axis
    reduce = [rc, ry, rx] if config["reduce_order"] == "channel_outer" else [ry, rx, rc]
    by_name = {iv.name: iv for iv in s[local].op.reduce_axis}
    s[local].reorder(lb, ly, *(by_name[iv.name] for iv in reduce), lk, lx)
    if config["unroll_channels"]:
        s[local].unroll(lk)
    s[local].vectorize(lx)
    return s, [data, weight, out]


def conv2d_nchw_reference(data: np.ndarray, weight: np.ndarray, stride: int,
                          pad: int) -> np.ndarray:
    """Direct NCHW convolution in NumPy (the oracle of the conv templates)."""
    padded = np.pad(data, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    r, s = weight.shape[2:]
    windows = np.lib.stride_tricks.sliding_window_view(padded, (r, s), axis=(2, 3))
    windows = windows[:, :, ::stride, ::stride]
    return np.einsum("nchwrs,kcrs->nkhw", windows, weight, optimize=True).astype(data.dtype)


def _conv_flops(args) -> int:
    n, c, h, w, k, r, s, stride, pad, _ = args
    return 2 * n * k * c * r * s * _out_size(h, r, stride, pad) * _out_size(w, s, stride, pad)


CONV2D = Template(
    "conv2d_nchw", "llvm", _conv_space, _conv_default, _instantiate_conv,
    lambda args, rng: _random_inputs([args[:4], (args[4], args[1], args[5], args[6])],
                                     args[9], rng),
    lambda args, inputs: conv2d_nchw_reference(*inputs, args[7], args[8]),
    _conv_flops)


def _depthwise_space(args: tuple) -> ConfigSpace:
    n, c, h, w, r, s, stride, pad, dtype = args
    out_h, out_w = _out_size(h, r, stride, pad), _out_size(w, s, stride, pad)
    return ConfigSpace((
        Knob("tile_rows", "split", split_options(out_h, (1, 2, 4, 8))),
        Knob("tile_columns", "vectorize", split_options(out_w, (4, 8, 16, 32))),
        Knob("unroll_kernel", "unroll", (True, False)),
        Knob("parallel", "parallel", ("rows", "channel_tiles")),
        _padding_knob(pad),
    ))


def _depthwise_default(args: tuple) -> dict:
    space = _depthwise_space(args)
    knobs = {knob.name: knob.options for knob in space.knobs}
    return {"tile_rows": knobs["tile_rows"][0],
            "tile_columns": _closest(knobs["tile_columns"], 16),
            "unroll_kernel": False, "parallel": "rows", "padding": "inline"}


def _instantiate_depthwise(args: tuple, config: Config):
    n, c, h, w, r, s_, stride, pad, dtype = args
    data = te.placeholder((n, c, h, w), dtype, "data")
    weight = te.placeholder((c, 1, r, s_), dtype, "weight")
    padded = _padded(data, pad, "data.pad")
    ry, rx = te.reduce_axis(r, "ry"), te.reduce_axis(s_, "rx")
    out = te.compute(
        (n, c, _out_size(h, r, stride, pad), _out_size(w, s_, stride, pad)),
        lambda b, ch, y, x: te.sum(padded[b, ch, y * stride + ry, x * stride + rx]
                                   * weight[ch, 0, ry, rx], axis=[ry, rx]),
        name="depthwise")
    s = te.create_schedule(out)
    _schedule_padding(s, padded, data, config)
    local = _schedule_tiled_output(s, out, config["tile_rows"], config["tile_columns"], None,
                                   config["parallel"])
    lb, lc, ly, lx = s[local].op.axis
    lry, lrx = s[local].op.reduce_axis
    s[local].reorder(lb, lc, lry, lrx, ly, lx)
    if config["unroll_kernel"]:
        s[local].unroll(lrx)
    s[local].unroll(ly)
    s[local].vectorize(lx)
    return s, [data, weight, out]


def _depthwise_reference(args, inputs):
    data, weight = inputs
    n, c, h, w, r, s, stride, pad, _ = args
    padded = np.pad(data, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (r, s), axis=(2, 3))
    windows = windows[:, :, ::stride, ::stride]
    return np.einsum("nchwrs,crs->nchw", windows, weight[:, 0]).astype(data.dtype)


def _depthwise_flops(args) -> int:
    n, c, h, w, r, s, stride, pad, _ = args
    return 2 * n * c * r * s * _out_size(h, r, stride, pad) * _out_size(w, s, stride, pad)


DEPTHWISE_CONV2D = Template(
    "depthwise_conv2d_nchw", "llvm", _depthwise_space, _depthwise_default,
    _instantiate_depthwise,
    lambda args, rng: _random_inputs([args[:4], (args[1], 1, args[4], args[5])], args[8], rng),
    _depthwise_reference, _depthwise_flops)



