"""Placement by cost: which candidate composites the accelerators keep.

The partitioner's annotation offers every composite a pattern matched to its target;
this module asks that target and the fallback (the CPU) how long the composite takes
on each (the SDK's ``estimate`` hook, ``heterocc.sdk.cost``) and keeps it on the device
where it is faster, transfers over the host link included.

The decisions are coupled by the accelerator's memory: the runtime runs one function
at a time, and an accelerator call copies its activations in and its result out over
the host link (weights stay resident), except where a region keeps a tensor in the
device's memory between two of its composites (``vta``: its programs share the
tensor's tiles in its DRAM). An estimate says what each of its copies costs and in
what form the device holds the tensor (``CostEstimate.inputs`` / ``output``, the SDK's
``Port``); where a producer and its consumer run on the accelerator with equal keys,
the consumer's copy in is saved, and the producer's copy out where every reader of its
output takes it so (:class:`Handover`). The model's latency is then the sum of the
units' times on their devices less those saved copies: each saving is minus a
constant times a product of "on the accelerator" variables, a submodular function,
so a minimum s-t cut over the candidates gives its exact minimum (:func:`_cut`;
deterministic, a tie to the accelerator, as the greedy placement would have it).
Without ports (a target whose region copies everything) no term couples two
decisions and the cut keeps each candidate on its cheaper device.

Estimating costs compile time (an accelerator's figure compiles the composite, the
CPU's compiles and times it), so only what the decision needs is estimated while
compiling. Each target may answer a cheap ``lower_bound(function)`` hook (seconds and
how it was bounded; the CPU from its multiply-accumulates, an accelerator from the
transfers a call cannot avoid and the compute its shapes need); where a neighbour on
the accelerator could keep a tensor with the composite, the accelerator's bound is its
``lower_bound_kept`` (the call with its tensors kept) plus each copy's least time
(``port_bounds``), which the cut takes off only where that neighbour runs there too.
The cut is made with every figure not estimated at its bound, and a handover whose
side is not estimated counted as if it matched; only what that optimistic cut puts on
a device it has no figure for is estimated, and the cut made again, until every unit
sits on a device it was estimated on: then it is the exact minimum, the one estimating
every figure gives (a branch and bound: :func:`_couple` proves it). A decision the
bounds settled is explained by them ("stays on llvm: 0.21 ms; vta needs at least
0.3 ms (...)").
Nodes no pattern matched (on the CPU whatever the placement) are not asked about
(a CPU that times the whole graph's kernels at once, as the llvm target does, has
their figures already). The figures skipped, which only the report's totals need, are
estimated when the plan is asked for them (:meth:`CostPlan.complete`).

Where composites are offloaded, the CPU's build fuses what stays on it otherwise than
the whole graph its estimates timed (a kernel that held an offloaded layer's neighbour
is another kernel then), so the CPU is asked once more (the optional
``estimate_placed`` hook) for the units it keeps, as shares of the kernels of that
fusion: the chosen placement's total is made of those (:attr:`UnitCost.as_placed`).
Where they cost more than the offloads saved, the offloads are undone and everything
stays on the CPU, whose whole-graph figures are then the placement's; where they make
the split slower than the greedy placement, every match is offloaded instead.

For a stream of inputs (``placement="throughput"``) the objective is another one: the
pipelined runtime overlaps the devices across inputs, so the time per input in steady
state is the busiest device's time per input, not the sum (an accelerator call's host
part, the host laying its operands out, counts on the host's CPU).
:func:`balance_for_throughput`
starts from the latency plan and moves composites off the busiest device while that
lowers the busiest device's time: a split where both devices carry work, which a
latency plan rarely gives when one device is faster at nearly everything. Its lanes
count each composite's copies as if it ran alone (the copies a region saves are not
taken off them), so it errs towards the CPU.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..ir.graph import Graph, NameScope, Node
from ..sdk.cost import Port
from ..tuning.apply import current
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
    #: the fallback's estimate once the chosen placement's other units run where they
    #: were placed (the fallback's build fuses around them), where it differs from the
    #: whole graph's (``candidates``, the all-fallback placement's)
    as_placed: object = None
    #: lower bounds ``(seconds, how)`` on the devices not estimated (see :func:`_bound`)
    bounds: dict[str, tuple[float, str]] = field(default_factory=dict)
    #: where the accelerator's bound is of a call with its tensors kept on the device:
    #: the least each of its copies takes (its inputs in order, its output), in the
    #: bound, which a neighbour there saves (the target's ``port_bounds``)
    copy_bounds: tuple | None = None
    #: devices asked for an estimate that gave none (the pattern decides the unit)
    no_estimate: set = field(default_factory=set)

    def seconds(self, target: str) -> float:
        """The unit's estimated time on ``target``, transfers included."""
        return self.candidates[target].total_s

    def placed_seconds(self, target: str) -> float:
        """The unit's time on ``target`` in the chosen placement: :attr:`as_placed`
        where the fallback's build fuses it otherwise there, else :meth:`seconds`."""
        if self.as_placed is not None and target == self.chosen:
            return self.as_placed.total_s
        return self.seconds(target)


@dataclass
class CostPlan:
    """The estimates of every unit and the model's end-to-end totals (seconds) for the
    chosen placement, the greedy one (every match on its accelerator) and all on the CPU."""

    composites: list[UnitCost]
    others: list[UnitCost]
    fallback: str
    #: (unit, target) figures the decisions did not need, estimated by :meth:`complete`
    pending: list[tuple[UnitCost, str]] = field(default_factory=list)
    #: the target instances by name, whose ``estimate`` hooks make them
    targets: Mapping[str, object] = field(default_factory=dict)
    #: "latency" (one input end to end) or "throughput" (a stream: the busiest device)
    objective: str = "latency"
    #: the tuning log applied while placing (its kernels' times are the estimates'),
    #: applied again to the figures :meth:`complete` makes after the compile
    tuning_log: object = None
    #: tensors from a candidate to another of the same accelerator (:class:`Handover`),
    #: and the producers' handovers where they are all their output's readers
    handovers: list = field(default_factory=list)
    exclusive: list = field(default_factory=list)

    def complete(self) -> None:
        """Estimate the figures the placement decided without (the totals and the
        report want every unit's on each of its devices)."""
        log = self.tuning_log
        applied = contextlib.nullcontext() if log is None or current() is log else log
        with applied:
            while self.pending:
                unit, target = self.pending.pop(0)
                if target in unit.candidates:
                    continue
                found = _ask(self.targets.get(target), "estimate", unit.function)
                if found is not None:
                    unit.candidates[target] = found
                    if not unit.reason:
                        unit.reason = f"{_ms(found.total_s)} on {target}"

    def total(self, which: str) -> float | None:
        """``"chosen"``, ``"greedy"`` or ``"cpu"``; None when a unit has no CPU estimate."""
        self.complete()
        total = 0.0
        placed = self._as_placed(which)
        for unit in [*self.composites, *self.others]:
            target = self.fallback if which == "cpu" else getattr(unit, which)
            if target not in unit.candidates:
                return None
            total += unit.placed_seconds(target) if placed else unit.seconds(target)
        return total - _kept_seconds(self, which)

    def _as_placed(self, which: str) -> bool:
        """Whether placement ``which`` splits the graph as the chosen one does, so that
        the fallback's figures as placed (:attr:`UnitCost.as_placed`) are its figures;
        else its units' whole-graph figures are used."""
        return which == "chosen" or (which == "greedy" and all(
            u.chosen == u.greedy for u in self.composites))

    def busy(self, which: str = "chosen") -> dict[str, float]:
        """Seconds per input each device is busy under the ``"chosen"`` or ``"greedy"``
        placement (units without an estimate on their device are not counted)."""
        self.complete()
        busy: dict[str, float] = defaultdict(float)
        placed = self._as_placed(which)
        for unit in [*self.composites, *self.others]:
            target = getattr(unit, which)
            if target in unit.candidates:
                for device, seconds in _lanes(unit, target, self.fallback,
                                              placed).items():
                    busy[device] += seconds
        return dict(busy)

    def totals(self) -> dict:
        """The three totals in milliseconds (absent where not estimated); for the
        throughput objective also the busiest device's time per input, chosen and
        greedy (the pipelined stream's period)."""
        out = {}
        for which, key in (("chosen", "chosen_ms"), ("cpu", "all_cpu_ms"),
                           ("greedy", "greedy_ms")):
            value = self.total(which)
            if value is not None:
                out[key] = round(value * 1e3, 4)
        if self.objective == "throughput":
            for which in ("chosen", "greedy"):
                busy = self.busy(which)
                if busy:
                    out[f"{which}_busiest_ms"] = round(max(busy.values()) * 1e3, 4)
        return out


def _lanes(unit: UnitCost, target: str, fallback: str, placed: bool = False
           ) -> dict[str, float]:
    """The seconds per input ``unit`` keeps each device busy on ``target``: all of its
    time, except an accelerator call's host part (``host_s``: operands laid out by the
    host's CPU), which is the fallback's (the host's) work, not the accelerator's."""
    seconds = unit.placed_seconds(target) if placed else unit.seconds(target)
    host = getattr(unit.candidates[target], "host_s", 0.0) if target != fallback else 0.0
    if not host:
        return {target: seconds}
    return {target: seconds - host, fallback: host}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def _decide(unit: UnitCost, accelerator: str, fallback: str,
            bound: tuple[str, float, str] | None = None) -> None:
    """Choose ``unit``'s device from its candidates' estimates, or from one estimate and
    the other device's lower ``bound`` (that device, seconds, how it was bounded)."""
    acc = unit.candidates.get(accelerator)
    cpu = unit.candidates.get(fallback)
    unit.greedy = accelerator
    transfer = f", {_ms(acc.transfer_s)} of it transfer" if acc and acc.transfer_s else ""
    if acc and acc.host_s:  # the host's own work on the call (layouts, im2col)
        transfer += (f" and {_ms(acc.host_s)} host work" if transfer
                     else f", {_ms(acc.host_s)} of it host work")
    if bound is not None:
        other, seconds, how = bound
        unit.chosen = fallback if other == accelerator else accelerator
        mine = cpu if unit.chosen == fallback else acc
        unit.reason = (f"{'stays ' if unit.chosen == fallback else ''}on {unit.chosen}: "
                       f"{_ms(mine.total_s)}{transfer}; {other} needs at least "
                       f"{_ms(seconds)} ({how})")
        return
    if acc is None or cpu is None:
        missing = accelerator if acc is None else fallback
        unit.chosen = accelerator
        unit.reason = f"on {accelerator}: {missing} gave no estimate, so the pattern decides"
        return
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

    plan = CostPlan([], [], fallback, targets=targets, tuning_log=current())
    cpu = targets.get(fallback)
    within = getattr(cpu, "estimate_within", None)
    if callable(within):  # the CPU times its part of the graph as its build fuses it
        within(graph, {functions[k]: nodes for k, nodes in enumerate(groups)})
    plan.composites = [UnitCost(nodes, greedy=target, function=functions[k])
                       for k, (target, _, nodes) in enumerate(composites)]
    _handovers(plan, graph)
    coupled = {id(u) for e in plan.handovers for u in (e.producer, e.consumer)}
    for unit in plan.composites:
        _bound(unit, fallback, targets, id(unit) in coupled)
    _couple(plan, targets)
    for k, node in enumerate(others, start=len(composites)):
        unit = UnitCost([node], chosen=fallback, greedy=fallback, function=functions[k])
        found = _ask(cpu, "cached", functions[k])
        if found is not None:
            unit.candidates[fallback] = found
            unit.reason = f"{_ms(found.total_s)} on {fallback}"
        elif callable(getattr(cpu, "estimate", None)):
            plan.pending.append((unit, fallback))
        plan.others.append(unit)
    _estimate_as_placed(plan, graph, cpu)
    return plan


def _estimate_as_placed(plan: CostPlan, graph: Graph, cpu: object) -> None:
    """The fallback's figures of the units it keeps, as its build fuses the graph once
    the offloaded composites leave it (the SDK's optional ``estimate_placed`` hook; a
    kernel that held an offloaded layer's neighbour is another kernel then). Should the
    placement then be slower than the whole graph on the fallback, the offloads are
    undone; should it be slower than the greedy placement (every match offloaded), that one
    is taken. Every unit's fallback figure is made first (the comparison needs them; the
    CPU timed the kernels of every candidate already: only kernels of nodes no pattern
    matched are timed here, and their build compiles them anyway)."""
    hook = getattr(cpu, "estimate_placed", None)
    offloaded = [u for u in plan.composites if u.chosen != plan.fallback]
    if not callable(hook) or not offloaded:
        return
    units = [*plan.composites, *plan.others]
    for unit in units:
        if plan.fallback not in unit.candidates:
            whole = _ask(cpu, "estimate", unit.function)
            if whole is not None:
                unit.candidates[plan.fallback] = whole
    kept = [u for u in units if u.chosen == plan.fallback]
    found = hook(graph, {u.function: u.nodes for u in kept},
                 [(u.nodes, u.chosen) for u in offloaded])
    for unit in kept:
        unit.as_placed = found.get(unit.function)
    if any(plan.fallback not in u.candidates for u in units):
        return  # no whole-graph total to compare with
    chosen = sum(u.placed_seconds(u.chosen) for u in units) - _kept_seconds(plan, "chosen")
    whole = sum(u.seconds(plan.fallback) for u in units)
    greedy = sum(u.seconds(u.greedy) for u in units) - _kept_seconds(plan, "greedy") \
        if all(u.greedy in u.candidates for u in units) else None
    if chosen > whole and (greedy is None or whole <= greedy):
        for unit in kept:
            unit.as_placed = None
        for unit in offloaded:
            unit.chosen = plan.fallback
            unit.reason = (f"stays on {plan.fallback}: with the layers cost would offload "
                           f"({len(offloaded)}), the kernels the CPU keeps take longer than "
                           f"the offloads save ({_ms(chosen)} in all against {_ms(whole)} "
                           f"all on {plan.fallback})")
    elif greedy is not None and chosen > greedy:
        # the kept kernels as placed cost more than the split's estimate said, by more
        # than the greedy placement's margin: every match goes to its accelerator
        for unit in kept:
            unit.as_placed = None
        for unit in plan.composites:
            if unit.chosen != unit.greedy:
                unit.chosen = unit.greedy
                unit.reason = (f"on {unit.greedy}: the split cost chose estimates "
                               f"{_ms(chosen)} in all once the CPU's kernels are as placed, "
                               f"the greedy placement {_ms(greedy)}")


def balance_for_throughput(plan: CostPlan) -> None:
    """Re-decide ``plan``'s composites for a stream of inputs (see the module): every
    figure is estimated, then, starting from the latency decisions, the composite whose
    move off the busiest device lowers the busiest device's time the most is moved,
    until no move lowers it. Each move strictly lowers that maximum, so the search
    ends; it is deterministic (ties go to the earlier composite)."""
    plan.objective = "throughput"
    for unit in [*plan.composites, *plan.others]:
        unit.as_placed = None  # figures of the latency placement's split: moves change it
    busy = defaultdict(float, plan.busy("chosen"))
    movable = [u for u in plan.composites if len(u.candidates) == 2]
    while busy:
        peak = max(busy.values())
        best = None
        for unit in movable:
            here = unit.chosen
            if busy[here] < peak:
                continue
            there = unit.greedy if here == plan.fallback else plan.fallback
            if there not in unit.candidates:
                continue
            after = _moved(busy, unit, here, there, plan.fallback)
            new_peak = max(after.values())
            if new_peak < peak * (1 - 1e-9) and (best is None or new_peak < best[0]):
                best = (new_peak, unit, here, there)
        if best is None:
            return
        new_peak, unit, here, there = best
        busy = defaultdict(float, _moved(busy, unit, here, there, plan.fallback))
        unit.chosen = there
        unit.reason = (f"on {there} for throughput: {_ms(unit.seconds(there))} there vs "
                       f"{_ms(unit.seconds(here))} on {here}, which was the busiest device "
                       f"({_ms(peak)} per input, {_ms(new_peak)} after the move)")


def _moved(busy: Mapping[str, float], unit: UnitCost, here: str, there: str,
           fallback: str) -> dict[str, float]:
    """``busy`` (seconds per input by device) once ``unit`` moves from ``here`` to
    ``there`` (:func:`_lanes`: an accelerator's host part stays on the host)."""
    after = dict(busy)
    for device, seconds in _lanes(unit, here, fallback).items():
        after[device] = after.get(device, 0.0) - seconds
    for device, seconds in _lanes(unit, there, fallback).items():
        after[device] = after.get(device, 0.0) + seconds
    return after


def _ask(target: object, hook: str, function: Node):
    """``target.<hook>(function)``, or None where the target lacks the hook."""
    method = getattr(target, hook, None)
    return method(function) if callable(method) else None


def _bound(unit: UnitCost, fallback: str, targets: Mapping[str, object],
           coupled: bool = False) -> None:
    """Put in ``unit.candidates`` the CPU's cached figure (the llvm target timed the whole
    graph's kernels at once) and in ``unit.bounds`` a lower bound of each device without
    a figure (its ``lower_bound`` hook; none: nothing known, zero). ``coupled``: a
    neighbour on the accelerator could keep a tensor with the unit, so the accelerator's
    bound is its ``lower_bound_kept`` (the call with its copies free) plus, where it has
    a ``port_bounds`` hook, the least of each copy (:attr:`UnitCost.copy_bounds`), which
    the cut takes off only where the neighbour runs there too."""
    cached = _ask(targets.get(fallback), "cached", unit.function)
    if cached is not None:
        unit.candidates[fallback] = cached
    for name in (fallback, unit.greedy):
        if name in unit.candidates:
            continue
        target = targets.get(name)
        found = None
        if coupled and name == unit.greedy:
            found = _ask(target, "lower_bound_kept", unit.function)
            copies = _ask(target, "port_bounds", unit.function) if found else None
            if copies is not None:
                inputs, output = copies
                unit.copy_bounds = (tuple(inputs), output)
                found = (found[0] + sum(inputs) + output,
                         f"{found[1]}; its copies at least {_ms(sum(inputs) + output)}")
        if found is None:
            found = _ask(target, "lower_bound", unit.function)
        if found is not None:
            unit.bounds[name] = found


# -- tensors kept on the accelerator between neighbours: the decisions coupled


@dataclass(frozen=True)
class Handover:
    """A tensor from one candidate composite to another of the same accelerator: the
    consumer's input ``position`` is the producer's output. Where both run there and
    their estimates' ports (``CostEstimate.inputs`` / ``output``) have equal keys, the
    device keeps the tensor in its memory: the consumer does not copy it in, and, where
    every reader of it does so, the producer does not copy it out."""

    producer: UnitCost
    consumer: UnitCost
    position: int


def _unit_signature(nodes: list[Node], graph: Graph,
                    users: Mapping) -> tuple[list, list]:
    """A group's inputs (non-constant values produced outside it, in first use order:
    the outlined function's parameters) and its outputs (values read outside it or
    returned), as ``rewrite.outline`` makes them."""
    inside = set(nodes)
    produced = {v for n in nodes for v in n.outputs}
    inputs: list = []
    for node in nodes:
        for v in node.inputs:
            if v is not None and not v.is_const and v not in produced and v not in inputs:
                inputs.append(v)
    returned = set(graph.outputs)
    outputs = [v for n in nodes for v in n.outputs
               if v in returned or any(u not in inside for u in users.get(v, ()))]
    return inputs, outputs


def _handovers(plan: CostPlan, graph: Graph) -> None:
    """Find the candidates' tensors to one another on one accelerator (``handovers``)
    and the producers all of whose output's readers are such candidates (``exclusive``:
    only then can the output stay on the device)."""
    users = graph.consumers()
    signature = {id(u): _unit_signature(u.nodes, graph, users) for u in plan.composites}
    made = {}
    for unit in plan.composites:
        for value in signature[id(unit)][1]:
            made[value] = unit
    readers: dict = defaultdict(list)
    for consumer in plan.composites:
        for position, value in enumerate(signature[id(consumer)][0]):
            producer = made.get(value)
            if producer is not None and producer.greedy == consumer.greedy:
                edge = Handover(producer, consumer, position)
                plan.handovers.append(edge)
                readers[value].append(edge)
    returned = set(graph.outputs)
    for value, edges in readers.items():
        producer = edges[0].producer
        outside = {n for n in users.get(value, ()) if n not in producer.nodes}
        inside = {n for e in edges for n in e.consumer.nodes}
        if value not in returned and outside <= inside \
                and len(signature[id(producer)][1]) == 1:
            plan.exclusive.append(edges)


#: a side of a handover whose unit is not estimated on the accelerator yet (it may be)
_OPEN = object()


def _side(unit: UnitCost, edge: Handover, side: str, optimistic: bool):
    """``unit``'s port on ``edge`` (``side`` "in": its input, "out": its output) from its
    accelerator estimate; ``_OPEN`` where it has none yet but may (``optimistic`` only);
    else None."""
    estimate = unit.candidates.get(unit.greedy)
    if estimate is not None:
        if side == "out":
            return estimate.output
        return estimate.inputs[edge.position] if len(estimate.inputs) > edge.position \
            else None
    if not optimistic or unit.greedy in unit.no_estimate:
        return None
    return _OPEN


def _port(edge: Handover, side: str, optimistic: bool = False):
    """The port ``edge``'s consumer (``side="in"``) or producer (``"out"``) saves where
    the accelerator keeps the tensor (``CostEstimate.inputs`` / ``output``), None where
    the two estimates' ports do not match (or either device was not estimated).
    ``optimistic``: a side not estimated yet matches any key, and where it is the
    saving one, saves its bound (:attr:`UnitCost.copy_bounds`; a port without a key)."""
    made = _side(edge.producer, edge, "out", optimistic)
    used = _side(edge.consumer, edge, "in", optimistic)
    mine, theirs = (used, made) if side == "in" else (made, used)
    if mine is None or theirs is None:
        return None
    if mine is _OPEN:
        owner = edge.consumer if side == "in" else edge.producer
        bounds = owner.copy_bounds
        if bounds is None or (theirs is not _OPEN and theirs.key is None):
            return None
        if side == "out":
            return Port(None, bounds[1])
        return Port(None, bounds[0][edge.position]) if len(bounds[0]) > edge.position \
            else None
    if mine.key is None or (theirs is not _OPEN and theirs.key != mine.key):
        return None
    return mine


def saving_terms(plan: CostPlan, optimistic: bool = False
                 ) -> list[tuple[object, list[UnitCost]]]:
    """The coupled terms of the model's latency: ``(port, units)``, the port's seconds
    saved where every unit of ``units`` runs on the accelerator (the consumer's copy in
    of a tensor its producer there holds in the same form; the producer's copy out
    where every reader of its output does). ``optimistic``: also the terms the units
    not estimated yet could make (:func:`_port`)."""
    terms = []
    for edge in plan.handovers:
        port = _port(edge, "in", optimistic)
        if port is not None and port.seconds:
            terms.append((port, [edge.producer, edge.consumer]))
    for edges in plan.exclusive:
        ports = [_port(e, "out", optimistic) for e in edges]
        if all(p is not None for p in ports) and ports[0].seconds:
            readers = list({id(e.consumer): e.consumer for e in edges}.values())
            terms.append((ports[0], [edges[0].producer, *readers]))
    return terms


def saved_ports(plan: CostPlan, which: str) -> list:
    """The ports (``heterocc.sdk.Port``) whose copies placement ``which`` (``"chosen"``,
    ``"greedy"``; none all on the CPU) saves: the tensors kept on the accelerator."""
    if which == "cpu":
        return []
    return [port for port, units in saving_terms(plan)
            if all(getattr(u, which) == u.greedy for u in units)]


def _kept_seconds(plan: CostPlan, which: str) -> float:
    """Seconds the accelerators save by keeping tensors between neighbours under
    placement ``which``."""
    return sum(port.seconds for port in saved_ports(plan, which))


def _couple(plan: CostPlan, targets: Mapping[str, object]) -> None:
    """Decide the composites: the exact minimum of the model's latency (the units'
    times on their devices less the copies kept between neighbours), estimating only
    what that minimum needs. A branch and bound over the cut:

    1. Every figure not estimated is replaced by an optimistic one: the device's lower
       bound (:func:`_bound`; zero without one), and a neighbour's handover with a unit
       not estimated counted as if their ports matched (:func:`saving_terms` with
       ``optimistic``), saving the bound of the copy where the unestimated side is the
       saving one. Call this relaxed latency ``g``, the true one ``f``.
    2. The minimum cut of ``g`` (:func:`_cut`: the largest minimizer, ties to the
       accelerator) puts each unit on a device. If every unit is on a device it was
       estimated on, that is the decision; else some of those that are not are
       estimated and the cut made again: those on the CPU, and those on the
       accelerator every later cut would put there too (their figure for the cut
       within their CPU one), or else one, the likeliest to lose (the largest excess of
       its figure there over its CPU one). Each round estimates a new figure, so it
       ends.

    Why the final cut is ``f``'s exact minimum, and the one estimating everything gives:
    ``g <= f`` for every assignment ``x``. A unit's time on the CPU is its figure or a
    lower bound of it. On the accelerator, charge each saving term to the unit whose
    port it saves (each port is in at most one term: a consumer's input has one
    producer, a producer one output): an estimated unit's time and its terms are exact
    in ``g`` save that ``g`` has more terms (a port not estimated matches any key); an
    unestimated unit's time less the copies it saves under ``x`` is its compute time
    plus its other copies, at least ``lower_bound_kept`` plus those copies'
    ``copy_bounds``, which is its relaxed time less the bounds of the terms that apply in
    ``g`` (a superset of ``f``'s). Now let ``x*`` be the cut's assignment with every unit
    on an estimated device: every term that applies involves only units on the
    accelerator, all estimated, so ``g(x*) = f(x*)``; and for any ``x``,
    ``f(x) >= g(x) >= g(x*) = f(x*)``: ``x*`` minimizes ``f``. It is also ``f``'s
    largest minimizer (the cut over every figure): a minimizer ``y`` of ``f`` has
    ``g(y) <= f(y) = f(x*) = g(x*)``, so ``y`` minimizes ``g`` and lies within ``x*``
    (minimizers of a submodular function are closed under union; the cut gives the
    largest). Bounds are compared in whole picoseconds, as the cut counts, less a
    picosecond per rounded term (:func:`_figure`), so rounding keeps ``g <= f``.

    A unit no pattern-matched device gave a figure for (asked, None) is left where the
    pattern put it, as the greedy placement would."""
    fallback = plan.fallback
    while True:
        _cut(plan)
        todo = [u for u in plan.composites
                if u.chosen not in u.candidates and u.chosen not in u.no_estimate]
        if not todo:
            break
        # estimated this round: on the CPU, all it asks for (the llvm target times the
        # whole graph's kernels on the first); on the accelerator, those every later cut
        # puts there too until they are estimated (their figure for the cut within their
        # CPU one: savings only lower it, and an estimate of the CPU only raises a bound),
        # else one, the likeliest to lose (the most above its other device's figure
        # there: it leans on its neighbours' savings)
        excess = {id(u): _excess(u, fallback) for u in todo}
        batch = [u for u in todo if u.chosen == fallback or excess[id(u)] is None
                 or excess[id(u)] <= 0]
        if not batch:
            batch = [max(todo, key=lambda u: excess[id(u)])]
        for unit in batch:
            if unit.chosen in unit.candidates:  # answered by the cache meanwhile
                continue
            device = targets.get(unit.chosen)
            found = _ask(device, "estimate", unit.function)
            if found is None:
                unit.no_estimate.add(unit.chosen)
                continue
            unit.candidates[unit.chosen] = found
            for other in plan.composites:  # what the target measured with it
                if unit.chosen in (other.greedy, fallback) \
                        and unit.chosen not in other.candidates:
                    cached = _ask(device, "cached", other.function)
                    if cached is not None:
                        other.candidates[unit.chosen] = cached
    for unit in plan.composites:
        _explain(unit, plan)
        for device in (unit.greedy, plan.fallback):
            if device not in unit.candidates and device not in unit.no_estimate:
                plan.pending.append((unit, device))


def _other(unit: UnitCost, fallback: str) -> str:
    return fallback if unit.chosen == unit.greedy else unit.greedy


def _ps(seconds: float) -> int:  # picoseconds: integer capacities, exact sums
    return round(seconds * 1e12)


def _figure(unit: UnitCost, device: str, fallback: str) -> int | None:
    """``unit``'s time on ``device`` in picoseconds for the cut: its estimate, else its
    lower bound (zero without one) less the rounding of its terms (see :func:`_couple`);
    None where the device was asked and gave no figure."""
    if device in unit.candidates:
        return _ps(unit.seconds(device))
    if device in unit.no_estimate:
        return None
    bound = unit.bounds.get(device)
    if bound is None:
        return 0
    ports = len(unit.copy_bounds[0]) + 1 if device != fallback and unit.copy_bounds else 0
    return max(0, _ps(bound[0]) - 2 * (ports + 1))


def _excess(unit: UnitCost, fallback: str) -> int | None:
    """How much longer the cut counts ``unit`` on the accelerator than on the CPU
    (picoseconds; None where a device gave no figure: the unit is fixed there)."""
    there, here = _figure(unit, unit.greedy, fallback), _figure(unit, fallback, fallback)
    return None if there is None or here is None else there - here


def _explain(unit: UnitCost, plan: CostPlan) -> None:
    """``unit.reason`` for the device the cut chose (kept as chosen)."""
    chosen, fallback = unit.chosen, plan.fallback
    other = _other(unit, fallback)
    if chosen in unit.candidates and other not in unit.candidates \
            and other not in unit.no_estimate:
        if other in unit.bounds:
            _decide(unit, unit.greedy, fallback, (other, *unit.bounds[other]))
            return
        _decide(unit, unit.greedy, fallback, (other, 0.0, ""))
        unit.reason = (unit.reason.split(";")[0] + f"; {other} not estimated: with the "
                       f"copies its neighbours keep, this is the least whatever its figure")
        return
    _decide(unit, unit.greedy, fallback)
    unit.chosen = chosen
    both = unit.greedy in unit.candidates and fallback in unit.candidates
    if both and chosen == unit.greedy and unit.seconds(chosen) > unit.seconds(fallback):
        unit.reason = _coupled_reason(plan, unit)


def _coupled_reason(plan: CostPlan, unit: UnitCost) -> str:
    mine, cpu = unit.candidates[unit.chosen], unit.candidates[plan.fallback]
    kept = sum(p.seconds for p, units in saving_terms(plan)
               if any(u is unit for u in units) and all(u.chosen == u.greedy for u in units))
    return (f"on {unit.chosen} with its neighbours: {_ms(mine.total_s)} alone vs "
            f"{_ms(cpu.total_s)} on {plan.fallback}, but {_ms(kept)} of copies and "
            f"layouts saved where tensors stay in {unit.chosen}'s memory")


def _cut(plan: CostPlan) -> None:
    """Set ``chosen`` of the composites to the placement of least latency, their figures
    estimated or optimistic (:func:`_couple`; a unit with a device that gave no figure
    stays where the pattern put it): a minimum s-t cut (source side: the CPU) of the
    function ``sum(unit's time) - sum(saving terms)``, each term ``-s * x1 * ... * xk``
    (``x`` = 1 on the accelerator) by an extra node ``w``: ``-s * w + s * w * sum(1 -
    xi)`` (Kolmogorov and Zabih's construction for submodular functions). Ties go to
    the accelerator (the least source side: what the source reaches)."""
    free = []
    for unit in plan.composites:
        if _figure(unit, unit.greedy, plan.fallback) is None \
                or _figure(unit, plan.fallback, plan.fallback) is None:
            unit.chosen = unit.greedy
        else:
            free.append(unit)
    index = {id(u): k + 2 for k, u in enumerate(free)}  # 0 source, 1 sink
    graph: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for unit in free:
        alpha = _figure(unit, unit.greedy, plan.fallback) \
            - _figure(unit, plan.fallback, plan.fallback)
        _unary(graph, index[id(unit)], alpha)
    nodes = len(free) + 2
    for port, units in saving_terms(plan, optimistic=True):
        seconds = _ps(port.seconds)
        variables = [index[id(u)] for u in units if id(u) in index]  # others: on it
        if not variables:
            continue
        if len(variables) == 1:
            _unary(graph, variables[0], -seconds)
            continue
        w, nodes = nodes, nodes + 1
        graph[w][1] += seconds  # -s*w == -s + s*(1 - w): cut when w on the source side
        for x in variables:
            graph[x][w] += seconds  # s * w * (1 - x): x on the source side, w not
    source_side = _residual_reach(graph, 0, 1)
    for unit in free:
        unit.chosen = plan.fallback if index[id(unit)] in source_side else unit.greedy


def _unary(graph, node: int, alpha: int) -> None:
    """``alpha * x`` (x = 1 on the sink side) as an edge."""
    if alpha > 0:
        graph[0][node] += alpha  # cut when the node is on the sink side
    elif alpha < 0:
        graph[node][1] += -alpha  # alpha + (-alpha) * (1 - x): cut on the source side


def _residual_reach(graph, source: int, sink: int) -> set[int]:
    """The nodes the source reaches in the residual graph of a maximum flow
    (Edmonds-Karp: shortest augmenting paths, in a fixed order)."""
    residual: dict[int, dict[int, int]] = defaultdict(dict)
    for a, edges in graph.items():
        for b, capacity in edges.items():
            residual[a][b] = residual[a].get(b, 0) + capacity
            residual[b].setdefault(a, 0)
    order = {a: sorted(edges) for a, edges in residual.items()}  # a fixed order
    # the paths source -> x -> sink first, without a search: each unit's two figures
    # give one, most of a model's augmenting paths (a search per path took ResNet-18's
    # cut 15-25 ms). Any maximum flow leaves the same nodes reachable from the source
    # (the least minimum cut), so the result is the one the searches alone give
    for x in order.get(source, ()):
        flow = min(residual[source][x], residual[x].get(sink, 0))
        if flow > 0:
            residual[source][x] -= flow
            residual[x][source] += flow
            residual[x][sink] -= flow
            residual[sink][x] += flow
    while True:
        parent = {source: None}
        queue = [source]
        for a in queue:
            for b in order.get(a, ()):
                if b not in parent and residual[a][b] > 0:
                    parent[b] = a
                    queue.append(b)
            if sink in parent:
                break
        if sink not in parent:
            return set(parent)
        path, b = [], sink
        while parent[b] is not None:
            path.append((parent[b], b))
            b = parent[b]
        flow = min(residual[a][b] for a, b in path)
        for a, b in path:
            residual[a][b] -= flow
            residual[b][a] += flow
