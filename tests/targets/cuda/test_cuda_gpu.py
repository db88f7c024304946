"""The CUDA target on a real GPU: kernels built by nvcc, launched through the driver
API, compared with NumPy; device arrays chained through kernels; a whole model through
``CudaTarget`` (device memory reused across runs) and through an artifact. Skipped (with
the reason) where the CUDA driver sees no GPU or nvcc is missing; CI has neither. The
same runtime code is checked without a GPU on HostMemoryDriver (test_cuda_runtime.py,
test_cuda_device_resident.py)."""

from __future__ import annotations

import numpy as np
import pytest

import heterocc
from heterocc.models.tiny_cnn import tiny_cnn
from heterocc.targets.cuda import (
    CudaDevice,
    CudaTarget,
    DeviceArray,
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


def test_device_arrays_chain_through_kernels(device):
    case = kernels.elementwise()
    gpu = lower_for_gpu(case.outputs, case.inputs, "chain")
    module = CudaTarget(archs=(device.arch,)).compile_module(gpu)
    function = DeviceFunction(device, gpu, module.image_for(device.arch))
    x, bias = (0.1 * a for a in case.random_inputs())
    value = DeviceArray.from_host(function.pool, x)
    bias_on_device = DeviceArray.from_host(function.pool, bias)
    expected = x
    for _ in range(3):  # each output feeds the next launch without leaving the GPU
        out = DeviceArray(function.pool, case.outputs[0].shape, case.outputs[0].dtype)
        function.launch([value, bias_on_device, out])
        value, expected = out, case.reference(expected, bias)[0]
    np.testing.assert_allclose(value.numpy(), expected, rtol=1e-4, atol=1e-5)
    del value, out, bias_on_device
    function.release()
    function.pool.trim()
    assert function.pool.allocated_bytes == 0


def test_model_through_cuda_target_matches_reference():
    model = tiny_cnn()
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    target = CudaTarget(run_on="gpu")
    compiled = heterocc.compile(model, target=[target])
    want = heterocc.compile(model, target="reference").run([x])
    assert target.modules, "no function was compiled for the GPU"
    got = compiled.run([x])
    allocations = target.pool.allocations
    for _ in range(3):  # later runs take all their device memory from the pool
        got = compiled.run([x])
    assert target.pool.allocations == allocations
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4)


def test_artifact_runs_its_cubins_on_the_gpu(tmp_path):
    model = tiny_cnn(size=16)
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    compiled = heterocc.compile(model, target=[CudaTarget(run_on="gpu")])
    expected = compiled.run([x])
    compiled.export(str(tmp_path / "model"))
    loaded = heterocc.load(str(tmp_path / "model"))
    np.testing.assert_allclose(loaded.run([x])[0], expected[0], rtol=1e-5, atol=1e-6)
