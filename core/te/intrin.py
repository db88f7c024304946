"""Tensor intrinsics: a hardware instruction (or micro-kernel) described as a small TE
compute plus the TIR that implements it, for ``Stage.tensorize``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..tir.expr import Buffer
from ..tir.stmt import Stmt
from .tensor import Tensor


@dataclass(frozen=True)
class BufferRegion:
    """The part of a buffer an intrinsic touches: the buffer, the element offset of the
    region's first element (row-major), and the region's shape."""

    buffer: Buffer
    offset: object
    shape: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class TensorIntrin:
    """``compute`` declares what the intrinsic calculates (an output tensor over
    placeholders of fixed shape); ``implement(inputs, output)`` returns the TIR statement
    that does it, given the regions bound to the placeholders and to the output."""

    name: str
    compute: Tensor
    implement: Callable[[list[BufferRegion], BufferRegion], Stmt]
    target: str = "any"
    attrs: dict = field(default_factory=dict)
