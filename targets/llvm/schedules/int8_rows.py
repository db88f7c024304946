"""Integer products of matrix rows by a constant weight on the CPU's 8-bit dot product.

:mod:`..int8_matmul` makes a ``MatMulInteger`` of ``[M, K]`` rows by an int8 ``[K, N]``
weight a ``ConvInteger`` of ``M`` one-pixel images by ``[N, K, 1, 1]``. Each image is
one row; :mod:`.int8_conv`'s vectors of pixels would compute 16 positions for its one
pixel, and its channel lanes a tile of one pixel, reloading the weight vectors for each
(a transformer's 197x768 by 768x3072 ran at 0.3x the float product's speed). Here the
output channels are the lanes and a register tile holds ``rows`` images (rows) by
``vectors`` vectors of channels, every row's four bytes broadcast once per step of the
reduction to the tile's weight vectors, loaded once for all its rows::

    for each tile of `vectors * lanes` output channels, in parallel with the others:
      for each tile of `rows` rows:
        acc[rows][vectors] = 0                          # registers
        for each group g of four input channels:
          w[v] = weight vectors of group g              # `vectors` loads
          for r in rows: b = broadcast 4 bytes of row r at g
            for v in vectors: acc[r][v] += dot4(b, w[v])  # one instruction each
        finish acc (bias, requantization) and store row by row

The rows need no packing but a copy (the sign flipped where the instruction wants
unsigned bytes, rows past ``M`` to a whole tile); the sums ``[rows', N/lanes, lanes]``
are the output's own layout, so the finishing stage reads and writes whole vectors.
"""

from __future__ import annotations

from dataclasses import dataclass

from heterocc.sdk import te
from heterocc.sdk.graph import conv_geometry
from heterocc.te.schedule_reads import reads_of

from ..cpu import CPUDescription
from ..int8_dot import GROUP
from .common import vector_lanes
from .int8_conv import (
    ChannelVectorTiles,
    _flip,
    _packed_element,
    _weight_sums,
    _zero,
    accumulators_in_flight,
    channel_lane_widths,
    check_packed_weight,
    data_dtype,
    dot4_channels_intrinsic,
    finishing_stage,
    int8_conv_inputs,
    lane_weight,
    pack_in_parallel,
    pack_int8_weight_lanes,
    packed_weight_dtype,
    tile_register_reserve,
)


@dataclass(frozen=True)
class Int8RowTiles(ChannelVectorTiles):
    """``lanes`` output channels per int32 vector, a register tile of ``rows`` rows (one-
    pixel images) by ``vectors`` vectors of channels (``rows * vectors`` accumulators)."""

    rows: int

    @property
    def pixels(self) -> int:
        """Broadcast operands per tile, as :class:`.int8_conv.Int8ChannelTiles` counts
        them (:func:`.int8_conv.packed_weight_dtype` widens a weight reused that often)."""
        return self.rows


#: the most rows one :class:`Int8RowTiles` register tile holds
MAX_TILE_ROWS = 8
#: the most vectors of channels one :class:`Int8RowTiles` register tile holds
MAX_TILE_VECTORS = 4


def row_products(x_shape, w_shape, attrs) -> bool:
    """Whether a convolution of data ``x_shape`` by weights ``w_shape`` is a product of
    rows: more than one one-pixel image by a dense 1x1 kernel without padding."""
    if int(attrs.get("group", 1)) != 1 or len(x_shape) != 4 or len(w_shape) != 4:
        return False
    _, _, _, pads, (oh, ow) = conv_geometry(x_shape, w_shape, attrs)
    return (x_shape[0] > 1 and tuple(x_shape[2:]) == (1, 1) and tuple(w_shape[2:]) == (1, 1)
            and (oh, ow) == (1, 1) and not any(pads))


def row_tiles(x_shape, w_shape, attrs, cpu: CPUDescription) -> Int8RowTiles | None:
    """The tile of :class:`Int8RowTiles` for a product of rows (:func:`row_products`) on
    ``cpu``, or None where it is none or its output channels fill no vector: the widest
    lanes dividing the channels (:func:`.int8_conv.channel_lane_widths`), and among the
    tiles whose accumulators, weight vectors and one broadcast fit the vector registers
    (less :func:`.int8_conv.tile_register_reserve`), the one that computes fewest rows
    (the rows rounded up to whole tiles) at the slower of its loads' pace and its
    accumulators' (:func:`.int8_conv.accumulators_in_flight`), then the fewest loads per
    dot product: 197 rows (ViT's tokens), AVX-512 VNNI: 6 rows by 4 vectors (198 rows,
    0.42 loads a dot product)."""
    if not row_products(x_shape, w_shape, attrs):
        return None
    m, filters = x_shape[0], w_shape[0]
    lanes = next((width for width in channel_lane_widths(cpu, True) if filters % width == 0),
                 None)
    if lanes is None:
        return None
    budget = cpu.vector_registers - tile_register_reserve(cpu)
    loads_budget = cpu.dot_load_budget or 1.0
    in_flight = accumulators_in_flight(cpu)
    best = None
    for vectors in range(1, MAX_TILE_VECTORS + 1):
        if filters // lanes % vectors:
            continue
        for rows in range(1, MAX_TILE_ROWS + 1):
            if rows * vectors + vectors + 1 > budget:
                break
            loads = (rows + vectors) / (rows * vectors)
            pace = max(1.0, loads / loads_budget, in_flight / (rows * vectors))
            cost = (-(-m // rows) * rows * pace, loads)
            if best is None or cost < best[0]:
                best = (cost, Int8RowTiles(lanes, vectors, rows))
    return None if best is None else best[1]


def int8_rows_conv(x: te.Tensor, w: te.Tensor, x_zero: te.Tensor | None,
                   cpu: CPUDescription, name: str, packed_weight: te.Tensor | None,
                   tiles: Int8RowTiles) -> te.Tensor:
    """:func:`.int8_conv.int8_conv` of a product of rows (:func:`row_products`): the
    rows copied as ``[rows', C/4, 4]`` bytes of the dot product's type (``rows'``: whole
    tiles, the last row repeated past ``M``), the sums ``[rows', O/lanes, lanes]``
    (an anchor carrying ``int8_conv``, its :class:`Int8RowTiles`) less each channel's
    zero-point bias, ``[M, O, 1, 1]``."""
    m, channels = x.shape[:2]
    filters = w.shape[0]
    dtype = data_dtype(cpu)
    groups = -(-channels // GROUP)
    padded = -(-m // tiles.rows) * tiles.rows
    element = _packed_element(x, x_zero, dtype, GROUP, centered=False)
    data = te.compute((padded, groups, GROUP),
                      lambda b, group, inner: element(te.minimum(b, m - 1), group, inner,
                                                      te.const(0, "int32"),
                                                      te.const(0, "int32")),
                      name="int8_rows_data", dtype=dtype)
    lanes = tiles.lanes
    packed_dtype = packed_weight_dtype(cpu, tiles)
    check_packed_weight(name, packed_weight, w.shape, lanes, packed_dtype)
    packed_w = pack_int8_weight_lanes(w, lanes, packed_dtype) \
        if packed_weight is None else packed_weight
    rg = te.reduce_axis(groups, "rg")
    ri = te.reduce_axis(GROUP, "ri")
    sums = te.compute(
        (padded, filters // lanes, lanes),
        lambda b, ko, lane: te.sum(
            te.cast("int32", data[b, rg, ri])
            * te.cast("int32", lane_weight(packed_w, (ko, rg, 0, 0), lane, ri)),
            axis=[rg, ri]),
        name=f"{name}_dot", dtype="int32", attrs={"int8_conv": tiles})
    weight_sum = _weight_sums(packed_w, packed_weight is not None, filters, name)
    offset = _zero(x_zero) + _flip(x.dtype, dtype)
    # sum((x - z) * w) = sum(stored * w) - (z + flip) * sum(w): zero_point_bias
    return te.compute((m, filters, 1, 1),
                      lambda b, k, y, column: sums[b, k // lanes, k % lanes]
                      - offset * weight_sum(k),
                      name=name, dtype="int32", attrs={"int8_conv_result": True})


def schedule_int8_rows(schedule: te.Schedule, sums: te.Tensor, cpu: CPUDescription) -> None:
    """The sums of :func:`int8_rows_conv`: a register tile of rows by vectors of
    channels accumulating over the channel groups, each row's four bytes broadcast once
    a group for the tile's weight vectors (loaded once for all its rows); one dot-product
    instruction per vector. The copy of the rows runs at root, rows in parallel, each
    row's bytes in vectors; the sums are computed inside the finishing stage's loop
    (:func:`schedule_int8_rows_result`)."""
    tiles: Int8RowTiles = sums.op.attrs["int8_conv"]
    data, packed_w = int8_conv_inputs(sums)
    copy = schedule[data]
    row, group, inner = copy.op.axis
    _, within = copy.split(copy.fuse(group, inner), vector_lanes(data.dtype, cpu))
    copy.vectorize(within)
    copy.parallel(row)
    if isinstance(packed_w.op, te.ComputeOp):  # else a constant packed at build time
        pack_in_parallel(schedule, packed_w)
    local = schedule.cache_write(sums, "local")
    row, ko, lane = schedule[sums].op.axis
    ro, ri = schedule[sums].split(row, tiles.rows)
    koo, koi = schedule[sums].split(ko, tiles.vectors)
    schedule[sums].reorder(koo, ro, ri, koi, lane)
    schedule[sums].vectorize(lane)
    schedule[local].compute_at(schedule[sums], ro)
    lrow, lko, llane = schedule[local].op.axis
    rg, rgi = schedule[local].op.reduce_axis
    schedule[local].reorder(rg, lrow, lko, llane, rgi)
    schedule[local].unroll(lrow)
    schedule[local].unroll(lko)
    schedule[local].tensorize(llane, dot4_channels_intrinsic(tiles.lanes, data.dtype,
                                                             packed_w.dtype),
                              vectorize_init=True)


def row_sums(result: te.Tensor) -> te.Tensor | None:
    """The sums of :func:`int8_rows_conv` that ``result`` (its ``int8_conv_result``)
    reads, else None."""
    return next((t for t in reads_of(result.op.body) if isinstance(t.op, te.ComputeOp)
                 and isinstance(t.op.attrs.get("int8_conv"), Int8RowTiles)), None)


def schedule_int8_rows_result(schedule: te.Schedule, result: te.Tensor,
                              epilogue: te.Tensor | None, cpu: CPUDescription) -> None:
    """The zero-point-corrected sums of :func:`int8_rows_conv`, finished by the
    function's elementwise ``epilogue`` when it has one: a task per tile of channels and
    tile of rows (the channel tiles outermost, so that a thread's tasks share their
    weight vectors), in it the tile's sums (:func:`schedule_int8_rows`), then each row's
    channels finished a vector at a time."""
    stage = finishing_stage(schedule, result, epilogue)
    n, k, y, x = stage.op.axis
    sums = row_sums(result)
    tiles: Int8RowTiles = sums.op.attrs["int8_conv"]
    no, ni = stage.split(n, tiles.rows)
    ko, ki = stage.split(k, tiles.channels)
    kv, lane = stage.split(ki, tiles.lanes)
    stage.reorder(ko, no, y, x, ni, kv, lane)
    stage.vectorize(lane)
    task = stage.fuse(ko, no)
    stage.parallel(task)
    schedule[sums].compute_at(stage, task)
