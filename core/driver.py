"""``heterocc.compile``: ONNX model -> passes -> per-function kernels -> a runnable model."""

from __future__ import annotations

import contextlib
import gc
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx

from .errors import InputError, TargetError
from .frontend.onnx import (
    DynamicShapeError,
    SpecializationNeeded,
    _check,
    _unsupported,
    _upgrade,
    from_onnx,
    load_model,
)
from .ir.graph import Graph
from .ir.types import dtype_from_onnx
from .passes import PassRecord
from .passes.partition import PartitionReport
from .passes.pipeline import run_pipeline
from .runtime.artifact import export_artifact
from .runtime.executor import GraphExecutor, ProfileEntry, check_input, format_profile
from .runtime.inputs import InputSpec, name_inputs
from .targets import available_targets, get_target, parse_targets
from .tuning.apply import ApplyHistoryBest

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
    tuning_log: str | None = None
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
        with _collector_paused():
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
        result = run_pipeline(graph, targets, fallback, self.strict, self.calibration,
                              self.dump_ir)
        graph, report = result.graph, result.report
        placement = {n.name: n.attrs.get("target", fallback)
                     for n in graph.nodes if n.body is not None}
        with _tuning_context(self.tuning_log):
            kernels = {n.name: targets[placement[n.name]].build(n)
                       for n in graph.nodes if n.body is not None}
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
    def placement_report(self) -> PartitionReport | None:
        """Where every node went and why (None when compiled for one target)."""
        return next(reversed(self._cache.values())).report if self._cache else None

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

    def profile_report(self) -> str:
        """The runs since :meth:`enable_profiling` as a table, one row per node, slowest
        first: target, calls, time per call, share, and cycles and bytes moved per call
        where the device reports them."""
        return format_profile(list((self._profile or {}).values()))


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
            tuning_log: str | None = None) -> CompiledModel:
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
    turns on int8 post-training quantization of convolutions and dense layers.
    ``tuning_log`` applies the best schedule per task of a tuning log
    (``heterocc tune``); tasks missing from it keep the default schedules.
    """
    names = parse_targets(target)
    known = available_targets()
    unknown = [n for n in names if isinstance(n, str) and n not in known]
    if unknown:
        raise TargetError(f"unknown target(s) {', '.join(unknown)}; available: "
                          f"{', '.join(known)}")
    proto = load_model(model)
    if check:
        _check(proto)
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
    compiled = CompiledModel(proto, names, specs, [o.name for o in proto.graph.output],
                             shapes, dump_ir, strict=strict,
                             calibration=None if calibration is None else list(calibration),
                             tuning_log=tuning_log)
    compiled.build_static()
    return compiled
