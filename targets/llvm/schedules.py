"""CPU schedules of the LLVM target.

``pack_matmul`` rewrites the compute library's plain product to read B through column
panels one register tile wide (so the micro-kernel reads B contiguously): packing is
this target's decision, taken before scheduling. ``schedule_matmul`` gives the product
a register-tiled, vectorized, parallel schedule: each (row tile, column panel)
accumulates in a local ``tile_rows() x panel`` buffer that LLVM keeps in vector
registers, with one FMA per vector per step of the reduction, and can finish each tile
with the function's elementwise epilogue; a constant B is packed once, by NumPy, when
the kernel is built (:func:`pack_columns`, :func:`use_prepacked`). ``schedule_conv2d_nchw``
tiles a direct convolution the same way, over output channels and output columns
(grouped and depthwise ones too), and can finish each tile with the function's
elementwise epilogue.

``schedule_injective`` runs an elementwise/injective stage as one flat loop cut into
vectors (and into parallel chunks when it is large); ``schedule_reduction`` runs the
output points of a reduction in parallel, each reduced by an inner loop that LLVM
vectorizes (float reductions are reassociable).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from heterocc import te
from heterocc.compute.nn import matmul as plain_matmul
from heterocc.errors import CompileError
from heterocc.te.schedule_reads import reads_of
from heterocc.te.tensor import Reduce, TensorLoad
from heterocc.tir import expr as tx

from .cpu import CPUDescription, active_cpu

#: the tuned panel width of a 2-D product ``(m, n, k, dtype)``, or None for the default
PanelChoice = Callable[[int, int, int, str], "int | None"]

#: elements below which a loop is not worth waking the thread pool for.
PARALLEL_MIN_ELEMENTS = 1 << 14

#: vector registers per row of a matmul register tile: one panel of B (:func:`panel_width`)
PANEL_VECTORS = 2
#: parallel tasks per core that a schedule leaves when it could make fewer, larger ones:
#: the runtime's chunks per thread (``CHUNKS_PER_THREAD`` in ``runtime.py``), so that a
#: core slowed by another process leaves its share to the others
TASKS_PER_CORE = 4
#: registers a convolution's register tile leaves for operands (weight vectors, the
#: input's broadcast, addresses)
OPERAND_REGISTERS = 4


def _cpu(cpu: CPUDescription | None) -> CPUDescription:
    """The description to tile for: ``cpu``, else the one being compiled for."""
    return cpu or active_cpu()


def vector_lanes(dtype: str, cpu: CPUDescription | None = None) -> int:
    """Lanes of one vector register of ``dtype`` on ``cpu`` (default: the active CPU)."""
    return _cpu(cpu).vector_lanes(dtype)


def _broadcast_registers(description: CPUDescription) -> int:
    """Vector registers that A's broadcast elements hold during a matmul register
    tile's reduction step: one on x86 (AVX-512 folds the broadcast into the FMA's memory
    operand, AVX2 broadcasts one row's element at a time), three on AArch64 (NEON
    multiplies by a lane of a register, and LLVM loads the next rows' elements ahead:
    14 two-vector rows spill there, 13 do not)."""
    return 3 if description.arch == "aarch64" else 1


def tile_rows(cpu: CPUDescription | None = None, rows: int | None = None,
              panel_vectors: int = PANEL_VECTORS) -> int:
    """Rows of C per matmul register tile on ``cpu`` (default: the active CPU): the most
    rows whose accumulators (``panel_vectors`` vector registers per row: a panel of B)
    fit in the vector registers beside one reduction step's operands (the panel's
    vectors of B and A's broadcast elements, :func:`_broadcast_registers`): 14 rows of
    a two-vector panel with AVX-512's 32 registers, 13 with NEON's 32, 6 with AVX2's 16
    (the 6x16 tile).

    Given ``rows``, the rows of C: the fewest tiles of at most that many that cover
    them, each as narrow as that count allows (:func:`even_tiles`: 64 rows in 5 tiles
    of 13, not 4 of 14 and a tail of 8; 1024 in 14s, a tail of 2)."""
    description = _cpu(cpu)
    free = (description.vector_registers - panel_vectors
            - _broadcast_registers(description))
    limit = max(1, free // panel_vectors)
    return limit if rows is None else even_tiles(rows, limit)


def even_tiles(extent: int, limit: int) -> int:
    """The tile size that covers ``extent`` in the fewest tiles of at most ``limit``,
    each as small as that count allows: a tail tile costs less than the extra tiles
    that a divisor of ``extent`` would take."""
    limit = max(1, min(extent, limit))
    return -(-extent // -(-extent // limit))


def schedule_injective(schedule: te.Schedule, tensor: te.Tensor,
                       cpu: CPUDescription | None = None) -> None:
    """Fuse all axes of ``tensor``'s stage, vectorize by register width, and run chunks
    in parallel when there are enough elements."""
    stage = schedule[tensor]
    axes = list(stage.op.axis)
    if not axes:
        return
    flat = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    size = int(np.prod(tensor.shape))
    outer, lanes = stage.split(flat, factor=vector_lanes(tensor.dtype, cpu))
    stage.vectorize(lanes)
    if size >= PARALLEL_MIN_ELEMENTS:
        stage.parallel(outer)


def schedule_rows(schedule: te.Schedule, tensor: te.Tensor,
                  cpu: CPUDescription | None = None, serial_axes: int = 0) -> None:
    """Run ``tensor``'s stage row by row: every axis but the last fused (in parallel when
    there are enough elements), the last cut into vectors. For a stage whose flat index
    would need vector division to recover its coordinates (a phase-split copy).
    ``serial_axes``: that many axes before the last stay serial loops inside each
    parallel row instead of being fused into it."""
    stage = schedule[tensor]
    *axes, columns = stage.op.axis
    rows = axes[:len(axes) - serial_axes]
    outer, lanes = stage.split(columns, factor=min(vector_lanes(tensor.dtype, cpu),
                                                   tensor.shape[-1]))
    stage.vectorize(lanes)
    if rows and int(np.prod(tensor.shape)) >= PARALLEL_MIN_ELEMENTS:
        stage.parallel(stage.fuse(*rows) if len(rows) > 1 else rows[0])


def schedule_reduction(schedule: te.Schedule, tensor: te.Tensor) -> None:
    """Run the output points of reduction ``tensor`` in parallel (when there are many
    and the reduction is large), each reduced by its inner loops."""
    stage = schedule[tensor]
    axes = list(stage.op.axis)
    if not axes:
        return
    flat = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    work = int(np.prod(tensor.shape)) * int(np.prod([iv.extent for iv in stage.reduce_axis]))
    if work >= PARALLEL_MIN_ELEMENTS and int(np.prod(tensor.shape)) > 1:
        stage.parallel(flat)


#: output channels of one conv2d register tile with 32 vector registers (one accumulator
#: vector each; half as many with 16 registers, :func:`conv_tile_channels`).
CONV_TILE_CHANNELS = 16
#: output channels of one tile when each reads its own input channel (depthwise): no
#: data vector is shared, so more channels only add code, not reuse.
DEPTHWISE_TILE_CHANNELS = 4


def conv_tile_columns(width: int, dtype: str = "float32",
                      cpu: CPUDescription | None = None) -> int:
    """Output columns per conv2d register tile: one vector, or the whole row when it
    is narrower. (Splitting a wide row by a non-power-of-two divisor to avoid the tail
    measured slower: LLVM splits such vectors into uneven parts.)"""
    return min(width, vector_lanes(dtype, cpu))


def conv_tile_channels(cpu: CPUDescription | None = None) -> int:
    """Output channels (one accumulator vector each) of a conv2d register tile:
    :data:`CONV_TILE_CHANNELS` with 32 vector registers, in proportion with fewer."""
    return max(1, CONV_TILE_CHANNELS * _cpu(cpu).vector_registers // 32)


def _schedule_conv_data(schedule: te.Schedule, data: te.Tensor, serial_axes: int = 0) -> None:
    """Materialized copies (``keep``) of a convolution's input are computed ahead row by
    row (``serial_axes`` as in :func:`schedule_rows`), and the stages they read likewise;
    any other stage is inlined."""
    if not isinstance(data.op, te.ComputeOp):
        return
    if not data.op.attrs.get("keep"):
        schedule[data].compute_inline()
        return
    schedule_rows(schedule, data, serial_axes=serial_axes)
    for source in reads_of(schedule[data].body):
        _schedule_conv_data(schedule, source)


def _compute_tile_stages(schedule: te.Schedule, tile_stages: list[te.Tensor],
                         outer: te.Tensor, tile_loop) -> None:
    """Each stage of a convolution's register tile (the sums, then the epilogue chain)
    computed at its reader, in registers: the last at ``outer``'s ``tile_loop``, the
    others over the whole region their reader needs."""
    schedule[tile_stages[-1]].compute_at(schedule[outer], tile_loop)
    for producer, reader in zip(tile_stages, tile_stages[1:]):
        schedule[producer].compute_at(schedule[reader], schedule[reader].op.axis[0])
    for stage_tensor in tile_stages:
        schedule[stage_tensor].set_scope("local")


def schedule_conv2d_nchw(schedule: te.Schedule, conv: te.Tensor,
                         epilogue: te.Tensor | None = None,
                         chain: Sequence[te.Tensor] = (),
                         cpu: CPUDescription | None = None) -> None:
    """A register-tiled CPU schedule of a direct NCHW convolution: ``conv[n, k, y, x]``
    a sum over reduction axes (channel, kernel row, kernel column) of a data tensor
    (read first: the input, an inlined padding stage, or a materialized copy, which is
    computed ahead in parallel) times the weights.

    Each tile of :func:`conv_tile_channels` output channels by a row segment of output
    columns (one vector of ``cpu``) accumulates in registers: one vector of data shared
    by the channels of a group, one broadcast weight per channel, one FMA each. Rows of
    tiles run in parallel.

    ``epilogue``, when given, is the function's output: an elementwise stage of the
    convolution's shape that is its only reader (bias, residual add, activation),
    through the elementwise stages ``chain`` (in order, each read only by the next).
    The tiles are then laid out on the epilogue, and each tile's sums are finished by
    the chain and the epilogue straight from registers instead of in a second pass over
    memory. The chain's stages are computed per tile rather than inlined so that a
    lane-invariant load (a per-channel bias) is not read under a vector select (an
    activation), which the TIR vectorizer refuses."""
    stage = schedule[conv]
    if len(stage.op.axis) != 4 or len(stage.op.reduce_axis) != 3:
        raise CompileError(f"schedule_conv2d_nchw: {conv.name!r} is not an NCHW conv2d "
                           "(4 output axes, 3 reduction axes)")
    _schedule_conv_data(schedule, reads_of(stage.body)[0])
    if epilogue is None:
        local, outer = schedule.cache_write(conv, "local"), conv
    else:
        local, outer = conv, epilogue
    n, k, y, x = schedule[outer].op.axis
    depthwise = stage.op.reduce_axis[0].extent == 1
    k_outer, k_inner = schedule[outer].split(
        k, factor=DEPTHWISE_TILE_CHANNELS if depthwise else conv_tile_channels(cpu))
    x_outer, x_inner = schedule[outer].split(
        x, factor=conv_tile_columns(conv.shape[3], conv.dtype, cpu))
    schedule[outer].reorder(n, k_outer, y, x_outer, k_inner, x_inner)
    schedule[outer].parallel(schedule[outer].fuse(n, k_outer, y))
    schedule[outer].unroll(k_inner)
    schedule[outer].vectorize(x_inner)
    _compute_tile_stages(schedule, [local, *chain], outer, x_outer)
    for stage_tensor in chain:
        _, channels, _, columns = schedule[stage_tensor].op.axis
        schedule[stage_tensor].unroll(channels)
        schedule[stage_tensor].vectorize(columns)
    ln, lk, ly, lx = schedule[local].op.axis
    rc, ry, rx = schedule[local].op.reduce_axis
    schedule[local].reorder(ln, ly, rc, ry, rx, lk, lx)
    schedule[local].unroll(lk)
    schedule[local].vectorize(lx)


#: most output columns of one blocked-conv register tile: one accumulator vector each,
#: leaving registers of the 32 (AVX-512) for the weight vector and the broadcast input.
#: (These caps were measured with 32 registers and a one-vector block; fewer registers
#: or a block of several vectors take fewer columns: :func:`blocked_conv_limits`.)
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
#: measured 20-60% slower), 10 of AVX2's 16 (one two-vector block of 5 columns; 6
#: columns measured 5% slower). LLVM loads each column's broadcast input once per step
#: and keeps it live across the tile's weight vectors, so a tile of several weight
#: vectors needs an accumulator per column and vector, a register per column and one
#: for the weight: 3 x 7 takes 29 of 32 registers, 3 x 8 would take 33 and spills
#: broadcasts to the stack inside its reduction loop (its AVX-512 code stores 59 and
#: reloads 43 vectors there, 3 x 7 none)
BLOCKED_CONV_ACCUMULATOR_SHARE = 2 / 3
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
    ``block_unroll``: channels of a dense convolution's innermost reduction (the
    channels of one input block) unrolled per step, a divisor of the input block;
    None: the whole block (a serial loop over it measured 5-13% slower in-model, on
    AVX-512 and AVX2 code alike: its per-step overhead rivals the tile's multiply-adds);
    1: not unrolled.
    """

    columns: int | None = None
    channel_blocks: int | None = None
    kernel_outer: bool = False
    block_unroll: int | None = None
    reduction_blocks: int | None = None


def _block_vectors(block_bytes: int, description: CPUDescription) -> int:
    """Vector registers one channel block of ``block_bytes`` fills."""
    return max(1, -(-block_bytes // description.vector_bytes))


def dense_conv_channel_blocks(block_bytes: int, cpu: CPUDescription | None = None,
                              blocks: int | None = None) -> int:
    """Output channel blocks of a default dense blocked-conv tile on ``cpu``: the fewest
    that give each broadcast input element :data:`BLOCKED_CONV_WEIGHT_VECTORS` weight
    vectors (two one-vector blocks with AVX-512; one block of 16 floats, two vectors,
    with AVX2; one of four with NEON) and divide ``blocks`` (the output's block count,
    when given), at most :data:`BLOCKED_CONV_MAX_CHANNEL_BLOCKS`; else one."""
    vectors = _block_vectors(block_bytes, _cpu(cpu))
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


def dense_conv_column_limit(channel_blocks: int, block_bytes: int,
                            cpu: CPUDescription | None = None) -> int:
    """The most output columns of a dense blocked-conv tile of ``channel_blocks`` blocks
    of ``block_bytes`` on ``cpu``: a tile feeding each broadcast input element two or
    more weight vectors keeps its accumulators (one per column and weight vector) within
    :data:`BLOCKED_CONV_ACCUMULATOR_SHARE` of the registers, and takes at most
    :data:`BLOCKED_CONV_PAIRED_COLUMNS` columns; a one-vector tile takes as many as the
    registers hold, at most :data:`BLOCKED_CONV_MAX_COLUMNS`."""
    description = _cpu(cpu)
    weights = channel_blocks * _block_vectors(block_bytes, description)
    if weights < BLOCKED_CONV_WEIGHT_VECTORS:
        return min(BLOCKED_CONV_MAX_COLUMNS, _column_budget(block_bytes, description))
    accumulators = int(description.vector_registers * BLOCKED_CONV_ACCUMULATOR_SHARE)
    return max(1, min(BLOCKED_CONV_PAIRED_COLUMNS, accumulators // weights))


def blocked_conv_limits(block_bytes: int, cpu: CPUDescription | None = None
                        ) -> tuple[int, int, int]:
    """``(columns, dense columns, depthwise columns)``: the most output columns of a
    blocked-conv register tile of one channel block, of a dense tile of the channel
    blocks that give two weight vectors per input element (two one-vector blocks, one
    two-vector block: :func:`dense_conv_column_limit`), and of a depthwise one, on
    ``cpu`` for a channel block of ``block_bytes``: the accumulators (one per column and
    vector of the block) fit the registers the operands leave, and never exceed the caps
    measured with 32 registers."""
    description = _cpu(cpu)
    budget = _column_budget(block_bytes, description)
    pair = dense_conv_channel_blocks(block_bytes, description)
    return (min(BLOCKED_CONV_MAX_COLUMNS, budget),
            dense_conv_column_limit(pair, block_bytes, description),
            min(DEPTHWISE_MAX_COLUMNS, budget))


def pointwise_conv_tile(blocks: int, width: int, block_bytes: int,
                        cpu: CPUDescription | None = None) -> tuple[int, int]:
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
    blocks stay one two-vector block over 5 columns (4 in a row of 7)."""
    description = _cpu(cpu)
    vectors = _block_vectors(block_bytes, description)
    accumulators = int(description.vector_registers * BLOCKED_CONV_ACCUMULATOR_SHARE)
    operands = description.vector_registers - accumulators
    best, best_key = (min(width, max(1, accumulators // vectors)), 1), None
    for count in range(1, blocks + 1):
        weights = count * vectors
        if blocks % count or weights > accumulators or weights >= operands:
            continue
        columns = even_tiles(width, accumulators // weights)
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
                               cpu: CPUDescription | None = None,
                               windowed: bool = True) -> tuple[int, int]:
    """``(columns, channel_blocks)`` of a dense blocked convolution's tile without a
    tuning log, for its output shape ``(n, blocks, height, width, block)`` of
    ``itemsize``-byte elements on ``cpu``: with a kernel window (``windowed``, a kernel
    of more than one pixel), :func:`dense_conv_channel_blocks` channel blocks over a
    short row segment (or, when no such count divides the block count, one block over a
    longer one); without one, :func:`pointwise_conv_tile`. A depthwise one's:
    :func:`default_depthwise_conv_tiles`."""
    blocks, width = out_shape[1], out_shape[3]
    block_bytes = out_shape[4] * itemsize
    if not windowed:
        return pointwise_conv_tile(blocks, width, block_bytes, cpu)
    channel_blocks = dense_conv_channel_blocks(block_bytes, cpu, blocks)
    limit = dense_conv_column_limit(channel_blocks, block_bytes, cpu)
    if channel_blocks * _block_vectors(block_bytes, _cpu(cpu)) < BLOCKED_CONV_WEIGHT_VECTORS:
        return min(blocked_conv_columns(width, limit), width), 1
    # the fewest tiles covering the row, evened (56 in tiles of 5 rather than 4 columns:
    # a tail tile costs less than the extra tiles a divisor takes, measured with AVX2's
    # 5-column tiles)
    return even_tiles(width, limit), channel_blocks


def dense_conv_reduction_blocks(out_shape: Sequence[int], reduction: Sequence[int],
                                channel_blocks: int, itemsize: int = 4,
                                cpu: CPUDescription | None = None) -> int:
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
    the L1 together, and the images times the channel block groups (the parallel tasks
    left) keep every core busy. (Weights that fit beside those rows stay in the L1 from
    row to row: chunking MobileNetV2's 160->960 1x1 convolutions at 7x7, 30 KiB of
    weights per three-block tile beside 4 KiB of input rows, measured 10-20% slower
    than not, its rows no longer parallel.)"""
    description = _cpu(cpu)
    input_blocks = reduction[0]
    block_weights = itemsize * out_shape[4] * channel_blocks * math.prod(reduction[1:])
    chunk = max(count for count in range(1, input_blocks + 1) if input_blocks % count == 0
                and (count == 1 or count * block_weights <= description.l1d // 2))
    region = itemsize * channel_blocks * out_shape[2] * out_shape[3] * out_shape[4]
    tasks = out_shape[0] * (out_shape[1] // channel_blocks)
    row_inputs = itemsize * input_blocks * reduction[1] * reduction[3] * out_shape[3]
    if (chunk == input_blocks or input_blocks * block_weights + row_inputs <= description.l1d
            or region + chunk * block_weights > description.l1d
            or tasks < description.num_cores):
        return 0
    return chunk


def _unroll_block_reduction(stage: te.Stage, reduction: list, unroll: int | None,
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
                          cpu: CPUDescription | None = None) -> None:
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
            columns=tiles.columns, channel_blocks=tiles.channel_blocks or 1), cpu)
        return
    if len(stage.op.axis) != 5 or len(stage.op.reduce_axis) != 4:
        raise CompileError(f"schedule_conv2d_nchwc: {conv.name!r} is not a blocked conv2d "
                           "(5 output axes, 4 reduction axes)")
    # the padded copy (n, c, y, x, block) keeps its pixels in a serial loop per row:
    # fused into the parallel loop, each pixel's (short) block vector paid for recovering
    # its row and column by division and for the padding test on both (the 3-channel
    # stems' padded copies took 1.5-2x as long)
    _schedule_conv_data(schedule, reads_of(stage.body)[0], serial_axes=1)
    if epilogue is None:
        local, outer = schedule.cache_write(conv, "local"), conv
    else:
        local, outer = conv, epilogue
    n, ko, y, x, ki = schedule[outer].op.axis
    default_columns, default_blocks = default_blocked_conv_tiles(
        conv.shape, np.dtype(conv.dtype).itemsize, cpu,
        windowed=math.prod(axis.extent for axis in stage.op.reduce_axis[1:3]) > 1)
    columns = tiles.columns or default_columns
    channel_blocks = tiles.channel_blocks or default_blocks
    if conv.shape[1] % channel_blocks:
        raise CompileError(f"schedule_conv2d_nchwc: {channel_blocks} channel blocks per "
                           f"tile do not divide {conv.shape[1]}")
    chunk = tiles.reduction_blocks
    if chunk and tiles.kernel_outer:
        raise CompileError(f"schedule_conv2d_nchwc: {conv.name!r} cannot chunk its input "
                           "channel blocks with the kernel rows and columns outside them")
    if chunk is None and tiles.kernel_outer:
        chunk = 0
    if chunk is None:
        chunk = dense_conv_reduction_blocks(
            conv.shape, [axis.extent for axis in stage.op.reduce_axis], channel_blocks,
            np.dtype(conv.dtype).itemsize, cpu)
    elif chunk and stage.op.reduce_axis[0].extent % chunk:
        raise CompileError(f"schedule_conv2d_nchwc: reduction chunks of {chunk} input "
                           f"channel blocks do not divide {stage.op.reduce_axis[0].extent}")
    columns = min(columns, conv.shape[3])
    ko_outer, ko_inner = schedule[outer].split(ko, factor=channel_blocks)
    x_outer, x_inner = schedule[outer].split(x, factor=columns)
    schedule[outer].reorder(n, ko_outer, y, x_outer, ko_inner, x_inner, ki)
    if chunk:
        image = schedule[outer].fuse(n, ko_outer)
        schedule[outer].parallel(image)
    else:
        schedule[outer].parallel(schedule[outer].fuse(n, ko_outer, y))
    schedule[outer].unroll(ko_inner)
    schedule[outer].unroll(x_inner)
    schedule[outer].vectorize(ki)
    if chunk:
        for stage_tensor in chain:
            schedule[stage_tensor].compute_inline()
        schedule[local].compute_at(schedule[outer], image)
        schedule[local].set_scope("local")
    else:
        _compute_tile_stages(schedule, [local, *chain], outer, x_outer)
    for stage_tensor in () if chunk else chain:
        _, channel_blocks, _, columns_axis, block = schedule[stage_tensor].op.axis
        schedule[stage_tensor].unroll(channel_blocks)
        schedule[stage_tensor].unroll(columns_axis)
        schedule[stage_tensor].vectorize(block)
    ln, lko, ly, lx, lki = schedule[local].op.axis
    reduction = list(schedule[local].op.reduce_axis)
    if tiles.kernel_outer:
        channel_outer, row, column, channel_inner = reduction
        reduction = [row, column, channel_outer, channel_inner]
    reduction = _unroll_block_reduction(schedule[local], reduction, tiles.block_unroll,
                                        conv.name)
    if chunk:
        chunk_outer, chunk_inner = schedule[local].split(reduction[0], factor=chunk)
        lx_outer, lx = schedule[local].split(lx, factor=columns)
        schedule[local].reorder(ln, chunk_outer, ly, lx_outer, chunk_inner, *reduction[1:],
                                lko, lx, lki)
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
                        cpu: CPUDescription | None = None) -> tuple[int, bool]:
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
    over and the accumulators take the registers (:func:`blocked_conv_limits`). Within
    the budget, the widest divisor of the row (:func:`blocked_conv_columns`)."""
    description = _cpu(cpu)
    vectors = max(1, -(-block_bytes // description.vector_bytes))
    free = description.vector_registers - OPERAND_REGISTERS
    shared = (free - int(np.prod(kernel)) * vectors) // vectors
    resident = shared // max(1, stride)
    if resident >= DEPTHWISE_MIN_COLUMNS:
        if width <= shared:
            return width, True
        return min(blocked_conv_columns(width, resident), width), True
    looped = blocked_conv_limits(block_bytes, description)[2]
    return min(blocked_conv_columns(width, looped), width), False


def default_depthwise_conv_tiles(conv: te.Tensor, cpu: CPUDescription | None = None
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
                                    cpu: CPUDescription | None = None) -> None:
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
    _schedule_conv_data(schedule, reads_of(stage.body)[0])
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


def schedule_pool_nchwc(schedule: te.Schedule, pool: te.Tensor,
                        cpu: CPUDescription | None = None) -> None:
    """Pooling of an NCHW[x]c tensor (``pool[n, c, y, x, b]`` reduced over a window of
    rows and columns): rows of output pixels in parallel, each pixel one vector over the
    channel block, reduced over its window with one vector max/add per tap."""
    stage = schedule[pool]
    if len(stage.op.axis) != 5 or len(stage.op.reduce_axis) != 3:
        raise CompileError(f"schedule_pool_nchwc: {pool.name!r} is not a blocked 2-D pool")
    n, c, y, x, block = stage.op.axis
    stage.reorder(n, c, y, x, *stage.op.reduce_axis, block)
    stage.vectorize(block)
    if int(np.prod(pool.shape)) >= PARALLEL_MIN_ELEMENTS:
        stage.parallel(stage.fuse(n, c, y))


def panel_width(dtype: str, cpu: CPUDescription | None = None) -> int:
    """Columns of one packed panel of B: two vector registers of ``dtype`` on ``cpu``."""
    return 2 * vector_lanes(dtype, cpu)


def default_panel(n: int, dtype: str, cpu: CPUDescription | None = None) -> int:
    """The panel width of a product with ``n`` columns on ``cpu``: :func:`panel_width`,
    or fewer whole vectors when ``n`` is narrower (a panel past the last column only adds
    zero-padding to multiply)."""
    lanes = vector_lanes(dtype, cpu)
    return min(panel_width(dtype, cpu), -(-n // lanes) * lanes)


def matmul_tile_rows(m: int, panel: int, dtype: str,
                     cpu: CPUDescription | None = None) -> int:
    """Rows per register tile of :func:`schedule_matmul` for a product of ``m`` rows
    read through panels of ``panel`` columns: :func:`tile_rows` for ``m`` rows and the
    panel's vectors. A panel narrower than :data:`PANEL_VECTORS` vectors (a product
    with few columns) keeps a full panel's rows: every row more costs one load of A per
    multiply-add, which slowed a one-vector panel down (30 rows 25% slower than 8-14)."""
    vectors = max(PANEL_VECTORS, -(-panel // vector_lanes(dtype, cpu)))
    return tile_rows(cpu, m, vectors)


#: multiply-adds (vector FMAs) per iteration of a matmul register tile's reduction loop
#: that unrolling it aims for on x86: each iteration also bumps its pointers and counts
#: and branches, which take issue slots and ALU ports beside the FMAs; unrolled this
#: far, they are a few percent of them. AVX2's 6x16 tile does 12 FMAs a step: unrolled 8
#: times, 1024x1024x1024 ran 4-8% faster (128x768x768, 128x3072x768 likewise; 4 steps
#: gained half that); AVX-512's 14x32 (28 a step, 4 steps) ran as fast or 1-3% faster.
MATMUL_UNROLLED_MULADDS = 96


def reduction_unroll_limit(rows: int, panel: int, dtype: str,
                           cpu: CPUDescription | None = None) -> int:
    """Steps of the reduction that one iteration of a register tile's loop should do,
    for a tile of ``rows`` rows by a panel of ``panel`` columns on ``cpu``: on x86 the
    fewest that reach :data:`MATMUL_UNROLLED_MULADDS`; elsewhere one (on AArch64 LLVM
    loads the next steps' elements of A ahead into registers, and the unrolled 13-row
    NEON tile spilled its accumulators)."""
    description = _cpu(cpu)
    if not description.is_x86:
        return 1
    muladds = rows * -(-panel // vector_lanes(dtype, description))
    return -(-MATMUL_UNROLLED_MULADDS // muladds)


def reduction_steps(extent: int, limit: int) -> int:
    """Steps of a reduction of ``extent`` that one unrolled iteration does: the most, at
    most ``limit``, that divide ``extent`` (no guarded tail)."""
    return max(d for d in range(1, min(limit, extent) + 1) if extent % d == 0)


def unroll_reduction(stage: te.Stage, k, extent: int, limit: int) -> list:
    """Split the reduction loop ``k`` (of ``extent`` steps) of a register tile's
    ``stage`` into iterations of :func:`reduction_steps` steps, unrolled by LLVM;
    returns the loops, outer first, for the caller's reorder (just ``[k]`` for one
    step)."""
    steps = reduction_steps(extent, limit)
    if steps == 1:
        return [k]
    outer, inner = stage.split(k, steps)
    stage.unroll(inner, explicit=False)
    return [outer, inner]


def panel_group(m: int, depth: int, panels: int, panel: int, itemsize: int,
                batch: int = 1, cpu: CPUDescription | None = None) -> int:
    """Column panels per group of :func:`schedule_matmul` (each row tile of A then meets
    a group's panels one after the other, so its rows are read from memory once per
    group, not once per panel) for a product of ``m`` rows, a reduction of ``depth``,
    ``panels`` panels of ``panel`` columns and ``batch`` matrices, on ``cpu``.

    One when A (``m x depth``) and a panel fit in the L2 together: A then stays cached
    from one panel to the next (a BERT layer's [128, 3072] x [3072, 768], 1.9 MiB with
    a panel in a 2 MiB L2, measured 15% slower on two cores in groups of 2). Otherwise
    the most panels that fit in half the L2 (they serve every row tile of A before the
    next group), leaving every core :data:`TASKS_PER_CORE` groups or more, evened over
    the panels (:func:`even_tiles`). 1024x1024x1024 in fp32 on 2 cores with a 2 MiB
    L2: 4 panels of 32 columns per group, 8 groups (A's 4 MiB read 8 times instead of
    32: +10% on one core, +6% on two, measured; groups of 8 were no faster, and a
    core slowed by another process had fewer groups to leave to the other)."""
    description = _cpu(cpu)
    panel_bytes = depth * panel * itemsize
    if m * depth * itemsize + panel_bytes <= description.l2:
        return 1
    group = min(description.l2 // 2 // panel_bytes,
                panels * batch // (TASKS_PER_CORE * description.num_cores))
    return even_tiles(panels, max(1, group))


def _matmul_loads(product: te.Tensor) -> tuple[TensorLoad, TensorLoad] | None:
    """The loads ``(A[..., i, k], B[..., k, j])`` of a plain product
    (``sum(A[..., i, k] * B[..., k, j], k)`` with ``i, j`` its last two axes, as
    ``heterocc.compute.nn.matmul`` makes it), or None when it has another form (a 1-D
    operand, or packed already)."""
    op = product.op
    if (not isinstance(op, te.ComputeOp) or "packed_B" in op.attrs or len(op.axis) < 2):
        return None
    body = op.body
    if not (isinstance(body, Reduce) and body.combiner == "sum" and len(body.axis) == 1
            and isinstance(body.source, tx.Binary) and body.source.op == "mul"):
        return None
    a, b = body.source.a, body.source.b
    if not (isinstance(a, TensorLoad) and isinstance(b, TensorLoad)
            and len(a.indices) >= 2 and len(b.indices) >= 2):
        return None
    i, j = (iv.var for iv in op.axis[-2:])
    k = body.axis[0].var
    if not (a.indices[-2] is i and a.indices[-1] is k
            and b.indices[-2] is k and b.indices[-1] is j):
        return None
    return a, b


def pack_matmul(product: te.Tensor, panel: int | None = None,
                cpu: CPUDescription | None = None,
                panel_of: PanelChoice | None = None) -> bool:
    """Make the CPU's layout of a plain product (``heterocc.compute.nn.matmul``: a sum
    of ``A[..., i, k] * B[..., k, j]``): rewrite ``product`` in place (before any
    schedule is made) to read B
    through a packed copy ``[..., n / panel, k, panel]`` (zero-padded past column n), so
    that :func:`schedule_matmul`'s register tile reads B contiguously. The packed stage is
    recorded as the op's ``packed_B`` attribute.

    The panel is ``panel`` when given, else ``panel_of(m, n, k, dtype)`` for a 2-D
    product when that gives one (the tuning log's best for this shape, which the
    target passes down), else :func:`default_panel`. Returns False, touching nothing,
    for a product of another form (see :func:`_matmul_loads`)."""
    loads = _matmul_loads(product)
    if loads is None:
        return False
    a_load, b_load = loads
    B = b_load.tensor
    depth, n = B.shape[-2:]
    if panel is None and product.ndim == 2 and panel_of is not None:
        panel = panel_of(product.shape[0], n, depth, product.dtype)
    width = panel or default_panel(n, B.dtype, cpu)
    zero = te.const(0, B.dtype)

    def element(*index):
        *batch, p, k, c = index
        column = p * width + c
        return te.if_then_else(column < n, B[(*batch, k, te.minimum(column, n - 1))], zero)

    packed = te.compute((*B.shape[:-2], -(-n // width), depth, width), element,
                        name=f"{product.name}.packed_B", dtype=B.dtype)
    op = product.op
    j, k = op.axis[-1].var, op.body.axis[0].var
    source = a_load * packed[(*b_load.indices[:-2], j // width, k, j % width)]
    product.op = te.ComputeOp(op.name, op.axis, Reduce("sum", source, op.body.axis),
                              {**op.attrs, "packed_B": packed})
    return True


def pack_matmul_rows(product: te.Tensor, rows: int, block: int) -> te.Tensor:
    """Make a 2-D product packed by :func:`pack_matmul` read A through a copy in row
    blocks ``[ceil(m / rows), k / block, rows, block]`` (zero rows past row m): each
    register tile of ``rows`` rows then reads its chunk of ``block`` reduction steps
    from one contiguous ``rows x block`` block. A read in place has its rows a whole
    row of A apart: 4 KiB for a reduction of 1024 fp32, so that the tile's 14 rows all
    fall in one set of a 12-way L1 cache and evict each other (the hand schedule on A
    padded to 1040 columns ran 4-7% faster one-threaded, 1024^3 on AVX-512). Returns
    the copy's stage (the product's ``packed_A`` attribute), for
    :func:`schedule_packed_rows`."""
    op = product.op
    packed_b = op.attrs.get("packed_B") if isinstance(op, te.ComputeOp) else None
    if packed_b is None or product.ndim != 2 or "packed_A" in op.attrs:
        raise CompileError(f"pack_matmul_rows: {product.name!r} is no 2-D product packed "
                           "by pack_matmul (or its A is packed already)")
    a_load = op.body.source.a
    A = a_load.tensor
    m, depth = A.shape
    if A.ndim != 2 or rows < 1 or block < 1 or depth % block:
        raise CompileError(f"pack_matmul_rows: {product.name!r} reads A "
                           f"{list(A.shape)}; blocks of {rows} rows by {block} of its "
                           f"{depth} columns need 2-D A and a block dividing the columns")
    zero = te.const(0, A.dtype)

    def element(tile, chunk, row, step):
        index = tile * rows + row
        return te.if_then_else(index < m, A[te.minimum(index, m - 1), chunk * block + step],
                               zero)

    blocks = te.compute((-(-m // rows), depth // block, rows, block), element,
                        name=f"{product.name}.packed_A", dtype=A.dtype)
    i, k = a_load.indices
    source = blocks[i // rows, k // block, i % rows, k % block] * op.body.source.b
    product.op = te.ComputeOp(op.name, op.axis, Reduce("sum", source, op.body.axis),
                              {**op.attrs, "packed_A": blocks})
    return blocks


def schedule_packed_rows(schedule: te.Schedule, blocks: te.Tensor,
                         cpu: CPUDescription | None = None) -> None:
    """The copy of :func:`pack_matmul_rows` at root: its row tiles in parallel, each
    block's rows copied a vector at a time (where the block is whole vectors)."""
    stage = schedule[blocks]
    stage.compute_root()
    tile, chunk, _, step = stage.op.axis
    lanes = vector_lanes(blocks.dtype, cpu)
    if int(step.extent) % lanes == 0:
        _, lane = stage.split(step, lanes)
        stage.vectorize(lane)
    stage.parallel(stage.fuse(tile, chunk))


def pack_columns(b: np.ndarray, width: int) -> np.ndarray:
    """NumPy's copy of :func:`pack_matmul`'s layout: ``b`` ``[..., k, n]`` as column
    panels ``[..., ceil(n / width), k, width]``, zero-padded past column n. What a
    constant B is packed into once, when its kernel is built (:func:`use_prepacked`)."""
    *batch, depth, n = b.shape
    panels = -(-n // width)
    padded = np.zeros((*batch, depth, panels * width), b.dtype)
    padded[..., :n] = b
    return np.ascontiguousarray(
        np.swapaxes(padded.reshape(*batch, depth, panels, width), -2, -3))


def packed_source(product: te.Tensor) -> te.Tensor | None:
    """The B that a product packed by :func:`pack_matmul` packs (the tensor its packed
    stage reads), or None when it is not packed, or already reads a prepacked copy."""
    packed = product.op.attrs.get("packed_B") if isinstance(product.op, te.ComputeOp) \
        else None
    if packed is None or not isinstance(packed.op, te.ComputeOp):
        return None
    (source,) = {id(t): t for t in reads_of(packed.op.body)}.values()
    return source


def use_prepacked(product: te.Tensor, prepacked: te.Tensor) -> None:
    """Make ``product`` (packed by :func:`pack_matmul`) read B's panels from
    ``prepacked``, a tensor of the packed shape holding :func:`pack_columns` of B (a
    constant packed once, when the kernel is built), instead of packing B itself."""
    op = product.op
    packed = op.attrs["packed_B"]
    if tuple(prepacked.shape) != tuple(packed.shape) or prepacked.dtype != packed.dtype:
        raise CompileError(f"use_prepacked: {product.name!r} reads B packed as "
                           f"{packed.dtype}{list(packed.shape)}, not "
                           f"{prepacked.dtype}{list(prepacked.shape)}")
    a_load, b_load = op.body.source.a, op.body.source.b
    source = a_load * prepacked[tuple(b_load.indices)]
    product.op = te.ComputeOp(op.name, op.axis, Reduce("sum", source, op.body.axis),
                              {**op.attrs, "packed_B": prepacked})


def reachable_computes(outputs: Sequence[te.Tensor]) -> list[te.Tensor]:
    """Every compute stage that computing ``outputs`` runs, each once."""
    seen: dict[int, te.Tensor] = {}
    pending = list(outputs)
    while pending:
        tensor = pending.pop()
        if id(tensor) in seen or not isinstance(tensor.op, te.ComputeOp):
            continue
        seen[id(tensor)] = tensor
        pending += reads_of(tensor.op.body)
    return list(seen.values())


def pack_matmuls(outputs: Sequence[te.Tensor], panel_of: PanelChoice | None = None,
                 cpu: CPUDescription | None = None) -> None:
    """:func:`pack_matmul` on every product that computing ``outputs`` reads: the CPU's
    rewrite of a function's plain computes before it is scheduled (``panel_of``: the
    tuned panel width of a shape, see :func:`pack_matmul`)."""
    for tensor in reachable_computes(outputs):
        pack_matmul(tensor, cpu=cpu, panel_of=panel_of)


def matmul(A: te.Tensor, B: te.Tensor, name: str = "C", panel: int | None = None,
           cpu: CPUDescription | None = None,
           panel_of: PanelChoice | None = None) -> te.Tensor:
    """``A @ B`` for 2-D ``A`` (m, k) and ``B`` (k, n) of one dtype in the CPU's layout:
    the plain product (``heterocc.compute.nn.matmul``) packed by :func:`pack_matmul`
    (``panel``, else ``panel_of``'s choice, else the default panel width)."""
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0] or A.dtype != B.dtype:
        raise CompileError(f"matmul {name!r}: needs A (m, k) and B (k, n) of one dtype, got "
                           f"{A.dtype}{list(A.shape)} and {B.dtype}{list(B.shape)}")
    C = plain_matmul(A, B, name)
    pack_matmul(C, panel, cpu, panel_of)
    return C


def schedule_matmul(schedule: te.Schedule, C: te.Tensor,
                    cpu: CPUDescription | None = None,
                    epilogue: te.Tensor | None = None) -> None:
    """The register-tiled CPU schedule of a product packed by :func:`pack_matmul`: tiles
    of :func:`matmul_tile_rows` rows (of ``cpu``) by one panel accumulate in registers,
    column panels (or groups of them that each row tile meets in turn,
    :func:`panel_group`) and batch axes outermost and in parallel. A product it could not
    pack (a 1-D operand) gets the reduction schedule.

    ``epilogue``, when given, is the function's elementwise tail of the product (see
    ``heterocc.te_target.elementwise_epilogue``: bias, GELU, residual add, with the stages
    between inlined into it): the tiles are then laid out on it, and each tile's sums are
    finished by it straight from registers instead of in a second pass over memory. (The
    inlined stages vary along the vector lanes, the product's columns, so they need not
    be computed per tile as a convolution's per-channel ones are.)"""
    packed = C.op.attrs.get("packed_B")
    if packed is None:
        body = C.op.body if isinstance(C.op, te.ComputeOp) else None
        if not (isinstance(body, Reduce) and body.combiner == "sum"
                and isinstance(body.source, tx.Binary) and body.source.op == "mul"):
            raise CompileError(f"schedule_matmul: {C.name!r} is not a product "
                               "sum(A[..., i, k] * B[..., k, j])")
        schedule_reduction(schedule, C)
        return
    width = packed.shape[-1]
    if isinstance(packed.op, te.ComputeOp):  # else a constant packed at build time
        *pack_outer, _, column = schedule[packed].op.axis
        schedule[packed].parallel(schedule[packed].fuse(*pack_outer) if len(pack_outer) > 1
                                  else pack_outer[0])
        schedule[packed].vectorize(column)
    if epilogue is None:
        local, outer = schedule.cache_write(C, "local"), C
    else:
        local, outer = C, epilogue
        schedule[C].set_scope("local")
    *batch, i, j = schedule[outer].op.axis
    m, n, depth = C.shape[-2], C.shape[-1], packed.shape[-2]
    rows = matmul_tile_rows(m, width, packed.dtype, cpu)
    row_tile, panel_index, row, col = schedule[outer].tile(i, j, rows, width)
    group = panel_group(m, depth, -(-n // width), width, np.dtype(packed.dtype).itemsize,
                        math.prod(C.shape[:-2]), cpu)
    # Column panels (or groups of them) outermost: each thread keeps its panels of B in
    # its own cache while the rows of A stream past (a row tile meeting a group's panels
    # in turn). The batch axes run inside them, in the same parallel loop: a short last
    # panel then starts at one point of that loop, where partitioning splits it off (its
    # own branch of the loop body); with the batch outermost, every panel of every matrix
    # kept the short panel's guard and ran its columns as a short vector and scalars.
    if group > 1:
        group_index, panel_index = schedule[outer].split(panel_index, group)
        schedule[outer].reorder(group_index, *batch, row_tile, panel_index, row, col)
        tile = panel_index
    else:
        group_index = panel_index
        schedule[outer].reorder(panel_index, *batch, row_tile, row, col)
        tile = row_tile
    schedule[outer].parallel(schedule[outer].fuse(group_index, *batch) if batch
                             else group_index)
    # The rows unroll in LLVM (which then keeps the tile's accumulators in registers),
    # not in the TIR: 64 rows' tile of 13 and tail of 12 would be 25 copies of the body
    # (an epilogue's GELU in each) for every TIR pass and the code generator to walk;
    # the machine code is the same.
    schedule[outer].unroll(row, explicit=False)
    ragged = ragged_panel_tail(n, width, packed.dtype, cpu)
    vectorize_panel_columns(schedule[outer], col, ragged, packed.dtype, cpu)
    schedule[local].compute_at(schedule[outer], tile)
    *_, local_row, local_col = schedule[local].op.axis
    (k,) = schedule[local].op.reduce_axis
    reduction = unroll_reduction(schedule[local], k, depth,
                                 reduction_unroll_limit(rows, width, packed.dtype, cpu))
    schedule[local].reorder(*reduction, local_row, local_col)
    schedule[local].unroll(local_row, explicit=False)
    vectorize_panel_columns(schedule[local], local_col, ragged, packed.dtype, cpu)


def ragged_panel_tail(n: int, width: int, dtype: str,
                      cpu: CPUDescription | None = None) -> bool:
    """Whether the last panel of a product of ``n`` columns in panels of ``width``, cut
    short by the guard, is wider than a vector register but no whole number of them
    (20 of 32 lanes on AVX-512). One vector of that width made LLVM scalarize the tile
    and spill its accumulators (512x512x500: 71 GFLOP/s, NumPy 320); a vector at a
    time (:func:`vectorize_panel_columns`), the tail is a whole vector and a short one
    (16 + 4: 253 GFLOP/s). Other tails keep one vector per row: the split costs a
    full panel's tile 4-7% (1024x1024x1000)."""
    lanes, tail = vector_lanes(dtype, cpu), n % width
    return tail > lanes and tail % lanes != 0


def vectorize_panel_columns(stage, columns, ragged: bool, dtype: str,
                            cpu: CPUDescription | None = None) -> None:
    """Vectorize a register tile's loop over a panel's columns: as one vector, or
    (``ragged``, see :func:`ragged_panel_tail`) one register-wide vector at a time,
    the vectors unrolled by LLVM."""
    if ragged:
        vectors, columns = stage.split(columns, vector_lanes(dtype, cpu))
        stage.unroll(vectors, explicit=False)
    stage.vectorize(columns)


def matmul_function(m: int, n: int, k: int, dtype: str = "float32", name: str = "matmul",
                    cpu: CPUDescription | None = None):
    """Placeholders, product and schedule of an (m, k) x (k, n) matmul for ``cpu``
    (default: the active CPU), lowered: returns the PrimFunc taking (A, B, C)."""
    A = te.placeholder((m, k), dtype, "A")
    B = te.placeholder((k, n), dtype, "B")
    C = matmul(A, B, cpu=cpu)
    schedule = te.create_schedule(C)
    schedule_matmul(schedule, C, cpu)
    return te.lower(schedule, [A, B, C], name=name)
