"""Running CUDA kernels through the driver API (``libcuda``), loaded lazily with ctypes.

``cuda-python`` wraps the same driver entry points; calling them through ctypes keeps
the target free of a compiled dependency and works wherever the NVIDIA driver is
installed. :func:`gpu_available` says whether a GPU can be used here; every other
function raises an error with the driver's error name
(:class:`~heterocc.errors.TargetError`) when it cannot.

A :class:`CudaDevice` owns the primary context of one GPU, loads modules (cubin for the
GPU's architecture when there is one, PTX otherwise, which the driver JIT-compiles),
allocates and copies device memory and launches kernels: it is the GPU's
:class:`~heterocc.targets.cuda.memory.Driver`. :class:`DeviceFunction` runs a
:class:`~heterocc.targets.cuda.plan.LaunchPlan` over device arrays on any driver (the
GPU, or :class:`~heterocc.targets.cuda.host_driver.HostMemoryDriver` without one),
keeping its workspaces on the device.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from collections.abc import Sequence
from functools import cache

import numpy as np

from heterocc.sdk import InputError, TargetError

from .memory import DeviceArray, DevicePool, Driver
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
    """One GPU, through its primary context.

    A CUDA driver context is current per thread, and a compiled model may be run from
    any thread (and a device array freed by the garbage collector in any thread), so
    every call below makes the context current in the calling thread first (one cheap
    driver call) rather than relying on the thread that created the device."""

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
        """Make this GPU's context current in the calling thread."""
        _call("cuCtxSetCurrent", self.context)

    def _call(self, name: str, *args) -> None:
        """``name(*args)`` from the driver API, in this GPU's context."""
        self.activate()
        _call(name, *args)

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
        module = ctypes.c_void_p()
        self._call("cuModuleLoadData", ctypes.byref(module), ctypes.c_char_p(image))
        return module

    def function(self, module: ctypes.c_void_p, name: str) -> ctypes.c_void_p:
        handle = ctypes.c_void_p()
        self._call("cuModuleGetFunction", ctypes.byref(handle), module, name.encode())
        return handle

    def allocate(self, nbytes: int) -> int:
        pointer = ctypes.c_uint64()
        self._call("cuMemAlloc_v2", ctypes.byref(pointer), ctypes.c_size_t(max(int(nbytes), 1)))
        return pointer.value

    def free(self, pointer: int) -> None:
        self._call("cuMemFree_v2", ctypes.c_uint64(pointer))

    def upload(self, pointer: int, array: np.ndarray) -> None:
        data = np.require(array, requirements="C")
        self._call("cuMemcpyHtoD_v2", ctypes.c_uint64(pointer),
                   data.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(data.nbytes))

    def download(self, array: np.ndarray, pointer: int) -> None:
        if not array.flags.c_contiguous:
            raise InputError("download needs a C-contiguous array")
        self._call("cuMemcpyDtoH_v2", array.ctypes.data_as(ctypes.c_void_p),
                   ctypes.c_uint64(pointer), ctypes.c_size_t(array.nbytes))

    def synchronize(self) -> None:
        self._call("cuCtxSynchronize")

    def launch(self, function: ctypes.c_void_p, grid: Sequence[int], block: Sequence[int],
               pointers: Sequence[int]) -> None:
        values = [ctypes.c_uint64(p) for p in pointers]
        args = (ctypes.c_void_p * max(len(values), 1))(
            *[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in values])
        self._call("cuLaunchKernel", function, *[ctypes.c_uint(int(d)) for d in grid],
                   *[ctypes.c_uint(int(d)) for d in block], ctypes.c_uint(0),
                   ctypes.c_void_p(0), args, ctypes.c_void_p(0))

    def time_ms(self, run, repeat: int) -> float:
        """Mean milliseconds of ``run()`` over ``repeat`` calls, timed with CUDA events."""
        start, stop = ctypes.c_void_p(), ctypes.c_void_p()
        self._call("cuEventCreate", ctypes.byref(start), 0)
        self._call("cuEventCreate", ctypes.byref(stop), 0)
        self._call("cuEventRecord", start, ctypes.c_void_p(0))
        for _ in range(repeat):
            run()
        self._call("cuEventRecord", stop, ctypes.c_void_p(0))
        self._call("cuEventSynchronize", stop)
        elapsed = ctypes.c_float()
        self._call("cuEventElapsedTime", ctypes.byref(elapsed), start, stop)
        self._call("cuEventDestroy_v2", start)
        self._call("cuEventDestroy_v2", stop)
        return elapsed.value / repeat


def _matches(array, buffer) -> bool:
    return tuple(array.shape) == tuple(buffer.shape) and array.dtype == np.dtype(buffer.dtype)


class DeviceFunction:
    """A function's kernels loaded on ``device`` (a
    :class:`~heterocc.targets.cuda.memory.Driver`) from ``image`` and launched as
    ``plan`` (a :class:`~heterocc.targets.cuda.plan.LaunchPlan`, or a GpuFunction to
    derive it from) says.

    :meth:`launch` runs it on device arrays, one per parameter (the outputs are written);
    calling it with NumPy arrays uploads them, launches and downloads the outputs into
    the arrays given. Workspaces are taken from ``pool`` once and reused by every call
    (:meth:`release` gives them back)."""

    def __init__(self, device: Driver, plan: LaunchPlan | GpuFunction, image,
                 pool: DevicePool | None = None):
        self.device = device
        self.pool = pool if pool is not None else DevicePool(device)
        self.plan = plan if isinstance(plan, LaunchPlan) else launch_plan(plan)
        self.module = device.load_module(image)
        self.functions = [device.function(self.module, launch.kernel)
                          for launch in self.plan.launches]
        self.workspaces = [DeviceArray(self.pool, b.shape, b.dtype.partition("x")[0])
                           for b in self.plan.workspaces]
        self._launching = threading.Lock()

    def check(self, arrays: Sequence) -> None:
        """InputError unless ``arrays`` are one per parameter of the right type."""
        plan = self.plan
        if len(arrays) != len(plan.params):
            raise InputError(f"{plan.name} takes {len(plan.params)} arrays, got {len(arrays)}")
        for buffer, array in zip(plan.params, arrays):
            if not _matches(array, buffer):
                raise InputError(
                    f"{plan.name}: parameter {buffer.name!r} needs {buffer.dtype}"
                    f"{list(buffer.shape)}, got {array.dtype}{list(array.shape)}")

    def launch(self, arrays: Sequence[DeviceArray]) -> None:
        """Launch every kernel in order over ``arrays`` (one device array per parameter,
        from this function's device) and the workspaces; asynchronous on a GPU."""
        self.check(arrays)
        if self.workspaces is None:
            raise InputError(f"{self.plan.name} was released and cannot run")
        for buffer, array in zip(self.plan.params, arrays):
            if not isinstance(array, DeviceArray) or array.pool.driver is not self.device \
                    or array.pointer is None:
                raise InputError(f"{self.plan.name}: parameter {buffer.name!r} needs a live "
                                 f"DeviceArray of this function's device, got {array!r}")
        # the workspaces are this function's, shared by its calls: its launches are
        # issued one call at a time (in order on a GPU's stream; on the host emulator a
        # launch runs to completion, so two threads would write one workspace at once)
        with self._launching:
            pointers = [a.pointer for a in arrays] + [w.pointer for w in self.workspaces]
            for launch, function in zip(self.plan.launches, self.functions):
                self.device.launch(function, launch.grid, launch.block,
                                   [pointers[a] for a in launch.args])

    def __call__(self, *arrays: np.ndarray) -> None:
        self.check(arrays)
        written = self.plan.written
        on_device = [DeviceArray(self.pool, a.shape, a.dtype) if position in written
                     else DeviceArray.from_host(self.pool, a)
                     for position, a in enumerate(arrays)]
        self.launch(on_device)
        for position in sorted(written):
            self.device.download(arrays[position], on_device[position].pointer)

    def release(self) -> None:
        """Give the workspaces back (the function cannot be called afterwards)."""
        for workspace in self.workspaces or ():
            workspace.release()
        self.workspaces = None
