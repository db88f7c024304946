"""The CPU's native runs: consecutive LLVM kernels of a network called in one call
from Python, through the C runtime's ``heterocc_run_sequence`` (``runtime.py``).

A :class:`SequenceRunner` wraps that entry of one copy of the runtime: the one loaded
for JIT-compiled kernels, or the one linked into a loaded artifact's library (a library
exported before the runtime had the entry has no runner: its kernels are called one by
one). It turns the executor's :class:`~heterocc.runtime.native.SequencePlan` into a
:class:`_Sequence`, which keeps per calling thread its table of data pointers, its
arena (the run's own intermediate tensors) and its output arrays.
"""

from __future__ import annotations

import ctypes
import functools
import threading
import time
import weakref
from collections.abc import Sequence

import numpy as np

from heterocc.sdk import CompileError
from heterocc.sdk.runtime import SequencePlan

from .module import LoadedLibrary
from .outputs import OutputArrays
from .runtime import (
    RUN_SEQUENCE,
    RUN_SEQUENCE_CPU_TIMED,
    RUN_SEQUENCE_TIMED,
    SEQUENCE_MAX_ARGS,
    load_runtime,
)

_RUN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                        ctypes.c_void_p, ctypes.c_void_p)
_RUN_TIMED = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
#: whether time.perf_counter reads the runtime's clock (CLOCK_MONOTONIC), so that the
#: spans the runtime times are on the profile's clock as they are; elsewhere they are
#: placed from the perf_counter time of the call
_SAME_CLOCK = time.get_clock_info("perf_counter").implementation == \
    "clock_gettime(CLOCK_MONOTONIC)"
#: bytes of an arena's start skipped to align it (NumPy aligns less than a cache line)
_ALIGNMENT = 64


class SequenceRunner:
    """Calls sequences of kernels through ``heterocc_run_sequence`` at ``address`` (and
    ``heterocc_run_sequence_timed`` at ``timed``, for profiles, and
    ``heterocc_run_sequence_cpu_timed`` at ``cpu_timed``, for each kernel's CPU time);
    ``owner`` keeps the code holding them alive."""

    max_arguments = SEQUENCE_MAX_ARGS

    def __init__(self, address: int, timed: int | None, owner: object,
                 cpu_timed: int | None = None):
        self._run = _RUN(address)
        self._timed = None if timed is None else _RUN_TIMED(timed)
        self._cpu_timed = None if cpu_timed is None else _RUN_TIMED(cpu_timed)
        self._owner = owner

    def sequence(self, plan: SequencePlan) -> _Sequence:
        """The callable running ``plan`` (see ``NativeRunner.sequence``)."""
        return _Sequence(self._run, self._timed, plan, self._cpu_timed)


class _Sequence:
    """One native run: its tables, shared and only read, and per calling thread a table
    of values (the run's inputs, outputs, constants and arena buffers), an arena and
    output arrays (recycled as a kernel's are: ``outputs.OutputArrays``)."""

    def __init__(self, run, timed, plan: SequencePlan, cpu_timed=None):
        self._call = run
        self._call_timed = timed
        self._call_cpu_timed = cpu_timed
        self.plan = plan
        calls = len(plan.functions)
        flat = [k for arguments in plan.arguments for k in arguments]
        self._functions = (ctypes.c_void_p * calls)(*plan.functions)
        self._arities = (ctypes.c_int32 * calls)(*(len(a) for a in plan.arguments))
        self._arguments = (ctypes.c_int32 * max(len(flat), 1))(*flat)
        self._tables = (calls, ctypes.addressof(self._functions),
                        ctypes.addressof(self._arities), ctypes.addressof(self._arguments))
        self._inputs = [(tuple(shape), np.dtype(dtype)) for shape, dtype in plan.inputs]
        self._outputs = [(tuple(shape), np.dtype(dtype)) for shape, dtype in plan.outputs]
        self._threads = threading.local()

    def _thread_state(self) -> _ThreadState:
        plan = self.plan
        arena = np.empty(plan.arena_bytes + _ALIGNMENT, np.uint8)
        base = arena.ctypes.data
        base += -base % _ALIGNMENT
        inputs, outputs = len(plan.inputs), len(plan.outputs)
        values = (ctypes.c_void_p * (inputs + outputs + len(plan.constants)
                                     + len(plan.buffers)))()
        first = inputs + outputs
        values[first:first + len(plan.constants)] = plan.constants
        values[first + len(plan.constants):] = [base + offset for offset in plan.buffers]
        state = _ThreadState(arena, values, ctypes.addressof(values),
                             OutputArrays(self._outputs))
        self._threads.state = state
        return state

    def _ready(self, args: Sequence[np.ndarray]):
        """This thread's state with ``args`` and the outputs in its table, and the
        outputs; None where an input does not fit."""
        try:
            state = self._threads.state
        except AttributeError:  # this thread's first call
            state = self._thread_state()
        values = state.values
        for k, (a, (shape, dtype)) in enumerate(zip(args, self._inputs)):
            if type(a) is not np.ndarray or a.shape != shape or a.dtype != dtype \
                    or not a.flags.c_contiguous:
                return None
            values[k] = _address(a)
        outs, addresses = state.outputs.recycled()
        if addresses is not state.addresses:
            first = len(self._inputs)
            values[first:first + len(addresses)] = addresses
            state.addresses = addresses
        return state, outs

    def __call__(self, args: Sequence[np.ndarray]) -> list[np.ndarray] | None:
        ready = self._ready(args)
        if ready is None:
            return None
        state, outs = ready
        self._check(self._call(*self._tables, state.values_address))
        return outs

    def timed(self, args: Sequence[np.ndarray]
              ) -> tuple[list[np.ndarray], list[tuple[float, float]]] | None:
        """As a call, with the (start, seconds) of each kernel, start on
        ``time.perf_counter``'s clock; None also where the runtime cannot time."""
        called = time.perf_counter()
        got = self._timed_call(self._call_timed, args)
        if got is None:
            return None
        outs, times = got
        shift = 0.0 if _SAME_CLOCK or not times else called - times[0] * 1e-9
        return outs, [(times[2 * k] * 1e-9 + shift, (times[2 * k + 1] - times[2 * k]) * 1e-9)
                      for k in range(len(self.plan.functions))]

    def cpu_timed(self, args: Sequence[np.ndarray]
                  ) -> tuple[list[np.ndarray], list[float]] | None:
        """As a call, with the seconds of the calling thread's CPU time each kernel took
        (what other processes taking the core do not inflate; a kernel's worker threads
        are not counted, so a figure for one thread); None where the runtime cannot
        (a library exported before it could) or an input does not fit."""
        got = self._timed_call(self._call_cpu_timed, args)
        if got is None:
            return None
        outs, times = got
        return outs, [(times[2 * k + 1] - times[2 * k]) * 1e-9
                      for k in range(len(self.plan.functions))]

    def _timed_call(self, entry, args: Sequence[np.ndarray]):
        """The outputs and the table of each kernel's start and end (ns) of a run
        through the timing ``entry``; None where there is none or an input does not fit."""
        if entry is None:
            return None
        ready = self._ready(args)
        if ready is None:
            return None
        state, outs = ready
        times = (ctypes.c_int64 * (2 * len(self.plan.functions)))()
        self._check(entry(*self._tables, state.values_address, ctypes.addressof(times)))
        return outs, times

    def _check(self, failed: int) -> None:
        if failed:  # the planner keeps arities within SEQUENCE_MAX_ARGS
            raise CompileError(f"heterocc_run_sequence: call {failed - 1} of a run has "
                               f"{len(self.plan.arguments[failed - 1])} parameters, more "
                               f"than the runtime's {SEQUENCE_MAX_ARGS}")


class _ThreadState:
    """A thread's arena, table of values (and its address) and outputs for one run."""

    __slots__ = ("arena", "values", "values_address", "outputs", "addresses")

    def __init__(self, arena, values, values_address: int, outputs: OutputArrays):
        self.arena, self.values, self.values_address = arena, values, values_address
        self.outputs, self.addresses = outputs, None


_from_buffer = ctypes.c_char.from_buffer
_addressof = ctypes.addressof


def _address(array: np.ndarray) -> int:
    """The data address of a C-contiguous array (``ctypes.c_char.from_buffer``: a third
    of ``array.ctypes.data``'s time; read-only arrays and empty ones take the latter)."""
    try:
        return _addressof(_from_buffer(array))
    except (TypeError, ValueError):
        return array.ctypes.data


@functools.cache
def jit_runner() -> SequenceRunner | None:
    """The runner of JIT-compiled kernels: the runtime loaded into this process (None
    where it cannot be built: no C compiler; the kernels are then called one by one)."""
    try:
        library = load_runtime()
    except CompileError:
        return None
    def address(name):
        return ctypes.cast(getattr(library, name), ctypes.c_void_p).value
    return SequenceRunner(address(RUN_SEQUENCE), address(RUN_SEQUENCE_TIMED), library,
                          address(RUN_SEQUENCE_CPU_TIMED))


_LIBRARY_RUNNERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def runner_of(function) -> SequenceRunner | None:
    """The runner that can call ``function`` (a ``module.CompiledFunction``): the
    runtime linked into its loaded library, or the process's for JIT code; None for
    anything else, or a library without the entry."""
    owner = getattr(function, "owner", None)
    if owner is None or getattr(function, "address", None) is None:
        return None
    if not isinstance(owner, LoadedLibrary):
        return jit_runner()
    if owner not in _LIBRARY_RUNNERS:
        address = owner.symbol_address(RUN_SEQUENCE)
        _LIBRARY_RUNNERS[owner] = None if address is None else SequenceRunner(
            address, owner.symbol_address(RUN_SEQUENCE_TIMED), owner,
            owner.symbol_address(RUN_SEQUENCE_CPU_TIMED))
    return _LIBRARY_RUNNERS[owner]
