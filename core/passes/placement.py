"""Placement by cost: which candidate composites the accelerators keep.

The partitioner's annotation offers every composite a pattern matched to its target;
this module asks that target and the fallback (the CPU) how long the composite takes
on each (the SDK's ``estimate`` hook, ``heterocc.sdk.cost``) and keeps it on the device
where it is faster, transfers over the host link included.

Why one decision per composite is the whole search: the runtime runs one function at a
time and an accelerator call copies its activations in and its result out on every
call (weights stay resident), so a placement's end-to-end latency is the sum of
its functions' times on their devices, transfers included, plus the CPU's work on what
no pattern matched. No term couples two decisions, so the dynamic programme over the
topologically ordered candidates (the best latency of a prefix, given the devices of
its last producers) reduces to choosing each candidate's cheaper device: the result is
the exact minimum under the model, and deterministic (a tie goes to the accelerator,
as the greedy placement would have it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..ir.graph import Graph, NameScope, Node
from .rewrite import outline


@dataclass
class UnitCost:
    """One placement unit (a candidate composite, or a node no pattern matched) with
    its estimate (a ``CostEstimate``) on each device that could run it."""

    nodes: list[Node]
    candidates: dict[str, object] = field(default_factory=dict)
    chosen: str = ""
    greedy: str = ""
    reason: str = ""
    #: the function node the estimates were made for (the unit outlined)
    function: Node | None = None

    def seconds(self, target: str) -> float:
        """The unit's estimated time on ``target``, transfers included."""
        return self.candidates[target].total_s


@dataclass
class CostPlan:
    """The estimates of every unit and the model's end-to-end totals (seconds) for the
    chosen placement, the greedy one (every match on its accelerator) and all on the CPU."""

    composites: list[UnitCost]
    others: list[UnitCost]
    fallback: str

    def total(self, which: str) -> float | None:
        """``"chosen"``, ``"greedy"`` or ``"cpu"``; None when a unit has no CPU estimate."""
        total = 0.0
        for unit in [*self.composites, *self.others]:
            target = self.fallback if which == "cpu" else getattr(unit, which)
            if target not in unit.candidates:
                return None
            total += unit.seconds(target)
        return total

    def totals(self) -> dict:
        """The three totals in milliseconds (absent where not estimated)."""
        out = {}
        for which, key in (("chosen", "chosen_ms"), ("cpu", "all_cpu_ms"),
                           ("greedy", "greedy_ms")):
            value = self.total(which)
            if value is not None:
                out[key] = round(value * 1e3, 4)
        return out


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def _decide(unit: UnitCost, accelerator: str, fallback: str) -> None:
    acc = unit.candidates.get(accelerator)
    cpu = unit.candidates.get(fallback)
    unit.greedy = accelerator
    if acc is None or cpu is None:
        missing = accelerator if acc is None else fallback
        unit.chosen = accelerator
        unit.reason = f"on {accelerator}: {missing} gave no estimate, so the pattern decides"
        return
    transfer = f", {_ms(acc.transfer_s)} of it transfer" if acc.transfer_s else ""
    if acc.total_s <= cpu.total_s:
        unit.chosen = accelerator
        unit.reason = (f"on {accelerator}: {_ms(acc.total_s)}{transfer} vs "
                       f"{_ms(cpu.total_s)} on {fallback}")
    else:
        unit.chosen = fallback
        unit.reason = (f"stays on {fallback}: {_ms(cpu.total_s)} vs {_ms(acc.total_s)} on "
                       f"{accelerator}{transfer}")


def plan_by_cost(graph: Graph, composites: list[tuple[str, str, list[Node]]],
                 claimed: Mapping[Node, tuple], targets: Mapping[str, object],
                 fallback: str) -> CostPlan:
    """Estimate every candidate composite on its target and on ``fallback``, and every
    node no pattern matched on ``fallback``; decide each composite (see the module)."""
    others = [n for n in graph.nodes if n not in claimed and n.body is None and n.outputs]
    groups = [nodes for _, _, nodes in composites] + [[n] for n in others]
    scope = NameScope.of(graph)
    functions: dict[int, Node] = {}
    kinds = {id(nodes[-1]): (t, name) for t, name, nodes in composites}

    def call(nodes: list[Node], body: Graph) -> tuple[str, dict]:
        target, name = kinds.get(id(nodes[-1]), (fallback, ""))
        fname = scope.fresh(f"estimate_{name or nodes[0].op}")
        return fname, ({"composite": name, "target": target} if name else {})

    outlined = outline(graph, groups, call)
    by_first = {}
    for node in outlined.nodes:
        if node.body is not None:
            by_first[node.body.nodes[0].name] = node
    for k, nodes in enumerate(groups):
        functions[k] = by_first[nodes[0].name]

    plan = CostPlan([], [], fallback)
    cpu = targets.get(fallback)
    for k, (target, _, nodes) in enumerate(composites):
        unit = UnitCost(nodes, function=functions[k])
        for name, estimator in ((target, targets.get(target)), (fallback, cpu)):
            hook = getattr(estimator, "estimate", None)
            found = hook(functions[k]) if callable(hook) else None
            if found is not None:
                unit.candidates[name] = found
        _decide(unit, target, fallback)
        plan.composites.append(unit)
    for k, node in enumerate(others, start=len(composites)):
        unit = UnitCost([node], chosen=fallback, greedy=fallback, function=functions[k])
        hook = getattr(cpu, "estimate", None)
        found = hook(functions[k]) if callable(hook) else None
        if found is not None:
            unit.candidates[fallback] = found
            unit.reason = f"{_ms(found.total_s)} on {fallback}"
        plan.others.append(unit)
    return plan
