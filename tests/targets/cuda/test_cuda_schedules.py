"""Semantics of every GPU schedule without a GPU: the kernels the CUDA code generator
prints, run sequentially on the CPU (thread loops as serial loops, barriers respected,
per-thread registers per thread), against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc import te
from heterocc.errors import CompileError
from heterocc.targets.cuda import MatmulTiling, lower_for_gpu, run_emulated, schedules

from . import kernels


def _run(case, gpu):
    inputs = case.random_inputs()
    outputs = [np.full(t.shape, np.nan, t.dtype) for t in case.outputs]
    run_emulated(gpu, inputs + outputs)
    for got, want in zip(outputs, case.reference(*inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", kernels.inventory_cases(), ids=lambda c: c.name)
def test_gpu_schedule_matches_numpy(case):
    _run(case, lower_for_gpu(case.outputs, case.inputs, case.name))


def test_matmul_uses_shared_tiles_and_register_blocks():
    case = kernels.matmul(128, 256, 64)
    gpu = lower_for_gpu(case.outputs, case.inputs, "mm")
    (kernel,) = gpu.kernels
    assert kernel.grid == (4, 2, 1) and kernel.block == (16, 16, 1)
    (accumulator,) = kernel.per_thread
    assert accumulator.shape == (4, 4) and accumulator.scope == "local"
    assert set(kernel.per_thread[accumulator]) == {"threadIdx.x", "threadIdx.y"}


@pytest.mark.parametrize("tiling", [MatmulTiling(32, 64, 2, 4, 4), MatmulTiling(64, 32, 4, 2, 16)])
def test_matmul_tilings_with_tails(tiling):
    case = kernels.matmul(70, 90, 37)
    s = te.create_schedule(case.outputs)
    schedules.schedule_matmul(s, case.outputs[0], tiling)
    from heterocc.targets.cuda import lower_to_kernels

    func = te.lower(s, [*case.inputs, *case.outputs], name="mm", optimize=False)
    _run(case, lower_to_kernels(func))


def test_matmul_schedule_rejects_other_computes():
    case = kernels.row_sum()
    s = te.create_schedule(case.outputs)
    with pytest.raises(CompileError, match="is not sum"):
        schedules.schedule_matmul(s, case.outputs[0])
    mm = kernels.matmul(64, 64, 8)
    s = te.create_schedule(mm.outputs)
    with pytest.raises(CompileError, match="does not divide"):
        schedules.schedule_matmul(s, mm.outputs[0], MatmulTiling(64, 64, 3, 4, 8))


def test_packed_cpu_matmul_is_unpacked_for_the_gpu():
    from heterocc.targets.llvm.schedules import matmul

    a = te.placeholder((40, 24), "float32", "A")
    b = te.placeholder((24, 50), "float32", "B")
    c = matmul(a, b)
    gpu = lower_for_gpu([c], [a, b], "packed")
    assert len(gpu.kernels) == 1  # no separate packing kernel
    x = np.random.default_rng(1).standard_normal((40, 24)).astype(np.float32)
    y = np.random.default_rng(2).standard_normal((24, 50)).astype(np.float32)
    out = np.zeros((40, 50), np.float32)
    run_emulated(gpu, [x, y, out])
    np.testing.assert_allclose(out, x @ y, rtol=1e-4, atol=1e-4)
