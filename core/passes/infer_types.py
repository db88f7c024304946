"""Type inference over a whole graph."""

from __future__ import annotations

from dataclasses import replace

from ..ir.graph import Graph, Value
from ..ops import get_op, infer_node_types
from .manager import register_pass
from .rewrite import substitute


@register_pass("infer_types")
def infer_types(graph: Graph) -> Graph:
    """Recompute every node's output types from its inputs with the op registry.

    Outputs whose type changed get new values; raises TypeInferenceError where
    an op rejects its inputs.
    """
    mapping: dict[Value, Value] = {}
    nodes = []
    for node in graph.nodes:
        inputs = [mapping.get(v, v) if v is not None else None for v in node.inputs]
        if node.body is not None:
            body = infer_types(node.body)
            types = [v.type for v in body.outputs]
            node = replace(node, inputs=inputs, body=body)
        else:
            op = get_op(node.op)
            types = infer_node_types(op, [v.type if v is not None else None for v in inputs],
                                     [v.data if v is not None else None for v in inputs],
                                     node.attrs, len(node.outputs), node.name)
            node = replace(node, inputs=inputs)
        outs = []
        for v, t in zip(node.outputs, types):
            if v.type != t:
                mapping[v] = Value(v.name, t)
                outs.append(mapping[v])
            else:
                outs.append(v)
        nodes.append(replace(node, outputs=outs))
    return substitute(graph, mapping, nodes)
