"""Built-in post-training quantization (int8).

``quantize_graph(graph, calibration, options)`` runs the float graph on sample inputs,
records the range of every tensor, and inserts QuantizeLinear / DequantizeLinear pairs
around each Conv, Gemm and MatMul with constant weights (and their Relu/Clip
activation), and around each addition of two activations (a residual connection, and
its Relu): the QDQ form that ``onnxruntime.quantization.quantize_static`` produces, so
both go through the same ``realize_qdq`` pass to integer arithmetic afterwards.
:class:`QuantizationOptions` chooses per-tensor or per-channel weights, symmetric or
asymmetric activations, min-max or percentile calibration, and nodes to leave float.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from .errors import InputError
from .frontend.onnx import from_onnx, load_model
from .frontend.to_onnx import DEFAULT_OPSET, graph_to_onnx
from .ir.graph import Graph, NameScope, Node, Value, constant
from .ir.types import TensorType
from .ops import get_op
from .passes import PassManager
from .passes.rewrite import single_consumer
from .runtime.interpreter import evaluate

_LINEAR_OPS = ("Conv", "Gemm", "MatMul")
_ACTIVATIONS = ("Relu", "Clip")
CALIBRATION_METHODS = ("minmax", "percentile")


@dataclass(frozen=True)
class QuantizationOptions:
    """How the built-in quantizer quantizes (the defaults: what it always did, plus
    residual additions).

    ``per_channel``: one weight scale per output channel (else one per tensor);
    ``symmetric``: activations with zero point 0 over [-max, max] (else asymmetric
    int8 over [min, max] with a zero point, as quantize_static's default); ``method``:
    ``minmax`` (the extremes over every sample) or ``percentile`` (each sample's
    ``percentile``-th percentile of the values, the largest over samples: outliers
    clipped); ``exclude``: node names or op types left float; ``residual_adds``:
    quantize additions of two activations (residual connections)."""

    per_channel: bool = False
    symmetric: bool = True
    method: str = "minmax"
    percentile: float = 99.99
    exclude: tuple[str, ...] = ()
    residual_adds: bool = True

    def __post_init__(self):
        if self.method not in CALIBRATION_METHODS:
            raise InputError(f"calibration method {self.method!r}: use one of "
                             f"{', '.join(CALIBRATION_METHODS)}")
        if not 50.0 < self.percentile <= 100.0:
            raise InputError(f"percentile {self.percentile}: give a value in (50, 100]")
        object.__setattr__(self, "exclude", tuple(self.exclude))

    def excludes(self, node: Node) -> bool:
        return node.name in self.exclude or node.op in self.exclude


@dataclass(frozen=True)
class Range:
    """The values a tensor took over the calibration samples."""

    low: float
    high: float

    def union(self, other: Range) -> Range:
        return Range(min(self.low, other.low), max(self.high, other.high))


def _sample_range(data: np.ndarray, options: QuantizationOptions) -> Range:
    if options.method == "percentile":
        if options.symmetric:
            bound = float(np.percentile(np.abs(data), options.percentile))
            return Range(-bound, bound)
        low, high = np.percentile(data, [100.0 - options.percentile, options.percentile])
        return Range(float(low), float(high))
    return Range(float(data.min()), float(data.max()))


def calibrate(graph: Graph, samples: Iterable[Sequence[np.ndarray] | Mapping],
              options: QuantizationOptions | None = None) -> dict[Value, Range]:
    """The range every non-constant float tensor takes over ``samples``."""
    options = options or QuantizationOptions()
    ranges: dict[Value, Range] = {}
    count = 0
    for sample in samples:
        if isinstance(sample, Mapping):
            sample = [sample[v.name] for v in graph.inputs]
        record: dict[Value, np.ndarray] = {}
        evaluate(graph, list(sample), record=record)
        for v, data in record.items():
            if data.dtype.kind == "f" and data.size:
                seen = _sample_range(data, options)
                ranges[v] = ranges[v].union(seen) if v in ranges else seen
        count += 1
    if count == 0:
        raise InputError("calibration needs at least one sample input")
    return ranges


def _scale(max_abs: float) -> np.float32:
    return np.float32(max(max_abs, 1e-8) / 127.0)


def activation_params(seen: Range, symmetric: bool) -> tuple[np.float32, np.int8]:
    """Scale and int8 zero point of an activation over ``seen`` (the range always
    holds 0, so that zero is exact, as padding and ReLU need)."""
    if symmetric:
        return _scale(max(abs(seen.low), abs(seen.high))), np.int8(0)
    low, high = min(seen.low, 0.0), max(seen.high, 0.0)
    scale = np.float32(max(high - low, 1e-8) / 255.0)
    zero = int(np.clip(np.rint(-128.0 - low / float(scale)), -128, 127))
    return scale, np.int8(zero)


def _qdq(x: Value, params: tuple[np.float32, np.int8],
         scope: NameScope) -> tuple[list[Node], Value]:
    """QuantizeLinear + DequantizeLinear of ``x`` (int8, scale and zero point)."""
    scale, zero = params
    s = constant(np.asarray(scale, np.float32), scope.fresh(f"{x.name}_scale"))
    z = constant(np.asarray(zero, np.int8), scope.fresh(f"{x.name}_zero"))
    q = Value(scope.fresh(f"{x.name}_q"), TensorType(x.type.shape, "int8"))
    dq = Value(scope.fresh(f"{x.name}_dq"), x.type)
    nodes = [Node("QuantizeLinear", [x, s, z], [q], {}, scope.fresh(f"{x.name}_quantize")),
             Node("DequantizeLinear", [q, s, z], [dq], {}, scope.fresh(f"{x.name}_dequantize"))]
    for n in nodes:
        n.attrs = get_op(n.op).normalize_attrs(n.attrs, n.name)
    return nodes, dq


def _output_channel_axis(node: Node, w: Value) -> int:
    """The weight axis of the layer's output channels: a Conv's first, a MatMul's last,
    a Gemm's first when it transposes B."""
    if node.op == "Conv" or (node.op == "Gemm" and node.attrs.get("transB", 0)):
        return 0
    return len(w.type.shape) - 1


def _quantized_weight(node: Node, w: Value, per_channel: bool,
                      scope: NameScope) -> tuple[list[Node], Value, np.ndarray]:
    """The int8 weight (symmetric, zero point 0) and its DequantizeLinear; the scale is
    a scalar, or one per output channel with ``per_channel``."""
    axis = _output_channel_axis(node, w)
    if per_channel and len(w.type.shape) > 1:
        others = tuple(a for a in range(w.data.ndim) if a != axis)
        scale = (np.maximum(np.max(np.abs(w.data), axis=others), 1e-8) / 127.0).astype(
            np.float32)
        shaped = np.expand_dims(scale, others)
        zero = np.zeros(scale.shape, np.int8)
    else:
        scale = shaped = _scale(float(np.max(np.abs(w.data))))
        zero = np.int8(0)
    wq = np.clip(np.rint(w.data / shaped), -127, 127).astype(np.int8)
    qv = constant(wq, scope.fresh(f"{w.name}_int8"))
    s = constant(np.asarray(scale, np.float32), scope.fresh(f"{w.name}_scale"))
    z = constant(np.asarray(zero, np.int8), scope.fresh(f"{w.name}_zero"))
    dq = Value(scope.fresh(f"{w.name}_dq"), w.type)
    attrs = {"axis": axis} if np.ndim(scale) else {}
    node = Node("DequantizeLinear", [qv, s, z], [dq], attrs,
                scope.fresh(f"{w.name}_dequantize"))
    node.attrs = get_op(node.op).normalize_attrs(node.attrs, node.name)
    return [node], dq, np.asarray(scale, np.float32)


def _quantized_bias(b: Value, scale: np.ndarray, scope: NameScope) -> tuple[list[Node], Value]:
    """The int32 bias at the product's scale (input scale x weight scale, per channel
    where the weight's is)."""
    scale = np.asarray(scale, np.float32)
    bq = np.clip(np.rint(b.data.astype(np.float64) / scale.astype(np.float64)),
                 -2 ** 31, 2 ** 31 - 1)
    qv = constant(bq.astype(np.int32), scope.fresh(f"{b.name}_int32"))
    s = constant(scale, scope.fresh(f"{b.name}_scale"))
    dq = Value(scope.fresh(f"{b.name}_dq"), b.type)
    attrs = {"axis": 0} if scale.ndim else {}
    node = Node("DequantizeLinear", [qv, s], [dq], attrs, scope.fresh(f"{b.name}_dequantize"))
    node.attrs = get_op(node.op).normalize_attrs(node.attrs, node.name)
    return [node], dq


def quantize_graph(graph: Graph, calibration: Iterable,
                   options: QuantizationOptions | None = None) -> Graph:
    """The graph with every Conv / Gemm / MatMul that has constant float32 weights
    (plus a MatMul's bias Add, and a following Relu or Clip), and every addition of two
    activations (plus a following Relu), wrapped in int8 QDQ pairs, scales from
    ``calibration`` (sample inputs, as lists in input order or dicts by name);
    ``options``: see :class:`QuantizationOptions`."""
    options = options or QuantizationOptions()
    ranges = calibrate(graph, calibration, options)
    scope = NameScope.of(graph)
    only_reader = single_consumer(graph)
    mapping: dict[Value, Value] = {}
    before: dict[Node, list[Node]] = {}
    after: dict[Node, list[Node]] = {}
    replaced: dict[Node, Node] = {}

    def params(v: Value) -> tuple[np.float32, np.int8]:
        return activation_params(ranges[v], options.symmetric)

    def with_activation(last: Node) -> Node:
        act = only_reader.get(last.outputs[0])
        return act if act is not None and act.op in _ACTIVATIONS \
            and not options.excludes(act) else last

    for node in graph.nodes:
        if node.body is not None or options.excludes(node):
            continue
        if node.op == "Add" and options.residual_adds:
            if not _is_residual_add(node, ranges):
                continue
            tail = with_activation(node)
            if tail.outputs[0] not in ranges:
                continue
            prep, inputs = [], []
            for x in node.inputs:
                if x in mapping:  # a quantized layer's output: its DQ, through _remap
                    inputs.append(x)
                    continue
                # any other input gets a pair of its own, read by this addition alone (an
                # earlier reader of the value keeps reading it as it was)
                x_nodes, x_dq = _qdq(x, params(x), scope)
                prep += x_nodes
                inputs.append(x_dq)
            before[node] = prep
            replaced[node] = Node(node.op, inputs, node.outputs, node.attrs, node.name)
        elif node.op in _LINEAR_OPS:
            x, w = node.inputs[0], node.inputs[1]
            if not w.is_const or w.type.dtype != "float32" or x.is_const or x not in ranges:
                continue
            if node.op == "Gemm" and node.attrs.get("transA", 0):
                continue
            out = node.outputs[0]
            bias_add = _bias_add(node, only_reader.get(out))
            tail = with_activation(bias_add or node)
            if tail.outputs[0] not in ranges:
                continue
            x_params = params(x)
            x_nodes, x_dq = _qdq(x, x_params, scope)
            w_nodes, w_dq, w_scale = _quantized_weight(node, w, options.per_channel, scope)
            inputs = [x_dq, w_dq]
            prep = x_nodes + w_nodes
            bias_scale = x_params[0] * w_scale
            if len(node.inputs) > 2 and node.inputs[2] is not None:
                if not node.inputs[2].is_const:
                    continue
                b_nodes, b_dq = _quantized_bias(node.inputs[2], bias_scale, scope)
                prep += b_nodes
                inputs.append(b_dq)
            if bias_add is not None:  # MatMul + Add: the Add's constant is the layer's bias
                bias = bias_add.inputs[1] if bias_add.inputs[0] is out else bias_add.inputs[0]
                b_nodes, b_dq = _quantized_bias(bias, bias_scale, scope)
                prep += b_nodes
                replaced[bias_add] = Node("Add", [out, b_dq], bias_add.outputs,
                                          bias_add.attrs, bias_add.name)
            replaced[node] = Node(node.op, inputs, node.outputs, node.attrs, node.name)
            before[node] = prep
        else:
            continue
        y = tail.outputs[0]
        y_nodes, y_dq = _qdq(y, params(y), scope)
        after[tail] = y_nodes
        mapping[y] = y_dq
    nodes = []
    for node in graph.nodes:
        nodes.extend(before.get(node, []))
        nodes.append(replaced.get(node, node))
        nodes.extend(after.get(node, []))
    # readers of a quantized value read its dequantized form; the Quantize node itself
    # must keep reading the float value
    quantizers = {n for group in after.values() for n in group}
    out_nodes = [n if n in quantizers else _remap(n, mapping) for n in nodes]
    return graph.rebuild(out_nodes, [mapping.get(v, v) for v in graph.outputs])


def _is_residual_add(node: Node, ranges: Mapping[Value, Range]) -> bool:
    """An addition of two float activations of one shape (a residual connection)."""
    if len(node.inputs) != 2 or any(v is None or v.is_const for v in node.inputs):
        return False
    a, b = node.inputs
    return all(v in ranges for v in (a, b, node.outputs[0])) \
        and a.type.shape == b.type.shape and a.type.dtype == "float32"


def _bias_add(matmul: Node, reader: Node | None) -> Node | None:
    """The Add that gives a MatMul its bias (a float32 constant along the output's last
    axis, the form torch exports a Linear layer in), or None."""
    if matmul.op != "MatMul" or reader is None or reader.op != "Add":
        return None
    out = matmul.outputs[0]
    others = [v for v in reader.inputs if v is not out]
    if len(others) != 1 or not others[0].is_const or others[0].type.dtype != "float32":
        return None
    columns = out.type.shape[-1]
    bias = others[0].data
    if bias.size != columns or bias.shape[-1:] != (columns,):
        return None
    return reader


def _remap(node: Node, mapping: Mapping[Value, Value]) -> Node:
    inputs = [mapping.get(v, v) if v is not None else None for v in node.inputs]
    if inputs == node.inputs:
        return node
    return Node(node.op, inputs, node.outputs, node.attrs, node.name, node.body)


#: the float simplifications run before quantizing a model for export (the compile
#: pipeline runs the same ones before its ``quantize`` step)
FLOAT_SIMPLIFICATIONS = ("expand_qoperator", "infer_types", "fold_constants", "simplify",
                         "fold_batchnorm", "fold_constants", "cse", "dce")


def quantize_model(model, calibration: Iterable,
                   options: QuantizationOptions | None = None) -> onnx.ModelProto:
    """``model`` (path, bytes or ModelProto) quantized by the built-in quantizer, as a
    QDQ ONNX model: what ``heterocc.compile(model, calibration=..., quantization=...)``
    compiles, in the form ``onnxruntime.quantization.quantize_static`` writes (int8),
    for ONNX Runtime or any other tool to run."""
    proto = load_model(model)
    graph = PassManager(list(FLOAT_SIMPLIFICATIONS)).run(from_onnx(proto))
    opset = max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")),
                default=DEFAULT_OPSET)
    return graph_to_onnx(quantize_graph(graph, calibration, options), opset=max(opset, 13))


def batchnorms_between_qdq(model: onnx.ModelProto) -> list[str]:
    """The BatchNormalization nodes of a QDQ model that read a DequantizeLinear: a model
    quantized without ``onnxruntime.quantization.quant_pre_process`` (which folds each
    BatchNorm into its convolution before quantizing). Folding them afterwards would
    drop the rounding their quantized input had, so the results would differ from what
    the quantized model defines: they stay float, on the CPU, with their Q/DQ pairs."""
    producers = {o: n for n in model.graph.node for o in n.output}
    return [n.name or n.output[0] for n in model.graph.node
            if n.op_type == "BatchNormalization" and n.input
            and getattr(producers.get(n.input[0]), "op_type", "") == "DequantizeLinear"]
