"""``heterocc.compile``: ONNX model -> passes -> per-function kernels -> a runnable model."""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx

from .diagnostics import Fallbacks, collecting, logger, progress, report_fallback
from .errors import InputError, TargetError
from .frontend.onnx import (
    DynamicShapeError,
    SpecializationNeeded,
    _check,
    _unsupported,
    _upgrade,
    from_onnx,
    load_model_and_bytes,
)
from .ir.graph import Graph
from .ir.types import dtype_from_onnx
from .passes import PassRecord
from .passes.partition import PartitionReport
from .passes.pipeline import choose_placement, run_pipeline
from .quantization import QuantizationOptions, batchnorms_between_qdq
from .runtime.artifact import export_artifact
from .runtime.executor import GraphExecutor, ProfileEntry, check_input, format_profile
from .runtime.inputs import InputSpec, name_inputs
from .runtime.pipeline import StreamResult, run_stream
from .sdk.registry import (
    available_targets,
    get_target,
    is_accelerator,
    is_registered,
    order_targets,
    parse_targets,
    suggest,
)
from .tuning.apply import ApplyHistoryBest
from .tuning.task import with_schedule_rules

#: work longer than this (seconds) reports its progress as INFO lines
PROGRESS_AFTER_S = 2.0
#: compiled specializations kept per model (by input shapes and shape-operand values)
MAX_SPECIALIZATIONS = 16


@dataclass
class Executable:
    """One compiled specialization of a model."""

    graph: Graph
    executor: GraphExecutor
    pass_records: list[PassRecord]
    bound: dict[str, np.ndarray]  # graph inputs turned into constants
    targets: dict[str, object] = field(default_factory=dict)  # name -> the instance used
    report: PartitionReport | None = None

    def run(self, named: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        for name, value in self.bound.items():
            if not np.array_equal(np.asarray(named[name]), value):
                raise InputError(f"input {name!r} differs from the value this program was "
                                 "specialized on")  # the cache key prevents this
        args = [check_input(v, named[v.name]) for v in self.graph.inputs]
        return self.executor.execute(args)


@dataclass
class CompiledModel:
    """A model compiled for one or more targets. ``run`` takes a dict by input
    name or positional arrays and returns the outputs as a list of arrays.

    ``run`` may be called from several threads at once, each call getting its own
    outputs: the CPU kernels write per-thread buffers and run concurrently, an
    accelerator runs one program at a time under its device's lock
    (``heterocc.sdk.device_lock``), and a specialization missing from the cache is
    compiled once, by one thread, while the others wait for it."""

    model: onnx.ModelProto
    targets: list[str]
    inputs: list[InputSpec]
    output_names: list[str]
    shapes: dict[str, tuple] = field(default_factory=dict)
    dump_ir: str | None = None
    specialize_on: list[str] = field(default_factory=list)
    strict: bool = False
    calibration: list | None = None
    #: the built-in quantizer's options (with ``calibration``)
    quantization: QuantizationOptions | None = None
    tuning_log: str | None = None
    #: the fallbacks heterocc warned about while compiling (see ``warnings``)
    warned: Fallbacks = field(default_factory=Fallbacks)
    #: the host CPU was added as the fallback to a list of accelerators only
    added_fallback: bool = False
    #: "greedy", "cost", or "auto" (cost when every target can estimate)
    placement: str = "auto"
    _cache: OrderedDict = field(default_factory=OrderedDict)
    _profile: dict[str, ProfileEntry] | None = None
    #: guards the cache of specializations (a build is done once, by one thread)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    # --- running ----------------------------------------------------------
    def run(self, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray] | None = None,
            **named) -> list[np.ndarray]:
        """Outputs for ``inputs`` (dict by name, or a list in input order)."""
        given = name_inputs(self.inputs, inputs, named)
        exe = self._executable_for(given)
        return exe.run(given)

    __call__ = run

    def run_stream(self, inputs: Sequence[Mapping[str, np.ndarray] | Sequence[np.ndarray]],
                   replays: int = 3, clock: str = "wall") -> StreamResult:
        """Run a stream of inputs with the devices overlapping: the CPU works on one
        input while an accelerator works on another (``heterocc.runtime.pipeline``).
        Returns a ``StreamResult``: the outputs per input (as ``run`` gives them), the
        modelled sequential and pipelined timelines and their ``speedup``: CPU spans
        and the host part of device calls measured in ``replays`` passes with the
        device's results replayed (no simulator beside them; the fastest per call, on
        ``clock``: ``"wall"`` or ``"cpu"``, this process's CPU seconds), accelerator
        spans from the device's cycle counts at its clock, transfers from its link."""
        items = [name_inputs(self.inputs, item, {}) for item in inputs]
        if not items:
            raise InputError("run_stream: give at least one input")
        exe = self._executable_for(items[0])
        args = []
        for given in items:
            if self._key(given) != self._key(items[0]):
                raise InputError("run_stream: every input of a stream must have the shapes "
                                 "(and specialized values) of the first")
            args.append([check_input(v, given[v.name]) for v in exe.graph.inputs])
        fallback = list(exe.targets)[-1]
        return run_stream(exe.executor, exe.targets, args, fallback, replays, clock)

    def run_timeline(self, inputs: Mapping[str, np.ndarray] | Sequence[np.ndarray] | None = None,
                     **named) -> StreamResult:
        """One run as ``run`` makes it (independent branches on different devices at
        once), with its timeline: a ``StreamResult`` of one input, whose ``outputs[0]``
        are the run's outputs, ``pipelined`` the modelled timeline with the devices
        overlapping and ``sequential`` one function after another (CPU spans measured,
        accelerator spans from the device's cycle counts at its clock and its link)."""
        return self.run_stream([name_inputs(self.inputs, inputs, named)])

    def _executable_for(self, given: Mapping[str, np.ndarray]) -> Executable:
        with self._lock:
            return self._executable_locked(given)

    def _executable_locked(self, given: Mapping[str, np.ndarray]) -> Executable:
        key = self._key(given)
        exe = self._cache.get(key)
        if exe is not None:
            self._cache.move_to_end(key)
            return exe
        exe = self._build({n: a.shape for n, a in given.items()}, given)
        self._cache[self._key(given)] = exe  # building may add inputs to specialize on
        if len(self._cache) > MAX_SPECIALIZATIONS:
            self._cache.popitem(last=False)
        return exe

    def _key(self, given: Mapping[str, np.ndarray]) -> tuple:
        return tuple((n, tuple(np.shape(given[n]))) for n in sorted(given)) + tuple(
            (n, np.asarray(given[n]).tobytes()) for n in self.specialize_on)

    # --- building ---------------------------------------------------------
    def _build(self, shapes: Mapping[str, tuple],
               given: Mapping[str, np.ndarray] | None) -> Executable:
        """Compile for ``shapes``; ``given`` holds run-time inputs to specialize on
        (None while compiling ahead of any run)."""
        with _collector_paused(), collecting(self.strict, into=self.warned):
            return self._build_now(shapes, given)

    def _build_now(self, shapes: Mapping[str, tuple],
                   given: Mapping[str, np.ndarray] | None) -> Executable:
        while True:
            if given is None and self.specialize_on:
                raise _Respecialize()
            values = {n: np.asarray(given[n]) for n in self.specialize_on} if given else {}
            try:
                graph = from_onnx(self.model, shapes=shapes, values=values, check=False)
                break
            except SpecializationNeeded as exc:
                new = [n for n in exc.inputs if n not in self.specialize_on]
                if not new:
                    raise
                self.specialize_on = sorted(set(self.specialize_on) | set(new))
        targets = {}
        for t in self.targets:
            instance = get_target(t) if isinstance(t, str) else t
            targets[instance.name] = instance
        fallback = list(targets)[-1]
        started = time.perf_counter()
        how, why = choose_placement(self.placement, targets)
        with _tuning_context(self.tuning_log):  # placement by cost estimates tuned kernels
            result = run_pipeline(graph, targets, fallback, self.strict, self.calibration,
                                  self.dump_ir, self.quantization, how)
        if time.perf_counter() - started > PROGRESS_AFTER_S:  # a large model: say so
            logger.info(f"graph passes: {graph.num_nodes()} -> {result.graph.num_nodes()} "
                        f"nodes in {time.perf_counter() - started:.1f} s "
                        f"({len(result.records)} passes)")
        graph, report = result.graph, result.report
        if report is not None:
            report.placement_reason = why
            _report_placement_fallbacks(self.model, report, targets, fallback,
                                        self.added_fallback)
        placement = {n.name: n.attrs.get("target", fallback)
                     for n in graph.nodes if n.body is not None}
        functions = [n for n in graph.nodes if n.body is not None]
        with _tuning_context(self.tuning_log):
            for name, target in targets.items():
                # a target that can compiles its functions together first (its code
                # generated while it lowers the next ones); build then takes that code
                compile_all = getattr(target, "compile_all", None)
                if compile_all is not None:
                    compile_all([n for n in functions if placement[n.name] == name])
            kernels = {n.name: targets[placement[n.name]].build(n)
                       for n in progress(functions, "compiling functions", len(functions),
                                       every=PROGRESS_AFTER_S)}
        _report_numpy_fallbacks(targets, placement)
        if report is not None:
            report.warnings = list(self.warned.messages)
        executor = GraphExecutor(graph, kernels, placement, self._profile)
        if report is not None:  # what the targets know of the functions they built
            report.attach_metrics({c.name: c.metrics() for k in kernels.values()
                                   for c in getattr(k, "composites", ())
                                   if callable(getattr(c, "metrics", None))})
        return Executable(graph, executor, result.records, values, targets, report)

    def build_static(self) -> Executable | None:
        """Compile now if every input shape is known and no input must be specialized on."""
        if any(not isinstance(d, int) for s in self.inputs for d in s.shape):
            return None
        shapes = {s.name: s.shape for s in self.inputs}
        try:
            exe = self._build(shapes, None)
        except (DynamicShapeError, _Respecialize):
            return None
        self._cache[tuple((n, tuple(shapes[n])) for n in sorted(shapes))] = exe
        return exe

    # --- inspection -------------------------------------------------------
    @property
    def graph(self) -> Graph:
        """The optimized graph of the most recent specialization."""
        if not self._cache:
            raise InputError("the model has dynamic shapes and has not been run yet; "
                             "compile it with shapes={...} or run it once")
        return next(reversed(self._cache.values())).graph

    @property
    def kernels(self) -> dict[str, object]:
        """The kernels of the most recent specialization, by function node name (a
        region's device kernels are its kernel's ``composites``)."""
        if not self._cache:
            raise InputError("the model has dynamic shapes and has not been run yet; "
                             "compile it with shapes={...} or run it once")
        return dict(next(reversed(self._cache.values())).executor.kernels)

    @property
    def fallbacks(self) -> dict[str, str]:
        """The functions of the most recent specialization that run on the operators'
        NumPy references instead of compiled code, by function node name, each with the
        reason its target gave (what it could not express or generate); empty when
        every function compiled. A model compiled for production should have none:
        check it after ``compile`` (or after the first run of a model with dynamic
        shapes)."""
        if not self._cache:
            raise InputError("the model has dynamic shapes and has not been run yet; "
                             "compile it with shapes={...} or run it once")
        exe = next(reversed(self._cache.values()))
        functions = {n.name for n in exe.graph.nodes if n.body is not None}
        # a target instance given by the caller serves every specialization: keep the
        # functions of this one
        return {name: reason for target in exe.targets.values()
                for name, reason in getattr(target, "fallbacks", {}).items()
                if name in functions}

    @property
    def placement_report(self) -> PartitionReport | None:
        """Where every node went and why (None when compiled for one target)."""
        return next(reversed(self._cache.values())).report if self._cache else None

    @property
    def warnings(self) -> list[str]:
        """Every fallback heterocc warned about while compiling this model, in order (a
        target that took nothing, a float model on an int8 accelerator, a GPU emulated on
        the CPU, functions run on NumPy, ...); ``strict=True`` makes each an error."""
        return list(self.warned.messages)

    @property
    def pass_records(self) -> list[PassRecord]:
        return next(reversed(self._cache.values())).pass_records if self._cache else []

    def export(self, path: str, sign: str | None = None) -> None:
        """Write a self-contained artifact directory (see heterocc.runtime.artifact);
        ``sign`` names an Ed25519 private key file to sign it with (``heterocc keygen``,
        checked by ``heterocc.load(path, verify=public_key)``)."""
        if len(self._cache) != 1 or self.specialize_on:
            raise InputError("only a model compiled for one static input shape can be exported: "
                             "compile it with shapes={...}")
        exe = next(iter(self._cache.values()))
        export_artifact(path, exe.graph, exe.executor, self.inputs, self.output_names,
                        exe.targets, sign=sign)

    def enable_profiling(self) -> None:
        """Record per-function times from now on (see ``profile_report``)."""
        self._profile = {}
        for exe in self._cache.values():
            exe.executor.profile = self._profile

    def profile_entries(self) -> list[ProfileEntry]:
        """The runs since :meth:`enable_profiling`, one entry per node (for
        ``heterocc.profiling``: JSON, CSV, Chrome trace)."""
        return list((self._profile or {}).values())

    def profile_report(self) -> str:
        """The runs since :meth:`enable_profiling` as a table, one row per node, slowest
        first: target, calls, time per call, share, and cycles and bytes moved per call
        where the device reports them."""
        return format_profile(list((self._profile or {}).values()))


#: ONNX ops whose presence marks a model as quantized (or integer) already
_QUANTIZED_OPS = ("QuantizeLinear", "DequantizeLinear", "QLinear", "Integer", "QGemm",
                  "DynamicQuantize")


def _is_float_model(model: onnx.ModelProto) -> bool:
    """No quantization op and no 8-bit initializer: a model no int8 accelerator matches."""
    eight_bit = (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)
    return not any(any(q in n.op_type for q in _QUANTIZED_OPS) for n in model.graph.node) \
        and not any(t.data_type in eight_bit for t in model.graph.initializer)


def _layers_kept_by_cost(report: PartitionReport, accelerator: str) -> int:
    """How many candidate layers ``accelerator`` matched that placement by cost left on
    another device because its estimate there was lower (0 under greedy placement)."""
    if report.placement not in ("cost", "throughput") or report.plan is None:
        return 0
    # from the plan: a layer decided on a lower bound has no estimate on the device it
    # left until the report's totals ask for one
    return sum(1 for unit in report.plan.composites
               if unit.greedy == accelerator and unit.chosen != accelerator)


def _report_placement_fallbacks(model: onnx.ModelProto, report: PartitionReport,
                                targets: Mapping[str, object], fallback: str,
                                added_fallback: bool) -> None:
    """Warn about every accelerator that took no node (with a hint to quantize a float
    model), and, where the fallback was added for a list of accelerators only, about
    what they could not take."""
    placed = report.by_target()
    for name, target in targets.items():
        if name == fallback or not is_accelerator(target) or placed.get(name):
            continue
        if _is_float_model(model):
            report_fallback(
                f"{name} took no node: the model is float (no QuantizeLinear/"
                f"DequantizeLinear or integer op) and {name}'s patterns match quantized "
                f"layers, so all of it runs on {fallback}. Quantize it first: "
                "heterocc.compile(..., calibration=samples), heterocc's --calibrate "
                "SAMPLES.npz, `heterocc quantize`, or onnxruntime.quantization."
                "quantize_static")
        elif (outpaced := _layers_kept_by_cost(report, name)):
            # a decision, not a fallback: the layers matched and were measured slower
            logger.info(
                f"{name} took no node: placement by cost kept the {outpaced} layer(s) it "
                f"matched on {fallback}, where they are estimated faster (the placement "
                f"report gives both estimates; placement='greedy' puts them on {name})")
        else:
            report_fallback(f"{name} took no node: no layer matched its patterns, so all of "
                            f"the model runs on {fallback} (the placement report gives the "
                            "reason for each node)")
    unfolded = batchnorms_between_qdq(model)
    if unfolded and len(placed) > 1:
        regions = {p.region for p in report.placements if p.region}
        report_fallback(
            f"{len(unfolded)} BatchNormalization node(s) ({', '.join(unfolded[:3])}"
            f"{', ...' if len(unfolded) > 3 else ''}) sit between DequantizeLinear and "
            "QuantizeLinear: the model was quantized without onnxruntime.quantization."
            "quant_pre_process, which folds BatchNorm into the convolutions first. Folding "
            "them now would drop the rounding of their quantized inputs and change the "
            f"results, so they stay on {fallback} and cut the accelerated part into "
            f"{len(regions)} regions. Run quant_pre_process(float.onnx, pre.onnx) (or "
            "python -m onnxruntime.quantization.preprocess) before quantize_static")
    left = [p for p in report.placements if p.target == fallback]
    if added_fallback and left and len(left) < len(report.placements):
        ops = sorted({p.op for p in left})
        report_fallback(
            f"{len(left)} of {len(report.placements)} nodes went to {fallback} because "
            f"{', '.join(n for n in targets if n != fallback)} cannot run them (ops: "
            f"{', '.join(ops[:12])}{', ...' if len(ops) > 12 else ''}); the placement "
            "report gives the reason for each")


def _report_numpy_fallbacks(targets: Mapping[str, object],
                            placement: Mapping[str, str]) -> None:
    """Warn about the functions a target runs on the NumPy references (its optional
    ``fallbacks`` mapping: function name -> why), one sentence per target."""
    for name, target in targets.items():
        fallbacks = getattr(target, "fallbacks", None)
        if not isinstance(fallbacks, Mapping):
            continue
        mine = [(f, why) for f, why in fallbacks.items() if placement.get(f) == name]
        if mine:
            shown = "; ".join(f"{f} ({why})" for f, why in mine[:4])
            more = f"; and {len(mine) - 4} more" if len(mine) > 4 else ""
            report_fallback(f"{len(mine)} function(s) on {name} run on the NumPy reference "
                            f"implementations, not compiled code (slower): {shown}{more}")


def _tuning_context(log: str | None):
    """Schedules from a tuning log (best config per task) while kernels are built."""
    if log is None:
        return contextlib.nullcontext()
    return ApplyHistoryBest(log)


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector paused while a model compiles, restored after.
    A compile allocates millions of IR nodes that form no cycles (reference counting
    frees them); the collector's repeated scans of the live ones took a tenth of a
    compile (MobileNetV2: 0.5 of 4.6 s). What cycles a compile leaves (LLVM IR
    builder objects) are collected once it is back on."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


class _Respecialize(Exception):
    """Internal: the set of inputs to specialize on grew; build again with it."""


def _input_specs(model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]) -> list[InputSpec]:
    inits = {i.name for i in model.graph.initializer}
    specs = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                     for d in tt.shape.dim)
        if vi.name in shapes:
            dims = tuple(int(d) for d in shapes[vi.name])
        specs.append(InputSpec(vi.name, dtype_from_onnx(tt.elem_type), dims))
    return specs


def compile(model, target: str | Sequence = "llvm",  # noqa: A001
            shapes: Mapping[str, Sequence[int]] | None = None,
            dump_ir: str | None = None, check: bool = True,
            strict: bool = False, calibration=None,
            tuning_log: str | None = None,
            quantization: QuantizationOptions | None = None,
            placement: str = "auto", schedule_rules: str = "hand") -> CompiledModel:
    """Compile an ONNX model (path, bytes or ModelProto) for ``target``.

    A model whose tensors live in external data files (``X.onnx.data``) reads them
    relative to the model file's folder, wherever the process runs; a location that
    leaves that folder (absolute, ``..``, a link out) is refused (ModelLoadError).

    ``target``: a target name (default ``llvm``: the host CPU), a comma-separated
    list, or a list of names and target instances (e.g.
    ``[VtaTarget(config="1x8x8"), "llvm"]``); ``reference`` runs the NumPy oracle.
    ``shapes`` fixes symbolic input dimensions; without it, a model with
    dynamic shapes (or whose shape operands are graph inputs) is compiled on
    first run for the shapes and values it meets, and cached.
    ``dump_ir`` names a directory that receives the IR after every pass.
    With several targets, the last is the fallback (the CPU) and the others
    take what their pattern tables match (see ``placement_report``);
    ``strict=True`` raises PartitionError instead of falling back to the CPU
    for anything a pattern matched but its target refused.
    ``calibration`` (sample inputs: dicts by name or lists in input order)
    turns on int8 post-training quantization of convolutions, dense layers and
    residual additions; ``quantization`` (a ``heterocc.quantization.QuantizationOptions``)
    chooses per-channel weights, asymmetric activations, the calibration method and
    nodes left float.
    ``tuning_log`` applies the best schedule per task of a tuning log
    (``heterocc tune``); tasks missing from it keep the default schedules.
    ``placement``: with several targets, ``"greedy"`` offloads every pattern match,
    ``"cost"`` only those the targets' time estimates say are faster offloaded
    (transfers included; see ``docs/partitioning.md``), ``"auto"`` (the default) is
    ``"cost"`` when every target can estimate and ``"greedy"`` otherwise; the
    placement report says which ran and why. ``"throughput"`` places for a stream of
    inputs (:meth:`CompiledModel.run_stream`): by the same estimates, it balances the
    devices' busy time per input, since the pipelined runtime overlaps them.
    ``schedule_rules="none"`` turns the CPU's hand schedule rules off (the last target
    named: its option ``-schedule-rules=none``): every function gets the generic
    schedule of its compute's kind, or a tuning log's auto record of it (the starting
    point of the search from scratch, ``heterocc tune --schedule-rules none``).
    """
    if placement not in ("greedy", "cost", "throughput", "auto"):
        raise InputError(f"placement {placement!r}: choose greedy, cost, throughput or auto")
    names = parse_targets(with_schedule_rules(target, schedule_rules))
    unknown = [n for n in names if isinstance(n, str) and not is_registered(n)]
    if unknown:
        known = available_targets()
        raise TargetError(f"unknown target(s) {', '.join(unknown)}"
                          f"{suggest(unknown[0], known)}; available: {', '.join(known)}")
    order = order_targets(names)
    for note in order.notes:
        logger.info(note)
    found = Fallbacks(strict)
    with collecting(strict, into=found):
        for warning in order.warnings:
            report_fallback(warning)
    proto, serialized = load_model_and_bytes(model)
    if check:
        _check(proto, serialized)
    _unsupported(proto)
    proto = _upgrade(proto)
    shapes = {k: tuple(v) for k, v in (shapes or {}).items()}
    try:
        specs = _input_specs(proto, shapes)
    except Exception as exc:
        raise InputError(f"cannot read the model's inputs: {exc}") from None
    unknown_inputs = sorted(set(shapes) - {s.name for s in specs})
    if unknown_inputs:
        raise InputError(f"shapes given for unknown input(s) {', '.join(unknown_inputs)}; "
                         f"inputs are {', '.join(s.name for s in specs)}")
    compiled = CompiledModel(proto, order.targets, specs,
                             [o.name for o in proto.graph.output],
                             shapes, dump_ir, strict=strict,
                             calibration=None if calibration is None else list(calibration),
                             quantization=quantization, tuning_log=tuning_log, warned=found,
                             added_fallback=order.added_fallback, placement=placement)
    compiled.build_static()
    return compiled
