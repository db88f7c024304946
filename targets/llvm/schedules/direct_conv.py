"""The direct NCHW convolution's schedule (``schedule_conv2d_nchw``): register tiles
over output channels and output columns (grouped and depthwise ones too), each finished
with the function's elementwise epilogue where it has one."""

from __future__ import annotations

from collections.abc import Sequence

from heterocc.sdk import CompileError, te
from heterocc.te.schedule_reads import reads_of

from ..cpu import CPUDescription
from .common import schedule_rows, vector_lanes

#: output channels of one conv2d register tile with 32 vector registers (one accumulator
#: vector each; half as many with 16 registers, :func:`conv_tile_channels`).
CONV_TILE_CHANNELS = 16
#: output channels of one tile when each reads its own input channel (depthwise): no
#: data vector is shared, so more channels only add code, not reuse.
DEPTHWISE_TILE_CHANNELS = 4


def conv_tile_columns(width: int, dtype: str = "float32",
                      *, cpu: CPUDescription) -> int:
    """Output columns per conv2d register tile: one vector, or the whole row when it
    is narrower. (Splitting a wide row by a non-power-of-two divisor to avoid the tail
    measured slower: LLVM splits such vectors into uneven parts.)"""
    return min(width, vector_lanes(dtype, cpu))


def conv_tile_channels(cpu: CPUDescription) -> int:
    """Output channels (one accumulator vector each) of a conv2d register tile:
    :data:`CONV_TILE_CHANNELS` with 32 vector registers, in proportion with fewer."""
    return max(1, CONV_TILE_CHANNELS * cpu.vector_registers // 32)


def _schedule_conv_data(schedule: te.Schedule, data: te.Tensor, cpu: CPUDescription,
                        serial_axes: int = 0) -> None:
    """Materialized copies (``keep``) of a convolution's input are computed ahead row by
    row (``serial_axes`` as in :func:`schedule_rows`), and the stages they read likewise;
    any other stage is inlined."""
    if not isinstance(data.op, te.ComputeOp):
        return
    if not data.op.attrs.get("keep"):
        schedule[data].compute_inline()
        return
    schedule_rows(schedule, data, cpu, serial_axes=serial_axes)
    for source in reads_of(schedule[data].body):
        _schedule_conv_data(schedule, source, cpu)


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
                         *, cpu: CPUDescription) -> None:
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
    _schedule_conv_data(schedule, reads_of(stage.body)[0], cpu)
    if epilogue is None:
        local, outer = schedule.cache_write(conv, "local"), conv
    else:
        local, outer = conv, epilogue
    n, k, y, x = schedule[outer].op.axis
    depthwise = stage.op.reduce_axis[0].extent == 1
    k_outer, k_inner = schedule[outer].split(
        k, factor=DEPTHWISE_TILE_CHANNELS if depthwise else conv_tile_channels(cpu))
    x_outer, x_inner = schedule[outer].split(
        x, factor=conv_tile_columns(conv.shape[3], conv.dtype, cpu=cpu))
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


