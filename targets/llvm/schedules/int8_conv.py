"""Integer convolutions on the CPU's 8-bit dot product (``ConvInteger``, and what
``realize_qdq`` makes of QDQ and QOperator convolutions).

The int32 sums are computed as the dot-product instruction wants them
(:mod:`heterocc.targets.llvm.int8_dot`): each instruction adds, to every int32 lane, four
byte products. Here a lane is an output pixel of a row and the four bytes are four input
channels, so that

* the data is packed as ``[n, C/4, row phases, column phases, positions, 4]`` bytes:
  the padded image split by the stride's phases (one with stride 1), each phase's
  pixels numbered row after row, so that a vector of output pixels, at any tap, reads
  one contiguous run of ``4 * lanes`` bytes of one phase and runs on across rows (a
  7x7 image fills whole vectors; the columns past the output's width are computed and
  dropped);
* the weight of an output channel at one tap is four bytes broadcast to every lane;
* the output stays NCHW (a vector of pixels of one channel's row), so the bias and the
  ``Requantize`` after it need no layout change.

Where the output's rows fill vectors of pixels badly (a 7x7 output: 49 pixels in 64
positions; 61 with a 3x3 kernel's padding columns), the output channels are the lanes
instead (:class:`Int8ChannelTiles`, :func:`channel_lanes_tiles`): the same packed data,
each output pixel's four bytes broadcast to a vector of output channels' weights
(packed ``[O/lanes, C/4, KH, KW, lanes, 4]``), only the output's pixels computed, the
sums ``[n, O/lanes, oh, ow, lanes]`` read strided by the finishing stage.

x86's ``vpdpbusd`` multiplies unsigned data by signed weights: there the int8 data is
stored plus 128 (a flip of the sign bit) and the sum corrected by
``zero_point_bias(w, x_zero + 128)`` (:func:`heterocc.ops.qnn.zero_point_bias`'s
identity, computed here as a per-channel sum of the weights). AArch64's ``sdot`` takes
int8 data as it is (correction ``zero_point_bias(w, x_zero)``). Padding holds the zero
point (a centered zero) and padded input channels have zero weights, so neither changes
a sum. The tiles come from the CPU description: lanes of one int32 vector, output
channels per tile from its vector registers.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from heterocc.sdk import CompileError, te
from heterocc.sdk.graph import conv_geometry
from heterocc.te.intrin import BufferRegion, TensorIntrin
from heterocc.te.schedule_reads import reads_of
from heterocc.tir import expr as tx
from heterocc.tir.stmt import BufferStore

from ..cpu import CPUDescription, masked_vector_loads
from ..int8_dot import DOT4_CALL, GROUP, INTERLEAVE_CALL, dot4_instruction
from .common import TASKS_PER_CORE, vector_lanes
from .int8_matrix import (
    CHANNEL_BLOCK,
    GROUPS_PER_BLOCK,
    Int8MatrixTiles,
    matrix_conv,
    matrix_tiles,
    matrix_weight_shape,
    pack_int8_weight_blocks,
    schedule_int8_matrix,
    tile_product_intrinsic,
)


def data_dtype(cpu: CPUDescription) -> str:
    """The byte type the dot product reads data as on ``cpu``: int8 where it has a
    signed x signed instruction (AArch64 ``sdot``), else uint8 (x86 ``vpdpbusd``, and the
    widened paths, which take either)."""
    description = cpu
    return "int8" if description.arch == "aarch64" and "dotprod" in description.features \
        else "uint8"


#: the packing code (``_prepack_int8_conv_weights``, ``_packed_constants`` of the llvm
#: target) of a constant weight :func:`pack_int8_weight_array` packs as int16
#: (:func:`weight_dtype`); an int8 one's code is 0
WIDENED_WEIGHT_PACKING = "int8_conv_int16"


def pixel_dot_instruction(cpu: CPUDescription) -> str:
    """The dot-product instruction (:func:`.int8_dot.dot4_instruction`) of a dense
    convolution whose data vectors are pixels: at the register's width, on the byte type
    :func:`data_dtype` reads data as, by int8 weights."""
    lanes = cpu.vector_lanes("int32")
    return dot4_instruction(cpu.features, cpu.arch, lanes, data_dtype(cpu) == "uint8", False)


def weight_dtype(cpu: CPUDescription) -> str:
    """The type :func:`pack_int8_weight` stores a convolution's weights in where its
    data vectors are pixels: int16 on the CPUs whose byte product would be the split
    ``vpmaddubsw`` (x86 without VNNI), where two ``pmaddwd`` a group of four weights,
    widened once when packed, replace its four multiplies
    (:meth:`.int8_dot.Dot4Emitter.emit_widened_weight`; kernels in 0.72-0.86x the
    split form's time on AVX2, 0.68-0.99x on AVX-512BW, ``benchmarks/int8_pmaddubsw.py``
    on Zen 4). The kernels whose lanes are output channels decide at their own width
    (:func:`packed_weight_dtype`); the other CPUs keep int8 weights."""
    return "int16" if pixel_dot_instruction(cpu) == "pmaddubsw" else "int8"


def packed_weight_dtype(cpu: CPUDescription, tiles: Int8ChannelTiles | None = None) -> str:
    """The type of :func:`pack_int8_weight_array`'s weight for a convolution on ``cpu``
    whose lanes are pixels (``tiles`` None) or output channels (``tiles``, its
    :class:`Int8ChannelTiles`): :func:`weight_dtype`, int16 where the byte product at
    the register's width would be the split ``vpmaddubsw``; for vectors of channels,
    where it would be at their width (a narrow vector may have VNNI where a register
    has not: AVX-VNNI beside AVX-512BW), and only where a tile reuses each weight for
    :data:`MIN_CHANNEL_PIXELS` pixels or more. Both kernels multiply widened weights by
    two ``pmaddwd`` a group. A one-pixel output reads each weight once, so doubling its
    bytes costs more than the multiplies save: MobileNetV2's classifier (1280 -> 1000
    on a pooled image) took 0.075 ms widened against 0.057 (Haswell code, Zen 5), its
    7x7 layers 0.86-0.91x their split form's time."""
    if tiles is None:
        return weight_dtype(cpu)
    kind = dot4_instruction(cpu.features, cpu.arch, tiles.lanes, data_dtype(cpu) == "uint8",
                            False)
    return "int16" if kind == "pmaddubsw" and tiles.pixels >= MIN_CHANNEL_PIXELS else "int8"


def store_dot4(output: BufferRegion, a, b, counts: tuple[int, ...], lanes: int
               ) -> BufferStore:
    """The body of a dot-product intrinsic: ``output``'s ``lanes`` int32 accumulators
    plus one :data:`DOT4_CALL` of ``a`` and ``b`` (scalar loads of the operands' first
    elements), ``counts`` its byte counts (and window stride and dilation), stored back."""
    bases = list(output.bases)
    bases[-1] = tx.Ramp(bases[-1], tx.IntImm(1), lanes)
    total = tx.Call(DOT4_CALL, (output.load(0), a, b, *(tx.IntImm(c) for c in counts)),
                    tx.with_lanes("int32", lanes))
    return BufferStore(output.buffer, total, tuple(bases))


def dot4_intrinsic(lanes: int, dtype: str, weight_type: str = "int8") -> TensorIntrin:
    """``acc[l] += sum_r data[l, r] * w[r]`` over ``lanes`` pixels and four channels
    (``dtype`` data, ``weight_type`` weights: int8, or int8 values widened to int16,
    :func:`weight_dtype`): one :data:`DOT4_CALL`."""
    data = te.placeholder((lanes, GROUP), dtype, "data")
    weight = te.placeholder((GROUP,), weight_type, "weight")
    r = te.reduce_axis(GROUP, "r")
    acc = te.compute((lanes,), lambda lane: te.sum(
        te.cast("int32", data[lane, r]) * te.cast("int32", weight[r]), axis=r), name="acc")

    def implement(inputs: list[BufferRegion], output: BufferRegion):
        data_region, weight_region = inputs
        return store_dot4(output, data_region.load(0, 0), weight_region.load(0),
                          (GROUP * lanes, GROUP), lanes)

    return TensorIntrin(f"cpu_dot4_{dtype}_{weight_type}_{lanes}", acc, implement,
                        {"lanes": lanes})


def dot4_channels_intrinsic(lanes: int, dtype: str, weight_type: str = "int8"
                            ) -> TensorIntrin:
    """``acc[l] += sum_r data[r] * w[l, r]`` over ``lanes`` output channels and four
    input channels (``dtype`` data): one :data:`DOT4_CALL`, the data's four bytes
    broadcast to every lane, the weights a vector of ``4 * lanes`` int8, or of int16
    widened when packed, each lane's pairs of input channels in two halves
    (:func:`lane_weight`)."""
    data = te.placeholder((GROUP,), dtype, "data")
    shape = (lanes, GROUP) if weight_type == "int8" else (2, lanes, 2)
    weight = te.placeholder(shape, weight_type, "weight")
    r = te.reduce_axis(GROUP, "r")
    acc = te.compute((lanes,), lambda lane: te.sum(
        te.cast("int32", data[r]) * te.cast("int32", lane_weight(weight, (), lane, r)),
        axis=r), name="acc")

    def implement(inputs: list[BufferRegion], output: BufferRegion):
        data_region, weight_region = inputs
        return store_dot4(output, data_region.load(0), weight_region.load(*([0] * len(shape))),
                          (GROUP, GROUP * lanes), lanes)

    return TensorIntrin(f"cpu_dot4_channels_{dtype}_{weight_type}_{lanes}", acc, implement,
                        {"lanes": lanes})


def lane_weight(packed_w: te.Tensor, outer: tuple, lane, channel) -> te.Expr:
    """The weight of input ``channel`` (of a group of four) for output channel ``lane``
    of a vector of channels, in a weight packed by :func:`pack_int8_weight_lanes` whose
    leading indices are ``outer``: ``[..., lanes, 4]`` int8, or ``[..., 2, lanes, 2]``
    int16 (widened where the dot product would be the split ``vpmaddubsw``: each lane's
    input channels 0, 1 in the first half, 2, 3 in the second, so that each half is
    one ``pmaddwd`` operand, :meth:`.int8_dot.Dot4Emitter.emit_widened_lanes`)."""
    if packed_w.dtype == "int8":
        return packed_w[(*outer, lane, channel)]
    return packed_w[(*outer, channel // 2, lane, channel % 2)]


@dataclass(frozen=True)
class Int8ConvTiles:
    """``lanes`` output pixels per vector, ``channels`` output channels per register
    tile and ``vectors`` vectors of pixels per channel (``channels * vectors``
    accumulator vectors live at once): each broadcast weight multiplies ``vectors``
    data vectors and each data vector ``channels`` weights."""

    lanes: int
    channels: int
    vectors: int = 1


def int8_conv_tiles(filters: int, cpu: CPUDescription) -> Int8ConvTiles:
    """Tiles from the CPU description: one int32 vector of pixels; as many output
    channels as half the vector registers hold (the other half for the data vector, the
    broadcast weights and the widened paths' temporaries), dividing ``filters``."""
    description = cpu
    lanes = description.vector_lanes("int32")
    channels = max(description.vector_registers // 2, 1)
    while filters % channels:
        channels -= 1
    return Int8ConvTiles(lanes, channels)


#: the most vectors of pixels one register tile of :class:`Int8ConvTiles` holds
MAX_TILE_VECTORS = 4


#: vector registers a register tile leaves to the widened dot products' temporaries
#: (:func:`tile_register_reserve`)
WIDENED_TEMPORARIES = 4
#: accumulators a register tile needs for its dot products not to wait on each other:
#: the instruction's latency (4-5 cycles on the VNNI cores: Intel since Ice Lake, AMD
#: since Zen 4) times the instructions a core starts a cycle (two); a tile of fewer
#: runs at that share of the peak (:func:`tile_pace`). ``benchmarks/int8_tile_loads.py``
#: times them: with AVX-VNNI's 256-bit ``vpdpbusd`` on Zen 5 (one thread), tiles of 6, 8,
#: 9, 10 and 12 accumulators ran at 0.73, 0.84-0.91, 0.95, 0.98 and 0.99-1.0 of the peak.
DOT_CHAINS = 10


def one_instruction_dot(cpu: CPUDescription) -> bool:
    """Whether a dense convolution's dot product on ``cpu`` is one instruction that
    adds into its accumulator, on its operands as they are (``vpdpbusd``, ``sdot``,
    ``udot``), rather than widened (``pmaddubsw``, ``pmaddwd`` and an add)."""
    return DOT4_RANK[pixel_dot_instruction(cpu)] == 0


def tile_register_reserve(cpu: CPUDescription) -> int:
    """The vector registers a register tile of :func:`tile_candidates` leaves free
    beyond its accumulators, data vectors and broadcast weight: none where the dot
    product is one instruction (:func:`one_instruction_dot`),
    :data:`WIDENED_TEMPORARIES` where it is widened (its intermediate products). AVX2
    code with AVX-VNNI (Zen 5 under ``-mattr=-avx512f``, one thread) ran ResNet-18's 3x3
    64->64 at 56x56 in 0.86x the time of the 8-accumulator tile in 4 channels by 3
    vectors (12 accumulators, 16 registers) and 128->128 at 28x28 in 0.84x."""
    return 0 if one_instruction_dot(cpu) else WIDENED_TEMPORARIES


def accumulators_in_flight(cpu: CPUDescription) -> int:
    """How many accumulators a register tile needs on ``cpu`` for its dot products not
    to wait on each other: :data:`DOT_CHAINS` where the dot product is one instruction
    (each waits the last one's latency on its accumulator), one where it is widened
    (the products do not wait on the accumulator; a one-cycle add accumulates them)."""
    return DOT_CHAINS if one_instruction_dot(cpu) else 1


def tile_candidates(filters: int, cpu: CPUDescription) -> list[Int8ConvTiles]:
    """The register tiles a dense convolution of ``filters`` output channels may take
    on ``cpu``: ``vectors`` of 1 to :data:`MAX_TILE_VECTORS` data vectors by the most
    output channels dividing ``filters`` whose accumulators, with those data vectors
    and one broadcast weight, fit the vector registers less
    :func:`tile_register_reserve`; one vector by :func:`int8_conv_tiles`' channels
    always, and by each divisor of ``filters`` down to half of those (fewer channels a
    tile, more tiles: ResNet's and SqueezeNet's 48 filters in four tiles of 12 share two
    cores evenly, three tiles of 16 do not; :func:`conv_tiling` weighs it)."""
    base = int8_conv_tiles(filters, cpu)
    found = [base]
    found += [Int8ConvTiles(base.lanes, channels)
              for channels in range(base.channels - 1, max(base.channels // 2, 1) - 1, -1)
              if filters % channels == 0]
    budget = cpu.vector_registers - tile_register_reserve(cpu)
    for vectors in range(2, MAX_TILE_VECTORS + 1):
        channels = (budget - vectors - 1) // vectors
        while channels > 1 and filters % channels:
            channels -= 1
        if channels >= 2:
            found.append(Int8ConvTiles(base.lanes, channels, vectors))
    return found


def data_loads(tiles: Int8ConvTiles) -> float:
    """Cache-line reads of data per dot-product instruction of a tile: per ``channels *
    vectors`` instructions, ``vectors`` data vectors of two lines each (a run of pixels
    starts anywhere in a line). The broadcast weights are not counted: they come from
    the L1 cache and sit in the instruction's memory operand, and kernels whose tiles
    read more of them per instruction run in the time of their positions alone
    (ResNet-50's 1x1 convolutions at 14x14, AVX-512 VNNI, Zen 4: 16 channels by one
    vector, 8 by two, 8 by three, 4 by four take 1.245, 1.241, 1.242, 1.234 ns per
    computed position and channel group)."""
    return 2 / tiles.channels


def tile_loads(tiles: Int8ConvTiles) -> float:
    """Load instructions per dot-product instruction of a tile: ``vectors`` data vectors
    and ``channels`` broadcast weights (each loaded once, into a register, where it
    multiplies more than one vector) per ``channels * vectors`` instructions: 1.06 for
    16 channels by one vector, 0.46 for 8 by three."""
    return (tiles.vectors + tiles.channels) / (tiles.vectors * tiles.channels)


def tile_pace(tiles: Int8ConvTiles, cpu: CPUDescription, finished_in_registers: bool
              ) -> float:
    """A tile's time per computed position and output channel, relative to the dot
    product's peak: on a CPU whose loads can bind (:attr:`CPUDescription.dot_load_budget`)
    the loads' pace where the tile loads more per instruction than the budget, else the
    multiplies' (1); elsewhere, and for sums finished in registers
    (:func:`register_finish`: a tile of more vectors leaves the requantization too few
    registers), ``1 + data_loads``, which favours the most channels a tile. Either way
    a tile of fewer accumulators than :func:`accumulators_in_flight` runs at their share
    of it.

    Zen 5 (budget 0.9, one thread, each layer's median against the one-vector tile of
    16 channels): ResNet-18's 3x3 64->64 at 56x56 in 8 channels by 3 vectors 0.88x the
    time, 128->128 at 28x28 0.93x; MobileNetV2's 1x1s finished in registers ran slower
    in two-vector tiles (the model 1.14x), so they keep the old weighing. With AVX-VNNI
    and 16 registers (Zen 5's AVX2 code), the one-vector tile's 8 accumulators gave way
    to 4 channels by 3 vectors: ResNet-18 int8 in 0.93x the time on one thread, ResNet-50
    0.94x, MobileNetV2 0.98x; Alder Lake's code 0.90x (two threads, run on Zen 5)."""
    budget = cpu.dot_load_budget
    if budget is None or finished_in_registers:
        pace = 1 + data_loads(tiles)
    else:
        pace = max(1.0, tile_loads(tiles) / budget)
    return pace * max(1.0, accumulators_in_flight(cpu) / (tiles.channels * tiles.vectors))


@dataclass(frozen=True)
class RowBlocks:
    """How the sums of a stride-1 convolution are cut so that each block of ``rows``
    output rows is summed and finished while it is in the L1 cache: a block is
    ``extent`` consecutive flat positions (``rows`` padded rows, the last one's output
    columns, rounded up to whole vectors)."""

    rows: int
    extent: int


def row_blocks(out_height: int, row_length: int, out_width: int, lanes: int,
               channels: int, cpu: CPUDescription, budget: int | None = None) -> RowBlocks:
    """The blocks of :class:`RowBlocks` for an output of ``out_height`` rows of
    ``out_width`` pixels, ``row_length`` flat positions apart: the row count dividing
    the height that computes fewest positions per output pixel (the padding columns
    between rows and the last vector's tail are computed and dropped), more rows on a
    tie, a block's ``channels`` rows of int32 sums within ``budget`` bytes (default half
    the L1 data cache; one row always: a block must hold whole rows). More rows on a
    tie: the finishing stage reads a channel's constants (its bias, weight sum and
    requantization) once a block, not once a row, which a row of one vector pays for
    each vector: MobileNetV2's 3x3 depthwise layers at 14x14 (rows of 16 positions, one
    vector each: every row count ties) took 0.88-0.90x the time in one block of 14 rows
    than a row a block (AVX-512 VNNI, Zen 5, one thread)."""
    best = None
    for blocks in row_block_candidates(out_height, row_length, out_width, lanes, channels,
                                       cpu.l1d // 2 if budget is None else budget):
        if best is None or blocks.extent * best.rows <= best.extent * blocks.rows:
            best = blocks
    return best


def row_block_candidates(out_height: int, row_length: int, out_width: int, lanes: int,
                         channels: int, budget: int) -> list[RowBlocks]:
    """Every :class:`RowBlocks` of :func:`row_blocks`' output whose row count divides
    the height and whose ``channels`` rows of int32 sums fit ``budget`` bytes (one row
    always), fewest rows first."""
    found = []
    for rows in range(1, out_height + 1):
        if out_height % rows:
            continue
        extent = -(-((rows - 1) * row_length + out_width) // lanes) * lanes
        if rows > 1 and channels * extent * 4 > budget:
            break
        found.append(RowBlocks(rows, extent))
    return found


def pool_makespan(tasks: int, threads: int) -> float:
    """How long ``threads`` threads take over ``tasks`` equal iterations of a parallel
    loop, relative to an even split. The runtime gives each thread a contiguous share
    of the loop, the shares' sizes differing by one at most, the longer first, and a
    thread done with its own share's chunks (:data:`.common.TASKS_PER_CORE`) takes those
    left in the others': the threads end within one task of each other, the busiest
    running ``ceil(tasks / threads)`` tasks (25 tasks on two threads: 1.04x; 36:
    1.0x)."""
    return per_core(tasks, threads) * threads / tasks


#: how much longer than an even split a schedule lets the threads' shares of whole
#: chunks of a parallel loop run (:func:`pool_makespan`) when it chooses larger tasks
TASK_BALANCE = 1.05


def per_core(tasks: int, cores: int) -> int:
    """The tasks the busiest of ``cores`` runs when ``tasks`` equal iterations of a
    parallel loop are shared out in the thread pool's chunks (:func:`pool_makespan`):
    the loop's time in tasks. ResNet-18's 64->64 3x3 at 56x56 in blocks of 8 rows (28
    tasks) ran 1.74x faster on two threads than on one while the pool's chunks of 3 and
    4 tasks gave the busiest thread 16 tasks, not 14; ONNX Runtime's ran 1.90x (AVX-512
    VNNI)."""
    return -(-tasks // max(cores, 1))


def conv_tiling(filters: int, out_height: int, out_width: int, row_length: int,
                cpu: CPUDescription, group_filters: int | None = None
                ) -> tuple[Int8ConvTiles, RowBlocks]:
    """The register tile (:func:`tile_candidates`) and the blocks of rows of a dense
    convolution's sums: the pair that computes fewest positions, weighted by the tile's
    pace (:func:`tile_pace`: its loads per instruction where the CPU's loads can bind,
    else its data reads, ``1 + data_loads``: more data vectors per tile round each
    block up to more whole vectors, and fewer channels per tile read each data vector
    for fewer instructions). ``group_filters``: a grouped convolution's output
    channels per group, which a tile's channels divide (default ``filters``: dense).
    ``row_length``: the flat positions between output
    rows (:func:`row_blocks`). A block's sums may fill the L1 data cache (written once
    by the tile, read once by the finishing stage): a 3x3 convolution at 56x56 then
    sums blocks of 8 rows, 464 positions for 448 pixels, not 4 rows in 240 positions
    for 224 (0.97x the kernel's time, AVX-512 VNNI, Zen 4).

    Weighting by the broadcast weights' reads too (a 16-channel tile reads 1.1 lines per
    instruction, 8 channels by 3 vectors 0.6) chose the multi-vector tiles, whose
    rounding computes up to 22% more positions at 14x14: ResNet-50's 1x1 layers ran
    1.04-1.15x the one-vector tile's time (AVX-512 VNNI, Zen 4, whose loads do not
    bind), 1.0-1.09x on AVX2.

    The cost is the busiest core's (:func:`per_core`): the blocks (a tile of channels by
    a block of rows) run in parallel, so where they would not share ``cpu.num_cores``
    evenly, fewer channels a tile or fewer rows a block may finish sooner although they
    compute more (SqueezeNet's 384->48 at 13x13 on two cores: four tiles of 12
    channels, not three of 16), taken where the busiest core's cost falls by
    :data:`BALANCE_GAIN` (the cost is a model: a choice that computes more for a few
    percent less on paper is not worth it)."""
    choices = []
    in_registers = may_finish_in_registers(row_length, out_width, cpu)
    for tiles in tile_candidates(group_filters or filters, cpu):
        pace = tile_pace(tiles, cpu, in_registers)
        for blocks in row_block_candidates(out_height, row_length, out_width,
                                           tiles.lanes * tiles.vectors, tiles.channels,
                                           cpu.l1d):
            tasks = filters // tiles.channels * (out_height // blocks.rows)
            work = blocks.extent * tiles.channels * pace
            choices.append((tasks * work, per_core(tasks, cpu.num_cores) * work,
                            tiles, blocks))
    # least work; among equal work, fewest data reads (the most channels a tile), then
    # (a tile's blocks) fewest positions per row
    fewest = min(choices, key=lambda c: (c[0], data_loads(c[2]), c[3].extent / c[3].rows))
    balanced = min(choices, key=lambda c: (c[1], c[0], data_loads(c[2])))
    best = balanced if balanced[1] * BALANCE_GAIN <= fewest[1] else fewest
    return best[2], best[3]


#: how much less time the busiest core must take for :func:`conv_tiling` to choose
#: tiles and blocks that share the cores better over those that compute least
BALANCE_GAIN = 1.1


@dataclass(frozen=True)
class ChannelVectorTiles:
    """Register tiles whose lanes are output channels: ``lanes`` channels per int32
    vector, ``vectors`` vectors of them a tile."""

    lanes: int
    vectors: int

    @property
    def channels(self) -> int:
        """Output channels per tile (and per block of the finishing stage)."""
        return self.lanes * self.vectors


@dataclass(frozen=True)
class Int8ChannelTiles(ChannelVectorTiles):
    """Output channels as the lanes (for images whose rows fill no vector of pixels):
    ``lanes`` channels per int32 vector, a register tile of ``vectors`` vectors of
    channels by ``pixels`` output pixels of a row (``pixels * vectors`` accumulators),
    each pixel's four bytes broadcast to every lane; ``rows`` output rows per block
    summed and finished while in cache."""

    pixels: int
    rows: int


#: the most pixels of a row one :class:`Int8ChannelTiles` register tile holds
MAX_TILE_PIXELS = 8
#: how much fewer positions channel lanes must compute than vectors of pixels would
#: for a convolution to take them: their tile broadcasts each pixel's bytes into a
#: register (an instruction of its own, where a broadcast weight sits in the dot
#: product's memory operand), and their finishing stage reads the sums strided
CHANNEL_LANES_GAIN = 1.1
#: the fewest pixels per tile that channel lanes take: a tile of one pixel reloads its
#: weight vectors for each (AVX-512 VNNI, SqueezeNet's 48->192 at 13x13: 1.71x the time
#: of vectors of pixels)
MIN_CHANNEL_PIXELS = 4
#: where channel lanes break even: the positions vectors of pixels would compute beyond
#: the output's pixels, as a fraction of them, times the dot-product instructions per
#: accumulator (channel groups times taps). Channel lanes save the first on every
#: instruction, and pay per output a tile's accumulators zeroed, stored and read back
#: strided, which a long reduction amortizes (AVX-512 VNNI, Zen 5, channel lanes /
#: vectors of pixels: MobileNetV2's 1x1 160->960 at 7x7, 0.31 x 40 = 12, 1.04x;
#: 320->1280 at 7x7, 0.31 x 80 = 25, 0.90x; a 3x3 32->128 at 14x14, 0.14 x 72 = 10,
#: 1.07x; 64->256 at 14x14, 0.14 x 144 = 21, 1.0x; earlier, on Zen 4: SqueezeNet's 3x3
#: 16->64 at 55x55, 36 instructions, 1.42x; 128->128 at 7x7, 288, 0.81x; ResNet's
#: 512->512 at 7x7, 1152, 0.78x)
CHANNEL_LANES_BREAK_EVEN = 20


def channel_tiling(filters: int, out_height: int, out_width: int,
                   cpu: CPUDescription, tiny: bool = False) -> Int8ChannelTiles | None:
    """The tile of :class:`Int8ChannelTiles` for ``filters`` output channels of
    ``out_height`` x ``out_width`` pixels on ``cpu``, or None where ``filters`` fill no
    whole vectors: the most vectors of channels (up to 4, dividing the vectors) whose
    tile with the widest divisor of the row (up to :data:`MAX_TILE_PIXELS`) fits the
    registers less four with its weight vectors and one broadcast; fewest loads per
    instruction (``(pixels + vectors) / (pixels * vectors)``) among them; the rows per
    block, among those whose sums fit half the L1 data cache, that give the busiest core
    fewest rows (:func:`per_core`: MobileNetV2's 960->160 at 7x7, five tiles, on two
    cores: blocks of one row, 18 rows on the busiest core, not blocks of seven, 21;
    DenseNet's 32 filters at 7x7 are one tile: a block per row), the most rows among
    those (with one core: all of them).

    ``tiny``: an output that vectors of pixels would mostly waste (a classifier's 1x1
    image): vectors of channels as narrow as the dot product's instruction allows where
    ``filters`` fill no whole register (1000 classes: 125 vectors of 8), and up to
    :data:`MAX_TINY_VECTORS` of them, so that a tile of one pixel still has that many
    independent sums in flight."""
    lanes = next((width for width in channel_lane_widths(cpu, tiny) if filters % width == 0),
                 None)
    if lanes is None:
        return None
    budget = cpu.vector_registers - 4
    best = None
    for vectors in range(1, (MAX_TINY_VECTORS if tiny else 4) + 1):
        if filters // lanes % vectors:
            continue
        pixels = next((p for p in range(min(out_width, MAX_TILE_PIXELS), 0, -1)
                       if out_width % p == 0 and p * vectors + vectors + 1 <= budget), 0)
        if not pixels:
            continue
        loads = (pixels + vectors) / (pixels * vectors)
        if best is None or loads < best[0]:
            best = (loads, vectors, pixels)
    if best is None:
        return None
    _, vectors, pixels = best
    fitting = [r for r in range(1, out_height + 1) if out_height % r == 0
               and lanes * vectors * r * out_width * 4 <= cpu.l1d // 2] or [1]
    tiles = filters // (lanes * vectors)
    # the busiest core's rows, fewest first, then the most rows a block
    rows = min(fitting, key=lambda r: (per_core(tiles * (out_height // r), cpu.num_cores) * r,
                                       -r))
    return Int8ChannelTiles(lanes, vectors, pixels, rows)


#: the most vectors of channels a tile of :func:`channel_tiling` holds for a tiny output
MAX_TINY_VECTORS = 8
#: how many times its pixels vectors of pixels must compute for an output to be tiny
#: (:func:`channel_lanes_tiles`): a classifier's 1x1 image computes 16 positions for 1
TINY_OUTPUT_WASTE = 4


#: the dot product's instructions, best first (:func:`.int8_dot.dot4_instruction`)
DOT4_RANK = {"vpdpbusd": 0, "sdot": 0, "udot": 0, "pmaddubsw": 1, "pmaddwd": 2, "generic": 3}


def channel_lane_widths(cpu: CPUDescription, narrow: bool) -> list[int]:
    """The int32 lanes a vector of channels may have on ``cpu``: a whole register's and,
    with ``narrow``, halves of it down to four while the dot product's instruction at
    that width is no worse (AVX-512VL's 256-bit ``vpdpbusd``; AVX-VNNI's beside
    AVX-512BW's ``vpmaddubsw``)."""
    full = cpu.vector_lanes("int32")
    unsigned = data_dtype(cpu) == "uint8"

    def rank(lanes: int) -> int:
        return DOT4_RANK[dot4_instruction(cpu.features, cpu.arch, lanes, unsigned, False)]

    widths = [full]
    while narrow and widths[-1] // 2 >= 4 and rank(widths[-1] // 2) <= rank(full):
        widths.append(widths[-1] // 2)
    return widths


def channel_lanes_tiles(x_shape, w_shape, attrs, cpu: CPUDescription
                        ) -> Int8ChannelTiles | None:
    """The channel tiles a dense convolution of data ``x_shape`` by weights ``w_shape``
    takes on ``cpu`` (:func:`int8_conv`), or None where it takes vectors of pixels:
    channel lanes where vectors of pixels would compute :data:`CHANNEL_LANES_GAIN`
    times the output's pixels or more (a 7x7 output: 64 positions, or 61 rows of 9
    with a 3x3 kernel's padding, for 49 pixels), its channels fill whole vectors, its
    tile holds :data:`MIN_CHANNEL_PIXELS` and the positions saved outweigh a tile's
    cost per output (:data:`CHANNEL_LANES_BREAK_EVEN`); always where they would compute
    :data:`TINY_OUTPUT_WASTE` times its pixels (:func:`channel_tiling`'s ``tiny``
    tiles)."""
    if int(attrs.get("group", 1)) != 1:
        return None  # a vector of channels would span groups of different data
    _, (sy, sx), (_, dx), pads, (oh, ow) = conv_geometry(x_shape, w_shape, attrs)
    filters, channels, kh, kw = w_shape
    stride_row = flat_row_length(x_shape[3], pads, sx, (kw - 1) * dx)
    pixel_tiles, blocks = conv_tiling(filters, oh, ow, stride_row, cpu)
    computed = oh // blocks.rows * blocks.extent
    if computed >= TINY_OUTPUT_WASTE * oh * ow:
        # whatever the tile: vectors of pixels would compute mostly padding
        return channel_tiling(filters, oh, ow, cpu, tiny=True)
    tiles = channel_tiling(filters, oh, ow, cpu)
    if tiles is None or tiles.pixels < MIN_CHANNEL_PIXELS:
        return None
    waste = computed / (oh * ow) - 1
    reduction = -(-channels // GROUP) * kh * kw
    gains = waste * reduction >= CHANNEL_LANES_BREAK_EVEN
    return tiles if gains and computed >= CHANNEL_LANES_GAIN * oh * ow else None


#: a dense sums stage's attribute: its register tiles are finished (the function's
#: epilogue) while in registers, a tile at a time (:func:`register_finish`)
INT8_FINISH_TILES = "int8_finish_tiles"
#: a dense sums stage's attribute: its finishing stage's parallel tasks are its blocks of
#: rows, each packing the data its rows read and then summing every tile of channels
#: over them (:func:`row_tasks`)
INT8_ROW_TASKS = "int8_row_tasks"
#: :func:`row_tasks`: the most bytes of packed weights, as a fraction of a core's L2,
#: that every task of a convolution in row tasks reads (they stay in each core's L2)
ROW_TASK_WEIGHT_SHARE = 0.25
#: :func:`row_tasks`: the fewest blocks of rows a core that a convolution in row tasks
#: gets (a task sums every tile of channels: a few make a core's share)
ROW_TASKS_PER_CORE = 2


def row_tasks(n: int, weight_bytes: int, units: int, cpu: CPUDescription) -> bool:
    """Whether a dense convolution's parallel tasks are its blocks of rows (batch
    included), each packing the data its rows read (in its cache) and summing
    every tile of output channels over it, rather than a tile of channels by a block of
    rows each over data packed ahead in a loop of its own: where its packed weights fit
    :data:`ROW_TASK_WEIGHT_SHARE` of the L2 (``weight_bytes``: every task reads them all)
    and its ``units`` of rows an image (the blocks of rows of :func:`conv_tiling`; of
    sums finished in registers, :func:`register_finish`, its rows or its tiles across
    rows) give each core :data:`ROW_TASKS_PER_CORE` tasks or more.

    A core then reads the rows it packs, which are mostly the rows it wrote when the
    convolution before ran so too, rather than every channel, half of which the other
    core wrote; and a call is one parallel loop, not two. Each task packs the rows
    above and below its block again (the kernel's reach). ResNet-18 int8, whose stem
    (3->64 7x7 at 224x224, blocks of 8 rows: 14 tasks) and 3x3 convolutions at 56x56
    (blocks of 14 rows: 4) take them, two threads, alternating runs in one process
    (AVX-512 VNNI, Zen 5): 0.994-0.998x the time with the cores 100 ns apart, 0.954x
    with them 400-800 ns apart. Blocks cut smaller to give more tasks (4 a core: the
    3x3s in blocks of 7 rows, the stem in 4) cost the rows packed twice and the
    positions past each block's last vector: 1.005-1.031x near, 0.95-0.96x far.

    Sums finished in registers (1x1 convolutions whose data is packed in one pass)
    take them too, a task a run of rows or of tiles across rows. Against the dense
    ones alone: MobileNetV2 int8 0.933-0.942x far, ResNet-50 int8 0.911x far and 0.983x
    near, GoogLeNet 0.947x far; ResNet-18 (its three 1x1 downsamples) 1.005x near,
    1.007x far."""
    return (weight_bytes <= ROW_TASK_WEIGHT_SHARE * cpu.l2
            and n * units >= ROW_TASKS_PER_CORE * cpu.num_cores)


#: the fewest vector registers a CPU needs for :func:`register_finish`: a tile's
#: accumulators stay live while each is requantized, beside the requantization's
#: temporaries (AVX2's 16: MobileNetV2's 24->144 at 56x56 ran 1.14x slower finished in
#: registers, its 16->96 at 112x112 0.99x)
FINISH_REGISTERS = 32


def may_finish_in_registers(row_length: int, out_width: int, cpu: CPUDescription) -> bool:
    """Whether a convolution's sums may be finished a register tile at a time
    (:func:`register_finish`, given whole tiles): its sums' rows lie as the output's
    (``row_length`` is the width: no padding columns, a 1x1 convolution) on a CPU of
    :data:`FINISH_REGISTERS` vector registers."""
    return row_length == out_width and cpu.vector_registers >= FINISH_REGISTERS


def register_finish(tiles: Int8ConvTiles, out_height: int, out_width: int, row_length: int,
                    cpu: CPUDescription) -> RowBlocks | None:
    """Blocks for sums finished a register tile at a time (each tile's accumulators
    requantized while in registers: no int32 block stored and read back), or None where
    :func:`conv_tiling`'s blocks are kept: where the sums' rows lie as the output's
    (``row_length`` is the width: no padding columns, a 1x1 convolution) and are whole
    tiles of ``tiles.lanes * tiles.vectors`` pixels, each row or the image as a whole
    (one block of every row, tiles numbered across rows: :func:`flat_finish`), on a CPU
    of :data:`FINISH_REGISTERS` vector registers. A partial last tile is not taken: a
    tile's region must not shrink below the tensorized vector, and a tail tile of its
    own, computed in full and finished on a narrower vector, doubled the code of each
    finish its channels unroll (MobileNetV2's 14x14 layers: 0.94x their time, but the
    model's compile 2.6 -> 3.8 s).

    MobileNetV2's 1x1 convolutions at 112x112 (16->96, 4 dot products a vector against 8
    instructions of requantization; 32->16) took 0.87-0.91x the time finished in
    registers; its 24->144 at 56x56 1.20x in one-row blocks of four tiles for 3.5
    vectors of pixels, but 0.76x in tiles across rows (196 vectors, none computed past
    the image: 0.047 -> 0.036 ms), its 32->192 at 28x28 0.89x (AVX-512 VNNI, Zen 5, one
    thread, each kernel's median in whole runs against blocks of rows finished from
    memory)."""
    width = tiles.lanes * tiles.vectors
    if not may_finish_in_registers(row_length, out_width, cpu):
        return None
    if out_width % width == 0:
        return RowBlocks(1, out_width)
    if out_height * out_width % width == 0:
        return RowBlocks(out_height, out_height * out_width)
    return None


def flat_finish(blocks: RowBlocks, out_width: int) -> bool:
    """Whether register-finished sums (:func:`register_finish`) of an output
    ``out_width`` pixels wide are one block of every row, pixels numbered across rows
    (else a block a row, the width)."""
    return blocks.extent != out_width


def block_of_rows(blocks: RowBlocks, row_length: int, y, column) -> tuple:
    """Where output pixel (``y``, ``column``) lies in sums cut into ``blocks``: (block,
    position in it), its rows ``row_length`` positions apart. The ``% extent``
    changes no value (a row's columns lie in its block) but makes the region of the
    sums that a block of output rows reads the block's whole extent, whole vectors
    (bound inference takes [0, extent) for it)."""
    column = column % blocks.extent
    if blocks.rows == 1:
        return y, column
    return y // blocks.rows, y % blocks.rows * row_length + column


def _flip(source: str, stored: str) -> int:
    """What storing ``source`` bytes as ``stored`` ones adds (+-128: the sign bit flipped)."""
    return (128 if stored == "uint8" else 0) - (128 if source == "uint8" else 0)


def _zero(x_zero: te.Tensor | None):
    return te.const(0, "int32") if x_zero is None else te.cast(
        "int32", x_zero[(0,) * x_zero.ndim])


def _packed_element(x: te.Tensor, x_zero: te.Tensor | None, dtype: str, group: int,
                    centered: bool):
    """``element(b, channel group, inner, y, column)``: the packed value of ``x`` at a
    padded position (``y``, ``column`` in input coordinates): ``x`` stored as ``dtype``
    (the sign bit flipped where the byte types differ; ``centered``: less the zero
    point), the zero point (a centered 0) outside the image or past the channels."""
    _, channels, height, width = x.shape
    flip = 0 if centered else _flip(x.dtype, dtype)
    zero = _zero(x_zero)

    def element(b, channel_group, inner, y, column):
        channel = channel_group * group + inner
        inside = te.logical_and(
            te.logical_and(te.logical_and(y >= 0, y < height),
                           te.logical_and(column >= 0, column < width)), channel < channels)
        value = te.cast("int32", x[b, te.minimum(channel, channels - 1),
                                   te.minimum(te.maximum(y, 0), height - 1),
                                   te.minimum(te.maximum(column, 0), width - 1)])
        if centered:
            value = te.if_then_else(inside, value - zero, te.const(0, "int32"))
        else:
            value = te.if_then_else(inside, value, zero) + flip
        return te.cast(dtype, value)

    return element


def pack_int8_data(x: te.Tensor, x_zero: te.Tensor | None, strides, pads, out_width: int,
                   kernel_width: int, dilation: int, lanes: int, dtype: str,
                   group: int = GROUP, centered: bool = False) -> te.Tensor:
    """``x`` (int8 or uint8 NCHW) as ``[n, C/group, padded rows, stride, columns,
    group]`` ``dtype`` values (see :func:`_packed_element`), padded with the zero point:
    columns enough for ``out_width`` rounded up to whole vectors of ``lanes``."""
    n, channels, height, width = x.shape
    sy, sx = strides
    top, left = pads[0], pads[1]
    rows = (height + pads[0] + pads[2])
    reach = (-(-out_width // lanes) * lanes - 1) * sx + (kernel_width - 1) * dilation + 1
    columns = -(-reach // sx)
    value = _packed_element(x, x_zero, dtype, group, centered)

    def element(b, channel_group, row, phase, column, inner):
        return value(b, channel_group, inner, row - top, column * sx + phase - left)

    return te.compute((n, -(-channels // group), rows, sx, columns, group), element,
                      name="int8_data", dtype=dtype)


def packs_as_plane(x_shape, pads, strides, dtype: str, cpu: CPUDescription) -> bool:
    """Whether :func:`pack_int8_flat` packs an image of ``x_shape`` as one row of its
    pixels in order (unpadded, at stride 1, its rows' four channels within a vector of
    ``dtype``; see there)."""
    return (not any(pads) and tuple(strides) == (1, 1)
            and x_shape[3] * GROUP <= vector_lanes(dtype, cpu))


def packs_in_two_passes(x_shape, pads, strides, row_length: int, dtype: str,
                        cpu: CPUDescription) -> bool:
    """Whether :func:`pack_int8_flat` packs an image of ``x_shape`` in its two vector
    passes (else in one, :func:`pack_int8_bytes`; see there)."""
    plane = packs_as_plane(x_shape, pads, strides, dtype, cpu)
    short = row_length < MIN_COPIED_ROW
    return masked_byte_loads(cpu) and (plane or (any(pads) and not short))


def pack_int8_flat(x: te.Tensor, x_zero: te.Tensor | None, pads, positions: int,
                   row_length: int, dtype: str, cpu: CPUDescription, strides=(1, 1),
                   phases=(1, 1), in_tasks: bool = False,
                   channel_groups: int | None = None) -> te.Tensor:
    """``x`` (int8 or uint8 NCHW) as ``[n, C/4, row phases, column phases, positions',
    4]`` ``dtype`` values: the padded image split by the ``strides``' phases (phase
    (``py``, ``px``) holds padded pixels (``sy * row + py``, ``sx * column + px``);
    ``phases`` of them, from 0, in each direction), each phase's pixels numbered row
    after row (``row * row_length + column``, :func:`flat_row_length`), padded with the
    zero point, also past its last row and in the channels past C. ``positions'``: ``positions``
    rounded up to whole runs of :func:`interleave_run` (the packing's vector step).

    Made in two vector passes (:func:`schedule_int8_flat`) rather than byte by byte: a
    copy of each channel, padded and split by phase (:func:`pack_int8_phases`, its
    rows contiguous vectors, masked at the borders), then four channels' runs
    interleaved into groups of four bytes (:func:`interleave_intrinsic`), where the CPU
    loads bytes under a mask (:func:`masked_byte_loads`). An image without padding, or
    whose padded (phase) rows are shorter than :data:`MIN_COPIED_ROW`, is packed in one
    pass (:func:`pack_int8_bytes`): without padding no guard is left in its loops and
    LLVM vectorizes it as it is (interleaved stores; the two passes took 1.03-1.07x its
    time on MobileNetV2's 1x1 convolutions at 112x112 and 56x56, and, copied row by
    row, each a partial vector, 1.16-1.31x on its 1x1 convolutions at 7x7; AVX-512
    VNNI). A padded image's single pass keeps a guard per byte and stays scalar (3x3
    at 56x56: 0.93x its time in two passes; rows of 9 at 7x7 0.82x).

    Except an unpadded image at stride 1 whose rows' four channels fill no more than
    a vector of ``dtype``: its positions are its pixels in order, so that each channel
    is copied as one run (``pack_int8_phases``' ``plane``), whole vectors but the last,
    and interleaved; LLVM's single pass handles such rows a partial vector each. Whole
    1x1 convolutions on AVX-512 VNNI, Zen 5, two passes / one: MobileNetV2's 576->96 at
    14x14 0.87-0.88x, 96->576 0.94-0.95x, 160->960 at 7x7 0.94x; at 28x28 (rows of
    112 bytes), 144->32 took 1.05-1.09x, so longer rows keep the one pass.

    ``in_tasks``: packed by each task of its reader for the rows it reads (two passes,
    :func:`row_tasks`), a task's region whole runs of the interleave's step.
    ``channel_groups``: groups of four channels (default C/4 rounded up; more: the
    channels past C hold the zero point, as the last group's do)."""
    n, channels, _, _ = x.shape
    groups = channel_groups or -(-channels // GROUP)
    if not packs_in_two_passes(x.shape, pads, strides, row_length, dtype, cpu):
        return pack_int8_bytes(x, x_zero, pads, positions, row_length, dtype, strides,
                               phases, groups)
    run = interleave_run(dtype, cpu)
    positions = -(-positions // run) * run
    phased = pack_int8_phases(x, x_zero, pads, positions, row_length, dtype, strides,
                              phases, plane=packs_as_plane(x.shape, pads, strides, dtype,
                                                           cpu), channel_groups=groups)
    column_phases = phases[1]

    def element(b, channel_group, row_phase, column_phase, position, inner):
        return phased[b, channel_group * GROUP + inner,
                      row_phase * column_phases + column_phase, position]

    attrs = {"int8_interleaved": run}
    if in_tasks:  # a task's positions whole runs (the positions axis, not the group's)
        attrs[te.REGION_MULTIPLE] = (-2, run)
    return te.compute((n, groups, *phases, positions, GROUP), element,
                      name="int8_data", dtype=dtype, attrs=attrs)


def masked_byte_loads(cpu: CPUDescription) -> bool:
    """Whether ``cpu`` loads a vector of bytes under a mask in one instruction (AVX-512BW).
    Then :func:`pack_int8_flat`'s padded copy is a vector per row, and a vector of bytes a
    stride apart one masked move and a shuffle (the codegen's strided loads: the phase-
    split copies of strided depthwise convolutions and pools). Elsewhere the codegen
    loads a guarded or strided byte vector lane by lane: the two-pass packing took 1.06x
    (3x3 at 56x56, stride 1) to 1.5x (stride 2) the one-pass packing's time (AVX2), and a
    vectorized phase-split copy is slower than a scalar copy with clamped reads
    (:func:`pack_int8_data`)."""
    return {"avx512f", "avx512bw"} <= cpu.features


#: a padded row copy's attribute: where its rows hold the image, ``(left padding,
#: width)`` (:func:`copy_lanes`)
IMAGE_COLUMNS = "int8_image_columns"


def lanes_by_lane(length: int, left: int, width: int, lanes: int) -> int:
    """How many elements of a padded row copy (rows of ``length`` elements, the image's
    ``width`` columns from ``left``, moved ``lanes`` at a time from the row's start, the
    last vector the row's tail) lie in vectors that cross the image's border or hold
    no image: those go lane by lane on a CPU without a masked move of their elements,
    the others are one load each."""
    total = 0
    for start in range(0, length, lanes):
        end = min(start + lanes, length)
        if not (start >= left and end <= left + width):
            total += end - start
    return total


#: what one element of a padded row copy that goes lane by lane costs (a test, a branch,
#: a lane insert), against one whole vector's load and store (:func:`copy_lanes`)
LANE_BY_LANE_COST = 0.5


def copy_lanes(length: int, left: int, width: int, dtype: str, cpu: CPUDescription) -> int:
    """The lanes of the vectors a padded row copy of ``dtype`` moves (rows of ``length``
    elements, the image's ``width`` columns from ``left``): a register's (at most the
    row) where the CPU masks a vector load of ``dtype`` in one instruction; else the
    power of two up to a register that costs least, a vector one and each element of
    the vectors that go lane by lane (:func:`lanes_by_lane`)
    :data:`LANE_BY_LANE_COST` (the wider on a tie). MobileNetV2's depthwise copies
    compiled for AVX2 (Zen 5, ``benchmarks/int8_depthwise.py``; the costs of other
    widths differ by CPU and by row, so this is a model, not a fit): the window
    kernel's byte rows of 114 (112x112) in vectors of 16 took 0.131 and 0.208 ms
    (strides 1 and 2) where 32 took 0.259 and 0.553 and 8 0.155 and 0.263; its rows of
    16 (14x14) in 4 0.041 where 16 took 0.051, of 9 (7x7) in 2 0.028 where 8 took 0.054;
    the int16 rows of 30 (28x28) in vectors of 8 0.107 where 16 took 0.156 (4: 0.092),
    of 9 in 4 0.064 where one vector of 9 (which LLVM splits) took 0.107. It takes 8
    for rows of 58 (56x56), where 16 was faster for bytes (0.157 ms against 0.187)
    and as fast for int16."""
    full = min(cpu.vector_lanes(dtype), length)
    if masked_vector_loads(cpu.features, cpu.arch, np.dtype(dtype).itemsize):
        return full
    widest = 1 << (full.bit_length() - 1)
    candidates = [1 << k for k in range(widest.bit_length() - 1, 0, -1)] or [full]
    return min(candidates, key=lambda lanes: (
        -(-length // lanes) + LANE_BY_LANE_COST * lanes_by_lane(length, left, width, lanes),
        -lanes))


def flat_row_length(width: int, pads, stride: int, reach: int) -> int:
    """Positions between two rows of an image ``width`` pixels wide packed flat
    (:func:`pack_int8_flat`): its padded width shared among the column stride's phases.
    At stride 1 the rows share their padding columns, one row's right padding being the
    next row's left (``width + max(left, right)``): a tap past a row's end reads the
    next row's left padding, the zero point, as the image's own padding would be; where
    the kernel's column reach ``(kw - 1) * dilation`` covers the smaller padding (else
    an output row would outgrow it). A 3x3 convolution at 28x28 computes rows of 29
    positions, not 30."""
    left, right = pads[1], pads[3]
    if stride == 1 and reach >= min(left, right):
        return width + max(left, right)
    return -(-(width + left + right) // stride)


def pack_int8_bytes(x: te.Tensor, x_zero: te.Tensor | None, pads, positions: int,
                    row_length: int, dtype: str, strides=(1, 1), phases=(1, 1),
                    channel_groups: int | None = None) -> te.Tensor:
    """:func:`pack_int8_flat`'s layout (``positions`` as they are) in one pass, each
    byte read from the image where it lies (the zero point outside it): for images
    whose rows are too short to copy in vectors (:data:`MIN_SPLIT_ROW`)."""
    n, channels, height, width = x.shape
    sy, sx = strides
    value = _packed_element(x, x_zero, dtype, GROUP, False)

    def element(b, channel_group, row_phase, column_phase, position, inner):
        return value(b, channel_group, inner,
                     position // row_length * sy + row_phase - pads[0],
                     position % row_length * sx + column_phase - pads[1])

    return te.compute((n, channel_groups or -(-channels // GROUP), *phases, positions, GROUP),
                      element, name="int8_data", dtype=dtype, attrs={"int8_row": row_length})


def pack_int8_phases(x: te.Tensor, x_zero: te.Tensor | None, pads, positions: int,
                     row_length: int, dtype: str, strides=(1, 1), phases=(1, 1),
                     plane: bool = False, channel_groups: int | None = None) -> te.Tensor:
    """The first pass of :func:`pack_int8_flat`: ``x`` stored as ``dtype`` (the sign bit
    flipped where the byte types differ), padded with the zero point, as ``[n, C
    rounded up to 4, row phases x column phases, rows * row length]``: phase (``py``,
    ``px``)'s pixels row after row, whole rows covering ``positions``. The reads are
    guarded, not clamped, so that a row is one vector copy masked at the borders; the
    flat axis carries ``int8_row`` (the row length), so that its schedule loops over rows
    and columns (no division per byte). ``plane`` (an unpadded image at stride 1): the
    positions are the image's pixels in order, all of them one row. ``channel_groups``:
    as :func:`pack_int8_flat`'s."""
    n, channels, height, width = x.shape
    padded_channels = (channel_groups or -(-channels // GROUP)) * GROUP
    sy, sx = strides
    top, left = pads[0], pads[1]
    rows = -(-positions // row_length)
    flip = _flip(x.dtype, dtype)
    zero = _zero(x_zero)
    column_phases = phases[1]

    def element(b, channel, phase, position):
        y = position // row_length * sy + phase // column_phases - top
        column = position % row_length * sx + phase % column_phases - left
        inside = te.logical_and(te.logical_and(y >= 0, y < height),
                                te.logical_and(column >= 0, column < width))
        if padded_channels > channels:  # padding channels past the last group's
            inside = te.logical_and(inside, channel < channels)
        return te.cast(dtype, te.if_then_else(inside, te.cast("int32", x[b, channel, y, column]),
                                              zero) + flip)

    shape = (n, padded_channels, phases[0] * phases[1])
    if plane:  # unpadded at stride 1: the image's pixels in order, all of them one row
        return te.compute((*shape, positions), element, name="int8_phases", dtype=dtype,
                          attrs={"int8_row": positions})
    return te.compute((*shape, rows * row_length), element, name="int8_phases", dtype=dtype,
                      attrs={"int8_row": row_length, te.REGION_MULTIPLE: row_length})


def interleave_run(dtype: str, cpu: CPUDescription) -> int:
    """The elements of each channel that one step of :func:`pack_int8_flat`'s interleave
    takes: one vector register of ``dtype`` (four registers of groups out)."""
    return vector_lanes(dtype, cpu)


def interleave_intrinsic(run: int, dtype: str, groups: int = GROUP) -> TensorIntrin:
    """``out[p, g] = src[g, p]`` for ``groups`` runs of ``run`` ``dtype`` elements: one
    :data:`INTERLEAVE_CALL` and one vector store of ``groups * run`` elements."""
    source = te.placeholder((groups, run), dtype, "src")
    out = te.compute((run, groups), lambda p, g: source[g, p], name="interleaved")

    def implement(inputs: list[BufferRegion], output: BufferRegion):
        (region,) = inputs
        bases = list(output.bases)
        bases[-1] = tx.Ramp(bases[-1], tx.IntImm(1), groups * run)
        value = tx.Call(INTERLEAVE_CALL, (*(region.load(g, 0) for g in range(groups)),
                                          tx.IntImm(run)),
                        tx.with_lanes(dtype, groups * run))
        return BufferStore(output.buffer, value, tuple(bases))

    return TensorIntrin(f"cpu_interleave_{dtype}_{groups}x{run}", out, implement,
                        {"run": run})


def schedule_int8_flat(schedule: te.Schedule, data: te.Tensor, cpu: CPUDescription,
                       parallel: bool = True) -> None:
    """The two passes of :func:`pack_int8_flat` in one parallel loop over batch,
    channel groups and stride phases (:data:`PACKED_DATA_PARALLEL_AXES`): each group's
    four channels copied padded at one phase, row by row in vectors
    (:func:`schedule_phase_rows`), then interleaved while in cache, each step one
    :func:`interleave_intrinsic` (one parallel loop: one wait for the threads per call,
    not two)."""
    (phased,) = reads_of(data.op.body)
    stage = schedule[data]
    *outer, position, _ = stage.op.axis
    block = stage.fuse(*outer[:PACKED_DATA_PARALLEL_AXES])
    if parallel:
        stage.parallel(block)
    run = data.op.attrs["int8_interleaved"]
    _, inner = stage.split(position, run)
    stage.tensorize(inner, interleave_intrinsic(run, data.dtype))
    schedule_phase_rows(schedule, phased, cpu, parallel=False)
    schedule[phased].compute_at(stage, block)


def _tap(r, dilation: int, stride: int) -> tuple:
    """Where tap ``r`` of a kernel reads in :func:`pack_int8_flat`'s phases: (phase,
    rows or columns past the output pixel's)."""
    if stride == 1:
        return 0, r * dilation
    return r * dilation % stride, r * dilation // stride


def pack_int8_weight(w: te.Tensor, dtype: str = "int8") -> te.Tensor:
    """OIHW int8 weights as ``[O, C/4, KH, KW, 4]`` (input channels past C zero), held
    as ``dtype`` (:func:`weight_dtype`)."""
    filters, channels, kh, kw = w.shape
    groups = -(-channels // GROUP)

    def element(k, group, ry, rx, inner):
        channel = group * GROUP + inner
        return te.cast(dtype, te.if_then_else(channel < channels,
                                              w[k, te.minimum(channel, channels - 1), ry, rx],
                                              te.const(0, "int8")))

    return te.compute((filters, groups, kh, kw, GROUP), element, name="int8_weight",
                      dtype=dtype)


def pack_int8_weight_lanes(w: te.Tensor, lanes: int, dtype: str = "int8") -> te.Tensor:
    """OIHW int8 weights as ``[O/lanes, C/4, KH, KW, lanes, 4]``: each tap's four input
    channels of ``lanes`` output channels one vector (input channels past C zero); as
    int16, ``[O/lanes, C/4, KH, KW, 2, lanes, 2]`` (:func:`lane_weight`)."""
    filters, channels, kh, kw = w.shape
    groups = -(-channels // GROUP)

    def weight(ko, group, ry, rx, lane, inner):
        channel = group * GROUP + inner
        return te.cast(dtype, te.if_then_else(
            channel < channels, w[ko * lanes + lane, te.minimum(channel, channels - 1), ry, rx],
            te.const(0, "int8")))

    if dtype == "int8":
        return te.compute((filters // lanes, groups, kh, kw, lanes, GROUP), weight,
                          name="int8_weight", dtype=dtype)
    return te.compute((filters // lanes, groups, kh, kw, 2, lanes, 2),
                      lambda ko, group, ry, rx, half, lane, k: weight(
                          ko, group, ry, rx, lane, 2 * half + k),
                      name="int8_weight", dtype=dtype)


def packed_weight_shape(w_shape, lanes: int = 0, dtype: str = "int8") -> tuple[int, ...]:
    """The shape :func:`pack_int8_weight_array` gives OIHW weights of ``w_shape`` as
    ``dtype``: that of :func:`pack_int8_weight` (``lanes`` 0) or
    :func:`pack_int8_weight_lanes` with one more channel group, the weight sums'."""
    filters, channels, kh, kw = w_shape
    groups = -(-channels // GROUP) + 1
    if lanes and dtype != "int8":
        return (filters // lanes, groups, kh, kw, 2, lanes, 2)
    if lanes:
        return (filters // lanes, groups, kh, kw, lanes, GROUP)
    return (filters, groups, kh, kw, GROUP)


def pack_int8_weight_array(w: np.ndarray, lanes: int = 0, dtype: str = "int8") -> np.ndarray:
    """NumPy's copy of :func:`pack_int8_weight` (``lanes`` 0) or
    :func:`pack_int8_weight_lanes`, what a constant weight is packed into once, when its
    kernel is built, followed by one channel group holding each output channel's weight
    sum (the zero-point correction's factor), so that no call sums the weights again:
    its first four bytes, the int32 sum's bytes from the lowest (read back by
    :func:`_packed_weight_sum`). ``dtype``: int8, or int16 (:func:`weight_dtype`), each
    byte widened with its sign (the sum's bytes too, which :func:`int32_of_bytes` reads
    back alike), vectors of output channels in halves (:func:`lane_weight`)."""
    filters, channels, kh, kw = w.shape
    groups = -(-channels // GROUP)
    padded = np.zeros((filters, (groups + 1) * GROUP, kh, kw), np.int8)
    padded[:, :channels] = w
    sums = w.astype(np.int64).reshape(filters, -1).sum(axis=1).astype("<i4")
    padded[:, groups * GROUP:(groups + 1) * GROUP, 0, 0] = sums.view(np.int8).reshape(
        filters, GROUP)
    # [O, groups, 4, KH, KW] -> [O, groups, KH, KW, 4]
    packed = padded.reshape(filters, -1, GROUP, kh, kw).transpose(0, 1, 3, 4, 2)
    if lanes:  # [O/L, L, groups, KH, KW, 4] -> [O/L, groups, KH, KW, L, 4]
        packed = packed.reshape(filters // lanes, lanes, -1, kh, kw, GROUP).transpose(
            0, 2, 3, 4, 1, 5)
        if dtype != "int8":  # [..., L, 2, 2] -> [..., 2, L, 2]: pairs of channels
            packed = packed.reshape(*packed.shape[:5], 2, 2).transpose(0, 1, 2, 3, 5, 4, 6)
    return np.ascontiguousarray(packed, dtype=np.dtype(dtype))


def _packed_weight_sum(packed_w: te.Tensor, k, matrix: bool = False):
    """Output channel ``k``'s weight sum from the trailing group of
    :func:`pack_int8_weight_array` (of either layout), or the trailing block of
    :func:`.int8_matrix.pack_matrix_weight_array` (``matrix``): its four bytes as one
    int32 (the lower three unsigned, the highest signed)."""
    group = packed_w.shape[1] - 1
    if matrix:
        def byte(index):
            return packed_w[k, group, 0, 0, 0, index]
    elif packed_w.ndim in (6, 7):  # vectors of channels (pack_int8_weight_lanes)
        lanes = packed_w.shape[-2]  # [..., lanes, 4] or [..., 2, lanes, 2]

        def byte(index):
            return lane_weight(packed_w, (k // lanes, group, 0, 0), k % lanes, index)
    else:
        def byte(index):
            return packed_w[k, group, 0, 0, index]
    return int32_of_bytes(byte)


def int32_of_bytes(byte) -> te.Expr:
    """The int32 whose four bytes, lowest first, ``byte(0)`` to ``byte(3)`` read (8-bit
    values: the lower three taken unsigned, the highest signed): a sum packed into a
    constant weight's bytes when its kernel was built."""
    total = te.cast("int32", byte(GROUP - 1)) * (1 << 24)
    for index in range(GROUP - 1):
        total = total + te.cast("int32", te.cast("uint8", byte(index))) * (1 << (8 * index))
    return total


def _weight_sums(packed_w: te.Tensor, prepacked: bool, filters: int, name: str,
                 matrix: bool = False):
    """``weight_sum(k)``: output channel ``k``'s weight sum, read from a weight packed
    with its sums (``prepacked``) or, for a weight known only at run time, summed on
    every call from its packing (its padding channels are zero), so that it is read in
    one layout only."""
    if prepacked:
        return functools.partial(_packed_weight_sum, packed_w, matrix=matrix)
    if packed_w.ndim in (6, 7) and not matrix:  # vectors of channels (pack_int8_weight_lanes)
        lanes = packed_w.shape[-2]
        outer = [te.reduce_axis(extent, f"s{i}")
                 for i, extent in enumerate(packed_w.shape[1:4])]
        inner = te.reduce_axis(GROUP, "s4")
        axes = [*outer, inner]

        def element(k):
            return lane_weight(packed_w, (k // lanes, *outer), k % lanes, inner)
    else:
        axes = [te.reduce_axis(extent, f"s{i}")
                for i, extent in enumerate(packed_w.shape[1:])]

        def element(k):
            return packed_w[(k, *axes)]
    summed = te.compute((filters,), lambda k: te.sum(te.cast("int32", element(k)), axis=axes),
                        name=f"{name}_weight_sum", dtype="int32")
    return lambda k: summed[k]


def _int8_conv_channel_lanes(x: te.Tensor, w: te.Tensor, x_zero: te.Tensor | None, attrs,
                             cpu: CPUDescription, name: str,
                             packed_weight: te.Tensor | None,
                             tiles: Int8ChannelTiles) -> te.Tensor:
    """:func:`int8_conv` with output channels as the lanes (:class:`Int8ChannelTiles`):
    sums ``[n, O/lanes, oh, ow, lanes]``, each output pixel's bytes of four input
    channels broadcast, the weights packed ``[O/lanes, C/4, KH, KW, lanes, 4]``; the
    data packed as for vectors of pixels (:func:`pack_int8_flat`), a tap at a fixed
    offset from the pixel's position. Only the output's pixels are computed."""
    n = x.shape[0]
    filters, _, kh, kw = w.shape
    _, (sy, sx), (dy, dx), pads, (oh, ow) = checked_geometry(name, x, w, attrs)
    dtype = data_dtype(cpu)
    stride_row = flat_row_length(x.shape[3], pads, sx, (kw - 1) * dx)
    reach = (kh - 1) * dy // sy * stride_row + (kw - 1) * dx // sx
    phases = (min(sy, (kh - 1) * dy + 1), min(sx, (kw - 1) * dx + 1))
    positions = (oh - 1) * stride_row + ow + reach
    rows = -(-positions // stride_row)
    data = pack_int8_flat(x, x_zero, pads, rows * stride_row, stride_row, dtype, cpu,
                          strides=(sy, sx), phases=phases)
    lanes = tiles.lanes
    packed_w = pack_int8_weight_lanes(w, lanes, packed_weight_dtype(cpu, tiles)) \
        if packed_weight is None else packed_weight
    rco = te.reduce_axis(data.shape[1], "rco")
    ry, rx = te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx")
    rci = te.reduce_axis(GROUP, "rci")

    def body(b, ko, y, column, lane):
        (py, oy), (px, ox) = _tap(ry, dy, sy), _tap(rx, dx, sx)
        read = data[b, rco, py, px, (y + oy) * stride_row + column + ox, rci]
        return te.sum(te.cast("int32", read)
                      * te.cast("int32", lane_weight(packed_w, (ko, rco, ry, rx), lane, rci)),
                      axis=[rco, ry, rx, rci])

    sums = te.compute((n, filters // lanes, oh, ow, lanes), body, name=f"{name}_dot",
                      dtype="int32",
                      attrs={"int8_conv": tiles,
                             "int8_rows": RowBlocks(tiles.rows, tiles.rows * ow),
                             # only the output's pixels: its rows lie back to back
                             "int8_row_length": ow})
    weight_sum = _weight_sums(packed_w, packed_weight is not None, filters, name)
    offset = _zero(x_zero) + _flip(x.dtype, dtype)

    def result(b, k, y, column):
        # sum((x - z) * w) = sum(stored * w) - (z + flip) * sum(w): zero_point_bias
        return sums[b, k // lanes, y, column, k % lanes] - offset * weight_sum(k)

    return te.compute((n, filters, oh, ow), result, name=name, dtype="int32",
                      attrs={"int8_conv_result": True})


def check_packed_weight(name: str, packed_weight: te.Tensor | None, w_shape, lanes: int,
                        dtype: str) -> None:
    """A CompileError naming ``name`` unless ``packed_weight`` (None: none given) is what
    :func:`pack_int8_weight_array` makes of OIHW weights of ``w_shape`` with ``lanes``
    and ``dtype``."""
    expected = packed_weight_shape(w_shape, lanes, dtype)
    if packed_weight is not None and (tuple(packed_weight.shape) != expected
                                      or packed_weight.dtype != dtype):
        raise CompileError(f"{name}: the packed weight is {packed_weight.dtype}"
                           f"{list(packed_weight.shape)}, not {dtype}{list(expected)} "
                           f"(pack_int8_weight_array with lanes={lanes}, dtype={dtype})")


def grouped_on_the_dot_product(w_shape, group: int) -> bool:
    """Whether a convolution of weights ``w_shape`` (OIHW) in ``group`` groups runs on
    the dense dot-product kernel (:func:`int8_conv`): dense, or grouped with each group's
    input channels whole groups of four (RegNet's groups of 8, ResNeXt's of 4), so that
    a packed channel group never spans two convolution groups; a register tile then
    takes channels of one group only (:func:`tile_candidates`), which share their data
    vectors."""
    return group == 1 or (w_shape[1] % GROUP == 0 and w_shape[0] % group == 0)


def int8_conv(x: te.Tensor, w: te.Tensor, x_zero: te.Tensor | None, attrs,
              cpu: CPUDescription, name: str = "conv_integer",
              packed_weight: te.Tensor | None = None) -> te.Tensor:
    """int32 ``sum((x - x_zero) * w)`` of a dense NCHW convolution (group 1) of int8 or
    uint8 ``x`` and int8 ``w``, on the dot product: the sums of packed bytes (an anchor
    carrying ``int8_conv``, its tiles) less each channel's zero-point bias, cropped to
    the output's width. ``attrs``: strides, pads, dilations of the convolution.
    ``packed_weight``: a tensor holding :func:`pack_int8_weight_array` of ``w`` (a
    constant packed when the kernel is built, with its weight sums), read instead of
    packing and summing ``w``."""
    if x.dtype not in ("int8", "uint8") or w.dtype != "int8" or x.ndim != 4 \
            or w.ndim != 4:
        raise CompileError(f"{name}: the dot-product convolution takes 8-bit NCHW data and "
                           f"int8 OIHW weights, not {x.dtype}{list(x.shape)} and "
                           f"{w.dtype}{list(w.shape)}")
    group = int(attrs.get("group", 1))
    if w.shape[1] * group != x.shape[1] or not grouped_on_the_dot_product(w.shape, group):
        raise CompileError(f"{name}: the dot-product convolution is dense or grouped by "
                           f"whole groups of {GROUP} input channels, not {x.shape[1]} "
                           f"channels in {group} groups")
    n = x.shape[0]
    filters, _, kh, kw = w.shape
    _, (sy, sx), (dy, dx), pads, (oh, ow) = checked_geometry(name, x, w, attrs)
    dtype = data_dtype(cpu)
    if matrix_conv(x.shape, w.shape, attrs, cpu):
        return _int8_conv_matrix(x, w, x_zero, attrs, cpu, name, packed_weight)
    channel_tiles = channel_lanes_tiles(x.shape, w.shape, attrs, cpu)
    lanes = channel_tiles.lanes if channel_tiles is not None else 0
    packed_dtype = packed_weight_dtype(cpu, channel_tiles)
    check_packed_weight(name, packed_weight, w.shape, lanes, packed_dtype)
    if channel_tiles is not None:
        return _int8_conv_channel_lanes(x, w, x_zero, attrs, cpu, name, packed_weight,
                                        channel_tiles)
    # output pixels numbered over the width of the padded image's stride phases (the
    # whole padded image with stride 1), so that a vector runs on across rows (a 7-wide
    # image fills whole vectors; the columns past the output's width are computed and
    # dropped) and each tap reads a contiguous run of one phase, in blocks of rows
    # summed and finished while in cache (:func:`row_blocks`)
    stride_row = flat_row_length(x.shape[3], pads, sx, (kw - 1) * dx)
    tiles, blocks = conv_tiling(filters, oh, ow, stride_row, cpu, filters // group)
    finish_tiles = register_finish(tiles, oh, ow, stride_row, cpu)
    if finish_tiles:
        blocks = finish_tiles
    weight_bytes = int(np.prod(packed_weight_shape(w.shape, 0, packed_dtype))) \
        * np.dtype(packed_dtype).itemsize
    two_passes = packs_in_two_passes(x.shape, pads, (sy, sx), stride_row, dtype, cpu)
    if finish_tiles:  # blocks of one row, or one block of tiles across the rows
        units = oh * ow // (tiles.lanes * tiles.vectors) if flat_finish(blocks, ow) else oh
        # packed in one pass (a two-pass plane is one row: no task's region of it)
        in_tasks = not two_passes and row_tasks(n, weight_bytes, units, cpu)
    else:  # a padded image packed in two passes (its rows whole vectors: as measured)
        in_tasks = any(pads) and two_passes \
            and row_tasks(n, weight_bytes, oh // blocks.rows, cpu)
    data, span, _ = _blocked_flat_data(x, x_zero, pads, (kh, kw), (sy, sx), (dy, dx), oh,
                                       blocks, stride_row, dtype, cpu, in_tasks)
    packed_w = pack_int8_weight(w, packed_dtype) if packed_weight is None else packed_weight
    # a grouped convolution's output channel k reads its group's channel groups only
    groups = data.shape[1] // group
    rco = te.reduce_axis(groups, "rco")
    ry, rx = te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx")
    rci = te.reduce_axis(GROUP, "rci")
    per_group = filters // group

    def body(b, k, y, column):
        (py, oy), (px, ox) = _tap(ry, dy, sy), _tap(rx, dx, sx)
        channel_group = rco if group == 1 else k // per_group * groups + rco
        read = data[b, channel_group, py, px, y * span + column + oy * stride_row + ox, rci]
        return te.sum(te.cast("int32", read) * te.cast("int32", packed_w[k, rco, ry, rx, rci]),
                      axis=[rco, ry, rx, rci])

    shape = (n, filters, oh // blocks.rows, blocks.extent)
    sums = te.compute(shape, body, name=f"{name}_dot", dtype="int32",
                      attrs={"int8_conv": tiles, "int8_rows": blocks,
                             "int8_row_length": stride_row,
                             INT8_FINISH_TILES: finish_tiles is not None,
                             INT8_ROW_TASKS: in_tasks})
    weight_sum = _weight_sums(packed_w, packed_weight is not None, filters, name)
    return _corrected_sums(sums, weight_sum, _zero(x_zero) + _flip(x.dtype, dtype), (oh, ow),
                           blocks, stride_row, bool(finish_tiles), name)


def _blocked_flat_data(x: te.Tensor, x_zero: te.Tensor | None, pads, kernel, strides,
                       dilations, out_height: int, blocks: RowBlocks, row_length: int,
                       dtype: str, cpu: CPUDescription, in_tasks: bool,
                       channel_groups: int | None = None) -> tuple[te.Tensor, int, int]:
    """``(data, span, reach)``: ``x`` packed by :func:`pack_int8_flat` for the sums of
    a ``kernel`` (of ``strides`` and ``dilations``) over ``out_height`` output rows in
    ``blocks`` of rows ``row_length`` positions apart (``span`` positions a block): its
    stride phases, whole rows of positions covering every block and the kernel's
    ``reach`` (the positions its last tap reads past its first)."""
    (kh, kw), (sy, sx), (dy, dx) = kernel, strides, dilations
    span = blocks.rows * row_length
    positions = (out_height // blocks.rows - 1) * span + blocks.extent
    reach = (kh - 1) * dy // sy * row_length + (kw - 1) * dx // sx
    phases = (min(sy, (kh - 1) * dy + 1), min(sx, (kw - 1) * dx + 1))
    # whole rows, so that the packing's loop over positions splits into rows and
    # columns (no division per byte, :func:`pack_in_parallel`)
    rows = -(-(positions + reach) // row_length)
    data = pack_int8_flat(x, x_zero, pads, rows * row_length, row_length, dtype, cpu,
                          strides=(sy, sx), phases=phases, in_tasks=in_tasks,
                          channel_groups=channel_groups)
    return data, span, reach


def _corrected_sums(sums: te.Tensor, weight_sum, offset, out_size: tuple[int, int],
                    blocks: RowBlocks, row_length: int, finished_in_registers: bool,
                    name: str) -> te.Tensor:
    """The ``out_size`` output of a dense convolution from its blocked ``sums``
    (``[n, filters, blocks, extent]``, rows ``row_length`` positions apart): cropped to
    the output's width and corrected by the zero point (``offset * weight_sum(k)``)."""
    n, filters = sums.shape[:2]
    oh, ow = out_size

    def result(b, k, y, column):
        # a tile finished in registers reads the sums of its own pixels only (no
        # ``% extent``, which makes the region the whole block)
        if finished_in_registers:
            at = (0, y * ow + column) if flat_finish(blocks, ow) else (y, column)
        else:
            at = block_of_rows(blocks, row_length, y, column)
        # sum((x - z) * w) = sum(stored * w) - (z + flip) * sum(w): zero_point_bias
        return sums[(b, k, *at)] - offset * weight_sum(k)

    # the crop is an anchor of its own (``int8_conv_result``), finished by the
    # function's elementwise epilogue; its blocks of rows compute their sums first
    return te.compute((n, filters, oh, ow), result, name=name, dtype="int32",
                      attrs={"int8_conv_result": True})


def matrix_blocks(tiles: Int8MatrixTiles, filters: int, out_height: int, out_width: int,
                  row_length: int, cpu: CPUDescription) -> RowBlocks:
    """The blocks of rows of a convolution on the tiles (:func:`_int8_conv_matrix`):
    of :func:`row_block_candidates` (whole runs of the register tile's positions, a
    block's sums within the L1 data cache), those whose busiest core computes fewest
    positions (:func:`per_core`), then fewest in all."""
    best = None
    for blocks in row_block_candidates(out_height, row_length, out_width,
                                       tiles.lanes * tiles.vectors, tiles.channels, cpu.l1d):
        tasks = filters // tiles.channels * (out_height // blocks.rows)
        cost = (per_core(tasks, cpu.num_cores) * blocks.extent, tasks * blocks.extent,
                -blocks.rows)
        if best is None or cost < best[0]:
            best = (cost, blocks)
    return best[1]


def _int8_conv_matrix(x: te.Tensor, w: te.Tensor, x_zero: te.Tensor | None, attrs,
                      cpu: CPUDescription, name: str, packed_weight: te.Tensor | None
                      ) -> te.Tensor:
    """:func:`int8_conv` on the CPU's matrix tiles (:mod:`.int8_matrix`, where
    :func:`.int8_matrix.matrix_conv`): the same packed data and blocks of rows, the
    weight packed in blocks of 64 input channels, the sums of a block computed by
    :func:`.int8_matrix.tile_product_intrinsic` (the weight read first: the intrinsic's
    binding of the loops is found in that order)."""
    n = x.shape[0]
    filters, channels, kh, kw = w.shape
    _, (sy, sx), (dy, dx), pads, (oh, ow) = checked_geometry(name, x, w, attrs)
    dtype = data_dtype(cpu)
    expected = matrix_weight_shape(w.shape)
    if packed_weight is not None and (tuple(packed_weight.shape) != expected
                                      or packed_weight.dtype != "int8"):
        raise CompileError(f"{name}: the packed weight is {packed_weight.dtype}"
                           f"{list(packed_weight.shape)}, not int8{list(expected)} "
                           "(pack_matrix_weight_array)")
    stride_row = flat_row_length(x.shape[3], pads, sx, (kw - 1) * dx)
    tiles = matrix_tiles(filters)
    blocks = matrix_blocks(tiles, filters, oh, ow, stride_row, cpu)
    two_passes = packs_in_two_passes(x.shape, pads, (sy, sx), stride_row, dtype, cpu)
    in_tasks = any(pads) and two_passes \
        and row_tasks(n, filters * channels * kh * kw, oh // blocks.rows, cpu)
    block_count = -(-channels // CHANNEL_BLOCK)
    data, span, reach = _blocked_flat_data(
        x, x_zero, pads, (kh, kw), (sy, sx), (dy, dx), oh, blocks, stride_row, dtype, cpu,
        in_tasks, channel_groups=block_count * GROUPS_PER_BLOCK)
    packed_w = pack_int8_weight_blocks(w) if packed_weight is None else packed_weight

    def data_at(block, ry, rx, column):
        """Where tap ``ry``, ``rx`` of channel block ``block`` reads for ``column``."""
        (py, oy), (px, ox) = _tap(ry, dy, sy), _tap(rx, dx, sx)
        return (0, block * GROUPS_PER_BLOCK, py, px, column + oy * stride_row + ox, 0)

    rb = te.reduce_axis(block_count, "rb")
    ry, rx = te.reduce_axis(kh, "ry"), te.reduce_axis(kw, "rx")
    rg, ri = te.reduce_axis(GROUPS_PER_BLOCK, "rg"), te.reduce_axis(GROUP, "ri")

    def body(b, k, y, column):
        # a kernel of one tap reads phase 0 (its axis of one iteration, no phase)
        at = data_at(rb, ry if kh > 1 else 0, rx if kw > 1 else 0, y * span + column)
        read = data[b, at[1] + rg, at[2], at[3], at[4], ri]
        return te.sum(te.cast("int32", packed_w[k, rb, ry, rx, rg, ri])
                      * te.cast("int32", read), axis=[rb, ry, rx, rg, ri])

    sums = te.compute((n, filters, oh // blocks.rows, blocks.extent), body,
                      name=f"{name}_dot", dtype="int32",
                      attrs={"int8_conv": tiles, "int8_rows": blocks,
                             "int8_row_length": stride_row, INT8_FINISH_TILES: False,
                             INT8_ROW_TASKS: in_tasks,
                             MATRIX_DATA_AT: (data_at, (kh, kw), block_count, reach)})
    weight_sum = _weight_sums(packed_w, packed_weight is not None, filters, name, matrix=True)
    return _corrected_sums(sums, weight_sum, _zero(x_zero) + _flip(x.dtype, dtype), (oh, ow),
                           blocks, stride_row, False, name)


#: a matrix convolution's sums' attribute: ``(data_at, taps, channel blocks, reach)``, what
#: :func:`.int8_matrix.tile_product_intrinsic` needs of its geometry
MATRIX_DATA_AT = "int8_matrix_data_at"


def schedule_int8_conv(schedule: te.Schedule, sums: te.Tensor,
                       cpu: CPUDescription) -> None:
    """The sums of :func:`int8_conv`: rows of output pixels split into vectors, a tile of
    output channels accumulating in registers over the taps and channel groups, the
    innermost pixels and four channels one dot-product instruction. The sums of a block
    of rows are computed inside the finishing stage's loop over blocks
    (:func:`schedule_int8_conv_result`), which runs in parallel. The packing stages run
    at root, in parallel, or in row tasks (:func:`row_tasks`) inside each task, serial."""
    tiles = sums.op.attrs["int8_conv"]
    data, packed_w = int8_conv_inputs(sums)
    if sums.op.attrs.get(INT8_ROW_TASKS):  # made in each task of the finishing stage
        if "int8_interleaved" in data.op.attrs:
            schedule_int8_flat(schedule, data, cpu, parallel=False)
        else:
            pack_in_parallel(schedule, data, parallel_axes=0)
    elif "int8_interleaved" in data.op.attrs:
        schedule_int8_flat(schedule, data, cpu)
    else:  # pack_int8_bytes
        pack_in_parallel(schedule, data, parallel_axes=PACKED_DATA_PARALLEL_AXES)
    if isinstance(packed_w.op, te.ComputeOp):  # else a constant packed at build time
        pack_in_parallel(schedule, packed_w)
    if isinstance(tiles, Int8ChannelTiles):
        _schedule_channel_lanes(schedule, sums, tiles, data.dtype)
        return
    if isinstance(tiles, Int8MatrixTiles):
        data_at, taps, block_count, reach = sums.op.attrs[MATRIX_DATA_AT]
        phases = tuple(int(p) for p in data.shape[2:4])
        window = (1, block_count * GROUPS_PER_BLOCK, *phases,
                  tiles.lanes * tiles.vectors + reach, GROUP)
        schedule_int8_matrix(schedule, sums, tile_product_intrinsic(
            tiles, block_count, taps, window, data_at))
        return
    local = register_tiles(schedule, sums, tiles.channels, tiles.lanes * tiles.vectors,
                           parallel=False)
    lb, lk, ly, lcol = schedule[local].op.axis
    rco, ry, rx, rci = schedule[local].op.reduce_axis
    # each broadcast weight (lk) multiplies the tile's data vectors (lv), loaded once
    lv, lcol = schedule[local].split(lcol, tiles.lanes)
    schedule[local].reorder(lb, ly, rco, ry, rx, lk, lv, lcol, rci)
    schedule[local].unroll(lk)
    schedule[local].unroll(lv)
    schedule[local].tensorize(lcol, dot4_intrinsic(tiles.lanes, data.dtype, packed_w.dtype),
                               vectorize_init=True)


def _schedule_channel_lanes(schedule: te.Schedule, sums: te.Tensor,
                            tiles: Int8ChannelTiles, dtype: str) -> None:
    """The sums of :func:`_int8_conv_channel_lanes`: a register tile of ``vectors``
    vectors of channels by ``pixels`` pixels of a row accumulating over the channel
    groups and taps; per tap, each pixel's bytes broadcast once for the tile's weight
    vectors (loaded once for all its pixels); one dot-product instruction per vector."""
    local = schedule.cache_write(sums, "local")
    b, ko, y, column, lane = schedule[sums].op.axis
    koo, koi = schedule[sums].split(ko, tiles.vectors)
    xo, xi = schedule[sums].split(column, tiles.pixels)
    schedule[sums].reorder(b, koo, y, xo, koi, xi, lane)
    schedule[sums].vectorize(lane)
    schedule[local].compute_at(schedule[sums], xo)
    lb, lko, ly, lx, llane = schedule[local].op.axis
    rco, ry, rx, rci = schedule[local].op.reduce_axis
    schedule[local].reorder(lb, ly, rco, ry, rx, lx, lko, llane, rci)
    schedule[local].unroll(lx)
    schedule[local].unroll(lko)
    weight = int8_conv_inputs(sums)[1]
    schedule[local].tensorize(llane, dot4_channels_intrinsic(tiles.lanes, dtype, weight.dtype),
                               vectorize_init=True)


def checked_geometry(name: str, x: te.Tensor, w: te.Tensor, attrs: dict):
    """``conv_geometry`` of a convolution of ``x`` by ``w``, its refusal a CompileError
    naming the function ``name``."""
    try:
        return conv_geometry(x.shape, w.shape, attrs)
    except ValueError as exc:
        raise CompileError(f"{name}: {exc}") from None


#: the shortest row of :func:`pack_int8_flat` that its packing loops over as rows of
#: columns rather than as flat positions: a loop per row of 7-9 positions costs more
#: than the division it saves (2-3x slower packing of 7x7 images; 14 and wider rows
#: 0.5-0.9x, AVX-512, load 6)
MIN_SPLIT_ROW = 12
#: the shortest row (of a stride phase) of a padded image that :func:`pack_int8_flat`
#: copies in vectors and interleaves rather than packs byte by byte: the packing alone
#: of ResNet's 512->512 3x3 at 7x7 (rows of 9) took 0.82x the byte-by-byte pass's time,
#: its 256->512 3x3 of stride 2 at 14x14 (phase rows of 8) 0.70x (AVX-512 VNNI); a
#: padded image's single pass keeps a guard per byte. Shorter rows keep it.
MIN_COPIED_ROW = 8


#: the outer axes of :func:`pack_int8_flat`'s layout its packing runs in parallel:
#: batch, channel groups and both stride phases, so that an image of one channel group
#: (every network's stem: three channels) is still packed by more than one core when
#: it is strided (four phases with stride 2)
PACKED_DATA_PARALLEL_AXES = 4


def pack_in_parallel(schedule: te.Schedule, packed: te.Tensor,
                     parallel_axes: int = 2) -> None:
    """A packing stage at root, its ``parallel_axes`` outer axes (batch and channel
    groups) in parallel (none: a stage computed in each task of its reader's); the
    flat positions of :func:`pack_int8_flat` split into its rows and columns where the
    rows are long (:data:`MIN_SPLIT_ROW`)."""
    stage = schedule[packed]
    outer = stage.op.axis
    if parallel_axes:  # else (none) computed inside a parallel loop of its reader's
        stage.parallel(stage.fuse(*outer[:parallel_axes]))
    row = packed.op.attrs.get("int8_row")
    if row is not None and row >= MIN_SPLIT_ROW and int(outer[4].extent) % row == 0:
        stage.split(outer[4], row)


def schedule_phase_rows(schedule: te.Schedule, data: te.Tensor, cpu: CPUDescription,
                        parallel: bool = True) -> None:
    """A copy split by row phase, ``[n, C, phases, rows * row length]`` (its flat axis
    carrying ``int8_row``): row by row, each row's columns in vectors (of
    :func:`copy_lanes` where it says where its rows hold the image,
    :data:`IMAGE_COLUMNS`), batch and channels in parallel (``parallel``; else serial,
    for a copy computed inside a parallel loop of its reader's)."""
    stage = schedule[data]
    b, c, _, position = stage.op.axis
    row = data.op.attrs["int8_row"]
    image = data.op.attrs.get(IMAGE_COLUMNS)
    lanes = min(vector_lanes(data.dtype, cpu), row) if image is None \
        else copy_lanes(row, *image, data.dtype, cpu)
    _, columns = stage.split(position, row)
    _, inner = stage.split(columns, lanes)
    stage.vectorize(inner)
    if parallel:
        stage.parallel(stage.fuse(b, c))


def tensorized_channel_tiles(schedule: te.Schedule, sums: te.Tensor, channels: int,
                             lanes: int, intrinsic) -> None:
    """A depthwise convolution's sums in register tiles of ``channels`` by one vector of
    ``lanes`` pixels (:func:`register_tiles`), computed inside their reader's loop: the
    outer reduction axes (kernel rows, column groups), then the tile's channels
    (unrolled), then one ``intrinsic`` over the vector and the innermost reduction axis
    (the taps it adds per lane)."""
    local = register_tiles(schedule, sums, channels, lanes, parallel=False)
    lb, lc, ly, lx = schedule[local].op.axis
    *outer, innermost = schedule[local].op.reduce_axis
    schedule[local].reorder(lb, ly, *outer, lc, lx, innermost)
    schedule[local].unroll(lc)
    schedule[local].tensorize(lx, intrinsic, vectorize_init=True)


def register_tiles(schedule: te.Schedule, sums: te.Tensor, channels: int,
                   lanes: int, parallel: bool = True) -> te.Tensor:
    """``sums[b, k, y, pixel]`` in tiles of ``channels`` by one vector of ``lanes``
    pixels, batch, channel tiles and rows in parallel (``parallel``; else serial, for
    sums computed inside a parallel loop of their reader); returns the tile's local
    accumulator stage (computed per tile), whose loops the caller orders."""
    local = schedule.cache_write(sums, "local")
    b, k, y, column = schedule[sums].op.axis
    ko, ki = schedule[sums].split(k, channels)
    co, ci = schedule[sums].split(column, lanes)
    schedule[sums].reorder(b, ko, y, co, ki, ci)
    if parallel:
        schedule[sums].parallel(schedule[sums].fuse(b, ko, y))
    schedule[sums].vectorize(ci)
    schedule[local].compute_at(schedule[sums], co)
    return local


def int8_conv_inputs(sums: te.Tensor) -> tuple[te.Tensor, te.Tensor]:
    """The packed data and packed weight that the sums of :func:`int8_conv` read."""
    product = sums.op.body.source
    first, second = product.a.value.tensor, product.b.value.tensor
    # the tiles' sums read the weight first (_int8_conv_matrix)
    return (second, first) if isinstance(sums.op.attrs["int8_conv"], Int8MatrixTiles) \
        else (first, second)


def int8_conv_packings(sums: te.Tensor) -> list[te.Tensor]:
    """The stages :func:`schedule_int8_conv` schedules beside the sums: the data's two
    packing passes (:func:`pack_int8_flat`) and the weight's packing where it is not a
    constant packed at build time."""
    data, packed_w = int8_conv_inputs(sums)
    return [t for t in (data, *reads_of(data.op.body), packed_w)
            if isinstance(t.op, te.ComputeOp)]


#: a sums stage's attribute: how many of its blocks of rows one parallel iteration of
#: :func:`schedule_int8_conv_result` computes (a divisor of the blocks per channel tile)
INT8_BLOCKS_PER_TASK = "int8_blocks_per_task"


def finishing_stage(schedule: te.Schedule, result: te.Tensor,
                    epilogue: te.Tensor | None) -> te.Stage:
    """The stage that finishes an integer convolution's ``result``: its function's
    elementwise ``epilogue`` (``result`` inlined into it) where it has one, else
    ``result``'s own."""
    if epilogue is None:
        return schedule[result]
    schedule[result].compute_inline()
    return schedule[epilogue]


def schedule_int8_conv_result(schedule: te.Schedule, result: te.Tensor,
                              epilogue: te.Tensor | None = None,
                              *, cpu: CPUDescription) -> None:
    """The cropped, zero-point-corrected sums of :func:`int8_conv` (or of a depthwise
    convolution), finished by the function's elementwise ``epilogue`` when it has one
    (bias, ``Requantize``): output rows in parallel, each a vector loop over its pixels,
    which read the sums in a contiguous run. The sums are computed block by block
    inside that loop (a tile of output channels by a block of rows,
    :class:`RowBlocks`), so that they are finished while in cache rather than written
    to memory whole and read back."""
    stage = finishing_stage(schedule, result, epilogue)
    n, k, y, x = stage.op.axis
    lanes = cpu.vector_lanes("int32")
    sums = next(t for t in reads_of(result.op.body) if "int8_rows" in t.op.attrs)
    tiles = sums.op.attrs.get("int8_conv") or sums.op.attrs["int8_depthwise"]
    blocks: RowBlocks = sums.op.attrs["int8_rows"]
    ko, ki = stage.split(k, tiles.channels)
    if sums.op.attrs.get(INT8_FINISH_TILES):
        _finish_register_tiles(schedule, stage, sums, tiles, (n, ko, ki, y, x), cpu)
        return
    yo, yi = stage.split(y, blocks.rows)
    if sums.op.attrs.get(INT8_ROW_TASKS):
        # a task a block of rows: its data packed first, then every tile of channels
        inner = list(stage.split(x, lanes)) if int(x.extent) > lanes else [x]
        stage.reorder(n, yo, ko, ki, yi, *inner)
        stage.vectorize(inner[-1])
        task = stage.fuse(n, yo)
        stage.parallel(task)
        schedule[sums].compute_at(stage, ko)
        schedule[int8_conv_inputs(sums)[0]].compute_at(stage, task)
        return
    width = int(x.extent)
    if (sums.op.attrs.get("int8_row_length") == width and blocks.rows > 1
            and (width < lanes or (width < 2 * lanes and blocks.rows * width % lanes == 0))):
        # a block's rows lie back to back in the sums as in the output (a 1x1
        # convolution without padding) and each is shorter than a vector: its pixels
        # in whole vectors across rows, one partial vector per block rather than one
        # per row (MobileNetV2's 1x1 convolutions at 14x14 and 7x7: 0.93-0.95x the
        # time; at 55x55, rows of three vectors and a part, 1.3x: not taken); so too
        # rows of one vector and a part where the block is whole vectors (its
        # 32->192 at 28x28, blocks of 4 rows: 0.89-0.92x; 24->144 at 56x56, two rows
        # in seven vectors, 1.02x, and 192->32 at 28x28, 14 rows in 24.5, 1.6x: not
        # taken; AVX-512 VNNI, one thread); and channel lanes' sums, which hold only
        # the output's pixels (960->320 at 7x7: 0.95-0.97x, Zen 5)
        stage.reorder(n, ko, yo, ki, yi, x)
        inner = list(stage.split(stage.fuse(yi, x), lanes))
    else:
        inner = [x]
        if int(x.extent) > lanes:
            inner = list(stage.split(x, lanes))
        stage.reorder(n, ko, yo, ki, yi, *inner)
    stage.vectorize(inner[-1])
    # a sums stage may ask for several blocks per parallel iteration (a depthwise one
    # whose padded copy is made per iteration: INT8_BLOCKS_PER_TASK)
    per_task = sums.op.attrs.get(INT8_BLOCKS_PER_TASK, 1)
    yo, block = stage.split(yo, per_task) if per_task > 1 else (yo, None)
    task = stage.fuse(n, ko, yo)
    stage.parallel(task)
    schedule[sums].compute_at(stage, block or task)


def _finish_register_tiles(schedule: te.Schedule, stage: te.Stage, sums: te.Tensor,
                           tiles: Int8ConvTiles, axes, cpu: CPUDescription) -> None:
    """The finishing stage of sums finished in register tiles (:func:`register_finish`),
    its channels already split by the tile's: a task per tile of channels and run of
    output rows (:func:`finish_rows_per_task`; of pixel tiles where the tiles run
    across rows, :func:`flat_finish`), in it one tile of pixels after another, each
    summed (its accumulators in registers) and finished at once, its channels and
    vectors unrolled so that no accumulator needs an address."""
    n, ko, ki, y, x = axes
    width = tiles.lanes * tiles.vectors
    # the tasks share out the runs of rows of each of these: every tile of channels of
    # every image, or (row tasks) every image
    owners = int(sums.shape[0]) * (
        1 if sums.op.attrs.get(INT8_ROW_TASKS) else int(sums.shape[1]) // tiles.channels)
    if flat_finish(sums.op.attrs["int8_rows"], int(x.extent)):
        # tiles across rows: a task is a run of them
        tile, pixels = stage.split(stage.fuse(y, x), width)
        units = int(y.extent) * int(x.extent) // width
        task, po = stage.split(tile, finish_rows_per_task(units, owners, cpu))
        within_task = (po,)
    else:
        po, pixels = stage.split(x, width)
        task, rows = stage.split(y, finish_rows_per_task(int(y.extent), owners, cpu))
        within_task = (rows, po)
    vector, lane = stage.split(pixels, tiles.lanes)
    if sums.op.attrs.get(INT8_ROW_TASKS):
        # a task a run of rows (or tiles) of every tile of channels, its data packed first
        stage.reorder(n, task, ko, *within_task, ki, vector, lane)
        outer = stage.fuse(n, task)
        schedule[int8_conv_inputs(sums)[0]].compute_at(stage, outer)
    else:
        stage.reorder(n, ko, task, *within_task, ki, vector, lane)
        outer = stage.fuse(n, ko, task)
    stage.unroll(ki)
    stage.unroll(vector)
    stage.vectorize(lane)
    stage.parallel(outer)
    schedule[sums].compute_at(stage, po)


def finish_rows_per_task(height: int, tiles: int, cpu: CPUDescription) -> int:
    """How many output rows one task of a convolution finished in register tiles
    (:func:`_finish_register_tiles`; ``tiles`` tiles of channels, batch included, by
    ``height`` rows) takes: the most rows dividing the height that leave
    :data:`.common.TASKS_PER_CORE` tasks a core, shared out evenly
    (:func:`pool_makespan` within :data:`TASK_BALANCE`), else one. A task first
    broadcasts its tile's weights and reads its weight sums (16 channels by 4 groups of
    MobileNetV2's 16->96 1x1 at 112x112: 64 broadcasts, spilled, and 16 sums), which
    rows of one task share: with a row a task, that layer took 1.15x the time of a
    whole image a task on one thread (AVX-512 VNNI, Zen 5). Fewer tasks than that a
    core leave the pool nothing to even out a thread that starts late with: the whole
    image a task, six tasks on two threads, took 0.082 ms where a row a task took
    0.065-0.077 and 16 rows a task 0.056-0.065."""
    cores = max(cpu.num_cores, 1)
    for rows in range(height, 0, -1):
        tasks = tiles * (height // rows)
        if height % rows == 0 and tasks >= TASKS_PER_CORE * cores \
                and pool_makespan(tasks, cores) <= TASK_BALANCE:
            return rows
    return 1
