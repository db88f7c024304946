"""Hardware-in-the-loop for whole networks: a compiled model run with every accelerator
function on the RTL, the DRAM the RTL wrote for one layer carried to the next, each layer
compared bit for bit with the simulator and its output with the integer reference, and
its cycles with the timing model.

    heterocc hil MODEL.onnx [--device rtl] [--simulator verilator|icarus]

The model runs once on the accelerator simulator (with the CPU's NumPy reference taking
the rest): its outputs are what the RTL run must give. It then runs again with its
accelerator kernels on :class:`CarriedRtlDevice`, one HDL simulator process built once
and kept running (``RtlSimulator.session``): each call's DRAM image (its weights, and
its inputs as the RTL and the host's steps between regions left them) runs on the RTL
and, on a copy, on the simulator; the RTL's DRAM then stays on the device, so the next
layer reads what the RTL wrote. Every layer's RTL DRAM is checked against the
simulator's on the same image and its output tensor against the composite's NumPy
reference on the model's reference activations; the model's outputs against the
simulator-run model's and the reference's. A wrong byte from layer i thus shows in
layer i's comparisons, and in layer i+1's reference comparison. Progress is logged as
each layer ends (``heterocc.hil``), and :meth:`NetworkHilReport.table` summarizes per
layer and in total.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from dataclasses import dataclass, field, replace

import numpy as np
import onnx

from heterocc.accel_sim.encoding import format_instruction
from heterocc.accel_sim.hil import (
    StreamComparison,
    find_first_divergence,
    model_timing,
    simulate,
)
from heterocc.accel_sim.program import read_tensor
from heterocc.accel_sim.rtl_device import BENCH_MEMORY, BenchMemory, RtlRun, RtlSimulator
from heterocc.accel_sim.timing import schedule_stream
from heterocc.sdk import DeviceTiming, InputError
from heterocc.sdk.hil import first_difference, reference_trace
from heterocc.sdk.runtime import compile_model, load_input_files, load_model

from . import VtaTarget
from .codegen import AcceleratorKernel
from .device import VtaDevice
from .streams import unwritten_output

_log = logging.getLogger("heterocc.hil")


@dataclass(frozen=True)
class LayerRun:
    """One accelerator function on the RTL: the stream's comparison with the simulator
    (DRAM, cycles, wall time) and whether its output tensor equals the integer
    reference's (``reference_detail`` says where not)."""

    comparison: StreamComparison
    reference_matches: bool
    reference_detail: str = ""

    @property
    def matches(self) -> bool:
        """Bit-exact with the simulator and with the reference."""
        return self.comparison.matches and self.reference_matches


@dataclass
class NetworkHilReport:
    """A whole network's accelerator functions on the RTL (:func:`network_hil`)."""

    model: str
    simulator: str
    layers: list[LayerRun] = field(default_factory=list)
    #: the model's outputs (run on the RTL, DRAM carried) equal the reference's
    outputs_match: bool = True
    #: wall seconds of each phase: compile, simulator, build, rtl
    seconds: dict[str, float] = field(default_factory=dict)
    #: ... and equal the outputs of the model run on the accelerator simulator
    outputs_match_simulator: bool = True

    @property
    def agrees(self) -> bool:
        """Every layer bit-exact with the simulator and the reference, and the outputs."""
        return (self.outputs_match and self.outputs_match_simulator
                and all(layer.matches for layer in self.layers))

    @property
    def rtl_cycles(self) -> int:
        return sum(layer.comparison.rtl_cycles for layer in self.layers)

    @property
    def model_cycles(self) -> int:
        return sum(layer.comparison.model_cycles for layer in self.layers)

    @property
    def deviation(self) -> float:
        """(RTL - model) / model cycles over the whole network."""
        return self.rtl_cycles / self.model_cycles - 1 if self.model_cycles else float("nan")

    @property
    def max_deviation(self) -> float:
        """The largest |deviation| of one layer."""
        return max((abs(layer.comparison.deviation) for layer in self.layers), default=0.0)

    @property
    def simulated_cycles(self) -> int:
        return sum(layer.comparison.simulated_cycles for layer in self.layers)

    @property
    def rtl_wall_seconds(self) -> float:
        """Seconds the HDL simulator spent running the streams (start to irq)."""
        return sum(layer.comparison.wall_seconds for layer in self.layers)

    def table(self) -> str:
        """Per layer: cycles on the RTL and in the timing model, their deviation, the
        wall time and simulated cycles/s, the verdicts; then the totals."""
        rows = [("#", "function", "instr", "RTL cycles", "model cycles", "dev %", "wall s",
                 "cycles/s", "simulator", "reference")]
        for index, layer in enumerate(self.layers, 1):
            c = layer.comparison
            rows.append((str(index), c.name, str(c.instructions), str(c.rtl_cycles),
                         str(c.model_cycles), f"{100 * c.deviation:+.2f}",
                         f"{c.wall_seconds:.2f}", f"{c.cycles_per_second:,.0f}",
                         "agrees" if c.matches else "DIFFERS",
                         "agrees" if layer.reference_matches else "DIFFERS"))
        rate = self.simulated_cycles / self.rtl_wall_seconds if self.rtl_wall_seconds else 0
        rows.append(("", "total", str(sum(layer.comparison.instructions
                                          for layer in self.layers)),
                     str(self.rtl_cycles), str(self.model_cycles),
                     f"{100 * self.deviation:+.2f}", f"{self.rtl_wall_seconds:.2f}",
                     f"{rate:,.0f}",
                     f"{sum(layer.comparison.matches for layer in self.layers)}/{len(self.layers)}",
                     f"{sum(layer.reference_matches for layer in self.layers)}/"
                     f"{len(self.layers)}"))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(cell.ljust(w) if i == 1 else cell.rjust(w)
                           for i, (cell, w) in enumerate(zip(row, widths))) for row in rows]
        lines.insert(1, "-" * len(lines[0]))
        lines.insert(len(lines) - 1, "-" * len(lines[0]))
        for layer in self.layers:
            c = layer.comparison
            if c.first_divergence is not None:
                lines.append(f"{c.name}: first differing instruction {c.first_divergence}: "
                             f"{c.divergence_detail}")
            if not layer.reference_matches:
                lines.append(f"{c.name}: the reference: {layer.reference_detail}")
        phases = ", ".join(f"{name} {s:.1f} s" for name, s in self.seconds.items())
        outputs = " and ".join(
            f"{'agree with' if same else 'DIFFER from'} {what}"
            for same, what in ((self.outputs_match_simulator, "the simulator's"),
                               (self.outputs_match, "the reference")))
        lines.append(f"{self.model} on the {self.simulator} RTL, DRAM carried: "
                     f"{sum(layer.matches for layer in self.layers)}/{len(self.layers)} "
                     f"accelerator functions agree with the simulator and the reference; "
                     f"the model's outputs {outputs}; largest layer deviation "
                     f"{100 * self.max_deviation:.2f}%; {phases}")
        return "\n".join(lines)


def _compiled_on_simulator(model, inputs, calibration_samples: int, seed: int):
    """The model compiled for the simulated accelerator (a float model quantized with
    seeded random calibration samples; a QDQ model as it is), its target and inputs
    (by default seeded standard-normal ones)."""
    proto = load_model(model)
    rng = np.random.default_rng(seed)
    if inputs is None:
        specs = _graph_inputs(proto)
        inputs = {name: rng.standard_normal(shape).astype(dtype)
                  for name, shape, dtype in specs}
    else:  # calibration samples of the given inputs' shapes
        specs = [(name, np.shape(array), np.asarray(array).dtype)
                 for name, array in inputs.items()]
    calibration = None
    if not any(n.op_type in ("QuantizeLinear", "QLinearConv") for n in proto.graph.node):
        calibration = [{name: rng.standard_normal(shape).astype(dtype)
                        for name, shape, dtype in specs} for _ in range(calibration_samples)]
    target = VtaTarget()
    compiled = compile_model(proto, target=[target, "reference"], calibration=calibration)
    return compiled, target, inputs


def _graph_inputs(proto) -> list[tuple[str, tuple[int, ...], np.dtype]]:
    """The model's inputs (not its initializers): name, static shape, dtype."""
    constants = {tensor.name for tensor in proto.graph.initializer}
    specs = []
    for value in proto.graph.input:
        if value.name in constants:
            continue
        tensor_type = value.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else -1
                      for d in tensor_type.shape.dim)
        if any(d <= 0 for d in shape):
            raise InputError(f"input {value.name!r} has no static shape ({shape}); the RTL "
                             "run needs one: give the inputs")
        specs.append((value.name, shape,
                      onnx.helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)))
    return specs


def _reference_check(kernel: AcceleratorKernel, dram: np.ndarray | None,
                     trace: dict) -> tuple[bool, str]:
    """The kernel's output tensor in the RTL's DRAM against the reference's output."""
    if dram is None:
        return False, "the RTL left no DRAM"
    if kernel.name not in trace:
        raise InputError(f"accelerator function {kernel.name!r} has no reference trace")
    matrix = read_tensor(kernel.config, kernel.program.tensors[kernel.output_tensor], dram)
    expected = trace[kernel.name][1][0]
    detail = first_difference(kernel.from_device(matrix), expected, "output")
    return detail is None, detail or ""


class CarriedRtlDevice(VtaDevice):
    """The simulated accelerator whose every run also runs on the RTL (one
    :class:`RtlSession`), the RTL's DRAM then taking the simulator's place: the output a
    kernel reads back, and so the next layer's input, is what the RTL wrote. Each run is
    judged as it ends: the RTL's DRAM against the simulator's on the same image (output
    tensor poisoned first, ``UNWRITTEN``), its output tensor against the reference's, its
    cycles against the timing model (``progress`` gets each :class:`StreamComparison`)."""

    #: each layer runs on the RTL on its own program's image (its tensors in it)
    shares_tensors = False

    def __init__(self, config, kernels, session, timing, trace,
                 progress=None):
        super().__init__(config, name="vta-rtl-carried")
        self.session = session
        self.timing_config = timing
        self.trace = trace
        self.progress = progress
        self.kernels = {id(k.program): k for k in kernels}
        self.layers: list[LayerRun] = []
        #: (kernel, image) of the layers that differ, for locating their divergence
        self.differing: list[tuple[AcceleratorKernel, np.ndarray]] = []
        self._simulator = concurrent.futures.ThreadPoolExecutor(1, "simulator")

    def _simulate(self, entry) -> DeviceTiming:
        kernel = self.kernels[id(entry.program)]
        span = slice(entry.base, entry.base + entry.program.dram.size)
        image = unwritten_output(kernel, self.driver.dram[span].copy())
        instructions = kernel.program.instructions
        # the simulator's side runs here while the HDL simulator runs the same image
        simulated = self._simulator.submit(simulate, instructions, self.timing_config, image)
        budget = kernel.timing.total_cycles if kernel.timing is not None else schedule_stream(
            instructions, self.timing_config).total_cycles
        result = self.session.run(RtlRun.for_stream(image, instructions, self.config,
                                                    max_cycles=20 * budget + 10_000))
        expected, model_cycles = simulated.result()
        size = entry.program.dram.size
        comparison = StreamComparison(
            kernel.name, len(instructions),
            result.done and np.array_equal(result.dram[:size], expected),
            result.cycles, model_cycles, simulated_cycles=result.simulated_cycles,
            wall_seconds=result.wall_seconds)
        ok, detail = _reference_check(kernel, result.dram, self.trace)
        self.layers.append(LayerRun(comparison, ok, detail))
        if not comparison.matches:
            self.differing.append((kernel, image))
        if self.progress is not None:
            self.progress(len(self.layers) - 1, comparison)
        # carried: what the RTL wrote is the device's DRAM from here on
        self.driver.dram[span] = result.dram[:size]
        return self._timing(None, result.cycles)

    def close(self) -> None:
        self._simulator.shutdown()


def network_hil(model, inputs: dict | None = None, simulator: str = "verilator",
                build_root=None, calibration_samples: int = 4, seed: int = 0,
                memory: BenchMemory = BENCH_MEMORY, name: str | None = None,
                locate: bool = True) -> NetworkHilReport:
    """Run ``model`` with its accelerator functions on the RTL, DRAM carried from layer to
    layer (see the module docstring), and report each against the simulator, the
    reference and the timing model. ``inputs`` by name default to seeded standard-normal
    ones. ``locate``: bisect each differing layer to its first differing instruction."""
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    compiled, target, inputs = _compiled_on_simulator(model, inputs, calibration_samples, seed)
    seconds["compile"] = time.perf_counter() - started

    started = time.perf_counter()
    named = {spec.name: np.asarray(inputs[spec.name]) for spec in compiled.inputs}
    simulated_outputs = [np.asarray(o) for o in compiled.run(named)]
    count = sum(k.last_input is not None for k in target.kernels)
    if not count:
        raise InputError("the accelerator took no part of the model; nothing to run on "
                         "the RTL (see heterocc partition for why)")
    expected, trace = reference_trace(compiled.graph,
                                      [named[v.name] for v in compiled.graph.inputs])
    seconds["simulator"] = time.perf_counter() - started

    rtl = RtlSimulator(target.config, simulator, build_root, memory)
    started = time.perf_counter()
    rtl.build()
    seconds["build"] = time.perf_counter() - started
    _log.info(f"running the model with its {count} accelerator functions on the {simulator} "
              "RTL, each layer's DRAM as the RTL left it for the next")

    def progress(index: int, comparison: StreamComparison) -> None:
        verdict = "agrees" if comparison.matches else "DIFFERS"
        _log.info(f"layer {index + 1}/{count} {comparison.name}: {comparison.rtl_cycles} "
                  f"cycles (model {comparison.model_cycles}, "
                  f"{100 * comparison.deviation:+.2f}%), {comparison.wall_seconds:.2f} s, "
                  f"{comparison.cycles_per_second:,.0f} cycles/s; DRAM {verdict}")

    started = time.perf_counter()
    with rtl.session() as session:
        device = CarriedRtlDevice(target.config, target.kernels, session,
                                  model_timing(target.config, rtl), trace, progress)
        try:
            for kernel in target.kernels:
                kernel.device = device
            carried_outputs = [np.asarray(o) for o in compiled.run(named)]
        finally:
            device.close()
    seconds["rtl"] = time.perf_counter() - started
    layers = device.layers
    if locate:
        for kernel, image in device.differing:
            index = next(i for i, layer in enumerate(layers)
                         if layer.comparison.name == kernel.name)
            instructions = kernel.program.instructions
            first = find_first_divergence(instructions, target.config, image, rtl)
            layers[index] = replace(layers[index], comparison=replace(
                layers[index].comparison, first_divergence=first,
                divergence_detail=format_instruction(instructions[first])))
    outputs_match = all(first_difference(g, e, "output") is None
                        for g, e in zip(carried_outputs, expected))
    outputs_match_simulator = all(first_difference(g, e, "output") is None
                                  for g, e in zip(carried_outputs, simulated_outputs))
    label = name or (model if isinstance(model, str) else getattr(
        getattr(model, "graph", None), "name", "") or "model")
    return NetworkHilReport(str(label), simulator, layers, outputs_match, seconds,
                            outputs_match_simulator)


def model_hil(model, inputs: dict | None = None, simulator: str = "verilator",
              build_root=None, calibration_samples: int = 4,
              seed: int = 0, memory: BenchMemory = BENCH_MEMORY) -> list[StreamComparison]:
    """Each accelerator function's comparison of :func:`network_hil` (DRAM and cycles
    against the simulator)."""
    report = network_hil(model, inputs, simulator, build_root, calibration_samples, seed,
                         memory)
    return [layer.comparison for layer in report.layers]


def model_hil_command(args) -> int:
    """``heterocc hil MODEL.onnx``: the network's accelerator functions on the RTL, a
    line of progress per layer as it ends and a table at the end."""
    report = network_hil(args.stream, load_input_files(getattr(args, "input", None)) or None,
                         simulator=args.simulator, build_root=args.build_dir,
                         memory=BenchMemory(args.latency))
    print(report.table())
    agree = sum(layer.matches for layer in report.layers)
    print(f"{agree}/{len(report.layers)} accelerator functions agree with the simulator")
    return 0 if report.agrees else 1
