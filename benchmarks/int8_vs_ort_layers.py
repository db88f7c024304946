"""Where a compiled int8 model's output departs from ONNX Runtime's on the same model, and
why: layer by layer, given the same inputs, and as the differences travel through the
network.

heterocc's int8 code is bit-exact against its integer reference (``zoo.py
--reference``); ONNX Runtime requantizes in float32 (the int32 accumulator times a float32
scale, rounded half to even) where the reference uses a 31-bit fixed-point multiplier and
a shift (ties rounding up). Both are within half a step of the exact value; at a near tie
they can round apart. This script shows how often, and what that does to a deep network:

1. ``isolated``: each compiled function run on the reference with ONNX Runtime's own
   quantized inputs (every ``QuantizeLinear`` output of the model exposed as an output of
   ONNX Runtime's session), against ONNX Runtime's output of the same tensor: the
   elements that differ and by how many steps. For a function ending in one
   ``Requantize``, the first differing element's value before rounding, as the
   fixed-point multiplier gives it (a near tie shows as ``x.4999...`` or ``x.5000...``).
2. ``chained``: the same tensor from heterocc's whole run against ONNX Runtime's: the
   isolated one-step differences spread as they feed the next layers.
3. the output against the float model's, for both engines: whether either is closer.

    python benchmarks/int8_vs_ort_layers.py resnet50 [--seed 0] [--all]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from machine import describe  # noqa: E402  (beside this script)
from zoo import TEXT, VISION, export, quantize, random_feed  # noqa: E402  (beside this script)

import heterocc  # noqa: E402
from heterocc.ops import get_op  # noqa: E402
from heterocc.runtime.interpreter import evaluate  # noqa: E402


def expose_quantized_tensors(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose outputs also name every ``QuantizeLinear`` output, so
    that ONNX Runtime's session returns the quantized tensors between its layers."""
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    outputs = {o.name for o in exposed.graph.output}
    for node in exposed.graph.node:
        if node.op_type == "QuantizeLinear" and node.output[0] not in outputs:
            outputs.add(node.output[0])
            exposed.graph.output.append(onnx.helper.make_empty_tensor_value_info(node.output[0]))
    return exposed


def as_ours(array: np.ndarray, dtype) -> np.ndarray:
    """ONNX Runtime's ``array`` in the dtype heterocc holds the same tensor in: a uint8
    activation becomes int8 less 128 (``passes.uint8_to_int8``)."""
    if array.dtype == np.uint8 and dtype == np.int8:
        return (array.astype(np.int16) - 128).astype(np.int8)
    return array.astype(dtype)


def steps(array: np.ndarray) -> np.ndarray:
    """A quantized tensor in ONNX Runtime's uint8 steps, whichever of int8 (ours, shifted
    by 128) or uint8 it is held in."""
    array = np.asarray(array)
    return array.astype(np.int32) + (128 if array.dtype == np.int8 else 0)


@dataclass
class LayerRow:
    """One quantized tensor: how far heterocc's is from ONNX Runtime's."""
    tensor: str
    ops: str
    elements: int
    isolated_differing: int
    isolated_max: int
    chained_differing: int
    chained_max: int
    before_rounding: str  #: the first isolated difference's value before rounding, or ""

    def line(self) -> str:
        return (f"{self.tensor[-44:]:44s} {self.ops[:26]:26s} {self.elements:>9d} "
                f"{self.isolated_differing:>9d} {self.isolated_max:>4d} "
                f"{self.chained_differing / self.elements:>9.2%} {self.chained_max:>4d}  "
                f"{self.before_rounding}")


def _at_channel(value, channel: int) -> int:
    """A per-tensor (int) or per-channel (list) Requantize attribute at ``channel``."""
    return int(value[channel] if isinstance(value, list) else value)


def value_before_rounding(body, record: dict, index: tuple) -> str:
    """Of the function's ``Requantize`` steps with an output of the function's shape, the
    exact value nearest a rounding tie at ``index`` (its accumulator times the fixed-point
    multiplier over two to its total shift, zero point not added), or "" where none has a
    single multiplier (a lookup table)."""
    shape = record[body.outputs[0]].shape
    candidates = []
    for node in body.nodes:
        attrs = node.attrs
        if node.op != "Requantize" or node.inputs[0] not in record \
                or record[node.inputs[0]].shape != shape \
                or not isinstance(attrs["multiplier"], (int, list)):
            continue
        channel = index[int(attrs.get("axis", 1))] if len(index) > 1 else 0
        multiplier = _at_channel(attrs["multiplier"], channel)
        shift = _at_channel(attrs["shift"], channel) + int(attrs.get("product_shift", 0))
        accumulator = int(record[node.inputs[0]][index])
        value = accumulator * multiplier / 2.0 ** shift
        candidates.append((abs(abs(value - np.floor(value)) - 0.5),
                           f"{accumulator} x {multiplier} / 2^{shift} = {value:.10f}"))
    return min(candidates)[1] if candidates else ""


def compare_layers(graph, ort_values: dict[str, np.ndarray],
                   ours: dict[str, np.ndarray]) -> list[LayerRow]:
    """A row for each top-level node of the compiled ``graph`` whose output ONNX Runtime
    also computed and whose non-constant inputs it computed too (``ort_values`` by tensor
    name; ``ours``: heterocc's whole run, by name)."""
    rows = []
    for node in graph.nodes:
        output = node.outputs[0]
        if output.name not in ort_values or ort_values[output.name].dtype != np.uint8 \
                and ort_values[output.name].dtype != np.int8:
            continue
        inputs = []
        for v in node.inputs:
            if v is None or v.is_const:
                inputs.append(None if v is None else v.data)
            elif v.name in ort_values:
                inputs.append(as_ours(ort_values[v.name], v.type.np_dtype))
            else:
                break
        else:
            record: dict = {}
            if node.body is not None:
                result = evaluate(node.body, inputs, record=record)[0]
            else:
                result = get_op(node.op).run(inputs, node.attrs)[0]
            theirs = steps(ort_values[output.name])
            isolated = steps(result) - theirs
            chained = steps(ours[output.name]) - theirs if output.name in ours else isolated
            first = tuple(np.argwhere(isolated)[0]) if isolated.any() else None
            ops = "+".join(n.op for n in node.body.nodes) if node.body is not None else node.op
            rows.append(LayerRow(
                output.name, ops, theirs.size, int(np.count_nonzero(isolated)),
                int(np.abs(isolated).max()), int(np.count_nonzero(chained)),
                int(np.abs(chained).max()),
                value_before_rounding(node.body, record, first)
                if first is not None and node.body is not None else ""))
    return rows


@dataclass
class Comparison:
    """One int8 model run by both engines on one input."""
    rows: list[LayerRow]
    ort_output: np.ndarray
    compiled_output: np.ndarray
    bit_exact: bool  #: whether the compiled code equals the integer reference


def compare_with_onnxruntime(int8_path: str, feed: dict) -> Comparison:
    """The int8 model at ``int8_path`` run on ``feed`` by ONNX Runtime (every quantized
    tensor exposed) and compiled by heterocc for ``llvm`` (and evaluated on its integer
    reference, every value recorded), compared layer by layer."""
    exposed = expose_quantized_tensors(onnx.load(int8_path))
    session = ort.InferenceSession(exposed.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    ort_values = dict(zip(names, session.run(None, feed)))
    compiled = heterocc.compile(int8_path, target="llvm")
    graph = compiled.graph
    record: dict = {}
    reference_output = evaluate(graph, [feed[v.name] for v in graph.inputs], record=record)[0]
    compiled_output = compiled.run(feed)[0]
    rows = compare_layers(graph, ort_values, {v.name: a for v, a in record.items()})
    return Comparison(rows, ort_values[names[0]], compiled_output,
                      bool(np.array_equal(compiled_output, reference_output)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=[*VISION, *TEXT])
    parser.add_argument("--seed", type=int, default=0, help="the random input's seed")
    parser.add_argument("--all", action="store_true",
                        help="every layer (default: those that differ in isolation, and "
                             "every eighth)")
    args = parser.parse_args()
    print(describe())
    with tempfile.TemporaryDirectory() as directory:
        float_path = os.path.join(directory, "float.onnx")
        int8_path = os.path.join(directory, "int8.onnx")
        skipped = export(args.model, float_path)
        if skipped:
            print(f"skipped: {skipped}")
            return 0
        quantize(float_path, int8_path)
        float_session = ort.InferenceSession(float_path, providers=["CPUExecutionProvider"])
        feed = random_feed(float_session, np.random.default_rng(args.seed))
        float_output = float_session.run(None, feed)[0]
        comparison = compare_with_onnxruntime(int8_path, feed)

    rows = comparison.rows
    print(f"{args.model} int8 (quantize_static QDQ, per channel), input seed {args.seed}; "
          f"compiled code {'bit-exact against' if comparison.bit_exact else 'DIFFERS from'}"
          f" the integer reference")
    print(f"{'tensor':44s} {'function ops':26s} {'elements':>9s} "
          f"{'isolated':>9s} {'max':>4s} {'chained':>9s} {'max':>4s}  "
          f"first isolated difference: the value rounded nearest a tie")
    for i, row in enumerate(rows):
        if args.all or row.isolated_differing or i % 8 == 0 or i == len(rows) - 1:
            print(row.line())
    differing = [r for r in rows if r.isolated_differing]
    print(f"{len(rows)} quantized tensors compared; {len(differing)} differ in isolation "
          f"({sum(r.isolated_differing for r in rows)} elements of "
          f"{sum(r.elements for r in rows)}), by at most "
          f"{max((r.isolated_max for r in rows), default=0)} step(s)")
    theirs, ours = comparison.ort_output, comparison.compiled_output
    for label, output in (("ONNX Runtime", theirs), ("heterocc", ours)):
        gap = np.abs(output.astype(np.float64) - float_output)
        print(f"{label:12s} against the float model: max|diff| {gap.max():.3f}, "
              f"mean {gap.mean():.3f}")
    print(f"heterocc against ONNX Runtime: max|diff| "
          f"{np.abs(ours.astype(np.float64) - theirs).max():.3f}; output range "
          f"[{float_output.min():.1f}, {float_output.max():.1f}]; top-1 float / ORT / "
          f"heterocc: {int(float_output.argmax())} / {int(theirs.argmax())} / "
          f"{int(ours.argmax())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
