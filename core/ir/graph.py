"""The Graph IR: a typed dataflow DAG of op nodes, with constants and sub-functions.

A :class:`Value` is one tensor: a graph input, a constant (``value.data`` is set)
or the output of a :class:`Node`. A node applies an op from the registry, or,
when ``node.op == FUNCTION_OP``, calls a sub-graph held in ``node.body``
(fused functions and partitioned regions); the function's attributes, such as
its fusion pattern or its target, live in ``node.attrs``.

Graphs are treated as immutable by passes: a pass builds and returns a new
graph (see :func:`Graph.rebuild`), so the IR after every pass can be kept.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .types import TensorType

#: op name of a node that calls a sub-graph (``node.body``).
FUNCTION_OP = "function"

_ids = itertools.count()


@dataclass(eq=False)
class Value:
    """One tensor in a graph. ``data`` holds the contents of a constant."""

    name: str
    type: TensorType
    data: np.ndarray | None = None
    uid: int = field(default_factory=lambda: next(_ids))

    @property
    def is_const(self) -> bool:
        return self.data is not None

    def __repr__(self) -> str:
        kind = "const " if self.is_const else ""
        return f"%{self.name}: {kind}{self.type}"

    __hash__ = object.__hash__


def constant(data: np.ndarray, name: str) -> Value:
    """A constant value holding ``data``."""
    array = np.asarray(data)
    return Value(name, TensorType.of(array), array)


@dataclass(eq=False)
class Node:
    """One op application: ``outputs = op(inputs; attrs)``.

    ``inputs`` may contain ``None`` for an omitted optional input.
    """

    op: str
    inputs: list[Value | None]
    outputs: list[Value]
    attrs: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    body: Graph | None = None

    __hash__ = object.__hash__

    @property
    def is_function(self) -> bool:
        return self.body is not None

    def __repr__(self) -> str:
        return f"Node({self.name or '?'}: {self.op})"


@dataclass(eq=False)
class Graph:
    """A dataflow graph; ``nodes`` are kept in a topological order."""

    inputs: list[Value]
    outputs: list[Value]
    nodes: list[Node]
    name: str = "main"

    __hash__ = object.__hash__

    # --- queries ---------------------------------------------------------
    def producers(self) -> dict[Value, Node]:
        """Map each node output to the node producing it."""
        return {v: n for n in self.nodes for v in n.outputs}

    def consumers(self) -> dict[Value, list[Node]]:
        """Map each value to the nodes that read it (in node order, once each)."""
        users: dict[Value, list[Node]] = {}
        for n in self.nodes:
            for v in dict.fromkeys(x for x in n.inputs if x is not None):
                users.setdefault(v, []).append(n)
        return users

    def constants(self) -> list[Value]:
        """Every constant value read by a node or returned, once each."""
        seen: dict[Value, None] = {}
        for n in self.nodes:
            for v in n.inputs:
                if v is not None and v.is_const:
                    seen[v] = None
        for v in self.outputs:
            if v.is_const:
                seen[v] = None
        return list(seen)

    def walk(self) -> Iterator[tuple[Graph, Node]]:
        """Every node of this graph and of its sub-functions, depth first."""
        for n in self.nodes:
            yield self, n
            if n.body is not None:
                yield from n.body.walk()

    def op_counts(self, recursive: bool = True) -> dict[str, int]:
        """How many nodes of each op type (inside functions too when recursive)."""
        counts: dict[str, int] = {}
        nodes = (n for _, n in self.walk()) if recursive else iter(self.nodes)
        for n in nodes:
            if n.body is None:
                counts[n.op] = counts.get(n.op, 0) + 1
        return dict(sorted(counts.items()))

    def num_nodes(self) -> int:
        """Number of op nodes, counting the insides of functions, not the calls."""
        return sum(self.op_counts().values())

    # --- construction ----------------------------------------------------
    def rebuild(self, nodes: Iterable[Node], outputs: list[Value] | None = None) -> Graph:
        """A new graph with the same inputs and name, the given nodes and outputs."""
        return Graph(list(self.inputs), list(self.outputs if outputs is None else outputs),
                     list(nodes), self.name)

    def __str__(self) -> str:
        from .printer import format_graph

        return format_graph(self)


class NameScope:
    """Hands out value and node names unique within one graph."""

    def __init__(self, taken: Iterable[str] = ()):
        self._taken = set(taken)

    @classmethod
    def of(cls, graph: Graph) -> NameScope:
        names = {v.name for v in graph.inputs}
        for _, n in graph.walk():
            names.add(n.name)
            names.update(v.name for v in n.outputs)
            names.update(v.name for v in n.inputs if v is not None)
        return cls(names)

    def fresh(self, base: str) -> str:
        name = base
        k = 1
        while name in self._taken:
            name = f"{base}_{k}"
            k += 1
        self._taken.add(name)
        return name
