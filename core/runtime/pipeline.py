"""Devices at once: a stream of inputs run with the CPU and the accelerators overlapping,
and its timeline.

:func:`run_stream` runs a compiled model's functions for many inputs as a dataflow:
the host thread runs CPU functions, each device (an accelerator target) has a worker
thread that runs its functions in the order submitted (:class:`DeviceQueue`, the
asynchronous device interface: ``submit`` returns at once, ``wait`` blocks on the
result). A function is submitted or run as soon as its inputs are ready, lowest input
first, so the CPU works on input *i + 1* while the accelerator works on input *i*, and
independent branches of one input overlap too.

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
import concurrent.futures as cf
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..ir.graph import Graph, Value
from ..ops import get_op
from .executor import on_host


class DeviceQueue:
    """The asynchronous interface of one device: ``submit(call, args)`` queues a call
    to run on the device's own worker thread and returns a handle at once; ``wait``
    blocks until it is done and returns its result. Calls run one at a time, in the
    order submitted, as a device runs programs; any transport (simulator, RTL, board)
    is driven through it, since the calls it runs are the target's kernels."""

    def __init__(self, name: str):
        self.name = name
        self._pool = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"device-{name}")

    def submit(self, call: Callable, *args) -> cf.Future:
        """Queue ``call(*args)`` on the device; its handle."""
        return self._pool.submit(call, *args)

    @staticmethod
    def wait(handle: cf.Future):
        """The result of a submitted call, once done (its exception, raised here)."""
        return handle.result()

    def close(self) -> None:
        """Finish what was submitted and stop the worker."""
        self._pool.shutdown(wait=True)


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


def _dependencies(graph: Graph) -> list[tuple[int, ...]]:
    producer = {v: k for k, n in enumerate(graph.nodes) for v in n.outputs}
    return [tuple(sorted({producer[v] for v in n.inputs if v is not None and v in producer}))
            for n in graph.nodes]


def run_stream(graph: Graph, kernels: Mapping[str, Callable], placement: Mapping[str, str],
               targets: Mapping[str, object], inputs: Sequence[Sequence[np.ndarray]],
               host: str) -> StreamResult:
    """Run ``graph`` (a compiled model's fused graph) on every input of ``inputs``
    (positional arrays, checked), functions of ``placement``'s non-``host`` targets on
    their devices' queues, the rest on this thread. ``targets`` (instances by name) give
    each device call its modelled time (``call_estimate``)."""
    deps = _dependencies(graph)
    lanes = {k: placement.get(n.name, host) if n.body is not None else host
             for k, n in enumerate(graph.nodes)}
    queues = {lane: DeviceQueue(lane) for lane in sorted(set(lanes.values()) - {host})}
    values: list[dict[Value, object]] = [dict(zip(graph.inputs, args)) for args in inputs]
    tasks: dict[tuple[int, int], _Task] = {}
    in_flight: dict[cf.Future, tuple[int, int]] = {}
    readers: dict[int, list[int]] = {}
    for k, ds in enumerate(deps):
        for d in ds:
            readers.setdefault(d, []).append(k)
    missing = {(i, k): len(deps[k]) for i in range(len(inputs)) for k in range(len(deps))}
    ready = sorted(key for key, count in missing.items() if count == 0)

    def arguments(i: int, k: int) -> list:
        env = values[i]
        return [None if v is None else (v.data if v.is_const else on_host(env[v]))
                for v in graph.nodes[k].inputs]

    def call(k: int, args: list):
        node = graph.nodes[k]
        if node.body is None:
            return get_op(node.op).run(args, node.attrs)
        return kernels[node.name](args)

    def on_device(k: int, args: list):
        results = call(k, args)
        hook = getattr(targets.get(lanes[k]), "call_estimate", None)
        estimate = hook(kernels[graph.nodes[k].name]) if callable(hook) else None
        if estimate is None:
            return results, 0.0, 0.0
        return results, estimate.compute_s, estimate.transfer_s

    def finish(i: int, k: int, results, compute_s: float, transfer_s: float) -> None:
        values[i].update(zip(graph.nodes[k].outputs, results))
        tasks[(i, k)] = _Task(i, k, lanes[k], deps[k], compute_s, transfer_s,
                              lanes[k] == host)
        for reader in readers.get(k, ()):
            missing[(i, reader)] -= 1
            if missing[(i, reader)] == 0:
                bisect.insort(ready, (i, reader))

    def collect(block: bool) -> None:
        if not in_flight:
            return
        finished, _ = cf.wait(list(in_flight), timeout=None if block else 0,
                              return_when=cf.FIRST_COMPLETED)
        for future in sorted(finished, key=in_flight.__getitem__):
            i, k = in_flight.pop(future)
            finish(i, k, *DeviceQueue.wait(future))

    start = time.perf_counter()
    try:
        with np.errstate(all="ignore"):
            while ready or in_flight:
                # device work first (submitting costs nothing), then one host function
                for key in [key for key in ready if lanes[key[1]] != host]:
                    ready.remove(key)
                    in_flight[queues[lanes[key[1]]].submit(on_device, key[1],
                                                           arguments(*key))] = key
                host_ready = [key for key in ready if lanes[key[1]] == host]
                if host_ready:
                    i, k = host_ready[0]
                    ready.remove((i, k))
                    t0 = time.perf_counter()
                    results = call(k, arguments(i, k))
                    finish(i, k, results, time.perf_counter() - t0, 0.0)
                    collect(block=False)
                else:
                    collect(block=True)
    finally:
        for queue in queues.values():
            queue.close()
    wall = time.perf_counter() - start
    outputs = [[np.asarray(on_host(values[i][v])) for v in graph.outputs]
               for i in range(len(inputs))]
    ordered = [tasks[(i, k)] for i in range(len(inputs)) for k in range(len(graph.nodes))]
    return StreamResult(outputs, schedule(ordered, pipelined=False),
                        schedule(ordered, pipelined=True), wall,
                        [host, *sorted(queues)])


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
