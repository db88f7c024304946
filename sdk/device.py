"""The device protocol of SDK targets (copy in, run, copy out; optionally resident
programs) and the lock that makes one program run on a device a unit."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np


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
