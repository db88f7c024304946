"""The runtime's host side without a GPU: a DeviceFunction (allocation, copies, launch
order, arguments, workspaces, launch descriptions loaded from JSON) driven against a
stand-in device whose memory is host memory and whose launches run each kernel's CPU
emulation. The real driver calls are exercised by test_cuda_gpu.py on a GPU."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from heterocc.errors import InputError
from heterocc.targets.cuda import (
    DeviceFunction,
    EmulatedFunction,
    GpuFunction,
    LaunchPlan,
    launch_plan,
    lower_for_gpu,
)

from . import kernels


class HostBuffer:
    """Device memory stand-in: a host byte array at ``pointer``."""

    def __init__(self, nbytes: int):
        self.storage = np.zeros(max(nbytes, 1), np.uint8)
        self.pointer = self.storage.ctypes.data
        self.nbytes = nbytes
        self.freed = False

    def upload(self, array: np.ndarray) -> None:
        ctypes.memmove(self.pointer, np.ascontiguousarray(array).ctypes.data, array.nbytes)

    def download(self, array: np.ndarray) -> None:
        ctypes.memmove(array.ctypes.data, self.pointer, array.nbytes)

    def free(self) -> None:
        self.freed = True


class EmulatingDevice:
    """The calls DeviceFunction makes of a CudaDevice, answered on the host: a launch
    runs the named kernel's CPU emulation over the buffers at the given pointers."""

    def __init__(self, gpu: GpuFunction):
        self.kernels = {k.name: k for k in gpu.kernels}
        self.buffers: dict[int, HostBuffer] = {}
        self.launched: list[tuple[str, tuple, tuple]] = []

    def activate(self) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def load_module(self, image: bytes) -> bytes:
        return image

    def function(self, module, name: str) -> str:
        return name

    def allocate(self, nbytes: int) -> HostBuffer:
        buffer = HostBuffer(nbytes)
        self.buffers[buffer.pointer] = buffer
        return buffer

    def launch(self, function: str, grid, block, pointers) -> None:
        kernel = self.kernels[function]
        self.launched.append((function, tuple(grid), tuple(block)))
        single = GpuFunction(function, kernel.params, (), [kernel])
        arrays = []
        for buffer, pointer in zip(kernel.params, pointers):
            storage = self.buffers[pointer].storage
            arrays.append(storage[:buffer.size * np.dtype(buffer.dtype).itemsize]
                          .view(buffer.dtype).reshape(buffer.shape))
        EmulatedFunction(single)(*arrays)


@pytest.mark.parametrize("from_json", [False, True])
def test_device_function_launches_in_order_with_workspaces(from_json):
    case = kernels.dense_relu(32, 64, 16)
    gpu = lower_for_gpu(case.outputs, case.inputs, "dense")
    assert len(gpu.kernels) == 2 and len(gpu.workspaces) == 1
    plan = launch_plan(gpu)
    if from_json:
        plan = LaunchPlan.from_json(plan.to_json())
    device = EmulatingDevice(gpu)
    function = DeviceFunction(device, plan, b"image")
    inputs = case.random_inputs()
    out = np.full(case.outputs[0].shape, np.nan, np.float32)
    function(*inputs, out)
    np.testing.assert_allclose(out, case.reference(*inputs)[0], rtol=1e-4, atol=1e-4)
    assert [name for name, _, _ in device.launched] == [k.name for k in gpu.kernels]
    assert [(g, b) for _, g, b in device.launched] == [(k.grid, k.block) for k in gpu.kernels]
    allocated = len(device.buffers)
    assert allocated == len(plan.buffers)
    inputs = case.random_inputs()
    function(*inputs, out)  # a second call reuses the device memory
    np.testing.assert_allclose(out, case.reference(*inputs)[0], rtol=1e-4, atol=1e-4)
    assert len(device.buffers) == allocated
    function.release()
    assert all(b.freed for b in device.buffers.values())


def test_device_function_checks_arguments():
    case = kernels.elementwise()
    gpu = lower_for_gpu(case.outputs, case.inputs, "ew")
    function = DeviceFunction(EmulatingDevice(gpu), gpu, b"image")
    x, bias = case.random_inputs()
    with pytest.raises(InputError, match="takes 3 arrays, got 2"):
        function(x, bias)
    with pytest.raises(InputError, match="parameter 'bias' needs float32"):
        function(x, bias.astype(np.float64), np.zeros(case.outputs[0].shape, np.float32))
