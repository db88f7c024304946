"""Integer convolutions on the CPU's matrix tiles (x86 AMX-INT8,
:mod:`heterocc.targets.llvm.int8_tiles`).

The sums are :func:`.int8_conv.int8_conv`'s, over the same packed data (``[n, C/4, row
phases, column phases, positions, 4]`` bytes, :func:`.int8_conv.pack_int8_flat`): 16
consecutive positions of one channel group are 64 contiguous bytes, one row of a tile's
``B`` operand, and 16 channel groups (64 input channels), ``positions * 4`` bytes apart
(times the phases), a whole ``B`` tile. The weight is packed as ``[O, C/64, KH, KW, 16,
4]`` (:func:`pack_int8_weight_blocks`), so that an output channel's 64 input channels at
one tap are one 64-byte row of ``A``. One tile instruction then adds, for 16 output
channels by 16 positions, the products of 64 input channels at one tap: a register tile
of :class:`Int8MatrixTiles` holds ``channels / 16`` by ``vectors`` accumulator tiles
over every channel block and tap (:func:`tile_product_intrinsic`), their sums in the
block's int32 ``[channels, positions]`` as :func:`.int8_conv.int8_conv`'s vectors
leave them, finished by the same stage.

Taken where the description has the tiles and the shapes fill them
(:func:`matrix_conv`): a dense convolution whose output channels are whole tiles of 16
and whose input channels, rounded up to whole blocks of 64 (the channels past C hold the
zero point in the data and zeros in the weight), are at most :data:`MAX_CHANNEL_PADDING`
times as many, and whose reduction is two tile products or more.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from heterocc.sdk import te
from heterocc.te.intrin import BufferRegion, TensorIntrin
from heterocc.tir import expr as tx
from heterocc.tir import stmt as ts

from ..cpu import CPUDescription
from ..int8_tiles import (
    TILE_BYTES,
    TILE_DOT_CALL,
    TILE_LOAD_CALL,
    TILE_REGISTERS,
    TILE_ROWS,
    TILE_STORE_CALL,
    TILE_ZERO_CALL,
    has_tiles,
)

#: bytes of the dot product's group (four channels per int32 lane)
GROUP = 4
#: input channels one row of a tile multiplies (64 bytes)
CHANNEL_BLOCK = TILE_BYTES
#: channel groups of four one tile of data holds (its rows)
GROUPS_PER_BLOCK = CHANNEL_BLOCK // GROUP
#: the packing code of a constant weight packed by :func:`pack_matrix_weight_array`
MATRIX_WEIGHT_PACKING = "int8_conv_blocks"
#: how many more input channels than it has a convolution on the tiles may multiply
#: (its channels rounded up to whole blocks of 64): MobileNetV2's 96 and 160 (1.33 and
#: 1.2), not its 32 and 24 (2 and 2.7), which the vector dot product computes in less
#: time than the tiles compute the padded channels: the tiles' peak is some seven
#: times ``vpdpbusd``'s here (``int8_bound.py``: 2600 against 368 G a core), but with
#: the packing, finishing and tile loads a whole convolution took 0.55-0.88x the time
#: (Emerald Rapids; the layers of :data:`MIN_TILE_STEPS`), and 32->32 3x3 at 56x56,
#: its channels doubled, 0.86x: near even.
MAX_CHANNEL_PADDING = 1.5
#: the fewest tile products (channel blocks times taps) a convolution on the tiles adds
#: into each accumulator: with one, a block loads, multiplies once and stores its
#: accumulators, and the packing and finishing cost as much as on the vector dot
#: product, which then multiplies in less time. Emerald Rapids (2 threads, fastest of
#: 100 alternating calls, the tiles' time over ``vpdpbusd``'s): 1x1 convolutions of
#: one block, ResNet-50's 64->256 at 56x56 1.06, of 32 channels padded to 64 (192 out at
#: 28x28) 1.63; of two blocks, 96->576 at 14x14 0.88, of three 160->960 at 7x7 0.61;
#: 3x3 (nine taps) 48->64 at 28x28 0.59.
MIN_TILE_STEPS = 2


@dataclass(frozen=True)
class Int8MatrixTiles:
    """A register tile of accumulator tiles: ``channels`` output channels (whole tiles
    of 16) by ``vectors`` runs of ``lanes`` (16) positions; as :class:`.int8_conv.
    Int8ConvTiles`' fields, which the finishing stage reads."""

    lanes: int
    channels: int
    vectors: int

    @property
    def channel_tiles(self) -> int:
        return self.channels // TILE_ROWS


def matrix_conv(x_shape, w_shape, attrs, cpu: CPUDescription) -> bool:
    """Whether a convolution of ``x_shape`` data by ``w_shape`` OIHW weights runs on the
    tiles: ``cpu`` has them (AMX-INT8), the convolution is dense (group 1), its output
    channels are whole tiles of :data:`TILE_ROWS`, its input channels, rounded up to
    whole blocks of :data:`CHANNEL_BLOCK`, at most :data:`MAX_CHANNEL_PADDING` times as
    many, and its reduction at least :data:`MIN_TILE_STEPS` tile products (channel
    blocks times taps)."""
    filters, channels, kh, kw = (int(d) for d in w_shape)
    blocks = -(-channels // CHANNEL_BLOCK)
    return (has_tiles(cpu.features, cpu.arch) and int(attrs.get("group", 1)) == 1
            and channels == int(x_shape[1])
            and blocks * CHANNEL_BLOCK <= MAX_CHANNEL_PADDING * channels
            and blocks * kh * kw >= MIN_TILE_STEPS and filters % TILE_ROWS == 0)


def matrix_tiles(filters: int) -> Int8MatrixTiles:
    """The register tile of ``filters`` output channels: two tiles of channels by two of
    positions (four accumulators, two tiles of weights and two of data: all eight
    registers) where the channels come in 32s, else one by three (seven)."""
    if filters % (2 * TILE_ROWS) == 0:
        return Int8MatrixTiles(TILE_ROWS, 2 * TILE_ROWS, 2)
    return Int8MatrixTiles(TILE_ROWS, TILE_ROWS, 3)


def pack_int8_weight_blocks(w: te.Tensor) -> te.Tensor:
    """OIHW int8 weights as ``[O, C/64, KH, KW, 16, 4]`` (input channels past C zero):
    at each tap, an output channel's 64 input channels in a row."""
    filters, channels, kh, kw = w.shape

    def element(k, block, ry, rx, group, inner):
        channel = (block * GROUPS_PER_BLOCK + group) * GROUP + inner
        return te.if_then_else(channel < channels,
                               w[k, te.minimum(channel, channels - 1), ry, rx],
                               te.const(0, "int8"))

    return te.compute((filters, -(-channels // CHANNEL_BLOCK), kh, kw, GROUPS_PER_BLOCK,
                       GROUP), element, name="int8_weight", dtype="int8")


def matrix_weight_shape(w_shape) -> tuple[int, ...]:
    """The shape :func:`pack_matrix_weight_array` gives OIHW weights of ``w_shape``: that
    of :func:`pack_int8_weight_blocks` with one more block, the weight sums'."""
    filters, channels, kh, kw = (int(d) for d in w_shape)
    return (filters, -(-channels // CHANNEL_BLOCK) + 1, kh, kw, GROUPS_PER_BLOCK, GROUP)


def pack_matrix_weight_array(w: np.ndarray) -> np.ndarray:
    """NumPy's copy of :func:`pack_int8_weight_blocks`, what a constant weight is packed
    into once, when its kernel is built, followed by one block whose first four bytes
    (at tap 0, 0) hold each output channel's int32 weight sum, lowest byte first (as
    :func:`.int8_conv.pack_int8_weight_array`'s trailing group, read back alike)."""
    filters, channels, kh, kw = w.shape
    packed = np.zeros(matrix_weight_shape(w.shape), np.int8)
    blocks = packed.shape[1] - 1
    padded = np.zeros((filters, blocks * CHANNEL_BLOCK, kh, kw), np.int8)
    padded[:, :channels] = w
    # [O, blocks, 16, 4, KH, KW] -> [O, blocks, KH, KW, 16, 4]
    packed[:, :blocks] = padded.reshape(filters, blocks, GROUPS_PER_BLOCK, GROUP, kh, kw
                                        ).transpose(0, 1, 4, 5, 2, 3)
    sums = w.astype(np.int64).reshape(filters, -1).sum(axis=1).astype("<i4")
    packed[:, blocks, 0, 0, 0] = sums.view(np.int8).reshape(filters, GROUP)
    return packed


def _strides(buffer: tx.Buffer) -> list[int]:
    """Row-major element strides of ``buffer``'s dimensions."""
    strides, step = [], 1
    for extent in reversed(buffer.shape):
        strides.append(step)
        step *= int(extent)
    return strides[::-1]


def _at(region: BufferRegion, local) -> tx.BufferLoad:
    """The element of ``region``'s buffer at ``local`` (one index per dimension, from the
    region's start): its address, as a tile instruction takes it."""
    return tx.BufferLoad(region.buffer, tuple(base + offset
                                              for base, offset in zip(region.bases, local)))


def _call(name: str, *args) -> ts.Evaluate:
    return ts.Evaluate(tx.Call(name, tuple(tx.IntImm(a) if isinstance(a, int) else a
                                           for a in args), "int32"))


#: ``data_at(block, ry, rx, column)``: the index, from the data region's start, of the
#: first byte (channel group 0 of the block, byte 0) that tap ``ry``, ``rx`` reads for
#: the sums' ``column``
DataIndex = Callable[..., tuple]


def tile_product_intrinsic(tiles: Int8MatrixTiles, blocks: int, taps: tuple[int, int],
                           data_shape: tuple[int, ...], data_at: DataIndex) -> TensorIntrin:
    """``acc[k, c] += sum over blocks, taps, 64 channels of w[k, block, ry, rx, g, i] *
    data[data_at(block, ry, rx, c) + (16 * block + g, i)]`` for ``tiles.channels``
    output channels by ``lanes * vectors`` positions: every channel block and tap of
    the sums, on the tiles. ``data_shape``: the data region (6-D as the packed data,
    its channel groups all ``16 * blocks``), ``data_at`` where a tap reads it.

    The accumulators are loaded once (zeroed in the registers instead where the
    intrinsic computes whole sums: ``implement_reset``), then each block and tap loads
    ``channels / 16`` tiles of weights and ``vectors`` of data and multiplies each pair,
    and the accumulators are stored once."""
    kh, kw = taps
    rows, columns = tiles.channel_tiles, tiles.vectors
    width = tiles.lanes * tiles.vectors
    weight = te.placeholder((tiles.channels, blocks, kh, kw, GROUPS_PER_BLOCK, GROUP), "int8",
                            "weight")
    data = te.placeholder(data_shape, "uint8", "data")
    rb, ry, rx = te.reduce_axis(blocks, "rb"), te.reduce_axis(kh, "ry"), te.reduce_axis(kw,
                                                                                      "rx")
    rg, ri = te.reduce_axis(GROUPS_PER_BLOCK, "rg"), te.reduce_axis(GROUP, "ri")

    def read(block, y, x, column, group, inner):
        index = list(data_at(block, y, x, column))
        index[1] = index[1] + group
        index[-1] = index[-1] + inner
        return data[tuple(index)]

    # an axis of one iteration indexes nothing (the loops it stands for are no loops)
    b, y, x = (axis if extent > 1 else 0 for axis, extent in ((rb, blocks), (ry, kh),
                                                               (rx, kw)))
    acc = te.compute((tiles.channels, width), lambda k, c: te.sum(
        te.cast("int32", weight[k, b, y, x, rg, ri])
        * te.cast("int32", read(b, y, x, c, rg, ri)), axis=[rb, ry, rx, rg, ri]),
        name="acc")
    accumulators = list(range(rows * columns))
    weights = [rows * columns + i for i in range(rows)]
    inputs = [rows * columns + rows + j for j in range(columns)]
    assert inputs[-1] < TILE_REGISTERS

    def implement(regions: list[BufferRegion], output: BufferRegion, reset: bool = False):
        weight_region, data_region = regions
        out_strides = _strides(output.buffer)
        # the output region [.., channels, .., positions]: its channel and position dims
        dims = [d for d, extent in enumerate(output.shape) if extent != 1]
        channel_dim, column_dim = dims if len(dims) == 2 else (len(output.shape) - 2,
                                                                len(output.shape) - 1)

        def out_at(i, j):
            local = [0] * len(output.shape)
            local[channel_dim], local[column_dim] = TILE_ROWS * i, tiles.lanes * j
            return _at(output, local)

        row_bytes = out_strides[channel_dim] * 4
        weight_row = _strides(weight_region.buffer)[0]
        data_row = _strides(data_region.buffer)[1]
        block = tx.Var("tile_block")
        body = []
        for y in range(kh):
            for x in range(kw):
                for i, tile in enumerate(weights):
                    body.append(_call(TILE_LOAD_CALL, tile, _at(
                        weight_region, (TILE_ROWS * i, block, y, x, 0, 0)), weight_row))
                for j, tile in enumerate(inputs):
                    body.append(_call(TILE_LOAD_CALL, tile, _at(
                        data_region, data_at(block, y, x, tiles.lanes * j)), data_row))
                for i in range(rows):
                    for j in range(columns):
                        body.append(_call(TILE_DOT_CALL, accumulators[i * columns + j],
                                          weights[i], inputs[j]))
        loads = [_call(TILE_ZERO_CALL, accumulators[i * columns + j]) if reset
                 else _call(TILE_LOAD_CALL, accumulators[i * columns + j], out_at(i, j),
                            row_bytes) for i in range(rows) for j in range(columns)]
        stores = [_call(TILE_STORE_CALL, accumulators[i * columns + j], out_at(i, j),
                        row_bytes) for i in range(rows) for j in range(columns)]
        loop = ts.For(block, tx.IntImm(0), tx.IntImm(blocks), ts.ForKind.SERIAL,
                      ts.seq(body))
        return ts.seq([*loads, loop, *stores])

    return TensorIntrin(f"cpu_tile_product_{tiles.channels}x{width}", acc, implement,
                        {"tiles": tiles},
                        implement_reset=lambda regions, output: implement(regions, output,
                                                                          reset=True))


def schedule_int8_matrix(schedule: te.Schedule, sums: te.Tensor, intrinsic: TensorIntrin
                         ) -> None:
    """The sums of :func:`.int8_conv.int8_conv` on the tiles (computed in the finishing
    stage's blocks): for each tile of channels and run of positions, ``intrinsic``
    (:func:`tile_product_intrinsic`) over every channel block and tap."""
    tiles: Int8MatrixTiles = sums.op.attrs["int8_conv"]
    stage = schedule[sums]
    b, k, y, column = stage.op.axis
    reductions = stage.op.reduce_axis
    ko, ki = stage.split(k, tiles.channels)
    co, ci = stage.split(column, tiles.lanes * tiles.vectors)
    stage.reorder(b, y, ko, co, ki, ci, *reductions)
    stage.tensorize(ki, intrinsic, vectorize_init=True)
