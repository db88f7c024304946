"""TIR statements: loop nests, buffer stores, allocations, guards, sequences, and the
PrimFunc that wraps a body with its buffer parameters."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from .expr import INDEX_DTYPE, Buffer, Expr, Var, as_expr, as_index_tuple


class ForKind(enum.Enum):
    """How a loop's iterations run."""

    SERIAL = "serial"
    PARALLEL = "parallel"  #: across CPU cores through the runtime thread pool
    VECTORIZED = "vectorized"  #: one SIMD instruction per operation (vectorize pass)
    UNROLLED = "unrolled"  #: replicated body (unroll pass)
    #: a loop the code generator asks its compiler to unroll (LLVM's loop unroller, CUDA's
    #: ``#pragma unroll``): the TIR keeps one body, so passes after it stay cheap
    UNROLL_HINT = "unroll_hint"
    THREAD_BINDING = "thread_binding"  #: bound to a GPU axis named by ``thread_tag``


#: GPU axes a loop may be bound to.
THREAD_TAGS = (
    "blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z",
    "vthread",
)


class Stmt:
    """Base of every TIR statement."""

    def __repr__(self) -> str:
        from .printer import stmt_to_str

        return stmt_to_str(self)


@dataclass(frozen=True, eq=False, repr=False)
class For(Stmt):
    """``for var in [min, min + extent)``, run as ``kind`` says."""

    var: Var
    min: Expr
    extent: Expr
    kind: ForKind
    body: Stmt
    thread_tag: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "min", as_expr(self.min, INDEX_DTYPE))
        object.__setattr__(self, "extent", as_expr(self.extent, INDEX_DTYPE))


@dataclass(frozen=True, eq=False, repr=False)
class BufferStore(Stmt):
    """``buffer[indices] = value`` (a vector store where an index is a Ramp)."""

    buffer: Buffer
    value: Expr
    indices: tuple[Expr, ...]

    def __post_init__(self):
        object.__setattr__(self, "value", as_expr(self.value, self.buffer.dtype))
        object.__setattr__(self, "indices", as_index_tuple(self.indices))


@dataclass(frozen=True, eq=False, repr=False)
class Allocate(Stmt):
    """``buffer`` (in its scope) lives for the duration of ``body``."""

    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, eq=False, repr=False)
class IfThenElse(Stmt):
    """A guard; ``likely`` marks bound checks of non-dividing splits, which usually hold."""

    condition: Expr
    then_case: Stmt
    else_case: Stmt | None = None
    likely: bool = False


@dataclass(frozen=True, eq=False, repr=False)
class SeqStmt(Stmt):
    """Statements run in order; build with :func:`seq`, which flattens nesting."""

    stmts: tuple[Stmt, ...]


@dataclass(frozen=True, eq=False, repr=False)
class Evaluate(Stmt):
    """An expression run for its effect (an intrinsic call)."""

    value: Expr


@dataclass(frozen=True, eq=False, repr=False)
class PrimFunc:
    """A function over buffers: ``params`` are its arguments (shape + dtype each)."""

    name: str
    params: tuple[Buffer, ...]
    body: Stmt
    attrs: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        from .printer import func_to_str

        return func_to_str(self)


def seq(stmts: Sequence[Stmt]) -> Stmt:
    """The statements in order, flattening nested sequences; one statement stays itself."""
    flat: list[Stmt] = []
    for stmt in stmts:
        if isinstance(stmt, SeqStmt):
            flat.extend(stmt.stmts)
        elif stmt is not None:
            flat.append(stmt)
    return flat[0] if len(flat) == 1 else SeqStmt(tuple(flat))
