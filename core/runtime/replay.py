"""A stream's host time measured without the accelerator beside it: record the device's
runs, then replay them.

On this machine the accelerator is a simulator: Python and NumPy on the same cores as
the CPU's functions, holding the interpreter lock while it runs. CPU functions timed
while it runs beside them measure that contention, not the CPU (a MobileNetV2 stream on
a shared 2-core machine: 139 ms of CPU spans per input in the live run, 8.3 ms alone).
A real accelerator computes on its own silicon and takes no host CPU, so a stream's
modelled timeline takes its host spans from a second pass, the **replay**:

1. the live run (the devices working at once, as ``execute_many`` runs them) goes
   through a :class:`ReplayDevice` put in front of every device its kernels drive
   (:func:`recording`), which passes every call on and keeps, per device call of the
   executor, each program run's timing and what the host read back (``copy_out``);
2. the replay runs the same inputs again, one function after another on this thread
   (``GraphExecutor.execute_timed``), timing each function. A CPU function runs its
   kernel; a device function runs its kernel too (its host part: layout conversions,
   packing the tiles it writes, the driver's calls), but the device serves each
   program run from the record instead of simulating it: ``submit`` / ``wait`` return
   the recorded timing at once, ``copy_out`` the recorded result.

The replay's outputs must be the live run's bits (the host functions are deterministic
and the device's results are the ones recorded); the stream reports whether they are.
A device function whose kernel does not drive its device through ``copy_in`` / ``run``
/ ``copy_out`` (no ``device`` attribute on its parts) is replayed whole: its recorded
outputs are returned and its host part is not measured.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from ..errors import AcceleratorError
from ..sdk.device import asynchronous, device_lock, holds, load_program, program_name


@dataclass
class DeviceRun:
    """One program run as the live pass saw it: the program (the object the device
    ran), the device's timing, and the arrays the host read back after it
    (``copy_out``, in order)."""

    program: object
    timing: object
    outputs: list[np.ndarray] = field(default_factory=list)


class ReplayDevice:
    """A device in front of ``device`` (an SDK device) that records or replays its runs.

    On a thread that has not called :meth:`serve`, it **records**: every call goes to
    ``device``, and each run (``submit`` + ``wait``, or ``run``) with what ``copy_out``
    reads after it is kept for that thread until :meth:`take` hands them over. On a
    thread that has (until :meth:`stop`), it **replays** the runs served, in order:
    ``submit`` / ``wait`` / ``run`` return the recorded timing without running anything,
    ``copy_out`` the recorded arrays; ``load``, ``resident`` and ``copy_in`` still go to
    ``device`` (writing a tensor's tiles is host work a real transport does too). A run
    of another program than the record's next raises AcceleratorError (the replay left
    the recorded path). Other threads' calls (a plain run beside the stream) go to the
    device all the while. Anything else (``image``, ``tensor_bytes``, ``last_report``,
    ``name``) is ``device``'s; the lock is ``device``'s lock. What the kernels keep of
    their last call (a vta kernel's ``last_input``, its utilization) is, after a replay,
    the replayed call's, read from the wrapped device's memory where the replay wrote
    only the inputs."""

    def __init__(self, device):
        self.device = device
        self.lock = device_lock(device)
        # per thread (by ``threading.get_ident``): runs recorded and not taken, runs
        # served and not replayed, the program submitted, the run copy_out reads from
        self._recorded: dict[int, list[DeviceRun]] = {}
        self._served: dict[int, list[DeviceRun]] = {}
        self._submitted: dict[int, object] = {}
        self._current: dict[int, DeviceRun] = {}

    def __getattr__(self, name: str):
        # only reached for what this class does not define: the wrapped device's
        return getattr(self.__dict__["device"], name)

    # -- what the executor asks of it

    def take(self) -> list[DeviceRun]:
        """The runs recorded on this thread since the last ``take``."""
        return self._recorded.pop(threading.get_ident(), [])

    def serve(self, runs: Sequence[DeviceRun]) -> None:
        """Replay ``runs`` on this thread's next calls."""
        # copies: a replay pops what it plays, and the record may be served again
        me = threading.get_ident()
        self._served[me] = [DeviceRun(r.program, r.timing, list(r.outputs)) for r in runs]
        self._current.pop(me, None)

    def stop(self) -> None:
        """This thread records again (its calls go to the device)."""
        self._served.pop(threading.get_ident(), None)

    def left(self) -> int:
        """Runs served to this thread and not replayed yet."""
        return len(self._served.get(threading.get_ident(), ()))

    # -- the device protocol

    def load(self, program) -> None:
        """Load ``program`` on the wrapped device (where it has ``load``)."""
        load_program(self.device, program)

    def resident(self, program, buffer: str) -> bool:
        """Whether the wrapped device keeps ``buffer`` across runs."""
        return holds(self.device, program, buffer)

    def copy_in(self, program, buffer: str, array: np.ndarray) -> None:
        """Write the buffer on the wrapped device, recording or replaying."""
        self.device.copy_in(program, buffer, array)

    def submit(self, program):
        """Start ``program`` (recording) or take the next run served (replaying)."""
        me = threading.get_ident()
        if me in self._served:
            return self._next(program, self._served[me])

        self._submitted[me] = program
        return asynchronous(self.device).submit(program)

    def wait(self, call, timeout_s: float | None = None):
        """The run's timing: the device's, recorded (recording), or the record's
        (replaying)."""
        me = threading.get_ident()
        if me in self._served:
            self._current[me] = call
            return call.timing

        timing = asynchronous(self.device).wait(call, timeout_s)
        run = DeviceRun(self._submitted.pop(me, None), timing)
        self._recorded.setdefault(me, []).append(run)
        self._current[me] = run
        return timing

    def run(self, program):
        """``wait(submit(program))``."""
        return self.wait(self.submit(program))

    def copy_out(self, program, buffer: str) -> np.ndarray:
        """The buffer after the run: the device's, a copy kept (recording), or the
        record's next array (replaying)."""
        me = threading.get_ident()
        current = self._current.get(me)
        if me in self._served:
            if current is None or not current.outputs:
                raise AcceleratorError(f"replay of {self._name()}: program "
                                       f"{_name(program)} reads {buffer!r} more often than "
                                       "it did in the recorded run")
            return current.outputs.pop(0)
        array = self.device.copy_out(program, buffer)
        if current is not None:
            current.outputs.append(np.array(array, copy=True))
        return array

    def _next(self, program, served: list[DeviceRun]) -> DeviceRun:
        if not served:
            raise AcceleratorError(f"replay of {self._name()}: program {_name(program)} runs "
                                   "more often than it did in the recorded run")
        run = served.pop(0)
        if run.program is not program:
            raise AcceleratorError(f"replay of {self._name()}: program {_name(program)} runs "
                                   f"where the recorded run ran another program "
                                   f"({_name(run.program)}); the replay left the recorded "
                                   "path")
        return run

    def _name(self) -> str:
        return str(getattr(self.device, "name", type(self.device).__name__))


def _name(program) -> str:
    return program_name(program)


def device_parts(kernel) -> list:
    """The parts of a device function's kernel that drive a device through the SDK
    protocol (each has a ``device``): the kernel's ``composites``, or the kernel itself;
    empty where one of them does not (it is replayed whole)."""
    parts = list(getattr(kernel, "composites", ())) or [kernel]
    if all(getattr(p, "device", None) is not None and not callable(p.device)
           and callable(getattr(p, "run_program", None)) for p in parts):
        return parts
    return []


@contextmanager
def recording(kernels: Sequence) -> Iterator[dict[int, ReplayDevice]]:
    """Put a :class:`ReplayDevice` in front of the device of every part of ``kernels``
    (device functions' kernels; one wrapper per device, shared by its parts) for the
    duration; yields the wrappers by ``id`` of the device they wrap. The parts get
    their own devices back on exit, whatever happened."""
    wrappers: dict[int, ReplayDevice] = {}
    swapped = []
    try:
        for kernel in kernels:
            for part in device_parts(kernel):
                device = part.device
                wrapper = wrappers.get(id(device))
                if wrapper is None:
                    wrapper = wrappers[id(device)] = ReplayDevice(device)
                swapped.append((part, device))
                part.device = wrapper
        yield wrappers
    finally:
        for part, device in swapped:
            part.device = device
