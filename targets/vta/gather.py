"""Channel gathers (``ChannelGather``, written by the ``channel_gathers`` pass: a
ShuffleNet unit's channel shuffle and split) on the GEMM core.

Moving a channel from one lane of a tile to another is not an element-wise ALU
operation, but it is a 1x1 convolution with 0/1 weights: output channel ``k`` has a
single weight 1, on the lane of its source channel. The products are exact
(``x * 1``), the accumulator holds the int8 source value, and the epilogue is the
identity (multiplier 1, no shift, zero point 0; ``epilogue.plan_epilogue`` drops
every step), so the narrowing STORE writes the source value itself.

The inputs are written one after the other into the convolution's input tensor,
each in the blocked layout of the convolutions around it (its channels padded to
whole ``block_in`` tiles), so the gather's input channel blocks are the inputs'
blocks in order: the padded lanes hold whatever their producer left there, and
meet zero weights only. Inputs whose channels do not fill whole tiles (ShuffleNet's
58-channel halves) need no copy to line them up.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from heterocc.accel_sim import HardwareConfig
from heterocc.accel_sim.program import DramTensor, Program
from heterocc.accel_sim.reference_programs import Requantization
from heterocc.ir.graph import Node

from .conv import ConvGeometry


def unsupported(node: Node, config: HardwareConfig) -> str | None:
    """Why the accelerator cannot run this ``ChannelGather``, or None."""
    out = node.outputs[0].type
    if out.ndim != 4:
        return f"a {out.ndim}-D tensor (the GEMM core's blocked layout holds 4-D activations)"
    if any(v.type.dtype != "int8" for v in node.inputs):
        return "an input is not int8"
    if len(set(node.inputs)) != len(node.inputs):
        return "an input is gathered from twice"
    if out.shape[0] != config.batch:
        return (f"batch {out.shape[0]} (one batch group of {config.batch} only: the inputs' "
                "channel blocks must follow each other)")
    if config.block_in != config.block_out:
        return (f"the input tiles ({config.block_in} channels) are not shaped like the "
                f"output tiles ({config.block_out})")
    return None


def gather_geometry(node: Node, config: HardwareConfig) -> ConvGeometry:
    """The 1x1 convolution over the inputs' channel blocks, one after the other."""
    _, channels, height, width = node.outputs[0].type.shape
    blocks = sum(-(-v.type.shape[1] // config.block_in) for v in node.inputs)
    return ConvGeometry(1, blocks, height, width, -(-channels // config.block_out), (1, 1),
                        (1, 1), (0, 0, 0, 0))


def padded_sources(node: Node, block: int) -> np.ndarray:
    """Each output channel's source as a channel of the inputs padded to whole
    ``block``-channel tiles and laid one after the other."""
    widths = [v.type.shape[1] for v in node.inputs]
    starts = np.cumsum([0, *widths])
    padded = np.cumsum([0, *(-(-c // block) * block for c in widths)])
    sources = np.asarray(node.attrs["channels"], np.int64)
    which = np.searchsorted(starts, sources, side="right") - 1
    return padded[which] + sources - starts[which]


def gather_weights(node: Node, g: ConvGeometry, config: HardwareConfig) -> np.ndarray:
    """The 0/1 weights in the direct convolution's blocked order (filters, channels, 1, 1,
    block_out, block_in): one 1 per output channel, on its source's lane."""
    bi, bo = config.block_in, config.block_out
    weights = np.zeros((g.filters, g.channels, 1, 1, bo, bi), np.int8)
    outputs = np.arange(len(node.attrs["channels"]))
    sources = padded_sources(node, bi)
    weights[outputs // bo, sources // bi, 0, 0, outputs % bo, sources % bi] = 1
    return weights


def identity_requantization(channels: int) -> Requantization:
    """The epilogue that stores each accumulator (an int8 value) as it is."""
    zeros = np.zeros(channels, np.int64)
    return Requantization(zeros, np.full(channels, 1 << 30, np.int64),
                          np.ones(channels, np.int64), zeros, zeros, 0, -128, 127)


def with_input_parts(program: Program, node: Node, config: HardwareConfig) -> Program:
    """``program`` with tensors "X0", "X1", ...: the parts of its input tensor "X" that
    hold each input of ``node`` (its channel blocks, padded, one input after the other)."""
    x = program.tensors["X"]
    tensors = dict(program.tensors)
    row = 0
    for i, v in enumerate(node.inputs):
        n, c, h, w = v.type.shape
        rows = -(-c // config.block_in) * h * w * n
        tensors[f"X{i}"] = DramTensor(f"X{i}", x.buffer,
                                      x.byte_address + row // x.tile_rows * x.unit_bytes,
                                      rows, x.cols, x.tile_rows, x.tile_cols, x.unit_bytes)
        row += rows
    return dataclasses.replace(program, tensors=tensors)
