"""The pass moving a fused graph's constants into one buffer on transparent huge pages,
in the order its functions read them (:func:`~heterocc.runtime.memory.pool_graph_constants`),
so that the kernels built from the graph afterwards read the pool."""

from __future__ import annotations

from ..ir.graph import Graph
from ..runtime.memory import pool_graph_constants
from .manager import register_pass


@register_pass("pool_constants")
def pool_constants(graph: Graph) -> Graph:
    """``graph`` with its constants' data in one huge-page pool (same contents)."""
    pool_graph_constants(graph)
    return graph
