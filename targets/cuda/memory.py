"""Device-resident tensors and the device memory they live in.

A :class:`DeviceArray` is a tensor in GPU memory: CUDA kernels take and return them, so
consecutive GPU functions of a model hand each other device buffers without touching the
host. A host reader (a CPU function, the model's outputs) calls :meth:`DeviceArray.numpy`
(or ``np.asarray``), which downloads once and caches the copy; a tensor uploaded from
the host keeps that host array as its copy, so it is never downloaded.

Device memory comes from a :class:`DevicePool`, which keeps the blocks of dead tensors
by size and hands them to the next tensor of that size, so a model run after the first
allocates nothing. A tensor gives its block back when it dies (the graph executor drops
each value after its last reader).

Everything here talks to the device only through a :class:`Driver`: the CUDA driver API
(:class:`~heterocc.targets.cuda.runtime.CudaDevice`) on a GPU, or
:class:`~heterocc.targets.cuda.host_driver.HostMemoryDriver`, which keeps "device"
memory on the host and runs launches on the CPU emulation of the kernels; the code
above the driver is the same for both.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from heterocc.sdk.runtime import DeviceTensor

#: block sizes are rounded up to this many bytes, so that tensors of nearby sizes share
#: blocks (and every block is aligned for vector loads).
BLOCK_GRANULE = 256


class Driver(Protocol):
    """The device calls the CUDA runtime makes; pointers are device addresses (ints)."""

    def activate(self) -> None:
        """Make this device current for the calling thread."""

    def allocate(self, nbytes: int) -> int:
        """Address of ``nbytes`` bytes of fresh device memory."""

    def free(self, pointer: int) -> None:
        """Give memory from :meth:`allocate` back to the device."""

    def upload(self, pointer: int, array: np.ndarray) -> None:
        """Copy the C-contiguous ``array`` to the device at ``pointer`` (host to device)."""

    def download(self, array: np.ndarray, pointer: int) -> None:
        """Copy ``array.nbytes`` bytes at ``pointer`` into the C-contiguous ``array``
        (device to host; waits for the launches before it)."""

    def load_module(self, image):
        """A module from a kernel image (cubin or PTX for a GPU)."""

    def function(self, module, name: str):
        """The kernel ``name`` of ``module``."""

    def launch(self, function, grid: Sequence[int], block: Sequence[int],
               pointers: Sequence[int]) -> None:
        """Launch ``function`` over the buffers at ``pointers`` (asynchronous on a GPU,
        in order with the other launches and copies)."""

    def synchronize(self) -> None:
        """Wait until every launch and copy has finished."""


def block_size(nbytes: int) -> int:
    """Bytes of the pool block that holds ``nbytes`` (at least one granule)."""
    granules = max(-(-int(nbytes) // BLOCK_GRANULE), 1)
    return granules * BLOCK_GRANULE


class DevicePool:
    """Device memory of one driver, reused by block size: :meth:`acquire` takes a
    cached block of the size if there is one and allocates otherwise; :meth:`give_back`
    caches it again; :meth:`trim` frees the cached blocks. Blocks are used by launches
    and copies in issue order (one stream), so a block given back while a launch may
    still read it is safe to hand out to the next tensor."""

    def __init__(self, driver: Driver):
        self.driver = driver
        self._cached: dict[int, list[int]] = {}
        self.allocations = 0  # driver allocations so far
        self.allocated_bytes = 0  # bytes held from the driver (in use or cached)
        #: re-entrant: a DeviceArray that dies while the pool allocates gives its block back
        self._lock = threading.RLock()

    def acquire(self, nbytes: int) -> int:
        """Address of a block of at least ``nbytes`` bytes."""
        size = block_size(nbytes)
        with self._lock:  # two threads must not take the same cached block
            cached = self._cached.get(size)
            if cached:
                return cached.pop()
            pointer = self.driver.allocate(size)
            self.allocations += 1
            self.allocated_bytes += size
            return pointer

    def give_back(self, pointer: int, nbytes: int) -> None:
        """Return the block at ``pointer`` (acquired for ``nbytes``) for reuse."""
        with self._lock:
            self._cached.setdefault(block_size(nbytes), []).append(pointer)

    @property
    def cached_bytes(self) -> int:
        """Bytes in blocks waiting for reuse."""
        return sum(size * len(blocks) for size, blocks in self._cached.items())

    def trim(self) -> None:
        """Free every cached block (blocks in use stay)."""
        with self._lock:
            for size, blocks in self._cached.items():
                for pointer in blocks:
                    self.driver.free(pointer)
                self.allocated_bytes -= size * len(blocks)
            self._cached.clear()


class DeviceArray(DeviceTensor):
    """A C-contiguous tensor in device memory from ``pool``: ``shape``, ``dtype`` and
    ``pointer``. ``numpy()`` / ``np.asarray(...)`` give its host copy (downloaded on
    first use, then cached); the memory goes back to the pool when the array dies or
    :meth:`release` is called. Contents never change after the kernel that produced it
    (or the upload) wrote them, which is what makes the cached copy valid."""

    def __init__(self, pool: DevicePool, shape: Sequence[int], dtype):
        self.pool = pool
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        self._host: np.ndarray | None = None
        self.pointer: int | None = None  # set first: __del__ runs even if acquire fails
        self.pointer = pool.acquire(self.nbytes)

    @classmethod
    def from_host(cls, pool: DevicePool, array: np.ndarray) -> DeviceArray:
        """``array`` uploaded to the device (one host-to-device copy); its host copy is
        ``array`` itself."""
        host = np.require(array, requirements="C")  # keeps 0-d arrays 0-d
        tensor = cls(pool, host.shape, host.dtype)
        pool.driver.upload(tensor.pointer, host)
        tensor._host = host
        return tensor

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def on_host(self) -> bool:
        """Whether the host copy is already there (``numpy()`` copies nothing)."""
        return self._host is not None

    def numpy(self) -> np.ndarray:
        """The host copy (one device-to-host copy the first time)."""
        if self._host is None:
            if self.pointer is None:
                raise ValueError("DeviceArray was released before its host copy was taken")
            host = np.empty(self.shape, self.dtype)
            self.pool.driver.download(host, self.pointer)
            self._host = host
        return self._host

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        host = self.numpy()
        if dtype is not None and np.dtype(dtype) != host.dtype:
            return host.astype(dtype)
        return host.copy() if copy else host

    def release(self) -> None:
        """Give the device memory back to the pool now (the host copy, if taken, stays)."""
        if self.pointer is not None:
            self.pool.give_back(self.pointer, self.nbytes)
            self.pointer = None

    def __del__(self):
        self.release()

    def __repr__(self) -> str:
        where = "device+host" if self.on_host else "device"
        return f"<DeviceArray {self.dtype.name}{list(self.shape)} on {where}>"
