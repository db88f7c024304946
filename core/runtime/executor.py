"""The graph executor: runs a fused graph's function nodes with their kernels."""

from __future__ import annotations

import abc
import bisect
import concurrent.futures as cf
import functools
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from ..errors import InputError
from ..ir.graph import Graph, Node, Value
from ..ops import get_op
from .budget import check_tensor, check_total, current_budget
from .inputs import is_dtype, native_order
from .memory import MemoryPlan, plan_memory
from .native import NativeRun, find_runs
from .overlap import HOST, DeviceQueue, LanePlan, kernel_device, plan_lanes

Kernel = Callable[[Sequence[np.ndarray]], list[np.ndarray]]


class DeviceTensor(abc.ABC):
    """A value held in a device's memory (a target's own tensor type).

    A kernel with a ``place(value)`` method gets every argument through it (e.g.
    uploaded to its device, device tensors of that device as they are), and the executor
    keeps the placed value for the later readers, so consecutive functions of one device
    pass tensors without host copies and a host value goes up once. Every other reader,
    and the graph's outputs, get ``numpy()``.
    """

    @abc.abstractmethod
    def numpy(self) -> np.ndarray:
        """The tensor's contents on the host."""


def on_host(value):
    """``value`` with device tensors replaced by their host arrays."""
    return value.numpy() if isinstance(value, DeviceTensor) else value


@dataclass
class ProfileEntry:
    """Time spent in one node over the profiled runs."""

    node: str
    op: str
    target: str
    calls: int = 0
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)
    #: (start, seconds) of the first MAX_SPANS calls, start on time.perf_counter's clock
    #: (a timeline: heterocc.profiling.chrome_trace)
    spans: list = field(default_factory=list)


#: calls of one node whose spans a profile keeps
MAX_SPANS = 10_000


class _Step(NamedTuple):
    """One node of an executor's plan: what to call and which slots of the run's value
    list it reads and writes, all looked up once rather than on every run."""

    node: Node
    kernel: Kernel | None  # None: a plain op node, run on its NumPy reference
    call: Callable[[list], Sequence]  # the kernel, or the op's reference with its attrs
    place: Callable | None  # the kernel's ``place`` (see DeviceTensor), if it has one
    reads: tuple[int, ...]  # slot of each input (an omitted optional input: slot 0, None)
    placed: tuple[tuple[int, int], ...]  # (argument index, slot) of each non-constant input
    writes: tuple[int, ...]  # slot of each output
    drops: tuple[int, ...]  # slots dead after this node (their last reader)


@dataclass
class GraphExecutor:
    """Runs ``graph`` node by node.

    Function nodes run their kernel from ``kernels`` (by node name); plain op
    nodes (graphs run without fusion) run on the NumPy reference.
    ``set_input`` / ``run`` / ``get_output`` as in TVM's graph executor.

    The first run makes a plan from ``graph`` and ``kernels`` (each node's kernel and the
    slots of the values it reads and writes) that later runs follow, so a network of
    many small kernels pays little per node; assigning another ``graph`` or ``kernels``
    makes a new plan. Consecutive functions whose kernels offer native entries run as
    one call of their target's runtime (``native_runs``; :mod:`~heterocc.runtime.native`).

    Functions whose kernels drive a device (``overlap.kernel_device``) run on that
    device's lane: where the graph has independent branches on different devices, a
    run submits the device's functions to its queue and runs the others meanwhile
    (:meth:`execute_many`; ``overlap`` False turns it off), with the outputs of one
    function after another.

    :meth:`execute` may be called from several threads at once: a run keeps its values
    in a list of its own, the plan is made once under a lock, the device lanes are
    shared (one call at a time per device, as its lock allows anyway), and the kernels
    keep per-thread or per-device state (see ``heterocc.sdk.device_lock``). ``set_input`` /
    ``run`` / ``get_output`` hold one run's inputs and outputs on the executor: one
    thread at a time (or one executor per thread).
    """

    graph: Graph
    kernels: Mapping[str, Kernel]
    placement: Mapping[str, str] = field(default_factory=dict)
    profile: dict[str, ProfileEntry] | None = None
    _inputs: dict[str, np.ndarray] = field(default_factory=dict)
    _outputs: list[np.ndarray] = field(default_factory=list)
    memory: MemoryPlan | None = None
    #: run independent branches on different devices at once (False: one function after
    #: another on the calling thread, in graph order; the outputs are the same bits)
    overlap: bool = True
    #: the plan's steps and the graph and kernels it was made from (see :meth:`_plan`)
    _steps: tuple[_Step, ...] | None = field(default=None, repr=False)
    _planned: tuple = field(default=(None, None, None), repr=False)
    #: the value list a run starts from (constants in their slots) and the slots of the
    #: graph's inputs and outputs
    _initial: list = field(default_factory=list, repr=False)
    _input_slots: tuple[int, ...] = field(default=(), repr=False)
    _output_slots: tuple[int, ...] = field(default=(), repr=False)
    #: guards making the plan and recording the profile (runs from several threads)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    #: the plan's lanes (see :meth:`execute_many`), and per step the slots its end
    #: releases: each slot's readers (a run counts them down), the distinct slots the step
    #: reads that may be dropped, and its outputs that nobody reads
    _lanes: LanePlan | None = field(default=None, repr=False)
    _slot_readers: list = field(default_factory=list, repr=False)
    _released: tuple = field(default=(), repr=False)
    _unread: tuple = field(default=(), repr=False)
    #: one queue per device lane, made on first use and shared by every run
    _queues: dict[str, DeviceQueue] = field(default_factory=dict, repr=False)
    #: call runs of consecutive kernels that offer native entries as one (see
    #: :mod:`~heterocc.runtime.native`; a profile times each kernel inside the run) where
    #: devices do not overlap (False: one call per function; the outputs are the same bits)
    native_runs: bool = True
    #: the plan's steps with those runs each one step (:meth:`_with_native_runs`)
    _native_steps: tuple[_Step, ...] = field(default=(), repr=False)
    #: whether every one of those steps is a native run (machine code alone: a call
    #: needs no guard against NumPy's warnings and floating-point flags)
    _machine_code_only: bool = field(default=False, repr=False)

    def __post_init__(self):
        check_graph_memory(self.graph)
        if self.memory is None:
            self.memory = plan_memory(self.graph)
        check_total(self.memory.planned_bytes, f"the intermediate tensors of one run "
                    f"({len(self.memory.slot_bytes)} planned buffers)")
        returned = set(self.graph.outputs)
        # values to drop after each node: the run never holds more than the plan
        self._dead_after: dict[int, list[Value]] = {}
        for v, last in self.memory.last_use.items():
            if v not in returned:
                self._dead_after.setdefault(last, []).append(v)

    @property
    def input_names(self) -> list[str]:
        return [v.name for v in self.graph.inputs]

    def set_input(self, name: str, array: np.ndarray) -> None:
        spec = {v.name: v for v in self.graph.inputs}.get(name)
        if spec is None:
            raise InputError(f"unknown input {name!r}; inputs are {', '.join(self.input_names)}")
        self._inputs[name] = check_input(spec, array)

    def run(self) -> None:
        missing = [n for n in self.input_names if n not in self._inputs]
        if missing:
            raise InputError(f"missing input(s): {', '.join(missing)}")
        self._outputs = self.execute([self._inputs[n] for n in self.input_names])

    def get_output(self, index: int) -> np.ndarray:
        return self._outputs[index]

    def _plan(self) -> tuple[_Step, ...]:
        """The steps of a run (made on the first run, and again for another graph,
        kernels or ``native_runs``): every value gets a slot in one list, constants are
        put in theirs once, and each node's kernel, argument slots, output slots and
        dead slots are found here rather than by name and by value on every run."""
        if self._plan_is_current():
            return self._steps
        with self._lock:  # one thread makes it; the others wait and take it
            if not self._plan_is_current():
                self._make_plan()
            return self._steps

    def _plan_is_current(self) -> bool:
        """Whether the plan was made from this graph, these kernels and this choice of
        native runs (each may be assigned since)."""
        graph, kernels, native = self._planned
        return self._steps is not None and graph is self.graph and kernels is self.kernels \
            and native is self.native_runs

    def _make_plan(self) -> None:
        slots: dict[Value, int] = {}
        initial: list = [None]  # slot 0 stays None: an omitted optional input

        def slot(v: Value) -> int:
            if v not in slots:
                slots[v] = len(initial)
                initial.append(v.data if v.is_const else None)
            return slots[v]

        input_slots = tuple(slot(v) for v in self.graph.inputs)
        returned = set(self.graph.outputs)
        steps = []
        for index, node in enumerate(self.graph.nodes):
            if node.body is not None:
                kernel = self.kernels[node.name]
                call = kernel
            else:
                kernel, op, attrs = None, get_op(node.op), node.attrs
                call = functools.partial(_run_op, op, attrs)
            reads = tuple(0 if v is None else slot(v) for v in node.inputs)
            placed = tuple((k, slots[v]) for k, v in enumerate(node.inputs)
                           if v is not None and not v.is_const)
            writes = tuple(slot(v) for v in node.outputs)
            # dead after this node: values past their last reader, and outputs nobody
            # reads (so that their kernel may write them again on the next run)
            drops = tuple(slots[v] for v in self._dead_after.get(index, ())) + tuple(
                slots[v] for v in node.outputs
                if v not in self.memory.last_use and v not in returned)
            steps.append(_Step(node, kernel, call, getattr(kernel, "place", None),
                               reads, placed, writes, drops))
        self._output_slots = tuple(slot(v) for v in self.graph.outputs)
        self._input_slots, self._initial = input_slots, initial
        self._plan_lanes(steps, slots, returned)
        self._native_steps = self._with_native_runs(steps) if self.native_runs else tuple(steps)
        self._machine_code_only = all(type(step.call) is _RunCall for step in self._native_steps)
        self._steps, self._planned = tuple(steps), (self.graph, self.kernels, self.native_runs)

    def _with_native_runs(self, steps: list[_Step]) -> tuple[_Step, ...]:
        """``steps`` with every run of consecutive native kernels (:func:`find_runs`)
        replaced by one step calling it: it reads the run's inputs, writes the values
        read after it and drops what its steps would have dropped of its inputs."""
        runs = find_runs(steps, self._initial, set(self._output_slots))
        merged, k = [], 0
        for run in runs:
            merged.extend(steps[k:run.first])
            members = tuple(steps[run.first:run.last + 1])
            inputs = set(run.reads)
            drops = tuple(dict.fromkeys(s for step in members for s in step.drops
                                        if s in inputs))
            call = _RunCall(run, members, self._initial)
            merged.append(_Step(members[0].node, call, call, None, run.reads, (), run.writes,
                                drops))
            k = run.last + 1
        merged.extend(steps[k:])
        return tuple(merged)

    def _plan_lanes(self, steps: list[_Step], slots: dict[Value, int], returned: set) -> None:
        """Each step's lane and what it waits for (:class:`LanePlan`), and which slots a
        step's end releases when steps finish out of graph order."""
        producer = {v: k for k, step in enumerate(steps) for v in step.node.outputs}
        deps = [sorted({producer[v] for v in step.node.inputs if v in producer})
                for step in steps]
        lanes = [HOST if kernel_device(step.kernel) is None
                 else self.placement.get(step.node.name, step.node.name) for step in steps]
        readers = [0] * len(self._initial)
        released, unread = [], []
        read_anywhere = set()
        for step in steps:
            mine = sorted({slots[v] for v in step.node.inputs if v is not None
                           and not v.is_const and v not in returned})
            for s in mine:
                readers[s] += 1
            released.append(tuple(mine))
            read_anywhere.update(v for v in step.node.inputs if v is not None)
        for step in steps:
            unread.append(tuple(slots[v] for v in step.node.outputs
                                if v not in read_anywhere and v not in returned))
        self._lanes = plan_lanes(lanes, deps)
        self._slot_readers, self._released, self._unread = readers, tuple(released), \
            tuple(unread)

    def execute(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Outputs for positional inputs already checked against the graph's inputs.

        Where the graph has independent branches on different devices (an accelerator's
        function and a CPU function neither of which reads the other's result), they run
        at once (:meth:`execute_many`); otherwise the steps run one after another on this
        thread. Either way the outputs are the same bits."""
        self._plan()
        if self.overlap and self._lanes.overlaps:
            return self.execute_many([inputs])[0]
        env = self._initial.copy()
        input_slots, output_slots = self._input_slots, self._output_slots
        for k, value in zip(input_slots, inputs):
            env[k] = value
        profile = self.profile
        if self._machine_code_only and profile is None:
            # native runs alone: no NumPy op to warn or to raise floating-point flags
            self._run_steps(env, profile)
        else:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore", RuntimeWarning)
                self._run_steps(env, profile)
        return [np.asarray(on_host(env[k])) for k in output_slots]

    def _run_steps(self, env: list, profile) -> None:
        """The plan's steps (:attr:`_native_steps`) one after another on ``env``, each
        reading its arguments from and writing its results to their slots."""
        ndarray = np.ndarray
        for node, kernel, call, place, reads, placed, writes, drops in self._native_steps:
            if place is None:
                # host arrays as they are; anything else (a device tensor) via on_host
                args = [a if type(a) is ndarray else on_host(a)
                        for a in [env[k] for k in reads]]
            else:
                args = [None if a is None else place(a) for a in [env[k] for k in reads]]
                for k, s in placed:  # later readers get the placed value
                    env[s] = args[k]
            if profile is None:
                results = call(args)
            elif type(call) is _RunCall:  # it records each of its functions
                results = call(args, self._record)
            else:
                t0 = time.perf_counter()
                results = call(args)
                self._record(node, t0, time.perf_counter() - t0, kernel)
            for s, r in zip(writes, results):
                env[s] = r
            # nothing dead may be held through the next node (its kernel may want to
            # write it again): not the arguments, the results, nor the loop's last one
            args = results = r = None
            for s in drops:
                env[s] = None

    def execute_timed(self, inputs: Sequence[np.ndarray],
                      given: Callable[[int], Sequence | None] | None = None,
                      clocks: Sequence[Callable[[], float]] = (time.perf_counter,)
                      ) -> tuple[list[np.ndarray], list[list[float]]]:
        """Outputs for positional inputs, running one function after another on this
        thread in graph order (no device lanes), and per clock of ``clocks`` the
        seconds each function took (making its arguments and calling its kernel; wall
        time by default, ``time.process_time``: this process's CPU seconds).
        ``given(step)``, called before each function and not timed, may return that
        function's results instead of running it (a replayed device function: its
        seconds are then 0); None runs it."""
        steps = self._plan()
        env = self._initial.copy()
        for k, value in zip(self._input_slots, inputs):
            env[k] = value
        seconds: list[list[float]] = [[] for _ in clocks]
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            for k, step in enumerate(steps):
                results = None if given is None else given(k)
                if results is None:
                    start = [clock() for clock in clocks]
                    args = self._arguments(step, env)
                    results = step.call(args)
                    for out, clock, begun in zip(seconds, clocks, start):
                        out.append(clock() - begun)
                    args = None
                else:
                    for out in seconds:
                        out.append(0.0)
                for s, r in zip(step.writes, results):
                    env[s] = r
                results = None
                for s in step.drops:
                    env[s] = None
        return [np.asarray(on_host(env[k])) for k in self._output_slots], seconds

    def execute_many(self, inputs: Sequence[Sequence[np.ndarray]],
                     after_device: Callable[[Node, Kernel], object] | None = None,
                     observe: Callable[[int, int, float, float, object, list], None] | None
                     = None) -> list[list[np.ndarray]]:
        """Outputs for each of several positional inputs, run as a dataflow with the
        devices working at once.

        A device function (its kernel drives a device: ``overlap.kernel_device``) is
        submitted to its device's queue (:class:`~heterocc.runtime.overlap.DeviceQueue`)
        as soon as its inputs are ready; this thread runs the host functions that are
        ready meanwhile, lowest input first, then graph order, and waits on a device's
        handle only when nothing else is ready. So independent branches of one input
        overlap, and for a stream the CPU works on input *i + 1* while an accelerator
        works on input *i*. Every kernel computes what it would in order: the outputs
        are those of one run after another.

        ``after_device(node, kernel)`` runs on the device's thread right after each
        device call (what the kernel reports of that call, before the next one changes
        it); ``observe(input, step, start, seconds, reported, results)`` on this thread
        as each function finishes (``start`` on ``time.perf_counter``'s clock;
        ``reported``: ``after_device``'s value, None for a host function; ``results``: its
        outputs). A function that raises stops the run: nothing more is started, the
        calls in flight are waited for, and its exception is raised here, with a note
        naming the function and its device."""
        steps = self._plan()
        plan = self._lanes
        lanes = plan.lanes
        queues = self._device_queues(plan)
        envs, missing, readers_left = [], [], []
        for args in inputs:
            env = self._initial.copy()
            for k, value in zip(self._input_slots, args):
                env[k] = value
            envs.append(env)
            missing.append([len(d) for d in plan.deps])
            readers_left.append(self._slot_readers.copy())
        ready = [(i, k) for i in range(len(inputs)) for k in range(len(steps))
                 if not plan.deps[k]]
        in_flight: dict[cf.Future, tuple[int, int]] = {}
        failures: list[tuple[tuple[int, int], BaseException]] = []

        def finish(i: int, k: int, results, start: float, seconds: float, reported) -> None:
            env = envs[i]
            for s, r in zip(steps[k].writes, results):
                env[s] = r
            counts = readers_left[i]
            for s in self._released[k]:  # drop what no later reader needs
                counts[s] -= 1
                if counts[s] == 0:
                    env[s] = None
            for s in self._unread[k]:
                env[s] = None
            for reader in plan.readers[k]:
                missing[i][reader] -= 1
                if missing[i][reader] == 0:
                    bisect.insort(ready, (i, reader))
            if observe is not None:
                observe(i, k, start, seconds, reported, results)

        def collect(block: bool) -> None:
            if not in_flight:
                return
            done, _ = cf.wait(list(in_flight), timeout=None if block else 0,
                              return_when=cf.FIRST_COMPLETED)
            for future in sorted(done, key=in_flight.__getitem__):
                key = in_flight.pop(future)
                try:
                    results, start, seconds, reported = future.result()
                except BaseException as exc:  # noqa: BLE001 - raised below, once settled
                    failures.append((key, exc))
                    continue
                finish(*key, results, start, seconds, reported)

        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            while (ready and not failures) or in_flight:
                if failures:  # start nothing more; let what is in flight settle
                    collect(block=True)
                    continue
                # device work first (submitting costs nothing), then one host function
                for key in [key for key in ready if lanes[key[1]] != HOST]:
                    ready.remove(key)
                    step = steps[key[1]]
                    args = self._arguments(step, envs[key[0]])
                    in_flight[queues[lanes[key[1]]].submit(
                        self._device_call, step, args, after_device)] = key
                    args = None
                host = next((key for key in ready if lanes[key[1]] == HOST), None)
                if host is None:
                    collect(block=True)
                    continue
                ready.remove(host)
                step = steps[host[1]]
                args = self._arguments(step, envs[host[0]])
                start = time.perf_counter()
                try:
                    results = step.call(args)
                except BaseException as exc:  # noqa: BLE001 - raised below, once settled
                    failures.append((host, exc))
                    continue
                finally:
                    args = None
                seconds = time.perf_counter() - start
                if self.profile is not None:
                    self._record(step.node, start, seconds, step.kernel)
                finish(*host, results, start, seconds, None)
                results = None
                collect(block=False)
        if failures:
            (_, k), exc = min(failures, key=lambda failure: failure[0])
            node = steps[k].node
            where = "the host" if lanes[k] == HOST else f"device lane {lanes[k]!r}"
            exc.add_note(f"raised by function {node.name!r} ({node.op}) on {where} while "
                         "the devices ran at once; nothing after it was started")
            raise exc
        return [[np.asarray(on_host(env[k])) for k in self._output_slots] for env in envs]

    def _arguments(self, step: _Step, env: list) -> list:
        """A step's arguments from a run's values (placed where its kernel places
        them, the placed values kept for later readers), as :meth:`execute` makes them."""
        if step.place is None:
            return [a if type(a) is np.ndarray else on_host(a)
                    for a in [env[k] for k in step.reads]]
        args = [None if a is None else step.place(a) for a in [env[k] for k in step.reads]]
        for k, s in step.placed:
            env[s] = args[k]
        return args

    def _device_call(self, step: _Step, args: list, after_device) -> tuple:
        """One device function on its lane's thread: its results, start, seconds and
        what ``after_device`` reports of the call."""
        with np.errstate(all="ignore"):
            start = time.perf_counter()
            results = list(step.call(args))
            seconds = time.perf_counter() - start
        if self.profile is not None:
            self._record(step.node, start, seconds, step.kernel)
        reported = after_device(step.node, step.kernel) if after_device is not None else None
        return results, start, seconds, reported

    def _device_queues(self, plan: LanePlan) -> dict[str, DeviceQueue]:
        """The queue of every device lane of ``plan`` (made once, shared by runs)."""
        if all(lane in self._queues for lane in plan.devices):
            return self._queues
        with self._lock:
            for lane in plan.devices:
                if lane not in self._queues:
                    self._queues[lane] = DeviceQueue(lane)
            return self._queues

    @property
    def runs(self) -> list[NativeRun]:
        """The plan's native runs (:mod:`~heterocc.runtime.native`; made by the first run
        if needed): which consecutive functions :meth:`execute` calls as one."""
        self._plan()
        return [step.call.run for step in self._native_steps if type(step.call) is _RunCall]

    @property
    def lanes(self) -> LanePlan:
        """Where each function of the plan runs (made by the first run if needed)."""
        self._plan()
        return self._lanes

    def _record(self, node: Node, start: float, seconds: float, kernel) -> None:
        with self._lock:
            self._record_now(node, start, seconds, kernel)

    def _record_now(self, node: Node, start: float, seconds: float, kernel) -> None:
        entry = self.profile.get(node.name)
        if entry is None:
            ops = ops_summary([n.attrs.get("composite", n.op) for n in node.body.nodes]) \
                if node.body is not None else node.op
            entry = self.profile[node.name] = ProfileEntry(
                node.name, ops, profile_target(self.placement.get(node.name, "reference"),
                                               kernel))
        entry.calls += 1
        entry.seconds += seconds
        if len(entry.spans) < MAX_SPANS:
            entry.spans.append((start, seconds))
        for counter, value in device_counters(kernel).items():
            entry.extra[counter] = entry.extra.get(counter, 0) + value


def profile_target(placed: str, kernel) -> str:
    """The profile's label of where a node ran: the target it was placed on, or
    ``<target>/numpy`` where that target could not compile it and its kernel is the NumPy
    fallback (``heterocc.sdk.te_target.numpy_kernel``), so that a slow reference never
    passes for the target's code."""
    return f"{placed}/numpy" if getattr(kernel, "numpy_fallback", False) else placed


def ops_summary(names: Sequence[str]) -> str:
    """A function's ops (or a region's composites) for a profile row: joined by ``+``,
    each name once with its count where it repeats (a ResNet region:
    ``conv2d_bias_requantize x19+quantized_add x8+max_pool``), in first-use order."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return "+".join(name if n == 1 else f"{name} x{n}" for name, n in counts.items())


#: what a device kernel may tell about its last call, each an int attribute (all optional):
#: device clock ``cycles``, the bytes the host copied ``in`` and ``out``, and the bytes of
#: constants it ``loaded`` to stay resident on the device (once per loaded model)
DEVICE_KERNEL_COUNTERS = {"cycles": "last_cycles", "bytes_in": "last_bytes_in",
                          "bytes_out": "last_bytes_out", "bytes_loaded": "last_bytes_loaded"}


def device_counters(kernel) -> dict[str, int]:
    """The counters of ``kernel``'s last call, summed over its device kernels: those of
    a region (``kernel.composites``, as ``sdk.build_accelerator_region`` makes) or of the
    kernel itself. A kernel that reports nothing is profiled by wall time alone."""
    parts = list(getattr(kernel, "composites", ())) or ([kernel] if kernel is not None else [])
    counters = {}
    for counter, attribute in DEVICE_KERNEL_COUNTERS.items():
        values = [getattr(part, attribute) for part in parts if hasattr(part, attribute)]
        if values:
            counters[counter] = int(sum(values))
    return counters


def check_graph_memory(graph: Graph) -> None:
    """ResourceError naming the first input or computed tensor of ``graph`` larger than
    the memory budget (``heterocc.runtime.budget``): checked before anything of the run
    is allocated."""
    budget = current_budget()
    for v in graph.inputs:
        check_tensor(v.name, v.type.shape, v.type.np_dtype, "input", budget)
    for node in graph.nodes:
        for v in node.outputs:
            if v.type.nbytes > budget:
                check_tensor(v.name, v.type.shape, v.type.np_dtype,
                             f"tensor (output of {node.op} node {node.name!r})", budget)


@dataclass(frozen=True)
class _RunCall:
    """A plan's step calling a native run (its steps ``steps``)."""

    run: NativeRun
    steps: tuple[_Step, ...]
    initial: list

    def __call__(self, args: list, record: Callable | None = None) -> list:
        """The run's outputs for its inputs ``args``; with ``record`` (a profile's
        ``record(node, start, seconds, kernel)``), the time of each function, timed
        inside the run where its runner can (``native(...).timed``). Where the run
        cannot take ``args`` (an input of another spec or layout), its steps one by
        one, whose kernels' checks then say what is wrong, with a note naming the
        function that raised."""
        if record is None:
            results = self.run.native(args)
            if results is not None:
                return results
        else:
            timed = getattr(self.run.native, "timed", None)
            got = timed(args) if timed is not None else None
            if got is not None:
                results, spans = got
                for step, (start, seconds) in zip(self.steps, spans):
                    record(step.node, start, seconds, step.kernel)
                return results
        env = dict(zip(self.run.reads, args))
        for step in self.steps:
            step_args = [env[s] if s in env else self.initial[s] for s in step.reads]
            start = time.perf_counter()
            try:
                results = step.call(step_args)
            except Exception as exc:
                exc.add_note(f"raised by function {step.node.name!r} ({step.node.op})")
                raise
            if record is not None:
                record(step.node, start, time.perf_counter() - start, step.kernel)
            env.update(zip(step.writes, results))
        return [env[s] for s in self.run.writes]


def _run_op(op, attrs: dict, args: Sequence) -> list[np.ndarray]:
    """A plain op node's NumPy reference on ``args``."""
    return op.run(args, attrs)


def check_input(spec: Value, array) -> np.ndarray:
    """``array`` as an ndarray of ``spec``'s type, or an InputError saying what differs."""
    arr = np.asarray(array)
    if not is_dtype(arr, spec.type.dtype):
        raise InputError(f"input {spec.name!r}: dtype {arr.dtype.name}, the model expects "
                         f"{spec.type.dtype}")
    if tuple(arr.shape) != spec.type.shape:
        raise InputError(f"input {spec.name!r}: shape {tuple(arr.shape)}, the model expects "
                         f"{spec.type.shape}")
    # native byte order and C order (a copy where needed; keeps 0-d arrays 0-d): the
    # kernels read an input's bytes as a contiguous array of native numbers
    return np.require(native_order(arr), requirements="C")


def format_profile(entries: Sequence[ProfileEntry]) -> str:
    """A table of per-node time, slowest first. Device kernels add their cycles per
    call, the bytes each call moved (in and out) and the bytes of constants loaded once
    to stay on the device (``loaded``, over all calls)."""
    rows = sorted(entries, key=lambda e: -e.seconds)
    total = sum(e.seconds for e in rows) or 1.0
    lines = [f"{'node':40s} {'target':10s} {'calls':>5s} {'ms/call':>9s} {'%':>6s} "
             f"{'cycles/call':>12s} {'bytes/call':>11s} {'loaded':>9s}  ops"]
    for e in rows:
        calls = max(e.calls, 1)
        per = e.seconds / calls * 1e3
        cycles = f"{e.extra['cycles'] // calls:12d}" if "cycles" in e.extra else f"{'':12s}"
        moved = e.extra.get("bytes_in", 0) + e.extra.get("bytes_out", 0)
        moved_text = f"{moved // calls:11d}" if {"bytes_in", "bytes_out"} & e.extra.keys() \
            else f"{'':11s}"
        loaded = f"{e.extra['bytes_loaded']:9d}" if "bytes_loaded" in e.extra else f"{'':9s}"
        lines.append(f"{e.node[:40]:40s} {e.target[:10]:10s} {e.calls:5d} {per:9.3f} "
                     f"{100 * e.seconds / total:6.1f} {cycles} {moved_text} {loaded}  "
                     f"{e.op[:60]}")
    return "\n".join(lines)
