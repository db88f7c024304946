"""BYOC partitioning: place nodes on targets by their pattern tables.

1. **Annotate**: for each target in priority order, each node (last first, so
   the largest composite rooted at an op wins) is tried against the target's
   composite patterns; a match whose inner values are not read elsewhere, and
   that the pattern's check accepts, becomes a composite of that target.
2. **Merge**: composites of one target connected by an edge merge into one
   region when no path between them leaves the region.
3. **Extract**: each composite becomes a function node (``composite`` attr),
   each region a function node carrying ``target``; everything else is left
   for the fallback (CPU) target.

The :class:`PartitionReport` says, for every node, where it went and why not
elsewhere. ``strict=True`` raises PartitionError instead of leaving to the CPU
anything a pattern matched but the target refused.

``placement="cost"`` adds a step between annotating and merging: every composite is
estimated on its target and on the fallback (the targets' ``estimate`` hooks), and
those faster on the fallback go back to it (:mod:`.placement`); the report then gives
each unit's estimates and the model's estimated totals for the chosen, the greedy and
the all-CPU placements. ``placement="greedy"`` keeps every match on its target.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import PartitionError
from ..ir.graph import Graph, NameScope, Node
from ..ops.macs import multiply_accumulates
from ..patterns import CompositePattern, match
from .placement import CostPlan, balance_for_throughput, plan_by_cost
from .rewrite import outline

#: the placements ``partition`` knows
PLACEMENTS = ("greedy", "cost", "throughput")


@dataclass
class Placement:
    """Where one node went and why, with the multiply-accumulates it performs."""

    node: str
    op: str
    target: str
    reason: str
    composite: str = ""
    region: str = ""
    macs: int = 0
    #: the composite function node the node went into (on a target that matched it)
    function: str = ""
    #: what the target reports of that function (cycles, bytes moved, ...), on the row
    #: of the function's first node
    metrics: dict = field(default_factory=dict)
    #: placement by cost: the estimate (``CostEstimate``) of the node's unit (its
    #: composite, or the node alone) on each candidate target, on the unit's first row
    estimates: dict = field(default_factory=dict)
    #: the placement unit (a candidate composite, or the node alone) the node belongs to
    unit: int = -1
    #: placement by cost: the unit's cost entry (``UnitCost``), whose ``as_placed`` is
    #: its CPU estimate as the build fuses it where neighbours were offloaded
    cost: object = field(default=None, repr=False)
    #: the pattern row of the candidate composite the node was part of (kept or not)
    candidate: str = ""

    def to_dict(self) -> dict:
        row = {"node": self.node, "op": self.op, "target": self.target, "macs": self.macs,
               "reason": self.reason, "composite": self.composite, "region": self.region,
               "function": self.function, "unit": self.unit, **self.metrics}
        if self.estimates:
            row["estimates"] = {t: e.to_json() for t, e in self.estimates.items()}
            placed = getattr(self.cost, "as_placed", None)
            if placed is not None:
                row["as_placed"] = placed.to_json()
        return row

    def estimate_text(self) -> str:
        """``vta 0.64 / llvm 0.21`` (milliseconds; the chosen target first; ``*``: the
        estimate as placed, :meth:`reason_text`)."""
        placed = getattr(self.cost, "as_placed", None)
        order = sorted(self.estimates, key=lambda t: t != self.target)
        return " / ".join(f"{t} {placed.total_s * 1e3:.3g}*" if placed is not None
                          and t == self.target else f"{t} {self.estimates[t].total_s * 1e3:.3g}"
                          for t in order)

    def reason_text(self) -> str:
        """The reason, with the estimate as placed where it differs (``*``)."""
        placed = getattr(self.cost, "as_placed", None)
        if placed is None or self.target not in self.estimates:
            return self.reason
        return (f"{self.reason}; *as placed (beside offloaded layers): "
                f"{placed.total_s * 1e3:.3g} ms, in the whole graph "
                f"{self.estimates[self.target].total_s * 1e3:.3g} ms")


@dataclass
class PartitionReport:
    """Every node's placement, in graph order."""

    placements: list[Placement] = field(default_factory=list)
    #: the fallbacks the compile warned about (heterocc.diagnostics), said again here
    warnings: list[str] = field(default_factory=list)
    #: "greedy" or "cost"
    placement: str = "greedy"
    #: why that placement ran ("asked for", or why the default chose it)
    placement_reason: str = ""
    #: placement by cost: the estimates and the model's totals
    plan: CostPlan | None = None
    #: (producer unit, consumer unit, bytes) between placement units (``Placement.unit``)
    edges: list = field(default_factory=list)
    #: accelerator regions entered with data that has already been on an accelerator and
    #: came back through the host (``host_round_trips``)
    round_trips: int = 0

    def accelerator_regions(self) -> int:
        """The number of regions offloaded to a target other than the fallback."""
        return len({p.region for p in self.placements if p.region})

    def regions(self) -> list[dict]:
        """Each accelerator region: its name, target, composites and estimated time
        there (transfers included) and on the fallback, where estimated."""
        found: dict[str, dict] = {}
        for p in self.placements:
            if not p.region:
                continue
            entry = found.setdefault(p.region, {"region": p.region, "target": p.target,
                                                "composites": 0, "nodes": 0,
                                                "estimates": {}})
            entry["nodes"] += 1
            if p.estimates:
                entry["composites"] += 1
                for t, e in p.estimates.items():
                    sums = entry["estimates"].setdefault(t, {"total_ms": 0.0,
                                                             "transfer_ms": 0.0,
                                                             "host_ms": 0.0})
                    sums["total_ms"] = round(sums["total_ms"] + e.total_s * 1e3, 4)
                    sums["transfer_ms"] = round(sums["transfer_ms"] + e.transfer_s * 1e3, 4)
                    sums["host_ms"] = round(sums["host_ms"] + e.host_s * 1e3, 4)
            elif p.function and not any(q.function == p.function
                                        for q in self.placements[:self.placements.index(p)]):
                entry["composites"] += 1
        return list(found.values())

    def by_target(self) -> dict[str, int]:
        """Nodes per target."""
        counts: dict[str, int] = {}
        for p in self.placements:
            counts[p.target] = counts.get(p.target, 0) + 1
        return counts

    def macs_by_target(self) -> dict[str, int]:
        """Multiply-accumulates per target (every target that received a node)."""
        macs: dict[str, int] = {}
        for p in self.placements:
            macs[p.target] = macs.get(p.target, 0) + p.macs
        return macs

    def mac_share(self, target: str) -> float:
        """The fraction of the model's multiply-accumulates placed on ``target``
        (1.0 for a model without any)."""
        macs = self.macs_by_target()
        total = sum(macs.values())
        return macs.get(target, 0) / total if total else 1.0

    def attach_metrics(self, by_function: Mapping[str, dict]) -> None:
        """Put each composite function's metrics (from the kernel its target built) on
        the row of the function's first node."""
        seen: set[str] = set()
        for p in self.placements:
            if p.function in by_function and p.function not in seen:
                p.metrics = dict(by_function[p.function])
                seen.add(p.function)

    def to_json(self) -> dict:
        """The report as one JSON-serializable object: ``nodes`` (node, op, target, macs,
        reason, composite, region, function, and the target's metrics on a function's
        first node), ``macs_by_target``, ``nodes_by_target``, ``total_macs``; where
        targets report them, the MAC-weighted ``utilization`` of their functions and the
        total ``host_bytes`` moved per run."""
        if self.plan is not None:
            self.plan.complete()  # the figures the decisions did not need
        macs = self.macs_by_target()
        report = {"nodes": [p.to_dict() for p in self.placements], "macs_by_target": macs,
                  "nodes_by_target": self.by_target(), "total_macs": sum(macs.values())}
        measured = [p for p in self.placements if "utilization" in p.metrics and p.macs]
        if measured:
            report["utilization"] = round(sum(p.macs * p.metrics["utilization"]
                                              for p in measured)
                                          / sum(p.macs for p in measured), 4)
        if any("host_bytes" in p.metrics for p in self.placements):
            report["host_bytes"] = sum(p.metrics.get("host_bytes", 0) for p in self.placements)
        if self.warnings:
            report["warnings"] = list(self.warnings)
        report["placement"] = self.placement
        if self.placement_reason:
            report["placement_reason"] = self.placement_reason
        report["regions"] = self.regions()
        report["accelerator_regions"] = self.accelerator_regions()
        report["host_round_trips"] = self.round_trips
        if self.plan is not None:
            report["estimated"] = self.plan.totals()
        return report

    def format(self) -> str:
        """A table: node, op, target, MACs, region/composite, the estimates in ms (by
        cost), reason; then the regions (with their estimates), the estimated totals (by
        cost), the nodes and the share of multiply-accumulates on each target."""
        timed = self.plan is not None
        if timed:
            self.plan.complete()
        lines = [f"{'node':32s} {'op':20s} {'target':10s} {'MACs':>12s} "
                 f"{'region / composite':36s} " + (f"{'estimate ms':24s} " if timed else "")
                 + "reason"]
        for p in self.placements:
            where = f"{p.region}/{p.composite}" if p.region else ""
            times = f"{p.estimate_text()[:24]:24s} " if timed else ""
            lines.append(f"{p.node[:32]:32s} {p.op[:20]:20s} {p.target:10s} {p.macs:12d} "
                         f"{where[:36]:36s} {times}{p.reason_text()}")
        summary = self.to_json()
        for region in summary["regions"]:
            times = ", ".join(f"{t} {e['total_ms']:.3g} ms ({e['transfer_ms']:.3g} transfer"
                              + (f", {e['host_ms']:.3g} host" if e["host_ms"] else "") + ")"
                              for t, e in region["estimates"].items())
            lines.append(f"region {region['region']} on {region['target']}: "
                         f"{region['composites']} composites" + (f"; {times}" if times else ""))
        lines.append(f"placement: {self.placement}"
                     + (f" ({self.placement_reason})" if self.placement_reason else ""))
        lines.append(f"regions: {summary['accelerator_regions']} accelerator regions, "
                     f"{summary['host_round_trips']} host round trips")
        if timed:
            totals = summary["estimated"]
            names = {"chosen_ms": "this placement (cost)", "all_cpu_ms": "all on the CPU",
                     "greedy_ms": "greedy (every match offloaded)"}
            lines.append("estimated end-to-end latency: " + ", ".join(
                f"{names[k]} {v:.3f} ms" for k, v in totals.items()))
        counts = ", ".join(f"{t}: {n}" for t, n in self.by_target().items())
        lines.append(f"nodes per target: {counts}")
        macs = self.macs_by_target()
        total = sum(macs.values())
        if total:
            shares = ", ".join(f"{t}: {m / 1e6:.1f} M ({100 * m / total:.1f}%)"
                               for t, m in macs.items())
            lines.append(f"MACs per target: {shares} of {total / 1e6:.1f} M")
        if "utilization" in summary or "host_bytes" in summary:
            cycles = sum(p.metrics.get("cycles", 0) for p in self.placements)
            lines.append(f"offloaded functions: {cycles} modelled cycles per run, "
                         f"MAC-weighted utilization {summary.get('utilization', 0):.1%}, "
                         f"{summary.get('host_bytes', 0)} bytes moved by the host per run")
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def _composite_ok(nodes: list[Node], root: Node, users, returned) -> bool:
    """Inner values of a composite may be read only inside it."""
    inside = set(nodes)
    for n in nodes:
        if n is root:
            continue
        for v in n.outputs:
            if v in returned or any(u not in inside for u in users.get(v, ())):
                return False
    return True


def _annotate(graph: Graph, tables: Mapping[str, Sequence[CompositePattern]], strict: bool):
    producers = graph.producers()
    users = graph.consumers()
    returned = set(graph.outputs)
    claimed: dict[Node, tuple[str, str, int]] = {}  # node -> (target, composite, id)
    composites: list[tuple[str, str, list[Node]]] = []
    refused: dict[Node, str] = {}
    for target, table in tables.items():
        for root in reversed(graph.nodes):
            if root in claimed or root.body is not None or not root.outputs:
                continue
            for row in table:
                m = match(row.pattern, root.outputs[0], producers)
                if m is None or m.nodes[-1] is not root:
                    continue
                if any(n in claimed for n in m.nodes) or \
                        not _composite_ok(m.nodes, root, users, returned):
                    continue
                why = row.reject_reason(m.nodes)
                if why is not None:
                    msg = f"{target} pattern {row.name} matched, but {why}"
                    if strict:
                        raise PartitionError(f"node {root.name!r} ({root.op}): {msg} "
                                             "(strict partitioning: no CPU fallback)")
                    for n in m.nodes:
                        refused.setdefault(n, msg)
                    continue
                cid = len(composites)
                composites.append((target, row.name, m.nodes))
                for n in m.nodes:
                    claimed[n] = (target, row.name, cid)
                break
    return composites, claimed, refused


def _merge_regions(graph: Graph, composites, claimed) -> list[list[int]]:
    """Groups of composite ids forming convex single-target regions."""
    parent = list(range(len(composites)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    users = graph.consumers()
    index = {n: i for i, n in enumerate(graph.nodes)}

    def region_nodes(r: int) -> set[Node]:
        return {n for c, (_, _, nodes) in enumerate(composites) if find(c) == r for n in nodes}

    def convex(nodes: set[Node]) -> bool:
        # walk forward from the region's outputs through outside nodes; reaching the
        # region again means a path leaves and re-enters it
        last = max(index[n] for n in nodes)
        stack = [u for n in nodes for v in n.outputs for u in users.get(v, ()) if u not in nodes]
        seen: set[Node] = set()
        while stack:
            n = stack.pop()
            if n in seen or index[n] > last:
                continue
            seen.add(n)
            for v in n.outputs:
                for u in users.get(v, ()):
                    if u in nodes:
                        return False
                    stack.append(u)
        return True

    for node in graph.nodes:
        if node not in claimed:
            continue
        target, _, cid = claimed[node]
        for v in node.outputs:
            for user in users.get(v, ()):
                if user not in claimed or claimed[user][0] != target:
                    continue
                a, b = find(cid), find(claimed[user][2])
                if a == b:
                    continue
                if convex(region_nodes(a) | region_nodes(b)):
                    parent[b] = a
    regions: dict[int, list[int]] = {}
    for c in range(len(composites)):
        regions.setdefault(find(c), []).append(c)
    return list(regions.values())


def partition(graph: Graph, tables: Mapping[str, Sequence[CompositePattern]],
              fallback: str, strict: bool = False, placement: str = "greedy",
              targets: Mapping[str, object] | None = None) -> tuple[Graph, PartitionReport]:
    """Place nodes on the targets of ``tables`` (in priority order); the rest
    stays for ``fallback``. Returns the partitioned graph and the report.
    ``placement="cost"`` keeps a match on its target only where the target's estimate
    beats the fallback's (``targets``: the target instances by name, whose
    ``estimate`` hooks answer); ``"throughput"`` balances the devices' time per input
    for a pipelined stream instead (``placement.balance_for_throughput``)."""
    if placement not in PLACEMENTS:
        raise PartitionError(f"unknown placement {placement!r}; choose one of "
                             f"{', '.join(PLACEMENTS)}")
    composites, claimed, refused = _annotate(graph, tables, strict)
    units = _units(graph, composites)
    candidate = {n: name for _, name, nodes in composites for n in nodes}
    plan = None
    unit_of: dict[Node, object] = {}
    if placement in ("cost", "throughput") and (composites or tables):
        plan = plan_by_cost(graph, composites, claimed, targets or {}, fallback)
        if placement == "throughput":
            balance_for_throughput(plan)
        kept = []
        for (target, name, nodes), unit in zip(composites, plan.composites):
            if unit.chosen == target:
                kept.append((target, name, nodes))
            else:
                for n in nodes:
                    refused[n] = f"{target} pattern {name} matched; {unit.reason}"
        unit_of = {u.nodes[0]: u for u in [*plan.composites, *plan.others]}
        composites = kept
        claimed = {n: (t, name, cid) for cid, (t, name, nodes) in enumerate(composites)
                   for n in nodes}
    regions = _merge_regions(graph, composites, claimed) if composites else []
    scope = NameScope.of(graph)

    composite_names: dict[int, str] = {}

    def composite_call(nodes: list[Node], body: Graph) -> tuple[str, dict]:
        target, name, cid = claimed[nodes[-1]]
        fname = scope.fresh(f"{target}_{name}")
        composite_names[cid] = fname
        return fname, {"composite": name, "target": target}

    g = outline(graph, [c[2] for c in composites], composite_call)
    by_name = {n.name: n for n in g.nodes}
    region_names: dict[int, str] = {}

    def region_call(nodes: list[Node], body: Graph) -> tuple[str, dict]:
        target = nodes[0].attrs["target"]
        fname = scope.fresh(f"{target}_region")
        for n in nodes:
            region_names[id(n)] = fname
        return fname, {"target": target, "composites": len(nodes)}

    region_groups = [[by_name[composite_names[c]] for c in region] for region in regions]
    g = outline(g, region_groups, region_call)

    report = PartitionReport(placement=placement, plan=plan, edges=_unit_edges(graph, units),
                             round_trips=host_round_trips(g))
    for node in graph.nodes:
        unit = unit_of.get(node)
        if node in claimed:
            target, name, cid = claimed[node]
            fname = composite_names[cid]
            why = f"matched {target} pattern {name}" + (f"; {unit.reason}" if unit else "")
            placed = Placement(node.name, node.op, target, why,
                               name, region_names.get(id(by_name[fname]), ""),
                               multiply_accumulates(node), fname)
        else:
            why = refused.get(node) or (
                f"no pattern of {', '.join(tables)} matches" if tables else "only target")
            if unit is not None and node not in refused and unit.reason:
                why += f"; {unit.reason}"
            placed = Placement(node.name, node.op, fallback, why,
                               macs=multiply_accumulates(node))
        if unit is not None:
            placed.estimates = unit.candidates  # completed with the plan
            placed.cost = unit
        placed.unit = units[node]
        placed.candidate = candidate.get(node, "")
        report.placements.append(placed)
        report.placements.extend(_absorbed(node, placed))
    return g, report


def host_round_trips(graph: Graph) -> int:
    """How often data comes back from the host to an accelerator in the partitioned
    ``graph``: the region calls (top-level function nodes carrying a ``target``) that
    read a tensor an earlier region produced, directly or through nodes run on the host.
    A model whole on the accelerator makes none; regions in a chain separated by host
    work make one fewer than there are regions."""
    producers = graph.producers()
    offloaded = {n for n in graph.nodes if n.body is not None and "target" in n.attrs}
    # whether a node's result depends on an accelerator region's output (graph order is
    # topological, so every producer is decided before its users)
    after: dict[Node, bool] = {}
    trips = 0
    for node in graph.nodes:
        sources = [producers[v] for v in node.inputs if v is not None and v in producers]
        fed = any(s in offloaded or after[s] for s in sources)
        after[node] = fed
        trips += node in offloaded and fed
    return trips


def _units(graph: Graph, composites) -> dict[Node, int]:
    """The placement unit of every node: its candidate composite's number, or a number
    of its own (the picture draws one box per unit)."""
    units = {n: k for k, (_, _, nodes) in enumerate(composites) for n in nodes}
    for node in graph.nodes:
        units.setdefault(node, len(composites) + len(units))
    return units


def _unit_edges(graph: Graph, units: Mapping[Node, int]) -> list[tuple[int, int, int]]:
    """(producer unit, consumer unit, bytes) of every tensor passed between two units."""
    producers = graph.producers()
    edges: dict[tuple[int, int], int] = {}
    for node in graph.nodes:
        for v in node.inputs:
            source = producers.get(v) if v is not None else None
            if source is not None and units[source] != units[node]:
                key = (units[source], units[node])
                edges[key] = edges.get(key, 0) + v.type.nbytes
    return [(a, b, n) for (a, b), n in edges.items()]


def _absorbed(node: Node, placed: Placement) -> list[Placement]:
    """Rows for the activations an earlier pass folded into ``node`` (a Requantize's
    clamp, a LookupTable's entries, a ChannelGather's map): they run wherever ``node``
    runs."""
    rows = []
    where = {"Requantize": "the clamp of", "LookupTable": "the table of",
             "ChannelGather": "the gather of"}.get(node.op)
    for entry in node.attrs.get("absorbed", ()) if where else ():
        op, _, name = entry.partition(":")
        rows.append(Placement(name, op, placed.target,
                              f"folded into {where} {node.name} ({node.op})",
                              placed.composite, placed.region, function=placed.function,
                              unit=placed.unit, candidate=placed.candidate))
    return rows


def single_target_report(graph: Graph, target: str) -> PartitionReport:
    """The report of a model compiled for one target: every op of ``graph`` (inside its
    fused functions too) placed on it."""
    report = PartitionReport()
    for _, node in graph.walk():
        if node.body is None:
            report.placements.append(Placement(node.name, node.op, str(target), "only target",
                                               macs=multiply_accumulates(node)))
    return report
