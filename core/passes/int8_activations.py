"""uint8 quantized activations become int8, exactly.

A uint8 tensor ``q`` with zero point ``z`` means the real values ``(q - z) * s``.
The int8 tensor ``q - 128`` with zero point ``z - 128`` means the same reals, and
every integer op that reads it through its zero point gives the same result, so
a graph quantized with uint8 activations (ONNX Runtime's U8S8 setting, the
QOperator default) runs on a symmetric int8 x int8 GEMM core after this rewrite:

* producers: ``Requantize`` shifts its zero point and clamp bounds by -128,
  ``QuantizeLinear`` gets the zero point ``z - 128`` as int8 (its rounding and
  saturation to [0, 255] become saturation to [-128, 127]: the same integers,
  shifted);
* readers: ``ConvInteger`` / ``MatMulInteger`` and ``DequantizeLinear`` get the
  shifted zero point (an absent one was 0, so it becomes -128);
* ops that only move or compare elements (max pooling, reshapes, concatenation,
  ...) commute with the shift and pass it through;
* ``Sub(Cast(q, int32), z)`` (how ``realize_qdq`` centers an operand of a quantized
  addition) reads ``q`` through ``z`` too: it becomes ``Sub(Cast(q - 128), z - 128)``.

A uint8 value read anywhere else (another op, or a graph output) is shifted back
to uint8 for that reader, so the graph's interface and every result stay as they
were.
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import Graph, NameScope, Node, Value, constant
from ..ir.types import TensorType
from ..ops import get_op
from .infer_types import infer_types
from .manager import register_pass
from .rewrite import substitute

SHIFT = 128

#: ops whose output elements are input elements (or their max/min): they commute with
#: subtracting 128, so a shifted input gives the shifted output
_ELEMENT_MOVING = frozenset({
    "MaxPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Identity",
    "Concat", "Slice", "Gather", "Expand", "Tile", "DepthToSpace", "SpaceToDepth",
    "ReduceMax", "ReduceMin", "GlobalMaxPool"})

#: readers that see a uint8 operand only through its zero point: op -> {operand index:
#: zero-point index}
_ZERO_POINT_READERS = {"ConvInteger": {0: 2, 1: 3}, "MatMulInteger": {0: 2, 1: 3},
                       "DequantizeLinear": {0: 2}}


def _data_inputs(node: Node) -> list[Value]:
    """The element-carrying inputs of an element-moving op (not shapes, axes, indices)."""
    if node.op == "Concat":
        return [v for v in node.inputs if v is not None]
    return [node.inputs[0]]


def _shiftable_values(graph: Graph) -> set[Value]:
    """uint8 values whose producer can emit them shifted to int8."""
    shifted: set[Value] = set()
    for node in graph.nodes:
        if node.body is not None or len(node.outputs) != 1:
            continue
        out = node.outputs[0]
        if out.type.dtype != "uint8":
            continue
        if node.op == "Requantize":
            shifted.add(out)
        elif node.op == "QuantizeLinear" and (len(node.inputs) < 3 or node.inputs[2] is None
                                              or node.inputs[2].is_const):
            shifted.add(out)
        elif node.op in _ELEMENT_MOVING and all(v in shifted for v in _data_inputs(node)):
            shifted.add(out)
    return shifted


def _centering_casts(graph: Graph, shifted: set[Value]) -> dict[Node, Node]:
    """Casts of a shifted value to int32 whose one reader subtracts a constant scalar
    zero point: cast -> that Sub."""
    users = graph.consumers()
    found = {}
    for node in graph.nodes:
        if node.op != "Cast" or node.inputs[0] not in shifted or \
                node.outputs[0].type.dtype != "int32":
            continue
        readers = users.get(node.outputs[0], ())
        if len(readers) == 1 and readers[0].op == "Sub" and \
                readers[0].inputs[0] is node.outputs[0] and readers[0].inputs[1].is_const \
                and readers[0].inputs[1].data.size == 1:
            found[node] = readers[0]
    return found


def _shifted_zero_point(zero_point: Value | None, name: str) -> Value:
    data = np.zeros((), np.int64) if zero_point is None else zero_point.data.astype(np.int64)
    return constant((data - SHIFT).astype(np.int8), name)


@register_pass("uint8_to_int8")
def uint8_to_int8(graph: Graph) -> Graph:
    """Rewrite uint8 quantized activations as int8 with zero points shifted by -128
    (exact; see the module docstring)."""
    shifted = _shiftable_values(graph)
    if not shifted:
        return graph
    scope = NameScope.of(graph)
    centering = _centering_casts(graph, shifted)
    centered = {sub: cast for cast, sub in centering.items()}
    back: dict[Value, Value] = {}  # shifted value -> its uint8 copy, made on first need
    extra: dict[Node, list[Node]] = {}  # node -> the back-shifts placed before it

    def restored(v: Value, before: Node | None) -> Value:
        if v not in back:
            wide = Value(scope.fresh(f"{v.name}_i16"), TensorType(v.type.shape, "int16"))
            moved = Value(scope.fresh(f"{v.name}_plus128"), TensorType(v.type.shape, "int16"))
            back[v] = Value(scope.fresh(f"{v.name}_u8"), v.type)
            offset = constant(np.array(SHIFT, np.int16), scope.fresh(f"{v.name}_128"))
            cast = get_op("Cast")
            nodes = [Node("Cast", [v], [wide], cast.normalize_attrs({"to": 5, "saturate": 1},
                                                                    "widen"),
                          scope.fresh(f"{v.name}_widen")),
                     Node("Add", [wide, offset], [moved], {}, scope.fresh(f"{v.name}_unshift")),
                     Node("Cast", [moved], [back[v]],
                          cast.normalize_attrs({"to": 2, "saturate": 1}, "to_uint8"),
                          scope.fresh(f"{v.name}_to_uint8"))]
            extra.setdefault(before, []).extend(nodes)
        return back[v]

    nodes = []
    for node in graph.nodes:
        inputs = list(node.inputs)
        attrs = node.attrs
        readers = _ZERO_POINT_READERS.get(node.op, {})
        if node in centered:
            zero = node.inputs[1]
            inputs[1] = constant((zero.data.astype(np.int64) - SHIFT).astype(zero.type.dtype),
                                 scope.fresh(f"{node.name}_zp_s8"))
        for k, v in enumerate(node.inputs):
            if v not in shifted:
                continue
            if k in readers:
                z = readers[k]
                zero_point = inputs[z] if z < len(inputs) else None
                if zero_point is not None and not zero_point.is_const:
                    inputs[k] = restored(v, node)
                    continue
                inputs += [None] * (z + 1 - len(inputs))
                inputs[z] = _shifted_zero_point(zero_point, scope.fresh(f"{node.name}_zp_s8"))
            elif node.op in _ELEMENT_MOVING and node.outputs[0] in shifted:
                continue  # passes the shift through
            elif node in centering:
                continue  # its Sub takes the shifted zero point
            else:
                inputs[k] = restored(v, node)
        out = node.outputs[0] if node.outputs else None
        if out in shifted and node.op == "Requantize":
            attrs = {**attrs, "out_dtype": "int8", "zero_point": attrs["zero_point"] - SHIFT,
                     "qmin": attrs["qmin"] - SHIFT, "qmax": attrs["qmax"] - SHIFT}
        elif out in shifted and node.op == "QuantizeLinear":
            zero_point = inputs[2] if len(inputs) > 2 else None
            inputs += [None] * (3 - len(inputs))
            inputs[2] = _shifted_zero_point(zero_point, scope.fresh(f"{node.name}_zp_s8"))
            attrs = {**attrs, "output_dtype": 0}
        # a back-shift made for this node's operands goes right before it
        nodes.extend(extra.pop(node, []))
        nodes.append(Node(node.op, inputs, node.outputs, attrs, node.name, node.body))
    outputs = [restored(v, None) if v in shifted else v for v in graph.outputs]
    nodes.extend(extra.pop(None, []))
    # the shifted values' types (and everything downstream) follow from the new operands
    return infer_types(substitute(graph.rebuild(nodes, outputs), {}))
