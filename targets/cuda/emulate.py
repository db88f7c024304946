"""The CPU reading of GPU kernels, to check a GPU schedule's semantics without a GPU.

Every kernel of a :class:`~heterocc.targets.cuda.passes.GpuFunction` is the TIR the
CUDA code generator prints. Run sequentially it means the same thing as on the GPU
(see :mod:`heterocc.targets.cuda.passes`): block and thread loops become serial loops,
barriers vanish (at block level they only separate whole thread-loop nests, which a
sequential run already orders), thread indices in owner guards are 0 (block-level code
runs once), and each per-thread buffer gets one copy per thread, addressed by the
enclosing thread loops. The result is one PrimFunc compiled by the LLVM target.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from heterocc.sdk.registry import compile_for_host
from heterocc.tir import expr as tx
from heterocc.tir.stmt import Allocate, BufferStore, For, ForKind, PrimFunc, SeqStmt, Stmt, seq
from heterocc.tir.visitor import Mutator

from .passes import Barrier, GpuFunction, Kernel


class _ThreadsAsLoops(Mutator):
    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self.index_vars = set(kernel.thread_index_vars.values())
        self.threads: dict[str, tx.Var] = {}
        self.copies: dict[tx.Buffer, tx.Buffer] = {}

    def visit_For(self, node: For) -> Stmt:
        if node.kind is not ForKind.THREAD_BINDING:
            return self.generic(node)
        outer = self.threads.get(node.thread_tag)
        self.threads[node.thread_tag] = node.var
        try:
            body = self.stmt(node.body)
        finally:
            if outer is None:
                del self.threads[node.thread_tag]
            else:
                self.threads[node.thread_tag] = outer
        return dataclasses.replace(node, kind=ForKind.SERIAL, thread_tag=None, body=body)

    def visit_Barrier(self, node: Barrier) -> Stmt:
        return SeqStmt(())

    def visit_Var(self, node: tx.Var) -> tx.Expr:
        return tx.IntImm(0, node.dtype) if node in self.index_vars else node

    def visit_Allocate(self, node: Allocate) -> Stmt:
        tags = self.kernel.per_thread.get(node.buffer)
        if tags is None:
            return self.generic(node)
        copies = int(np.prod([self.kernel.launch[t] for t in tags]))
        self.copies[node.buffer] = dataclasses.replace(
            node.buffer, shape=(copies * node.buffer.size,))
        return Allocate(self.copies[node.buffer], self.stmt(node.body))

    def _own_copy(self, buffer: tx.Buffer, index: tx.Expr) -> tx.Expr:
        thread: tx.Expr = tx.IntImm(0)
        for tag in self.kernel.per_thread[buffer]:
            thread = thread * self.kernel.launch[tag] + self.threads[tag]
        offset = thread * buffer.size
        if isinstance(index, tx.Ramp):
            return tx.Ramp(index.base + offset, index.stride, index.lanes)
        return index + offset

    def visit_BufferLoad(self, node: tx.BufferLoad) -> tx.Expr:
        node = self.generic(node)
        if node.buffer not in self.copies:
            return node
        (index,) = node.indices
        return tx.BufferLoad(self.copies[node.buffer], (self._own_copy(node.buffer, index),),
                             node.predicate)

    def visit_BufferStore(self, node: BufferStore) -> Stmt:
        node = self.generic(node)
        if node.buffer not in self.copies:
            return node
        (index,) = node.indices
        return BufferStore(self.copies[node.buffer], node.value,
                           (self._own_copy(node.buffer, index),))


def kernel_function(kernel: Kernel) -> PrimFunc:
    """One kernel alone as a sequential PrimFunc over ``kernel.params``."""
    return PrimFunc(kernel.name, kernel.params, _ThreadsAsLoops(kernel).stmt(kernel.body))


def sequential_function(gpu: GpuFunction) -> PrimFunc:
    """One PrimFunc over ``gpu.params`` running every kernel in order, sequentially."""
    body = seq([_ThreadsAsLoops(k).stmt(k.body) for k in gpu.kernels])
    for workspace in reversed(gpu.workspaces):
        body = Allocate(workspace, body)
    return PrimFunc(gpu.name, gpu.params, body)


class EmulatedFunction:
    """``gpu`` compiled for the host CPU by the host target (the registry's
    :func:`~heterocc.sdk.registry.compile_for_host`); call with NumPy arrays for
    every parameter (outputs are written in place)."""

    def __init__(self, gpu: GpuFunction):
        self.gpu = gpu
        self.function = sequential_function(gpu)
        self.module = compile_for_host([self.function], name=gpu.name)

    def __call__(self, *arrays: np.ndarray) -> None:
        self.module[self.gpu.name](*arrays)


def run_emulated(gpu: GpuFunction, arrays: Sequence[np.ndarray]) -> None:
    """Run ``gpu`` on the CPU over ``arrays`` (one per parameter, outputs in place)."""
    EmulatedFunction(gpu)(*arrays)
