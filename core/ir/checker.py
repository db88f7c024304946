"""Well-formedness of a Graph: acyclic, every input defined, types consistent."""

from __future__ import annotations

from ..errors import GraphError, TypeInferenceError
from ..ops import get_op, has_op, infer_node_types
from .graph import Graph, Node, Value


def check_graph(graph: Graph, check_types: bool = True) -> None:
    """Raise GraphError naming the first offending node or value.

    Nodes must be in a topological order (which also proves the graph acyclic),
    every input must be a graph input, a constant or an earlier node's output,
    no value may be defined twice, and (with ``check_types``) each node's
    output types must be what its op's type inference says.
    """
    defined: set[Value] = set(graph.inputs)
    if len(defined) != len(graph.inputs):
        raise GraphError(f"graph {graph.name!r}: an input is listed twice")
    producers = {v: n for n in graph.nodes for v in n.outputs}
    for node in graph.nodes:
        for k, v in enumerate(node.inputs):
            if v is None or v.is_const or v in defined:
                continue
            if v in producers:
                raise GraphError(f"node {node.name!r} ({node.op}) reads %{v.name} before node "
                                 f"{producers[v].name!r} produces it: the graph has a cycle or "
                                 "is not topologically sorted")
            raise GraphError(f"node {node.name!r} ({node.op}) input {k} %{v.name} is not "
                             "defined: not a graph input, a constant or a node output")
        for v in node.outputs:
            if v in defined:
                raise GraphError(f"value %{v.name} is defined twice (again by node {node.name!r})")
            defined.add(v)
        if node.body is not None:
            _check_function(node)
        elif check_types:
            _check_node_types(node)
    for v in graph.outputs:
        if not (v.is_const or v in defined):
            raise GraphError(f"graph output %{v.name} is not defined")


def _check_function(node: Node) -> None:
    body = node.body
    if len(body.inputs) != len(node.inputs):
        raise GraphError(f"function {node.name!r} takes {len(body.inputs)} inputs, "
                         f"called with {len(node.inputs)}")
    for arg, param in zip(node.inputs, body.inputs):
        if arg is not None and arg.type != param.type:
            raise GraphError(f"function {node.name!r}: argument %{arg.name} is {arg.type}, "
                             f"parameter %{param.name} is {param.type}")
    for out, ret in zip(node.outputs, body.outputs):
        if out.type != ret.type:
            raise GraphError(f"function {node.name!r}: output %{out.name} is {out.type}, "
                             f"body returns {ret.type}")
    check_graph(body)


def _check_node_types(node: Node) -> None:
    if not has_op(node.op):
        raise GraphError(f"node {node.name!r}: unknown op {node.op!r}")
    op = get_op(node.op)
    types = [v.type if v is not None else None for v in node.inputs]
    values = [v.data if v is not None else None for v in node.inputs]
    try:
        expected = infer_node_types(op, types, values, node.attrs, len(node.outputs), node.name)
    except TypeInferenceError as exc:
        raise GraphError(str(exc)) from None
    for v, t in zip(node.outputs, expected):
        if v.type != t:
            raise GraphError(f"node {node.name!r} ({node.op}): output %{v.name} is typed "
                             f"{v.type}, type inference gives {t}")
