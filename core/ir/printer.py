"""A readable text form of the Graph IR."""

from __future__ import annotations

import numpy as np

from .graph import Graph, Node, Value


def _format_attr(value) -> str:
    if isinstance(value, Graph):
        return f"<graph {value.name}: {len(value.nodes)} nodes>"
    if isinstance(value, np.ndarray):
        if value.size <= 8:
            return f"array({value.tolist()}, {value.dtype})"
        return f"array<{value.dtype}{list(value.shape)}>"
    if isinstance(value, float):
        return f"{value:g}"
    return repr(value)


def _format_value(v: Value | None) -> str:
    if v is None:
        return "_"
    if v.is_const and v.data.size <= 4:
        return f"{v.data.tolist()!r}:{v.type.dtype}"
    return f"%{v.name}"


def format_node(node: Node, indent: str = "  ") -> list[str]:
    outs = ", ".join(f"%{v.name}: {v.type}" for v in node.outputs)
    args = ", ".join(_format_value(v) for v in node.inputs)
    attrs = ", ".join(f"{k}={_format_attr(v)}" for k, v in node.attrs.items()
                      if v is not None)
    attrs = f" {{{attrs}}}" if attrs else ""
    if node.body is None:
        return [f"{indent}{outs} = {node.op}({args}){attrs}"]
    lines = [f"{indent}{outs} = {node.name}({args}){attrs} {{"]
    lines += _format_body(node.body, indent + "  ")
    lines.append(f"{indent}}}")
    return lines


def _format_body(graph: Graph, indent: str) -> list[str]:
    params = ", ".join(f"%{v.name}: {v.type}" for v in graph.inputs)
    lines = [f"{indent}fn ({params}) {{"]
    for n in graph.nodes:
        lines += format_node(n, indent + "  ")
    lines.append(f"{indent}  return {', '.join(_format_value(v) for v in graph.outputs)}")
    lines.append(f"{indent}}}")
    return lines


def format_graph(graph: Graph) -> str:
    """The whole graph, one node a line, functions with their bodies indented."""
    consts = graph.constants()
    header = [f"graph {graph.name} ("
              + ", ".join(f"%{v.name}: {v.type}" for v in graph.inputs) + ")"]
    big = [v for v in consts if v.data.size > 4]
    if big:
        header.append(f"  # {len(big)} constants, {sum(v.type.nbytes for v in big)} bytes")
    body = []
    for n in graph.nodes:
        body += format_node(n)
    body.append("  return " + ", ".join(_format_value(v) for v in graph.outputs))
    return "\n".join(header + body)
