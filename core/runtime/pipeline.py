"""Devices at once: a stream of inputs run with the CPU and the accelerators overlapping,
and its timeline.

:func:`run_stream` runs a compiled model's functions for many inputs as a dataflow:
the host thread runs CPU functions, each device (an accelerator target) has a worker
thread that runs its functions in the order submitted (``overlap.DeviceQueue``:
``submit`` returns at once, ``wait`` blocks on the result). A function is submitted or
run as soon as its inputs are ready, lowest input first, so the CPU works on input
*i + 1* while the accelerator works on input *i*, and independent branches of one input
overlap too. It is the executor's own dataflow (``GraphExecutor.execute_many``), the
one a plain ``run`` uses for a graph with independent branches on different devices.

The stream's **timeline** is modelled from spans of three kinds:

- **measured**: a CPU function, and the host part of a device function (its layout
  conversions, the tiles it writes, its driver calls: the ``<device> host`` lane), timed
  in a **replay** pass (``heterocc.runtime.replay``): the same inputs once more, one
  function after another, with each device program's results served from the live
  run's record instead of the simulator, so that no simulated accelerator competes with
  them for the host's cores (a real accelerator takes no host CPU); the fastest of
  ``replays`` passes per call. The replay's outputs are checked against the live run's
  (``replay_bit_exact``).
- **modelled**: a device function's compute, from the device's own cycle counts of that
  call in the live run at its clock, and its transfers (the ``<device> link`` lane)
  from the bytes it copied over the declared host link (the target's
  ``call_estimate`` hook).

From those spans :func:`schedule` builds two timelines, the sequential one (one
function at a time, input after input) and the pipelined one (each lane one function
at a time, a function starting when its inputs are done and its lane is free, lowest
input first), and :func:`chrome_trace` writes a timeline as Chrome trace JSON
(``chrome://tracing``, Perfetto), each lane and span labelled measured or modelled.
The CPU times of the live run itself (with the simulator beside them) are kept as
``live_seconds``, to compare.
"""

from __future__ import annotations

import bisect
import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from .executor import GraphExecutor
from .overlap import HOST, DeviceQueue
from .replay import DeviceRun, device_parts, recording

__all__ = ["CLOCKS", "SPAN_SOURCES", "DeviceQueue", "Span", "StreamResult", "chrome_trace",
           "run_stream", "schedule"]


#: what each kind of span's duration is (the Chrome trace's ``otherData``)
SPAN_SOURCES = {
    "measured": "time on the host (wall time, or with run_stream(clock='cpu') this "
                "process's CPU seconds), timed in a replay pass without the simulated "
                "accelerator beside it (device results replayed); fastest of the passes",
    "modelled": "device compute: the device's cycle count of that call at its clock; "
                "link: the bytes the call copied over the declared host link",
}


@dataclass
class Span:
    """One call on a lane: ``lane`` (``cpu``, a device, a device's ``link`` or its
    ``host`` part), the function, the input it worked on, start and duration in
    seconds, and whether the duration was ``measured`` or ``modelled``."""

    lane: str
    name: str
    input: int
    start: float
    seconds: float
    kind: str = "measured"

    @property
    def end(self) -> float:
        """When the span ends (seconds)."""
        return self.start + self.seconds


@dataclass
class _Task:
    input: int
    index: int  # position of the function in the graph
    lane: str
    deps: tuple[int, ...]  # indices of the functions of the same input it reads
    compute_s: float = 0.0
    transfer_s: float = 0.0
    measured: bool = True
    #: a device function's host part (measured): conversions and driver calls
    host_s: float = 0.0
    #: the function's span name, where it is not ``f<index>``
    label: str = ""


def _host_parts_on(tasks: Sequence[_Task], lane: str) -> list[_Task]:
    """``tasks`` with each device function's host part made a task of its own on
    ``lane`` (the CPU's), just before the device's part: the timeline of a host whose
    cores the CPU functions take, so that a device's driver work waits for them."""
    out = []
    for t in tasks:
        if not t.host_s:
            out.append(t)
            continue
        # a negative index: unique within the input, and no function reads it but this one
        part = -1 - t.index
        out.append(_Task(t.input, part, lane, t.deps, t.host_s, label=f"f{t.index} host part"))
        out.append(dataclasses.replace(t, deps=(part,), host_s=0.0))
    return out


@dataclass
class StreamResult:
    """What :func:`run_stream` returns: the outputs per input, the modelled sequential
    and pipelined timelines, and the wall time the run took on this machine.
    ``live_seconds``: per lane, the seconds the host functions took in the live run (the
    simulated accelerator beside them), against the replay's in the timelines;
    ``replay_bit_exact``: whether the replay pass gave the live run's outputs."""

    outputs: list[list[np.ndarray]]
    sequential: list[Span]
    pipelined: list[Span]
    wall_seconds: float
    lanes: list[str] = field(default_factory=list)
    live_seconds: dict[str, float] = field(default_factory=dict)
    replay_bit_exact: bool = True
    #: what the timelines are scheduled from, by the clock of their measured spans
    #: (every clock of :data:`CLOCKS`, all taken in the same replay passes)
    tasks: dict = field(default_factory=dict, repr=False)
    #: the clock of ``sequential`` and ``pipelined``'s measured spans
    clock: str = "wall"

    def timeline(self, pipelined: bool = True, clock: str | None = None,
                 host_parts_on: str | None = None) -> list[Span]:
        """A timeline of the stream: ``pipelined`` or not, its measured spans on
        ``clock`` (default: this result's), and with ``host_parts_on`` a lane (the
        CPU's) the host part of every device function run on that lane instead of the
        device's: where the CPU's functions take every core, the driver's conversions
        wait for them (a bound on the other side of the default, which counts them on
        a thread beside the CPU's)."""
        tasks = self.tasks[clock or self.clock]
        if host_parts_on is not None:
            tasks = _host_parts_on(tasks, host_parts_on)
        return schedule(tasks, pipelined)

    def speedup_of(self, clock: str | None = None, host_parts_on: str | None = None
                   ) -> float:
        """The modelled throughput ratio (pipelined over sequential) of :meth:`timeline`."""
        sequential = self.makespan(self.timeline(False, clock, host_parts_on))
        pipelined = self.makespan(self.timeline(True, clock, host_parts_on))
        return sequential / pipelined if pipelined else 1.0

    @staticmethod
    def makespan(spans: Sequence[Span]) -> float:
        """When the last span of a timeline ends (seconds from its start)."""
        return max((s.end for s in spans), default=0.0)

    @property
    def speedup(self) -> float:
        """Modelled throughput of the pipelined run over the sequential run's."""
        pipelined = self.makespan(self.pipelined)
        return self.makespan(self.sequential) / pipelined if pipelined else 1.0

    def busy(self, spans: Sequence[Span]) -> dict[str, float]:
        """Seconds each lane is busy in a timeline."""
        out: dict[str, float] = {}
        for s in spans:
            out[s.lane] = out.get(s.lane, 0.0) + s.seconds
        return out


#: what a measured span's seconds are read from (``run_stream(clock=...)``; the replay
#: reads both): wall time, or this process's CPU seconds (not slowed by other processes,
#: but a kernel's threads counted together: a parallel kernel's CPU seconds exceed its
#: wall time alone)
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def run_stream(executor: GraphExecutor, targets: Mapping[str, object],
               inputs: Sequence[Sequence[np.ndarray]], host: str,
               replays: int = 3, clock: str = "wall") -> StreamResult:
    """Run ``executor``'s graph (a compiled model's fused graph) on every input of
    ``inputs`` (positional arrays, checked) as one dataflow
    (:meth:`GraphExecutor.execute_many`: device functions on their devices' queues, the
    rest on this thread, which ``run`` also uses for independent branches of one input),
    then ``replays`` times one function after another with the devices' results
    replayed (see the module), for the measured spans. ``targets`` (instances by name)
    give each device call its modelled time (``call_estimate``); ``host`` names the lane
    of the functions run on this thread; ``clock`` (:data:`CLOCKS`) what the measured
    spans are timed by."""
    if clock not in CLOCKS:
        raise InputError(f"run_stream: clock {clock!r}; give one of {', '.join(CLOCKS)}")
    if replays < 1:
        raise InputError(f"run_stream: replays={replays}; the timeline needs at least one "
                         "replay pass to measure the host's spans")
    graph = executor.graph
    plan = executor.lanes
    names = [host if lane == HOST else lane for lane in plan.lanes]
    kernels = {k: executor.kernels[graph.nodes[k].name]
               for k, lane in enumerate(plan.lanes) if lane != HOST}
    estimates: dict[tuple[int, int], object] = {}
    runs: dict[tuple[int, int], dict[int, list[DeviceRun]]] = {}
    whole: dict[tuple[int, int], list] = {}
    live: dict[str, float] = {}

    with recording(list(kernels.values())):
        def after_device(node, kernel):  # on the device's thread, right after its call
            hook = getattr(targets.get(executor.placement.get(node.name)), "call_estimate",
                           None)
            parts = device_parts(kernel)
            taken = {id(w): w.take() for w in _wrappers(parts)} if parts else None
            return (hook(kernel) if callable(hook) else None), taken

        def observe(i: int, k: int, start: float, seconds: float, reported, results) -> None:
            if reported is None:
                live[names[k]] = live.get(names[k], 0.0) + seconds
                return
            estimates[(i, k)], taken = reported
            if taken is None:
                whole[(i, k)] = list(results)
            else:
                runs[(i, k)] = taken

        start = time.perf_counter()
        outputs = executor.execute_many(inputs, after_device, observe)
        wall = time.perf_counter() - start
        best, exact = _replay(executor, inputs, outputs, kernels, runs, whole, replays)
    by_clock = {}
    for name, seconds in zip(CLOCKS, best):
        tasks = []
        for i in range(len(inputs)):
            for k in range(len(graph.nodes)):
                if plan.lanes[k] == HOST:
                    tasks.append(_Task(i, k, names[k], plan.deps[k], seconds[i][k]))
                    continue
                estimate = estimates.get((i, k))  # a device without a time model: none
                tasks.append(_Task(i, k, names[k], plan.deps[k],
                                   0.0 if estimate is None else estimate.compute_s,
                                   0.0 if estimate is None else estimate.transfer_s, False,
                                   seconds[i][k]))
        by_clock[name] = tasks
    tasks = by_clock[clock]
    return StreamResult(outputs, schedule(tasks, pipelined=False),
                        schedule(tasks, pipelined=True), wall, [host, *plan.devices],
                        live, exact, by_clock, clock)


def _wrappers(parts) -> list:
    """The distinct replay devices in front of ``parts`` (while ``recording``)."""
    return list({id(p.device): p.device for p in parts}.values())


def _replay(executor: GraphExecutor, inputs, outputs, kernels, runs, whole,
            replays: int) -> tuple[list[list[list[float]]], bool]:
    """The replay passes (see the module): per clock of :data:`CLOCKS`, per input and
    function, the fastest seconds; and whether every pass gave the live run's outputs
    bit for bit."""
    clocks = tuple(CLOCKS.values())
    best: list[list[list[float]]] = [[] for _ in clocks]
    exact = True
    for _ in range(replays):
        for i, args in enumerate(inputs):
            def given(k: int, i: int = i):
                if (i, k) in whole:
                    return whole[(i, k)]
                if (i, k) in runs:
                    for wrapper in _wrappers(device_parts(kernels[k])):
                        wrapper.serve(runs[(i, k)][id(wrapper)])
                return None

            replayed, seconds = executor.execute_timed(args, given, clocks)
            exact &= all(a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
                         for a, b in zip(replayed, outputs[i], strict=True))
            for fastest, measured in zip(best, seconds):
                if len(fastest) <= i:
                    fastest.append(measured)
                else:
                    fastest[i] = [min(a, b) for a, b in zip(fastest[i], measured)]
    return best, exact


def schedule(tasks: Sequence[_Task], pipelined: bool) -> list[Span]:
    """The modelled timeline of ``tasks`` (in input, then graph order). Sequential: one
    after another. Pipelined: each lane runs one task at a time; a task starts when
    the tasks it reads are done and its lane is free, the earliest-starting ready task
    first (ties: lowest input, then graph order). A device task's link time is a span
    on the device's ``link`` lane just before its compute span."""
    spans: list[Span] = []
    if not pipelined:
        now = 0.0
        for t in tasks:
            now = _emit(spans, t, now)
        return spans
    end: dict[tuple[int, int], float] = {}
    free: dict[str, float] = {}
    by_key = {(t.input, t.index): t for t in tasks}
    readers: dict[tuple[int, int], list[tuple[int, int]]] = {}
    missing = {}
    for t in tasks:
        missing[(t.input, t.index)] = len(t.deps)
        for d in t.deps:
            readers.setdefault((t.input, d), []).append((t.input, t.index))
    ready = sorted(key for key, count in missing.items() if count == 0)
    while ready:
        best, best_start = None, None
        for key in ready:
            t = by_key[key]
            begin = max(max((end[(t.input, d)] for d in t.deps), default=0.0),
                        free.get(t.lane, 0.0))
            if best_start is None or begin < best_start:
                best, best_start = key, begin
        ready.remove(best)
        task = by_key[best]
        end[best] = free[task.lane] = _emit(spans, task, best_start)
        for reader in readers.get(best, ()):
            missing[reader] -= 1
            if missing[reader] == 0:
                bisect.insort(ready, reader)
    return spans


def _emit(spans: list[Span], task: _Task, start: float) -> float:
    name = task.label or f"f{task.index}"
    if task.host_s:
        spans.append(Span(f"{task.lane} host", name, task.input, start, task.host_s))
        start += task.host_s
    if task.transfer_s:
        spans.append(Span(f"{task.lane} link", name, task.input, start, task.transfer_s,
                          "modelled"))
    kind = "measured" if task.measured else "modelled"
    spans.append(Span(task.lane, name, task.input, start + task.transfer_s, task.compute_s,
                      kind))
    return start + task.transfer_s + task.compute_s


def chrome_trace(spans: Sequence[Span], names: Mapping[int, str] | None = None,
                 process: str = "heterocc") -> dict:
    """A timeline as Chrome trace JSON (``{"traceEvents": [...]}``): one thread per
    lane, named with the kind of its spans (``llvm (measured)``, ``vta (modelled)``),
    one complete event per span (microseconds), its input and whether it was measured
    or modelled in ``args``; ``otherData`` says what each kind is."""
    lanes = list(dict.fromkeys(s.lane for s in spans))
    kinds = {lane: "/".join(sorted({s.kind for s in spans if s.lane == lane}))
             for lane in lanes}
    events = [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": process}}]
    events += [{"name": "thread_name", "ph": "M", "pid": 1, "tid": k + 1,
                "args": {"name": f"{lane} ({kinds[lane]})"}} for k, lane in enumerate(lanes)]
    for s in spans:
        label = s.name
        function, _, rest = s.name.partition(" ")  # "f12", or "f12 host part"
        if names is not None and function.startswith("f") and function[1:].isdigit():
            label = " ".join([names.get(int(function[1:]), function), *filter(None, [rest])])
        if s.lane.endswith(" link"):
            label += " (transfer)"
        elif s.lane.endswith(" host"):
            label += " (host part)"
        events.append({"name": label, "ph": "X", "pid": 1, "tid": lanes.index(s.lane) + 1,
                       "ts": round(s.start * 1e6, 3), "dur": round(s.seconds * 1e6, 3),
                       "args": {"input": s.input, "timing": s.kind}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {f"{kind} spans": what for kind, what in SPAN_SOURCES.items()}}
