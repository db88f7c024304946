"""Small tools for passes that rewrite a graph without mutating it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from ..errors import GraphError
from ..ir.graph import FUNCTION_OP, Graph, Node, Value


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


def outline(graph: Graph, groups: list[list[Node]],
            make_call: Callable[[list[Node], Graph], tuple[str, dict]]) -> Graph:
    """Wrap each group of nodes in a function node; other nodes stay as they are.

    Each group must be convex (no path leaves it and comes back).
    ``make_call(group_nodes, body) -> (name, attrs)`` names each function
    node; ``body.name`` is set to that name. Function parameters are the
    group's non-constant inputs produced outside it; its outputs are the values
    read outside it or returned by the graph.
    """
    group_of: dict[Node, int] = {n: g for g, nodes in enumerate(groups) for n in nodes}
    units: list[list[Node]] = [list(nodes) for nodes in groups]
    unit_of = dict(group_of)
    for node in graph.nodes:
        if node not in unit_of:
            unit_of[node] = len(units)
            units.append([node])
    order_index = {n: i for i, n in enumerate(graph.nodes)}
    for nodes in units:
        nodes.sort(key=order_index.__getitem__)
    producer_unit = {v: unit_of[n] for n in graph.nodes for v in n.outputs}
    deps = [{producer_unit[v] for n in nodes for v in n.inputs
             if v is not None and v in producer_unit} - {u} for u, nodes in enumerate(units)]
    order: list[int] = []
    done: set[int] = set()
    pending = sorted(range(len(units)), key=lambda u: order_index[units[u][0]])
    while pending:
        ready = next((u for u in pending if deps[u] <= done), None)
        if ready is None:
            raise GraphError("outlining would create a cycle: a group is not convex")
        pending.remove(ready)
        order.append(ready)
        done.add(ready)

    returned = set(graph.outputs)
    users = graph.consumers()
    mapping: dict[Value, Value] = {}
    new_nodes: list[Node] = []
    for u in order:
        nodes = units[u]
        if u >= len(groups):
            new_nodes.append(nodes[0])
            continue
        inside = set(nodes)
        params: dict[Value, Value] = {}
        for node in nodes:
            for v in node.inputs:
                if v is not None and not v.is_const and v not in params \
                        and producer_unit.get(v) != u:
                    params[v] = Value(v.name, v.type)
        body_nodes = [replace(n, inputs=[params.get(v, v) if v is not None else None
                                         for v in n.inputs]) for n in nodes]
        outs = [v for n in nodes for v in n.outputs
                if v in returned or any(x not in inside for x in users.get(v, ()))]
        body = Graph(list(params.values()), outs, body_nodes)
        name, attrs = make_call(nodes, body)
        body.name = name
        call_outs = [Value(v.name, v.type) for v in outs]
        mapping.update(zip(outs, call_outs))
        new_nodes.append(Node(FUNCTION_OP, list(params), call_outs, attrs, name, body))
    return substitute(graph, mapping, new_nodes)
