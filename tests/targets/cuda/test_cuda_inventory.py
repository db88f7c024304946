"""The compute library through the cuda target without a GPU: one official ONNX node
test case per op with a TE compute, scheduled for the GPU and run by the CPU emulation
of its kernels, must match the case's outputs; every kernel made on the way must compile
with nvcc (one translation unit). ``python -m tests.targets.cuda.test_cuda_inventory``
runs every case instead of one per op and prints the counts."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
from onnx import numpy_helper

import heterocc
from heterocc.compute import has_compute
from heterocc.ir.types import EXTENDED_DTYPES
from heterocc.targets.cuda import CudaTarget, compile_cuda, cuda_source, find_nvcc

#: a floor against regressions: functions of the one-per-op cases that compile for the GPU
#: (the others are forms the compute library has no TE compute for, which run on NumPy).
MIN_COMPILED_FUNCTIONS = 95


@functools.cache
def _cases(one_per_op: bool):
    from onnx.backend.test.case.node import collect_testcases

    seen, out = set(), []
    for case in collect_testcases(None):
        nodes = case.model.graph.node
        if case.kind != "node" or len(nodes) != 1 or not has_compute(nodes[0].op_type):
            continue
        if one_per_op and nodes[0].op_type in seen:
            continue
        seen.add(nodes[0].op_type)
        out.append(case)
    return out


def _array(x):
    return numpy_helper.to_array(x) if hasattr(x, "data_type") else np.asarray(x)


def _matches(out, ref, case) -> bool:
    ref = _array(ref)
    if ref.dtype.name in EXTENDED_DTYPES:
        out, ref = out.astype(np.float32), ref.astype(np.float32)
    if out.shape != ref.shape:
        return False
    if ref.dtype.kind in "fc":
        return np.allclose(out, ref, rtol=max(case.rtol, 1e-4), atol=max(case.atol, 1e-5),
                           equal_nan=True)
    return np.array_equal(out, ref)


@dataclasses.dataclass
class InventoryRun:
    failures: list[str]
    targets: list[CudaTarget]

    @property
    def compiled(self) -> int:
        return sum(len(t.modules) for t in self.targets)

    def kernels(self) -> list:
        out = []
        for target in self.targets:
            for module in target.modules.values():
                out += [dataclasses.replace(k, name=f"f{len(out)}_{k.name}")
                        for k in module.gpu.kernels]
        return out


def run_cases(cases) -> InventoryRun:
    """Every case through an emulating cuda target (no nvcc); the failing case names."""
    failures, targets = [], []
    for case in cases:
        inputs, expected = case.data_sets[0]
        target = CudaTarget(run_on="emulator", nvcc="never")
        try:
            outputs = heterocc.compile(case.model, target=[target]).run(
                [_array(x) for x in inputs])
        except heterocc.errors.HeteroccError:
            continue  # a dtype or form the reference itself rejects: not this test's subject
        if not all(_matches(o, r, case) for o, r in zip(outputs, expected)):
            failures.append(case.name)
        targets.append(target)
    return InventoryRun(failures, targets)


@functools.cache
def _one_per_op() -> InventoryRun:
    return run_cases(_cases(one_per_op=True))


def test_inventory_kernels_match_onnx_cases_in_emulation():
    run = _one_per_op()
    assert not run.failures, run.failures
    assert run.compiled >= MIN_COMPILED_FUNCTIONS, run.compiled


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed")
def test_inventory_kernels_compile_with_nvcc():
    kernels = _one_per_op().kernels()
    compiled = compile_cuda(cuda_source("inventory", kernels), "inventory", ("sm_90",))
    assert all(f".entry {k.name}(" in compiled.ptx for k in kernels)


if __name__ == "__main__":
    every = run_cases(_cases(one_per_op=False))
    ops = {c.model.graph.node[0].op_type for c in _cases(one_per_op=False)}
    print(f"{len(_cases(one_per_op=False))} ONNX node cases of {len(ops)} ops with a TE "
          f"compute; {every.compiled} functions compiled for the GPU; "
          f"{len(every.failures)} mismatches: {every.failures}")
    all_kernels = every.kernels()
    compile_cuda(cuda_source("inventory", all_kernels), "inventory", ("sm_90",))
    print(f"nvcc compiled all {len(all_kernels)} kernels for sm_90")
