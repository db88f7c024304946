"""The graph executor: runs a fused graph's function nodes with their kernels."""

from __future__ import annotations

import abc
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from ..ir.graph import Graph, Node, Value
from ..ops import get_op
from .memory import MemoryPlan, plan_memory

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


@dataclass
class GraphExecutor:
    """Runs ``graph`` node by node.

    Function nodes run their kernel from ``kernels`` (by node name); plain op
    nodes (graphs run without fusion) run on the NumPy reference.
    ``set_input`` / ``run`` / ``get_output`` as in TVM's graph executor.
    """

    graph: Graph
    kernels: Mapping[str, Kernel]
    placement: Mapping[str, str] = field(default_factory=dict)
    profile: dict[str, ProfileEntry] | None = None
    _inputs: dict[str, np.ndarray] = field(default_factory=dict)
    _outputs: list[np.ndarray] = field(default_factory=list)
    memory: MemoryPlan | None = None

    def __post_init__(self):
        if self.memory is None:
            self.memory = plan_memory(self.graph)
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

    def execute(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Outputs for positional inputs already checked against the graph's inputs."""
        env: dict[Value, np.ndarray] = dict(zip(self.graph.inputs, inputs))

        def read(v: Value | None):
            if v is None:
                return None
            return v.data if v.is_const else env[v]

        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            for index, node in enumerate(self.graph.nodes):
                kernel = self.kernels[node.name] if node.body is not None else None
                place = getattr(kernel, "place", None)
                if place is None:
                    args = [on_host(read(v)) for v in node.inputs]
                else:
                    args = [None if v is None else place(read(v)) for v in node.inputs]
                    env.update((v, a) for v, a in zip(node.inputs, args)
                               if v is not None and not v.is_const)
                t0 = time.perf_counter() if self.profile is not None else 0.0
                results = kernel(args) if kernel is not None else \
                    get_op(node.op).run(args, node.attrs)
                if self.profile is not None:
                    self._record(node, time.perf_counter() - t0, kernel)
                del args
                for v, r in zip(node.outputs, results):
                    env[v] = r
                for v in self._dead_after.get(index, ()):
                    env.pop(v, None)
        return [np.asarray(on_host(read(v))) for v in self.graph.outputs]

    def _record(self, node: Node, seconds: float, kernel) -> None:
        entry = self.profile.get(node.name)
        if entry is None:
            ops = "+".join(n.attrs.get("composite", n.op) for n in node.body.nodes) \
                if node.body is not None else node.op
            entry = self.profile[node.name] = ProfileEntry(
                node.name, ops, self.placement.get(node.name, "reference"))
        entry.calls += 1
        entry.seconds += seconds
        for counter, value in device_counters(kernel).items():
            entry.extra[counter] = entry.extra.get(counter, 0) + value


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


def check_input(spec: Value, array) -> np.ndarray:
    """``array`` as an ndarray of ``spec``'s type, or an InputError saying what differs."""
    arr = np.asarray(array)
    if arr.dtype.name != spec.type.dtype:
        raise InputError(f"input {spec.name!r}: dtype {arr.dtype.name}, the model expects "
                         f"{spec.type.dtype}")
    if tuple(arr.shape) != spec.type.shape:
        raise InputError(f"input {spec.name!r}: shape {tuple(arr.shape)}, the model expects "
                         f"{spec.type.shape}")
    return np.require(arr, requirements="C")  # keeps 0-d arrays 0-d


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
