"""The CUDA target on a real GPU: kernels built by nvcc, launched through the driver
API, compared with NumPy; a whole model through ``CudaTarget``. Skipped (with the reason)
where the CUDA driver sees no GPU or nvcc is missing; CI has neither."""

from __future__ import annotations

import numpy as np
import pytest

import heterocc
from heterocc.models.tiny_cnn import tiny_cnn
from heterocc.targets.cuda import (
    CudaDevice,
    CudaTarget,
    DeviceFunction,
    find_nvcc,
    gpu_available,
    lower_for_gpu,
)

from . import kernels

pytestmark = [
    pytest.mark.skipif(not gpu_available(), reason="no CUDA GPU visible to the driver"),
    pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed"),
]


@pytest.fixture(scope="module")
def device() -> CudaDevice:
    return CudaDevice(0)


@pytest.mark.parametrize("case", kernels.inventory_cases(), ids=lambda c: c.name)
def test_kernels_on_gpu_match_numpy(case, device):
    gpu = lower_for_gpu(case.outputs, case.inputs, case.name)
    module = CudaTarget(archs=(device.arch,)).compile_module(gpu)
    function = DeviceFunction(device, gpu, module.image_for(device.arch))
    inputs = case.random_inputs()
    outputs = [np.full(t.shape, np.nan, t.dtype) for t in case.outputs]
    function(*inputs, *outputs)
    for got, want in zip(outputs, case.reference(*inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_ptx_runs_when_there_is_no_cubin(device):
    case = kernels.elementwise()
    gpu = lower_for_gpu(case.outputs, case.inputs, "ptx_only")
    module = CudaTarget(archs=("sm_80",)).compile_module(gpu)
    module.compiled.cubins.clear()  # the driver JIT-compiles the PTX instead
    function = DeviceFunction(device, gpu, module.image_for(device.arch))
    inputs = case.random_inputs()
    out = np.zeros(case.outputs[0].shape, np.float32)
    function(*inputs, out)
    np.testing.assert_allclose(out, case.reference(*inputs)[0], rtol=1e-5, atol=1e-6)


def test_model_through_cuda_target_matches_reference():
    model = tiny_cnn()
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    target = CudaTarget(run_on="gpu")
    got = heterocc.compile(model, target=[target]).run([x])
    want = heterocc.compile(model, target="reference").run([x])
    assert target.modules, "no function was compiled for the GPU"
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4)
