"""The blocked NCHW[x]c convolutions the target compiles (dense and depthwise): their
workloads, spaces and the schedules their configs give."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from heterocc.sdk import te
from heterocc.sdk.graph import (
    blocked_conv_geometry,
    blocked_conv_input_shape,
    compute_of,
    conv_nchwc,
)
from heterocc.sdk.tuning import Config, ConfigSpace, Knob, Template, divisors

from ..cpu import CPUDescription, active_cpu
from ..schedules import (
    BLOCKED_CONV_MAX_COLUMNS,
    DEPTHWISE_MAX_COLUMNS,
    BlockedConvTiles,
    DepthwiseConvTiles,
    default_blocked_conv_tiles,
    default_depthwise_conv_tiles,
    dense_conv_reduction_blocks,
    schedule_conv2d_nchwc,
    schedule_depthwise_conv2d_nchwc,
    window_shares_inputs,
)
from .common import _random_inputs

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
    (``block_unroll``: None, the schedule's default (``schedules.default_block_unroll``),
    or a divisor of the block, the whole block included) and the input
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
                       (None, *divisors(in_block))),
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
                                       channel_blocks, np.dtype(workload.dtype).itemsize,
                                       cpu=active_cpu())


def _blocked_conv_default(args: tuple, depthwise: bool) -> dict:
    """The choices of ``schedule_conv2d_nchwc`` (of ``schedule_depthwise_conv2d_nchwc``
    for a depthwise convolution) without a tuning log."""
    workload = BlockedConvWorkload.from_args(args, depthwise)
    if depthwise:
        tiles = default_depthwise_conv_tiles(_blocked_conv_compute(workload)[2], cpu=active_cpu())
        return {"columns": tiles.columns, "channel_blocks": tiles.channel_blocks,
                "reduce_order": "channels_outer", "unroll_window": tiles.unroll_window,
                "parallel": tiles.parallel}
    _, _, kh, kw, in_block, _ = workload.weight_shape
    columns, channel_blocks = default_blocked_conv_tiles(
        workload.out_shape, np.dtype(workload.dtype).itemsize, windowed=kh * kw > 1,
        shared_inputs=window_shares_inputs(in_block, kw, workload.attrs["strides"][1]),
        cpu=active_cpu())
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
                          chain: Sequence[te.Tensor] = (), *,
                          cpu: CPUDescription) -> None:
    """Schedule the blocked convolution ``conv`` with ``tiles`` (see
    :func:`blocked_conv_tiles_of`) for ``cpu``: the depthwise schedule for
    ``DepthwiseConvTiles``."""
    if isinstance(tiles, DepthwiseConvTiles):
        schedule_depthwise_conv2d_nchwc(schedule, conv, epilogue, chain, tiles, cpu=cpu)
    else:
        schedule_conv2d_nchwc(schedule, conv, epilogue, chain, tiles, cpu=cpu)


def _instantiate_blocked_conv(args: tuple, config: Config, depthwise: bool):
    data, weight, conv = _blocked_conv_compute(BlockedConvWorkload.from_args(args, depthwise))
    s = te.create_schedule(conv)
    schedule_blocked_conv(s, conv, blocked_conv_tiles_of(config, depthwise), cpu=active_cpu())
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



