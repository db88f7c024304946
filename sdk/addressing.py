"""Walking a lowered accelerator function: loop variables bound, operands as buffer +
offset, runs of commands merged: the core of a command-list codegen."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from heterocc import tir
from heterocc.errors import CompileError


def evaluate_index(expr: tir.Expr, env: dict[tir.Var, int]) -> int:
    """The integer value of ``expr`` (an address or index) with the loop variables of
    ``env`` bound; CompileError when it still depends on something else."""
    bound = tir.simplify(tir.substitute(expr, {v: tir.IntImm(k) for v, k in env.items()}))
    if not isinstance(bound, tir.IntImm):
        raise CompileError(f"index {tir.expr_to_str(expr)} is not a compile-time integer "
                           f"once the loops are bound (left: {tir.expr_to_str(bound)})")
    return int(bound.value)


def flat_offset(buffer: tir.Buffer, indices: Sequence[int]) -> int:
    """The row-major element offset of ``indices`` in ``buffer`` (fewer indices than
    dimensions address its innermost ones)."""
    flat = 0
    for index, extent in zip(indices, buffer.shape[-len(indices):] if indices else ()):
        flat = flat * extent + index
    return flat


def element_address(load: tir.BufferLoad, env: dict[tir.Var, int]) -> tuple[tir.Buffer, int]:
    """The buffer and element offset a ``BufferLoad`` reads with the loop variables of
    ``env`` bound: how a command-list codegen turns an intrinsic's operand (the first
    element of a region) into an address."""
    return load.buffer, flat_offset(load.buffer, [evaluate_index(i, env) for i in load.indices])


def coalesce(items: Sequence[Any], merge: Callable[[Any, Any], Any | None]) -> list[Any]:
    """``items`` with adjacent ones merged: ``merge(last, item)`` returns their merger
    (which may merge again with the next) or None to keep them apart. A command-list
    codegen merges the one-element commands of lowering's element-wise loops this way
    (the zero initialization of a reduction becomes one clear per run of addresses)."""
    merged: list[Any] = []
    for item in items:
        joined = merge(merged[-1], item) if merged else None
        if joined is None:
            merged.append(item)
        else:
            merged[-1] = joined
    return merged


def leaf_statements(func: tir.PrimFunc) -> Iterator[tuple[tir.Stmt, dict[tir.Var, int]]]:
    """Every statement of ``func`` that is not a loop or a sequence, once per loop
    iteration, with the loop variables bound (outer loops first, in program order).
    A command-list codegen maps each to commands; ``Allocate`` nodes are entered
    (their buffers are the target's to place) and yielded before their body."""

    return _Leaves().stmt(func.body, {})


class _Leaves(tir.StmtFunctor):
    """The walk of :func:`leaf_statements`: each rule yields the leaves under its
    statement, given the loop variables bound around it."""

    def visit_SeqStmt(self, stmt: tir.SeqStmt, env: dict[tir.Var, int]) -> Iterator:
        for inner in stmt.stmts:
            yield from self.stmt(inner, env)

    def visit_For(self, stmt: tir.For, env: dict[tir.Var, int]) -> Iterator:
        start, extent = evaluate_index(stmt.min, env), evaluate_index(stmt.extent, env)
        for k in range(start, start + extent):
            yield from self.stmt(stmt.body, {**env, stmt.var: k})

    def visit_Allocate(self, stmt: tir.Allocate, env: dict[tir.Var, int]) -> Iterator:
        yield stmt, env
        yield from self.stmt(stmt.body, env)

    def visit_default(self, stmt: tir.Stmt, env: dict[tir.Var, int]) -> Iterator:
        yield stmt, env
