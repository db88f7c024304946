"""GPU schedules of the CUDA target.

* :func:`schedule_injective`: one thread per element (or per vector of 4), the flat index
  cut into blocks of ``THREADS`` threads.
* :func:`schedule_reduction`: one thread per output point, accumulating in a register
  (a ``local`` cache) over the whole reduction; serves pooling and the row reductions
  of softmax and layer norm.
* :func:`schedule_conv2d`: conv2d and depthwise conv2d, one thread per output pixel and
  tile of output channels, the tile's sums in registers.
* :func:`schedule_matmul`: shared-memory tiling with register blocking. A block of
  ``THREADS_Y x THREADS_X`` threads computes a ``block_m x block_n`` tile of C, each
  thread a ``thread_m x thread_n`` register tile; for every ``k_tile`` slice of the
  reduction the block first copies the slices of A and B it needs into shared memory
  (every thread a few elements, as vectors where aligned), then every thread reads
  them from there. Barriers separate the copies from the reads (inserted by the
  pipeline).
* :func:`gpu_rules` / :func:`schedule_for_gpu`: every stage of a fused function, by
  rules that recognise each kind by its compute's structure: injective producers
  inlined (unless the compute library marks them ``keep``: computed once, read many
  times), anchors (matmul, reductions), outputs and kept stages given the schedules
  above.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from heterocc.sdk import CompileError, te
from heterocc.sdk.te_target import ScheduleRule, schedule_by_rules
from heterocc.te.tensor import Reduce, TensorLoad
from heterocc.tir import expr as tx

#: threads per block of the one-dimensional schedules.
THREADS = 256
#: elements of one vectorized access (a float4).
VECTOR_LANES = 4


def _bind_flat(stage: te.Stage, flat: te.IterVar, threads: int) -> te.IterVar:
    """Split ``flat`` into blocks of ``threads`` threads; returns the thread loop."""
    block, thread = stage.split(flat, factor=threads)
    stage.bind(block, "blockIdx.x")
    stage.bind(thread, "threadIdx.x")
    return thread


def _flat_axis(stage: te.Stage) -> te.IterVar | None:
    axes = list(stage.op.axis)
    if not axes:
        return None
    return stage.fuse(*axes) if len(axes) > 1 else axes[0]


def schedule_injective(schedule: te.Schedule, tensor: te.Tensor) -> None:
    """One thread per element of ``tensor``; each thread handles ``VECTOR_LANES``
    consecutive elements (vector loads and stores) when the size allows."""
    stage = schedule[tensor]
    flat = _flat_axis(stage)
    if flat is None:
        return
    size = math.prod(tensor.shape)
    threads = min(THREADS, max(size, 1))
    if size % (VECTOR_LANES * THREADS) == 0 and tensor.dtype == "float32":
        flat, lanes = stage.split(flat, factor=VECTOR_LANES)
        stage.vectorize(lanes)
    _bind_flat(stage, flat, threads)


def _output_stage(schedule: te.Schedule, anchor: te.Tensor,
                  epilogue: te.Tensor | None) -> te.Stage:
    """The stage that stores ``anchor``'s results: the anchor itself, or its elementwise
    ``epilogue`` (which then reads the accumulators directly: the anchor, a copy of its
    cache after ``cache_write``, is inlined)."""
    if epilogue is None:
        return schedule[anchor]
    schedule[anchor].compute_inline()
    return schedule[epilogue]


def schedule_reduction(schedule: te.Schedule, tensor: te.Tensor,
                       epilogue: te.Tensor | None = None) -> None:
    """One thread per output point of reduction ``tensor``, accumulating in a register;
    with ``epilogue`` (an elementwise function of ``tensor``, see
    :func:`~heterocc.sdk.te_target.elementwise_epilogue`) the thread applies it and stores its
    result instead. Call before any other schedule primitive on ``tensor``."""
    local = schedule.cache_write(tensor, "local")
    stage = _output_stage(schedule, tensor, epilogue)
    flat = _flat_axis(stage)
    if flat is None:
        return
    threads = min(THREADS, max(math.prod(tensor.shape), 1))
    thread = _bind_flat(stage, flat, threads)
    schedule[local].compute_at(stage, thread)


#: output channels one thread of a convolution accumulates in registers, widest first.
CONV_CHANNEL_TILES = (8, 4, 2)
#: threads per block of the convolution schedule.
CONV_THREADS = 128


def _is_conv2d(tensor: te.Tensor) -> bool:
    return len(tensor.shape) == 4 and len(tensor.op.reduce_axis) == 3


def schedule_conv2d(schedule: te.Schedule, output: te.Tensor,
                    epilogue: te.Tensor | None = None) -> None:
    """A direct NCHW convolution (4 output axes, 3 reduction axes): each thread computes
    one output pixel for a tile of output channels, accumulating them in registers, so
    each input element it loads serves the whole tile; neighbouring threads take
    neighbouring pixels (coalesced input reads) of the same channels (broadcast weight
    reads). With ``epilogue`` (bias, activation, residual add: see
    :func:`~heterocc.sdk.te_target.elementwise_epilogue`) each thread applies it to its sums
    and stores that instead. Call before any other schedule primitive on ``output``."""
    channels = output.shape[1]
    tile = next((t for t in CONV_CHANNEL_TILES if channels % t == 0), 1)
    local = schedule.cache_write(output, "local")
    stage = _output_stage(schedule, output, epilogue)
    n, k, y, x = stage.op.axis
    k_outer, k_inner = stage.split(k, factor=tile)
    stage.reorder(n, k_outer, y, x, k_inner)
    flat = stage.fuse(n, k_outer, y, x)
    pixels = math.prod(output.shape) // tile
    thread = _bind_flat(stage, flat, min(CONV_THREADS, max(pixels, 1)))
    stage.unroll(k_inner)
    acc = schedule[local]
    acc.compute_at(stage, thread)
    ln, lk, ly, lx = acc.op.axis
    rc, ry, rx = acc.op.reduce_axis
    acc.reorder(rc, ry, rx, ln, ly, lx, lk)
    acc.unroll(lk)


@dataclass(frozen=True)
class MatmulTiling:
    """Tile sizes of :func:`schedule_matmul`: C tile per block, per thread, and the
    reduction slice staged in shared memory per step."""

    block_m: int = 128
    block_n: int = 128
    thread_m: int = 8
    thread_n: int = 8
    k_tile: int = 8

    @property
    def threads(self) -> tuple[int, int]:
        """(threadIdx.y, threadIdx.x) extents."""
        return self.block_m // self.thread_m, self.block_n // self.thread_n


def default_tiling(m: int, n: int) -> MatmulTiling:
    """Large tiles for large products, smaller ones so small products fill more blocks."""
    if m >= 1024 and n >= 1024:
        return MatmulTiling()
    return MatmulTiling(64, 64, 4, 4, 8)


def matmul_operands(tensor: te.Tensor) -> tuple[te.Tensor, te.Tensor]:
    """(A, B) of ``tensor = sum(A[i, k] * B[k, j], k)``; CompileError for other forms."""
    body = tensor.op.body if isinstance(tensor.op, te.ComputeOp) else None
    loads = []
    if isinstance(body, Reduce) and body.combiner == "sum" and len(body.axis) == 1:
        source = body.source
        if isinstance(source, tx.Binary) and source.op == "mul":
            loads = [source.a, source.b]
    if (len(tensor.shape) != 2 or len(loads) != 2
            or not all(isinstance(x, TensorLoad) for x in loads)):
        raise CompileError(f"schedule_matmul: {tensor.name!r} is not sum(A[i, k] * B[k, j])")
    (i, j), (k,) = [iv.var for iv in tensor.op.axis], [iv.var for iv in body.axis]
    a, b = loads
    if not (a.indices[0] is i and a.indices[1] is k and b.indices[0] is k and b.indices[1] is j):
        raise CompileError(f"schedule_matmul: {tensor.name!r} does not read A[i, k] and B[k, j]")
    return a.tensor, b.tensor


def _cooperative_copy(schedule: te.Schedule, copy: te.Tensor, threads: tuple[int, int],
                      columns: int) -> None:
    """The block's threads share the copy of a tile ``columns`` wide: each takes vectors
    of ``VECTOR_LANES`` consecutive columns when the rows are whole vectors (splitting the
    columns before fusing keeps every vector's index a contiguous ramp)."""
    stage = schedule[copy]
    row, column = stage.op.axis
    if columns % VECTOR_LANES == 0 and copy.dtype == "float32":
        column, lanes = stage.split(column, factor=VECTOR_LANES)
        stage.vectorize(lanes)
    flat = stage.fuse(row, column)
    threads_y, threads_x = threads
    _, inner = stage.split(flat, factor=threads_x * threads_y)
    thread_y, thread_x = stage.split(inner, factor=threads_x)
    stage.bind(thread_y, "threadIdx.y")
    stage.bind(thread_x, "threadIdx.x")


def schedule_matmul(schedule: te.Schedule, product: te.Tensor,
                    tiling: MatmulTiling | None = None,
                    epilogue: te.Tensor | None = None) -> None:
    """Shared-memory tiled, register-blocked schedule of ``product = A @ B`` (see the
    module docstring); with ``epilogue`` (see
    :func:`~heterocc.sdk.te_target.elementwise_epilogue`) every thread applies it to its
    register tile and stores that instead of the product. Call before any other schedule
    primitive on ``product``."""
    a, b = matmul_operands(product)
    m, n = product.shape
    tiling = tiling or default_tiling(m, n)
    threads = tiling.threads
    if tiling.block_m % tiling.thread_m or tiling.block_n % tiling.thread_n:
        raise CompileError(f"schedule_matmul: thread tile {tiling.thread_m}x{tiling.thread_n} "
                           f"does not divide the block tile {tiling.block_m}x{tiling.block_n}")
    local = schedule.cache_write(product, "local")
    a_shared = schedule.cache_read(a, "shared", [local])
    b_shared = schedule.cache_read(b, "shared", [local])

    out = _output_stage(schedule, product, epilogue)
    i, j = out.op.axis
    block_i, in_block_i = out.split(i, factor=tiling.block_m)
    block_j, in_block_j = out.split(j, factor=tiling.block_n)
    thread_i, reg_i = out.split(in_block_i, factor=tiling.thread_m)
    thread_j, reg_j = out.split(in_block_j, factor=tiling.thread_n)
    out.reorder(block_i, block_j, thread_i, thread_j, reg_i, reg_j)
    out.bind(block_i, "blockIdx.y")
    out.bind(block_j, "blockIdx.x")
    out.bind(thread_i, "threadIdx.y")
    out.bind(thread_j, "threadIdx.x")
    out.unroll(reg_i)
    out.unroll(reg_j)

    acc = schedule[local]
    acc.compute_at(out, block_j)
    li, lj = acc.op.axis
    (k,) = acc.op.reduce_axis
    acc_thread_i, acc_reg_i = acc.split(li, factor=tiling.thread_m)
    acc_thread_j, acc_reg_j = acc.split(lj, factor=tiling.thread_n)
    k_outer, k_inner = acc.split(k, factor=tiling.k_tile)
    acc.reorder(k_outer, acc_thread_i, acc_thread_j, k_inner, acc_reg_i, acc_reg_j)
    acc.bind(acc_thread_i, "threadIdx.y")
    acc.bind(acc_thread_j, "threadIdx.x")
    acc.unroll(k_inner)
    acc.unroll(acc_reg_i)
    acc.unroll(acc_reg_j)

    for copy, columns in ((a_shared, tiling.k_tile), (b_shared, tiling.block_n)):
        schedule[copy].compute_at(acc, k_outer)
        _cooperative_copy(schedule, copy, threads, columns)


def _is_matmul(tensor: te.Tensor) -> bool:
    try:
        matmul_operands(tensor)
    except CompileError:
        return False
    return True


class MatmulRule(ScheduleRule):
    """``sum(A[i, k] * B[k, j])``: tiled through shared memory, register-blocked."""

    epilogue = True

    def matches(self, tensor: te.Tensor) -> bool:
        return _is_matmul(tensor)

    def apply(self, schedule, tensor, epilogue=None, chain=()) -> bool:
        schedule_matmul(schedule, tensor, epilogue=epilogue)
        return epilogue is not None


class Conv2dRule(ScheduleRule):
    """A direct NCHW convolution (four output axes, three reduction axes):
    register-tiled over output channels."""

    epilogue = True

    def matches(self, tensor: te.Tensor) -> bool:
        return _is_conv2d(tensor)

    def apply(self, schedule, tensor, epilogue=None, chain=()) -> bool:
        schedule_conv2d(schedule, tensor, epilogue)
        return epilogue is not None


class ReductionRule(ScheduleRule):
    """Any other reduction: one thread per output point."""

    epilogue = True

    def matches(self, tensor: te.Tensor) -> bool:
        return bool(tensor.op.reduce_axis)

    def apply(self, schedule, tensor, epilogue=None, chain=()) -> bool:
        schedule_reduction(schedule, tensor, epilogue)
        return epilogue is not None


class InjectiveRule(ScheduleRule):
    """An output or kept stage no anchor finished: one thread per element."""

    anchor = False

    def matches(self, tensor: te.Tensor) -> bool:
        return True

    def apply(self, schedule, tensor, epilogue=None, chain=()) -> bool:
        schedule_injective(schedule, tensor)
        return False


def gpu_rules() -> list[ScheduleRule]:
    """The GPU's schedule rules, in the order they are tried."""
    return [MatmulRule(), Conv2dRule(), ReductionRule(), InjectiveRule()]


def schedule_for_gpu(outputs: list[te.Tensor]) -> te.Schedule:
    """The GPU schedule of a fused function's outputs (:func:`gpu_rules` applied by
    :func:`~heterocc.sdk.te_target.schedule_by_rules`): injective stages inlined into their
    readers, matmuls tiled through shared memory, convolutions register-tiled, other
    reductions one thread per output point, each with its elementwise epilogue (bias,
    activation, residual add) computed in the same kernel where it can be: the anchor's
    only reader, read at each element's own index and given loops of its own (an output
    or a kept stage: a kept stage launches a kernel of its own anyway; an epilogue that
    reads two anchors goes to the first, and reads the second from memory). Every
    remaining stage (outputs, kept stages) gets one thread per element."""
    return schedule_by_rules(outputs, gpu_rules(), kept_take_epilogues=True)
