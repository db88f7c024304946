"""Which tensors an expression reads (shared by schedules, lowering and intrinsics)."""

from __future__ import annotations

import weakref

from ..tir import expr as tx
from ..tir.visitor import collect
from .tensor import ComputeOp, ConstantOp, Tensor, TensorLoad

#: reads_of's answers by expression (by identity: expressions are immutable), for as
#: long as the expression lives: schedules, the schedule's stage graph and the lowering
#: ask it of one compute's body again and again (3,457 times, ~7% of the compiling
#: thread, for MobileNetV2 int8's 45 kernels)
_READS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def reads_of(expr: tx.Expr) -> list[Tensor]:
    """Tensors read by ``expr``, first-read order, each once."""
    known = _READS.get(expr)
    if known is None:
        seen: dict[int, Tensor] = {}
        for load in collect(expr, lambda n: isinstance(n, TensorLoad)):
            seen.setdefault(id(load.tensor), load.tensor)
        known = _READS[expr] = tuple(seen.values())
    return list(known)


def constant_tensors(outputs: list[Tensor]) -> list[Tensor]:
    """The constant tensors (``te.constant_tensor``) that computing ``outputs`` reads,
    directly or through other computes, in first-read order, each once."""
    found: dict[int, Tensor] = {}
    visited: set[int] = set()
    stack = list(reversed(outputs))
    while stack:
        tensor = stack.pop()
        if id(tensor) in visited:
            continue
        visited.add(id(tensor))
        if isinstance(tensor.op, ConstantOp):
            found.setdefault(id(tensor), tensor)
        elif isinstance(tensor.op, ComputeOp):
            stack.extend(reversed(reads_of(tensor.op.body)))
    return list(found.values())
