"""The way back: a Graph IR whose nodes are all ONNX ops, as an ONNX model.

Used to write out what a graph pass made of a model, e.g. the QDQ model that the
built-in quantizer makes (``heterocc quantize``), so that other tools (ONNX Runtime,
Netron) can run or show it. Constants become initializers; attributes are written
as the IR holds them (defaults made explicit).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import onnx
from onnx import defs, helper, numpy_helper

from ..errors import CompileError
from ..ir.graph import Graph, Node, Value
from ..ir.types import np_dtype
from ..ops import get_op

#: the opset written when the caller gives none (one ONNX Runtime runs)
DEFAULT_OPSET = 21


def graph_to_onnx(graph: Graph, opset: int = DEFAULT_OPSET,
                  producer: str = "heterocc") -> onnx.ModelProto:
    """``graph`` as a checked ONNX model. Raises CompileError naming every node whose
    op is not an ONNX op (fused functions, the compiler's own integer ops)."""
    foreign = _non_onnx_nodes(graph.nodes)
    if foreign:
        listed = ", ".join(f"{node.name} ({node.op})" for node in foreign[:8])
        raise CompileError(f"the graph holds ops that are not ONNX ops: {listed}"
                           f"{' ...' if len(foreign) > 8 else ''}; write it out before "
                           "fusion and integer rewriting")
    names = _ValueNames()
    initializers, seen = [], set()
    nodes = []
    for node in graph.nodes:
        inputs = []
        for value in node.inputs:
            if value is None:
                inputs.append("")
                continue
            name = names.of(value)
            if value.is_const and value.uid not in seen:
                seen.add(value.uid)
                initializers.append(numpy_helper.from_array(np.asarray(value.data), name))
            inputs.append(name)
        op = get_op(node.op)
        schema = defs.get_schema(op.op_type, opset if not op.domain else 1, op.domain)
        nodes.append(helper.make_node(op.op_type, inputs, [names.of(v) for v in node.outputs],
                                      name=node.name or None, domain=op.domain or None,
                                      **_attributes(node, set(schema.attributes))))
    for value in graph.outputs:  # an output that is a constant needs an initializer too
        if value.is_const and value.uid not in seen:
            seen.add(value.uid)
            initializers.append(numpy_helper.from_array(np.asarray(value.data), names.of(value)))
    model = helper.make_model(
        helper.make_graph(nodes, graph.name or "main",
                          [_value_info(v, names) for v in graph.inputs],
                          [_value_info(v, names) for v in graph.outputs], initializers),
        opset_imports=_opsets(graph.nodes, opset), producer_name=producer)
    onnx.checker.check_model(model)
    return model


class _ValueNames:
    """A unique ONNX name per IR value (IR values may share a name)."""

    def __init__(self):
        self._by_uid: dict[int, str] = {}
        self._taken: set[str] = set()

    def of(self, value: Value) -> str:
        name = self._by_uid.get(value.uid)
        if name is None:
            name, k = value.name or "v", 1
            while name in self._taken:
                name, k = f"{value.name}_{k}", k + 1
            self._taken.add(name)
            self._by_uid[value.uid] = name
        return name


def _non_onnx_nodes(nodes: Iterable[Node]) -> list[Node]:
    foreign = []
    for node in nodes:
        if node.body is not None:
            foreign.append(node)
            continue
        op = get_op(node.op)
        if not defs.has(op.op_type, op.domain):
            foreign.append(node)
    return foreign


def _attributes(node: Node, known: set[str]) -> dict:
    """The node's attributes that the op's schema at the written opset has (the IR
    accepts attributes of every opset, e.g. BatchNormalization's old ``is_test``)."""
    written = {}
    for key, value in node.attrs.items():
        if value is None or key not in known:
            continue
        if isinstance(value, np.ndarray):
            value = numpy_helper.from_array(value)
        elif isinstance(value, tuple):
            value = list(value)
        written[key] = value
    return written


def _value_info(value: Value, names: _ValueNames) -> onnx.ValueInfoProto:
    elem_type = helper.np_dtype_to_tensor_dtype(np_dtype(value.type.dtype))
    shape = [d if isinstance(d, int) else str(d) for d in value.type.shape]
    return helper.make_tensor_value_info(names.of(value), elem_type, shape)


def _opsets(nodes: Iterable[Node], opset: int) -> list:
    domains = {get_op(node.op).domain for node in nodes} - {""}
    return [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in sorted(domains)]
