"""Tensor intrinsics: a hardware instruction (or micro-kernel) described as a small TE
compute plus the TIR that implements it, for ``Stage.tensorize``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import CompileError
from ..tir import expr as tx
from ..tir.simplify import simplify
from ..tir.stmt import BufferStore, Stmt
from .schedule_reads import reads_of
from .tensor import PlaceholderOp, Tensor


@dataclass(frozen=True)
class BufferRegion:
    """The box of a buffer an intrinsic works on: per-dimension start ``bases`` and the
    box's ``shape`` (in the buffer's rank). ``index(*local)`` maps an index of the
    intrinsic's own (unit dimensions dropped) shape to buffer indices."""

    buffer: tx.Buffer
    bases: tuple[tx.Expr, ...]
    shape: tuple[int, ...]

    @property
    def elem_offset(self) -> tx.Expr:
        """Row-major element offset of the region's first element in its buffer (what an
        accelerator instruction or an extern call takes as its address)."""
        offset: tx.Expr = tx.IntImm(0)
        for base, dim in zip(self.bases, self.buffer.shape):
            offset = offset * dim + base
        return simplify(offset)

    @property
    def squeezed_shape(self) -> tuple[int, ...]:
        return tuple(d for d in self.shape if d != 1)

    def index(self, *local) -> tuple[tx.Expr, ...]:
        if len(local) != len(self.squeezed_shape):
            raise CompileError(
                f"region of {self.buffer.name!r} has {len(self.squeezed_shape)} non-unit "
                f"dimensions, indexed with {len(local)}")
        local_iter = iter(local)
        return tuple(base if extent == 1 else base + next(local_iter)
                     for base, extent in zip(self.bases, self.shape))

    def load(self, *local) -> tx.BufferLoad:
        """The element at intrinsic-local index ``local``."""
        return tx.BufferLoad(self.buffer, self.index(*local))

    def store(self, value, *local) -> Stmt:
        """Store ``value`` at intrinsic-local index ``local``."""
        return BufferStore(self.buffer, value, self.index(*local))


@dataclass(frozen=True, eq=False)
class TensorIntrin:
    """``compute`` declares what the intrinsic calculates (an output tensor over
    placeholders of fixed shapes); ``implement(inputs, output)`` returns the TIR
    statement doing it, given the regions bound to those placeholders (in the order
    ``compute`` reads them) and to the output. On a reduction stage the statement must
    accumulate into the output region, which the lowering has already initialized.

    ``implement_reset`` (optional, reductions only): the statement computing the whole
    reduction from its identity itself, which the lowering uses instead of
    initializing the region and calling ``implement`` where the tensorized loops cover
    every reduction axis (no reduction loop outside them): hardware whose accumulators
    clear themselves (a matrix unit's zeroed tiles) then skips the stores of zeros and
    the loads of them back."""

    name: str
    compute: Tensor
    implement: Callable[[list[BufferRegion], BufferRegion], Stmt]
    attrs: dict = field(default_factory=dict)
    implement_reset: Callable[[list[BufferRegion], BufferRegion], Stmt] | None = None

    @property
    def inputs(self) -> list[Tensor]:
        """The placeholders of ``compute``, in first-read order."""
        body = self.compute.op.body
        return [t for t in reads_of(body) if isinstance(t.op, PlaceholderOp)]
