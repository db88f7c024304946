"""Built-in post-training quantization (int8, per-tensor symmetric).

``quantize_graph(graph, calibration)`` runs the float graph on sample inputs,
records the range of every tensor, and inserts QuantizeLinear /
DequantizeLinear pairs around each Conv, Gemm and MatMul with constant
weights (and their Relu/Clip activation): the QDQ form that
``onnxruntime.quantization.quantize_static`` produces, so both go through the
same ``realize_qdq`` pass to integer arithmetic afterwards.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

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


def calibrate(graph: Graph, samples: Iterable[Sequence[np.ndarray] | Mapping]) -> dict[Value,
                                                                                        float]:
    """Largest absolute value every non-constant tensor takes over ``samples``."""
    ranges: dict[Value, float] = {}
    count = 0
    for sample in samples:
        if isinstance(sample, Mapping):
            sample = [sample[v.name] for v in graph.inputs]
        record: dict[Value, np.ndarray] = {}
        evaluate(graph, list(sample), record=record)
        for v, data in record.items():
            if data.dtype.kind == "f" and data.size:
                ranges[v] = max(ranges.get(v, 0.0), float(np.max(np.abs(data))))
        count += 1
    if count == 0:
        raise InputError("calibration needs at least one sample input")
    return ranges


def _scale(max_abs: float) -> np.float32:
    return np.float32(max(max_abs, 1e-8) / 127.0)


def _qdq(x: Value, scale: np.float32, scope: NameScope) -> tuple[list[Node], Value]:
    """QuantizeLinear + DequantizeLinear of ``x`` (int8, zero point 0)."""
    s = constant(np.asarray(scale, np.float32), scope.fresh(f"{x.name}_scale"))
    z = constant(np.asarray(0, np.int8), scope.fresh(f"{x.name}_zero"))
    q = Value(scope.fresh(f"{x.name}_q"), TensorType(x.type.shape, "int8"))
    dq = Value(scope.fresh(f"{x.name}_dq"), x.type)
    nodes = [Node("QuantizeLinear", [x, s, z], [q], {}, scope.fresh(f"{x.name}_quantize")),
             Node("DequantizeLinear", [q, s, z], [dq], {}, scope.fresh(f"{x.name}_dequantize"))]
    for n in nodes:
        n.attrs = get_op(n.op).normalize_attrs(n.attrs, n.name)
    return nodes, dq


def _quantized_weight(w: Value, scope: NameScope) -> tuple[list[Node], Value, np.float32]:
    scale = _scale(float(np.max(np.abs(w.data))))
    wq = np.clip(np.rint(w.data / scale), -127, 127).astype(np.int8)
    qv = constant(wq, scope.fresh(f"{w.name}_int8"))
    s = constant(np.asarray(scale, np.float32), scope.fresh(f"{w.name}_scale"))
    z = constant(np.asarray(0, np.int8), scope.fresh(f"{w.name}_zero"))
    dq = Value(scope.fresh(f"{w.name}_dq"), w.type)
    node = Node("DequantizeLinear", [qv, s, z], [dq], {}, scope.fresh(f"{w.name}_dequantize"))
    node.attrs = get_op(node.op).normalize_attrs(node.attrs, node.name)
    return [node], dq, scale


def _quantized_bias(b: Value, scale: float, scope: NameScope) -> tuple[list[Node], Value]:
    bq = np.clip(np.rint(b.data.astype(np.float64) / scale), -2 ** 31, 2 ** 31 - 1)
    qv = constant(bq.astype(np.int32), scope.fresh(f"{b.name}_int32"))
    s = constant(np.asarray(scale, np.float32), scope.fresh(f"{b.name}_scale"))
    dq = Value(scope.fresh(f"{b.name}_dq"), b.type)
    node = Node("DequantizeLinear", [qv, s], [dq], {}, scope.fresh(f"{b.name}_dequantize"))
    node.attrs = get_op(node.op).normalize_attrs(node.attrs, node.name)
    return [node], dq


def quantize_graph(graph: Graph, calibration: Iterable) -> Graph:
    """The graph with every Conv / Gemm / MatMul that has constant float32 weights
    (plus a MatMul's bias Add, and a following Relu or Clip) wrapped in int8 QDQ pairs,
    scales from ``calibration`` (sample inputs, as lists in input order or dicts by
    name)."""
    ranges = calibrate(graph, calibration)
    scope = NameScope.of(graph)
    only_reader = single_consumer(graph)
    mapping: dict[Value, Value] = {}
    before: dict[Node, list[Node]] = {}
    after: dict[Node, list[Node]] = {}
    replaced: dict[Node, Node] = {}
    for node in graph.nodes:
        if node.op not in _LINEAR_OPS or node.body is not None:
            continue
        x, w = node.inputs[0], node.inputs[1]
        if not w.is_const or w.type.dtype != "float32" or x.is_const or x not in ranges:
            continue
        if node.op == "Gemm" and node.attrs.get("transA", 0):
            continue
        out = node.outputs[0]
        bias_add = _bias_add(node, only_reader.get(out))
        last = bias_add or node
        act = only_reader.get(last.outputs[0])
        tail = act if act is not None and act.op in _ACTIVATIONS else last
        y = tail.outputs[0]
        if y not in ranges:
            continue
        x_nodes, x_dq = _qdq(x, _scale(ranges[x]), scope)
        w_nodes, w_dq, w_scale = _quantized_weight(w, scope)
        inputs = [x_dq, w_dq]
        prep = x_nodes + w_nodes
        if len(node.inputs) > 2 and node.inputs[2] is not None:
            if not node.inputs[2].is_const:
                continue
            b_nodes, b_dq = _quantized_bias(node.inputs[2], float(_scale(ranges[x]) * w_scale),
                                            scope)
            prep += b_nodes
            inputs.append(b_dq)
        if bias_add is not None:  # MatMul + Add: the Add's constant is the layer's bias
            bias = bias_add.inputs[1] if bias_add.inputs[0] is out else bias_add.inputs[0]
            b_nodes, b_dq = _quantized_bias(bias, float(_scale(ranges[x]) * w_scale), scope)
            prep += b_nodes
            replaced[bias_add] = Node("Add", [out, b_dq], bias_add.outputs, bias_add.attrs,
                                      bias_add.name)
        replaced[node] = Node(node.op, inputs, node.outputs, node.attrs, node.name)
        before[node] = prep
        y_nodes, y_dq = _qdq(y, _scale(ranges[y]), scope)
        after[tail] = y_nodes
        mapping[y] = y_dq
    nodes = []
    for node in graph.nodes:
        nodes.extend(before.get(node, []))
        nodes.append(replaced.get(node, node))
        nodes.extend(after.get(node, []))
    # readers of a quantized output read its dequantized form; the Quantize node
    # itself must keep reading the float value
    quantizers = {n for group in after.values() for n in group}
    out_nodes = [n if n in quantizers else _remap(n, mapping) for n in nodes]
    return graph.rebuild(out_nodes, [mapping.get(v, v) for v in graph.outputs])


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


def quantize_model(model, calibration: Iterable) -> onnx.ModelProto:
    """``model`` (path, bytes or ModelProto) quantized by the built-in quantizer, as a
    QDQ ONNX model: what ``heterocc.compile(model, calibration=...)`` compiles, in the
    form ``onnxruntime.quantization.quantize_static`` writes (int8, symmetric, zero
    points 0), for ONNX Runtime or any other tool to run."""
    proto = load_model(model)
    graph = PassManager(list(FLOAT_SIMPLIFICATIONS)).run(from_onnx(proto))
    opset = max((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")),
                default=DEFAULT_OPSET)
    return graph_to_onnx(quantize_graph(graph, calibration), opset=max(opset, 13))


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
