"""IRBuilder: writing TIR statements imperatively, with ``with`` blocks for loops,
guards and allocations (for tensor intrinsics, hand-written kernels and codegens).

Example::

    ib = IRBuilder()
    out = tir.Buffer("out", (16,), "float32")
    with ib.for_range(16, "i", kind=ForKind.VECTORIZED) as i:
        with ib.if_scope(i < 10):
            ib.store(out, 1.0, i)
    stmt = ib.get()
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import CompileError
from .expr import INDEX_DTYPE, Buffer, Expr, Var, as_expr
from .stmt import Allocate, BufferStore, Evaluate, For, ForKind, IfThenElse, SeqStmt, Stmt, seq


class IRBuilder:
    """Collects statements into nested scopes; :meth:`get` returns the finished body."""

    def __init__(self):
        self._scopes: list[list[Stmt]] = [[]]

    def emit(self, stmt: Stmt) -> None:
        """Append ``stmt`` to the current scope."""
        self._scopes[-1].append(stmt)

    def store(self, buffer: Buffer, value, *indices) -> None:
        """``buffer[indices] = value``."""
        self.emit(BufferStore(buffer, as_expr(value, buffer.dtype), tuple(indices)))

    def evaluate(self, value: Expr) -> None:
        """Run ``value`` (an intrinsic call) for its effect."""
        self.emit(Evaluate(value))

    @contextmanager
    def _scope(self) -> Iterator[list[Stmt]]:
        self._scopes.append([])
        try:
            yield self._scopes[-1]
        finally:
            self._scopes.pop()

    @contextmanager
    def for_range(self, extent, name: str = "i", kind: ForKind = ForKind.SERIAL, start=0,
                  thread_tag: str | None = None) -> Iterator[Var]:
        """A loop over ``[start, start + extent)``; yields its variable."""
        var = Var(name, INDEX_DTYPE)
        with self._scope() as body:
            yield var
        self.emit(For(var, start, extent, kind, seq(body) if body else SeqStmt(()),
                      thread_tag))

    @contextmanager
    def if_scope(self, condition: Expr, likely: bool = False) -> Iterator[None]:
        """Statements that run only where ``condition`` holds."""
        with self._scope() as body:
            yield
        self.emit(IfThenElse(condition, seq(body) if body else SeqStmt(()), likely=likely))

    @contextmanager
    def else_scope(self) -> Iterator[None]:
        """The else branch of the ``if_scope`` just closed."""
        scope = self._scopes[-1]
        if not scope or not isinstance(scope[-1], IfThenElse) or scope[-1].else_case is not None:
            raise CompileError("else_scope must directly follow an if_scope without an else")
        guard = scope.pop()
        with self._scope() as body:
            yield
        self.emit(IfThenElse(guard.condition, guard.then_case,
                             seq(body) if body else SeqStmt(()), guard.likely))

    @contextmanager
    def allocate(self, shape: tuple[int, ...], dtype: str, name: str,
                 scope: str = "local") -> Iterator[Buffer]:
        """A buffer that lives for the statements of the block; yields it."""
        buffer = Buffer(name, tuple(int(d) for d in shape), dtype, scope)
        with self._scope() as body:
            yield buffer
        self.emit(Allocate(buffer, seq(body) if body else SeqStmt(())))

    def get(self) -> Stmt:
        """The statements built so far (outside every open block)."""
        if len(self._scopes) != 1:
            raise CompileError("IRBuilder.get() called inside an open with-block")
        body = self._scopes[0]
        return seq(body) if body else SeqStmt(())
