"""Elementwise stages of an NCHW[x]c tensor that choose by channel block: a channel
concatenation of blocked tensors (and the activations fused after it) picks its source
by the channel-block index, so the stage runs one channel block per outer iteration, in
parallel, with the block's pixels and lanes as one inner vectorized loop.

The choice itself is taken out of the loops before vectorization
(:func:`split_at_channel_selects`): the channel-block loop is cut where the
concatenation's sources meet, and each piece reads its one source with no select left.
Without it every vector of the inner loop walked the whole chain of selects (one per
source: 25 in DenseNet's last concatenations of a block), and an activation that reads
its argument twice (``Relu`` as a NaN-propagating maximum) doubled the chain, whose loads,
out of bounds for the other sources, became masked loads."""

from __future__ import annotations

import dataclasses

import numpy as np

from heterocc.sdk import te
from heterocc.tir import (
    Binary,
    For,
    ForKind,
    IfThenElse,
    IntImm,
    Mutator,
    PrimFunc,
    Select,
    Var,
    collect,
    maximum,
    minimum,
    seq,
    substitute,
)
from heterocc.tir.visitor import StmtMutator

from ..cpu import CPUDescription
from .common import PARALLEL_MIN_ELEMENTS, schedule_injective, vector_lanes

#: most pieces a loop is cut into: a concatenation of more sources keeps its selects
#: (each piece is a copy of the loop body)
MAX_PIECES = 64


def schedule_channel_blocks(schedule: te.Schedule, tensor: te.Tensor,
                            cpu: CPUDescription) -> None:
    """Run 5-D ``tensor`` (``[n, c // b, h, w, b]``) one channel block per iteration of
    its block axis (in parallel when the tensor is large), the block's pixels and lanes
    fused into one vectorized inner loop; with fewer channel blocks than ``cpu`` has
    cores, the flat schedule (:func:`schedule_injective`) keeps every core busy instead.
    The block axis stays a loop of its own (not fused with the batch), so that the
    concatenation's choice is a condition on that loop's variable alone, which
    :func:`split_at_channel_selects` resolves."""
    stage = schedule[tensor]
    _, blocks, *inner = stage.op.axis
    if int(tensor.shape[0]) * int(tensor.shape[1]) < cpu.num_cores:
        schedule_injective(schedule, tensor, cpu)
        return
    flat = stage.fuse(*inner)
    lanes = min(vector_lanes(tensor.dtype, cpu), int(np.prod(tensor.shape[2:])))
    _, vector = stage.split(flat, factor=lanes)
    stage.vectorize(vector)
    if int(np.prod(tensor.shape)) >= PARALLEL_MIN_ELEMENTS:
        stage.parallel(blocks)


#: ``v <op> c`` holds from the threshold on (or below it): the threshold's offset from c
_FROM = {"ge": 0, "gt": 1, "lt": 0, "le": 1}
#: the comparison written the other way round (``c <op> v`` as ``v <op'> c``)
_MIRRORED = {"ge": "le", "gt": "lt", "lt": "gt", "le": "ge"}


def _comparison(condition, var: Var) -> tuple[str, int] | None:
    """``(op, c)`` where ``condition`` compares ``var`` alone with the constant ``c``
    (``var <op> c``), else None."""
    if not isinstance(condition, Binary) or condition.op not in _FROM:
        return None
    if condition.a is var and isinstance(condition.b, IntImm):
        return condition.op, condition.b.value
    if condition.b is var and isinstance(condition.a, IntImm):
        return _MIRRORED[condition.op], condition.a.value
    return None


def _holds(op: str, c: int, low: int, high: int) -> bool | None:
    """Whether ``v <op> c`` holds for every ``v`` in [low, high] (True), for none
    (False), or for some only (None)."""
    threshold = c + _FROM[op]
    above = op in ("ge", "gt")  # holds from the threshold on
    if low >= threshold:
        return above
    if high < threshold:
        return not above
    return None


class _Resolver(Mutator):
    """Selects on ``var`` replaced by their chosen side for ``var`` in [low, high]."""

    def __init__(self, var: Var, low: int, high: int):
        self.var, self.low, self.high = var, low, high

    def visit_Select(self, node: Select):
        compared = _comparison(node.condition, self.var)
        holds = None if compared is None else _holds(*compared, self.low, self.high)
        if holds is None:
            return self.generic(node)
        return self.expr(node.true_value if holds else node.false_value)


class _SelectSplitter(StmtMutator):
    def visit_For(self, node: For):
        if not (isinstance(node.min, IntImm) and isinstance(node.extent, IntImm)):
            return self.generic(node)
        start, end = node.min.value, node.min.value + node.extent.value
        cuts = sorted({c + _FROM[op] for select in collect(node.body, _is_select)
                       for op, c in [_comparison(select.condition, node.var) or ("", 0)]
                       if op and start < c + _FROM[op] < end})
        if not cuts or len(cuts) >= MAX_PIECES:
            return self.generic(node)
        bounds = [start, *cuts, end]
        parts = list(zip(bounds, bounds[1:]))
        if node.kind is not ForKind.PARALLEL:
            return seq([dataclasses.replace(
                node, min=IntImm(low), extent=IntImm(high - low),
                body=self.stmt(_Resolver(node.var, low, high - 1).stmt(node.body)))
                for low, high in parts])
        # One parallel loop (one start of the thread pool), its body a balanced tree of
        # branches on the loop variable down to the pieces (log2 of their number compares
        # per iteration); each piece reads the variable clamped into its range, so that
        # bound analysis after this sees its loads in bounds.
        pieces = []
        for low, high in parts:
            clamped = maximum(minimum(node.var, IntImm(high - 1, node.var.dtype)),
                              IntImm(low, node.var.dtype))
            pieces.append(self.stmt(substitute(
                _Resolver(node.var, low, high - 1).stmt(node.body), {node.var: clamped})))
        return dataclasses.replace(node, body=_branches(node.var, parts, pieces))


def _branches(var: Var, parts: list[tuple[int, int]], pieces: list) -> object:
    """``pieces[i]`` where ``var`` is in ``parts[i]`` (consecutive ranges), as a balanced
    tree of branches."""
    if len(pieces) == 1:
        return pieces[0]
    middle = len(pieces) // 2
    return IfThenElse(Binary("lt", var, IntImm(parts[middle][0], var.dtype)),
                      _branches(var, parts[:middle], pieces[:middle]),
                      _branches(var, parts[middle:], pieces[middle:]))


def _is_select(node) -> bool:
    return isinstance(node, Select)


def split_at_channel_selects(func: PrimFunc) -> PrimFunc:
    """``func`` (unoptimized TIR) with each loop whose selects compare its variable
    with constants (a concatenation's choice of source by channel block) cut at those
    constants, the selects resolved in each piece: a serial loop becomes one loop per
    piece, a parallel loop one loop branching to its pieces. Loops of more than
    :data:`MAX_PIECES` pieces stay as they are."""
    return dataclasses.replace(func, body=_SelectSplitter().stmt(func.body))
