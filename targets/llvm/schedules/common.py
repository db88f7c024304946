"""What every CPU schedule shares: tile sizes derived from the CPU description (vector
lanes, register tiles), and the schedules of stages that are not anchors of their own
kind: ``schedule_injective`` (one flat loop cut into vectors, and into parallel chunks
when it is large), ``schedule_rows`` (row by row, for a stage whose flat index would need
vector division) and ``schedule_reduction`` (output points in parallel, each reduced by
an inner loop LLVM vectorizes)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from heterocc.sdk import te

from ..cpu import CPUDescription

#: the tuned panel width of a 2-D product ``(m, n, k, dtype)``, or None for the default
PanelChoice = Callable[[int, int, int, str], "int | None"]

#: elements below which a loop is not worth waking the thread pool for.
PARALLEL_MIN_ELEMENTS = 1 << 14

#: fewest vector registers per row of a matmul register tile that its rows are sized for:
#: a product narrower than :func:`panel_vectors` takes a panel of its own width, with the
#: rows of this many vectors (:func:`~.matmul.matmul_tile_rows`)
PANEL_VECTORS = 2
#: parallel tasks per core that a schedule leaves when it could make fewer, larger ones:
#: the runtime's chunks per thread (``CHUNKS_PER_THREAD`` in ``runtime.py``), so that a
#: core slowed by another process leaves its share to the others
TASKS_PER_CORE = 4
#: registers a convolution's register tile leaves for operands (weight vectors, the
#: input's broadcast, addresses)
OPERAND_REGISTERS = 4


def vector_lanes(dtype: str, cpu: CPUDescription) -> int:
    """Lanes of one vector register of ``dtype`` on ``cpu``."""
    return cpu.vector_lanes(dtype)


def _broadcast_registers(description: CPUDescription) -> int:
    """Vector registers that A's broadcast elements hold during a matmul register
    tile's reduction step: one on x86 (AVX-512 folds the broadcast into the FMA's memory
    operand, AVX2 broadcasts one row's element at a time), three on AArch64 (NEON
    multiplies by a lane of a register, and LLVM loads the next rows' elements ahead:
    14 two-vector rows spill there, 13 do not)."""
    return 3 if description.arch == "aarch64" else 1


def tile_rows(cpu: CPUDescription, rows: int | None = None,
              panel_vectors: int = PANEL_VECTORS) -> int:
    """Rows of C per matmul register tile on ``cpu``: the most
    rows whose accumulators (``panel_vectors`` vector registers per row: a panel of B)
    fit in the vector registers beside one reduction step's operands (the panel's
    vectors of B and A's broadcast elements, :func:`_broadcast_registers`): 14 rows of
    a two-vector panel with AVX-512's 32 registers, 13 with NEON's 32, 6 with AVX2's 16
    (the 6x16 tile).

    Given ``rows``, the rows of C: the fewest tiles of at most that many that cover
    them, each as narrow as that count allows (:func:`even_tiles`: 64 rows in 5 tiles
    of 13, not 4 of 14 and a tail of 8; 1024 in 14s, a tail of 2)."""
    description = cpu
    free = (description.vector_registers - panel_vectors
            - _broadcast_registers(description))
    limit = max(1, free // panel_vectors)
    return limit if rows is None else even_tiles(rows, limit)


def panel_vectors(cpu: CPUDescription) -> int:
    """Vector registers per row of a matmul register tile on ``cpu`` (the width of one
    packed panel of B): of the powers of two from :data:`PANEL_VECTORS`, the one whose
    tile (:func:`tile_rows` rows) loads the fewest vectors per multiply-add, each step
    loading the panel's vectors of B and one element of A per row, multiplying every
    pair: (rows + vectors) / (rows x vectors); the narrower on a tie. With AVX-512's 32
    registers 6 rows of 4 vectors (0.42 loads per multiply-add, 14 rows of 2: 0.57),
    measured 3-24% faster than 14 x 2 on Zen 4 (one thread, alternating, load 8-10:
    1024x1024x1024 0.78, ViT's [197, 3072] x [3072, 768] 0.76, BERT's [128, 3072] x
    [3072, 768] 0.84, [197, 768] x [768, 3072] 0.96, [3136, 384] x [384, 96] 0.93);
    with AVX2's 16 the 6 x 2 tile (0.67; 2 x 4: 0.75); NEON's 32 (3 for A's
    elements) 6 x 4. (Three vectors, 9 rows, would load fewer still but leave LLVM a
    vector of 48 floats per row, which it splits badly: 5x slower.)"""
    best, best_loads = PANEL_VECTORS, None
    vectors = PANEL_VECTORS
    while vectors * 2 <= cpu.vector_registers:
        rows = tile_rows(cpu, None, vectors)
        loads = (rows + vectors) / (rows * vectors)
        if best_loads is None or loads < best_loads:
            best, best_loads = vectors, loads
        vectors *= 2
    return best


def even_tiles(extent: int, limit: int) -> int:
    """The tile size that covers ``extent`` in the fewest tiles of at most ``limit``,
    each as small as that count allows: a tail tile costs less than the extra tiles
    that a divisor of ``extent`` would take."""
    limit = max(1, min(extent, limit))
    return -(-extent // -(-extent // limit))


def schedule_injective(schedule: te.Schedule, tensor: te.Tensor,
                       cpu: CPUDescription) -> None:
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
                  cpu: CPUDescription, serial_axes: int = 0, lanes: int | None = None
                  ) -> None:
    """Run ``tensor``'s stage row by row: every axis but the last fused (in parallel when
    there are enough elements), the last cut into vectors (of ``lanes``; default a
    register's). For a stage whose flat index would need vector division to recover its
    coordinates (a phase-split copy). ``serial_axes``: that many axes before the last
    stay serial loops inside each parallel row instead of being fused into it."""
    stage = schedule[tensor]
    *axes, columns = stage.op.axis
    rows = axes[:len(axes) - serial_axes]
    outer, lanes = stage.split(columns, factor=min(lanes or vector_lanes(tensor.dtype, cpu),
                                                   tensor.shape[-1]))
    stage.vectorize(lanes)
    if rows and int(np.prod(tensor.shape)) >= PARALLEL_MIN_ELEMENTS:
        stage.parallel(stage.fuse(*rows) if len(rows) > 1 else rows[0])


def schedule_reduction(schedule: te.Schedule, tensor: te.Tensor,
                       blocks: Sequence[int] = (), cpu: CPUDescription | None = None) -> None:
    """Run the output points of reduction ``tensor`` in parallel (when there are many
    and the reduction is large), each reduced by its inner loops. ``blocks`` (one per
    reduction axis, :func:`.contiguous.reduction_blocks`): the block each axis is read
    in (1: none). A last axis read in blocks of whole vectors of ``cpu`` is reduced
    per output point into one partial per lane of a block (:func:`_vector_partials`),
    then across the lanes; any other blocked axis is split by its block (the
    divisions that recover its coordinates fold away)."""
    stage = schedule[tensor]
    reduce_axes = list(stage.reduce_axis)
    last_block = blocks[-1] if len(blocks) == len(reduce_axes) and blocks else 1
    partials = None
    if (cpu is not None and last_block > 1 and last_block % vector_lanes(tensor.dtype, cpu) == 0
            and all(b == 1 for b in blocks[:-1]) and stage.op.axis):
        partials = _vector_partials(schedule, tensor, reduce_axes[-1], last_block)
        stage = schedule[tensor]
    else:
        for iv, block in zip(reduce_axes, blocks):
            if block > 1:
                stage.split(iv, factor=block)
    axes = list(stage.op.axis)
    if not axes:
        return
    flat = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    work = int(np.prod(tensor.shape)) * int(np.prod([iv.extent for iv in reduce_axes]))
    if work >= PARALLEL_MIN_ELEMENTS and int(np.prod(tensor.shape)) > 1:
        stage.parallel(flat)
    if partials is not None:
        schedule[partials].compute_at(stage, flat)


#: vectors of output points a step of :func:`schedule_reduction_in_lanes` advances at
#: most: independent sums, so that one addition's latency does not pace the loop
LANE_VECTORS = 4


def schedule_reduction_in_lanes(schedule: te.Schedule, tensor: te.Tensor, axes: int,
                                cpu: CPUDescription) -> None:
    """Reduce ``tensor``'s output points a vector at a time: its last ``axes`` axes fused
    (:func:`.contiguous.lanes_of_kept_axes`: every read has them as its contiguous last
    indices) and cut into up to :data:`LANE_VECTORS` vectors of lanes, the reduction
    loops inside them, each step loading a vector per read. The other axes and the
    vectors' blocks run in parallel when the work is large."""
    stage = schedule[tensor]
    outer_axes, inner_axes = stage.op.axis[:-axes], stage.op.axis[-axes:]
    points = int(np.prod(tensor.shape[-axes:]))
    lanes = vector_lanes(tensor.dtype, cpu)
    vectors = max(1, min(LANE_VECTORS, points // lanes))
    inner = stage.fuse(*inner_axes) if len(inner_axes) > 1 else inner_axes[0]
    block, within = stage.split(inner, factor=vectors * lanes)
    vector, lane = stage.split(within, factor=lanes)
    outer = stage.fuse(*outer_axes, block) if outer_axes else block
    stage.reorder(outer, *stage.op.reduce_axis, vector, lane)
    stage.unroll(vector)
    stage.vectorize(lane)
    work = int(np.prod(tensor.shape)) * int(np.prod([iv.extent for iv in stage.op.reduce_axis]))
    if work >= PARALLEL_MIN_ELEMENTS and int(np.prod(tensor.shape)) > vectors * lanes:
        stage.parallel(outer)


def _vector_partials(schedule: te.Schedule, tensor: te.Tensor, axis: te.IterVar,
                     block: int) -> te.Tensor:
    """``tensor``'s reduction over ``axis`` (read in contiguous blocks of ``block``
    elements) as ``block`` partials per output point (``rfactor``), its blocks
    reduced into vector accumulators, then a sum of the partials (unrolled): where a
    scalar sum of each block's elements left LLVM vectorizing across the output
    points, a gather per element (ConvNeXt's LayerNorm statistics over 96 channels in
    blocks of 16 ran 6x faster so). Returns the partials, to be computed at the
    output point's loop."""
    partials = schedule.rfactor(tensor, axis, block, keep="inner")
    rf_stage = schedule[partials]
    *points, kept = rf_stage.op.axis
    rf_stage.reorder(*points, *rf_stage.op.reduce_axis, kept)
    rf_stage.vectorize(kept)
    schedule[tensor].unroll(schedule[tensor].reduce_axis[-1])
    return partials


