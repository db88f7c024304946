"""Injective stages that move whole rows: copies through reshapes, transposes, slices
and concatenations (ShuffleNet's channel shuffle and split, a transformer's head
transposes), run as rows of their contiguous innermost axes.

A flat vectorized loop over every output element is right for an elementwise stage:
each vector of outputs reads a vector of each input. A copy that permutes or cuts outer
axes breaks that: consecutive output elements cross a row of the source, so each lane
needs its own division to find its source and the load becomes a gather. But such a copy
usually keeps its innermost axes intact (a channel shuffle keeps every ``H x W`` image
whole, a head transpose every head's vector), and over those the source is contiguous.

:func:`contiguous_suffix` finds how many of a stage's innermost axes every value it
reads (through its inlined producers) follows element by element, or does not depend
on; :func:`schedule_contiguous_rows` runs the stage with those axes fused into one
vectorized inner loop and the others fused into parallel rows.
"""

from __future__ import annotations

import numpy as np

from heterocc.sdk import te
from heterocc.te.schedule import INLINE
from heterocc.te.tensor import Reduce, TensorLoad
from heterocc.tir import expr as tx
from heterocc.tir.simplify import Interval, simplify
from heterocc.tir.visitor import Mutator, collect, free_vars, substitute

from ..cpu import CPUDescription
from .common import PARALLEL_MIN_ELEMENTS, vector_lanes

#: loads in a stage's expanded body beyond which the analysis is not tried (a stage that
#: reads that many values is an elementwise chain, which the flat loop suits)
MAX_LOADS = 64
#: elements of a last axis that no read follows below which a stage stays one flat
#: loop (rows of one to three lanes would waste the vector)
MIN_ROW = 4


class _TooManyLoads(Exception):
    """The expansion passed its budget of reads."""


class _Expander(Mutator):
    """A body with the reads of inlined, reduction-free stages replaced by their
    bodies (what lowering will compute). Expanded as a tree, a chain of stages that each
    read their input twice (``x * x``) grows exponentially, so the expansion stops at
    ``budget`` reads visited (:class:`_TooManyLoads`)."""

    def __init__(self, schedule: te.Schedule, budget: int):
        self.schedule = schedule
        self.budget = budget

    def visit_TensorLoad(self, node: TensorLoad) -> tx.Expr:
        self.budget -= 1
        if self.budget < 0:
            raise _TooManyLoads
        node = self.generic(node)
        op = node.tensor.op
        if not isinstance(op, te.ComputeOp) or op.reduce_axis:
            return node
        stage = self.schedule[node.tensor]
        if stage.attach != INLINE or isinstance(stage.body, Reduce):
            return node
        # the stage's body, with the one-element constants folded into it
        return self.expr(substitute(stage.body, {iv.var: index
                                                 for iv, index in zip(op.axis, node.indices)}))


def _follows(load: TensorLoad, inner: list[tx.Var], extents: list[int],
             ranges: dict, squeeze: bool = False) -> bool:
    """Whether ``load`` reads the ``inner`` output axes contiguously (its last indices
    are those axes over equal extents, and its other indices use none of them) or not
    at all (no index uses them). ``squeeze``: the read's axes of one element are left
    out first (a per-pixel statistic ``[n, h, w, 1]`` read at ``[n, h, w, 0]``)."""
    indices = [simplify(i, ranges) for i in load.indices]
    shape = [int(d) for d in load.tensor.shape]
    if squeeze:
        indices = [i for i, d in zip(indices, shape) if d > 1]
        shape = [d for d in shape if d > 1]
    inner_set = set(inner)
    k = len(inner)
    if not any(free_vars(i) & inner_set for i in indices):
        return True
    if len(indices) < k:
        return False
    tail, head = indices[len(indices) - k:], indices[:len(indices) - k]
    return (all(i is v for i, v in zip(tail, inner))
            and shape[len(shape) - k:] == extents
            and not any(free_vars(i) & inner_set for i in head))


def _expanded_loads(schedule: te.Schedule, tensor: te.Tensor) -> list[TensorLoad] | None:
    """The reads of ``tensor``'s stage through its inlined producers, or None where the
    stage reduces or reads more than :data:`MAX_LOADS` values."""
    op = tensor.op
    if not isinstance(op, te.ComputeOp) or op.reduce_axis:
        return None
    try:
        # reads of the inlined stages are visited too: a budget of a few times the reads
        # allowed keeps long single-read chains analysed and stops doubling ones early
        body = _Expander(schedule, 4 * MAX_LOADS).expr(schedule[tensor].body)
    except _TooManyLoads:
        return None
    loads = collect(body, lambda n: isinstance(n, TensorLoad))
    return None if len(loads) > MAX_LOADS else loads


def _ranges(tensor: te.Tensor) -> dict:
    return {iv.var: Interval(0, int(e) - 1) for iv, e in zip(tensor.op.axis, tensor.shape)}


def _elementwise(load: TensorLoad, axes: list[tx.Var], ranges: dict) -> bool:
    """Whether ``load`` reads at the output's own coordinates, some of them broadcast:
    each index an output axis (in the output's order) or 0."""
    position = -1
    for index in (simplify(i, ranges) for i in load.indices):
        if isinstance(index, tx.IntImm) and index.value == 0:
            continue
        found = next((k for k, axis in enumerate(axes) if index is axis), None)
        if found is None or found <= position:
            return False
        position = found
    return True


def contiguous_suffix(schedule: te.Schedule, tensor: te.Tensor) -> int:
    """The most innermost axes of ``tensor``'s stage (a reduction-free compute) over
    which every value its expanded body reads is either contiguous, in the same order
    and extents, or constant; 0 when even the last axis is not, or the body is too
    large to analyse."""
    loads = _expanded_loads(schedule, tensor)
    if loads is None:
        return 0
    axes = [iv.var for iv in tensor.op.axis]
    extents = [int(d) for d in tensor.shape]
    ranges = _ranges(tensor)
    for k in range(len(axes), 0, -1):
        inner = axes[len(axes) - k:]
        if all(_follows(load, inner, extents[len(axes) - k:], ranges) for load in loads):
            return k
    return 0


def _expanded_reduction(schedule: te.Schedule, tensor: te.Tensor):
    """``(body, source, ranges)`` of reduction ``tensor``'s stage: its Reduce, the
    source through its inlined producers (None where that reads past
    :data:`MAX_LOADS`'s budget), and the ranges of its output and reduction axes; None
    where the stage does not reduce."""
    body = schedule[tensor].body
    if not isinstance(tensor.op, te.ComputeOp) or not isinstance(body, Reduce):
        return None
    try:
        source = _Expander(schedule, 4 * MAX_LOADS).expr(body.source)
    except _TooManyLoads:
        source = None
    ranges = {**_ranges(tensor),
              **{iv.var: Interval(0, int(iv.extent) - 1) for iv in body.axis}}
    return body, source, ranges


def _reduction_loads(schedule: te.Schedule, tensor: te.Tensor):
    """``(loads, ranges)``: the reads of reduction ``tensor``'s expanded source and the
    ranges of its axes; None where the expansion or the reads pass their budgets."""
    expanded = _expanded_reduction(schedule, tensor)
    if expanded is None or expanded[1] is None:
        return None
    _, source, ranges = expanded
    loads = collect(source, lambda n: isinstance(n, TensorLoad))
    return None if len(loads) > MAX_LOADS else (loads, ranges)


def reduction_blocks(schedule: te.Schedule, tensor: te.Tensor) -> list[int]:
    """For each reduction axis of ``tensor``'s stage, the block its expanded source reads
    it in (1: none): the largest constant ``b`` dividing the axis's extent that the
    source divides the axis by (``r // b`` or ``r % b``: a channel of a blocked
    ``NCHW{b}c`` tensor read through a transpose, ConvNeXt's LayerNorm). Split by ``b``,
    the axis's inner loop reads ``b`` contiguous values, which LLVM vectorizes, where
    the divisions kept every read scalar."""
    expanded = _expanded_reduction(schedule, tensor)
    if expanded is None:
        return []
    body, source, ranges = expanded
    if source is None:
        return [1] * len(body.axis)
    divisions = collect(simplify(source, ranges), lambda n: isinstance(n, tx.Binary)
                        and n.op in ("floordiv", "floormod") and isinstance(n.b, tx.IntImm))
    blocks = []
    for iv in body.axis:
        extent = int(iv.extent)
        found = [d.b.value for d in divisions if d.a is iv.var and 1 < d.b.value < extent
                 and extent % d.b.value == 0]
        blocks.append(max(found, default=1))
    return blocks


def contiguous_reduction_block(schedule: te.Schedule, tensor: te.Tensor,
                               cpu: CPUDescription) -> int:
    """The block a reduction's last axis is read in when its expanded source reads that
    axis contiguously, element by element (it is the read's last index but for trailing
    axes of one element, and no other index uses it), in at least as many of the reads
    that use it as read it otherwise (a gather per lane): a vector of ``tensor``'s type,
    where the axis holds two or more whole vectors; else 1. Read in that block,
    :func:`.common.schedule_reduction` sums it into one partial per lane (``rfactor``)
    where LLVM, without leave to reassociate a float sum (the exact float of a quantized
    model's LayerNorm), kept one scalar sum: an int8 BERT layer's LayerNorm statistics
    over 768 channels, its requantized residual addition inlined, took 0.29-0.45 ms a
    LayerNorm for 128 tokens (Zen 5, two threads); ConvNeXt's over 384 channels, its
    residual read across the channels of an NCHW image, 2.2 ms."""
    body = schedule[tensor].body
    if not isinstance(body, Reduce):
        return 1
    axis = body.axis[-1]
    extent, lanes = int(axis.extent), vector_lanes(tensor.dtype, cpu)
    if extent % lanes or extent < 2 * lanes:
        return 1  # before the expansion: most reductions stop here
    found = _reduction_loads(schedule, tensor)
    if found is None:
        return 1
    loads, ranges = found
    contiguous = gathered = 0
    for load in loads:
        indices = [simplify(i, ranges) for i in load.indices]
        shape = [int(d) for d in load.tensor.shape]
        while len(indices) > 1 and shape[len(indices) - 1] == 1 and \
                isinstance(indices[-1], tx.IntImm):
            indices.pop()
        uses = [axis.var in free_vars(i) for i in indices]
        if not any(uses):
            continue
        if indices[-1] is axis.var and not any(uses[:-1]):
            contiguous += 1
        else:
            gathered += 1
    return lanes if contiguous and contiguous >= gathered else 1


def lanes_of_kept_axes(schedule: te.Schedule, tensor: te.Tensor,
                        cpu: CPUDescription) -> int:
    """How many innermost output axes of reduction ``tensor``'s stage (axes of one
    element aside) to run as vector lanes, each lane the reduction of its own output
    point (:func:`.common.schedule_reduction_in_lanes`), or 0. They must be read
    contiguously by every read of the expanded source that uses them (its last indices,
    over equal extents, the reduction axes in none of those), and hold two vectors or
    more. That is a reduction across the outer axis of its source: ConvNeXt's int8
    LayerNorm over the channels of an NCHW image, read through a transpose, where each
    output point's sum was a scalar loop with a stride of a whole image; a softmax or a
    mean over an NCHW tensor's channels. Each lane sums in the reduction's own order:
    vectorized without reassociating a float sum."""
    body = schedule[tensor].body
    if not isinstance(body, Reduce):
        return 0
    lanes = vector_lanes(tensor.dtype, cpu)
    kept = [(iv.var, int(extent)) for iv, extent in zip(tensor.op.axis, tensor.shape)
            if int(extent) > 1]
    if int(np.prod([extent for _, extent in kept])) < 2 * lanes:
        return 0  # before the expansion: most reductions stop here
    found = _reduction_loads(schedule, tensor)
    if found is None:
        return 0
    loads, ranges = found
    positions = [k for k, extent in enumerate(tensor.shape) if int(extent) > 1]
    for k in range(len(kept), 0, -1):
        inner = [var for var, _ in kept[len(kept) - k:]]
        extents = [extent for _, extent in kept[len(kept) - k:]]
        if int(np.prod(extents)) < 2 * lanes:
            return 0
        # a read that follows the axes has them as its last indices (so no reduction
        # axis there); one read at least must use them, or they are no lanes of a read
        if all(_follows(load, inner, extents, ranges, squeeze=True)
               for load in loads) and any(
                free_vars(simplify(i, ranges)) & set(inner)
                for load in loads for i in load.indices):
            return len(tensor.shape) - positions[len(kept) - k]
    return 0


def injective_rows(schedule: te.Schedule, tensor: te.Tensor, cpu: CPUDescription) -> int:
    """How many innermost axes of injective ``tensor``'s stage to run as the vectorized
    inner loop of rows (:func:`schedule_contiguous_rows`), or 0 for one flat loop: 0
    when every read is at the output's own coordinates, some broadcast (an elementwise
    stage: the flat loop reads vectors, or one value per vector) or the rows would be
    shorter than a vector; else its contiguous axes
    (:func:`contiguous_suffix`), or, where not even the last axis is contiguous (a
    transpose of it, a change of channel block), the last axis alone when it holds
    :data:`MIN_ROW` elements: lanes that gather, but without the divisions that would
    recover every lane's coordinates from a flat index."""
    ndim = len(tensor.shape)
    loads = _expanded_loads(schedule, tensor) if ndim > 1 else None
    axes = [iv.var for iv in tensor.op.axis]
    if loads is None or all(_elementwise(load, axes, _ranges(tensor)) for load in loads):
        return 0
    inner = contiguous_suffix(schedule, tensor)
    if inner == ndim:
        return 0
    if inner == 0:
        return 1 if int(tensor.shape[-1]) >= MIN_ROW else 0
    return inner if int(np.prod(tensor.shape[ndim - inner:])) >= vector_lanes(
        tensor.dtype, cpu) else 0


def schedule_contiguous_rows(schedule: te.Schedule, tensor: te.Tensor, inner: int,
                             cpu: CPUDescription) -> None:
    """Run ``tensor``'s stage with its last ``inner`` axes fused into one vectorized
    loop and the others fused into rows (in parallel when there are enough elements)."""
    stage = schedule[tensor]
    axes = list(stage.op.axis)
    outer_axes, inner_axes = axes[:len(axes) - inner], axes[len(axes) - inner:]
    row = stage.fuse(*inner_axes) if len(inner_axes) > 1 else inner_axes[0]
    extent = int(np.prod(tensor.shape[len(axes) - inner:]))
    _, lanes = stage.split(row, factor=min(vector_lanes(tensor.dtype, cpu), extent))
    stage.vectorize(lanes)
    if outer_axes and int(np.prod(tensor.shape)) >= PARALLEL_MIN_ELEMENTS:
        stage.parallel(stage.fuse(*outer_axes) if len(outer_axes) > 1 else outer_axes[0])
