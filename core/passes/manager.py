"""The pass manager: runs named ``Graph -> Graph`` passes, timing each and
optionally dumping the IR after it and checking the result."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from ..errors import HeteroccError
from ..ir.checker import check_graph
from ..ir.graph import Graph

GraphPass = Callable[[Graph], Graph]
T = TypeVar("T")

_PASSES: dict[str, GraphPass] = {}


def register_pass(name: str) -> Callable[[GraphPass], GraphPass]:
    """Decorator: register a ``Graph -> Graph`` function as pass ``name``."""

    def decorate(fn: GraphPass) -> GraphPass:
        if name in _PASSES:
            raise ValueError(f"pass {name!r} registered twice")
        fn.pass_name = name  # type: ignore[attr-defined]
        _PASSES[name] = fn
        return fn

    return decorate


def get_pass(name: str) -> GraphPass:
    try:
        return _PASSES[name]
    except KeyError:
        raise HeteroccError(f"unknown pass {name!r}; known: {', '.join(sorted(_PASSES))}") \
            from None


def pass_name(fn: GraphPass) -> str:
    return getattr(fn, "pass_name", getattr(fn, "__name__", repr(fn)))


@dataclass
class PassRecord:
    """What one pass did: its name, wall time and node counts before and after."""

    name: str
    seconds: float
    nodes_before: int
    nodes_after: int


@dataclass
class PassManager:
    """Runs passes in order.

    ``dump_ir``: a directory to write the IR after each pass to
    (``NN_<pass>.txt``), or a callable ``(pass_name, graph)``. ``check``: run
    the graph checker after every pass (names the pass that broke the graph).
    """

    passes: Sequence[GraphPass | str]
    dump_ir: str | Callable[[str, Graph], None] | None = None
    check: bool = False
    records: list[PassRecord] = field(default_factory=list)

    def run(self, graph: Graph) -> Graph:
        """Run ``passes`` on ``graph`` (the first run of this manager dumps its input)."""
        if isinstance(self.dump_ir, str):
            os.makedirs(self.dump_ir, exist_ok=True)
        if not self.records:
            self._dump(0, "input", graph)
        return self.run_passes(self.passes, graph)

    def run_passes(self, passes: Sequence[GraphPass | str], graph: Graph) -> Graph:
        """Run more ``passes`` after those already run, numbered and recorded after them."""
        for p in passes:
            fn = get_pass(p) if isinstance(p, str) else p
            graph, _ = self.run_step(pass_name(fn), lambda g, fn=fn: (fn(g), None), graph)
        return graph

    def run_step(self, name: str, step: Callable[[Graph], tuple[Graph, T]],
                 graph: Graph) -> tuple[Graph, T]:
        """Run a pass ``name`` that gives something besides the graph (partitioning: its
        report): ``step(graph) -> (graph, result)``, timed, checked and dumped like the
        others; returns both."""
        if isinstance(self.dump_ir, str):
            os.makedirs(self.dump_ir, exist_ok=True)
        before = graph.num_nodes()
        t0 = time.perf_counter()
        graph, result = step(graph)
        self.records.append(PassRecord(name, time.perf_counter() - t0, before,
                                       graph.num_nodes()))
        if self.check:
            try:
                check_graph(graph)
            except HeteroccError as exc:
                raise type(exc)(f"after pass {name!r}: {exc}") from None
        self._dump(len(self.records), name, graph)
        return graph, result

    def _dump(self, index: int, name: str, graph: Graph) -> None:
        if self.dump_ir is None:
            return
        if callable(self.dump_ir):
            self.dump_ir(name, graph)
            return
        with open(os.path.join(self.dump_ir, f"{index:02d}_{name}.txt"), "w") as f:
            f.write(str(graph) + "\n")

    def report(self) -> str:
        """A table of pass timings and node counts."""
        lines = [f"{'pass':24s} {'ms':>9s} {'nodes':>13s}"]
        for r in self.records:
            lines.append(f"{r.name:24s} {r.seconds * 1e3:9.2f} "
                         f"{r.nodes_before:6d}->{r.nodes_after:<6d}")
        return "\n".join(lines)
