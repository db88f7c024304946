"""The IR interpreter as the oracle of every rewrite: a test helper.

:func:`check_every_pass` runs a model's compile pipeline for some targets and, after
every pass, evaluates the graph it left with the interpreter (the NumPy references of
the ops, ``heterocc.runtime.interpreter``) and compares its outputs with those of the
graph before the pass. A pass that changes the meaning fails the test, named. Every
pass must leave the outputs exactly as they were, except the quantization rewrites
(``QUANTIZING_PASSES``: float QDQ chains into integer requantizations), which may move
them by the rounding steps they document (one per requantization, ``docs/vta.md``,
carried on and possibly amplified by later layers), bounded by the caller's
``rewrite_steps``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from heterocc.frontend import from_onnx
from heterocc.ir.graph import Graph
from heterocc.passes.pipeline import run_pipeline
from heterocc.runtime.interpreter import evaluate
from heterocc.targets import get_target, parse_targets


@dataclass
class PassDeviation:
    """How far the graph after one pass is from the imported model, in output steps."""

    name: str
    steps: float


def steps_apart(a: np.ndarray, b: np.ndarray, scale: float) -> float:
    """The largest element difference of ``a`` and ``b`` in steps of ``scale`` (to a
    thousandth: dequantized outputs are whole steps apart but for float rounding)."""
    return round(float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))) / scale), 3)


#: passes that may change outputs by rounding steps (a fixed-point requantization for a
#: float one); every other pass must keep them exactly
QUANTIZING_PASSES = frozenset({"quantize", "realize_qdq", "realize_qdq_before_tables"})


def check_every_pass(model, target: str, inputs: Sequence[np.ndarray], scale: float,
                     rewrite_steps: float) -> tuple[Graph, list[PassDeviation]]:
    """Compile ``model`` (an ONNX ModelProto with static shapes) for ``target`` pass by
    pass, evaluating every intermediate graph on ``inputs`` (one per graph input); fail,
    naming the pass, when a pass moves an output from the previous graph's by more than
    ``rewrite_steps`` steps of ``scale`` (a quantizing pass) or at all (any other).
    Returns the final graph and each pass's deviation."""
    graph = from_onnx(model)
    previous = evaluate(graph, inputs)
    targets = {}
    for name in parse_targets(target):
        instance = get_target(name)
        targets[instance.name] = instance
    deviations: list[PassDeviation] = []

    def compare(pass_name: str, after: Graph) -> None:
        nonlocal previous
        got = evaluate(after, inputs)
        steps = max(steps_apart(g, e, scale) for g, e in zip(got, previous))
        deviations.append(PassDeviation(pass_name, steps))
        allowed = rewrite_steps if pass_name in QUANTIZING_PASSES else 0
        assert steps <= allowed, (
            f"after pass {pass_name!r} ({target}) the graph's outputs are {steps:.3f} steps "
            f"from the graph's before it (at most {allowed} allowed): the pass changed the "
            f"model's meaning; passes so far: {[(d.name, d.steps) for d in deviations]}")
        previous = got

    result = run_pipeline(graph, targets, dump_ir=compare)
    return result.graph, deviations
