"""Dead-code elimination."""

from __future__ import annotations

from ..ir.graph import Graph
from .manager import register_pass


@register_pass("dce")
def eliminate_dead_code(graph: Graph) -> Graph:
    """Drop nodes none of whose outputs reaches a graph output."""
    live = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):
        if any(v in live for v in node.outputs):
            kept.append(node)
            live.update(v for v in node.inputs if v is not None)
    return graph.rebuild(reversed(kept))
