"""Which tensors an expression reads (shared by schedules, lowering and intrinsics)."""

from __future__ import annotations

from ..tir import expr as tx
from ..tir.visitor import collect
from .tensor import ComputeOp, ConstantOp, Tensor, TensorLoad


def reads_of(expr: tx.Expr) -> list[Tensor]:
    """Tensors read by ``expr``, first-read order, each once."""
    seen: dict[int, Tensor] = {}
    for load in collect(expr, lambda n: isinstance(n, TensorLoad)):
        seen.setdefault(id(load.tensor), load.tensor)
    return list(seen.values())


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
