"""Graphviz (dot) rendering of a graph: one box per node, functions as clusters."""

from __future__ import annotations

from .graph import Graph, Value

#: fill colors of function clusters, one per target in order of appearance
_PALETTE = ("lightblue", "orange", "palegreen", "plum", "khaki", "lightpink", "lightcyan")


def _quote(s: str) -> str:
    return '"' + s.replace('"', r"\"") + '"'


def to_dot(graph: Graph, placement: dict[str, str] | None = None,
           default_target: str = "reference") -> str:
    """The graph as dot text; function nodes become clusters labeled and colored by
    target: their ``target`` attribute, else ``placement`` by node name, else
    ``default_target`` (the compile's fallback target)."""
    placement = placement or {}
    colors: dict[str, str] = {}
    lines = [f"digraph {_quote(graph.name)} {{", "  rankdir=TB;",
             "  node [shape=box, fontsize=10];"]
    ids: dict[Value, str] = {}
    for i, v in enumerate(graph.inputs):
        ids[v] = f"in{i}"
        lines.append(f"  in{i} [label={_quote(f'{v.name}: {v.type}')}, shape=ellipse];")
    edges = []
    for k, node in enumerate(graph.nodes):
        if node.body is None:
            nid = f"n{k}"
            lines.append(f"  {nid} [label={_quote(node.op)}];")
            for v in node.inputs:
                if v is not None and v in ids:
                    edges.append((ids[v], nid, str(v.type)))
            for v in node.outputs:
                ids[v] = nid
            continue
        target = node.attrs.get("target") or placement.get(node.name, default_target)
        color = colors.setdefault(target, _PALETTE[len(colors) % len(_PALETTE)])
        lines.append(f"  subgraph cluster_{k} {{")
        lines.append(f"    label={_quote(f'{node.name} [{target}]')}; style=filled; "
                     f"fillcolor={_quote(color)};")
        inner: dict[Value, str] = dict(zip(node.body.inputs, node.inputs))  # param -> arg
        local: dict[Value, str] = {}
        for j, inner_node in enumerate(node.body.nodes):
            nid = f"n{k}_{j}"
            lines.append(f"    {nid} [label={_quote(inner_node.op)}, fillcolor=white, "
                         "style=filled];")
            for v in inner_node.inputs:
                if v is None or v.is_const:
                    continue
                if v in local:
                    edges.append((local[v], nid, str(v.type)))
                elif v in inner and inner[v] in ids:
                    edges.append((ids[inner[v]], nid, str(v.type)))
            for v in inner_node.outputs:
                local[v] = nid
        lines.append("  }")
        for out, ret in zip(node.outputs, node.body.outputs):
            if ret in local:
                ids[out] = local[ret]
    for i, v in enumerate(graph.outputs):
        lines.append(f"  out{i} [label={_quote(v.name)}, shape=ellipse];")
        if v in ids:
            edges.append((ids[v], f"out{i}", str(v.type)))
    lines += [f"  {a} -> {b} [label={_quote(t)}, fontsize=8];" for a, b, t in edges]
    lines.append("}")
    return "\n".join(lines)
