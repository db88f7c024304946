"""The device protocol of SDK targets (copy in, run, copy out; optionally resident
programs; optionally a run split in submit and wait) and the lock that makes one program
run on a device a unit."""

from __future__ import annotations

import concurrent.futures as cf
import threading
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from heterocc.errors import AcceleratorError


@dataclass
class DeviceTiming:
    """What one device run cost: ``cycles`` of the device clock, and any per-unit
    breakdown the device can tell (``detail``, e.g. busy cycles per engine)."""

    cycles: int
    detail: dict[str, int] = field(default_factory=dict)


@runtime_checkable
class Device(Protocol):
    """A place programs run: a simulator, an RTL simulation or a board.

    This is the bring-up protocol of every SDK target. Buffers are named by the TIR
    parameters of a program (the names of the tensors given to ``te.lower``); the
    program (what the target's codegen made) says where each lives. The three
    required methods are the data path:

    * ``copy_in`` (write) a buffer of a program,
    * ``run`` the program to completion, returning its :class:`DeviceTiming` (the
      device's cycle counter; a device without one reports ``cycles=0``),
    * ``copy_out`` (read) a buffer after the run.

    A device may also implement the life cycle of :class:`ResidentDevice`
    (``load`` a program, say which of its buffers stay ``resident`` across runs,
    ``reset``); :class:`DeviceKernel` then writes a program's constants (weights)
    once per loaded model instead of on every call.

    A device may carry a ``lock`` (a ``threading.RLock``) that :func:`device_lock`
    returns: kernels hold it from a program's first write to its last read, so one
    device serves a model run from several threads.
    """

    name: str

    def copy_in(self, program: Any, buffer: str, array: np.ndarray) -> None:
        """Write ``array`` into ``program``'s buffer ``buffer`` on the device."""
        ...

    def run(self, program: Any) -> DeviceTiming:
        """Execute ``program`` (what the target's codegen produced) to completion."""
        ...

    def copy_out(self, program: Any, buffer: str) -> np.ndarray:
        """The contents of ``program``'s buffer ``buffer`` after a run."""
        ...


@runtime_checkable
class ResidentDevice(Device, Protocol):
    """A :class:`Device` that keeps loaded programs and their buffers (weights stay on
    the device between calls).

    ``load(program)`` is called before every use of a program and must be cheap once
    the program is loaded (a board writes its instructions and reserves its buffers
    the first time). ``resident(program, buffer)`` is true while the device holds the
    contents last written to that buffer of that program and will keep them across
    runs, so the host need not write them again; after ``reset()`` (the device back
    to power-on: every program and buffer forgotten) it is false until the buffer is
    written again, so kernels write their constants again by themselves."""

    def load(self, program: Any) -> None:
        """Make ``program`` resident on the device (a no-op when it already is)."""
        ...

    def resident(self, program: Any, buffer: str) -> bool:
        """Whether ``buffer`` of ``program`` holds its last write and keeps it across runs."""
        ...

    def reset(self) -> None:
        """Forget every loaded program and buffer."""
        ...


class DeviceCall:
    """The handle of one program submitted to a device (:meth:`AsyncDevice.submit`):
    ``done()`` says whether it finished, ``result(timeout_s)`` waits for its
    :class:`DeviceTiming` (raising what the run raised). Made over a
    ``concurrent.futures.Future`` that the device completes."""

    def __init__(self, device: str, program: str, future: cf.Future):
        self.device = device
        self.program = program
        self.future = future

    def done(self) -> bool:
        """Whether the run finished (or failed)."""
        return self.future.done()

    def result(self, timeout_s: float | None = None) -> DeviceTiming:
        """The run's timing once it finished; AcceleratorError if it does not finish
        within ``timeout_s`` seconds (None: no limit)."""
        try:
            return self.future.result(timeout_s)
        except cf.TimeoutError:
            raise AcceleratorError(
                f"program {self.program} on device {self.device} did not finish within "
                f"{timeout_s} s (a stream that never reaches FINISH, or a longer run: give "
                "the device a longer time-out)") from None

    @classmethod
    def finished(cls, device: str, program: str, run) -> DeviceCall:
        """A handle of a run made at once: ``run()``'s timing, or its exception."""
        future: cf.Future = cf.Future()
        try:
            future.set_result(run())
        except BaseException as exc:  # noqa: BLE001 - raised by result()
            future.set_exception(exc)
        return cls(device, program, future)


@runtime_checkable
class AsyncDevice(Device, Protocol):
    """A :class:`Device` whose run is split in two: ``submit(program)`` starts the
    program (its buffers written with ``copy_in``) and returns a :class:`DeviceCall`
    at once; ``wait(call, timeout_s)`` blocks until it finishes and returns its
    :class:`DeviceTiming`. ``run(program)`` is ``wait(submit(program))``. One program
    is in flight on a device at a time (one control port): submit the next after the
    previous one's wait. The host is free between the two, to prepare another call's
    inputs or to run CPU kernels.

    Callers go through :func:`asynchronous`, which wraps a device without these
    methods, so that an executor drives every device the same way."""

    def submit(self, program: Any) -> DeviceCall:
        """Start ``program``; its handle."""
        ...

    def wait(self, call: DeviceCall, timeout_s: float | None = None) -> DeviceTiming:
        """The timing of a submitted run once it finished."""
        ...


class SynchronousDevice:
    """A :class:`Device` without ``submit`` / ``wait`` seen as an :class:`AsyncDevice`:
    ``submit`` runs the program to completion (``device.run``) and returns a finished
    handle. Overlap with the host then comes from the executor, which calls a device's
    kernels on a thread of that device's own (``heterocc.runtime.overlap``)."""

    def __init__(self, device: Device):
        self.device = device
        self.name = getattr(device, "name", type(device).__name__)

    def submit(self, program: Any) -> DeviceCall:
        """Run ``program`` now; the handle of the finished run."""
        return DeviceCall.finished(self.name, program_name(program),
                                   lambda: self.device.run(program))

    def wait(self, call: DeviceCall, timeout_s: float | None = None) -> DeviceTiming:
        """The run's timing (it already finished)."""
        return call.result(timeout_s)

    def __getattr__(self, attribute: str):  # the rest of the device as it is
        return getattr(self.device, attribute)


def asynchronous(device: Device) -> AsyncDevice:
    """``device`` as an :class:`AsyncDevice`: itself when it has ``submit`` and
    ``wait``, else a :class:`SynchronousDevice` over it."""
    if callable(getattr(device, "submit", None)) and callable(getattr(device, "wait", None)):
        return device
    return SynchronousDevice(device)


def run_on(device: Device, program: Any, timeout_s: float | None = None) -> DeviceTiming:
    """Run ``program`` on ``device`` through the asynchronous interface (submit, then
    wait up to ``timeout_s``; see :func:`asynchronous`)."""
    device = asynchronous(device)
    return device.wait(device.submit(program), timeout_s)


def program_name(program: Any) -> str:
    """A program's name for messages (its ``name``, else its type)."""
    return str(getattr(program, "name", None) or type(program).__name__)


def holds(device: Device, program: Any, buffer: str) -> bool:
    """Whether ``device`` holds ``program``'s ``buffer`` across runs (``resident``;
    false for a device without that method: it is written on every call)."""
    resident = getattr(device, "resident", None)
    return bool(resident(program, buffer)) if callable(resident) else False


#: guards the creation of devices' locks (see :func:`device_lock`)
_LOCKS_GUARD = threading.Lock()
#: locks of devices that cannot carry a ``lock`` attribute, by identity
_FOREIGN_LOCKS: dict[int, threading.RLock] = {}


def device_lock(device: Device) -> threading.RLock:
    """The lock that makes one program run on ``device`` (copy in, run, copy out) a unit.

    A device is one machine with one memory: two threads that interleave their
    ``copy_in`` / ``run`` / ``copy_out`` calls on it read each other's results (and
    programs of the same shape may be one program object, their buffers one place).
    :class:`ProgramRunner` therefore holds this lock from a program's first write to
    its last read; everything else a model does (host layout conversions, CPU kernels)
    runs concurrently. It is the device's own ``lock`` attribute (a re-entrant lock)
    when it has one, else one made for it on first use and kept on it."""
    lock = getattr(device, "lock", None)
    if lock is not None:
        return lock
    with _LOCKS_GUARD:
        lock = getattr(device, "lock", None)
        if lock is not None:
            return lock
        lock = threading.RLock()
        try:
            device.lock = lock
        except (AttributeError, TypeError):  # slots or a frozen dataclass: keep it here
            lock = _FOREIGN_LOCKS.setdefault(id(device), lock)
        return lock


def load_program(device: Device, program: Any) -> None:
    """``device.load(program)`` where the device has that method."""
    load = getattr(device, "load", None)
    if callable(load):
        load(program)
