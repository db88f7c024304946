"""Virtual threads for a decoupled access-execute target.

A loop bound to ``vthread`` runs its body once per thread, each copy with its own
on-chip buffers. Unlike the generic ``tir.inject_virtual_threads`` (copies one
after the other), the copies are interleaved: shared serial loops stay shared and
each run of consecutive leaf operations (DMAs, a GEMM, an epilogue with its
store) is issued for thread 0, then for thread 1. Issued in that order,
the load module fills one thread's buffers while the compute module works on the
other's, and the store module drains one accumulator block while the next is
computed: double buffering, once the dependency tokens are in.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from heterocc.sdk import CompileError, tir


@dataclass
class _Thread:
    """One virtual thread: the thread variable's value and its private buffers."""

    values: dict
    buffers: dict


class _RenameBuffers(tir.Mutator):
    def __init__(self, buffers: dict):
        self.buffers = buffers

    def visit_BufferLoad(self, node):
        node = self.generic(node)
        new = self.buffers.get(node.buffer)
        return node if new is None else dataclasses.replace(node, buffer=new)

    def visit_BufferStore(self, node):
        node = self.generic(node)
        new = self.buffers.get(node.buffer)
        return node if new is None else dataclasses.replace(node, buffer=new)


def is_leaf_operation(stmt: tir.Stmt) -> bool:
    """Whether ``stmt`` is a perfect loop nest around one store or call: the unit an
    accelerator instruction implements."""
    while isinstance(stmt, tir.For):
        stmt = stmt.body
    return isinstance(stmt, tir.BufferStore | tir.Evaluate)


def _interleave(stmt: tir.Stmt, threads: list[_Thread]) -> tir.Stmt:
    if isinstance(stmt, tir.Allocate):
        own = [dataclasses.replace(stmt.buffer, name=f"{stmt.buffer.name}.vt{k}")
               for k in range(len(threads))]
        inner = [_Thread(t.values, {**t.buffers, stmt.buffer: b}) for t, b in zip(threads, own)]
        body = _interleave(stmt.body, inner)
        for buffer in reversed(own):
            body = tir.Allocate(buffer, body)
        return body
    if isinstance(stmt, tir.SeqStmt):
        # consecutive leaf operations stay together per thread (thread 0's loads and
        # GEMM, then thread 1's), so one thread's loads never wait behind the other's
        parts, run = [], []
        for s in stmt.stmts:
            if is_leaf_operation(s):
                run.append(s)
                continue
            if run:
                parts.append(_copies(tir.seq(run), threads))
                run = []
            parts.append(_interleave(s, threads))
        if run:
            parts.append(_copies(tir.seq(run), threads))
        return tir.seq(parts)
    if isinstance(stmt, tir.For) and not is_leaf_operation(stmt):
        if tir.free_vars(stmt.extent) | tir.free_vars(stmt.min):
            raise CompileError(f"loop {stmt.var.name!r} inside a virtual thread has bounds that "
                               "depend on the thread; it cannot be shared by the threads")
        return dataclasses.replace(stmt, body=_interleave(stmt.body, threads))
    return _copies(stmt, threads)


def _copies(stmt: tir.Stmt, threads: list[_Thread]) -> tir.Stmt:
    return tir.seq([_RenameBuffers(t.buffers).stmt(tir.substitute(stmt, t.values))
                    for t in threads])


class _Injector(tir.Mutator):
    def visit_For(self, node):
        node = self.generic(node)
        if node.kind is not tir.ForKind.THREAD_BINDING or node.thread_tag != "vthread":
            return node
        if not (isinstance(node.min, tir.IntImm) and isinstance(node.extent, tir.IntImm)):
            raise CompileError(f"virtual thread loop {node.var.name!r} needs constant bounds")
        threads = [_Thread({node.var: tir.IntImm(node.min.value + k)}, {})
                   for k in range(node.extent.value)]
        return _interleave(node.body, threads)


def interleave_virtual_threads(func: tir.PrimFunc) -> tir.PrimFunc:
    """``func`` with every ``vthread`` loop replaced by its threads' interleaved copies."""
    return _Injector().func(func)
