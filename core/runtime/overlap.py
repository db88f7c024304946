"""Devices at once: the lanes a graph's functions run on, and the queue of one device.

A function whose kernel drives a device (the kernel, or each device kernel of its
region, has a ``device``: ``heterocc.sdk.Device``) runs on that device's **lane**; every
other function (CPU kernels, plain op nodes) runs on the **host** lane, the thread that
called ``run``. A device lane is a :class:`DeviceQueue`: the executor submits a call and
gets a handle at once, goes on with host functions whose inputs are ready, and waits on
the handle when a reader needs the result. Since CPU kernels (llvmlite / ctypes calls)
release the GIL, and a device's transport waits outside Python (a board's polling sleeps,
the RTL runs in a simulator process, the simulator's NumPy kernels release it), the
host computes while an accelerator call is in flight.

:class:`LanePlan` says, once per plan, which lane each step runs on, what each step
reads from the others, and whether one run has anything to overlap at all (a device
function and a function of another lane that neither reads the other's results,
directly or not): a chain of functions runs on the calling thread as before.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: the lane of functions that run on the calling thread
HOST = "host"

#: the token of the queue whose worker the current thread is (see DeviceQueue.submit)
_WORKER = threading.local()


class DeviceQueue:
    """The executor's lane of one device: ``submit(call, *args)`` queues a call that
    drives the device (a kernel call: copy in, run, copy out) on the lane's own worker
    thread and returns a handle (a ``concurrent.futures.Future``) at once; ``wait``
    blocks until it is done and returns its result or raises its exception. Calls run
    one at a time, in the order submitted, as a device runs programs. A call submitted
    from the lane's own worker (a region's executor inside a device call) runs at once,
    on that thread: it cannot wait behind the call that submits it."""

    def __init__(self, name: str):
        self.name = name
        # the worker knows its queue by a token, not by the queue itself: a reference
        # from the worker thread would keep the queue, and so the thread, alive forever
        self._token = object()
        self._start_pool()

    def _start_pool(self) -> None:
        self._pid = os.getpid()
        self._pool = cf.ThreadPoolExecutor(max_workers=1,
                                           thread_name_prefix=f"device-{self.name}",
                                           initializer=_mark_worker, initargs=(self._token,))

    def submit(self, call: Callable, *args) -> cf.Future:
        """Queue ``call(*args)`` on the device; its handle."""
        if getattr(_WORKER, "token", None) is self._token:
            future: cf.Future = cf.Future()
            try:
                future.set_result(call(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to the waiter
                future.set_exception(exc)
            return future
        if self._pid != os.getpid():
            # a forked child inherits the pool without its worker thread: calls queued on
            # it would wait forever, so the child starts a worker of its own
            self._start_pool()
        return self._pool.submit(call, *args)

    @staticmethod
    def wait(handle: cf.Future, timeout_s: float | None = None):
        """The result of a submitted call, once done (its exception, raised here)."""
        return handle.result(timeout_s)

    def close(self) -> None:
        """Finish what was submitted and stop the worker."""
        self._pool.shutdown(wait=True)


def _mark_worker(token: object) -> None:
    _WORKER.token = token


def kernel_device(kernel) -> object | None:
    """The device ``kernel`` drives: its own ``device``, or the one its region's device
    kernels share (``kernel.composites``, as ``heterocc.sdk.build_accelerator_region``
    makes); None for a kernel that computes on the host (CPU code, a NumPy reference)."""
    if kernel is None:
        return None
    device = getattr(kernel, "device", None)
    if device is not None and not callable(device):
        return device
    for part in getattr(kernel, "composites", ()):
        device = getattr(part, "device", None)
        if device is not None and not callable(device):
            return device
    return None


@dataclass(frozen=True)
class LanePlan:
    """Where the steps of a plan run and what they wait for.

    ``lanes``: each step's lane (:data:`HOST`, or the name of the target its device
    function was placed on); ``deps``: the steps each step reads results of;
    ``readers``: the steps reading each step's results; ``overlaps``: whether one run
    has a device step and a step of another lane independent of it (neither reaches the
    other through the graph), so that running them at once can save time."""

    lanes: tuple[str, ...]
    deps: tuple[tuple[int, ...], ...]
    readers: tuple[tuple[int, ...], ...]
    overlaps: bool

    @property
    def devices(self) -> list[str]:
        """The device lanes, sorted."""
        return sorted(set(self.lanes) - {HOST})


def plan_lanes(lanes: Sequence[str], deps: Sequence[Sequence[int]]) -> LanePlan:
    """The :class:`LanePlan` of steps on ``lanes`` (in graph order) reading ``deps``."""
    n = len(lanes)
    readers: list[list[int]] = [[] for _ in range(n)]
    for k, ds in enumerate(deps):
        for d in ds:
            readers[d].append(k)
    overlaps = False
    if any(lane != HOST for lane in lanes) and len(set(lanes)) > 1:
        # ancestors and descendants of every step as bit sets (graph order is topological)
        ancestors = [0] * n
        for k, ds in enumerate(deps):
            for d in ds:
                ancestors[k] |= ancestors[d] | (1 << d)
        descendants = [0] * n
        for k in range(n - 1, -1, -1):
            for r in readers[k]:
                descendants[k] |= descendants[r] | (1 << r)
        on_lane: dict[str, int] = {}
        for k, lane in enumerate(lanes):
            on_lane[lane] = on_lane.get(lane, 0) | (1 << k)
        everything = (1 << n) - 1
        overlaps = any(
            everything & ~(ancestors[k] | descendants[k] | on_lane[lane])
            for k, lane in enumerate(lanes) if lane != HOST)
    return LanePlan(tuple(lanes), tuple(tuple(d) for d in deps),
                    tuple(tuple(r) for r in readers), overlaps)
