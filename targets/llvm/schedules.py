"""CPU schedules of the LLVM target.

``matmul`` packs B into column panels one register tile wide (so the micro-kernel
reads B contiguously) and ``schedule_matmul`` gives the product a register-tiled,
vectorized, parallel schedule: each (row tile, column panel) accumulates in a local
``TILE_ROWS x panel`` buffer that LLVM keeps in vector registers, with one FMA per
vector per step of the reduction. ``schedule_conv2d_nchw`` tiles a direct convolution
the same way, over output channels and output columns (grouped and depthwise ones too),
and can finish each tile with the function's elementwise epilogue.

``schedule_injective`` runs an elementwise/injective stage as one flat loop cut into
vectors (and into parallel chunks when it is large); ``schedule_reduction`` runs the
output points of a reduction in parallel, each reduced by an inner loop that LLVM
vectorizes (float reductions are reassociable).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from heterocc import te
from heterocc.errors import CompileError
from heterocc.te.schedule_reads import reads_of

#: elements below which a loop is not worth waking the thread pool for.
PARALLEL_MIN_ELEMENTS = 1 << 14

#: rows of C per register tile.
TILE_ROWS = 8
#: bytes of one vector register (AVX-512); a column panel is two vectors wide.
VECTOR_BYTES = 64


def vector_lanes(dtype: str) -> int:
    """Lanes of one vector register of ``dtype``."""
    return max(VECTOR_BYTES // max(np.dtype(dtype).itemsize, 1), 1)


def schedule_injective(schedule: te.Schedule, tensor: te.Tensor) -> None:
    """Fuse all axes of ``tensor``'s stage, vectorize by register width, and run chunks
    in parallel when there are enough elements."""
    stage = schedule[tensor]
    axes = list(stage.op.axis)
    if not axes:
        return
    flat = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    size = int(np.prod(tensor.shape))
    outer, lanes = stage.split(flat, factor=vector_lanes(tensor.dtype))
    stage.vectorize(lanes)
    if size >= PARALLEL_MIN_ELEMENTS:
        stage.parallel(outer)


def schedule_rows(schedule: te.Schedule, tensor: te.Tensor) -> None:
    """Run ``tensor``'s stage row by row: every axis but the last fused (in parallel when
    there are enough elements), the last cut into vectors. For a stage whose flat index
    would need vector division to recover its coordinates (a phase-split copy)."""
    stage = schedule[tensor]
    *rows, columns = stage.op.axis
    outer, lanes = stage.split(columns, factor=min(vector_lanes(tensor.dtype),
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


#: output channels of one conv2d register tile, and the most output columns (one vector).
CONV_TILE_CHANNELS = 16
CONV_TILE_COLUMNS = 16
#: output channels of one tile when each reads its own input channel (depthwise): no
#: data vector is shared, so more channels only add code, not reuse.
DEPTHWISE_TILE_CHANNELS = 4


def conv_tile_columns(width: int) -> int:
    """Output columns per conv2d register tile: one vector, or the whole row when it
    is narrower. (Splitting a wide row by a non-power-of-two divisor to avoid the tail
    measured slower: LLVM splits such vectors into uneven parts.)"""
    return min(width, CONV_TILE_COLUMNS)


def _schedule_conv_data(schedule: te.Schedule, data: te.Tensor) -> None:
    """Materialized copies (``keep``) of a convolution's input are computed ahead row by
    row, and the stages they read likewise; any other stage is inlined."""
    if not isinstance(data.op, te.ComputeOp):
        return
    if not data.op.attrs.get("keep"):
        schedule[data].compute_inline()
        return
    schedule_rows(schedule, data)
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
                         chain: Sequence[te.Tensor] = ()) -> None:
    """A register-tiled CPU schedule of a direct NCHW convolution: ``conv[n, k, y, x]``
    a sum over reduction axes (channel, kernel row, kernel column) of a data tensor
    (read first: the input, an inlined padding stage, or a materialized copy, which is
    computed ahead in parallel) times the weights.

    Each tile of ``CONV_TILE_CHANNELS`` output channels by a row segment of output
    columns accumulates in registers: one vector of data shared by the channels of a
    group, one broadcast weight per channel, one FMA each. Rows of tiles run in parallel.

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
        k, factor=DEPTHWISE_TILE_CHANNELS if depthwise else CONV_TILE_CHANNELS)
    x_outer, x_inner = schedule[outer].split(x, factor=conv_tile_columns(conv.shape[3]))
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
BLOCKED_CONV_MAX_COLUMNS = 28
#: output channel blocks of a default dense tile, and its most columns: two weight vectors
#: per broadcast input element measured 7-31% faster than one block of 28 columns on
#: ResNet-18's convolutions (and was the tuner's choice on almost all of them)
BLOCKED_CONV_CHANNEL_BLOCKS = 2
BLOCKED_CONV_PAIRED_COLUMNS = 8
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
    blocks per tile (each broadcast input element then feeds that many weight vectors);
    it must divide the number of blocks. None: :func:`default_blocked_conv_tiles`.
    ``kernel_outer``: a dense convolution's reduction runs over kernel rows and columns
    outside the input channel blocks (default: the channel blocks outermost).
    """

    columns: int | None = None
    channel_blocks: int | None = None
    kernel_outer: bool = False


def default_blocked_conv_tiles(out_shape: Sequence[int], depthwise: bool) -> tuple[int, int]:
    """``(columns, channel_blocks)`` of a blocked convolution's tile without a tuning log,
    for its output shape ``(n, blocks, height, width, block)``: a dense one pairs two
    channel blocks (when their number is even) over a short row segment, a depthwise one
    (whose every multiply-add loads its own input) takes one block over a longer one."""
    blocks, width = out_shape[1], out_shape[3]
    if depthwise or blocks % BLOCKED_CONV_CHANNEL_BLOCKS:
        limit = DEPTHWISE_MAX_COLUMNS if depthwise else BLOCKED_CONV_MAX_COLUMNS
        return min(blocked_conv_columns(width, limit), width), 1
    return (min(blocked_conv_columns(width, BLOCKED_CONV_PAIRED_COLUMNS), width),
            BLOCKED_CONV_CHANNEL_BLOCKS)


def schedule_conv2d_nchwc(schedule: te.Schedule, conv: te.Tensor,
                          epilogue: te.Tensor | None = None,
                          chain: Sequence[te.Tensor] = (),
                          tiles: BlockedConvTiles = BlockedConvTiles()) -> None:
    """A register-tiled CPU schedule of a blocked convolution ``conv[n, ko, y, x, ki]``
    (NCHW[x]c output, ``ki`` the output channel block): each tile is one output row
    segment of ``tiles.columns`` pixels by one channel block, one accumulator vector per
    pixel, reduced over (input channel blocks, kernel rows, kernel columns, channels in
    a block) with one multiply-add of a weight vector per pixel and step. Tiles of one
    (image, channel block, row) run in parallel.

    ``epilogue`` and ``chain`` as in :func:`schedule_conv2d_nchw`: the function's
    elementwise tail, finished from registers in each tile."""
    stage = schedule[conv]
    if len(stage.op.axis) != 5 or len(stage.op.reduce_axis) not in (2, 4):
        raise CompileError(f"schedule_conv2d_nchwc: {conv.name!r} is not a blocked conv2d "
                           "(5 output axes, 2 or 4 reduction axes)")
    _schedule_conv_data(schedule, reads_of(stage.body)[0])
    if epilogue is None:
        local, outer = schedule.cache_write(conv, "local"), conv
    else:
        local, outer = conv, epilogue
    n, ko, y, x, ki = schedule[outer].op.axis
    depthwise = len(stage.op.reduce_axis) == 2
    default_columns, default_blocks = default_blocked_conv_tiles(conv.shape, depthwise)
    columns = tiles.columns or default_columns
    channel_blocks = tiles.channel_blocks or default_blocks
    if conv.shape[1] % channel_blocks:
        raise CompileError(f"schedule_conv2d_nchwc: {channel_blocks} channel blocks per "
                           f"tile do not divide {conv.shape[1]}")
    ko_outer, ko_inner = schedule[outer].split(ko, factor=channel_blocks)
    x_outer, x_inner = schedule[outer].split(x, factor=min(columns, conv.shape[3]))
    schedule[outer].reorder(n, ko_outer, y, x_outer, ko_inner, x_inner, ki)
    schedule[outer].parallel(schedule[outer].fuse(n, ko_outer, y))
    schedule[outer].unroll(ko_inner)
    schedule[outer].unroll(x_inner)
    schedule[outer].vectorize(ki)
    _compute_tile_stages(schedule, [local, *chain], outer, x_outer)
    for stage_tensor in chain:
        _, channel_blocks, _, columns_axis, block = schedule[stage_tensor].op.axis
        schedule[stage_tensor].unroll(channel_blocks)
        schedule[stage_tensor].unroll(columns_axis)
        schedule[stage_tensor].vectorize(block)
    ln, lko, ly, lx, lki = schedule[local].op.axis
    reduction = list(schedule[local].op.reduce_axis)
    if tiles.kernel_outer and not depthwise:
        channel_outer, row, column, channel_inner = reduction
        reduction = [row, column, channel_outer, channel_inner]
    schedule[local].reorder(ln, ly, *reduction, lko, lx, lki)
    schedule[local].unroll(lko)
    schedule[local].unroll(lx)
    schedule[local].vectorize(lki)


def schedule_pool_nchwc(schedule: te.Schedule, pool: te.Tensor) -> None:
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


def panel_width(dtype: str) -> int:
    """Columns of one packed panel of B: two vector registers of ``dtype``."""
    return 2 * VECTOR_BYTES // np.dtype(dtype).itemsize


def matmul(A: te.Tensor, B: te.Tensor, name: str = "C", panel: int | None = None
           ) -> te.Tensor:
    """``A @ B`` for 2-D ``A`` (m, k) and ``B`` (k, n) of one dtype, reading B through a
    packed copy ``[n / panel, k, panel]`` (zero-padded past column n). The panel is
    ``panel`` when given, else the applied tuning log's best for this shape (see
    ``heterocc.tuning.apply``), else :func:`panel_width`."""
    from .tuning import matmul_panel  # the tuning templates build on this module

    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0] or A.dtype != B.dtype:
        raise CompileError(f"matmul {name!r}: needs A (m, k) and B (k, n) of one dtype, got "
                           f"{A.dtype}{list(A.shape)} and {B.dtype}{list(B.shape)}")
    (m, depth), n = A.shape, B.shape[1]
    width = panel or matmul_panel(m, n, depth, A.dtype) or panel_width(A.dtype)
    panels = -(-n // width)
    packed = te.compute(
        (panels, depth, width),
        lambda p, k, c: te.if_then_else(p * width + c < n,
                                        B[k, te.minimum(p * width + c, n - 1)],
                                        te.const(0, A.dtype)),
        name=f"{name}.packed_B")
    k = te.reduce_axis(depth, "k")
    return te.compute((m, n), lambda i, j: te.sum(A[i, k] * packed[j // width, k, j % width],
                                                  axis=k),
                      name=name, attrs={"packed_B": packed})


def schedule_matmul(schedule: te.Schedule, C: te.Tensor) -> None:
    """The register-tiled CPU schedule of a tensor made by :func:`matmul`."""
    packed = C.op.attrs.get("packed_B")
    if packed is None:
        raise CompileError(f"schedule_matmul: {C.name!r} was not made by matmul()")
    width = packed.shape[-1]
    panel, _, column = schedule[packed].op.axis
    schedule[packed].parallel(panel)
    schedule[packed].vectorize(column)
    local = schedule.cache_write(C, "local")
    i, j = schedule[C].op.axis
    row_tile, panel_index, row, col = schedule[C].tile(i, j, TILE_ROWS, width)
    # Column panels outermost: each thread keeps its panels of B in its own cache while
    # the rows of A stream past.
    schedule[C].reorder(panel_index, row_tile, row, col)
    schedule[C].parallel(panel_index)
    schedule[C].unroll(row)
    schedule[C].vectorize(col)
    schedule[local].compute_at(schedule[C], row_tile)
    local_row, local_col = schedule[local].op.axis
    (k,) = schedule[local].op.reduce_axis
    schedule[local].reorder(k, local_row, local_col)
    schedule[local].unroll(local_row)
    schedule[local].vectorize(local_col)


def matmul_function(m: int, n: int, k: int, dtype: str = "float32", name: str = "matmul"):
    """Placeholders, product and schedule of an (m, k) x (k, n) matmul, lowered:
    returns the PrimFunc taking (A, B, C)."""
    A = te.placeholder((m, k), dtype, "A")
    B = te.placeholder((k, n), dtype, "B")
    C = matmul(A, B)
    schedule = te.create_schedule(C)
    schedule_matmul(schedule, C)
    return te.lower(schedule, [A, B, C], name=name)
