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

Every call leaves a span: CPU functions **measured** (wall time on the host), device
functions **modelled** (the device's own cycle counts of that call at its clock, and the
host link's time for the bytes it copied: the target's ``call_estimate`` hook), since a
simulated accelerator's wall time says nothing of the hardware's. From those spans
:func:`schedule` builds two modelled timelines, the sequential one (one function at a
time, input after input) and the pipelined one (each device one function at a time,
a function starting when its inputs are done and its device is free, lowest input
first), and :func:`chrome_trace` writes a timeline as Chrome trace JSON
(``chrome://tracing``, Perfetto).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .executor import GraphExecutor
from .overlap import HOST, DeviceQueue

__all__ = ["DeviceQueue", "Span", "StreamResult", "chrome_trace", "run_stream", "schedule"]


@dataclass
class Span:
    """One call on a lane: ``lane`` (``cpu``, a device, or a device's ``link``), the
    function, the input it worked on, start and duration in seconds, and whether the
    duration was ``measured`` or ``modelled``."""

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


@dataclass
class StreamResult:
    """What :func:`run_stream` returns: the outputs per input, the modelled sequential
    and pipelined timelines, and the wall time the run took on this machine."""

    outputs: list[list[np.ndarray]]
    sequential: list[Span]
    pipelined: list[Span]
    wall_seconds: float
    lanes: list[str] = field(default_factory=list)

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


def run_stream(executor: GraphExecutor, targets: Mapping[str, object],
               inputs: Sequence[Sequence[np.ndarray]], host: str) -> StreamResult:
    """Run ``executor``'s graph (a compiled model's fused graph) on every input of
    ``inputs`` (positional arrays, checked) as one dataflow
    (:meth:`GraphExecutor.execute_many`: device functions on their devices' queues, the
    rest on this thread, which ``run`` also uses for independent branches of one input).
    ``targets`` (instances by name) give each device call its modelled time
    (``call_estimate``); ``host`` names the lane of the functions run on this thread."""
    graph = executor.graph
    plan = executor.lanes
    names = [host if lane == HOST else lane for lane in plan.lanes]
    tasks: dict[tuple[int, int], _Task] = {}

    def modelled(node, kernel):
        hook = getattr(targets.get(executor.placement.get(node.name)), "call_estimate", None)
        return hook(kernel) if callable(hook) else None

    def observe(i: int, k: int, start: float, seconds: float, estimate) -> None:
        if plan.lanes[k] == HOST:
            tasks[(i, k)] = _Task(i, k, names[k], plan.deps[k], seconds)
        else:  # a device without a model of its time counts as taking none
            tasks[(i, k)] = _Task(i, k, names[k], plan.deps[k],
                                  0.0 if estimate is None else estimate.compute_s,
                                  0.0 if estimate is None else estimate.transfer_s, False)

    start = time.perf_counter()
    outputs = executor.execute_many(inputs, modelled, observe)
    wall = time.perf_counter() - start
    ordered = [tasks[(i, k)] for i in range(len(inputs)) for k in range(len(graph.nodes))]
    return StreamResult(outputs, schedule(ordered, pipelined=False),
                        schedule(ordered, pipelined=True), wall,
                        [host, *plan.devices])


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
    name = f"f{task.index}"
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
    lane, one complete event per span (microseconds), its input and whether it was
    measured or modelled in ``args``."""
    lanes = list(dict.fromkeys(s.lane for s in spans))
    events = [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": process}}]
    events += [{"name": "thread_name", "ph": "M", "pid": 1, "tid": k + 1,
                "args": {"name": lane}} for k, lane in enumerate(lanes)]
    for s in spans:
        label = s.name
        if names is not None and s.name.startswith("f") and s.name[1:].isdigit():
            label = names.get(int(s.name[1:]), s.name)
        if s.lane.endswith(" link"):
            label += " (transfer)"
        events.append({"name": label, "ph": "X", "pid": 1, "tid": lanes.index(s.lane) + 1,
                       "ts": round(s.start * 1e6, 3), "dur": round(s.seconds * 1e6, 3),
                       "args": {"input": s.input, "timing": s.kind}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}
