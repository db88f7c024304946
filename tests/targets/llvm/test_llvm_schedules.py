"""The LLVM target's matmul schedule: correct for any sizes (tails, tiny, non-square)."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc import tir
from heterocc.errors import CompileError
from heterocc.targets import llvm as hllvm
from heterocc.targets.llvm import schedules

RNG = np.random.default_rng(5)


@pytest.mark.parametrize("m,n,k", [(64, 64, 64), (37, 45, 29), (3, 5, 2), (1, 100, 7),
                                   (130, 33, 64)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matmul_schedule_matches_numpy(m, n, k, dtype):
    func = schedules.matmul_function(m, n, k, dtype)
    a = RNG.standard_normal((m, k)).astype(dtype)
    b = RNG.standard_normal((k, n)).astype(dtype)
    c = np.full((m, n), np.nan, dtype)
    hllvm.build(func)(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_main_tiles_are_guard_free_and_vectorized():
    func = schedules.matmul_function(37, 45, 29)
    assert tir.collect(func.body, lambda n: isinstance(n, tir.Ramp) and n.lanes == 32)
    module = hllvm.build(func)
    assert "<32 x float>" in module.unoptimized_ir


def test_matmul_rejects_mismatched_operands():
    from heterocc import te

    A = te.placeholder((4, 5), "float32", "A")
    with pytest.raises(CompileError, match="needs A"):
        schedules.matmul(A, te.placeholder((4, 5), "float32", "B"))


@pytest.mark.parametrize("shape", [(7, 13), (3, 64, 65), (300, 70), (5,)])
def test_injective_schedule_broadcast_add(shape):
    from heterocc import te

    A = te.placeholder(shape, "float32", "A")
    bias = te.placeholder((shape[-1],), "float32", "bias")
    C = te.compute(shape, lambda *i: te.exp(A[i]) + bias[i[-1]], name="C")
    s = te.create_schedule(C)
    schedules.schedule_injective(s, C)
    func = te.lower(s, [A, bias, C], name="f")
    a = RNG.standard_normal(shape).astype(np.float32)
    b = RNG.standard_normal(shape[-1]).astype(np.float32)
    c = np.zeros(shape, np.float32)
    hllvm.build(func)(a, b, c)
    np.testing.assert_allclose(c, np.exp(a) + b, rtol=1e-5, atol=1e-6)
    # the fused index recombines: A and C are read and written as contiguous vectors
    loads = tir.collect(func.body, lambda n: isinstance(n, tir.BufferLoad) and n.buffer.name == "A")
    assert all(isinstance(load.indices[0], tir.Ramp) for load in loads)


@pytest.mark.parametrize("shape,axis", [((40, 1000), 1), ((300, 70), 0), ((6, 7, 8), 1)])
def test_reduction_schedule_sum(shape, axis):
    from heterocc import te

    A = te.placeholder(shape, "float32", "A")
    r = te.reduce_axis(shape[axis], "r")
    out_shape = shape[:axis] + shape[axis + 1:]

    def body(*i):
        return te.sum(A[i[:axis] + (r,) + i[axis:]], axis=r)

    S = te.compute(out_shape, body, name="S")
    s = te.create_schedule(S)
    schedules.schedule_reduction(s, S)
    a = RNG.standard_normal(shape).astype(np.float32)
    out = np.zeros(out_shape, np.float32)
    hllvm.build(te.lower(s, [A, S], name="f"))(a, out)
    np.testing.assert_allclose(out, a.sum(axis), rtol=1e-4, atol=1e-4)
