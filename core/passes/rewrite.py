"""Small tools for passes that rewrite a graph without mutating it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from ..ir.graph import Graph, Node, Value


def substitute(graph: Graph, mapping: Mapping[Value, Value],
               nodes: Iterable[Node] | None = None) -> Graph:
    """A new graph whose nodes (default: the graph's) read ``mapping[v]`` for every
    mapped value ``v`` (chains are followed), with outputs mapped likewise."""

    def resolve(v: Value | None) -> Value | None:
        seen = 0
        while v is not None and v in mapping:
            v = mapping[v]
            seen += 1
            if seen > len(mapping):
                raise ValueError("cyclic value substitution")
        return v

    new_nodes = []
    for n in graph.nodes if nodes is None else nodes:
        inputs = [resolve(v) for v in n.inputs]
        new_nodes.append(n if inputs == n.inputs else replace(n, inputs=inputs))
    return graph.rebuild(new_nodes, [resolve(v) for v in graph.outputs])


def single_consumer(graph: Graph) -> dict[Value, Node]:
    """Values read by exactly one node and not returned: value -> that node."""
    returned = set(graph.outputs)
    return {v: users[0] for v, users in graph.consumers().items()
            if len(users) == 1 and v not in returned}
