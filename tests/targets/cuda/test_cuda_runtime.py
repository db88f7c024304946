"""The runtime's host side without a GPU: device arrays, the memory pool and
DeviceFunction (allocation, copies, launch order, arguments, workspaces, launch
descriptions loaded from JSON) on HostMemoryDriver, whose memory is host memory and
whose launches run each kernel's CPU emulation. The GPU's driver answers the same calls
in test_cuda_gpu.py."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from heterocc.errors import InputError, TargetError
from heterocc.targets.cuda import (
    DeviceArray,
    DeviceFunction,
    DevicePool,
    HostMemoryDriver,
    LaunchPlan,
    launch_plan,
    lower_for_gpu,
)
from heterocc.targets.cuda.memory import block_size

from . import kernels


@pytest.mark.parametrize("from_json", [False, True])
def test_device_function_launches_in_order_with_workspaces(from_json):
    case = kernels.softmax()  # row max, row sum of exponentials, quotient
    gpu = lower_for_gpu(case.outputs, case.inputs, "softmax")
    assert len(gpu.kernels) == 3 and len(gpu.workspaces) == 2
    plan = launch_plan(gpu)
    if from_json:
        plan = LaunchPlan.from_json(plan.to_json())
    driver = HostMemoryDriver()
    function = DeviceFunction(driver, plan, gpu)  # the host driver's image is the TIR
    inputs = case.random_inputs()
    out = np.full(case.outputs[0].shape, np.nan, np.float32)
    function(*inputs, out)
    np.testing.assert_allclose(out, case.reference(*inputs)[0], rtol=1e-4, atol=1e-4)
    assert driver.counts.launches == [k.name for k in gpu.kernels]
    # the input goes up, the output comes down, the workspaces stay on the device
    assert (driver.counts.uploads, driver.counts.downloads) == (1, 1)
    allocated = driver.counts.allocations
    assert allocated == len(plan.buffers)
    inputs = case.random_inputs()
    function(*inputs, out)  # a second call reuses the device memory
    np.testing.assert_allclose(out, case.reference(*inputs)[0], rtol=1e-4, atol=1e-4)
    assert driver.counts.allocations == allocated
    function.release()
    function.pool.trim()
    assert driver.allocated_bytes == 0 and driver.counts.frees == allocated
    with pytest.raises(InputError, match="released"):
        function(*inputs, out)


def test_device_function_checks_arguments():
    case = kernels.elementwise()
    gpu = lower_for_gpu(case.outputs, case.inputs, "ew")
    function = DeviceFunction(HostMemoryDriver(), gpu, gpu)
    x, bias = case.random_inputs()
    with pytest.raises(InputError, match="takes 3 arrays, got 2"):
        function(x, bias)
    with pytest.raises(InputError, match="parameter 'bias' needs float32"):
        function(x, bias.astype(np.float64), np.zeros(case.outputs[0].shape, np.float32))


def test_device_function_chains_device_arrays_without_copies():
    case = kernels.elementwise()
    gpu = lower_for_gpu(case.outputs, case.inputs, "ew")
    driver = HostMemoryDriver()
    function = DeviceFunction(driver, gpu, gpu)
    x, bias = (0.1 * a for a in case.random_inputs())  # exp of exp of exp stays finite
    pool = function.pool
    value, bias_on_device = DeviceArray.from_host(pool, x), DeviceArray.from_host(pool, bias)
    expected = x
    for _ in range(3):  # each output is the next call's input, all on the device
        out = DeviceArray(pool, case.outputs[0].shape, case.outputs[0].dtype)
        function.launch([value, bias_on_device, out])
        value, expected = out, case.reference(expected, bias)[0]
    assert (driver.counts.uploads, driver.counts.downloads) == (2, 0)
    np.testing.assert_allclose(np.asarray(value), expected, rtol=1e-4, atol=1e-5)
    assert driver.counts.downloads == 1


def test_device_array_downloads_once_and_returns_its_memory():
    driver = HostMemoryDriver()
    pool = DevicePool(driver)
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    uploaded = DeviceArray.from_host(pool, host)
    assert uploaded.on_host and uploaded.numpy() is host  # nothing to download
    assert driver.counts.downloads == 0
    copy = DeviceArray(pool, (3, 4), "float32")
    driver.upload(copy.pointer, host + 1)  # as a kernel would write it
    assert not copy.on_host
    np.testing.assert_array_equal(np.asarray(copy), host + 1)
    np.testing.assert_array_equal(copy.numpy(), host + 1)
    np.testing.assert_array_equal(np.asarray(copy, dtype=np.float64), host + 1)
    assert driver.counts.downloads == 1
    assert (copy.shape, copy.dtype, copy.ndim, copy.size) == ((3, 4), np.float32, 2, 12)
    pointer = copy.pointer
    del copy
    gc.collect()
    assert pool.cached_bytes == block_size(48)
    again = DeviceArray(pool, (12,), "int32")  # same block size: the same memory
    assert again.pointer == pointer and pool.allocations == 2
    again.release()
    with pytest.raises(ValueError, match="released"):
        again.numpy()


def test_pool_rounds_sizes_and_trims():
    driver = HostMemoryDriver()
    pool = DevicePool(driver)
    assert block_size(0) == block_size(1) == block_size(256) == 256
    assert block_size(257) == 512
    blocks = [pool.acquire(n) for n in (10, 300, 300)]
    assert pool.allocations == 3 and pool.allocated_bytes == 256 + 512 + 512
    for pointer, n in zip(blocks, (10, 300, 300)):
        pool.give_back(pointer, n)
    assert pool.acquire(500) in blocks[1:] and pool.allocations == 3
    pool.trim()
    assert pool.cached_bytes == 0 and pool.allocated_bytes == 512
    assert driver.allocated_bytes == 512


def test_host_driver_refuses_what_a_gpu_refuses():
    driver = HostMemoryDriver()
    pointer = driver.allocate(16)
    with pytest.raises(TargetError, match="runs past the end"):
        driver.upload(pointer, np.zeros(8, np.float32))
    with pytest.raises(TargetError, match="not allocated"):
        driver.download(np.zeros(2, np.float32), pointer + 4)
    driver.free(pointer)
    with pytest.raises(TargetError, match="not allocated"):
        driver.free(pointer)
    with pytest.raises(TargetError, match="needs a GPU"):
        driver.load_module(b"cubin")
    case = kernels.elementwise()
    gpu = lower_for_gpu(case.outputs, case.inputs, "ew")
    module = driver.load_module(gpu)
    kernel = driver.function(module, gpu.kernels[0].name)
    with pytest.raises(TargetError, match="exceeds the CUDA limits"):
        driver.launch(kernel, (1, 1, 1), (2048, 1, 1), [0, 0, 0])
    with pytest.raises(TargetError, match="no kernel 'missing'"):
        driver.function(module, "missing")


def test_launch_takes_only_live_arrays_of_its_device():
    case = kernels.elementwise()
    gpu = lower_for_gpu(case.outputs, case.inputs, "ew")
    function = DeviceFunction(HostMemoryDriver(), gpu, gpu)
    x, bias = case.random_inputs()
    out = DeviceArray(function.pool, case.outputs[0].shape, "float32")
    elsewhere = DeviceArray.from_host(DevicePool(HostMemoryDriver()), x)
    with pytest.raises(InputError, match="parameter 'x' needs a live DeviceArray"):
        function.launch([elsewhere, DeviceArray.from_host(function.pool, bias), out])
    released = DeviceArray.from_host(function.pool, bias)
    released.release()
    with pytest.raises(InputError, match="parameter 'bias' needs a live DeviceArray"):
        function.launch([DeviceArray.from_host(function.pool, x), released, out])


class _ContextPerThreadDriverApi:
    """A stand-in for libcuda with its one rule that matters here: a context is current
    per thread, and memory calls fail with CUDA_ERROR_INVALID_CONTEXT in a thread where
    none is."""

    INVALID_CONTEXT = 201

    def __init__(self):
        import threading

        self._current = threading.local()
        self.next_pointer = 4096

    def __getattr__(self, name):
        def entry(*args):
            if name == "cuDevicePrimaryCtxRetain":
                args[0]._obj.value = 77
            elif name == "cuCtxSetCurrent":
                self._current.context = args[0].value
            elif name == "cuGetErrorName":
                args[1]._obj.value = b"CUDA_ERROR_INVALID_CONTEXT"
            elif name.startswith("cuMem"):
                if getattr(self._current, "context", None) != 77:
                    return self.INVALID_CONTEXT
                if name == "cuMemAlloc_v2":
                    args[0]._obj.value = self.next_pointer
                    self.next_pointer += 4096
            return 0
        return entry


def test_the_gpu_context_is_made_current_in_every_calling_thread(monkeypatch):
    """A compiled model runs from any thread and a device array may be freed by the
    garbage collector in any thread: each driver call must first make the GPU's context
    current there (on a real GPU, threads other than the creator's failed with
    CUDA_ERROR_INVALID_CONTEXT)."""
    import threading

    from heterocc.targets.cuda import runtime

    api = _ContextPerThreadDriverApi()
    monkeypatch.setattr(runtime, "_library", lambda: api)
    monkeypatch.setattr(runtime, "_device_count", lambda: 1)
    device = runtime.CudaDevice()
    pool = DevicePool(device)
    errors, kept = [], []

    def worker():
        try:
            array = DeviceArray.from_host(pool, np.arange(6, dtype=np.float32))
            kept.append(array.pointer)
            device.free(array.pointer)
        except TargetError as error:
            errors.append(error)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert errors == [] and kept == [4096]

    # the stand-in does model the rule: with the context left as the thread found it,
    # the same call fails, and the driver's error name reaches the caller
    monkeypatch.setattr(device, "activate", lambda: None)
    failures = []
    thread = threading.Thread(target=lambda: failures.append(_error_of(device.allocate, 8)))
    thread.start()
    thread.join()
    assert "CUDA_ERROR_INVALID_CONTEXT" in str(failures[0])


def _error_of(call, *args) -> TargetError | None:
    try:
        call(*args)
    except TargetError as error:
        return error
    return None
