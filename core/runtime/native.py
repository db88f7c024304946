"""Runs of consecutive kernels called from native code in one call.

A network of many small kernels pays, per kernel, the executor's Python: fetching the
arguments, a ctypes call, storing the results (some microseconds: as much as a small
kernel). Where consecutive functions of a plan are all machine code of one target that
can call its kernels in sequence, the executor calls the run once instead: the target's
runner (:class:`NativeRunner`) gets a :class:`SequencePlan` saying which kernel to call
with which buffers, and its intermediate tensors that nobody outside the run reads live
in one arena per calling thread, laid out by the memory plan's rules
(:func:`~heterocc.runtime.memory.arena_offsets`).

Core knows no target here: a kernel takes part by offering ``native_entry()`` (a
:class:`NativeEntry`, or None), and the target behind it does the calling.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .memory import Lifetime, arena_offsets

#: (shape, dtype) of one buffer a kernel reads or writes
Spec = tuple[tuple[int, ...], np.dtype]


class NativeRunner(Protocol):
    """A target's way of calling a sequence of its kernels from native code."""

    #: the most parameters one kernel of a sequence may have
    max_arguments: int

    def sequence(self, plan: SequencePlan) -> Callable[[Sequence[np.ndarray]],
                                                       list[np.ndarray] | None]:
        """A callable running ``plan``'s kernels in order on the run's inputs (arrays of
        ``plan.inputs``' specs) and returning its outputs (``plan.outputs``; arrays
        nobody else writes while the caller holds them), or None, having run nothing,
        where an input is not a C-contiguous array of its spec. It may be called from
        several threads at once. The callable may offer ``timed(inputs)``: the outputs
        and each kernel's (start, seconds), start on ``time.perf_counter``'s clock (or
        None as above), which a profile then records per function."""


@dataclass(frozen=True)
class NativeEntry:
    """A kernel's machine code as a run may call it: a C function taking one data
    pointer per parameter, the kernel's inputs (``inputs``), then its constants (their
    addresses: arrays the kernel keeps alive and nobody writes), then its outputs."""

    address: int
    inputs: tuple[Spec, ...]
    constants: tuple[int, ...]
    outputs: tuple[Spec, ...]
    runner: NativeRunner

    @property
    def arity(self) -> int:
        return len(self.inputs) + len(self.constants) + len(self.outputs)


@dataclass(frozen=True)
class SequencePlan:
    """Kernels called in order, each with the data pointers ``values[i]`` for the
    indexes ``arguments[call]``. The table of values holds, in this order, the run's
    inputs (given per call), its outputs (arrays the runner makes, read after the run),
    ``constants`` (fixed addresses) and the run's own buffers (byte offsets ``buffers``
    in an arena of ``arena_bytes`` per calling thread)."""

    functions: tuple[int, ...]
    arguments: tuple[tuple[int, ...], ...]
    inputs: tuple[Spec, ...]
    outputs: tuple[Spec, ...]
    constants: tuple[int, ...]
    buffers: tuple[int, ...]
    arena_bytes: int


def native_entry(kernel) -> NativeEntry | None:
    """``kernel``'s entry for a native run, or None where it offers none."""
    offer = getattr(kernel, "native_entry", None)
    return offer() if offer is not None else None


def _same(a: Spec, b: Spec) -> bool:
    return tuple(a[0]) == tuple(b[0]) and np.dtype(a[1]) == np.dtype(b[1])


@dataclass
class _RunBuilder:
    """The run being grown from consecutive steps (see :func:`find_runs`)."""

    runner: NativeRunner
    initial: Sequence
    #: slot -> its spec, for the run's inputs and the values its steps wrote
    inputs: dict
    written: dict
    steps: list

    def accepts(self, reads: Sequence[int], entry: NativeEntry) -> bool:
        """Whether a step reading ``reads`` with ``entry`` can join: every buffer it
        reads has the spec it wants (as written earlier in the run, as a constant, or
        as read by an earlier step of the run)."""
        if entry.runner is not self.runner or len(reads) != len(entry.inputs):
            return False
        for slot, spec in zip(reads, entry.inputs):
            if slot == 0:  # an omitted optional input
                return False
            known = self.written.get(slot) or self.inputs.get(slot)
            if known is None and self.initial[slot] is not None:
                const = self.initial[slot]
                if not (type(const) is np.ndarray and const.flags.c_contiguous
                        and _same((const.shape, const.dtype), spec)):
                    return False
            elif known is not None and not _same(known, spec):
                return False
        return True

    def add(self, index: int, reads: Sequence[int], writes: Sequence[int],
            entry: NativeEntry) -> None:
        for slot, spec in zip(reads, entry.inputs):
            if slot not in self.written and self.initial[slot] is None:
                self.inputs.setdefault(slot, spec)
        for slot, spec in zip(writes, entry.outputs):
            self.written[slot] = spec
        self.steps.append((index, reads, writes, entry))


@dataclass(frozen=True)
class NativeRun:
    """Consecutive steps ``first`` to ``last`` of a plan called as one: it reads the
    slots ``reads`` and writes ``writes``; ``call`` runs it natively, or else the steps
    one by one (see :meth:`__call__`)."""

    first: int
    last: int
    reads: tuple[int, ...]
    writes: tuple[int, ...]
    native: Callable
    plan: SequencePlan


def plan_run(builder: _RunBuilder, last_reader: Sequence[int], kept: set[int]
             ) -> NativeRun:
    """The :class:`SequencePlan` of a grown run: a value written in the run is one of
    its outputs where a later step reads it or the graph returns it (``kept``), else a
    buffer of the run's arena, live from its writer to its last reader."""
    end = builder.steps[-1][0]
    inputs = list(builder.inputs)
    outputs = [s for s in builder.written if s in kept or last_reader[s] > end]
    own = [s for s in builder.written if s not in outputs]
    constants: dict[int, int] = {}  # constant slot -> its index among the constants
    constant_addresses: list[int] = []
    for _, reads, _, _ in builder.steps:
        for slot in reads:
            if slot not in builder.written and slot not in builder.inputs \
                    and slot not in constants:
                constants[slot] = len(constant_addresses)
                constant_addresses.append(builder.initial[slot].ctypes.data)
    kernel_constants = len(constant_addresses)
    for _, _, _, entry in builder.steps:
        constant_addresses.extend(entry.constants)
    written_at = {s: index for index, _, writes, _ in builder.steps for s in writes}
    lifetimes = [Lifetime(written_at[s], max(written_at[s], min(last_reader[s], end)),
                          _nbytes(builder.written[s])) for s in own]
    offsets, arena_bytes = arena_offsets(lifetimes)
    base_out = len(inputs)
    base_const = base_out + len(outputs)
    base_own = base_const + len(constant_addresses)
    index_of = {s: k for k, s in enumerate(inputs)}
    index_of.update({s: base_out + k for k, s in enumerate(outputs)})
    index_of.update({s: base_own + k for k, s in enumerate(own)})
    index_of.update({s: base_const + k for s, k in constants.items()})
    arguments, next_own_constant = [], base_const + kernel_constants
    for _, reads, writes, entry in builder.steps:
        mine = range(next_own_constant, next_own_constant + len(entry.constants))
        next_own_constant += len(entry.constants)
        arguments.append((*(index_of[s] for s in reads), *mine,
                          *(index_of[s] for s in writes)))
    plan = SequencePlan(
        functions=tuple(entry.address for *_, entry in builder.steps),
        arguments=tuple(arguments),
        inputs=tuple(builder.inputs[s] for s in inputs),
        outputs=tuple(builder.written[s] for s in outputs),
        constants=tuple(constant_addresses), buffers=tuple(offsets), arena_bytes=arena_bytes)
    return NativeRun(builder.steps[0][0], end, tuple(inputs), tuple(outputs),
                     builder.runner.sequence(plan), plan)


def _nbytes(spec: Spec) -> int:
    return int(np.prod(spec[0], dtype=np.int64)) * np.dtype(spec[1]).itemsize


def find_runs(steps: Sequence, initial: Sequence, kept: set[int]) -> list[NativeRun]:
    """The runs of two or more consecutive ``steps`` (each with ``kernel``, ``place``,
    ``reads`` and ``writes``) whose kernels offer native entries of one runner and
    whose buffers agree (what a kernel reads has the spec its writer wrote). Values of
    the slots ``kept`` (the graph's outputs) are always outputs of their run."""
    last_reader = [-1] * len(initial)
    for index, step in enumerate(steps):
        for s in step.reads:
            last_reader[s] = index
    entries = [None if step.place is not None else native_entry(step.kernel)
               for step in steps]
    runs: list[NativeRun] = []
    builder = None

    def close():
        if builder is not None and len(builder.steps) >= 2:
            runs.append(plan_run(builder, last_reader, kept))

    for index, (step, entry) in enumerate(zip(steps, entries)):
        if entry is None or entry.arity > entry.runner.max_arguments:
            close()
            builder = None
            continue
        if builder is None or not builder.accepts(step.reads, entry):
            close()
            builder = _RunBuilder(entry.runner, initial, {}, {}, [])
            if not builder.accepts(step.reads, entry):
                builder = None
                continue
        builder.add(index, step.reads, step.writes, entry)
    close()
    return runs
