"""A softmax over its last axis computed row by row: every stage of a row (its maximum,
the shift, the exponentials, their sum and the quotients) at the row's loop, the row's
exponentials in a buffer of one row, rather than each stage as a pass over the whole
tensor (five passes, the exponentials written out and read back twice).

The compute library gives ``Softmax`` as ``out[..., j] = e[..., j] / s[..., 0]`` with
``e = exp(x - shift(max(x)))`` kept (computed once) and ``s`` the sum of ``e`` over the
last axis; :func:`softmax_row_stages` recognises that structure (never by a name), and
:func:`schedule_softmax_rows` schedules it. A transformer's attention scores, a row of
128 to 197 floats, then stay in the L1 from the maximum to the quotient.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from heterocc.sdk import te
from heterocc.te.schedule_reads import reads_of
from heterocc.te.tensor import Reduce, TensorLoad
from heterocc.tir import expr as tx
from heterocc.tir.visitor import collect

from ..cpu import CPUDescription
from .common import PARALLEL_MIN_ELEMENTS, vector_lanes


@dataclass(frozen=True)
class SoftmaxRowStages:
    """The stages of a softmax ``out`` over its last axis: ``exps`` (the exponentials,
    ``out``'s shape), ``total`` (their sum over the last axis, kept as 1) and
    ``statistics`` (the other per-row stages ``exps`` reads: the maximum and the shift),
    producers first."""

    exps: te.Tensor
    total: te.Tensor
    statistics: tuple[te.Tensor, ...]

    @property
    def owned(self) -> tuple[te.Tensor, ...]:
        """Every stage computed at the output's rows."""
        return (*self.statistics, self.exps, self.total)


def _load_at(load: tx.Expr, axes: list, last_zero: bool) -> TensorLoad | None:
    """``load`` when it is a read at the output's index ``axes`` (its last at 0 with
    ``last_zero``), else None."""
    if not isinstance(load, TensorLoad) or len(load.indices) != len(axes):
        return None
    *outer, last = load.indices
    if any(index is not axis for index, axis in zip(outer, axes)):
        return None
    if last_zero:
        return load if isinstance(last, tx.IntImm) and last.value == 0 else None
    return load if last is axes[-1] else None


def _row_statistics(exps: te.Tensor, row_shape: tuple) -> tuple[te.Tensor, ...] | None:
    """The per-row stages (``row_shape``: the output's with its last axis 1) that
    ``exps`` reads, transitively through such stages, producers first; None when one of
    them reduces over anything but the last axis of a stage of the output's shape."""
    found: list[te.Tensor] = []
    seen: set[int] = set()

    def visit(tensor: te.Tensor) -> bool:
        for load in collect(tensor.op.body, lambda n: isinstance(n, TensorLoad)):
            source = load.tensor
            if (id(source) in seen or not isinstance(source.op, te.ComputeOp)
                    or tuple(source.shape) != row_shape):
                continue
            seen.add(id(source))
            op = source.op
            if op.reduce_axis and (len(op.reduce_axis) != 1
                                   or int(op.reduce_axis[0].extent) != exps.shape[-1]):
                return False
            if not visit(source):
                return False
            found.append(source)
        return True

    return tuple(found) if visit(exps) else None


def softmax_row_stages(out: te.Tensor) -> SoftmaxRowStages | None:
    """The stages of ``out`` when it is a softmax over its last axis (two or more axes,
    float): ``out[..., j] = e[..., j] / s[..., 0]`` with ``s`` the sum of the kept stage
    ``e`` over the last axis; else None."""
    op = out.op
    if (not isinstance(op, te.ComputeOp) or op.reduce_axis or len(op.axis) < 2
            or not tx.is_float(out.dtype)):
        return None
    body = op.body
    if not (isinstance(body, tx.Binary) and body.op == "div"):
        return None
    axes = [iv.var for iv in op.axis]
    exps_load, total_load = _load_at(body.a, axes, False), _load_at(body.b, axes, True)
    if exps_load is None or total_load is None:
        return None
    exps, total = exps_load.tensor, total_load.tensor
    row_shape = (*out.shape[:-1], 1)
    if (not isinstance(exps.op, te.ComputeOp) or exps.op.reduce_axis
            or tuple(exps.shape) != tuple(out.shape)
            or not isinstance(total.op, te.ComputeOp) or tuple(total.shape) != row_shape):
        return None
    reduce = total.op.body
    if not (isinstance(reduce, Reduce) and reduce.combiner == "sum" and len(reduce.axis) == 1
            and int(reduce.axis[0].extent) == out.shape[-1]):
        return None
    summed = _load_at(reduce.source, [*(iv.var for iv in total.op.axis[:-1]),
                                      reduce.axis[0].var], False)
    if summed is None or summed.tensor is not exps:
        return None
    statistics = _row_statistics(exps, row_shape)
    if statistics is None:
        return None
    return SoftmaxRowStages(exps, total, statistics)


def row_fits_the_l1(out: te.Tensor, cpu: CPUDescription) -> bool:
    """Whether a row of ``out`` (the exponentials' buffer each row keeps) takes at most half
    of ``cpu``'s L1 data cache: a longer row would not stay cached from its maximum to its
    quotients, and its buffer (on each thread's stack) would grow with the sequence."""
    return out.shape[-1] * np.dtype(out.dtype).itemsize <= cpu.l1d // 2


def rows_are_private(schedule: te.Schedule, out: te.Tensor, stages: SoftmaxRowStages) -> bool:
    """Whether only the softmax reads its row stages (none of them is read by another
    stage of the function, inlined or not, nor is one of its outputs): the condition for
    computing them at the output's rows, whose buffers no other stage could read."""
    row_stages = {id(t) for t in stages.owned}
    if any(id(t) in row_stages for t in schedule.outputs):
        return False
    for stage in schedule.stages:
        if stage.is_placeholder or stage.tensor is out or id(stage.tensor) in row_stages:
            continue
        if any(id(t) in row_stages for t in reads_of(stage.op.body)):
            return False
    return True


def schedule_softmax_rows(schedule: te.Schedule, out: te.Tensor, stages: SoftmaxRowStages,
                          cpu: CPUDescription) -> None:
    """``out``'s rows (every axis but the last, fused) in parallel when the softmax is
    large, each computing its statistics, its exponentials (a local row, cut into
    vectors), their sum and its quotients (cut into vectors) in turn."""
    stage = schedule[out]
    *axes, columns = stage.op.axis
    row = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    lanes = min(vector_lanes(out.dtype, cpu), out.shape[-1])
    _, inner = stage.split(columns, factor=lanes)
    stage.vectorize(inner)
    if int(np.prod(out.shape)) >= PARALLEL_MIN_ELEMENTS:
        stage.parallel(row)
    for tensor in reversed(stages.owned):  # readers first: each is attached when its
        schedule[tensor].compute_at(stage, row)  # producer's compute_at checks them
        schedule[tensor].set_scope("local")
    exps = schedule[stages.exps]
    _, inner = exps.split(exps.op.axis[-1], factor=lanes)
    exps.vectorize(inner)
