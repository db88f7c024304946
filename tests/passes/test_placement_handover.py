"""Placement with tensors kept on the accelerator between neighbours: the minimum cut
is the exact minimum of the latency with the handover terms (checked against every
assignment of small graphs), ties go to the accelerator, a neighbour the bound kept on
the CPU is estimated once the other side could keep the tensor, and the totals count
the copies saved."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from heterocc.passes.placement import CostPlan, Handover, UnitCost, _couple, _kept_seconds
from heterocc.sdk import CostEstimate, Port


def _unit(cpu: float | None, vta: float | None, ins: list, out) -> UnitCost:
    unit = UnitCost([], greedy="vta", chosen="llvm")
    if cpu is not None:
        unit.candidates["llvm"] = CostEstimate(cpu)
    if vta is not None:
        unit.candidates["vta"] = CostEstimate(vta, inputs=tuple(Port(k, s) for k, s in ins),
                                              output=Port(*out))
    return unit


def _plan(units, edges, exclusive) -> CostPlan:
    plan = CostPlan(units, [], "llvm")
    plan.handovers = [Handover(units[a], units[b], k) for a, b, k in edges]
    plan.exclusive = [[e for e in plan.handovers if e.producer is units[a]]
                      for a in exclusive]
    return plan


def _latency(plan: CostPlan) -> float:
    return sum(u.seconds(u.chosen) for u in plan.composites) - _kept_seconds(plan, "chosen")


def _brute_force(plan: CostPlan) -> tuple[float, list[set[int]]]:
    """The least latency over every assignment, and the accelerator sets reaching it."""
    best, sets = None, []
    for bits in itertools.product((0, 1), repeat=len(plan.composites)):
        for unit, bit in zip(plan.composites, bits):
            unit.chosen = "vta" if bit else "llvm"
        value = round(_latency(plan) * 1e12)
        chosen = {k for k, bit in enumerate(bits) if bit}
        if best is None or value < best:
            best, sets = value, [chosen]
        elif value == best:
            sets.append(chosen)
    return best, sets


def test_a_chain_slower_offloaded_layer_by_layer_moves_as_a_whole():
    # each layer alone is slower on vta (1.0 against 0.8-0.9 ms), the chain is faster:
    # its three middle tensors stay in the device's memory
    units = [_unit(0.8, 1.0, [(None, 0.1)], ("k", 0.4)),
             _unit(0.8, 1.0, [("k", 0.4)], ("k", 0.4)),
             _unit(0.9, 1.0, [("k", 0.4)], (None, 0.4))]
    plan = _plan(units, [(0, 1, 0), (1, 2, 0)], [0, 1])
    _couple(plan, {})
    assert [u.chosen for u in units] == ["vta"] * 3
    assert _latency(plan) == 3.0 - 4 * 0.4
    assert plan.total("chosen") == 3.0 - 1.6 and plan.total("cpu") == 2.5
    assert "saved where tensors stay in vta's memory" in units[1].reason
    # keys that differ (another layout) keep nothing: each stays where it is faster
    units[1].candidates["vta"] = CostEstimate(1.0, inputs=(Port("other", 0.4),),
                                              output=Port("other", 0.4))
    for unit in units:
        unit.chosen = "llvm"
    _couple(plan, {})
    assert [u.chosen for u in units] == ["llvm"] * 3


def test_the_cut_is_the_exact_minimum_and_ties_go_to_the_accelerator():
    rng = np.random.default_rng(3)
    # a diamond with a tail: 0 -> 1, 0 -> 2, 1 -> 3, 2 -> 3 (an addition), 3 -> 4
    edges = [(0, 1, 0), (0, 2, 0), (1, 3, 0), (2, 3, 1), (3, 4, 0)]
    for trial in range(40):
        keys = rng.choice(["k", "k", "k", None], 8)
        units = []
        for k in range(5):
            cpu = float(rng.integers(1, 12))  # integers: ties happen
            vta = float(rng.integers(1, 12))
            ins = [(keys[k], float(rng.integers(0, 4))), (keys[k + 1], float(rng.integers(0, 4)))]
            units.append(_unit(cpu, vta, ins, (keys[k + 2], float(rng.integers(0, 4)))))
        plan = _plan(units, edges, [0, 1, 2, 3])
        best, optimal = _brute_force(plan)
        for unit in units:
            unit.chosen = "llvm"
        _couple(plan, {})
        chosen = {k for k, u in enumerate(units) if u.chosen == "vta"}
        assert round(_latency(plan) * 1e12) == best, trial
        assert all(s <= chosen for s in optimal), trial  # the largest optimal offload
        again = [u.chosen for u in units]
        _couple(plan, {})
        assert [u.chosen for u in units] == again  # deterministic


class _Device:
    """A target whose estimates are made in advance, counting those asked for."""

    def __init__(self, figures: dict):
        self.figures, self.asked = figures, []

    def estimate(self, function):
        self.asked.append(function)
        return self.figures.get(function)


def test_a_neighbour_the_bound_kept_on_the_cpu_is_estimated_when_it_could_share():
    vta = _Device({"second": CostEstimate(1.0, inputs=(Port("k", 0.5),),
                                          output=Port(None, 0.1))})
    first = _unit(2.0, 1.0, [(None, 0.1)], ("k", 0.5))  # faster on vta alone
    # alone its bound says vta loses (0.7 + its copies 0.6 against 1.2 on the CPU)
    second = _unit(1.2, None, [], (None, 0.0))
    second.function, second.bounds["vta"] = "second", (1.3, "test")
    second.copy_bounds = ((0.5,), 0.1)
    plan = _plan([first, second], [(0, 1, 0)], [0])
    _couple(plan, {"vta": vta})
    assert vta.asked == ["second"]
    # 1.0 + 1.0 - 0.5 (second reads it there) - 0.5 (first does not copy it out)
    assert first.chosen == second.chosen == "vta" and _latency(plan) == 1.0
    assert plan.pending == [] and second.reason.startswith("on vta: 1e+03 ms vs")
    # a neighbour whose side cannot keep the tensor (no key) saves it nothing: its bound
    # with its copies keeps it on the CPU, unestimated (left for the report's totals)
    vta.asked.clear()
    third = _unit(1.2, None, [], (None, 0.0))
    third.function, third.bounds["vta"] = "second", (1.3, "test")
    third.copy_bounds = ((0.5,), 0.1)
    lone = _unit(2.0, 1.0, [(None, 0.1)], (None, 0.5))
    plan = _plan([lone, third], [(0, 1, 0)], [0])
    _couple(plan, {"vta": vta})
    assert vta.asked == [] and third.chosen == "llvm" and lone.chosen == "vta"
    assert plan.pending == [(third, "vta")] and "vta needs at least 1.3e+03 ms" in third.reason


def _random_graph(rng, size: int):
    """Units with every figure made (CPU and vta, the vta ones with ports: each copy's
    seconds in its total, keys that may match) and handovers of a random DAG."""
    keys = ["k", "k", "k", "j", None]
    edges, exclusive = [], []
    for consumer in range(1, size):
        producers = rng.choice(consumer, size=min(consumer, int(rng.integers(1, 3))),
                               replace=False)
        edges += [(int(p), consumer, k) for k, p in enumerate(producers)]
    for producer in {a for a, _, _ in edges}:
        if rng.random() < 0.7:
            exclusive.append(producer)
    units = []
    for k in range(size):
        inputs = [(keys[rng.integers(len(keys))], float(rng.integers(0, 5)))
                  for _ in range(2)]
        output = (keys[rng.integers(len(keys))], float(rng.integers(0, 5)))
        compute = float(rng.integers(1, 12))
        vta = compute + sum(s for _, s in inputs) + output[1]
        units.append(_unit(float(rng.integers(1, 25)), vta, inputs, output))
        units[-1].function = k
    return units, edges, exclusive


def _forget(units, rng, vta_device, cpu_device):
    """Each unit's vta figure moved into ``vta_device`` and replaced by lower bounds
    (of its compute and of each copy, some looser than others), some CPU figures too."""
    for k, unit in enumerate(units):
        unit.chosen, unit.reason = "llvm", ""
        figure = unit.candidates.pop("vta")
        vta_device.figures[k] = figure
        ports = [p.seconds for p in (*figure.inputs, figure.output)]
        copies = [s * float(rng.choice([0.0, 0.5, 1.0])) for s in ports]
        unit.copy_bounds = (tuple(copies[:-1]), copies[-1])
        compute = (figure.total_s - sum(ports)) * float(rng.choice([0.3, 0.8, 1.0]))
        unit.bounds["vta"] = (compute + sum(copies), "test")
        if rng.random() < 0.3:
            figure = unit.candidates.pop("llvm")
            cpu_device.figures[k] = figure
            unit.bounds["llvm"] = (figure.total_s * float(rng.choice([0.5, 1.0])), "test")


def test_the_bounded_search_places_as_the_search_over_every_figure():
    rng = np.random.default_rng(7)
    made = possible = 0
    for trial in range(60):
        units, edges, exclusive = _random_graph(rng, int(rng.integers(3, 8)))
        plan = _plan(units, edges, exclusive)
        best, optimal = _brute_force(plan)
        for unit in units:
            unit.chosen = "llvm"
        _couple(plan, {})  # every figure there: the exact cut
        everything = [u.chosen for u in units]
        assert round(_latency(plan) * 1e12) == best, trial
        assert {k for k, c in enumerate(everything) if c == "vta"} == max(optimal, key=len)
        vta, cpu = _Device({}), _Device({})
        _forget(units, rng, vta, cpu)
        _couple(plan, {"vta": vta, "llvm": cpu})
        assert [u.chosen for u in units] == everything, trial
        assert len(set(vta.asked)) == len(vta.asked)  # none twice
        made += len(vta.asked) + len(cpu.asked)
        possible += len(vta.figures) + len(cpu.figures)
        plan.targets = {"vta": vta, "llvm": cpu}
        plan.complete()  # the report's figures, made after the decision
        assert all(len(u.candidates) == 2 for u in units)
        assert round(_latency(plan) * 1e12) == best, trial
    print(f"{made} of {possible} figures estimated to decide")
    assert made < 0.85 * possible, (made, possible)  # the figures the bounds saved (296 of 368)


def test_a_bound_just_under_the_cpu_is_estimated_and_decides():
    # the exact minimum: no margin below which an offload is not looked for (0.97 ms
    # against 1.0 on the CPU offloads), nor an estimate where the bound settles it
    vta = _Device({0: CostEstimate(0.97e-3), 1: CostEstimate(1.2e-3)})
    units = [_unit(1e-3, None, [], (None, 0.0)) for _ in range(2)]
    for k, (unit, bound) in enumerate(zip(units, (0.95e-3, 1.01e-3))):
        unit.function, unit.bounds["vta"] = k, (bound, "test")
    plan = _plan(units, [], [])
    _couple(plan, {"vta": vta})
    assert vta.asked == [0] and [u.chosen for u in units] == ["vta", "llvm"]
    assert "vta needs at least 1.01 ms (test)" in units[1].reason


def test_vta_bounds_of_a_kept_call_and_its_copies_are_below_its_estimate(tmp_path, monkeypatch):
    """The premise of the bounded search: vta's ``lower_bound_kept`` plus its
    ``port_bounds`` never exceed its estimate, and each copy's bound its port's seconds."""
    pytest.importorskip("onnxruntime.quantization")
    import heterocc
    from heterocc.targets.vta import VtaTarget
    from tests.targets.vta.ort_models import quantize, small_cnn

    monkeypatch.setenv("HETEROCC_CACHE_DIR", str(tmp_path / "cache"))
    model = quantize(small_cnn(), tmp_path, "QDQ", "QInt8")
    for vta in (VtaTarget(), VtaTarget(config="1x32x32", clock_mhz=300)):
        graph = heterocc.compile(model, target=[vta, "llvm"], placement="greedy").graph
        functions = [f for r in graph.nodes if r.body is not None
                     and r.attrs.get("target") == "vta" for f in r.body.nodes]
        assert functions
        for function in functions:
            kept, _ = vta.lower_bound_kept(function)
            inputs, output = vta.port_bounds(function)
            estimate = vta.estimate(function)
            assert len(inputs) == len(estimate.inputs)
            assert all(b <= p.seconds for b, p in zip(inputs, estimate.inputs))
            assert output <= estimate.output.seconds
            assert kept + sum(inputs) + output <= estimate.total_s


def test_a_unit_offloaded_with_its_neighbours_needs_no_cpu_figure():
    # two layers that keep their tensor: together 1.0 + 0.8 - 0.9 on vta, less than the
    # first's 2.0 on the CPU whatever the second's time there (no bound for it:
    # element-wise work), so the CPU is not asked
    cpu = _Device({1: CostEstimate(0.5)})
    first = _unit(2.0, 1.0, [(None, 0.1)], ("k", 0.5))
    second = _unit(None, 0.8, [("k", 0.4)], (None, 0.1))
    second.function = 1
    plan = _plan([first, second], [(0, 1, 0)], [0])
    _couple(plan, {"llvm": cpu})
    assert cpu.asked == [] and [u.chosen for u in plan.composites] == ["vta", "vta"]
    assert "llvm not estimated: with the copies its neighbours keep" in second.reason
    assert plan.pending == [(second, "llvm")]
