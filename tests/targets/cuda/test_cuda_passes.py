"""The CUDA kernel pipeline on hand-written TIR: kernels per root nest, launch extents,
barriers where threads exchange data through shared memory, owner guards on block-level
stores, compaction of per-thread buffers, and the errors for schedules a GPU cannot run."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc import tir
from heterocc.errors import CompileError
from heterocc.targets.cuda import Barrier, lower_to_kernels, run_emulated
from heterocc.targets.cuda.passes import THREAD_AXES
from heterocc.tir import ForKind, IRBuilder

BIND = ForKind.THREAD_BINDING


def _func(body, *params):
    return tir.PrimFunc("f", tuple(params), body)


def _barriers(stmt) -> int:
    return len(tir.collect(stmt, lambda n: isinstance(n, Barrier)))


def _reverse_through_shared(n=64):
    """out[b, i] = x[b, n - 1 - i]: each thread stores one element into shared memory and
    reads another thread's element back."""
    x = tir.Buffer("x", (4, n), "float32")
    out = tir.Buffer("out", (4, n), "float32")
    ib = IRBuilder()
    with ib.for_range(4, "b", BIND, thread_tag="blockIdx.x") as b:
        with ib.allocate((n,), "float32", "tile", scope="shared") as tile:
            with ib.for_range(n, "t", BIND, thread_tag="threadIdx.x") as t:
                ib.store(tile, tir.BufferLoad(x, (b, t)) * 2.0, t)
            with ib.for_range(n, "t", BIND, thread_tag="threadIdx.x") as t:
                ib.store(out, tir.BufferLoad(tile, (n - 1 - t,)), b, t)
    return _func(ib.get(), x, out), x, out


def test_barrier_separates_exchange_through_shared_memory():
    func, _, _ = _reverse_through_shared()
    gpu = lower_to_kernels(func)
    (kernel,) = gpu.kernels
    assert kernel.grid == (4, 1, 1) and kernel.block == (64, 1, 1)
    assert _barriers(kernel.body) == 1
    data = np.arange(256, dtype=np.float32).reshape(4, 64)
    result = np.zeros_like(data)
    run_emulated(gpu, [data, result])
    np.testing.assert_array_equal(result, 2 * data[:, ::-1])


def test_loop_over_shared_tiles_gets_a_barrier_before_the_next_overwrite():
    x = tir.Buffer("x", (8, 32), "float32")
    out = tir.Buffer("out", (32,), "float32")
    ib = IRBuilder()
    with ib.allocate((32,), "float32", "acc", scope="shared") as acc:
        with ib.for_range(32, "t", BIND, thread_tag="threadIdx.x") as t:
            ib.store(acc, 0.0, t)
        with ib.for_range(8, "step") as step:
            with ib.allocate((32,), "float32", "tile", scope="shared") as tile:
                with ib.for_range(32, "t", BIND, thread_tag="threadIdx.x") as t:
                    ib.store(tile, tir.BufferLoad(x, (step, t)), t)
                with ib.for_range(32, "t", BIND, thread_tag="threadIdx.x") as t:
                    neighbour = tir.BufferLoad(tile, ((t + 1) % 32,))
                    ib.store(acc, tir.BufferLoad(acc, (t,)) + neighbour, t)
        with ib.for_range(32, "t", BIND, thread_tag="threadIdx.x") as t:
            ib.store(out, tir.BufferLoad(acc, (t,)), t)
    gpu = lower_to_kernels(_func(ib.get(), x, out))
    (loop,) = tir.collect(gpu.kernels[0].body, lambda n: isinstance(n, tir.For)
                          and n.var.name == "step")
    body = loop.body.body if isinstance(loop.body, tir.Allocate) else loop.body
    assert isinstance(body.stmts[-1], Barrier), "the next step's copy overwrites the tile"
    data = np.random.default_rng(0).standard_normal((8, 32)).astype(np.float32)
    result = np.zeros(32, np.float32)
    run_emulated(gpu, [data, result])
    np.testing.assert_allclose(result, np.roll(data, -1, axis=1).sum(axis=0), rtol=1e-5)


def test_block_level_store_runs_on_thread_zero():
    x = tir.Buffer("x", (16,), "float32")
    out = tir.Buffer("out", (16,), "float32")
    ib = IRBuilder()
    with ib.allocate((1,), "float32", "total", scope="shared") as total:
        ib.store(total, 0.0, 0)
        with ib.for_range(16, "k") as k:  # a serial reduction at block level
            ib.store(total, tir.BufferLoad(total, (0,)) + tir.BufferLoad(x, (k,)), 0)
        with ib.for_range(16, "t", BIND, thread_tag="threadIdx.x") as t:
            ib.store(out, tir.BufferLoad(x, (t,)) / tir.BufferLoad(total, (0,)), t)
    gpu = lower_to_kernels(_func(ib.get(), x, out))
    (kernel,) = gpu.kernels
    guards = tir.collect(kernel.body, lambda n: isinstance(n, tir.IfThenElse))
    assert guards and kernel.thread_index_vars["threadIdx.x"] in tir.free_vars(
        guards[0].condition)
    assert _barriers(kernel.body) >= 1
    data = np.arange(1, 17, dtype=np.float32)
    result = np.zeros(16, np.float32)
    run_emulated(gpu, [data, result])
    np.testing.assert_allclose(result, data / data.sum(), rtol=1e-6)


def test_root_nests_become_kernels_with_workspaces():
    x = tir.Buffer("x", (100,), "float32")
    out = tir.Buffer("out", (100,), "float32")
    ib = IRBuilder()
    with ib.allocate((100,), "float32", "middle", scope="global") as middle:
        with ib.for_range(100, "t", BIND, thread_tag="threadIdx.x") as t:
            ib.store(middle, tir.BufferLoad(x, (t,)) + 1.0, t)
        with ib.for_range(4, "b", BIND, thread_tag="blockIdx.x") as b:
            with ib.for_range(25, "t", BIND, thread_tag="threadIdx.x") as t:
                ib.store(out, tir.BufferLoad(middle, (b * 25 + t,)) * 3.0, b * 25 + t)
    gpu = lower_to_kernels(_func(ib.get(), x, out))
    assert [k.grid for k in gpu.kernels] == [(1, 1, 1), (4, 1, 1)]
    assert [k.block for k in gpu.kernels] == [(100, 1, 1), (25, 1, 1)]
    assert gpu.workspaces == (middle,)
    data = np.arange(100, dtype=np.float32)
    result = np.zeros(100, np.float32)
    run_emulated(gpu, [data, result])
    np.testing.assert_allclose(result, (data + 1) * 3)


def _kernel_with(build):
    x = tir.Buffer("x", (64,), "float32")
    ib = IRBuilder()
    build(ib, x)
    return _func(ib.get(), x)


def test_shared_buffer_inside_thread_loop_is_refused():
    def build(ib, x):
        with ib.for_range(32, "t", BIND, thread_tag="threadIdx.x") as t:
            with ib.allocate((4,), "float32", "scratch", scope="shared") as scratch:
                ib.store(scratch, 1.0, 0)
                ib.store(x, tir.BufferLoad(scratch, (0,)), t)

    with pytest.raises(CompileError, match="scratch.*allocated inside the threadIdx.x"):
        lower_to_kernels(_kernel_with(build))


def test_block_loop_inside_serial_loop_is_refused():
    def build(ib, x):
        with ib.for_range(2, "s"):
            with ib.for_range(32, "b", BIND, thread_tag="blockIdx.x") as b:
                ib.store(x, 1.0, b)

    with pytest.raises(CompileError, match="outer chain of blockIdx"):
        lower_to_kernels(_kernel_with(build))


def test_too_many_threads_are_refused():
    def build(ib, x):
        with ib.for_range(64, "ty", BIND, thread_tag="threadIdx.y") as ty:
            with ib.for_range(32, "tx", BIND, thread_tag="threadIdx.x") as tx:
                ib.store(x, 1.0, (ty + tx) % 64)

    with pytest.raises(CompileError, match="2048 threads per block exceed 1024"):
        lower_to_kernels(_kernel_with(build))


def test_exchange_inside_one_thread_loop_is_refused():
    def build(ib, x):
        with ib.allocate((32,), "float32", "tile", scope="shared") as tile:
            with ib.for_range(32, "t", BIND, thread_tag="threadIdx.x") as t:
                ib.store(tile, 1.0, t)
                ib.store(x, tir.BufferLoad(tile, ((t + 1) % 32,)), t)

    with pytest.raises(CompileError, match="written and read inside the same threadIdx.x"):
        lower_to_kernels(_kernel_with(build))


def test_barrier_under_a_divergent_guard_is_refused():
    def build(ib, x):
        with ib.allocate((32,), "float32", "tile", scope="shared") as tile:
            with ib.for_range(2, "s") as s:
                with ib.if_scope(tir.BufferLoad(x, (s,)) > 0.0):
                    with ib.for_range(32, "t", BIND, thread_tag="threadIdx.x") as t:
                        ib.store(tile, 1.0, t)
                    with ib.for_range(32, "t", BIND, thread_tag="threadIdx.x") as t:
                        ib.store(x, tir.BufferLoad(tile, (31 - t,)), t)

    with pytest.raises(CompileError, match="barrier is needed under the guard"):
        lower_to_kernels(_kernel_with(build))


def test_thread_axes_are_the_three_cuda_axes():
    assert THREAD_AXES == ("threadIdx.x", "threadIdx.y", "threadIdx.z")
