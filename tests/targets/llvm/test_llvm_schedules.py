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
