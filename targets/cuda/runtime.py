"""Running CUDA kernels through the driver API (``libcuda``), loaded lazily with ctypes.

``cuda-python`` wraps the same driver entry points; calling them through ctypes keeps
the target free of a compiled dependency and works wherever the NVIDIA driver is
installed. :func:`gpu_available` says whether a GPU can be used here; every other
function raises an error with the driver's error name
(:class:`~heterocc.errors.TargetError`) when it cannot.

A :class:`CudaDevice` owns the primary context of one GPU, loads modules (cubin for the
GPU's architecture when there is one, PTX otherwise, which the driver JIT-compiles),
allocates device memory and launches kernels; :class:`DeviceFunction` runs a
:class:`~heterocc.targets.cuda.plan.LaunchPlan` on NumPy arrays, copying them in and
out and keeping workspaces on the device.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np

from heterocc.errors import InputError, TargetError

from .passes import GpuFunction
from .plan import LaunchPlan, launch_plan

CUDA_SUCCESS = 0
_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76


@cache
def _library() -> ctypes.CDLL | None:
    for name in ("libcuda.so.1", "libcuda.so", ctypes.util.find_library("cuda")):
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def _call(name: str, *args) -> None:
    library = _library()
    if library is None:
        raise TargetError("the CUDA driver (libcuda.so) is not installed on this machine")
    status = getattr(library, name)(*args)
    if status != CUDA_SUCCESS:
        text = ctypes.c_char_p()
        library.cuGetErrorName(status, ctypes.byref(text))
        detail = ctypes.c_char_p()
        library.cuGetErrorString(status, ctypes.byref(detail))
        raise TargetError(f"{name} failed: {(text.value or b'?').decode()} "
                              f"({(detail.value or b'').decode()})")


@cache
def _device_count() -> int:
    if _library() is None:
        return 0
    try:
        _call("cuInit", 0)
        count = ctypes.c_int()
        _call("cuDeviceGetCount", ctypes.byref(count))
    except TargetError:
        return 0
    return count.value


def gpu_available() -> bool:
    """Whether the CUDA driver is installed and sees at least one GPU."""
    return _device_count() > 0


class CudaDevice:
    """One GPU, through its primary context."""

    def __init__(self, ordinal: int = 0):
        if ordinal >= _device_count():
            raise TargetError(f"no CUDA GPU number {ordinal} (found {_device_count()})")
        self.device = ctypes.c_int()
        _call("cuDeviceGet", ctypes.byref(self.device), ordinal)
        self.context = ctypes.c_void_p()
        _call("cuDevicePrimaryCtxRetain", ctypes.byref(self.context), self.device)
        self.activate()
        name = ctypes.create_string_buffer(256)
        _call("cuDeviceGetName", name, 256, self.device)
        self.name = name.value.decode()

    def activate(self) -> None:
        _call("cuCtxSetCurrent", self.context)

    @property
    def arch(self) -> str:
        """``sm_XY`` of this GPU."""
        major, minor = ctypes.c_int(), ctypes.c_int()
        _call("cuDeviceGetAttribute", ctypes.byref(major), _ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
              self.device)
        _call("cuDeviceGetAttribute", ctypes.byref(minor), _ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
              self.device)
        return f"sm_{major.value}{minor.value}"

    def load_module(self, image: bytes) -> ctypes.c_void_p:
        """A module from a cubin or NUL-terminated PTX image."""
        self.activate()
        module = ctypes.c_void_p()
        _call("cuModuleLoadData", ctypes.byref(module), ctypes.c_char_p(image))
        return module

    def function(self, module: ctypes.c_void_p, name: str) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        _call("cuModuleGetFunction", ctypes.byref(handle), module, name.encode())
        return handle

    def allocate(self, nbytes: int) -> DeviceBuffer:
        pointer = ctypes.c_uint64()
        _call("cuMemAlloc_v2", ctypes.byref(pointer), ctypes.c_size_t(max(int(nbytes), 1)))
        return DeviceBuffer(pointer.value, int(nbytes))

    def synchronize(self) -> None:
        _call("cuCtxSynchronize")

    def launch(self, function: ctypes.c_void_p, grid: Sequence[int], block: Sequence[int],
               pointers: Sequence[int]) -> None:
        values = [ctypes.c_uint64(p) for p in pointers]
        args = (ctypes.c_void_p * max(len(values), 1))(
            *[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in values])
        _call("cuLaunchKernel", function, *[ctypes.c_uint(int(d)) for d in grid],
              *[ctypes.c_uint(int(d)) for d in block], ctypes.c_uint(0), ctypes.c_void_p(0),
              args, ctypes.c_void_p(0))

    def time_ms(self, run, repeat: int) -> float:
        """Mean milliseconds of ``run()`` over ``repeat`` calls, timed with CUDA events."""
        start, stop = ctypes.c_void_p(), ctypes.c_void_p()
        _call("cuEventCreate", ctypes.byref(start), 0)
        _call("cuEventCreate", ctypes.byref(stop), 0)
        _call("cuEventRecord", start, ctypes.c_void_p(0))
        for _ in range(repeat):
            run()
        _call("cuEventRecord", stop, ctypes.c_void_p(0))
        _call("cuEventSynchronize", stop)
        elapsed = ctypes.c_float()
        _call("cuEventElapsedTime", ctypes.byref(elapsed), start, stop)
        _call("cuEventDestroy_v2", start)
        _call("cuEventDestroy_v2", stop)
        return elapsed.value / repeat


@dataclass
class DeviceBuffer:
    """Device memory: ``pointer`` to ``nbytes`` bytes."""

    pointer: int
    nbytes: int

    def upload(self, array: np.ndarray) -> None:
        data = np.ascontiguousarray(array)
        _call("cuMemcpyHtoD_v2", ctypes.c_uint64(self.pointer),
              data.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(data.nbytes))

    def download(self, array: np.ndarray) -> None:
        if not array.flags.c_contiguous:
            raise InputError("download needs a C-contiguous array")
        _call("cuMemcpyDtoH_v2", array.ctypes.data_as(ctypes.c_void_p),
              ctypes.c_uint64(self.pointer), ctypes.c_size_t(array.nbytes))

    def free(self) -> None:
        if self.pointer:
            _call("cuMemFree_v2", ctypes.c_uint64(self.pointer))
            self.pointer = 0


def _nbytes(buffer) -> int:
    return buffer.size * np.dtype(buffer.dtype.partition("x")[0]).itemsize


class DeviceFunction:
    """A function's kernels loaded on ``device`` from ``image`` (cubin or PTX) and
    launched as ``plan`` (a :class:`~heterocc.targets.cuda.plan.LaunchPlan`, or a
    GpuFunction to derive it from) says: call it with one NumPy array per parameter;
    the arrays of outputs are updated. Device memory for the parameters and workspaces
    is allocated once and reused by every call (:meth:`release` frees it)."""

    def __init__(self, device: CudaDevice, plan: LaunchPlan | GpuFunction, image: bytes):
        self.device = device
        self.plan = plan if isinstance(plan, LaunchPlan) else launch_plan(plan)
        self.module = device.load_module(image)
        self.functions = [device.function(self.module, launch.kernel)
                          for launch in self.plan.launches]
        self.memory = [device.allocate(_nbytes(b)) for b in self.plan.buffers]

    def upload(self, arrays: Sequence[np.ndarray]) -> list[DeviceBuffer]:
        """Copy ``arrays`` (one per parameter) to the device; returns the device memory
        of every buffer (parameters, then workspaces)."""
        plan = self.plan
        if len(arrays) != len(plan.params):
            raise InputError(f"{plan.name} takes {len(plan.params)} arrays, got {len(arrays)}")
        for buffer, array in zip(plan.params, arrays):
            if tuple(array.shape) != tuple(buffer.shape) or array.dtype != np.dtype(buffer.dtype):
                raise InputError(
                    f"{plan.name}: parameter {buffer.name!r} needs {buffer.dtype}"
                    f"{list(buffer.shape)}, got {array.dtype}{list(array.shape)}")
        for position, array in enumerate(arrays):
            if position not in plan.written:  # outputs are overwritten by the kernels
                self.memory[position].upload(array)
        return self.memory

    def launch_all(self) -> None:
        """Launch every kernel in order on the device memory (asynchronous)."""
        for launch, function in zip(self.plan.launches, self.functions):
            self.device.launch(function, launch.grid, launch.block,
                               [self.memory[a].pointer for a in launch.args])

    def __call__(self, *arrays: np.ndarray) -> None:
        self.device.activate()
        self.upload(arrays)
        self.launch_all()
        self.device.synchronize()
        for position in sorted(self.plan.written):
            self.memory[position].download(arrays[position])

    def release(self) -> None:
        """Free the device memory (the function cannot be called afterwards)."""
        for buffer in self.memory:
            buffer.free()
        self.memory = []
