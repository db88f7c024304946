"""Bring-up for any SDK target: a model on the target's device, checked layer by layer
against the NumPy references.

    heterocc hil MODEL.onnx --target NAME [--input NAME=FILE.npy] [--calibrate DIR_OR_NPZ]

:func:`model_hil` compiles the model for the target (the CPU's NumPy reference takes the
rest), runs it on the target's device (a board, an RTL simulation, or a
:class:`~heterocc.sdk.MirroredDevice` comparing one with the simulator) and compares the
outputs with the reference. Then it locates the first layer that diverges: it evaluates
the whole fused graph on the ops' NumPy references, keeping every function's inputs and
outputs, and replays the target's layers (the composites of its regions, the unit a
target compiles: one device program each) in execution order, each on *the reference's
inputs*, stopping at the first whose output differs from its reference (or whose device
raises, as a ``MirroredDevice`` does where the board and the simulator disagree). A
layer is thus judged on its own, whatever the layers before it did, and a wrong layer is
found even where the layers after it hide the error (a ReLU over a wrong sign); it costs
one device run per layer up to the faulty one, fewer than bisecting over prefixes of the
model, each of which reruns every layer before its end.

A target with a ``hil_command`` hook (``vta``: its streams replayed on the RTL, down to
the first differing instruction) keeps it for ``heterocc hil``; ``--device target`` asks
for this generic check instead.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from heterocc.errors import AcceleratorError, InputError
from heterocc.ir.graph import Graph, Node, Value
from heterocc.ops import get_op
from heterocc.runtime.interpreter import evaluate

from .registry import get_target, parse_target_spec

if TYPE_CHECKING:
    from heterocc.driver import CompiledModel


@dataclass(frozen=True)
class LayerComparison:
    """One layer (a composite function run as one device program) on its reference
    inputs: whether its outputs equal the reference's, the device cycles of the run
    (None where the kernel reports none) and, when it differs, the first difference."""

    name: str
    composite: str
    matches: bool
    cycles: int | None = None
    detail: str = ""

    def summary(self) -> str:
        """One line."""
        cycles = "" if self.cycles is None else f", {self.cycles} cycles"
        verdict = "agrees" if self.matches else f"DIFFERS: {self.detail}"
        return f"{self.name} ({self.composite}){cycles}: {verdict}"


@dataclass
class ModelHilReport:
    """The outcome of :func:`model_hil`: whether the model's outputs on the device
    equal the reference's (``error`` holds what the device raised instead), and the
    layers checked, in execution order, up to the first that diverges."""

    target: str
    outputs_match: bool
    layers: list[LayerComparison] = field(default_factory=list)
    error: str = ""

    @property
    def first_divergence(self) -> LayerComparison | None:
        """The first layer whose output differs from its reference, or None."""
        return next((layer for layer in self.layers if not layer.matches), None)

    @property
    def agrees(self) -> bool:
        """Outputs and every layer checked equal the reference."""
        return self.outputs_match and self.first_divergence is None

    def summary(self) -> str:
        """One line per layer, then the verdict."""
        lines = [layer.summary() for layer in self.layers]
        if self.error:
            lines.append(f"the model's run on the device failed: {self.error}")
        outputs = "agree with" if self.outputs_match else "DIFFER from"
        lines.append(f"{self.target}: the model's outputs {outputs} the reference; "
                     f"{sum(layer.matches for layer in self.layers)}/{len(self.layers)} "
                     "layers checked agree")
        first = self.first_divergence
        if first is not None:
            lines.append(f"first diverging layer: {first.name} ({first.composite})")
        return "\n".join(lines)


def first_difference(got: np.ndarray, expected: np.ndarray, what: str,
                     rtol: float = 0.0) -> str | None:
    """Where ``got`` first differs from ``expected`` (dtype, shape, or the first
    element; bit-exact unless ``rtol`` allows a relative error), or None."""
    got, expected = np.asarray(got), np.asarray(expected)
    if got.dtype != expected.dtype or got.shape != expected.shape:
        return (f"{what} is {got.dtype}{list(got.shape)}, the reference "
                f"{expected.dtype}{list(expected.shape)}")
    if rtol and np.issubdtype(got.dtype, np.floating):
        same = np.isclose(got, expected, rtol=rtol, atol=0.0, equal_nan=True)
    elif np.issubdtype(got.dtype, np.floating):
        same = (got == expected) | (np.isnan(got) & np.isnan(expected))
    else:
        same = got == expected
    wrong = np.argwhere(~same)
    if not len(wrong):
        return None
    first = tuple(int(i) for i in wrong[0])
    return (f"{what} differs at {len(wrong)} of {got.size} elements; first at index "
            f"{first}: {got[first]}, the reference {expected[first]}")


def reference_trace(graph: Graph, args: Sequence[np.ndarray]) -> tuple[
        list[np.ndarray], dict[str, tuple[list, list[np.ndarray]]]]:
    """``graph`` evaluated on the ops' NumPy references: its outputs, and the
    arguments and outputs of every function node at any depth (regions and the
    composites inside them), by node name."""
    trace: dict[str, tuple[list, list[np.ndarray]]] = {}

    def walk(body: Graph, inputs: Sequence) -> list:
        env: dict[Value, object] = dict(zip(body.inputs, inputs))

        def read(v: Value | None):
            return None if v is None else (v.data if v.is_const else env[v])

        for node in body.nodes:
            values = [read(v) for v in node.inputs]
            if node.body is None:
                results = get_op(node.op).run(values, node.attrs)
            elif "composite" in node.attrs:
                results = evaluate(node.body, values)
            else:
                results = walk(node.body, values)
            if node.body is not None:
                trace[node.name] = (values, list(results))
            env.update(zip(node.outputs, results))
        return [read(v) for v in body.outputs]

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        outputs = walk(graph, args)
    return [np.asarray(o) for o in outputs], trace


def target_layers(compiled: CompiledModel, target: str) -> list[tuple[Node, object]]:
    """The layers of ``target`` in ``compiled`` in execution order, with their kernels:
    the composites of each region whose kernel lists them (``kernel.composites``, as
    ``sdk.build_accelerator_region`` makes, by composite name), else the region."""
    kernels = compiled.kernels
    layers = []
    for node in compiled.graph.nodes:
        if node.body is None or node.attrs.get("target") != target:
            continue
        kernel = kernels[node.name]
        parts = {getattr(part, "name", None): part for part in getattr(kernel, "composites", ())}
        inner = [n for n in node.body.nodes if n.body is not None]
        if inner and all(n.name in parts for n in inner):
            layers += [(n, parts[n.name]) for n in inner]
        else:
            layers.append((node, kernel))
    return layers


def check_layers(compiled: CompiledModel, target: str, trace: Mapping,
                 stop_at_first: bool = True, rtol: float = 0.0) -> list[LayerComparison]:
    """Each layer of ``target`` run on its reference inputs (from ``trace``, see
    :func:`reference_trace`) and compared with its reference outputs, in execution
    order, up to the first that differs (all of them unless ``stop_at_first``)."""
    checked = []
    for node, kernel in target_layers(compiled, target):
        args, expected = trace[node.name]
        composite = node.attrs.get("composite", node.op)
        try:
            got = kernel(list(args))
        except AcceleratorError as exc:
            detail = f"the device raised: {exc}"
        else:
            detail = next((d for k, (g, e) in enumerate(zip(got, expected))
                           if (d := first_difference(g, e, f"output {k}", rtol))), None)
        cycles = getattr(kernel, "last_cycles", None)
        checked.append(LayerComparison(node.name, composite, detail is None,
                                       None if cycles is None else int(cycles), detail or ""))
        if detail is not None and stop_at_first:
            break
    return checked


def model_hil(model, target, inputs: Mapping[str, np.ndarray] | None = None,
              calibration=None, stop_at_first: bool = True, rtol: float = 0.0,
              seed: int = 0) -> ModelHilReport:
    """Run ``model`` (an ONNX model, its path, or a :class:`CompiledModel` already
    compiled with ``target``) on ``target`` (an instance, or a name) with the NumPy
    reference taking the rest, and check it against the reference, layer by layer (see
    the module docstring). ``inputs`` by name default to seeded random ones (int8
    inputs over their whole range); ``calibration`` quantizes a float model first."""
    # the driver finds targets through this package's registry: a top-level import
    # would be a cycle
    from heterocc.driver import CompiledModel
    from heterocc.driver import compile as compile_model

    if isinstance(model, CompiledModel):
        compiled = model
        name = target if isinstance(target, str) else target.name
    else:
        if isinstance(target, str):
            spec, options = parse_target_spec(target)
            target = get_target(spec, **options)
        compiled = compile_model(model, target=[target, "reference"], calibration=calibration)
        name = target.name
    if inputs is None:
        inputs = random_inputs(compiled, seed)
    named = {spec.name: np.asarray(inputs[spec.name]) for spec in compiled.inputs}
    error = ""
    try:
        outputs = compiled.run(named)
    except AcceleratorError as exc:
        outputs, error = None, str(exc)
    expected, trace = reference_trace(compiled.graph,
                                      [named[v.name] for v in compiled.graph.inputs])
    outputs_match = outputs is not None and all(
        first_difference(g, e, "output", rtol) is None for g, e in zip(outputs, expected))
    layers = check_layers(compiled, name, trace, stop_at_first, rtol)
    if not layers:
        raise InputError(f"target {name!r} took no part of the model; nothing to bring up "
                         "(see heterocc partition for why)")
    return ModelHilReport(name, outputs_match, layers, error)


def random_inputs(compiled: CompiledModel, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random inputs of ``compiled``'s static shapes: integers over their
    dtype's range, floats standard normal."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for spec in compiled.inputs:
        if not all(isinstance(d, int) for d in spec.shape):
            raise InputError(f"input {spec.name!r} has shape {spec.shape}; give --input")
        dtype = np.dtype(spec.dtype)
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            arrays[spec.name] = rng.integers(info.min, int(info.max) + 1, spec.shape,
                                             dtype=dtype)
        else:
            arrays[spec.name] = rng.standard_normal(spec.shape).astype(dtype)
    return arrays


__all__ = ["LayerComparison", "ModelHilReport", "check_layers", "first_difference",
           "model_hil", "random_inputs", "reference_trace", "target_layers"]
