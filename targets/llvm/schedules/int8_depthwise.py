"""Integer depthwise convolutions on the CPU (a ``ConvInteger`` with one input channel per
output channel, MobileNet's): no four channels to add per lane, so no dot product;
instead, over a vector of output pixels of one channel, exact 16-bit products
(centered data times the weight) widened into int32 sums.

The data is packed centered (less its zero point, as int16, so padding is 0) by a
vectorized copy: with stride 1 the padded image's pixels row after row, so a vector
runs on across rows (a 7x7 image fills whole vectors); with a larger stride each row
split by column phase, so a vector of output pixels reads one contiguous run (on
AVX-512BW; elsewhere a scalar copy, :func:`.int8_conv.pack_int8_data`). The weight of a
channel at a tap is broadcast to the vector; the sums need no zero-point correction.
The cropped sums are an ``int8_conv_result`` anchor like the dense convolution's,
finishing the bias and the ``Requantize`` row by row.

With column stride 2 (MobileNet's downsampling depthwise convolutions) and a CPU with an
int16 pair product (``vpdpwssd``, ``pmaddwd``: :func:`pairs_apply`), the two taps of a
pair of neighbouring columns are one instruction: output pixel ``x`` reads padded
columns ``2x + rx``, so the int32 lane of a vector of ``2L`` int16 data at ``2x + 2j``
holds the data of taps ``2j`` and ``2j + 1``, multiplied by the pair of their weights
(the last one 0 for an odd kernel width) and added into the sum: a 3x3 kernel takes six
instructions per vector, not nine products, widenings and adds. The data is a centered
copy of the rows split by row phase only (each phase's rows one after another, so that
vectors run on across rows and a 7x7 output fills whole vectors), which is also cheaper
to make than a copy split by column phase.

Where the CPU has the 8-bit dot product itself and a byte shuffle (AVX-512 VNNI with
VBMI, NEON ``sdot``; ``pshufb`` block by block on x86 VNNI without VBMI), a kernel row
is one dot product per vector instead, at any stride (:mod:`.int8_depthwise_quads`,
:func:`.int8_depthwise_quads.quads_apply`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from heterocc.sdk import CompileError, te
from heterocc.sdk.graph import conv_geometry
from heterocc.te.intrin import BufferRegion, TensorIntrin
from heterocc.te.schedule_reads import reads_of
from heterocc.tir import expr as tx
from heterocc.tir.stmt import BufferStore

from ..cpu import CPUDescription
from ..int8_dot import DOT4_CALL, dot4_instruction
from .common import schedule_rows
from .int8_conv import (
    IMAGE_COLUMNS,
    RowBlocks,
    block_of_rows,
    checked_geometry,
    copy_lanes,
    masked_byte_loads,
    pack_in_parallel,
    pack_int8_data,
    register_tiles,
    row_blocks,
    schedule_phase_rows,
    tensorized_channel_tiles,
    weight_dtype,
)
from .int8_depthwise_plane import (
    INT8_PLANE,
    pack_weight_plane_array,
    plane_applies,
    plane_depthwise_conv,
    schedule_plane_depthwise,
    weight_plane_shape,
)
from .int8_depthwise_quads import (
    pack_weight_quads_array,
    quad_depthwise_conv,
    quads_apply,
    schedule_quad_depthwise,
    weight_quads_shape,
)

#: the type the centered data is stored as: (x - zero point) of 8-bit x fits 9 bits
CENTERED = "int16"


@dataclass(frozen=True)
class Int8DepthwiseTiles:
    """``lanes`` output pixels per vector, ``channels`` channels per register tile."""

    lanes: int
    channels: int


def int8_depthwise_tiles(channels: int, cpu: CPUDescription
                         ) -> Int8DepthwiseTiles:
    """One int32 vector of pixels; a quarter of the vector registers as channels (an
    accumulator each, beside the data vectors of the taps), dividing ``channels``."""
    description = cpu
    tile = max(description.vector_registers // 4, 1)
    while channels % tile:
        tile -= 1
    return Int8DepthwiseTiles(description.vector_lanes("int32"), tile)


def _centered_element(x: te.Tensor, x_zero: te.Tensor | None, pads):
    """``element(b, c, row, column)``: ``x`` at a padded position less its zero point,
    as :data:`CENTERED`, 0 outside the image. The read is guarded, not clamped, so a
    vector of columns reads one run of the row (masked at the borders)."""
    _, _, height, width = x.shape
    top, left = pads[0], pads[1]
    zero = te.const(0, "int32") if x_zero is None else te.cast(
        "int32", x_zero[(0,) * x_zero.ndim])

    def element(b, c, row, column):
        y, col = row - top, column - left
        inside = te.logical_and(te.logical_and(y >= 0, y < height),
                                te.logical_and(col >= 0, col < width))
        return te.cast(CENTERED, te.if_then_else(
            inside, te.cast("int32", x[b, c, y, col]) - zero, te.const(0, "int32")))

    return element


def pack_centered_rows(x: te.Tensor, x_zero: te.Tensor | None, pads,
                       rows: int) -> te.Tensor:
    """``x`` (8-bit NCHW) less its zero point, as :data:`CENTERED`, padded with 0 to
    ``[n, C, rows, padded width]`` (``rows`` past the padded image's hold 0 too). A
    copy: each padded row reads its input row where the column is inside the image
    (no clamped indices, no division), so the loop over a row's columns is vectorized,
    its reads one contiguous run (masked at the borders)."""
    n, channels, _, width = x.shape
    element = _centered_element(x, x_zero, pads)
    return te.compute((n, channels, rows, width + pads[1] + pads[3]), element,
                      name="int8_data", dtype=CENTERED,
                      attrs={IMAGE_COLUMNS: (int(pads[1]), int(width))})


def pack_centered_phases(x: te.Tensor, x_zero: te.Tensor | None, pads, stride: int,
                         columns: int) -> te.Tensor:
    """``x`` (8-bit NCHW) centered and padded as :func:`pack_centered_rows`, each padded
    row split by column phase: ``[n, C, padded rows, stride, columns]``, holding the
    padded row's column ``column * stride + phase`` (0 past it). A vector of columns
    reads input elements ``stride`` apart: one wide masked load and a shuffle (see the
    codegen's strided loads), so the copy runs at vector speed like the stride-1 one."""
    n, channels, height, _ = x.shape
    element = _centered_element(x, x_zero, pads)

    def phased(b, c, row, phase, column):
        return element(b, c, row, column * stride + phase)

    return te.compute((n, channels, height + pads[0] + pads[2], stride, columns), phased,
                      name="int8_data", dtype=CENTERED)


def pairs_apply(strides, dilations, cpu: CPUDescription, row=None) -> bool:
    """Whether a depthwise convolution of ``strides`` and ``dilations`` takes its taps
    in pairs of columns (the module's docstring): column stride 2, column dilation 1, on
    a CPU whose dot product of int16 pairs is one instruction (elsewhere the widened
    form would cost more than the 16-bit products it replaces), and whose guarded
    vector copy of bytes is a masked move (:func:`masked_byte_loads`: AVX-512BW) or
    whose copied rows mostly load whole vectors (:func:`rows_mostly_whole`, ``row``:
    the image's width and its left and right padding, where known). On AVX2 a vector
    of the row copy that crosses the image's border loads byte by byte: MobileNetV2's
    stride-2 layers took 0.64x the column-phase kernel's time at 112x112 and 0.76x at
    56x56, but 2.05x at 28x28 (rows of two vectors, neither whole) and 1.22x at 14x14
    (Zen 5, ``benchmarks/int8_depthwise.py``)."""
    lanes = cpu.vector_lanes("int32")
    return (int(strides[1]), int(dilations[1])) == (2, 1) \
        and dot4_instruction(cpu.features, cpu.arch, lanes, False, False, 16) in (
            "vpdpwssd", "pmaddwd") \
        and (masked_byte_loads(cpu) or (row is not None and rows_mostly_whole(*row, cpu)))


def rows_mostly_whole(width: int, left: int, right: int, cpu: CPUDescription) -> bool:
    """Whether at least half the register-wide vectors of the column pairs' row copy
    (:data:`CENTERED`, ``left`` and ``right`` padding around ``width`` columns, whole
    pairs) lie inside the image (the others go lane by lane on a CPU without a masked
    move of int16: :func:`.int8_conv.lanes_by_lane`)."""
    length = -(-(width + left + right) // 2) * 2
    lanes = cpu.vector_lanes(CENTERED)
    starts = range(0, length, lanes)
    whole = sum(1 for start in starts if start >= left and start + lanes <= left + width)
    return 2 * whole >= len(starts)


def dot2_intrinsic(lanes: int) -> TensorIntrin:
    """``acc[l] += data[2l] * w[0] + data[2l + 1] * w[1]`` over ``lanes`` pixels (int16
    data and weights): one :data:`.int8_dot.DOT4_CALL` on int16 pairs."""
    data = te.placeholder((2 * lanes,), CENTERED, "data")
    weight = te.placeholder((2,), CENTERED, "weight")
    r = te.reduce_axis(2, "r")
    acc = te.compute((lanes,), lambda lane: te.sum(
        te.cast("int32", data[2 * lane + r]) * te.cast("int32", weight[r]), axis=r),
        name="acc")

    def implement(inputs: list[BufferRegion], output: BufferRegion):
        data_region, weight_region = inputs
        bases = list(output.bases)
        bases[-1] = tx.Ramp(bases[-1], tx.IntImm(1), lanes)
        total = tx.Call(DOT4_CALL, (output.load(0), data_region.load(0),
                                    weight_region.load(0), tx.IntImm(2 * lanes),
                                    tx.IntImm(2)), tx.with_lanes("int32", lanes))
        return BufferStore(output.buffer, total, tuple(bases))

    return TensorIntrin(f"cpu_dot2_{lanes}", acc, implement, {"lanes": lanes})


def pack_centered_row_phases(x: te.Tensor, x_zero: te.Tensor | None, pads, stride: int,
                             phases: int, row_length: int, rows: int) -> te.Tensor:
    """``x`` (8-bit NCHW) centered and padded as :func:`pack_centered_rows`, split by
    row phase: ``[n, C, phases, rows * row_length]``, phase ``p``'s padded rows
    ``stride * r + p`` one after another, each ``row_length`` columns (0 past the padded
    width and past the image). The flat axis carries ``int8_row`` (its row length), so
    that its schedule loops over rows and columns (no division)."""
    n, channels, _, _ = x.shape
    element = _centered_element(x, x_zero, pads)

    def phased(b, c, phase, position):
        return element(b, c, position // row_length * stride + phase,
                       position % row_length)

    return te.compute((n, channels, phases, rows * row_length), phased, name="int8_data",
                      dtype=CENTERED, attrs={"int8_row": row_length})


def _paired_weight(w: te.Tensor, packed_weight: te.Tensor | None) -> te.Tensor:
    """``[C, KH, ceil(KW / 2), 2]`` int16: the weights of taps ``2j`` and ``2j + 1``
    of each row (0 past the kernel's width), from ``w`` or its int16 vectors
    (:func:`pack_weight_lanes_array`); ``packed_weight`` itself where it holds the pairs
    (:func:`pack_weight_pairs_array`)."""
    channels, _, kh, kw = w.shape
    if packed_weight is not None and tuple(packed_weight.shape) == weight_pairs_shape(
            w.shape):
        return packed_weight

    def element(c, i, j, k):
        rx = te.minimum(2 * j + k, kw - 1)
        value = te.cast(CENTERED, w[c, 0, i, rx]) if packed_weight is None \
            else packed_weight[c, i, rx, 0]
        return te.if_then_else(2 * j + k < kw, value, te.const(0, CENTERED))

    return te.compute((channels, kh, -(-kw // 2), 2), element, name="int8_weight_pairs",
                      dtype=CENTERED)


def _paired_sums(x, w, x_zero, pads, strides, dilations, out_size, tiles, cpu, name,
                 packed_weight):
    """The sums of :func:`int8_depthwise_conv` with taps in column pairs
    (:func:`pairs_apply`), numbered as the dense convolution's over row blocks:
    ``(sums, blocks, positions per output row)``."""
    n, channels, _, width = x.shape
    _, _, kh, kw = w.shape
    (sy, _), (dy, _), (oh, ow) = strides, dilations, out_size
    row_length = -(-(width + pads[1] + pads[3]) // 2) * 2  # whole pairs per row
    half = row_length // 2  # output positions per row: one per pair of columns
    blocks = row_blocks(oh, half, ow, tiles.lanes, tiles.channels, cpu)
    span = blocks.rows * half
    phases = min(sy, (kh - 1) * dy + 1)
    last = 2 * ((oh // blocks.rows - 1) * span + blocks.extent) - 1 \
        + (kh - 1) * dy // sy * row_length + 2 * (-(-kw // 2) - 1) + 1
    data = pack_centered_row_phases(x, x_zero, pads, sy, phases, row_length,
                                    -(-(last + 1) // row_length))
    weight = _paired_weight(w, packed_weight)
    ry = te.reduce_axis(kh, "ry")
    rx = te.reduce_axis(-(-kw // 2), "rx")
    pair = te.reduce_axis(2, "pair")

    def body(b, c, y, column):
        position = 2 * (y * span + column) + ry * dy // sy * row_length + 2 * rx + pair
        return te.sum(te.cast("int32", data[b, c, ry * dy % sy, position])
                      * te.cast("int32", weight[c, ry, rx, pair]), axis=[ry, rx, pair])

    sums = te.compute((n, channels, oh // blocks.rows, blocks.extent), body,
                      name=f"{name}_depthwise", dtype="int32",
                      attrs={"int8_depthwise": tiles, "int8_rows": blocks,
                             "int8_pairs": True})
    return sums, blocks, half


def weight_lanes_shape(w_shape, cpu: CPUDescription) -> tuple[int, ...]:
    """The shape of a depthwise weight of ``w_shape`` (``[C, 1, KH, KW]``) in vectors
    of int16 lanes (:func:`pack_weight_lanes_array`) on ``cpu``."""
    channels, _, kh, kw = w_shape
    return (channels, kh, kw, int8_depthwise_tiles(channels, cpu).lanes)


#: the packing codes (:func:`depthwise_weight_packing`) of the weight quads and pairs,
#: and of a whole-image window's flat weight
WEIGHT_QUADS = "depthwise_quads"
WEIGHT_PAIRS = "depthwise_pairs"
WEIGHT_PLANE = "depthwise_plane"
#: the weight quads widened to int16 (the window kernel on x86 without VNNI)
WEIGHT_WIDENED_QUADS = "depthwise_quads_int16"
#: every named packing code of a depthwise weight (the int16 vectors' is ``-lanes``)
DEPTHWISE_PACKINGS = frozenset({WEIGHT_QUADS, WEIGHT_PAIRS, WEIGHT_PLANE,
                                WEIGHT_WIDENED_QUADS})


def depthwise_weight_packing(w_shape, attrs, cpu: CPUDescription, x_shape=None
                             ) -> tuple[tuple[int, ...], str, int | str]:
    """``(shape, dtype, packing)`` of a constant depthwise weight of ``w_shape`` packed
    when the kernel of a convolution with ``attrs`` (of data ``x_shape``, where known)
    is built on ``cpu``, as its kernel reads it: flat where its window is the whole
    image (:func:`.int8_depthwise_plane.plane_applies`: :data:`WEIGHT_PLANE`), the
    weight quads where the window kernel takes it
    (:func:`.int8_depthwise_quads.quads_apply`: packing :data:`WEIGHT_QUADS`), the pairs
    of taps where the column pairs do (:func:`pairs_apply`: :data:`WEIGHT_PAIRS`), else
    its int16 vectors (packing ``-lanes``); :func:`pack_depthwise_weight_array` applies
    the packing."""
    strides = tuple(attrs.get("strides") or (1, 1))  # ONNX's defaults, where unset
    dilations = tuple(attrs.get("dilations") or (1, 1))
    if plane_applies(x_shape, w_shape, attrs, cpu):
        return weight_plane_shape(w_shape, cpu), "int8", WEIGHT_PLANE
    if quads_apply(strides, dilations, cpu):
        dtype = weight_dtype(cpu)
        return weight_quads_shape(w_shape), dtype, \
            WEIGHT_QUADS if dtype == "int8" else WEIGHT_WIDENED_QUADS
    if pairs_apply(strides, dilations, cpu, _padded_row(x_shape, w_shape, attrs)):
        return weight_pairs_shape(w_shape), CENTERED, WEIGHT_PAIRS
    shape = weight_lanes_shape(w_shape, cpu)
    return shape, CENTERED, -shape[-1]


def _padded_row(x_shape, w_shape, attrs) -> tuple[int, int, int] | None:
    """The image's width and its left and right padding (:func:`pairs_apply`'s ``row``)
    of a convolution of data ``x_shape`` (None where unknown)."""
    if x_shape is None:
        return None
    pads = conv_geometry(x_shape, w_shape, attrs)[3]
    return int(x_shape[3]), int(pads[1]), int(pads[3])


def pack_depthwise_weight_array(w: np.ndarray, packing: int | str,
                                lanes: int | None = None) -> np.ndarray:
    """``w`` packed as :func:`depthwise_weight_packing` said (``packing``; ``lanes``, the
    CPU's int32 lanes, for :data:`WEIGHT_PLANE`)."""
    if packing == WEIGHT_PLANE:
        return pack_weight_plane_array(w, lanes)
    if packing in (WEIGHT_QUADS, WEIGHT_WIDENED_QUADS):
        return pack_weight_quads_array(w, "int8" if packing == WEIGHT_QUADS else "int16")
    if packing == WEIGHT_PAIRS:
        return pack_weight_pairs_array(w)
    return pack_weight_lanes_array(w, -int(packing))


def weight_pairs_shape(w_shape) -> tuple[int, ...]:
    """The shape of the weight's pairs of taps (:func:`_paired_weight`) of a depthwise
    weight of ``w_shape`` (``[C, 1, KH, KW]``)."""
    channels, _, kh, kw = w_shape
    return (channels, kh, -(-kw // 2), 2)


def pack_weight_pairs_array(w: np.ndarray) -> np.ndarray:
    """NumPy's copy of :func:`_paired_weight` of a constant depthwise weight ``w``, what
    it is packed into once, when its kernel is built, rather than on every call."""
    pairs = np.zeros(weight_pairs_shape(w.shape), np.int16)
    pairs.reshape(*pairs.shape[:2], -1)[:, :, :w.shape[3]] = w[:, 0]
    return pairs


def pack_weight_lanes_array(w: np.ndarray, lanes: int) -> np.ndarray:
    """NumPy's copy of the weight's int16 vectors that :func:`int8_depthwise_conv`
    reads (each tap's weight repeated over ``lanes``), what a constant weight is packed
    into once, when its kernel is built, rather than on every call."""
    channels, _, kh, kw = w.shape
    return np.ascontiguousarray(np.broadcast_to(
        w[:, 0, :, :, None].astype(np.int16), (channels, kh, kw, lanes)))


def int8_depthwise_conv(x: te.Tensor, w: te.Tensor, x_zero: te.Tensor | None, attrs,
                        cpu: CPUDescription, name: str = "conv_integer",
                        packed_weight: te.Tensor | None = None) -> te.Tensor:
    """int32 ``sum((x - x_zero) * w)`` of a depthwise NCHW convolution (group = C = O,
    weights ``[C, 1, KH, KW]`` int8) of 8-bit ``x``: the sums (an anchor carrying
    ``int8_depthwise``, its tiles) cropped to the output (``int8_conv_result``).
    ``packed_weight``: a tensor holding :func:`pack_weight_lanes_array` of ``w`` (a
    constant packed when the kernel is built), read instead of repeating ``w`` into
    vectors on every call; the weight quads where the window kernel takes the
    convolution: :func:`depthwise_weight_packing`)."""
    channels = x.shape[1]
    if (x.dtype not in ("int8", "uint8") or w.dtype != "int8" or x.ndim != 4 or w.ndim != 4
            or w.shape[0] != channels or w.shape[1] != 1
            or int(attrs.get("group", 1)) != channels):
        raise CompileError(f"{name}: the integer depthwise convolution takes 8-bit NCHW "
                           f"data and int8 [C, 1, KH, KW] weights with group C, not "
                           f"{x.dtype}{list(x.shape)} and {w.dtype}{list(w.shape)}")
    n = x.shape[0]
    _, _, kh, kw = w.shape
    _, (sy, sx), (dy, dx), pads, (oh, ow) = checked_geometry(name, x, w, attrs)
    tiles = int8_depthwise_tiles(channels, cpu)
    lanes = tiles.lanes
    flat = (sy, sx) == (1, 1)
    if packed_weight is not None:
        shape, dtype, _ = depthwise_weight_packing(w.shape, attrs, cpu, x.shape)
        if (tuple(packed_weight.shape), packed_weight.dtype) != (shape, dtype):
            raise CompileError(f"{name}: the packed depthwise weight is {packed_weight.dtype}"
                               f"{list(packed_weight.shape)}, not {dtype}{list(shape)} "
                               "(depthwise_weight_packing)")
    if plane_applies(x.shape, w.shape, attrs, cpu):
        return plane_depthwise_conv(x, w, x_zero, tiles, cpu, name, packed_weight)
    if quads_apply((sy, sx), (dy, dx), cpu):
        return quad_depthwise_conv(x, w, x_zero, ((sy, sx), (dy, dx), pads, (oh, ow)), tiles,
                                   cpu, name, packed_weight)
    if pairs_apply((sy, sx), (dy, dx), cpu, (int(x.shape[3]), pads[1], pads[3])):
        sums, blocks, half = _paired_sums(x, w, x_zero, pads, (sy, sx), (dy, dx), (oh, ow),
                                          tiles, cpu, name, packed_weight)

        def paired(b, c, y, column):
            return sums[(b, c, *block_of_rows(blocks, half, y, column))]

        return te.compute((n, channels, oh, ow), paired, name=name, dtype="int32",
                          attrs={"int8_conv_result": True})
    ry, rx = te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx")
    if flat:
        # output pixels numbered over the padded width in blocks of rows, as the dense
        # convolution's (:func:`.int8_conv.row_blocks`)
        stride_row = x.shape[3] + pads[1] + pads[3]
        blocks = row_blocks(oh, stride_row, ow, lanes, tiles.channels, cpu)
        span = blocks.rows * stride_row
        reach = (oh // blocks.rows - 1) * span + blocks.extent \
            + (kh - 1) * dy * stride_row + (kw - 1) * dx
        data = pack_centered_rows(x, x_zero, pads, -(-reach // stride_row))
        shape = (n, channels, oh // blocks.rows, blocks.extent)

        def read(b, c, y, column):
            # the padded image's pixels row after row: the flattened address of
            # (p // width, p % width) is p itself, a contiguous run per vector
            position = y * span + column + ry * dy * stride_row + rx * dx
            return data[b, c, position // stride_row, position % stride_row]
    elif masked_byte_loads(cpu):
        columns = -(-ow // lanes) * lanes
        blocks = RowBlocks(1, columns)
        reach = (columns - 1) * sx + (kw - 1) * dx + 1
        data = pack_centered_phases(x, x_zero, pads, sx, -(-reach // sx))
        shape = (n, channels, oh, columns)

        def read(b, c, y, column):
            offset = rx * dx
            return data[b, c, y * sy + ry * dy, offset % sx, column + offset // sx]
    else:
        data = pack_int8_data(x, x_zero, (sy, sx), pads, ow, kw, dx, lanes, CENTERED,
                              group=1, centered=True)
        shape = (n, channels, oh, -(-ow // lanes) * lanes)
        blocks = RowBlocks(1, shape[3])

        def read(b, c, y, column):
            offset = rx * dx
            return data[b, c, y * sy + ry * dy, offset % sx, column + offset // sx, 0]

    # each tap's weight as a vector of int16 lanes (the product's operand as it is in
    # memory: no byte load and broadcast per tap and channel in the inner loop)
    if packed_weight is None:
        weight = te.compute((channels, kh, kw, lanes), lambda c, i, j, lane: te.cast(
            CENTERED, w[c, 0, i, j]), name="int8_weight_lanes", dtype=CENTERED)
    else:
        weight = packed_weight
    sums = te.compute(shape, lambda b, c, y, column: te.sum(
        # a 16-bit product: |x - zero| <= 255 times |w| <= 128 fits, so one 16-bit
        # multiply per tap (a full vector of int16 lanes) before widening to the sum
        te.cast("int32", read(b, c, y, column) * weight[c, ry, rx, column % lanes]),
        axis=[ry, rx]), name=f"{name}_depthwise", dtype="int32",
        attrs={"int8_depthwise": tiles, "int8_rows": blocks})

    def result(b, c, y, column):
        return sums[(b, c, *block_of_rows(blocks, stride_row if flat else 0, y, column))]

    return te.compute((n, channels, oh, ow), result, name=name, dtype="int32",
                      attrs={"int8_conv_result": True})


def schedule_int8_depthwise(schedule: te.Schedule, sums: te.Tensor,
                            cpu: CPUDescription) -> None:
    """The sums of :func:`int8_depthwise_conv`: a tile of channels by one vector of
    pixels accumulating in registers over the taps, computed block by block inside the
    finishing stage's parallel loop (:func:`.int8_conv.schedule_int8_conv_result`); the
    packing of the data and the weight's int16 vectors at root, in parallel (with
    stride 1 a padded copy, its rows vectorized)."""
    if sums.op.attrs.get(INT8_PLANE):
        schedule_plane_depthwise(schedule, sums, cpu)
        return
    if sums.op.attrs.get("int8_quads"):
        schedule_quad_depthwise(schedule, sums, cpu)
        return
    tiles: Int8DepthwiseTiles = sums.op.attrs["int8_depthwise"]
    data = depthwise_data(sums)
    weight = depthwise_weight(sums)
    if isinstance(weight.op, te.ComputeOp):  # else a constant packed at build time
        schedule_rows(schedule, weight, cpu, serial_axes=2)
    if sums.op.attrs.get("int8_pairs"):
        _schedule_paired(schedule, sums, data, tiles, cpu)
        return
    if data.ndim == 6:  # pack_int8_data: a scalar copy
        pack_in_parallel(schedule, data)
    else:  # pack_centered_rows (stride 1) or pack_centered_phases: rows of a channel serial
        image = data.op.attrs.get(IMAGE_COLUMNS)
        lanes = None if image is None else copy_lanes(int(data.shape[-1]), *image,
                                                      data.dtype, cpu)
        schedule_rows(schedule, data, cpu, serial_axes=data.ndim - 3, lanes=lanes)
    local = register_tiles(schedule, sums, tiles.channels, tiles.lanes, parallel=False)
    lb, lc, ly, lx = schedule[local].op.axis
    ry, rx = schedule[local].op.reduce_axis
    schedule[local].reorder(lb, ly, ry, rx, lc, lx)
    schedule[local].unroll(lc)
    schedule[local].vectorize(lx)


def _schedule_paired(schedule: te.Schedule, sums: te.Tensor, data: te.Tensor,
                     tiles: Int8DepthwiseTiles, cpu: CPUDescription) -> None:
    """:func:`schedule_int8_depthwise` for taps in column pairs: the row-phase copy
    row by row (its columns vectorized), channels in parallel; the sums' tile of
    channels one pair product per tap pair and vector."""
    schedule_phase_rows(schedule, data, cpu)
    tensorized_channel_tiles(schedule, sums, tiles.channels, tiles.lanes,
                             dot2_intrinsic(tiles.lanes))


def depthwise_data(sums: te.Tensor) -> te.Tensor:
    """The packed data the sums of :func:`int8_depthwise_conv` read."""
    return reads_of(sums.op.body)[0]


def depthwise_weight(sums: te.Tensor) -> te.Tensor:
    """The weight (in vectors of int16 lanes, or in pairs of taps) that the sums of
    :func:`int8_depthwise_conv` read."""
    return reads_of(sums.op.body)[1]
