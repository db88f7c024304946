"""The CPU's tuning space: templates for the schedules of ``schedules.py``, the tasks of a
model as this target compiles it, and the measurement of a candidate.

The templates cover matmul, dense (``X @ W.T``), batch matmul, the blocked NCHW[x]c
convolution the target compiles (dense and depthwise), and the plain NCHW conv2d and
depthwise conv2d. :class:`~heterocc.targets.llvm.target.LLVMTarget` offers them through
its ``tuning()`` hook (:func:`llvm_tuning`); the schedules ask this module for the
applied tuning log's best config (:func:`schedule_matmul_tuned`,
:func:`blocked_conv_tiles`, :func:`matmul_panel`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from heterocc import te
from heterocc.compute import compute_of
from heterocc.compute.nn import matmul as plain_matmul
from heterocc.errors import CompileError, TargetError
from heterocc.ir.graph import Graph, Node, Value
from heterocc.ir.types import TensorType
from heterocc.ops.layout import blocked_conv_geometry, blocked_conv_input_shape, conv_nchwc
from heterocc.ops.nn import conv_geometry
from heterocc.passes.pipeline import run_pipeline
from heterocc.runtime.interpreter import evaluate
from heterocc.targets.registry import get_target
from heterocc.te_target import express_function, fold_scalars
from heterocc.tuning.apply import ApplyHistoryBest, current
from heterocc.tuning.auto import AutoWorkload, SearchHints, Sketch, auto_name, auto_template
from heterocc.tuning.measure import (
    CandidateError,
    MeasureOptions,
    check_output,
    task_inputs,
    time_calls,
)
from heterocc.tuning.records import BASELINE, PAIRED, MeasureRecord
from heterocc.tuning.space import Config, ConfigSpace, Knob, divisors, split_options
from heterocc.tuning.task import Task, matmul_dims, workload_key
from heterocc.tuning.templates import TargetTuning, Template

from .cpu import CPUDescription, active_cpu, check_runs_on, compiling_for
from .module import build
from .schedules import (
    BLOCKED_CONV_MAX_COLUMNS,
    DEPTHWISE_MAX_COLUMNS,
    BlockedConvTiles,
    DepthwiseConvTiles,
    default_blocked_conv_tiles,
    default_depthwise_conv_tiles,
    default_panel,
    dense_conv_reduction_blocks,
    matmul_tile_rows,
    pack_matmul,
    pack_matmul_rows,
    pack_matmuls,
    panel_group,
    panel_width,
    ragged_panel_tail,
    reachable_computes,
    reduction_unroll_limit,
    schedule_conv2d_nchwc,
    schedule_depthwise_conv2d_nchwc,
    schedule_packed_rows,
    unroll_reduction,
    vector_lanes,
    vectorize_panel_columns,
)


def _random_inputs(shapes: list[tuple[int, ...]], dtype: str,
                   rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.standard_normal(shape).astype(dtype) for shape in shapes]


# ------------------------------------------------------------------ (batch) matmul, dense
#
# B is read through a packed copy [panels, k, panel] (zero-padded past column n) so that a
# register tile of C reads B contiguously; A's rows are broadcast one scalar at a time.


def _pack_columns(read_b: Callable, n: int, depth: int, panel: int, dtype: str,
                  name: str, batch: int | None = None) -> te.Tensor:
    """B packed into column panels; ``read_b(k, column[, b])`` reads one element of B."""
    panels = -(-n // panel)
    zero = te.const(0, dtype)

    def element(k, column, *batch_index):
        clamped = te.minimum(column, n - 1)
        return te.if_then_else(column < n, read_b(k, clamped, *batch_index), zero)

    if batch is None:
        return te.compute((panels, depth, panel),
                          lambda p, k, c: element(k, p * panel + c), name=name)
    return te.compute((batch, panels, depth, panel),
                      lambda b, p, k, c: element(k, p * panel + c, b), name=name)


def _panel_options(n: int, dtype: str) -> tuple[int, ...]:
    """Panel widths of B: one to six vectors of the active CPU, those that divide ``n``
    (a panel that does not leaves C's column tiles a guarded tail that cannot be
    vectorized: an order of magnitude slower), or every one that fits when none does."""
    lanes = vector_lanes(dtype)
    widths = [lanes * vectors for vectors in (1, 2, 3, 4, 6)]
    dividing = tuple(w for w in widths if n % w == 0)
    return dividing or split_options(-(-n // lanes) * lanes, widths)


def _matmul_space(args: tuple, batch: int = 1) -> ConfigSpace:
    """Register tile (rows x panel: rows of C x packed columns of B), the reduction's
    chunk (with ``accumulate="memory"`` the chunk loop runs outside the row tiles: cache
    blocking of B's panel), tile order, the panels a row tile meets in turn (with
    ``accumulate="registers"`` and ``panels_outer``: ``schedules.panel_group``), which
    tile loop runs in parallel, unrolling (of the tile's rows, and the most steps of its
    innermost reduction loop, up to ``unroll_k``, that divide the loop:
    ``schedules.unroll_reduction``)."""
    m, n, k, dtype = args[:4]
    default = _matmul_default_tiles(args, batch)
    return ConfigSpace((
        Knob("tile_rows", "split",
             split_options(m, (1, 2, 3, 4, 6, 8, 12, 16, default["tile_rows"]))),
        Knob("panel", "layout", _panel_options(n, dtype)),
        Knob("k_chunk", "split", split_options(k, (16, 64, 128, 256, 512, k))),
        Knob("accumulate", "order", ("registers", "memory")),
        Knob("loop_order", "order", ("panels_outer", "rows_outer")),
        Knob("panel_group", "split",
             split_options(-(-n // vector_lanes(dtype)), (1, 2, 4, 8, default["panel_group"]))),
        Knob("parallel", "parallel", ("outer", "inner", "none")),
        Knob("unroll_rows", "unroll", (True, False)),
        Knob("unroll_k", "unroll", split_options(k, (1, 2, 4, 8, 16, default["unroll_k"]))),
    ))


def _matmul_default_tiles(args: tuple, batch: int = 1) -> dict:
    """The default schedule's panel, rows, panel group and reduction unrolling for the
    workload ``args``."""
    m, n, k, dtype = args[:4]
    panel = _closest(_panel_options(n, dtype), panel_width(dtype))
    rows = matmul_tile_rows(m, panel, dtype)
    return {"panel": panel, "tile_rows": rows,
            "panel_group": panel_group(m, k, -(-n // panel), panel,
                                       np.dtype(dtype).itemsize, batch),
            "unroll_k": min(k, reduction_unroll_limit(rows, panel, dtype))}


def _matmul_default(args: tuple, batch: int = 1) -> dict:
    """The choices of ``targets.llvm.schedules.schedule_matmul``."""
    k = args[2]
    return {**_matmul_default_tiles(args, batch), "k_chunk": k, "accumulate": "registers",
            "loop_order": "panels_outer", "parallel": "outer", "unroll_rows": True}


def _matmul_upgrade(args: tuple, values: dict) -> dict:
    """A record written before the panel group knob or the reduction's unrolling: one
    panel per group, one reduction step per loop iteration (what its schedule did)."""
    values.setdefault("panel_group", 1)
    values.setdefault("unroll_k", 1)
    return values


def _closest(options: tuple, wanted: int):
    return min(options, key=lambda option: (abs(option - wanted), option))


def schedule_matmul_config(s: te.Schedule, C: te.Tensor, packed: te.Tensor,
                           config: Config) -> None:
    """Schedule a (batch) matmul ``C`` reading B through ``packed`` [.., panels, k, panel]
    by a ``matmul`` config: register-tile C by (tile_rows x panel) and accumulate each
    tile in a local buffer over the reduction split into k_chunk pieces, or straight into
    C with the chunk loop outside the row tiles (so a chunk of a B panel stays in cache
    while rows stream by). Leading axes of C (a batch) run outermost."""
    if isinstance(packed.op, te.ComputeOp):  # else a constant packed at build time
        pack_axes = s[packed].op.axis
        s[packed].parallel(pack_axes[0])
        s[packed].vectorize(pack_axes[-1])
    rows, panel = config["tile_rows"], config["panel"]
    if config["accumulate"] == "registers":
        local = s.cache_write(C, "local")
    *batch, i, j = s[C].op.axis
    io, ii = s[C].split(i, rows)
    jo, ji = s[C].split(j, panel)
    outer = [jo, io] if config["loop_order"] == "panels_outer" else [io, jo]
    if (config["accumulate"] == "registers" and config["loop_order"] == "panels_outer"
            and config["panel_group"] > 1):
        group, jo = s[C].split(jo, config["panel_group"])
        outer = [group, io, jo]  # a row tile meets the group's panels in turn
    if config["accumulate"] == "registers":
        s[C].reorder(*batch, *outer, ii, ji)
        s[local].compute_at(s[C], outer[-1])
        *local_batch, li, lj = s[local].op.axis
        (lk,) = s[local].op.reduce_axis
        chunk = min(config["k_chunk"], lk.extent)
        chunks = [lk] if chunk == lk.extent else list(s[local].split(lk, chunk))
        chunks[-1:] = unroll_reduction(s[local], chunks[-1], chunk, config["unroll_k"])
        s[local].reorder(*local_batch, *chunks, li, lj)
        tile_stage, tile_rows, tile_cols = s[local], li, lj
    else:
        (kk,) = s[C].op.reduce_axis
        ko, ki = s[C].split(kk, config["k_chunk"])
        inner = unroll_reduction(s[C], ki, min(config["k_chunk"], kk.extent),
                                 config["unroll_k"])
        s[C].reorder(*batch, outer[0], ko, outer[1], *inner, ii, ji)
        tile_stage, tile_rows, tile_cols = s[C], ii, ji
    if config["unroll_rows"]:
        # unrolled by LLVM, as schedule_matmul's rows: the same machine code from a
        # TIR that does not repeat the body once per row
        if config["accumulate"] == "registers":
            s[C].unroll(ii, explicit=False)
        tile_stage.unroll(tile_rows, explicit=False)
    ragged = ragged_panel_tail(C.shape[-1], panel, C.dtype)
    vectorize_panel_columns(tile_stage, tile_cols, ragged, C.dtype)
    if config["accumulate"] == "registers":
        vectorize_panel_columns(s[C], ji, ragged, C.dtype)
    if config["parallel"] == "outer":
        s[C].parallel(batch[0] if batch else outer[0])
    elif config["parallel"] == "inner":
        s[C].parallel(outer[1])


def _instantiate_matmul(args: tuple, config: Config, transpose_b: bool = False):
    m, n, k, dtype = args
    A = te.placeholder((m, k), dtype, "A")
    B = te.placeholder((n, k) if transpose_b else (k, n), dtype, "B")
    panel = config["panel"]
    packed = _pack_columns((lambda r, c: B[c, r]) if transpose_b else (lambda r, c: B[r, c]),
                           n, k, panel, dtype, "B.packed")
    r = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * packed[j // panel, r, j % panel],
                                               axis=r), name="C")
    s = te.create_schedule(C)
    schedule_matmul_config(s, C, packed, config)
    return s, [A, B, C]


def _matmul_inputs(args, rng, transpose_b: bool = False):
    m, n, k, dtype = args
    return _random_inputs([(m, k), (n, k) if transpose_b else (k, n)], dtype, rng)


def _matmul_reference(args, inputs, transpose_b: bool = False):
    a, b = inputs
    return a @ (b.T if transpose_b else b)


def _matmul_flops(args) -> int:
    m, n, k = args[:3]
    return 2 * m * n * k


MATMUL = Template(
    "matmul", "llvm", _matmul_space, _matmul_default, _instantiate_matmul, _matmul_inputs,
    _matmul_reference, _matmul_flops, upgrade=_matmul_upgrade)


def _batch_space(args: tuple) -> ConfigSpace:
    batch, m, n, k, dtype = args
    return _matmul_space((m, n, k, dtype), batch)


def _batch_default(args: tuple) -> dict:
    batch, m, n, k, dtype = args
    return _matmul_default((m, n, k, dtype), batch)


def _batch_upgrade(args: tuple, values: dict) -> dict:
    return _matmul_upgrade(args[1:], values)


def _instantiate_batch_matmul(args: tuple, config: Config):
    batch, m, n, k, dtype = args
    A = te.placeholder((batch, m, k), dtype, "A")
    B = te.placeholder((batch, k, n), dtype, "B")
    panel = config["panel"]
    packed = _pack_columns(lambda r, c, b: B[b, r, c], n, k, panel, dtype, "B.packed", batch)
    r = te.reduce_axis(k, "k")
    C = te.compute((batch, m, n),
                   lambda b, i, j: te.sum(A[b, i, r] * packed[b, j // panel, r, j % panel],
                                          axis=r), name="C")
    s = te.create_schedule(C)
    schedule_matmul_config(s, C, packed, config)
    return s, [A, B, C]


BATCH_MATMUL = Template(
    "batch_matmul", "llvm", _batch_space, _batch_default, _instantiate_batch_matmul,
    lambda args, rng: _random_inputs([args[:2] + (args[3],), (args[0], args[3], args[2])],
                                     args[4], rng),
    lambda args, inputs: np.matmul(*inputs),
    lambda args: 2 * math.prod(args[:4]), upgrade=_batch_upgrade)


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



# ------------------------------------------------------------------ blocked conv2d (NCHW[x]c)
#
# What the llvm target really compiles for a float convolution (pass alter_layout): the
# ``ConvNCHWc`` compute of the compute library over a blocked input
# (n, C/ib, h, w, ib) and packed weights (O/ob, C/ib, kh, kw, ib, ob), scheduled by
# ``targets.llvm.schedules.schedule_conv2d_nchwc``. Workloads:
#   conv2d_nchwc (n, C/ib, h, w, ib, O/ob, ob, kh, kw, sy, sx, pt, pl, pb, pr, dy, dx, dtype)
#   depthwise_conv2d_nchwc (n, C/b, h, w, b, kh, kw, sy, sx, pt, pl, pb, pr, dy, dx, dtype)

#: output columns offered besides the divisors of the output width: a guarded tail tile
#: costs less than a narrow tile when the width has no divisor near the register budget
_EXTRA_COLUMNS = (4, 8, 16, 24)
#: output channel blocks per register tile offered (those dividing the block count)
_CHANNEL_BLOCKS = (1, 2, 3, 4)


def blocked_conv_task_args(input_shape, weight_shape, strides, pads, dilations, group: int,
                           dtype: str) -> tuple[str, tuple]:
    """The template name and workload of a ``ConvNCHWc`` over ``input_shape``
    (n, C/ib, h, w, ib), or NCHW (ib = 1), and packed ``weight_shape``
    (O/ob, C/group/ib, kh, kw, ib, ob)."""
    n, in_outer, h, w, in_block = (int(d) for d in blocked_conv_input_shape(input_shape))
    out_outer, _, kh, kw, _, out_block = (int(d) for d in weight_shape)
    geometry = (kh, kw, *map(int, strides), *map(int, pads), *map(int, dilations), dtype)
    if group == 1:
        return "conv2d_nchwc", (n, in_outer, h, w, in_block, out_outer, out_block, *geometry)
    return "depthwise_conv2d_nchwc", (n, in_outer, h, w, in_block, *geometry)


@dataclass(frozen=True)
class BlockedConvWorkload:
    """A blocked-conv workload unpacked: operand shapes and the ``ConvNCHWc`` attributes."""

    input_shape: tuple[int, ...]
    weight_shape: tuple[int, ...]
    attrs: dict
    dtype: str

    @classmethod
    def from_args(cls, args: tuple, depthwise: bool) -> BlockedConvWorkload:
        if depthwise:
            n, outer, h, w, block, kh, kw, *rest = args
            weight_shape, group = (outer, 1, kh, kw, 1, block), outer * block
            in_outer, in_block = outer, block
        else:
            n, in_outer, h, w, in_block, out_outer, out_block, kh, kw, *rest = args
            weight_shape, group = (out_outer, in_outer, kh, kw, in_block, out_block), 1
        sy, sx, pt, pl, pb, pr, dy, dx, dtype = rest
        attrs = {"strides": [sy, sx], "pads": [pt, pl, pb, pr], "dilations": [dy, dx],
                 "group": group}
        # a dense convolution's input block of one channel is its NCHW input, read in
        # place (``passes.alter_layout.conv_blocking``)
        input_shape = (n, in_outer, h, w) + (() if in_block == 1 and not depthwise
                                             else (in_block,))
        return cls(input_shape, weight_shape, attrs, dtype)

    @property
    def out_shape(self) -> tuple[int, ...]:
        return blocked_conv_geometry(self.input_shape, self.weight_shape, self.attrs)["out_shape"]


def _column_limit(depthwise: bool) -> int:
    return DEPTHWISE_MAX_COLUMNS if depthwise else BLOCKED_CONV_MAX_COLUMNS


def _blocked_conv_compute(workload: BlockedConvWorkload):
    """Placeholders and the ``ConvNCHWc`` compute of a workload."""
    data = te.placeholder(workload.input_shape, workload.dtype, "data")
    weight = te.placeholder(workload.weight_shape, workload.dtype, "weight")
    (conv,) = compute_of("ConvNCHWc")([data, weight], workload.attrs, None)
    return data, weight, conv


def _blocked_conv_space(args: tuple, depthwise: bool) -> ConfigSpace:
    """Output columns per register tile (the divisors of the output width up to the
    register budget, a few non-divisors, the default) and output channel blocks per
    tile (each broadcast input element then feeds that many weight vectors; those of
    :data:`_CHANNEL_BLOCKS` dividing the block count, the default). A dense convolution also
    chooses its reduction order, the channels of an input block unrolled per step
    (``block_unroll``: None, the whole block, or a smaller divisor of it) and the input
    blocks per reduction chunk (``reduction_blocks``: 0, none, or a divisor of the
    input block count; with ``kernel_outer`` the reduction is never chunked, see
    :func:`blocked_conv_tiles_of`). A depthwise one chooses whether its kernel window
    is unrolled and whether its rows run in the thread pool
    (``targets.llvm.schedules.DepthwiseConvTiles``)."""
    workload = BlockedConvWorkload.from_args(args, depthwise)
    _, out_outer, _, width, _ = workload.out_shape
    limit = min(width, _column_limit(depthwise))
    columns = {d for d in divisors(width) if 2 <= d <= limit}
    columns |= {c for c in _EXTRA_COLUMNS if c < limit and width % c}
    default = _blocked_conv_default(args, depthwise)
    columns.add(default["columns"])
    # the default's channel blocks too (a 1x1 convolution's tile may take more than
    # those offered: five of ten blocks, ``schedules.pointwise_conv_tile``)
    channel_blocks = {b for b in _CHANNEL_BLOCKS if out_outer % b == 0}
    channel_blocks.add(default["channel_blocks"])
    knobs = [
        Knob("columns", "split", tuple(sorted(columns))),
        Knob("channel_blocks", "split", tuple(sorted(channel_blocks))),
        Knob("reduce_order", "order",
             ("channels_outer",) if depthwise else ("channels_outer", "kernel_outer")),
    ]
    if depthwise:
        knobs += [Knob("unroll_window", "unroll", (True, False)),
                  Knob("parallel", "parallel", (True, False))]
    else:
        _, in_outer, _, _, in_block, _ = workload.weight_shape
        knobs += [Knob("block_unroll", "unroll",
                       (None, *(d for d in divisors(in_block) if d < in_block))),
                  Knob("reduction_blocks", "split", (0, *divisors(in_outer)))]
    return ConfigSpace(tuple(knobs))


def _dense_reduction_blocks(workload: BlockedConvWorkload, channel_blocks: int,
                            reduce_order: str) -> int:
    """The input blocks per reduction chunk of the default dense schedule with
    ``channel_blocks`` output blocks per tile in ``reduce_order``."""
    if reduce_order == "kernel_outer":
        return 0
    _, in_outer, kh, kw, in_block, _ = workload.weight_shape
    return dense_conv_reduction_blocks(workload.out_shape, (in_outer, kh, kw, in_block),
                                       channel_blocks, np.dtype(workload.dtype).itemsize)


def _blocked_conv_default(args: tuple, depthwise: bool) -> dict:
    """The choices of ``schedule_conv2d_nchwc`` (of ``schedule_depthwise_conv2d_nchwc``
    for a depthwise convolution) without a tuning log."""
    workload = BlockedConvWorkload.from_args(args, depthwise)
    if depthwise:
        tiles = default_depthwise_conv_tiles(_blocked_conv_compute(workload)[2])
        return {"columns": tiles.columns, "channel_blocks": tiles.channel_blocks,
                "reduce_order": "channels_outer", "unroll_window": tiles.unroll_window,
                "parallel": tiles.parallel}
    _, _, kh, kw, _, _ = workload.weight_shape
    columns, channel_blocks = default_blocked_conv_tiles(
        workload.out_shape, np.dtype(workload.dtype).itemsize, windowed=kh * kw > 1)
    return {"columns": columns, "channel_blocks": channel_blocks,
            "reduce_order": "channels_outer", "block_unroll": None,
            "reduction_blocks": _dense_reduction_blocks(workload, channel_blocks,
                                                        "channels_outer")}


def _blocked_conv_upgrade(args: tuple, values: dict, depthwise: bool) -> dict:
    """A record written before the knobs of the unrolled block, the reduction chunks
    and the depthwise window and threads existed: each missing knob takes what the
    schedule chose without it (for the record's own tile)."""
    if depthwise:
        default = _blocked_conv_default(args, depthwise)
        return {knob: default[knob] for knob in ("unroll_window", "parallel")} | values
    values.setdefault("block_unroll", None)
    if "reduction_blocks" not in values and "channel_blocks" in values:
        values["reduction_blocks"] = _dense_reduction_blocks(
            BlockedConvWorkload.from_args(args, depthwise), values["channel_blocks"],
            values.get("reduce_order", "channels_outer"))
    return values


def blocked_conv_tiles_of(config: Config, depthwise: bool = False
                          ) -> BlockedConvTiles | DepthwiseConvTiles:
    """The tiles of a blocked-conv config: ``DepthwiseConvTiles`` for a depthwise
    workload's, else ``BlockedConvTiles`` (a ``kernel_outer`` reduction unchunked
    whatever its ``reduction_blocks``: the kernel rows and columns outside the input
    blocks leave no chunk to run, and the schedule's default for them is none)."""
    if depthwise:
        return DepthwiseConvTiles(columns=config["columns"],
                                  channel_blocks=config["channel_blocks"],
                                  unroll_window=config["unroll_window"],
                                  parallel=config["parallel"])
    kernel_outer = config["reduce_order"] == "kernel_outer"
    return BlockedConvTiles(columns=config["columns"], channel_blocks=config["channel_blocks"],
                            kernel_outer=kernel_outer, block_unroll=config["block_unroll"],
                            reduction_blocks=None if kernel_outer else config["reduction_blocks"])


def schedule_blocked_conv(schedule: te.Schedule, conv: te.Tensor,
                          tiles: BlockedConvTiles | DepthwiseConvTiles,
                          epilogue: te.Tensor | None = None,
                          chain: Sequence[te.Tensor] = (),
                          cpu: CPUDescription | None = None) -> None:
    """Schedule the blocked convolution ``conv`` with ``tiles`` (see
    :func:`blocked_conv_tiles_of`) for ``cpu``: the depthwise schedule for
    ``DepthwiseConvTiles``."""
    if isinstance(tiles, DepthwiseConvTiles):
        schedule_depthwise_conv2d_nchwc(schedule, conv, epilogue, chain, tiles, cpu)
    else:
        schedule_conv2d_nchwc(schedule, conv, epilogue, chain, tiles, cpu)


def _instantiate_blocked_conv(args: tuple, config: Config, depthwise: bool):
    data, weight, conv = _blocked_conv_compute(BlockedConvWorkload.from_args(args, depthwise))
    s = te.create_schedule(conv)
    schedule_blocked_conv(s, conv, blocked_conv_tiles_of(config, depthwise))
    return s, [data, weight, conv]


def _blocked_conv_inputs(args: tuple, rng: np.random.Generator, depthwise: bool):
    workload = BlockedConvWorkload.from_args(args, depthwise)
    return _random_inputs([workload.input_shape, workload.weight_shape], workload.dtype, rng)


def _blocked_conv_reference(args: tuple, inputs: list[np.ndarray], depthwise: bool):
    return conv_nchwc(*inputs, **BlockedConvWorkload.from_args(args, depthwise).attrs)


def _blocked_conv_flops(args: tuple, depthwise: bool) -> int:
    workload = BlockedConvWorkload.from_args(args, depthwise)
    _, w_in_outer, kh, kw, w_in_block, _ = workload.weight_shape
    return 2 * math.prod(workload.out_shape) * w_in_outer * w_in_block * kh * kw


def _blocked_conv_template(name: str, depthwise: bool) -> Template:
    def bind(function):
        return functools.partial(function, depthwise=depthwise)

    return Template(
        name, "llvm", bind(_blocked_conv_space), bind(_blocked_conv_default),
        bind(_instantiate_blocked_conv), bind(_blocked_conv_inputs),
        bind(_blocked_conv_reference), bind(_blocked_conv_flops),
        upgrade=bind(_blocked_conv_upgrade))


CONV2D_NCHWC = _blocked_conv_template("conv2d_nchwc", depthwise=False)
DEPTHWISE_CONV2D_NCHWC = _blocked_conv_template("depthwise_conv2d_nchwc", depthwise=True)

#: dense is ``X @ W.T`` (ONNX Gemm with transB, a fully connected layer): the same
#: template, packing W's rows as B's columns.
DENSE = Template(
    "dense", "llvm", _matmul_space, _matmul_default,
    functools.partial(_instantiate_matmul, transpose_b=True),
    functools.partial(_matmul_inputs, transpose_b=True),
    functools.partial(_matmul_reference, transpose_b=True), _matmul_flops,
    upgrade=_matmul_upgrade)

#: every template of the CPU target
TEMPLATES = (MATMUL, BATCH_MATMUL, CONV2D, DEPTHWISE_CONV2D, CONV2D_NCHWC,
             DEPTHWISE_CONV2D_NCHWC, DENSE)


# ------------------------------------------------------------------ auto search workloads
#
# The template-free search (``heterocc tune --search auto``) tunes the same workloads from
# the plain computes this target compiles (the compute library's, with the target's own
# rewrite: products read B through packed panels), its space derived by the sketch rules
# of ``heterocc.tuning.auto``; the CPU description gives its vector width and registers.


def search_hints(dtype: str, cpu: CPUDescription | None = None) -> SearchHints:
    """``cpu``'s facts (default: the active CPU's) for the auto search over ``dtype``
    workloads."""
    cpu = cpu or active_cpu()
    return SearchHints(cpu.vector_lanes(dtype), cpu.vector_registers, cpu.num_cores)


def _build_matmul(args: tuple):
    m, n, k, dtype = args
    A, B = te.placeholder((m, k), dtype, "A"), te.placeholder((k, n), dtype, "B")
    C = plain_matmul(A, B, "C")
    # the default panel, not a tuning log's: the auto search's sketch of this workload is
    # what a log's auto record is read back against
    pack_matmul(C, default_panel(n, dtype))
    return [A, B], [C]


def _build_batch_matmul(args: tuple):
    batch, m, n, k, dtype = args
    A = te.placeholder((batch, m, k), dtype, "A")
    B = te.placeholder((batch, k, n), dtype, "B")
    C = plain_matmul(A, B, "C")
    pack_matmuls([C], matmul_panel)
    return [A, B], [C]


def _build_blocked_conv(args: tuple, depthwise: bool):
    data, weight, conv = _blocked_conv_compute(BlockedConvWorkload.from_args(args, depthwise))
    return [data, weight], [conv]


def _auto_of(template: Template, build) -> Template:
    return auto_template(AutoWorkload(template.name, build,
                                      lambda args: search_hints(args[-1]), template.inputs,
                                      template.reference, template.flops), "llvm")


#: the auto search's workloads: every template workload the target builds as a plain
#: compute (dense and the NCHW convolutions are compiled through the forms above)
AUTO_TEMPLATES = (
    _auto_of(MATMUL, _build_matmul), _auto_of(BATCH_MATMUL, _build_batch_matmul),
    _auto_of(CONV2D_NCHWC, functools.partial(_build_blocked_conv, depthwise=False)),
    _auto_of(DEPTHWISE_CONV2D_NCHWC, functools.partial(_build_blocked_conv, depthwise=True)),
)


# ------------------------------------------------------------------ applying a tuning log


@dataclass(frozen=True)
class ScheduleConfigs:
    """What the applied tuning log says for the schedules of one function, decided when
    the function starts compiling (:func:`function_configs`) and handed to the CPU's
    schedule rules: no schedule reads a log or a context itself. ``log``: the applied
    log (None: every schedule keeps its defaults); ``choice``: the decision for the
    function as a whole, None (no records of it: the workload records apply),
    ``("hand", None)`` (the hand schedules, with their defaults) or
    ``("auto", config)`` (its auto record: see :func:`function_tuned`)."""

    log: ApplyHistoryBest | None = None
    choice: tuple | None = None

    def _best_of(self, keys: list[str]) -> tuple[str | None, Config | None]:
        return (None, None) if self.log is None else self.log.best_of(keys)

    def matmul_panel(self, m: int, n: int, k: int, dtype: str) -> int | None:
        """The panel width (packed columns of B) of the log's best ``matmul`` config of
        this shape, or None: the compute is packed with it so that :meth:`matmul` can
        then apply that config. Inside a function the log tuned as a whole: its auto
        record's panel, or None for the hand schedule."""
        choice = self.choice
        if choice is not None:
            return choice[1]["panel"] if choice[0] == "auto" and "panel" in choice[1].values \
                else None
        key, config = self._best_of(_matmul_keys((m, n, k, dtype)))
        return None if config is None or key != workload_key("matmul", (m, n, k, dtype)) \
            else config["panel"]

    def matmul(self, C: te.Tensor) -> tuple[str, Config] | None:
        """The log's best config for the product ``C`` (packed by ``pack_matmul``):
        ``("auto", config)`` for the auto search's, ``("hand", config)`` for the
        ``matmul`` template's among those whose panel width matches the packing already
        in the compute (see :meth:`matmul_panel`); None when there is none."""
        packed = C.op.attrs.get("packed_B")
        if packed is None or len(C.shape) != 2 or self.choice is not None or self.log is None:
            return None
        (m, n), (_, depth, panel) = C.shape, packed.shape
        args = (m, n, depth, C.dtype)
        key, config = self._best_of(_matmul_keys(args))
        if config is not None and key == workload_key(auto_name("matmul"), args):
            return "auto", config
        config = self.log.lookup(workload_key("matmul", args),
                                 where=lambda c: c["panel"] == panel)
        return None if config is None else ("hand", config)

    def _blocked_conv_task(self, conv: te.Tensor) -> tuple[str, tuple] | None:
        """``(template, args)`` of the blocked convolution ``conv``'s task (its compute
        carries the workload) when a log applies and no whole-function choice was made."""
        workload = conv.op.attrs.get("blocked_conv")
        if workload is None or self.log is None or self.choice is not None:
            return None
        return blocked_conv_task_args(
            workload["input_shape"], workload["weight_shape"], workload["strides"],
            workload["pads"], workload["dilations"], workload["group"], conv.dtype)

    def blocked_conv_tiles(self, conv: te.Tensor
                           ) -> BlockedConvTiles | DepthwiseConvTiles | None:
        """The tiles (:func:`blocked_conv_tiles_of`) of the log's best config for the
        blocked convolution ``conv``, or None without a log or a record of it."""
        task = self._blocked_conv_task(conv)
        if task is None:
            return None
        template, args = task
        config = self.log.lookup(workload_key(template, args))
        return None if config is None else blocked_conv_tiles_of(
            config, template == "depthwise_conv2d_nchwc")

    def conv_auto(self, conv: te.Tensor) -> Config | None:
        """The log's auto-search record of the blocked convolution ``conv``'s workload
        when it beats the template's records, else None."""
        task = self._blocked_conv_task(conv)
        if task is None:
            return None
        template, args = task
        auto_key = workload_key(auto_name(template), args)
        key, config = self._best_of([workload_key(template, args), auto_key])
        return config if key == auto_key else None


def apply_matmul_config(schedule: te.Schedule, C: te.Tensor,
                        chosen: tuple[str, Config] | None,
                        cpu: CPUDescription | None = None) -> bool:
    """Schedule the product ``C`` by ``chosen`` (:meth:`ScheduleConfigs.matmul`): the
    auto search's sketch, derived from this very compute, or the ``matmul`` template's
    schedule; False, touching nothing, for None."""
    if chosen is None:
        return False
    kind, config = chosen
    if kind == "auto":
        Sketch([C], search_hints(C.dtype, cpu)).schedule_stages(schedule, [C], config)
    else:
        schedule_matmul_config(schedule, C, C.op.attrs["packed_B"], config)
    return True


def apply_conv_auto(schedule: te.Schedule, conv: te.Tensor, config: Config | None,
                    epilogue: te.Tensor | None = None,
                    cpu: CPUDescription | None = None) -> bool:
    """Schedule the blocked convolution ``conv`` (and its elementwise ``epilogue``, the
    function's output, when given) by its auto-search ``config``
    (:meth:`ScheduleConfigs.conv_auto`); False, touching nothing, for None. The sketch
    is derived from this very compute: the epilogue is fused into the convolution's
    tiles by the same point that was tuned without it."""
    if config is None:
        return False
    outputs = [epilogue if epilogue is not None else conv]
    Sketch(outputs, search_hints(conv.dtype, cpu)).schedule_stages(schedule, outputs, config)
    return True


def _matmul_keys(args: tuple) -> list[str]:
    """The template's and the auto search's keys of a matmul workload."""
    return [workload_key("matmul", args), workload_key(auto_name("matmul"), args)]


def _ambient() -> ScheduleConfigs:
    """The configs of the log applied here and the function choice entered here
    (:func:`function_choice`): for the helpers below, which code outside a target's
    compile (tests, benchmarks, the tuning templates) calls."""
    return ScheduleConfigs(current(), _FUNCTION_CHOICE.get())


def matmul_panel(m: int, n: int, k: int, dtype: str) -> int | None:
    """:meth:`ScheduleConfigs.matmul_panel` of the log applied here."""
    return _ambient().matmul_panel(m, n, k, dtype)


def schedule_matmul_tuned(schedule: te.Schedule, C: te.Tensor) -> bool:
    """Schedule a product made by ``schedules.matmul`` with the best config of the log
    applied here (:meth:`ScheduleConfigs.matmul`); False, touching nothing, when there
    is none."""
    return apply_matmul_config(schedule, C, _ambient().matmul(C))


def blocked_conv_tiles(conv: te.Tensor) -> BlockedConvTiles | DepthwiseConvTiles | None:
    """:meth:`ScheduleConfigs.blocked_conv_tiles` of the log applied here."""
    return _ambient().blocked_conv_tiles(conv)


def schedule_conv_auto(schedule: te.Schedule, conv: te.Tensor,
                       epilogue: te.Tensor | None = None) -> bool:
    """:func:`apply_conv_auto` with the auto record of the log applied here."""
    return apply_conv_auto(schedule, conv, _ambient().conv_auto(conv), epilogue)


# ------------------------------------------------------------------ measuring a candidate


#: how many times the L2 caches of all cores the cache flush reads: enough that what a
#: candidate touched is evicted from every core's L2 (to the L3, where a model's
#: kernel finds the weights it last read a network run ago)
FLUSH_L2_MULTIPLE = 2
#: rows of the flush's buffer per core: the thread pool hands rows out in chunks, so
#: each core reads its share even while another is slowed
FLUSH_ROWS_PER_CORE = 8


@functools.lru_cache(maxsize=4)
def cache_flusher(cpu: CPUDescription) -> Callable[[], None]:
    """A call that evicts what the last kernel touched from the caches of the cores of
    ``cpu`` (see :attr:`~heterocc.tuning.measure.MeasureOptions.cache`): a sum of
    rows of a buffer :data:`FLUSH_L2_MULTIPLE` times the L2 caches of all its cores,
    run in parallel on the same thread pool as the kernels, so that every core running
    a kernel's iterations reads its part of the buffer."""
    lanes = cpu.vector_lanes("float32")
    rows = cpu.num_cores * FLUSH_ROWS_PER_CORE
    depth = max(1, math.ceil(FLUSH_L2_MULTIPLE * cpu.l2 * cpu.num_cores / (rows * lanes * 4)))
    data = te.placeholder((rows, depth, lanes), "float32", name="flushed")
    k = te.reduce_axis((0, depth), name="k")
    sums = te.compute((rows, lanes), lambda i, v: te.sum(data[i, k, v], axis=k), name="sums")
    schedule = te.create_schedule(sums)
    row, lane = schedule[sums].op.axis
    schedule[sums].reorder(row, k, lane)
    schedule[sums].parallel(row)
    schedule[sums].vectorize(lane)
    function = build(te.lower(schedule, [data, sums], name="cache_flush"), cpu=cpu)["cache_flush"]
    buffer = np.ones((rows, depth, lanes), np.float32)
    out = np.zeros((rows, lanes), np.float32)
    return functools.partial(function, buffer, out)


def _flush_of(options: MeasureOptions) -> Callable[[], None] | None:
    """The cache flush run before each timed call, where ``options`` ask for one."""
    return cache_flusher(active_cpu()) if options.cache == "flush" else None


#: the most copies of a candidate's constants and outputs the ``rotate`` timing takes
#: turns over (a tiny kernel's operands in that many copies still fit the L2 caches,
#: where in a model the rest of the network evicts them)
MAX_ROTATION = 1024


def rotation_count(footprint: int, cpu: CPUDescription) -> int:
    """How many copies of ``footprint`` bytes (a kernel's constants and outputs) the
    ``rotate`` timing takes turns over: enough that the others' copies fill
    :data:`FLUSH_L2_MULTIPLE` times the L2 caches of all cores between two calls on
    one copy."""
    evicting = FLUSH_L2_MULTIPLE * cpu.l2 * cpu.num_cores
    return max(2, min(MAX_ROTATION, 1 + math.ceil(evicting / max(footprint, 1))))


def _rotating(make: Callable[[], Callable[[], object]], footprint: int
              ) -> Callable[[], object]:
    """One call that runs, in turn, each of :func:`rotation_count` calls ``make``
    returns (each on its own copies of the operands that rotate)."""
    calls = [make() for _ in range(rotation_count(footprint, active_cpu()))]
    turns = itertools.cycle(calls)
    return lambda: next(turns)()


def measure_candidate(task: Task, config: Config, options: MeasureOptions
                      ) -> tuple[float, ...]:
    """Build ``config`` of ``task`` with LLVM for the CPU being tuned for, check it
    against NumPy, time it (a function task through the target's compile path, see
    :func:`_measure_function`). A worker whose CPU cannot run that code (a node of
    another CPU in a Ray cluster) fails the candidate with the reason instead of
    stopping on an illegal instruction."""
    try:
        check_runs_on(active_cpu(), what="code tuned for this target")
    except TargetError as error:
        raise CandidateError("runtime", f"this worker cannot run it: {error}") from None
    if task.template in (FUNCTION, auto_name(FUNCTION)):
        return _measure_function(task, config, options)
    try:
        schedule, tensors = task.definition.instantiate(task.args, config)
        module = build(te.lower(schedule, tensors, name="candidate"), cpu=active_cpu())
    except Exception as error:  # any failure to build is this candidate's, not the tuner's
        raise CandidateError("build", f"{type(error).__name__}: {error}") from None
    inputs, expected = task_inputs(task.workload_key, options.seed)
    output = np.zeros(tensors[-1].shape, tensors[-1].dtype)
    function = module["candidate"]
    try:
        function(*inputs, output)
    except Exception as error:
        raise CandidateError("runtime", f"{type(error).__name__}: {error}") from None
    check_output(task, output, expected, options)
    call = lambda: function(*inputs, output)  # noqa: E731
    if options.cache == "rotate":  # a template's operands are all inputs: all rotate
        def make():
            copies = [a.copy() for a in (*inputs, output)]
            return lambda: function(*copies)
        call = _rotating(make, sum(a.nbytes for a in (*inputs, output)))
    return time_calls(call, options, _flush_of(options))


# ------------------------------------------------------------------ the tasks of a model


def _conv_task(node: Node) -> Task | None:
    x, w = node.inputs[0].type, node.inputs[1].type
    if len(x.shape) != 4 or len(w.shape) != 4:
        return None
    n, c, h, width = x.shape
    out_channels, _, r, s = w.shape
    group = int(node.attrs.get("group") or 1)
    kernel, strides, dilations, pads, (oh, ow) = conv_geometry(x.shape, w.shape, node.attrs)
    if set(dilations) != {1} or len(set(strides)) != 1 or len(set(pads)) != 1:
        return None  # the templates cover square strides and symmetric padding
    stride, pad = strides[0], pads[0]
    if group == 1:
        return Task("conv2d_nchw", (n, c, h, width, out_channels, r, s, stride, pad, x.dtype))
    if group == c == out_channels and w.shape[1] == 1:
        return Task("depthwise_conv2d_nchw", (n, c, h, width, r, s, stride, pad, x.dtype))
    return None


def _matmul_task(node: Node) -> Task | None:
    a, b = node.inputs[0].type, node.inputs[1].type
    if node.op != "Gemm" and len(a.shape) == 3 and len(b.shape) == 3:
        return Task("batch_matmul", (a.shape[0], a.shape[1], b.shape[2], a.shape[2], a.dtype))
    dims = matmul_dims(node)
    return None if dims is None else Task("matmul", (*dims, a.dtype))


def _blocked_conv_task(node: Node) -> Task:
    x, w = node.inputs[0].type, node.inputs[1].type
    attrs = node.attrs
    return Task(*blocked_conv_task_args(x.shape, w.shape, attrs["strides"], attrs["pads"],
                                        attrs["dilations"], attrs["group"], x.dtype))


_EXTRACTORS = {"Conv": _conv_task, "ConvInteger": _conv_task, "MatMul": _matmul_task,
               "MatMulInteger": _matmul_task, "Gemm": _matmul_task,
               "ConvNCHWc": _blocked_conv_task}


def extract_tasks(graph: Graph, target) -> list[Task]:
    """The float workloads of ``graph`` as ``target`` (an LLVMTarget) compiles it: the
    compile pipeline runs first (layout alteration included), so tasks carry the
    workloads the kernels really have: the blocked convolutions (``conv2d_nchwc``,
    ``depthwise_conv2d_nchwc``), any convolution left in NCHW (``conv2d_nchw``,
    ``depthwise_conv2d_nchw``, square stride and symmetric padding), matmul (MatMul and
    Gemm, after its transposes) and batch matmul."""
    graph = run_pipeline(graph, {target.name: target}).graph
    found: dict[str, Task] = {}
    counts: dict[str, int] = {}
    for _, node in graph.walk():
        extractor = _EXTRACTORS.get(node.op)
        if extractor is None or any(v is None for v in node.inputs[:2]):
            continue
        if not node.inputs[0].type.dtype.startswith("float"):
            continue
        task = extractor(node)
        if task is not None:
            found.setdefault(task.workload_key, task)
            counts[task.workload_key] = counts.get(task.workload_key, 0) + 1
    return [task.weighted(counts[key]) for key, task in found.items()]


def llvm_tuning(target) -> TargetTuning:
    """The tuning hook of ``target`` (an LLVMTarget): the auto search tunes whole fused
    functions (:func:`function_tasks`)."""
    return TargetTuning(TEMPLATES + AUTO_TEMPLATES + (FUNCTION_TEMPLATE, AUTO_FUNCTION_TEMPLATE),
                        functools.partial(extract_tasks, target=target), measure_candidate,
                        functools.partial(function_tasks, target=target))


# ------------------------------------------------------------------ whole fused functions
#
# A configuration that wins on a bare workload can lose in the model, where the function
# compiled around the same convolution or product also finishes its epilogue (bias,
# activation, residual addition) in the tiles, reads its input in another block layout
# and its constant operand packed once at build time. So the auto search tunes each
# fused function as the model compiles it: a ``function`` task is one distinct function
# body (its ops, attributes and types; constants by shape, small ones by value), built
# and timed through this target's own compile path. Its ``auto.function`` twin searches
# the sketch of the whole function; the ``function`` template has one point, the
# target's hand schedule, which ``tune --search auto`` times on the same harness. At
# compile time a function takes the auto record only where it beat that hand schedule
# (:func:`function_choice`); a function without records of its own falls back to the
# workload records above.

#: ops whose float functions become function tasks (the anchors the sketch tiles); a
#: reduction's task is where the sketch's rfactor rule applies (few output points)
REDUCTION_ANCHORS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceSumSquare",
                     "ReduceL1", "ReduceL2")
FUNCTION_ANCHORS = {"ConvNCHWc": "conv2d_nchwc", "MatMul": "matmul", "Gemm": "matmul",
                    **{op: "reduce" for op in REDUCTION_ANCHORS}}
#: how much faster than the hand schedule a function's auto record must have been
#: measured to be applied (timings on a shared machine vary by a few percent, and the
#: best of many candidates is the one most flattered by that)
FUNCTION_MARGIN = 0.03
#: non-float constants up to this many elements are part of a function task by value
#: (shapes, axes), as are one-element constants (clip bounds, scalars folded into the
#: code); others by shape only, random when timed
_SPEC_VALUE_ELEMENTS = 64


def _attr_json(value):
    if isinstance(value, np.ndarray):
        if value.size > _SPEC_VALUE_ELEMENTS:
            raise TypeError(f"an array attribute of {value.size} elements is too large "
                            "for a function task's text")
        return {"array": value.tolist(), "dtype": value.dtype.str, "shape": list(value.shape)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, list | tuple):
        return [_attr_json(v) for v in value]
    if isinstance(value, dict):
        return {"dict": {k: _attr_json(v) for k, v in sorted(value.items())}}
    if isinstance(value, float) and not math.isfinite(value):
        return {"float": repr(value)}
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise TypeError(f"attribute value of type {type(value).__name__} has no JSON form")


def _attr_value(data):
    if isinstance(data, list):
        return [_attr_value(v) for v in data]
    if isinstance(data, dict):
        if "array" in data:
            return np.array(data["array"], np.dtype(data["dtype"])).reshape(data["shape"])
        if "dict" in data:
            return {k: _attr_value(v) for k, v in data["dict"].items()}
        return float(data["float"])
    return data


def function_spec(body: Graph) -> str:
    """The canonical JSON text of a function body as a tuning task knows it: inputs and
    node outputs by shape and dtype, ops with their attributes, constants by shape and
    dtype (and value when folded into the code or a small shape-like one). Bodies that
    compile to the same kernel have the same text; :func:`function_body` rebuilds a body
    of that text."""
    refs: dict = {}
    constants: list = []
    for position, value in enumerate(body.inputs):
        refs[value] = ["in", position]
    nodes = []
    for node in body.nodes:
        args = []
        for value in node.inputs:
            if value is not None and value not in refs:
                if not value.is_const:
                    raise CompileError(f"function value {value.name!r} is undefined")
                data = np.asarray(value.data)
                # by value: what the kernel folds into its code (one-element
                # constants) and small non-float ones (shapes, axes) that the ops'
                # references read; float tensors are data, like the graph's inputs
                small = data.size == 1 or (data.dtype.kind != "f"
                                           and data.size <= _SPEC_VALUE_ELEMENTS)
                constants.append([list(data.shape), data.dtype.str,
                                  data.reshape(-1).tolist() if small else None])
                refs[value] = ["const", len(constants) - 1]
            args.append(None if value is None else refs[value])
        for position, value in enumerate(node.outputs):
            refs[value] = ["node", len(nodes), position]
        nodes.append([node.op, {k: _attr_json(v) for k, v in sorted(node.attrs.items())},
                      args, [[list(v.type.shape), v.type.dtype] for v in node.outputs]])
    spec = {"inputs": [[list(v.type.shape), v.type.dtype] for v in body.inputs],
            "constants": constants, "nodes": nodes,
            "outputs": [refs[v] for v in body.outputs]}
    return json.dumps(spec, separators=(",", ":"), sort_keys=True)


@functools.lru_cache(maxsize=64)
def function_body(spec: str) -> Graph:
    """The function body of :func:`function_spec` text ``spec``; large constants get
    random values (the same for every call with one spec; zeros when not floats)."""
    data = json.loads(spec)
    rng = np.random.default_rng(0)
    values: dict = {}
    inputs = [Value(f"in{k}", TensorType(tuple(shape), dtype))
              for k, (shape, dtype) in enumerate(data["inputs"])]
    constants = []
    for k, (shape, dtype, content) in enumerate(data["constants"]):
        if content is not None:
            array = np.array(content, np.dtype(dtype)).reshape(shape)
        elif np.dtype(dtype).kind == "f":
            array = rng.standard_normal(shape).astype(dtype)
        else:  # indices, masks: zeros are valid wherever any value is
            array = np.zeros(shape, np.dtype(dtype))
        constants.append(Value(f"c{k}", TensorType(tuple(shape), np.dtype(dtype).name), array))

    def resolve(ref):
        if ref is None:
            return None
        kind, *where = ref
        if kind == "in":
            return inputs[where[0]]
        if kind == "const":
            return constants[where[0]]
        return values[tuple(where)]

    nodes = []
    for number, (op, attrs, args, outs) in enumerate(data["nodes"]):
        outputs = [Value(f"v{number}_{k}", TensorType(tuple(shape), dtype))
                   for k, (shape, dtype) in enumerate(outs)]
        for k, value in enumerate(outputs):
            values[number, k] = value
        nodes.append(Node(op, [resolve(a) for a in args], outputs,
                          {k: _attr_value(v) for k, v in attrs.items()}, f"n{number}"))
    return Graph(inputs, [resolve(r) for r in data["outputs"]], nodes, "function")


def _function_node(spec: str) -> Node:
    body = function_body(spec)
    return Node("Function", list(body.inputs), list(body.outputs), {}, "candidate", body)


def _function_flops(args: tuple) -> int:
    """Multiply-adds x 2 of the function's convolutions and products, plus one
    operation per element its reductions read."""
    total = 0
    for node in function_body(args[1]).nodes:
        if node.op in REDUCTION_ANCHORS:
            total += math.prod(node.inputs[0].type.shape)
        elif node.op == "ConvNCHWc":
            _, per_group, kh, kw, block, _ = node.inputs[1].type.shape
            total += 2 * math.prod(node.outputs[0].type.shape) * per_group * block * kh * kw
        elif node.op in ("MatMul", "Gemm"):
            a = node.inputs[0].type.shape
            out = node.outputs[0].type.shape
            k = a[0] if node.op == "Gemm" and node.attrs.get("transA") else a[-1]
            total += 2 * math.prod(out) * k
    return total


def _function_inputs(args: tuple, rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.standard_normal(v.type.shape).astype(v.type.dtype)
            for v in function_body(args[1]).inputs]


def _function_reference(args: tuple, inputs: list[np.ndarray]) -> list[np.ndarray]:
    return evaluate(function_body(args[1]), inputs)


#: the function whose kernel is being compiled: ``None`` (no records of it: the
#: workload records apply), ``("hand", None)`` or ``("auto", config)``
_FUNCTION_CHOICE: contextvars.ContextVar[tuple | None] = contextvars.ContextVar(
    "heterocc_llvm_function_choice", default=None)


def function_keys(spec: str, kind: str) -> tuple[str, str]:
    """The workload keys of a function's hand-schedule and auto-search tasks."""
    return (workload_key(FUNCTION, (kind, spec)),
            workload_key(auto_name(FUNCTION), (kind, spec)))


def _function_kind(body: Graph) -> str | None:
    """The anchor kind of a float function the function tasks cover, or None."""
    kinds = [("depthwise_" if n.op == "ConvNCHWc" and int(n.attrs.get("group") or 1) > 1
              else "") + FUNCTION_ANCHORS[n.op]
             for n in body.nodes if n.op in FUNCTION_ANCHORS
             and n.outputs[0].type.dtype.startswith("float")]
    return kinds[0] if len(kinds) == 1 else None


def function_configs(body: Graph, log: ApplyHistoryBest | None) -> ScheduleConfigs:
    """The configs of one function's schedules from the applied tuning ``log``: whether
    it takes its auto record as a whole (only where that was measured faster than the
    hand schedule of the same function on the same harness, by
    :data:`FUNCTION_MARGIN`) or keeps the hand schedule; functions the log has no
    records of keep the workload records' say (see :func:`function_tuned`)."""
    return ScheduleConfigs(log, _decide(body, log))


def _decide(body: Graph, context: ApplyHistoryBest | None) -> tuple | None:
    """:attr:`ScheduleConfigs.choice` of the function ``body`` under log ``context``."""
    choice = None
    kind = _function_kind(body) if context is not None else None
    spec = _spec_or_none(body) if kind is not None else None
    if spec is not None:
        hand_key, auto_key = function_keys(spec, kind)
        hand_cost, config = context.best_cost(hand_key), context.lookup(auto_key)
        paired = _paired_choice(context, auto_key, hand_key)
        if paired is not None:
            choice = ("auto", paired[0]) if paired[1] else ("hand", None)
        elif config is not None and (hand_cost is None or _beats_hand(
                context, auto_key, config, hand_key)):
            choice = ("auto", config)
        elif hand_cost is not None or config is not None:
            choice = ("hand", None)
    return choice


@contextlib.contextmanager
def function_choice(body: Graph):
    """:func:`function_configs`' choice for ``body`` under the log applied here, made
    the choice of the helpers (:func:`matmul_panel`, ...) inside the block."""
    choice = _decide(body, current())
    token = _FUNCTION_CHOICE.set(choice)
    try:
        yield choice
    finally:
        _FUNCTION_CHOICE.reset(token)


def _paired_choice(context: ApplyHistoryBest, auto_key: str, hand_key: str
                   ) -> tuple[Config, bool] | None:
    """The search's best as it was timed in turn with the hand schedule (the records
    tagged :data:`~heterocc.tuning.records.PAIRED` and ``BASELINE``), and whether it won
    those pairs by :data:`FUNCTION_MARGIN`, both by the median of its timings and by
    its fastest; None where the log holds no such pairs (or their config is no point
    of today's space). Only these timings decide where they exist: the search's own
    were taken minutes earlier under another load (a point timed 0.15 ms while the
    machine was quiet, 0.27 ms beside the hand schedule's 0.21 ms later, took the
    place of that hand schedule and ran 0.45 ms in the model)."""
    paired = context.records(auto_key, PAIRED)
    baseline = context.records(hand_key, BASELINE)
    if not paired or not baseline:
        return None
    index = paired[-1].config_index  # the last run's finalist
    config = context.lookup(auto_key, lambda c: c.index == index)
    if config is None:
        return None
    pairs = []
    for record in (r for r in paired if r.config_index == index):
        after = [r for r in baseline if r.timestamp >= record.timestamp]
        if after:
            pairs.append((record.cost, min(after, key=lambda r: r.timestamp).cost))
    if not pairs:
        return None
    auto_costs, hand_costs = zip(*pairs)
    return config, _faster_by_margin(statistics.median(auto_costs),
                                     statistics.median(hand_costs),
                                     min(auto_costs), min(hand_costs))


def _beats_hand(context: ApplyHistoryBest, auto_key: str, config: Config,
                hand_key: str) -> bool:
    """Whether the auto record ``config`` was measured faster than the hand schedule
    by :data:`FUNCTION_MARGIN`, both by the median of its records and by its fastest
    single timing: on a shared machine a burst of other work slows some timings
    several-fold, which the median of a few records does not always outvote and the
    fastest timing never shows."""
    hand_index = FUNCTION_TEMPLATE.default_config(()).index
    return _faster_by_margin(context.best_cost(auto_key), context.best_cost(hand_key),
                             context.floor_cost(auto_key, config.index),
                             context.floor_cost(hand_key, hand_index))


def _faster_by_margin(auto_typical: float, hand_typical: float,
                      auto_fastest: float | None, hand_fastest: float | None) -> bool:
    """Whether the search's point beat the hand schedule by :data:`FUNCTION_MARGIN`
    both in its typical timing (a median) and in its fastest (where both are known)."""
    keep = 1 - FUNCTION_MARGIN
    return (auto_typical < hand_typical * keep
            and (auto_fastest is None or hand_fastest is None
                 or auto_fastest < hand_fastest * keep))


def _spec_or_none(body: Graph) -> str | None:
    """:func:`function_spec` of ``body``, or None for a function no task can describe
    (an attribute with no JSON form, or too large: it is never tuned as a whole)."""
    try:
        return function_spec(body)
    except (TypeError, CompileError):
        return None


def _function_sketch(outputs, cpu: CPUDescription | None = None) -> Sketch:
    return Sketch(outputs, search_hints(outputs[0].dtype, cpu))


def function_tuned(expressed, configs: ScheduleConfigs,
                   cpu: CPUDescription | None = None) -> te.Schedule | None:
    """The schedule of a function (its products packed already) by its auto record when
    ``configs`` chose it (:func:`function_configs`), else None (the target's own
    schedule follows)."""
    choice = configs.choice
    if choice is None or choice[0] != "auto":
        return None
    pack_matmuls(expressed.outputs, configs.matmul_panel, cpu)
    sketch = _function_sketch(expressed.outputs, cpu)
    blocks = _pack_rows(sketch, expressed.outputs, choice[1])
    s = te.create_schedule(expressed.outputs)
    fold_scalars(s, expressed.scalars)
    sketch.schedule_stages(s, expressed.outputs, choice[1])
    for packed in blocks:
        schedule_packed_rows(s, packed, cpu)
    return s


#: the layouts of a product's A that a function's auto search chooses between: read in
#: place, or copied in blocks of the register tile's rows by the reduction's chunk
#: (``schedules.pack_matmul_rows``)
A_LAYOUTS = ("in_place", "row_blocks")


def _pack_rows(sketch: Sketch, outputs, config: Config) -> list[te.Tensor]:
    """Where ``config`` (a point of the function's sketch ``sketch``, derived from the
    same compute before A was packed) chooses ``row_blocks``: every 2-D product among
    the sketch's anchors reads A through a copy in blocks of its register tile's rows
    (the innermost tile of its row axis) by its reduction chunk (the inner tile of its
    reduction), so that the tile's broadcasts read one contiguous block. Returns the
    copies' stages, for the caller to schedule."""
    if config.values.get("a_layout", "in_place") != "row_blocks":
        return []
    by_name = {t.name: t for t in reachable_computes(outputs)}
    blocks = []
    for number, anchor in enumerate(sketch.anchors):
        product = by_name.get(anchor.name)
        if (product is None or product.ndim != 2 or "packed_B" not in product.op.attrs
                or f"a{number}.tile.r0" not in config.values):
            continue
        rows = config[f"a{number}.tile.s0"][-1]
        blocks.append(pack_matmul_rows(product, rows, config[f"a{number}.tile.r0"]))
    return blocks


def _llvm_target():
    """A fresh instance of this target for the active CPU (through the registry: the
    target's module builds on this one)."""
    return get_target("llvm", cpu=active_cpu())


def _expressed_function(spec: str):
    """A function task's body expressed and packed as the target compiles it (its
    constant operands prepacked in the default panels: the sketch does not depend on
    the panel width)."""
    target = _llvm_target()
    with target.compile_context():
        expressed = express_function(function_body(spec))
        target.schedule(expressed, ScheduleConfigs(choice=("hand", None)))
    target._packings.pop(id(expressed), None)
    return expressed


def _auto_function_sketch(spec: str) -> Sketch:
    """The sketch of a function task for the CPU being tuned for (its lanes and
    registers shape the space)."""
    return _auto_function_sketch_for(spec, active_cpu())


@functools.lru_cache(maxsize=64)
def _auto_function_sketch_for(spec: str, cpu: CPUDescription) -> Sketch:
    with compiling_for(cpu):
        return _function_sketch(_expressed_function(spec).outputs)


def _has_panel(spec: str) -> bool:
    return any(n.op in ("MatMul", "Gemm") and len(n.outputs[0].type.shape) == 2
               for n in function_body(spec).nodes)


def _function_product(spec: str) -> Node:
    """The MatMul or Gemm node of a function with a product (see :func:`_has_panel`)."""
    (product,) = [n for n in function_body(spec).nodes if n.op in ("MatMul", "Gemm")]
    return product


def _panel_knob(spec: str) -> Knob:
    product = _function_product(spec)
    n, dtype = product.outputs[0].type.shape[1], product.outputs[0].type.dtype
    return Knob("panel", "layout", _panel_options(n, dtype))


def _auto_function_space(args: tuple) -> ConfigSpace:
    """The sketch of the whole function, and for a product the layouts of its operands,
    choices made before the sketch's stages exist: the panel width its B is packed in,
    and whether its A is read in place or copied in row blocks (:data:`A_LAYOUTS`)."""
    knobs = _auto_function_sketch(args[1]).space.knobs
    if _has_panel(args[1]):
        knobs = (_panel_knob(args[1]), Knob("a_layout", "layout", A_LAYOUTS), *knobs)
    return ConfigSpace(tuple(knobs))


def _auto_function_default(args: tuple) -> dict:
    values = _auto_function_sketch(args[1]).default_values()
    if _has_panel(args[1]):
        product = _function_product(args[1])
        shape, dtype = product.outputs[0].type.shape, product.outputs[0].type.dtype
        values["panel"] = _closest(_panel_knob(args[1]).options, default_panel(shape[1], dtype))
        values["a_layout"] = "in_place"
    return values


def _auto_function_upgrade(args: tuple, values: dict) -> dict:
    """A product's record written before the ``a_layout`` knob read A in place."""
    if _has_panel(args[1]):
        values.setdefault("a_layout", "in_place")
    return values


def _auto_function_seeds(args: tuple) -> list[dict]:
    """The sketch's seeds; a product's at each panel width its register tile fits, and
    those that chunk its reduction (cache blocking) also with A in row blocks."""
    seeds = _auto_function_sketch(args[1]).seed_values()
    if not _has_panel(args[1]):
        return seeds
    default = _auto_function_default(args)
    widths = _panel_knob(args[1]).options
    k = _function_depth(_function_product(args[1]))
    found = []
    for values in seeds:
        tile = values["a0.tile.s1"][-1]
        panel = tile if tile in widths else default["panel"]
        found.append({**values, "panel": panel, "a_layout": "in_place"})
    found += [{**values, "a_layout": "row_blocks"} for values in found
              if values.get("a0.tile.r0", k) < k]
    return found


def _function_depth(product: Node) -> int:
    """The reduction length of a function's MatMul or Gemm node."""
    a = product.inputs[0].type.shape
    return a[0] if product.op == "Gemm" and product.attrs.get("transA") else a[-1]


def _hand_function_space(args: tuple) -> ConfigSpace:
    return ConfigSpace((Knob("schedule", "order", ("hand",)),))


def _forced_log(template: str, args: tuple, config: Config) -> ApplyHistoryBest:
    """A log whose only record makes ``config`` the choice of this function (an empty
    one for the hand schedule: no outer log's records apply either)."""
    if template == FUNCTION:
        return ApplyHistoryBest([])
    record = MeasureRecord(workload_key(template, args), config.to_json(), config.index,
                           (0.0,), tuner="forced")
    return ApplyHistoryBest([record])


def _instantiate_function(args: tuple, config: Config, template: str):
    """The function scheduled by ``config`` through the target's own schedule (what the
    cost model's features describe)."""
    target = _llvm_target()
    body = function_body(args[1])
    with _forced_log(template, args, config), function_choice(body), \
            target.compile_context():
        expressed = express_function(body)
        schedule = target.schedule(expressed)
    target._packings.pop(id(expressed), None)
    return schedule, [*expressed.params, *expressed.outputs]


def _measure_function(task: Task, config: Config, options: MeasureOptions
                      ) -> tuple[float, ...]:
    """Compile the function through the target (prepacked constants, folded scalars,
    the epilogue in the tiles), check every output against the NumPy references, time
    the kernel as the graph executor calls it."""
    node = _function_node(task.args[1])
    target = _llvm_target()
    try:
        with _forced_log(task.template, task.args, config):
            kernel = target.kernel(node, target.compiled(node))
    except Exception as error:  # any failure to build is this candidate's
        raise CandidateError("build", f"{type(error).__name__}: {error}") from None
    inputs, expected = task_inputs(task.workload_key, options.seed)
    inputs = list(inputs)
    try:
        outputs = kernel(inputs)
    except Exception as error:
        raise CandidateError("runtime", f"{type(error).__name__}: {error}") from None
    for got, want in zip(outputs, expected):
        check_output(task, got, want, options)
    call = lambda: kernel(inputs)  # noqa: E731
    if options.cache == "rotate":  # its constants and outputs rotate, its inputs stay
        def make():
            twin = kernel.with_own_constants()
            return lambda: twin(inputs)
        call = _rotating(make, sum(c.nbytes for c in kernel.constants)
                         + sum(o.nbytes for o in outputs))
    return time_calls(call, options, _flush_of(options))


FUNCTION = "function"

#: a fused function under the target's hand schedule (one point: what compile does
#: without a log), the baseline its auto twin must beat to be applied
FUNCTION_TEMPLATE = Template(
    FUNCTION, "llvm", _hand_function_space, lambda args: {"schedule": "hand"},
    functools.partial(_instantiate_function, template=FUNCTION), _function_inputs,
    _function_reference, _function_flops)

#: a fused function searched by the sketch rules of its whole compute
AUTO_FUNCTION_TEMPLATE = Template(
    auto_name(FUNCTION), "llvm", _auto_function_space, _auto_function_default,
    functools.partial(_instantiate_function, template=auto_name(FUNCTION)),
    _function_inputs, _function_reference, _function_flops, seeds=_auto_function_seeds,
    upgrade=_auto_function_upgrade)


def function_tasks(graph: Graph, target) -> list[Task]:
    """The auto search's tasks of ``graph`` as ``target`` compiles it: one
    ``auto.function`` task per distinct fused function (by :func:`function_spec`) with
    one float convolution, product or reduction, weighted by how many functions share
    it."""
    graph = run_pipeline(graph, {target.name: target}).graph
    found: dict[str, Task] = {}
    counts: dict[str, int] = {}
    for node in graph.nodes:
        if node.body is None or node.attrs.get("target", target.name) != target.name:
            continue
        kind = _function_kind(node.body)
        if kind is None:
            continue
        spec = _spec_or_none(node.body)
        if spec is None:
            continue
        task = Task(auto_name(FUNCTION), (kind, spec))
        found.setdefault(task.workload_key, task)
        counts[task.workload_key] = counts.get(task.workload_key, 0) + 1
    return [task.weighted(counts[key]) for key, task in found.items()]
