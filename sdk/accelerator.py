"""The base of accelerator targets: the :class:`AcceleratorTarget` protocol (tensor
intrinsics, lowering to a schedule, codegen, a device), the composite -> TE -> TIR ->
kernel path (:func:`compile_composite`, :func:`build_accelerator_region`), kernels that
drive a device (:class:`ProgramRunner`, :class:`DeviceKernel`) and regions kept in a
device layout (:class:`LayoutRegion`, :class:`AcceleratorBase`)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from heterocc import te, tir
from heterocc.errors import AcceleratorError, CompileError
from heterocc.ir.graph import Graph, Node, Value
from heterocc.ir.types import TensorType
from heterocc.runtime.executor import GraphExecutor
from heterocc.runtime.interpreter import evaluate
from heterocc.te import TensorIntrin

from .device import (
    Device,
    DeviceCall,
    DeviceTiming,
    asynchronous,
    device_lock,
    holds,
    load_program,
    run_on,
)
from .protocols import Kernel, PartitioningTarget


@dataclass
class Binding:
    """An input of a lowered composite: the TE tensor (a ``te.lower`` parameter) and
    where its contents come from, either ``constant`` (weights, fixed at compile
    time) or the composite's run-time input number ``argument``. ``to_device``
    turns that array into the device layout (padding, packing, casting)."""

    tensor: te.Tensor
    argument: int | None = None
    constant: np.ndarray | None = None
    to_device: Callable[[np.ndarray], np.ndarray] = np.ascontiguousarray
    #: the device layout the input is taken in, a tag (None: converted from the host's
    #: layout on every call); a :class:`LayoutRegion` hands over an output of that layout
    layout: Any = None

    def __post_init__(self):
        if (self.argument is None) == (self.constant is None):
            raise CompileError(f"binding of tensor {self.tensor.name!r}: give exactly one of "
                               "argument= (a run-time input) or constant= (fixed contents)")

    def device_array(self, args: Sequence[np.ndarray]) -> np.ndarray:
        """This input's contents for one call with run-time inputs ``args``."""
        source = self.constant if self.argument is None else args[self.argument]
        return self.to_device(source)


@dataclass
class Result:
    """An output of a lowered composite: the TE tensor the device computes and
    ``from_device``, which turns its contents back into the graph's output (cropping
    padding, casting to the output dtype)."""

    tensor: te.Tensor
    from_device: Callable[[np.ndarray], np.ndarray] = np.ascontiguousarray
    #: the device layout the output is produced in (see :attr:`Binding.layout`)
    layout: Any = None


@dataclass
class Lowering:
    """A composite expressed in TE and scheduled for the target: what
    :meth:`AcceleratorTarget.lower` returns and :func:`compile_composite` turns
    into TIR (``te.lower(schedule, inputs + outputs)``).

    ``metadata`` is the channel from lowering to codegen: whatever the lowering
    decided that the TIR does not say (the memory each tensor lives in, a layout, a
    tiling), handed to :meth:`AcceleratorTarget.codegen` with the lowered function
    (read it there with :func:`lowering_metadata`)."""

    schedule: te.Schedule
    inputs: list[Binding]
    outputs: list[Result]
    metadata: dict[str, Any] = field(default_factory=dict)


#: the PrimFunc attribute holding a Lowering's metadata
METADATA_ATTR = "sdk.metadata"


def lowering_metadata(func: tir.PrimFunc) -> dict[str, Any]:
    """What the lowering of ``func`` passed to codegen (:attr:`Lowering.metadata`; empty
    for a function lowered without any)."""
    return func.attrs.get(METADATA_ATTR, {})


@dataclass
class CompositeParts:
    """A composite function node taken apart: ``name`` is its pattern row,
    ``nodes`` the ops inside in order, ``inputs`` / ``output_types`` its signature."""

    function: Node
    name: str
    nodes: list[Node]
    inputs: list[Value]
    output_types: list[TensorType]

    def node(self, op: str) -> Node | None:
        """The first node applying ``op``, or None (optional ops of a pattern)."""
        return next((n for n in self.nodes if n.op == op), None)

    def require(self, op: str) -> Node:
        """The first node applying ``op``; CompileError when the composite has none."""
        found = self.node(op)
        if found is None:
            raise CompileError(f"composite {self.function.name!r} ({self.name}) has no {op} "
                               f"node; it holds {', '.join(n.op for n in self.nodes)}")
        return found

    def constant(self, node: Node, index: int) -> np.ndarray:
        """The constant input ``index`` of ``node``; CompileError when it is not one."""
        value = node.inputs[index] if index < len(node.inputs) else None
        if value is None or not value.is_const:
            raise CompileError(f"{node.op} node {node.name!r} in composite "
                               f"{self.function.name!r}: input {index} must be a constant")
        return value.data

    def argument_index(self, value: Value) -> int:
        """Position of ``value`` among the composite's run-time inputs."""
        for k, candidate in enumerate(self.inputs):
            if candidate is value:
                return k
        raise CompileError(f"value {value.name!r} is not an input of composite "
                           f"{self.function.name!r}")


@runtime_checkable
class AcceleratorTarget(PartitioningTarget, Protocol):
    """The hooks of an accelerator built the SDK's way. With them, ``build`` is one
    line: ``return build_accelerator_region(self, function)``.

    The factory registered for the target (its class, usually) takes the
    target's options as keyword arguments: ``get_target(name, **options)``.
    """

    def options(self) -> dict[str, Any]:
        """The settings this instance was made with (JSON-friendly), for reports."""
        ...

    def tensor_intrinsics(self) -> list[TensorIntrin]:
        """The hardware instructions as TE tensor intrinsics (what ``lower`` tensorizes
        with), for tools and schedule templates."""
        ...

    def lower(self, parts: CompositeParts) -> Lowering:
        """A composite as a TE compute plus its schedule, and where each tensor's data
        comes from."""
        ...

    def codegen(self, func: tir.PrimFunc) -> Any:
        """The lowered TIR as the device's program."""
        ...

    def device(self) -> Device:
        """Where this target's programs run."""
        ...


# --------------------------------------------------------------------------- helpers


def composite_parts(function: Node) -> CompositeParts:
    """Take a composite function node (what the partitioner makes of one pattern
    match) apart; CompileError when ``function`` is not one."""
    if function.body is None or "composite" not in function.attrs:
        raise CompileError(f"node {function.name!r} ({function.op}) is not a composite "
                           "function; build_accelerator_region hands composites to lower()")
    body = function.body
    return CompositeParts(function, function.attrs["composite"], list(body.nodes),
                          list(body.inputs), [v.type for v in body.outputs])


def reference_outputs(function: Node, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """What ``function`` computes on ``args`` according to the ops' NumPy
    references: the oracle a target's kernel must match."""
    if function.body is None:
        raise CompileError(f"node {function.name!r} ({function.op}) has no body to evaluate")
    return evaluate(function.body, list(args))


class ProgramRunner:
    """Runs one program on a device, the step every device kernel shares: load the
    program, write its buffers (constants only where the device does not keep them,
    see :class:`ResidentDevice`), submit it and wait for it (:func:`run_on`: the
    device's :class:`AsyncDevice` form, or its ``run`` wrapped), read its results;
    counts calls, cycles and bytes. A kernel class mixes it in and holds ``program``
    and ``device`` and the counters (:class:`DeviceKernel` shows them)."""

    program: Any
    device: Device
    calls: int
    cycles: int
    last_timing: DeviceTiming | None
    last_bytes_in: int
    last_bytes_out: int
    last_bytes_loaded: int

    def run_program(self, writes: Sequence[tuple[str, Callable[[], np.ndarray], bool]],
                    reads: Sequence[str], program: Any = None) -> list[np.ndarray]:
        """Write each ``(buffer, contents, constant)`` (``contents()`` gives the array;
        a ``constant`` one is skipped while the device holds it), run, and read the
        ``reads`` buffers, all under the device's lock (:func:`device_lock`): calls
        from several threads take the device in turn, each reading its own results.
        ``program``: another form of the kernel's program to run (e.g. one whose
        tensors a region keeps in the device's memory); by default ``self.program``."""
        with device_lock(self.device):
            return self._run_program(writes, reads,
                                     self.program if program is None else program)

    def _run_program(self, writes: Sequence[tuple[str, Callable[[], np.ndarray], bool]],
                     reads: Sequence[str], program: Any) -> list[np.ndarray]:
        self.last_bytes_in = self.last_bytes_loaded = 0
        load_program(self.device, program)
        for name, contents, constant in writes:
            if constant and holds(self.device, program, name):
                continue
            array = contents()
            self.device.copy_in(program, name, array)
            if constant and holds(self.device, program, name):
                self.last_bytes_loaded += np.asarray(array).nbytes
            else:
                self.last_bytes_in += np.asarray(array).nbytes
        self.last_timing = run_on(self.device, program)
        self.calls += 1
        self.cycles += self.last_timing.cycles
        copied = [self.device.copy_out(program, name) for name in reads]
        self.last_bytes_out = sum(np.asarray(array).nbytes for array in copied)
        return copied

    @property
    def last_cycles(self) -> int:
        """Device cycles of the last call (0 before the first): what the executor's
        profile shows for a device kernel (see ``DEVICE_KERNEL_COUNTERS``)."""
        return self.last_timing.cycles if self.last_timing is not None else 0


@dataclass
class DeviceKernel(ProgramRunner):
    """One composite compiled for a device: calling it writes the inputs, runs the
    program and reads the outputs back (:class:`ProgramRunner`). Counts calls and
    device cycles.

    Constants (weights, biases: the :class:`Binding` s with ``constant=``) are
    written once per loaded model when the device keeps them (:class:`ResidentDevice`),
    and on every call otherwise; ``last_bytes_in`` counts only what the last call
    wrote, ``last_bytes_loaded`` what it wrote to make constants resident (nonzero on
    the first call, and again after a device ``reset``). ``function`` is the composite
    the kernel computes (its NumPy reference is the oracle of ``heterocc hil``)."""

    name: str
    program: Any
    device: Device
    inputs: list[Binding]
    outputs: list[Result]
    calls: int = 0
    cycles: int = 0
    last_timing: DeviceTiming | None = None
    function: Node | None = None

    #: bytes copied to and from the device by the last call
    last_bytes_in: int = 0
    last_bytes_out: int = 0
    #: bytes of constants the last call wrote to stay resident on the device
    last_bytes_loaded: int = 0

    def __call__(self, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        writes = [(b.tensor.name, functools.partial(b.device_array, args),
                   b.constant is not None) for b in self.inputs]
        copied = self.run_program(writes, [r.tensor.name for r in self.outputs])
        return [result.from_device(array) for result, array in zip(self.outputs, copied)]

    # -- the LayoutKernel protocol: a LayoutRegion keeps tensors in their device layout

    def _binding(self, position: int) -> Binding:
        found = [b for b in self.inputs if b.argument == position]
        if len(found) != 1:
            raise CompileError(f"kernel {self.name!r}: input {position} has {len(found)} "
                               "bindings; a layout region needs exactly one per input")
        return found[0]

    def input_layout(self, position: int) -> Any:
        return self._binding(position).layout

    def output_layout(self, index: int) -> Any:
        return self.outputs[index].layout

    def takes(self, position: int, array: np.ndarray) -> bool:
        return tuple(np.shape(array)) == tuple(self._binding(position).tensor.shape)

    def input_to_device(self, position: int, array: np.ndarray) -> np.ndarray:
        return self._binding(position).to_device(array)

    def output_to_host(self, index: int, array: np.ndarray) -> np.ndarray:
        return self.outputs[index].from_device(array)

    def run_on_device(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """Run on the inputs already in the device layout (constants as on a call)."""
        writes = []
        for b in self.inputs:
            if b.argument is None:
                writes.append((b.tensor.name, functools.partial(b.device_array, ()), True))
            else:
                writes.append((b.tensor.name, functools.partial(np.asarray,
                                                                arrays[b.argument]), False))
        return self.run_program(writes, [r.tensor.name for r in self.outputs])


@dataclass
class MirroredDevice:
    """Hardware in the loop for any target: every program runs on ``device`` (a board,
    an RTL simulation) and on ``reference`` (the simulator); each ``copy_out``
    compares the two and raises AcceleratorError at the first differing element.
    Timings are ``device``'s; ``reference_timing`` keeps the simulator's. It is an
    :class:`AsyncDevice`: a submitted program runs on both sides at once."""

    device: Device
    reference: Device
    name: str = "mirrored"
    reference_timing: DeviceTiming | None = None
    _reference_call: DeviceCall | None = field(default=None, repr=False)

    def load(self, program: Any) -> None:
        load_program(self.device, program)
        load_program(self.reference, program)

    def resident(self, program: Any, buffer: str) -> bool:
        """Resident only where both sides keep the buffer (else both are written)."""
        return holds(self.device, program, buffer) and holds(self.reference, program, buffer)

    def reset(self) -> None:
        for side in (self.device, self.reference):
            reset = getattr(side, "reset", None)
            if callable(reset):
                reset()

    def copy_in(self, program: Any, buffer: str, array: np.ndarray) -> None:
        self.device.copy_in(program, buffer, array)
        self.reference.copy_in(program, buffer, array)

    def run(self, program: Any) -> DeviceTiming:
        return self.wait(self.submit(program))

    def submit(self, program: Any) -> DeviceCall:
        """Start ``program`` on both sides: the device's run and the simulator's go on
        at once (each side's :class:`AsyncDevice` form, see :func:`asynchronous`)."""
        call = asynchronous(self.device).submit(program)
        self._reference_call = asynchronous(self.reference).submit(program)
        return call

    def wait(self, call: DeviceCall, timeout_s: float | None = None) -> DeviceTiming:
        """Both runs' end; the device's timing (the simulator's in
        ``reference_timing``)."""
        reference, self._reference_call = self._reference_call, None
        if reference is not None:
            self.reference_timing = asynchronous(self.reference).wait(reference, timeout_s)
        return asynchronous(self.device).wait(call, timeout_s)

    def copy_out(self, program: Any, buffer: str) -> np.ndarray:
        got = np.asarray(self.device.copy_out(program, buffer))
        expected = np.asarray(self.reference.copy_out(program, buffer))
        if got.shape != expected.shape or got.dtype != expected.dtype:
            raise AcceleratorError(f"buffer {buffer!r}: {self.device.name} returned "
                                   f"{got.dtype}{list(got.shape)}, {self.reference.name} "
                                   f"{expected.dtype}{list(expected.shape)}")
        differing = np.argwhere(got != expected)
        if len(differing):
            first = tuple(int(i) for i in differing[0])
            raise AcceleratorError(
                f"buffer {buffer!r} differs at {len(differing)} of {got.size} elements; first "
                f"at index {first}: {self.device.name} {got[first]}, "
                f"{self.reference.name} {expected[first]}")
        return got


def compile_composite(target: AcceleratorTarget, function: Node) -> DeviceKernel:
    """Composite -> ``target.lower`` -> ``te.lower`` -> ``target.codegen`` -> a kernel
    on ``target.device()``."""
    lowering = target.lower(composite_parts(function))
    tensors = [b.tensor for b in lowering.inputs] + [r.tensor for r in lowering.outputs]
    names = [t.name for t in tensors]
    if len(set(names)) != len(names):
        raise CompileError(f"{target.name}: composite {function.name!r} lowers to tensors with "
                           f"repeated names {names}; device buffers are named by them")
    func = te.lower(lowering.schedule, tensors, name=function.name)
    func.attrs[METADATA_ATTR] = dict(lowering.metadata)
    program = target.codegen(func)
    return DeviceKernel(function.name, program, target.device(), lowering.inputs,
                        lowering.outputs, function=function)


def build_accelerator_region(target: AcceleratorTarget, function: Node,
                             compile_layer: Callable[[Node], Kernel] | None = None,
                             region: Callable[[Graph, dict[str, Kernel]], Kernel] | None = None
                             ) -> Kernel:
    """``Target.build`` for an accelerator: every composite of the region (or the
    single composite given) becomes a kernel, by default a :class:`DeviceKernel`
    (:func:`compile_composite`, or ``compile_layer``); the returned kernel runs them,
    by default in graph order with host arrays between them (or as ``region(body,
    kernels)`` runs them, e.g. keeping tensors in the device's layout). Its
    ``composites`` lists them (for cycle reports and ``heterocc hil``) and ``region``
    is the runner; a composite kernel with a ``metrics()`` method (a dict such as
    ``cycles``, ``utilization``, ``host_bytes``) has it shown in the placement report.
    :class:`AcceleratorBase` calls it with its own hooks."""
    if compile_layer is None:
        def compile_layer(node: Node) -> Kernel:
            return compile_composite(target, node)
    if "composite" in function.attrs:
        kernel = compile_layer(function)
        composites = [kernel]
        run = kernel
    else:
        compiled = {node.name: compile_layer(node) for node in function.body.nodes}
        composites = list(compiled.values())
        if region is None:
            run = GraphExecutor(function.body, compiled,
                                {n: target.name for n in compiled}).execute
        else:
            run = region(function.body, compiled)

    def run_region(args: Sequence[np.ndarray]) -> list[np.ndarray]:
        return run(args)

    run_region.composites = composites
    run_region.region = run
    return run_region


@runtime_checkable
class LayoutKernel(Protocol):
    """A layer kernel whose tensors may stay in a device layout from one layer of a
    region to the next (:class:`LayoutRegion`): the host converts a tensor only where it
    enters or leaves the region or meets a layer that wants another layout.

    A layout is any hashable tag (None: the host's own layout, never handed over)."""

    def input_layout(self, position: int) -> Any:
        """The device layout input ``position`` is taken in, or None."""
        ...

    def output_layout(self, index: int) -> Any:
        """The device layout output ``index`` is produced in, or None."""
        ...

    def takes(self, position: int, array: np.ndarray) -> bool:
        """Whether ``array``, produced in this input's layout, fits input ``position``
        as it is (its extents, padding included, are the ones this program reads)."""
        ...

    def input_to_device(self, position: int, array: np.ndarray) -> np.ndarray:
        """Input ``position`` from the host's layout into the device's."""
        ...

    def output_to_host(self, index: int, array: np.ndarray) -> np.ndarray:
        """Output ``index`` from the device's layout back to the host's."""
        ...

    def run_on_device(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        """Run on the inputs in the device layout; the outputs in the device layout."""
        ...


class LayoutRegion:
    """Runs the layers of a region (``kernels``, :class:`LayoutKernel` s by composite
    name, in ``body``'s order) keeping tensors in their device layout between layers
    whose layouts agree; counts the tensors handed over as they are (``handed_over``)
    and those converted (``converted``) on the last run."""

    def __init__(self, body: Graph, kernels: dict[str, LayoutKernel]):
        self.body = body
        self.kernels = kernels
        self.producer = {v: (kernels[node.name], k) for node in body.nodes
                         for k, v in enumerate(node.outputs)}
        self.handed_over = 0
        self.converted = 0

    def _host(self, value: Value, host: dict, device: dict) -> np.ndarray:
        if value.is_const:
            return value.data
        if value not in host:
            kernel, index = self.producer[value]
            host[value] = kernel.output_to_host(index, device[value])
        return host[value]

    def _input(self, kernel: LayoutKernel, position: int, value: Value, host: dict,
               device: dict) -> np.ndarray:
        layout = kernel.input_layout(position)
        if layout is not None and value in device:
            producer, index = self.producer[value]
            if producer.output_layout(index) == layout and kernel.takes(position,
                                                                         device[value]):
                self.handed_over += 1
                return device[value]
        self.converted += 1
        return kernel.input_to_device(position, self._host(value, host, device))

    def __call__(self, args: Sequence[np.ndarray]) -> list[np.ndarray]:
        host: dict[Value, np.ndarray] = dict(zip(self.body.inputs, args))
        device: dict[Value, np.ndarray] = {}
        self.handed_over = self.converted = 0
        for node in self.body.nodes:
            kernel = self.kernels[node.name]
            arrays = [self._input(kernel, position, value, host, device)
                      for position, value in enumerate(node.inputs)]
            device.update(zip(node.outputs, kernel.run_on_device(arrays)))
        return [self._host(value, host, device) for value in self.body.outputs]


class AcceleratorBase:
    """The base class of accelerator targets (the in-tree ``vta`` derives from it).

    A subclass sets ``name`` and supplies ``pattern_table`` and ``options``, and then
    either the hooks of :class:`AcceleratorTarget` (``tensor_intrinsics``, ``lower``,
    ``codegen``, ``device``: each composite goes composite -> TE -> TIR -> program ->
    :class:`DeviceKernel`) or its own :meth:`compile_layer`. It may replace
    :meth:`region` to run a region's layers its own way (``vta`` hands tensors from
    layer to layer in its blocked layout). :meth:`build` is written once, here."""

    name: str

    def compile_layer(self, function: Node) -> Kernel:
        """One composite function as a kernel; by default :func:`compile_composite`."""
        return compile_composite(self, function)

    def region(self, body: Graph, kernels: dict[str, Kernel]) -> Kernel:
        """The runner of a region's layers (``kernels`` by composite name, ``body`` the
        region's graph); by default in graph order with host arrays between them."""
        return GraphExecutor(body, kernels, {n: self.name for n in kernels}).execute

    def build(self, function: Node) -> Kernel:
        """The kernel of a region (or of one composite): see
        :func:`build_accelerator_region`."""
        return build_accelerator_region(self, function, self.compile_layer, self.region)

