"""Which tensors an expression reads (shared by schedules, lowering and intrinsics)."""

from __future__ import annotations

from ..tir import expr as tx
from ..tir.visitor import collect
from .tensor import Tensor, TensorLoad


def reads_of(expr: tx.Expr) -> list[Tensor]:
    """Tensors read by ``expr``, first-read order, each once."""
    seen: dict[int, Tensor] = {}
    for load in collect(expr, lambda n: isinstance(n, TensorLoad)):
        seen.setdefault(id(load.tensor), load.tensor)
    return list(seen.values())
