"""A CUDA driver without a GPU: "device" memory is host memory and a launch runs the
kernel's CPU emulation (:mod:`heterocc.targets.cuda.emulate`) over it.

:class:`HostMemoryDriver` answers every call the CUDA runtime makes of the GPU's driver
(:class:`~heterocc.targets.cuda.memory.Driver`), so the device arrays, the memory pool
and the launch plans run the same code here as on a GPU; only these calls differ. It
counts what a GPU would do (allocations, frees, copies each way, launches), which is
how the tests check that a model moves no more data than it must, and it refuses what
a GPU refuses (unknown or freed addresses, copies past a block's end, blocks of more
than 1024 threads). ``CudaTarget(run_on="emulator")`` runs on it.

Its module images are the kernels' TIR: :meth:`HostMemoryDriver.load_module` takes a
:class:`~heterocc.targets.cuda.passes.GpuFunction` and compiles each kernel for the
host CPU with the LLVM target.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from heterocc.sdk import TargetError
from heterocc.sdk.registry import compile_for_host

from .emulate import kernel_function
from .passes import GpuFunction

#: the CUDA limits on a thread block, enforced as a GPU would at launch.
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK = (1024, 1024, 64)


@dataclass
class DriverCounts:
    """What a driver was asked to do: allocations, frees, copies each way (calls and
    bytes) and launches (kernel names in order)."""

    allocations: int = 0
    frees: int = 0
    uploads: int = 0
    downloads: int = 0
    uploaded_bytes: int = 0
    downloaded_bytes: int = 0
    launches: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _HostKernel:
    name: str
    params: tuple  # the kernel's buffers, for the views over device memory
    run: object  # the compiled CPU emulation: run(*arrays)


class HostMemoryDriver:
    """The CUDA driver calls answered on the host (see the module docstring)."""

    def __init__(self):
        self._memory: dict[int, np.ndarray] = {}
        self.counts = DriverCounts()

    @property
    def arch(self) -> str:
        return "host"

    @property
    def allocated_bytes(self) -> int:
        """Bytes of device memory allocated and not freed."""
        return sum(block.nbytes for block in self._memory.values())

    def activate(self) -> None:
        pass  # one "device", always current

    def synchronize(self) -> None:
        pass  # launches run to completion when issued

    def allocate(self, nbytes: int) -> int:
        block = np.empty(max(int(nbytes), 1), np.uint8)
        pointer = block.ctypes.data
        self._memory[pointer] = block
        self.counts.allocations += 1
        return pointer

    def free(self, pointer: int) -> None:
        if self._memory.pop(pointer, None) is None:
            raise TargetError(f"free of {pointer:#x}, which is not allocated device memory")
        self.counts.frees += 1

    def _block(self, pointer: int, nbytes: int, what: str) -> np.ndarray:
        block = self._memory.get(pointer)
        if block is None:
            raise TargetError(f"{what} at {pointer:#x}, which is not allocated device memory")
        if nbytes > block.nbytes:
            raise TargetError(f"{what} of {nbytes} bytes at {pointer:#x} runs past the end "
                              f"of its {block.nbytes}-byte block")
        return block

    def upload(self, pointer: int, array: np.ndarray) -> None:
        data = np.require(array, requirements="C")
        self._block(pointer, data.nbytes, "host-to-device copy")
        ctypes.memmove(pointer, data.ctypes.data, data.nbytes)
        self.counts.uploads += 1
        self.counts.uploaded_bytes += data.nbytes

    def download(self, array: np.ndarray, pointer: int) -> None:
        if not array.flags.c_contiguous:
            raise TargetError("device-to-host copy needs a C-contiguous array")
        self._block(pointer, array.nbytes, "device-to-host copy")
        ctypes.memmove(array.ctypes.data, pointer, array.nbytes)
        self.counts.downloads += 1
        self.counts.downloaded_bytes += array.nbytes

    def load_module(self, image) -> dict[str, _HostKernel]:
        """The kernels of ``image`` (a GpuFunction) compiled for the host CPU."""
        if not isinstance(image, GpuFunction):
            raise TargetError(f"HostMemoryDriver runs kernels from their TIR: load a "
                              f"GpuFunction, not {type(image).__name__} (a cubin or PTX "
                              f"needs a GPU)")
        compiled = compile_for_host([kernel_function(k) for k in image.kernels],
                                    name=image.name)
        return {k.name: _HostKernel(k.name, k.params, compiled[k.name]) for k in image.kernels}

    def function(self, module: dict[str, _HostKernel], name: str) -> _HostKernel:
        kernel = module.get(name)
        if kernel is None:
            raise TargetError(f"no kernel {name!r} in the module; it has {', '.join(module)}")
        return kernel

    def launch(self, function: _HostKernel, grid: Sequence[int], block: Sequence[int],
               pointers: Sequence[int]) -> None:
        if int(np.prod(block)) > MAX_THREADS_PER_BLOCK or \
                any(b > limit for b, limit in zip(block, MAX_BLOCK)):
            raise TargetError(f"launch of {function.name}: block {tuple(block)} exceeds the "
                              f"CUDA limits ({MAX_THREADS_PER_BLOCK} threads, {MAX_BLOCK})")
        if len(pointers) != len(function.params):
            raise TargetError(f"launch of {function.name}: {len(pointers)} arguments for "
                              f"{len(function.params)} parameters")
        arrays = []
        for buffer, pointer in zip(function.params, pointers):
            dtype = np.dtype(buffer.dtype)
            nbytes = buffer.size * dtype.itemsize
            memory = self._block(pointer, nbytes, f"argument {buffer.name!r} of "
                                                  f"{function.name}")
            arrays.append(memory[:nbytes].view(dtype).reshape(buffer.shape))
        self.counts.launches.append(function.name)
        function.run(*arrays)
