"""The blocked NCHW[x]c convolution's schedules, dense (``schedule_conv2d_nchwc``) and
depthwise (``schedule_depthwise_conv2d_nchwc``), with the tiles (:class:`BlockedConvTiles`,
:class:`DepthwiseConvTiles`) a tuning config or the defaults derived from the CPU
description give them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from heterocc.sdk import CompileError, te
from heterocc.te.schedule_reads import reads_of

from ..cpu import CPUDescription
from .common import OPERAND_REGISTERS, even_tiles, vector_lanes
from .direct_conv import _compute_tile_stages, _schedule_conv_data

#: most output columns of one blocked-conv register tile: one accumulator vector each,
#: leaving registers of the 32 (AVX-512) for the weight vector and the broadcast input.
#: (These caps were measured with 32 registers and a one-vector block; fewer registers
#: or a block of several vectors take fewer columns: :func:`dense_conv_column_limit`,
#: :func:`one_block_columns`, :func:`looped_window_columns`.)
BLOCKED_CONV_MAX_COLUMNS = 28
#: weight vectors per broadcast input element of a default dense tile, and its most
#: columns: two measured 7-31% faster than one block of 28 columns on ResNet-18's
#: convolutions with AVX-512 (two one-vector blocks; the tuner's choice on almost all of
#: them), and one two-vector block of 5 columns 8% faster than two such blocks of 3
#: columns with AVX2's 16 registers (:func:`dense_conv_channel_blocks`)
BLOCKED_CONV_WEIGHT_VECTORS = 2
BLOCKED_CONV_PAIRED_COLUMNS = 8
#: most channel blocks of a default dense tile (three one-vector blocks of 7 columns
#: measured 12-35% faster than one of 28 where the block count is odd: 9 blocks of 16,
#: 3 of 8)
BLOCKED_CONV_MAX_CHANNEL_BLOCKS = 4
#: share of the vector registers a default dense tile's accumulators may take (the rest
#: hold its weight vectors, broadcast inputs and what LLVM's scheduling keeps live): 21
#: of AVX-512's 32 (2 blocks x 8 columns, 3 x 7; 24 accumulators, 2 x 12 or 3 x 8,
#: measured 20-60% slower). LLVM loads each column's broadcast input once per step
#: and keeps it live across the tile's channel blocks, so a tile of several blocks
#: needs an accumulator per column and vector, a register per column and one for the
#: weight: 3 x 7 takes 29 of 32 registers, 3 x 8 would take 33 and spills broadcasts
#: to the stack inside its reduction loop (its AVX-512 code stores 59 and reloads 43
#: vectors there, 3 x 7 none). A tile of one block of several vectors (AVX2's and
#: NEON's 16-float blocks) multiplies each broadcast by the block's vectors at once and
#: keeps one live: :func:`one_block_columns` instead.
BLOCKED_CONV_ACCUMULATOR_SHARE = 2 / 3
#: broadcast input elements per vector register that one step of a dense tile of several
#: channel blocks may load: the channels of an input block unrolled per step
#: (:func:`default_block_unroll`) times the tile's columns. Each broadcast there feeds
#: every block's weight vector, so x86 code keeps it in a register rather than folding it
#: into one multiply-add, and LLVM's scheduler issues a step's broadcasts ahead of their
#: multiply-adds: AVX-512 code of 2 blocks x 8 columns with the whole 16-channel block
#: unrolled (128 broadcasts a step) reloads 133 vectors from the stack in its loop, 2 x 7
#: (112) 77, 2 x 10 at 1x1 (160) 36; 6 x 4 (96), 2 x 8 or 2 x 10 with 8 channels a step
#: (64, 80) none. Unrolled so, ResNet-18's 3x3 kernels measured 6-22% faster.
BLOCKED_CONV_BROADCASTS_PER_REGISTER = 3
#: the same for a depthwise tile, whose every multiply-add loads its own input vector
#: (wider tiles measured slower: the loads and accumulators no longer fit the registers)
DEPTHWISE_MAX_COLUMNS = 14


def blocked_conv_columns(width: int, limit: int = BLOCKED_CONV_MAX_COLUMNS) -> int:
    """Output columns per blocked-conv register tile: the widest divisor of ``width``
    up to ``limit`` (no tail tile), or ``limit`` when the only divisors are small."""
    best = max(d for d in range(1, min(width, limit) + 1) if width % d == 0)
    return best if 2 * best > min(width, limit) else min(width, limit)


@dataclass(frozen=True)
class BlockedConvTiles:
    """Tile parameters of :func:`schedule_conv2d_nchwc` (tuning drives them).

    ``columns``: output columns per register tile; ``channel_blocks``: output channel
    blocks per tile (each broadcast input element then feeds the weight vectors of that
    many blocks); it must divide the number of blocks. None:
    :func:`default_blocked_conv_tiles`.
    ``kernel_outer``: a dense convolution's reduction runs over kernel rows and columns
    outside the input channel blocks (default: the channel blocks outermost).
    ``reduction_blocks``: input channel blocks per chunk of a dense convolution's
    reduction, run over every row of the tile's channel blocks before the next chunk
    (partial sums in a buffer of that output, the epilogue after the last chunk); a
    divisor of the input block count; 0: not chunked (each tile reduces at once); None:
    :func:`dense_conv_reduction_blocks`.
    ``row_reduction_blocks``: input channel blocks per chunk of a dense convolution's
    reduction run output row by output row: each chunk over every tile of the row before
    the next (partial sums in a buffer of one row of the tile's channel blocks, the
    epilogue after the last chunk); rows stay parallel. A divisor of the input block
    count, with neither whole-image chunks nor ``kernel_outer``; 0 or None: not chunked.
    No default takes them: against the unchunked tiles, with AVX-512 on a 32 KiB L1 (Zen
    4, kernel alone, alternating, load 7), 1x1 convolutions measured 4-38% slower chunked
    (512->128 at 28x28 by 1, 2, 4, 8 input blocks: 1.28, 1.10, 1.06, 1.04; 128->512 at
    28x28: 1.38, 1.23, 1.21, 1.18 — a chunk of all 8 blocks, no chunking at all, still
    pays the row's partial sums in a buffer and the epilogue out of it), and whole models
    faster without them: ResNet-50 0.965, GoogLeNet 0.969, DenseNet-121 0.978 (the
    default they took until then: 4-block chunks where a tile's weights overflowed the
    L1, measured 0.75-0.95 of unchunked on an earlier host, load 3-10).
    ``block_unroll``: channels of a dense convolution's innermost reduction (the
    channels of one input block) unrolled per step, a divisor of the input block;
    None: :func:`default_block_unroll` (the whole block, unless the tile's broadcasts
    would overflow the registers; a serial loop over it measured 5-13% slower in-model,
    on AVX-512 and AVX2 code alike: its per-step overhead rivals the tile's
    multiply-adds); 1: not unrolled.
    """

    columns: int | None = None
    channel_blocks: int | None = None
    kernel_outer: bool = False
    block_unroll: int | None = None
    reduction_blocks: int | None = None
    row_reduction_blocks: int | None = None


def default_block_unroll(columns: int, channel_blocks: int, block: int,
                         cpu: CPUDescription) -> int:
    """Channels of an input block of ``block`` unrolled per step of a dense blocked
    conv's reduction (``BlockedConvTiles.block_unroll``'s default) for a tile of
    ``columns`` output columns by ``channel_blocks`` channel blocks on ``cpu``: the whole
    block for a tile of one channel block; for several, the most channels (a divisor of
    the block) whose broadcasts, one per column and channel, stay within
    :data:`BLOCKED_CONV_BROADCASTS_PER_REGISTER` per vector register."""
    if channel_blocks == 1:
        return block
    budget = BLOCKED_CONV_BROADCASTS_PER_REGISTER * cpu.vector_registers
    return max(d for d in range(1, block + 1)
               if block % d == 0 and (d == 1 or columns * d <= budget))


def _block_vectors(block_bytes: int, description: CPUDescription) -> int:
    """Vector registers one channel block of ``block_bytes`` fills."""
    return max(1, -(-block_bytes // description.vector_bytes))


def dense_conv_channel_blocks(block_bytes: int, cpu: CPUDescription,
                              blocks: int | None = None) -> int:
    """Output channel blocks of a default dense blocked-conv tile on ``cpu``: the fewest
    that give each broadcast input element :data:`BLOCKED_CONV_WEIGHT_VECTORS` weight
    vectors (two one-vector blocks with AVX-512; one block of 16 floats, two vectors,
    with AVX2; one of four with NEON) and divide ``blocks`` (the output's block count,
    when given), at most :data:`BLOCKED_CONV_MAX_CHANNEL_BLOCKS`; else one."""
    vectors = _block_vectors(block_bytes, cpu)
    for count in range(1, BLOCKED_CONV_MAX_CHANNEL_BLOCKS + 1):
        if count * vectors >= BLOCKED_CONV_WEIGHT_VECTORS and (
                blocks is None or blocks % count == 0):
            return count
    return 1


def _column_budget(block_bytes: int, description: CPUDescription) -> int:
    """Columns of a one-block tile whose accumulators (one per column and vector of the
    block) fill the registers that the operands leave."""
    vectors = _block_vectors(block_bytes, description)
    return max(1, (description.vector_registers - OPERAND_REGISTERS) // vectors)


def one_block_columns(vectors: int, cpu: CPUDescription, shared_inputs: bool = False) -> int:
    """The most output columns of a dense blocked-conv tile of one channel block of
    ``vectors`` (two or more) vector registers on ``cpu``: its accumulators (one per
    column and vector) beside the block's weight vectors, one broadcast input and one
    register for LLVM's next load. On x86 each column's broadcast is used by the block's
    vectors at once, then dead; AArch64's multiply-add takes its multiplier from a lane
    of a register (``fmla`` by element), so LLVM loads each column's inputs of four
    channels as one vector and keeps it live: a register per column more. AVX2's
    16-float blocks take 6 columns (12 accumulators + 2 + 1 + 1 = 16 registers, no
    stack traffic; 7 reload 74 vectors from the stack), measured 3-11% faster than 5 on
    ResNet-18's 3x3 layers and 2-5% on 1x1 layers of 96-256 channels (kernels alone,
    alternating, load 7.5-8.5); NEON's 16-float blocks (four vectors) take 5 (6 reload
    32 vectors from the stack).

    ``shared_inputs``: the tile reads an input block of one channel (a stem's NCHW
    image) through a window wider than its stride, so the step LLVM unrolls is the
    window's row, in which neighbouring columns read the same inputs: LLVM loads each
    broadcast once and keeps it live from one column's tap to its neighbour's, one
    register more. AVX2 then takes 5 columns: MobileNetV3-S's stem (3->16, 3x3, stride
    2, HardSwish) 0.134 ms against 0.227 with 6 (whose code moves 16 vectors to and from
    the stack per window row), MobileNetV2's (3->32) 0.88 of 6; ResNet's 7x7 stem
    (stride 2, 49 taps per channel) the same with 5 or 6 (1.01; 4: 1.09) (one thread,
    alternating, load 4-6)."""
    per_column = vectors + (1 if cpu.arch == "aarch64" else 0)
    spare = 2 + (1 if shared_inputs else 0)
    return max(1, (cpu.vector_registers - vectors - spare) // per_column)


def one_block_tile_columns(width: int, vectors: int, cpu: CPUDescription,
                           shared_inputs: bool = False) -> int:
    """Columns of a dense tile of one channel block of ``vectors`` (two or more) over a
    row of ``width``: the fewest tiles of at most :func:`one_block_columns`, evened
    (:func:`even_tiles`), unless that leaves a last tile of one column (``vectors``
    accumulators, whose multiply-adds wait on each other's latency) where one column
    fewer covers the row in at most one tile more without one: SqueezeNet's 55 columns
    in 11 tiles of 5 rather than 9 of 6 and one of 1 (AVX2, a 16->64 1x1 measured 3-4%
    faster so, load 15-18); 56 stays in tiles of 6 (a last tile of 2). ``shared_inputs``
    as in :func:`one_block_columns`."""
    limit = min(BLOCKED_CONV_PAIRED_COLUMNS, one_block_columns(vectors, cpu, shared_inputs))
    columns = even_tiles(width, limit)
    if width > columns and width % columns == 1 and limit > 1:
        narrower = even_tiles(width, limit - 1)
        if width % narrower != 1 and -(-width // narrower) <= -(-width // columns) + 1:
            return narrower
    return columns


def dense_conv_column_limit(channel_blocks: int, block_bytes: int,
                            cpu: CPUDescription) -> int:
    """The most output columns of a dense blocked-conv tile of ``channel_blocks`` blocks
    of ``block_bytes`` on ``cpu``: a tile of several blocks keeps its accumulators (one
    per column and weight vector) within :data:`BLOCKED_CONV_ACCUMULATOR_SHARE` of the
    registers; one block of several vectors, :func:`one_block_columns`; either takes at
    most :data:`BLOCKED_CONV_PAIRED_COLUMNS` columns. A one-vector tile takes as many as
    the registers hold, at most :data:`BLOCKED_CONV_MAX_COLUMNS`."""
    description = cpu
    vectors = _block_vectors(block_bytes, description)
    weights = channel_blocks * vectors
    if weights < BLOCKED_CONV_WEIGHT_VECTORS:
        return min(BLOCKED_CONV_MAX_COLUMNS, _column_budget(block_bytes, description))
    if channel_blocks == 1:
        return min(BLOCKED_CONV_PAIRED_COLUMNS, one_block_columns(vectors, description))
    accumulators = int(description.vector_registers * BLOCKED_CONV_ACCUMULATOR_SHARE)
    return max(1, min(BLOCKED_CONV_PAIRED_COLUMNS, accumulators // weights))


def pointwise_conv_tile(blocks: int, width: int, block_bytes: int,
                        cpu: CPUDescription) -> tuple[int, int]:
    """``(columns, channel_blocks)`` of the register tile of a dense blocked convolution
    with no window (a 1x1 kernel: each input pixel feeds one output pixel, so a tile's
    columns share no input) whose output has ``blocks`` channel blocks of ``block_bytes``
    in rows of ``width``, on ``cpu``.

    Every reduction step of such a tile loads one weight vector per vector of its channel
    blocks and broadcasts one input element per column, then multiplies each pair into
    an accumulator. Its accumulators may take :data:`BLOCKED_CONV_ACCUMULATOR_SHARE` of
    the vector registers, its weight vectors and a broadcast the rest. Of the channel
    block counts dividing ``blocks`` (each with the fewest column tiles that the
    accumulators allow covering a row, :func:`even_tiles`), the tile feeds each
    broadcast :data:`BLOCKED_CONV_WEIGHT_VECTORS` or more weight vectors where any does
    (one 8-float AVX2 block per tile over 10 columns measured 25% slower than three over
    3 on MobileNetV2's 24-channel layers), then does the most multiply-adds per step
    averaged over a row's tiles (a tail tile does fewer), then the most per vector it
    loads. Against :func:`dense_conv_channel_blocks`'s two channel blocks over at most
    :data:`BLOCKED_CONV_PAIRED_COLUMNS` columns, this measured 2-10% faster per layer
    on MobileNetV2's 1x1 convolutions with AVX-512 (3 blocks x 7 columns at 14x14, 5 x
    4 at 7x7, 4 x 5 at 14x14 with 4 blocks, 2 x 10 at 56x56); AVX2's tiles of 16-float
    blocks stay one two-vector block, over :func:`one_block_columns` (6; 4 in a row of
    7): one block keeps one broadcast live, not one per column."""
    description = cpu
    vectors = _block_vectors(block_bytes, description)
    accumulators = int(description.vector_registers * BLOCKED_CONV_ACCUMULATOR_SHARE)
    operands = description.vector_registers - accumulators
    best, best_key = (min(width, max(1, accumulators // vectors)), 1), None
    for count in range(1, blocks + 1):
        weights = count * vectors
        if blocks % count or weights > accumulators or weights >= operands:
            continue
        columns = (one_block_tile_columns(width, vectors, description)
                   if count == 1 and vectors > 1
                   else even_tiles(width, accumulators // weights))
        tiles = -(-width // columns)
        # weight vectors per broadcast, multiply-adds per step of a row's mean tile,
        # then per vector loaded (weights + width / tiles broadcasts): exact ratios,
        # compared as floats (equal ratios round to equal floats)
        key = (weights >= BLOCKED_CONV_WEIGHT_VECTORS, weights * width / tiles,
               weights * width / (weights * tiles + width))
        if best_key is None or key > best_key:
            best, best_key = (columns, count), key
    return best


def default_blocked_conv_tiles(out_shape: Sequence[int], itemsize: int = 4,
                               *, cpu: CPUDescription, windowed: bool = True,
                               shared_inputs: bool = False) -> tuple[int, int]:
    """``(columns, channel_blocks)`` of a dense blocked convolution's tile without a
    tuning log, for its output shape ``(n, blocks, height, width, block)`` of
    ``itemsize``-byte elements on ``cpu``: with a kernel window (``windowed``, a kernel
    of more than one pixel), :func:`dense_conv_channel_blocks` channel blocks over a
    short row segment (or, when no such count divides the block count, one block over a
    longer one); without one, :func:`pointwise_conv_tile`. ``shared_inputs``
    (:func:`window_shares_inputs`): a one-block tile takes
    :func:`one_block_columns`' for it. A depthwise one's:
    :func:`default_depthwise_conv_tiles`."""
    blocks, width = out_shape[1], out_shape[3]
    block_bytes = out_shape[4] * itemsize
    if not windowed:
        return pointwise_conv_tile(blocks, width, block_bytes, cpu)
    channel_blocks = dense_conv_channel_blocks(block_bytes, cpu, blocks)
    limit = dense_conv_column_limit(channel_blocks, block_bytes, cpu)
    if channel_blocks * _block_vectors(block_bytes, cpu) < BLOCKED_CONV_WEIGHT_VECTORS:
        return min(blocked_conv_columns(width, limit), width), 1
    if channel_blocks == 1:
        return one_block_tile_columns(width, _block_vectors(block_bytes, cpu), cpu,
                                      shared_inputs), 1
    # the fewest tiles covering the row, evened (56 in tiles of 5 rather than 4 columns:
    # a tail tile costs less than the extra tiles a divisor takes, measured with AVX2's
    # 5-column tiles)
    return even_tiles(width, limit), channel_blocks


def window_shares_inputs(input_block: int, kernel_columns: int, stride: int) -> bool:
    """Whether a dense blocked convolution's tile reads each broadcast input at more than
    one tap of its window row (:func:`one_block_columns`' ``shared_inputs``): an input
    block of one channel (nothing else to unroll per step) and a window wider than the
    column stride."""
    return input_block == 1 and kernel_columns > stride


def dense_conv_reduction_blocks(out_shape: Sequence[int], reduction: Sequence[int],
                                channel_blocks: int, itemsize: int = 4,
                                *, cpu: CPUDescription) -> int:
    """Input channel blocks per reduction chunk of a default dense blocked-conv schedule
    (0: no chunks), for its output shape ``(n, blocks, height, width, block)``, the
    extents of its reduction (input channel blocks, kernel rows, kernel columns,
    channels in a block) and ``channel_blocks`` output blocks per tile, on ``cpu``.

    A tile's reduction streams the weights of its channel blocks once per output row;
    when they exceed the L1 data cache they come from L2 (measured 10-15% slower than
    L1-resident weights on ResNet-18's 14x14 and 7x7 layers). Chunked, the reduction's
    outer part runs outside the rows: each chunk's weights (the most input blocks that
    fill at most half the L1, a divisor of the block count, at least one) serve every
    row of the image before the next, the partial sums of the whole output of those
    channel blocks waiting in a buffer. Chosen when the chunk is not the whole
    reduction, the weights and the input rows that one output row reads (each kernel
    row's, of every input channel) overflow the L1 together, that buffer and a chunk fit
    the L1 together, the chunk fits the half of the L1 it is sized for, and the images
    times the channel block groups (the parallel tasks left) keep every core busy. (A
    chunk of one input block whose weights alone exceed that half stays no better in the
    L1 from row to row than the whole reduction, and pays its partial sums' round trip
    per block: AVX-512's two-block tiles of ResNet-18's 512-channel 3x3 at 7x7, 18 KiB
    per input block with a 32 KiB L1, measured 5% faster per kernel unchunked, the
    whole model 3-5% (one thread, CPU clock, alternating, load 24-27); AVX2's one-block
    tiles, 9 KiB per input block, keep their chunks.) (Weights that fit beside those
    rows stay in the L1 from row to row: chunking MobileNetV2's 160->960 1x1
    convolutions at 7x7, 30 KiB of weights per three-block tile beside 4 KiB of input
    rows, measured 10-20% slower than not, its rows no longer parallel.)"""
    plan = _reduction_chunk(out_shape, reduction, channel_blocks, itemsize, cpu)
    if (not plan.overflows or plan.region + plan.weights > cpu.l1d
            or plan.weights > cpu.l1d // 2 or plan.tasks < cpu.num_cores):
        return 0
    return plan.blocks


@dataclass(frozen=True)
class _ChunkPlan:
    """What decides a dense blocked convolution's reduction chunks (byte counts)."""

    blocks: int  #: input blocks per chunk (whose weights fill at most half the L1)
    weights: int  #: bytes of one chunk's weights for a tile's channel blocks
    overflows: bool  #: the chunk is not the whole reduction, and all the weights and
    #: the input rows one output row reads overflow the L1 together
    region: int  #: bytes of the tile's channel blocks' whole output
    tasks: int  #: images times channel block groups


def _reduction_chunk(out_shape: Sequence[int], reduction: Sequence[int],
                     channel_blocks: int, itemsize: int, cpu: CPUDescription) -> _ChunkPlan:
    input_blocks = reduction[0]
    block_weights = itemsize * out_shape[4] * channel_blocks * math.prod(reduction[1:])
    chunk = max(count for count in range(1, input_blocks + 1) if input_blocks % count == 0
                and (count == 1 or count * block_weights <= cpu.l1d // 2))
    row = itemsize * channel_blocks * out_shape[3] * out_shape[4]
    row_inputs = itemsize * input_blocks * reduction[1] * reduction[3] * out_shape[3]
    overflows = (chunk < input_blocks
                 and input_blocks * block_weights + row_inputs > cpu.l1d)
    return _ChunkPlan(chunk, chunk * block_weights, overflows, row * out_shape[2],
                      out_shape[0] * (out_shape[1] // channel_blocks))


def _row_chunk(conv: te.Tensor, tiles: BlockedConvTiles, chunk: int) -> int:
    """The input blocks per row-by-row reduction chunk of ``conv``'s schedule
    (``tiles.row_reduction_blocks``; ``chunk``: its whole-image chunks), checked against
    the rest of the tiles; 0: none."""
    reduction = [int(axis.extent) for axis in conv.op.reduce_axis]
    row_chunk = tiles.row_reduction_blocks
    if not row_chunk:
        return 0
    if chunk or tiles.kernel_outer:
        raise CompileError(f"schedule_conv2d_nchwc: {conv.name!r} chunks its reduction "
                           "row by row or over the image, with the input channel blocks "
                           "outermost: row_reduction_blocks takes neither reduction_blocks "
                           "nor kernel_outer")
    if row_chunk < 0 or reduction[0] % row_chunk:
        raise CompileError(f"schedule_conv2d_nchwc: row reduction chunks of {row_chunk} "
                           f"input channel blocks do not divide {reduction[0]}")
    return row_chunk


def unroll_block_reduction(stage: te.Stage, reduction: list, unroll: int | None,
                            name: str) -> list:
    """A dense blocked convolution's reduction axes, ordered, with the channels of an
    input block (the last axis) unrolled by ``unroll`` (None, or the block or more: all
    of them; 1: none): when that is fewer than the block, the axis is split and its
    inner part unrolled."""
    block = reduction[-1].extent
    unroll = block if unroll is None else min(unroll, block)
    if unroll < 1 or block % unroll:
        raise CompileError(f"schedule_conv2d_nchwc: {name!r} cannot unroll its input "
                           f"channel blocks of {block} by {unroll} (not a divisor)")
    if unroll == 1:
        return reduction
    if unroll < block:
        outer, inner = stage.split(reduction[-1], factor=unroll)
        reduction = [*reduction[:-1], outer, inner]
    # by LLVM: a copy per channel would multiply the tile's TIR (and the compile time of
    # every pass after the unroll) by the block; the accumulators are indexed by the
    # tile's own unrolled axes, not by this one
    stage.unroll(reduction[-1], explicit=False)
    return reduction


def schedule_conv2d_nchwc(schedule: te.Schedule, conv: te.Tensor,
                          epilogue: te.Tensor | None = None,
                          chain: Sequence[te.Tensor] = (),
                          tiles: BlockedConvTiles = BlockedConvTiles(),
                          *, cpu: CPUDescription) -> None:
    """A register-tiled CPU schedule of a blocked convolution ``conv[n, ko, y, x, ki]``
    (NCHW[x]c output, ``ki`` the output channel block): each tile is one output row
    segment of ``tiles.columns`` pixels by one channel block, one accumulator vector per
    pixel, reduced over (input channel blocks, kernel rows, kernel columns, channels in
    a block) with one multiply-add of a weight vector per pixel and step. Tiles of one
    (image, channel block, row) run in parallel. A dense convolution whose tiles' weights
    overflow the L1 runs its reduction in chunks of input blocks
    (``tiles.reduction_blocks``, :func:`dense_conv_reduction_blocks`): each chunk over
    every row of the image before the next, the sums of the tiles' channel blocks in a
    buffer of their whole output, the epilogue after the last chunk; then the images and
    channel block groups run in parallel.

    ``epilogue`` and ``chain`` as in :func:`schedule_conv2d_nchw`: the function's
    elementwise tail, finished from registers in each tile. A depthwise convolution (2
    reduction axes) takes :func:`schedule_depthwise_conv2d_nchwc`, with the tile's
    ``columns`` and ``channel_blocks``."""
    stage = schedule[conv]
    if len(stage.op.axis) == 5 and len(stage.op.reduce_axis) == 2:
        schedule_depthwise_conv2d_nchwc(schedule, conv, epilogue, chain, DepthwiseConvTiles(
            columns=tiles.columns, channel_blocks=tiles.channel_blocks or 1), cpu=cpu)
        return
    if len(stage.op.axis) != 5 or len(stage.op.reduce_axis) != 4:
        raise CompileError(f"schedule_conv2d_nchwc: {conv.name!r} is not a blocked conv2d "
                           "(5 output axes, 4 reduction axes)")
    # the padded copy (n, c, y, x, block) keeps its pixels in a serial loop per row:
    # fused into the parallel loop, each pixel's (short) block vector paid for recovering
    # its row and column by division and for the padding test on both (the 3-channel
    # stems' padded copies took 1.5-2x as long)
    _schedule_conv_data(schedule, reads_of(stage.body)[0], cpu, serial_axes=1)
    if epilogue is None:
        local, outer = schedule.cache_write(conv, "local"), conv
    else:
        local, outer = conv, epilogue
    n, ko, y, x, ki = schedule[outer].op.axis
    _, kernel_rows, kernel_columns, input_block = (int(axis.extent)
                                                   for axis in stage.op.reduce_axis)
    stride = int((conv.op.attrs.get("blocked_conv") or {}).get("strides", (1, 1))[1])
    default_columns, default_blocks = default_blocked_conv_tiles(
        conv.shape, np.dtype(conv.dtype).itemsize, cpu=cpu,
        windowed=kernel_rows * kernel_columns > 1,
        shared_inputs=window_shares_inputs(input_block, kernel_columns, stride))
    columns = tiles.columns or default_columns
    channel_blocks = tiles.channel_blocks or default_blocks
    if conv.shape[1] % channel_blocks:
        raise CompileError(f"schedule_conv2d_nchwc: {channel_blocks} channel blocks per "
                           f"tile do not divide {conv.shape[1]}")
    chunk = tiles.reduction_blocks
    if chunk and tiles.kernel_outer:
        raise CompileError(f"schedule_conv2d_nchwc: {conv.name!r} cannot chunk its input "
                           "channel blocks with the kernel rows and columns outside them")
    if chunk is None and (tiles.kernel_outer or tiles.row_reduction_blocks):
        chunk = 0  # the kernel's or the rows' order, not the whole image's chunks
    if chunk is None:
        chunk = dense_conv_reduction_blocks(
            conv.shape, [axis.extent for axis in stage.op.reduce_axis], channel_blocks,
            np.dtype(conv.dtype).itemsize, cpu=cpu)
    elif chunk and stage.op.reduce_axis[0].extent % chunk:
        raise CompileError(f"schedule_conv2d_nchwc: reduction chunks of {chunk} input "
                           f"channel blocks do not divide {stage.op.reduce_axis[0].extent}")
    row_chunk = _row_chunk(conv, tiles, chunk)
    columns = min(columns, conv.shape[3])
    ko_outer, ko_inner = schedule[outer].split(ko, factor=channel_blocks)
    x_outer, x_inner = schedule[outer].split(x, factor=columns)
    schedule[outer].reorder(n, ko_outer, y, x_outer, ko_inner, x_inner, ki)
    # the parallel loop: images and channel block groups (whole-image chunks), else
    # their rows too
    tasks = schedule[outer].fuse(n, ko_outer) if chunk else schedule[outer].fuse(n, ko_outer, y)
    schedule[outer].parallel(tasks)
    schedule[outer].unroll(ko_inner)
    schedule[outer].unroll(x_inner)
    schedule[outer].vectorize(ki)
    if chunk or row_chunk:
        for stage_tensor in chain:
            schedule[stage_tensor].compute_inline()
        schedule[local].compute_at(schedule[outer], tasks)
        schedule[local].set_scope("local")
    else:
        _compute_tile_stages(schedule, [local, *chain], outer, x_outer)
    for stage_tensor in () if chunk or row_chunk else chain:
        _, channel_blocks, _, columns_axis, block = schedule[stage_tensor].op.axis
        schedule[stage_tensor].unroll(channel_blocks)
        schedule[stage_tensor].unroll(columns_axis)
        schedule[stage_tensor].vectorize(block)
    ln, lko, ly, lx, lki = schedule[local].op.axis
    reduction = list(schedule[local].op.reduce_axis)
    if tiles.kernel_outer:
        channel_outer, row, column, channel_inner = reduction
        reduction = [row, column, channel_outer, channel_inner]
    block_unroll = tiles.block_unroll
    if block_unroll is None:
        block_unroll = default_block_unroll(columns, channel_blocks,
                                            int(reduction[-1].extent), cpu)
    reduction = unroll_block_reduction(schedule[local], reduction, block_unroll,
                                        conv.name)
    if chunk:
        chunk_outer, chunk_inner = schedule[local].split(reduction[0], factor=chunk)
        lx_outer, lx = schedule[local].split(lx, factor=columns)
        schedule[local].reorder(ln, chunk_outer, ly, lx_outer, chunk_inner, *reduction[1:],
                                lko, lx, lki)
    elif row_chunk:
        chunk_outer, chunk_inner = schedule[local].split(reduction[0], factor=row_chunk)
        lx_outer, lx = schedule[local].split(lx, factor=columns)
        # each column's broadcast input feeds the tile's weight vectors, which stay live
        # across the columns (measured 12% faster than the channel blocks outermost in
        # these tiles, which keeps every column's broadcast live instead)
        schedule[local].reorder(ln, ly, chunk_outer, lx_outer, chunk_inner, *reduction[1:],
                                lx, lko, lki)
    else:
        schedule[local].reorder(ln, ly, *reduction, lko, lx, lki)
    schedule[local].unroll(lko)
    schedule[local].unroll(lx)
    schedule[local].vectorize(lki)


#: least output columns of a depthwise tile worth keeping the kernel's weight vectors in
#: registers for; where the registers leave fewer accumulators than that, the weights are
#: read from memory by each multiply-add (folded into it) instead
DEPTHWISE_MIN_COLUMNS = 4
#: vector multiply-adds of a depthwise convolution below which its tiles run in the
#: calling thread: a kernel this short (about a microsecond of multiply-adds per core)
#: gains less from a second core than handing it to the thread pool costs. (At 1 << 16,
#: set before the pool's workers kept spinning between a model's kernels, 12 of
#: MobileNetV2's 17 depthwise layers ran on one core with AVX-512, 5 with AVX2: the
#: model took 4% longer on AVX-512, 1-4% on AVX2, in one process alternating.)
DEPTHWISE_PARALLEL_MIN_VECTOR_MULADDS = 1 << 12


@dataclass(frozen=True)
class DepthwiseConvTiles:
    """Tile parameters of :func:`schedule_depthwise_conv2d_nchwc` (tuning drives them);
    None: the default of :func:`default_depthwise_conv_tiles`.

    ``columns``: output columns per register tile (one accumulator per column and
    vector of the channel block). ``channel_blocks``: channel blocks per tile (each with
    its own weights and inputs: more independent accumulators, no shared operand); it
    must divide the number of blocks. ``unroll_window``: the kernel window is unrolled
    in each tile (its weights then stay in registers across the row, and neighbouring
    taps of neighbouring columns load a shared input vector once) rather than looped
    over. ``parallel``: rows of tiles run in the thread pool.
    """

    columns: int | None = None
    channel_blocks: int = 1
    unroll_window: bool | None = None
    parallel: bool | None = None


def depthwise_conv_tile(width: int, kernel: Sequence[int], stride: int, block_bytes: int,
                        cpu: CPUDescription) -> tuple[int, bool]:
    """``(columns, unroll_window)`` of a depthwise register tile of a ``width``-column
    row on ``cpu``, for a ``kernel`` (rows, columns) at column ``stride`` and a channel
    block of ``block_bytes``.

    The registers the operands leave hold the kernel's weight vectors (reused by the
    whole row when the window is unrolled) and, per column, its accumulators and the
    input vectors in flight for it: one at stride 1, where neighbouring columns share
    their inputs, ``stride`` beyond (though a row that fits with one per column is taken
    whole: one tile per row, with no loop over tiles, measured faster than two narrower
    ones without spilling). Where that leaves at least
    :data:`DEPTHWISE_MIN_COLUMNS` columns, the window is unrolled; otherwise it is looped
    over (:func:`looped_window_columns`). Within the budget, the widest divisor of the row
    (:func:`blocked_conv_columns`); a looped tile of a block of several vectors, whose
    budget is a few columns, covers the row in the fewest tiles instead (a divisor would
    leave 2 columns of AVX2's 16-float block at 56 and 112: 4 accumulator chains, too few
    for the multiply-add's latency; measured 1.2x the time of 3 with a tail)."""
    description = cpu
    vectors = max(1, -(-block_bytes // description.vector_bytes))
    free = description.vector_registers - OPERAND_REGISTERS
    shared = (free - int(np.prod(kernel)) * vectors) // vectors
    resident = shared // max(1, stride)
    if resident >= DEPTHWISE_MIN_COLUMNS:
        if width <= shared:
            return width, True
        return min(blocked_conv_columns(width, resident), width), True
    looped = looped_window_columns(vectors, description)
    if vectors > 1:
        return even_tiles(width, looped), False
    return min(blocked_conv_columns(width, looped), width), False


def looped_window_columns(vectors: int, cpu: CPUDescription) -> int:
    """The most output columns of a depthwise tile whose window is looped over, for a
    channel block of ``vectors`` vector registers on ``cpu``: the accumulators (one per
    column and vector) take half the registers less one column's; the other half holds
    what LLVM keeps live of the kernel row it unrolls (a short loop of constant trip
    count): the taps' weight vectors and the input vectors neighbouring columns share.
    At most :data:`DEPTHWISE_MAX_COLUMNS`. So AVX2's and NEON's 16-float blocks (two and
    four vectors) take 3 columns, whose code keeps every vector in registers with a 3x3
    or a 5x5 kernel where 4 moves 5-9 vectors to and from the stack per kernel row
    (AVX2; NEON 7) and 5 19-58; AVX2's 8-float blocks 7 (8: one, 9: 14). Measured on
    AVX2 against the accumulators' share of the registers alone (4 columns; one thread,
    alternating, load 6): EfficientNet-B0's 32-channel 3x3 at 112x112 0.086 ms against
    0.125 (AVX-512's code 0.076), its 144-channel one at 56x56 0.097 against 0.137, a
    240-channel 5x5 at 28x28 0.110 against 0.116, a 144-channel 5x5 of stride 2 0.073
    against 0.092."""
    return max(1, min(DEPTHWISE_MAX_COLUMNS, (cpu.vector_registers // 2 - vectors) // vectors))


def default_depthwise_conv_tiles(conv: te.Tensor, cpu: CPUDescription
                                 ) -> DepthwiseConvTiles:
    """The tiles of the blocked depthwise convolution ``conv`` (a ``ConvNCHWc`` compute,
    output ``(n, blocks, height, width, block)``) without a tuning log, on ``cpu``:
    :func:`depthwise_conv_tile`, one channel block, and the thread pool for kernels of
    at least :data:`DEPTHWISE_PARALLEL_MIN_VECTOR_MULADDS`."""
    _, _, _, width, block = conv.shape
    kernel = [int(iv.extent) for iv in conv.op.reduce_axis]
    # the compute carries its workload (for tuning), strides included
    stride = int((conv.op.attrs.get("blocked_conv") or {}).get("strides", (1, 1))[1])
    columns, unroll = depthwise_conv_tile(width, kernel, stride,
                                          block * np.dtype(conv.dtype).itemsize, cpu)
    vector_muladds = (int(np.prod(conv.shape)) * int(np.prod(kernel))
                      // vector_lanes(conv.dtype, cpu))
    return DepthwiseConvTiles(columns, 1, unroll,
                              vector_muladds >= DEPTHWISE_PARALLEL_MIN_VECTOR_MULADDS)


def schedule_depthwise_conv2d_nchwc(schedule: te.Schedule, conv: te.Tensor,
                                    epilogue: te.Tensor | None = None,
                                    chain: Sequence[te.Tensor] = (),
                                    tiles: DepthwiseConvTiles = DepthwiseConvTiles(),
                                    *, cpu: CPUDescription) -> None:
    """A register-tiled CPU schedule of a blocked depthwise convolution
    ``conv[n, c, y, x, b]`` (``ConvNCHWc`` with ``group`` = channels: reduced over kernel
    rows and columns only, each channel reading its own input channel).

    Each tile is one output row segment of ``tiles.columns`` pixels by
    ``tiles.channel_blocks`` channel blocks, one accumulator vector per pixel and
    block, updated by multiply-adds of input vectors (contiguous whatever the stride)
    by the kernel's weight vectors. With ``tiles.unroll_window`` the tile is one
    straight run of them, in which LLVM keeps the weights in registers and loads each
    input vector once where neighbouring taps of neighbouring pixels read the same one
    (stride 1); padding is read in place (on AVX-512 a padded read is a masked load,
    not a branch). Rows of tiles run in the thread pool when ``tiles.parallel``.
    Unset fields take :func:`default_depthwise_conv_tiles`.

    ``epilogue`` and ``chain`` as in :func:`schedule_conv2d_nchw`: the function's
    elementwise tail, finished from registers in each tile."""
    stage = schedule[conv]
    if len(stage.op.axis) != 5 or len(stage.op.reduce_axis) != 2:
        raise CompileError(f"schedule_depthwise_conv2d_nchwc: {conv.name!r} is not a blocked "
                           "depthwise conv2d (5 output axes, 2 reduction axes)")
    if tiles.channel_blocks < 1 or conv.shape[1] % tiles.channel_blocks:
        raise CompileError(f"schedule_depthwise_conv2d_nchwc: {tiles.channel_blocks} channel "
                           f"blocks per tile do not divide {conv.shape[1]}")
    default = default_depthwise_conv_tiles(conv, cpu)
    columns = min(tiles.columns or default.columns, conv.shape[3])
    unroll = default.unroll_window if tiles.unroll_window is None else tiles.unroll_window
    parallel = default.parallel if tiles.parallel is None else tiles.parallel
    _schedule_conv_data(schedule, reads_of(stage.body)[0], cpu)
    if epilogue is None:
        local, outer = schedule.cache_write(conv, "local"), conv
    else:
        local, outer = conv, epilogue
    n, c, y, x, block = schedule[outer].op.axis
    c_outer, c_inner = schedule[outer].split(c, factor=tiles.channel_blocks)
    x_outer, x_inner = schedule[outer].split(x, factor=columns)
    schedule[outer].reorder(n, c_outer, y, x_outer, c_inner, x_inner, block)
    rows = schedule[outer].fuse(n, c_outer, y)
    if parallel:
        schedule[outer].parallel(rows)
    schedule[outer].unroll(c_inner)
    schedule[outer].unroll(x_inner)
    schedule[outer].vectorize(block)
    _compute_tile_stages(schedule, [local, *chain], outer, x_outer)
    for stage_tensor in chain:
        _, blocks_axis, _, columns_axis, block_axis = schedule[stage_tensor].op.axis
        schedule[stage_tensor].unroll(blocks_axis)
        schedule[stage_tensor].unroll(columns_axis)
        schedule[stage_tensor].vectorize(block_axis)
    ln, lc, ly, lx, lb = schedule[local].op.axis
    ry, rx = schedule[local].op.reduce_axis
    schedule[local].reorder(ln, ly, ry, rx, lc, lx, lb)
    # the window by LLVM (its copies index the weights by constants once LLVM unrolls,
    # and LLVM keeps them in registers): the TIR keeps one tap, so the passes after the
    # unroll do not walk every tap of every column
    for axis in (ry, rx) if unroll else ():
        schedule[local].unroll(axis, explicit=False)
    for axis in (lc, lx):
        schedule[local].unroll(axis)
    schedule[local].vectorize(lb)


