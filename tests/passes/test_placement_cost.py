"""Placement by cost: the targets' estimates, the choice they lead to, the report in time
and the picture; outputs bit-exact whatever the placement."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import heterocc
from heterocc.accel_sim import HardwareConfig
from heterocc.errors import AcceleratorError, InputError, PartitionError, TargetError
from heterocc.ops.macs import multiply_accumulates
from heterocc.passes.partition import partition
from heterocc.passes.placement_picture import placement_html, placement_svg
from heterocc.runtime.interpreter import evaluate
from heterocc.sdk import CostCache, CostEstimate, HostLink, accelerator_estimate, workload_key
from heterocc.sdk import cost as sdk_cost
from heterocc.targets import get_target, parse_targets
from heterocc.targets.llvm import cost as cpu_cost
from heterocc.targets.vta import VtaTarget

pytest.importorskip("onnxruntime.quantization")

from tests.targets.vta.ort_models import inputs, quantize, small_cnn  # noqa: E402


@pytest.fixture(autouse=True)
def cost_cache(tmp_path, monkeypatch):
    """Every estimate cached under the test's own directory, never the user's."""
    directory = tmp_path / "cache"
    monkeypatch.setenv("HETEROCC_CACHE_DIR", str(directory))
    return directory


@pytest.fixture
def no_host_part(monkeypatch):
    """vta's estimates without the host's part of a call (its operands laid out by the
    host's CPU, tens of microseconds on the small CNN's layers): a test whose
    accelerator is made very fast to take every layer times the device alone."""
    from heterocc.targets.vta import cost as vta_cost

    monkeypatch.setattr(vta_cost, "host_seconds", lambda kernel, function: 0.0)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return quantize(small_cnn(), tmp_path_factory.mktemp("model"), "QDQ", "QInt8")


def _compile(model, vta: VtaTarget, placement: str):
    return heterocc.compile(model, target=[vta, "llvm"], placement=placement)


def test_host_link_and_accelerator_estimate():
    link = HostLink(gbps=1.0, latency_us=2.0)
    assert link.seconds(1_000_000, 2) == pytest.approx(4e-6 + 1e-3)
    est = accelerator_estimate(200_000, 100, link, 1_000_000, 2)
    assert est.compute_s == pytest.approx(2e-3) and est.transfer_s == pytest.approx(1.004e-3)
    assert est.total_s == pytest.approx(3.004e-3)
    assert est.to_json()["total_ms"] == pytest.approx(3.004)
    with pytest.raises(TargetError, match="bandwidth"):
        HostLink(gbps=0)
    with pytest.raises(TargetError, match="clock"):
        accelerator_estimate(1, 0, link, 0, 0)


def test_vta_clock_and_link_options_from_the_target_string():
    vta = parse_targets("vta -config=1x32x32 -clock_mhz=300 -link_gbps=1.5 "
                        "-link_latency_us=0.5,llvm")[0]
    assert vta.config.block_in == 32 and vta.config.clock_mhz == 300
    assert vta.config.link_mbytes_per_s == 1500 and vta.config.link_latency_ns == 500
    assert vta.options()["link_gbps"] == 1.5
    assert HardwareConfig().clock_mhz == 100  # the default: an FPGA-like clock
    with pytest.raises(TargetError, match="clock_mhz"):
        VtaTarget(clock_mhz="fast")
    with pytest.raises(AcceleratorError, match="clock_mhz"):
        HardwareConfig(clock_mhz=0)


def test_cost_cache_round_trip_and_a_damaged_file(cost_cache):
    cache = CostCache()
    cache.put("cpu", "abc", {"seconds": 0.5})
    assert CostCache().get("cpu", "abc") == {"seconds": 0.5}
    (cost_cache / "costs.jsonl").write_text('{"key": "cpu/abc", "entr')  # cut short
    (cost_cache / "costs.json").write_text("{not json")
    assert CostCache().get("cpu", "abc") is None  # measured again, never an error
    cache = CostCache()
    cache.put("cpu", "abc", {"seconds": 0.25})  # after the damaged line, on its own line
    assert CostCache().get("cpu", "abc") == {"seconds": 0.25}


def test_cost_cache_appends_and_merges_its_journal_once_it_is_large(cost_cache, monkeypatch):
    monkeypatch.setattr(sdk_cost, "JOURNAL_COMPACT_BYTES", 2_000)
    cache = CostCache()
    sizes = []
    for i in range(200):
        cache.put("cpu", f"w{i}", {"seconds": i / 1000})
        sizes.append((cost_cache / "costs.jsonl").stat().st_size)
    # each entry appended a line; the journal was merged and emptied whenever it outgrew
    # the limit and the object, so it never held more than one entry past the larger
    merged = [i for i in range(1, 200) if sizes[i] < sizes[i - 1]]
    assert len(merged) >= 2
    assert max(sizes) <= max(2_000, (cost_cache / "costs.json").stat().st_size) + 100
    fresh = CostCache()
    assert all(fresh.get("cpu", f"w{i}") == {"seconds": i / 1000} for i in range(200))


def test_a_later_journal_line_wins_over_the_object(cost_cache):
    cost_cache.mkdir(parents=True)
    (cost_cache / "costs.json").write_text(json.dumps({"cpu/w": {"seconds": 1.0}}))
    (cost_cache / "costs.jsonl").write_text(
        json.dumps({"key": "cpu/w", "entry": {"seconds": 2.0}}) + "\n")
    assert CostCache().get("cpu", "w") == {"seconds": 2.0}


def test_unknown_placement_is_refused(model):
    with pytest.raises(InputError, match="placement"):
        heterocc.compile(model, target="vta,llvm", placement="fastest")
    from heterocc.frontend.onnx import from_onnx

    with pytest.raises(PartitionError, match="placement"):
        partition(from_onnx(model), {}, "llvm", placement="fastest")


def test_cost_follows_the_clock_and_stays_bit_exact(model, no_host_part):
    """A very slow accelerator keeps everything on the CPU, a very fast one takes every
    match; both compute the integers of the greedy placement exactly."""
    x = inputs(1)[0]
    greedy = _compile(model, VtaTarget(), "greedy")
    slow = _compile(model, VtaTarget(clock_mhz=1, link_gbps=0.001), "cost")
    fast = _compile(model, VtaTarget(clock_mhz=1_000_000, link_gbps=1_000_000,
                                     link_latency_us=0), "cost")
    assert slow.placement_report.by_target() == {"llvm": len(slow.placement_report.placements)}
    assert fast.placement_report.by_target() == greedy.placement_report.by_target()
    (expected,) = greedy.run([x])
    for compiled in (slow, fast):
        (got,) = compiled.run([x])
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(got, evaluate(compiled.graph, [x])[0])
    # the slow accelerator's report explains each decision in time
    rows = [p for p in slow.placement_report.placements if p.estimates]
    assert rows and all("stays on llvm" in p.reason for p in rows if "vta" in p.estimates)
    totals = slow.placement_report.plan.totals()
    assert totals["chosen_ms"] == totals["all_cpu_ms"] < totals["greedy_ms"]


def test_report_in_time(model, capsys, no_host_part):
    from heterocc.cli import main

    vta = VtaTarget(clock_mhz=1_000_000, link_gbps=1_000_000, link_latency_us=0)
    report = _compile(model, vta, "cost").placement_report
    data = report.to_json()
    assert data["placement"] == "cost"
    est = data["estimated"]
    assert est["chosen_ms"] <= min(est["all_cpu_ms"], est["greedy_ms"])
    firsts = [r for r in data["nodes"] if "estimates" in r]
    assert firsts and all("llvm" in r["estimates"] for r in firsts)
    conv = next(r for r in firsts if r["op"] == "ConvInteger")
    assert set(conv["estimates"]) == {"vta", "llvm"} and conv["target"] == "vta"
    assert conv["estimates"]["vta"]["cycles"] == conv["cycles"]  # the model's own figure
    assert data["regions"] and all("vta" in r["estimates"] for r in data["regions"])
    text = report.format()
    assert "estimate ms" in text and "estimated end-to-end latency" in text
    json.dumps(data)  # serializable as it is
    path = "/dev/null"
    assert main(["partition", _save(model), "--target", "vta -clock_mhz=1,llvm", "--json",
                 "--svg", path]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["placement"] == "cost" and out["nodes_by_target"] == {
        "llvm": len(out["nodes"])}


def _save(model) -> str:
    import tempfile

    import onnx

    path = tempfile.mktemp(suffix=".onnx")
    onnx.save(model, path)
    return path


def test_picture_has_a_box_per_unit_coloured_by_device(model):
    report = _compile(model, VtaTarget(), "cost").placement_report
    svg = placement_svg(report, "small cnn")
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    boxes = [r for r in root.iter(f"{ns}rect") if r.get("rx")]
    assert len(boxes) == len({p.unit for p in report.placements})
    fills = {r.get("fill") for r in boxes}
    assert len(fills) == len(report.by_target())  # one colour per device used
    assert "small cnn" in svg and " ms" in svg
    page = placement_html(report)
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "estimated" in page


def test_accelerator_estimate_matches_the_cycles_of_a_run(model, no_host_part):
    """Per region, the estimate's cycles against the device's own cycle counts in a run
    (the simulator's timing model): within 10% (the same model: equal)."""
    vta = VtaTarget(clock_mhz=1_000_000, link_gbps=1_000_000, link_latency_us=0)
    compiled = _compile(model, vta, "cost")
    compiled.run([inputs(1)[0]])
    ran = {k.name: k.last_cycles for k in vta.kernels}
    regions: dict[str, list[int]] = {}
    for p in compiled.placement_report.placements:
        if p.target == "vta" and "vta" in p.estimates:
            sums = regions.setdefault(p.region, [0, 0])
            sums[0] += p.estimates["vta"].detail["cycles"]
            sums[1] += ran[p.function]
    assert regions
    for region, (estimated, cycles) in regions.items():
        assert cycles > 0 and abs(estimated - cycles) <= 0.1 * cycles, region


def test_cpu_estimate_is_measured_once_then_read_from_the_cache(model, monkeypatch):
    llvm = get_target("llvm")
    function = next(n for n in _compile(model, VtaTarget(), "greedy").graph.nodes
                    if n.body is not None and n.attrs.get("target") == "vta").body.nodes[0]
    first = llvm.estimate(function)
    assert first.source == "measured" and first.compute_s > 0 and first.transfer_s == 0

    def measure_again(self, function):
        raise AssertionError("measured again: the cache was not used")

    monkeypatch.setattr(cpu_cost.CpuCostModel, "measure", measure_again)
    again = get_target("llvm").estimate(function)  # a new instance: from disk
    assert again.source == "measured (cached)" and again.compute_s == first.compute_s
    assert len(workload_key(function)) == 20


def test_cpu_estimate_agrees_with_a_measurement_of_the_same_program(model, monkeypatch,
                                                                    tmp_path):
    """The estimate against the same program timed again here with many repeats: the
    25% figure is the benchmark's (``benchmarks/placement.py``); a loaded test machine
    gets a factor of two, and up to five windows, each a fresh estimate (an empty cache)
    and a fresh timing. Why windows: the program takes some 20 us, and beside a busy
    core a whole window of it ran 2.6x slower than the compile's own (CI, session 15:
    the fastest of 300 calls 53 us against an estimate of 21 us), and an estimate taken
    in such a window lies as far above; an estimate of another program is off in every
    window."""
    function = next(n for n in _compile(model, VtaTarget(), "greedy").graph.nodes
                    if n.body is not None and n.attrs.get("target") == "vta").body.nodes[0]
    run, graph = cpu_cost.cpu_program(get_target("llvm"), function)
    arguments = cpu_cost.random_arguments(graph.inputs)
    windows = []
    for window in range(5):
        monkeypatch.setenv("HETEROCC_CACHE_DIR", str(tmp_path / f"window{window}"))
        llvm = get_target("llvm")
        estimate = llvm.estimate(function)
        assert estimate.source == "measured"
        # the program timed again, more rounds, in the estimate's unit (the reference
        # beside it, against the baseline the estimate left in the cache)
        timed, _ = cpu_cost.time_chain(llvm, {"program": (run, arguments)}, clock="wall",
                                       min_rounds=40)
        fastest = timed["program"][0]
        windows.append((estimate.compute_s, fastest))
        if 0.5 * fastest <= estimate.compute_s <= 2 * fastest:
            break
    estimate_s, fastest = windows[-1]
    assert 0.5 * fastest <= estimate_s <= 2 * fastest, windows


def test_cost_estimate_json():
    est = CostEstimate(1e-3, 5e-4, "measured", {"samples": 3})
    assert est.to_json() == {"total_ms": 1.5, "compute_ms": 1.0, "transfer_ms": 0.5,
                             "host_ms": 0.0, "source": "measured", "samples": 3}
    hosted = accelerator_estimate(100_000, 100, HostLink(1.0, 0.0), 0, 0, host_s=2e-4)
    assert hosted.total_s == pytest.approx(1e-3 + 2e-4)
    assert hosted.to_json()["host_ms"] == pytest.approx(0.2)


def test_vta_estimate_has_the_host_part_of_its_calls(model, cost_cache):
    """vta's estimate carries the host's own work on a call (its operands laid out and
    packed, its output unpacked), timed once at compile time and cached with the cycles;
    the report gives it apart from the transfer, as the totals count it."""
    from heterocc.targets.vta import cost as vta_cost

    # the candidate composites (a placement's units) ...
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(vta_cost, "host_seconds", lambda kernel, function: 0.0)
        fast = VtaTarget(clock_mhz=1_000_000, link_gbps=1_000_000, link_latency_us=0)
        plan = _compile(model, fast, "cost").placement_report.plan
    functions = [u.function for u in plan.composites]
    assert functions
    # ... each estimated with its host part
    vta = VtaTarget(config="1x32x32", clock_mhz=300)
    estimates = [vta.estimate(f) for f in functions]
    for est in estimates:
        assert est.host_s > 0 and est.to_json()["host_ms"] > 0
        assert est.total_s == pytest.approx(est.compute_s + est.transfer_s + est.host_s)
    # the term is what the host's steps take: timed again, the same order of magnitude
    kernel = vta_cost.compile_composite(functions[0], vta.config, vta.virtual_threads)
    again = vta_cost.host_seconds(kernel, functions[0])
    assert 0.2 * again <= estimates[0].host_s <= 5 * again
    # cached: another target of the same hardware reads the same host part
    for function, est in zip(functions, estimates):
        cached = VtaTarget(config="1x32x32", clock_mhz=300).estimate(function)
        assert "cached" in cached.source and cached.host_s == est.host_s
    # a decision's reason gives it apart from the transfer
    from heterocc.passes.placement import UnitCost, _decide

    unit = UnitCost([], {"vta": estimates[0], "llvm": CostEstimate(1.0)})
    _decide(unit, "vta", "llvm")
    assert unit.chosen == "vta" and "host work" in unit.reason


def test_a_streams_busiest_device_counts_the_host_part_on_the_host(model):
    """For a stream, an accelerator call's host part keeps the host's CPU busy, not
    the accelerator: the throughput placement's busy times put it on the CPU."""
    from heterocc.frontend.onnx import from_onnx
    from heterocc.passes.pipeline import run_pipeline

    targets = _fixed_targets(_THROUGHPUT_ACCELERATOR, _THROUGHPUT_CPU)
    host = 4e-4

    def with_host(function):
        kind = function.attrs.get("composite", "")
        value = _THROUGHPUT_ACCELERATOR.get(kind)
        return None if value is None else CostEstimate(value - host, 0.0, "fixed",
                                                       host_s=host)

    targets["vta"].estimate = with_host
    plan = run_pipeline(from_onnx(model), targets, "llvm", placement="throughput").report.plan
    moved = [u for u in plan.composites if u.chosen == "vta"]
    assert moved
    on_cpu = sum(u.seconds("llvm") for u in [*plan.composites, *plan.others]
                 if u.chosen == "llvm")
    busy = plan.busy()
    assert busy["llvm"] == pytest.approx(on_cpu + host * len(moved))
    assert busy["vta"] == pytest.approx(sum(u.seconds("vta") - host for u in moved))


class _Fixed:
    """A target whose estimate is a fixed time per composite kind (None: cannot tell)."""

    def __init__(self, seconds: dict):
        self.seconds = seconds

    def estimate(self, function):
        kind = function.attrs.get("composite", "")
        value = self.seconds.get(kind, self.seconds.get("*"))
        return None if value is None else CostEstimate(value, 0.0, "fixed")


_THROUGHPUT_ACCELERATOR = {"conv2d_bias_requantize": 1.5e-3, "quantized_add": 5e-3,
                           "dense_bias_requantize": 3e-3, "flatten": 2e-4}
_THROUGHPUT_CPU = {"conv2d_bias_requantize": 1e-3, "quantized_add": 1e-3,
                   "dense_bias_requantize": 2e-3, "*": 1e-4}


def _fixed_targets(accelerator: dict, cpu: dict) -> dict:
    """vta and llvm whose estimates are ``_Fixed`` times per composite kind."""
    targets = {"vta": VtaTarget(), "llvm": get_target("llvm")}
    targets["vta"].estimate = _Fixed(accelerator).estimate
    targets["llvm"].estimate = _Fixed(cpu).estimate
    targets["llvm"].estimate_placed = None  # the fixed figures hold whatever the split
    return targets


def test_decisions_follow_the_estimates_deterministically(model):
    from heterocc.frontend.onnx import from_onnx
    from heterocc.passes.pipeline import run_pipeline

    graph = from_onnx(model)
    targets = _fixed_targets({"conv2d_bias_requantize": 1e-3, "quantized_add": 5e-3,
                              "dense_bias_requantize": 2e-3, "flatten": 1e-4},
                             {"conv2d_bias_requantize": 3e-3, "quantized_add": 1e-3,
                              "dense_bias_requantize": 2e-3, "*": 1e-4})
    reports = [run_pipeline(graph, targets, "llvm", placement="cost").report for _ in range(2)]
    assert [p.target for p in reports[0].placements] == [p.target for p in reports[1].placements]
    for unit in reports[0].plan.composites:
        name = unit.function.attrs["composite"]
        expected = "llvm" if name == "quantized_add" else "vta"  # a tie stays offloaded
        assert unit.chosen == expected, name
    totals = reports[0].plan.totals()
    assert totals["chosen_ms"] < totals["greedy_ms"] and totals["chosen_ms"] < totals["all_cpu_ms"]
    # a target that cannot tell leaves the pattern to decide
    targets["llvm"].estimate = _Fixed({}).estimate
    report = run_pipeline(graph, targets, "llvm", placement="cost").report
    assert all(u.chosen == "vta" and "no estimate" in u.reason for u in report.plan.composites)
    assert report.plan.total("cpu") is None


def test_two_caches_on_one_file_keep_each_others_entries(cost_cache):
    first, second = CostCache(), CostCache()
    assert first.get("vta", "w") is None and second.get("llvm", "w") is None  # both loaded
    first.put("vta", "w", {"cycles": 1})
    second.put("llvm", "w", {"seconds": 2.0})
    fresh = CostCache()
    assert fresh.get("vta", "w") == {"cycles": 1} and fresh.get("llvm", "w") == {"seconds": 2.0}


def test_cost_is_the_default_and_the_report_says_why(model):
    from heterocc.passes.pipeline import choose_placement

    report = heterocc.compile(model, target="vta,llvm").placement_report
    assert report.placement == "cost" and "default" in report.placement_reason
    assert report.to_json()["placement_reason"] == report.placement_reason
    assert f"placement: cost ({report.placement_reason})" in report.format()
    asked = heterocc.compile(model, target="vta,llvm", placement="greedy").placement_report
    assert asked.placement == "greedy" and asked.placement_reason == "asked for"
    how, why = choose_placement("auto", {"npu": object(), "llvm": get_target("llvm")})
    assert how == "greedy" and "npu gives none" in why


class _Counted:
    """Fixed estimates and lower bounds by composite kind, counting the estimates made."""

    def __init__(self, seconds: dict, bounds: dict):
        self.seconds, self.bounds, self.asked = seconds, bounds, []

    def estimate(self, function):
        self.asked.append(function.attrs.get("composite", function.body.nodes[0].op))
        value = self.seconds.get(function.attrs.get("composite", ""), self.seconds.get("*"))
        return None if value is None else CostEstimate(value, 0.0, "fixed")

    def cached(self, function):
        return None

    def lower_bound(self, function):
        value = self.bounds.get(function.attrs.get("composite", ""))
        return None if value is None else (value, "fixed bound")


def _counted_plan(model, accelerator: _Counted, cpu: _Counted) -> tuple:
    """The cost placement of ``model`` with vta's and llvm's estimates, caches and
    bounds from ``accelerator`` and ``cpu``: the plan and its composites' units by
    kind."""
    from heterocc.frontend.onnx import from_onnx
    from heterocc.passes.pipeline import run_pipeline

    targets = {"vta": VtaTarget(), "llvm": get_target("llvm")}
    for name, fake in (("vta", accelerator), ("llvm", cpu)):
        for hook in ("estimate", "cached", "lower_bound"):
            setattr(targets[name], hook, getattr(fake, hook))
    # the fixed bounds hold where a neighbour keeps tensors in the device too
    targets["vta"].lower_bound_kept = accelerator.lower_bound
    targets["vta"].port_bounds = None  # the fixed bound is the whole call's
    # the fixed figures hold whatever the split: no estimates as placed (which would
    # also ask the CPU for every unit once something is offloaded)
    targets["llvm"].estimate_placed = None
    plan = run_pipeline(from_onnx(model), targets, "llvm", placement="cost").report.plan
    return plan, {u.function.attrs["composite"]: u for u in plan.composites}


def test_a_lower_bound_decides_without_estimating_the_other_device(model):
    """The accelerator beats the CPU's bound on convolutions: the CPU is not measured for
    them; the CPU beats the accelerator's bound on additions (no multiply-accumulates,
    so the CPU goes first): the accelerator is not asked. The report's totals estimate
    what was skipped, once."""

    accelerator = _Counted({"conv2d_bias_requantize": 1e-3, "quantized_add": 5e-3,
                            "dense_bias_requantize": 2e-3, "flatten": 1e-4},
                           {"quantized_add": 2e-3})
    cpu = _Counted({"conv2d_bias_requantize": 3e-3, "quantized_add": 1e-3,
                    "dense_bias_requantize": 2.5e-3, "*": 1e-4},
                   {"conv2d_bias_requantize": 1.5e-3})
    plan, kinds = _counted_plan(model, accelerator, cpu)
    assert kinds["conv2d_bias_requantize"].chosen == "vta"
    assert "llvm needs at least 1.5 ms (fixed bound)" in kinds["conv2d_bias_requantize"].reason
    assert kinds["quantized_add"].chosen == "llvm"
    assert "stays on llvm" in kinds["quantized_add"].reason and "vta needs at least 2 ms" \
        in kinds["quantized_add"].reason
    dense = kinds["dense_bias_requantize"]  # no bound: both estimated
    assert dense.chosen == "vta" and "vs 2.5 ms on llvm" in dense.reason
    assert "conv2d_bias_requantize" not in cpu.asked and "quantized_add" not in accelerator.asked
    assert not any(op for op in cpu.asked if op not in kinds)  # unmatched nodes: not yet
    totals = plan.totals()
    assert "conv2d_bias_requantize" in cpu.asked and "quantized_add" in accelerator.asked
    assert totals["chosen_ms"] < min(totals["greedy_ms"], totals["all_cpu_ms"])
    asked = len(cpu.asked)
    plan.totals()
    assert len(cpu.asked) == asked  # completed once


def test_cpu_lower_bound_from_its_vector_peak(model, cost_cache):
    """The CPU's bound: the function's multiply-accumulates at the peak of its vector
    units on their element type (a multiply-add loop on registers timed once per CPU,
    cached; int8 four times the float32 rate), below what the function takes; the
    ceiling is raised, never lowered, by a function measured faster; a function without
    multiply-accumulates has none."""
    from heterocc.targets.llvm import peak

    llvm = get_target("llvm")
    graph = _compile(model, VtaTarget(), "greedy").graph
    functions = [n for n in graph.nodes if n.body is not None and n.attrs.get("target") == "vta"]
    conv = next(f for r in functions for f in r.body.nodes
                if any(n.op == "ConvInteger" for n in f.body.nodes))
    seconds, how = llvm.lower_bound(conv)
    rate = llvm.cost_model.ceiling("int8")
    per_core = CostCache().get(llvm.cost_model.base_key, "multiply-add-peak")["per_core"]
    assert rate == pytest.approx(peak.multiply_accumulate_peak(llvm.cpu, "int8", per_core))
    assert llvm.cost_model.ceiling("float32") == pytest.approx(rate / 4)
    macs = sum(multiply_accumulates(n) for n in conv.body.nodes)
    assert seconds == pytest.approx(macs / rate)
    assert "int8 vector peak" in how
    measured = llvm.estimate(conv).compute_s
    assert seconds <= measured  # a bound below the time it takes
    llvm.cost_model._raise_ceiling("int8", rate / 2)
    assert llvm.cost_model.ceiling("int8") == rate  # raised, never lowered
    llvm.cost_model._raise_ceiling("int8", rate * 2)
    assert llvm.cost_model.ceiling("int8") == rate * 2
    add = next((f for r in functions for f in r.body.nodes
                if f.attrs.get("composite") == "quantized_add"), None)
    if add is not None:
        assert llvm.lower_bound(add) is None


def test_the_vector_peak_is_measured_once_per_cpu_in_milliseconds(monkeypatch):
    """The peak loop: no heterocc kernel compiled, a few milliseconds of calls, its
    figure about what the loop's own longer runs reach (the fastest of them: the
    figure bounds every kernel, so it must not lie low); cached by CPU, not measured
    again."""
    import time

    from heterocc.targets.llvm import peak
    from heterocc.targets.llvm.target import LLVMTarget

    llvm = get_target("llvm")
    compiled = []
    monkeypatch.setattr(LLVMTarget, "_start_structure",
                        lambda self, function: compiled.append(function))
    began = time.process_time()
    rate = llvm.cost_model.ceiling("int8")
    assert time.process_time() - began < 1.0 and compiled == []
    per_core = peak.multiply_add_rate(llvm.cpu)
    # the longer runs (some 5 ms each) are preempted beside a busy core (CI, session 16:
    # their fastest 27 G/s against the short runs' 72): the fastest of up to six windows
    longer = 0.0
    for _ in range(6):
        longer = max(longer, peak.multiply_add_rate(llvm.cpu, iterations=200_000, runs=3))
        if per_core == pytest.approx(longer, rel=0.5):
            break
    assert per_core == pytest.approx(longer, rel=0.5)
    measured = []
    monkeypatch.setattr(peak, "multiply_add_rate",
                        lambda *args, **kw: measured.append(1) or 1.0)
    monkeypatch.setattr(cpu_cost, "multiply_add_rate", peak.multiply_add_rate)
    assert llvm.cost_model.ceiling("int8") == rate and measured == []
    assert llvm.cost_model.ceiling("not a type") is None


def test_accelerator_lower_bound_is_below_its_estimate(model):
    """vta's bound (the copies of a call's result and an input over the link, and its
    convolutions' GEMM cycles) never exceeds its estimate, and needs no compile."""
    vta = VtaTarget()
    graph = _compile(model, VtaTarget(), "greedy").graph
    functions = [f for r in graph.nodes if r.body is not None and r.attrs.get("target") == "vta"
                 for f in r.body.nodes]
    assert functions
    for function in functions:
        seconds, how = vta.lower_bound(function)
        assert "copies over the link" in how and not vta.cost_model.compiled
        assert 0 < seconds <= vta.estimate(function).total_s
        vta.cost_model.compiled.clear()


def _depthwise_block(channels: int = 32, size: int = 8):
    """A depthwise 3x3 convolution then a 1x1 one, both with ReLU (float, to quantize)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array((rng.standard_normal(shape) * 0.4).astype(np.float32),
                                     name)
             for name, shape in (("dw_w", (channels, 1, 3, 3)), ("dw_b", (channels,)),
                                 ("pw_w", (channels, channels, 1, 1)), ("pw_b", (channels,)))]
    nodes = [helper.make_node("Conv", ["input", "dw_w", "dw_b"], ["dw"], pads=[1] * 4,
                              group=channels),
             helper.make_node("Relu", ["dw"], ["dw_r"]),
             helper.make_node("Conv", ["dw_r", "pw_w", "pw_b"], ["pw"]),
             helper.make_node("Relu", ["pw"], ["output"])]
    shape = (1, channels, size, size)
    graph = helper.make_graph(
        nodes, "depthwise", [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def test_accelerator_bound_counts_the_gemm_iterations_of_its_convolutions(tmp_path):
    """vta's bound adds the GEMM core's iterations a convolution cannot do without: a
    depthwise one's every output pixel and channel block once per tap (one lane in 16), a
    1x1 one's once per input channel block; and the DRAM port's cycles for its weights as
    tiles (a depthwise one's are diagonal: 16 times its weights' bytes); the bound stays
    below the timing model's figure for each, and needs no compile."""
    from heterocc.targets.vta.cost import gemm_iterations, weight_tile_bytes

    model = quantize(_depthwise_block(), tmp_path, "QDQ", "QInt8")
    vta = VtaTarget()
    graph = _compile(model, VtaTarget(), "greedy").graph
    functions = [f for r in graph.nodes if r.body is not None and r.attrs.get("target") == "vta"
                 for f in r.body.nodes if any(n.op == "ConvInteger" for n in f.body.nodes)]
    found = sorted(gemm_iterations(f, vta.config) for f in functions)
    # 8x8 pixels, 2 output channel blocks: x 9 taps (depthwise), x 2 input blocks (1x1)
    assert found == [64 * 2 * 2, 64 * 2 * 9]
    # the weights as the tiles the GEMM core reads: the depthwise one's diagonal tiles,
    # one per channel block and tap (16 times its 32 x 9 bytes), the 1x1 one's 2 x 2
    tiles = sorted(weight_tile_bytes(n, vta.config) for f in functions for n in f.body.nodes
                   if n.op == "ConvInteger")
    assert tiles == [2 * 2 * 256, 2 * 9 * 256]
    for function in functions:
        seconds, how = vta.lower_bound(function)
        assert "cycles of compute" in how or "cycles of DRAM reads" in how
        assert not vta.cost_model.compiled
        assert seconds <= vta.estimate(function).total_s
        vta.cost_model.compiled.clear()


def _dense(inputs: int = 256, outputs: int = 128):
    """A fully connected layer with ReLU (float, to quantize): weights far larger than
    its activations."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array((rng.standard_normal((outputs, inputs)) * 0.1)
                                     .astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(outputs).astype(np.float32), "b")]
    nodes = [helper.make_node("Gemm", ["input", "w", "b"], ["fc"], transB=1),
             helper.make_node("Relu", ["fc"], ["output"])]
    graph = helper.make_graph(
        nodes, "dense", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                       (1, inputs))],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, (1, outputs))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def test_accelerator_bound_counts_a_dense_layers_weight_loads(tmp_path):
    """A dense layer's weights pass the accelerator's one DRAM port on every call (they
    stay in its DRAM, not on chip): its bound is their DRAM cycles, far above its GEMM
    iterations, below the timing model's figure and close to it."""
    from heterocc.targets.vta.cost import cycle_bound, gemm_iterations

    model = quantize(_dense(), tmp_path, "QDQ", "QInt8")
    vta = VtaTarget()
    graph = _compile(model, VtaTarget(), "greedy").graph
    (function,) = [f for r in graph.nodes if r.body is not None
                   and r.attrs.get("target") == "vta" for f in r.body.nodes
                   if any(n.op == "MatMulInteger" for n in f.body.nodes)]
    # one row, 128 / 16 output blocks, 256 / 16 input blocks
    assert gemm_iterations(function, vta.config) == 8 * 16
    # 256 x 128 weights and 256 inputs read, a byte each, 8 bytes a beat, after a
    # latency (and the epilogue's constants); 128 results written
    bound = cycle_bound(function, vta.config)
    assert bound.reads >= 64 + (256 * 128 + 256) // 8 and bound.writes == 64 + 128 // 8
    seconds, how = vta.lower_bound(function)
    assert "DRAM reads" in how and not vta.cost_model.compiled
    estimate = vta.estimate(function)
    assert 0.5 * (estimate.total_s - estimate.host_s) < seconds <= estimate.total_s


def test_the_device_with_the_lower_bound_goes_first(model):
    """Where both devices bound a convolution, the one with the lower bound is estimated
    first: the CPU here, whose figure beats the accelerator's bound, so the accelerator
    compiles nothing for it; the decision is the one both figures give."""
    from heterocc.frontend.onnx import from_onnx
    from heterocc.passes.pipeline import run_pipeline

    accelerator = _Counted({"*": 4e-3}, {"conv2d_bias_requantize": 3e-3})
    cpu = _Counted({"conv2d_bias_requantize": 2e-3, "*": 1e-4},
                   {"conv2d_bias_requantize": 1e-3})
    targets = {"vta": VtaTarget(), "llvm": get_target("llvm")}
    for name, fake in (("vta", accelerator), ("llvm", cpu)):
        for hook in ("estimate", "cached", "lower_bound"):
            setattr(targets[name], hook, getattr(fake, hook))
    targets["vta"].lower_bound_kept = accelerator.lower_bound
    targets["vta"].port_bounds = None  # the fixed bound is the whole call's
    plan = run_pipeline(from_onnx(model), targets, "llvm", placement="cost").report.plan
    convs = [u for u in plan.composites
             if u.function.attrs["composite"] == "conv2d_bias_requantize"]
    assert convs and all(u.chosen == "llvm" for u in convs)
    assert all("vta needs at least 3 ms (fixed bound)" in u.reason for u in convs)
    assert "conv2d_bias_requantize" not in accelerator.asked


def test_strict_compile_accepts_an_accelerator_cost_placement_left_empty(model):
    """Every layer kept on the CPU by cost (some on the accelerator's bound alone, never
    estimated there) is a decision, not a fallback: strict mode does not refuse it."""
    slow = VtaTarget(clock_mhz=1, link_gbps=0.001)
    compiled = heterocc.compile(model, target=[slow, "llvm"], strict=True)
    report = compiled.placement_report
    assert report.by_target() == {"llvm": len(report.placements)}
    assert any("vta needs at least" in u.reason for u in report.plan.composites)


def test_kernels_timed_for_the_placement_are_the_builds(model, monkeypatch):
    """Asked by the placement, the CPU times the kernels its build compiles (the whole
    graph fused, not each candidate alone): with every layer kept on the CPU, each
    kernel compiled while placing is one the build uses, and compiled once; each
    unit's estimate is its share of the kernels holding it, so the estimates of all
    units add up to the kernels' times."""
    from heterocc.sdk.te_target import structure_key
    from heterocc.targets.llvm.target import LLVMTarget

    get_target("llvm").cost_model.ceiling("int8")  # the vector peak, on disk now
    cpu_cost.chain_reference(get_target("llvm"))  # the reference kernel, built now
    compiled_when: list[tuple[bool, tuple]] = []
    placing = [False]
    original = LLVMTarget._start_structure

    def start_structure(self, function):  # every compile, one by one or together
        compiled_when.append((placing[0], structure_key(function.body)))
        return original(self, function)

    import heterocc.passes.partition as partition_module

    plan_by_cost = partition_module.plan_by_cost

    def plan(*args):
        placing[0] = True
        try:
            return plan_by_cost(*args)
        finally:
            placing[0] = False

    monkeypatch.setattr(LLVMTarget, "_start_structure", start_structure)
    monkeypatch.setattr(partition_module, "plan_by_cost", plan)
    slow = VtaTarget(clock_mhz=1, link_gbps=0.001)  # every layer stays on the CPU
    compiled = heterocc.compile(model, target=[slow, "llvm"], placement="cost")
    plan_ = compiled.placement_report.plan
    assert all(u.chosen == "llvm" for u in plan_.composites)
    built = {structure_key(n.body) for n in compiled.graph.nodes if n.body is not None}
    timed = [key for when, key in compiled_when if when]
    assert timed and set(timed) <= built
    assert len(compiled_when) == len({key for _, key in compiled_when})  # each once
    plan_.complete()  # the nodes no pattern matched: what the report's totals want
    context = plan_.targets["llvm"].cost_model.context
    measured = [u.candidates["llvm"].compute_s for u in [*plan_.composites, *plan_.others]
                if u.candidates["llvm"].source == "measured"]
    assert len(measured) == len(plan_.composites) + len(plan_.others)
    assert sum(measured) == pytest.approx(sum(s for s, *_ in context._timed.values()))


def test_cpu_estimates_as_placed_time_the_kernels_the_build_fuses(model):
    """Once layers are offloaded, the CPU's build fuses its part otherwise than the
    whole graph (the dense layer's dequantization no longer joins it) and calls its
    kernels in another chain: the units kept on the CPU are estimated again as shares
    of the kernels of that fusion, timed in one chain, each of which the build
    compiles; the chosen placement's total is theirs."""
    from heterocc.sdk.te_target import structure_key

    # every composite goes to vta but the global pool (vta's own lower bound, over the
    # CPU's figure, keeps it), and the pool, the input's quantization and the logits'
    # dequantization stay on the CPU on any machine (with vta's own estimates at 300 MHz
    # a quiet CPU kept them all; with the convolutions alone offloaded, the glue the CPU
    # kept as placed came within 10% of the whole graph on the CPU, and the split turned
    # on the machine's load); the CPU's figures are measured
    vta = VtaTarget(clock_mhz=300, link_gbps=1000, link_latency_us=0)
    vta.estimate = _Fixed({"*": 1e-9}).estimate
    # the convolutions' own bounds as fast as their estimates: a CPU faster than vta's
    # real bound (a Zen 4's int8 convolutions of this model take 4-7 us, the bound 11)
    # would keep them without asking the estimate, and nothing would be offloaded
    for hook in ("lower_bound", "lower_bound_kept"):
        real = getattr(vta, hook)

        def bound(function, real=real):
            if function.attrs.get("composite") == "conv2d_bias_requantize":
                return 1e-9, "the test's bound"
            return real(function)
        setattr(vta, hook, bound)
    compiled = _compile(model, vta, "cost")
    plan = compiled.placement_report.plan
    assert any(u.chosen == "vta" for u in plan.composites)
    kept = [u for u in [*plan.composites, *plan.others] if u.chosen == "llvm"]
    placed = [u for u in kept if u.as_placed is not None]
    assert placed and all(u.as_placed.source.endswith("as placed") for u in placed)
    model_ = plan.targets["llvm"].cost_model
    context = model_.placed_context
    # every kept unit is timed again in the chain of the kernels the CPU keeps (a kernel
    # after an offloaded layer runs with other caches than in the whole graph's chain)
    assert all(u.as_placed is not None for u in kept)
    assert context.parts == {id(u.function): frozenset(n.name for n in u.nodes)
                             for u in kept}
    assert model_.context.kernels() != context.kernels()
    # each timed kernel's time shared out among the kept units
    assert sum(u.as_placed.compute_s for u in kept) == pytest.approx(
        sum(seconds for seconds, *_ in context._timed.values()))
    built = {structure_key(n.body) for n in compiled.graph.nodes
             if n.body is not None and "target" not in n.attrs}
    assert set(context.timed_structures()) <= built
    chosen = sum(u.placed_seconds(u.chosen) for u in [*plan.composites, *plan.others])
    assert plan.totals()["chosen_ms"] == pytest.approx(chosen * 1e3, abs=1e-4)
    assert plan.totals()["chosen_ms"] <= plan.totals()["all_cpu_ms"]
    rows = [r for r in compiled.placement_report.to_json()["nodes"] if "as_placed" in r]
    assert rows and all(r["target"] == "llvm" for r in rows)
    assert "*as placed (beside offloaded layers)" in compiled.placement_report.format()


def test_kernels_are_timed_in_graph_order_one_call_each_per_round(monkeypatch):
    """``time_in_chains`` calls each kernel once per round, in the order given (as a
    model calls them), the warm-up rounds untimed; a long kernel only as often as it
    must be; each figure is the fastest of its timed calls."""
    clock = [0.0]
    monkeypatch.setattr(cpu_cost.time, "perf_counter", lambda: clock[0])
    calls = []

    def kernel(name, seconds):
        def call(args):
            calls.append(name)
            clock[0] += seconds.pop(0) if isinstance(seconds, list) else seconds
        return call

    timed = cpu_cost.time_in_chains(
        {"a": (kernel("a", [5e-3, 5e-3, 2e-3, 1e-3, 3e-3, 1e-3, 1e-3]), ()),
         "b": (kernel("b", 1e-4), ()), "long": (kernel("long", 0.2), ())},
        min_rounds=5, max_rounds=5, warm_up=2)
    assert calls[:6] == ["a", "b", "long", "a", "b", "long"]  # the untimed rounds
    assert calls[6:9] == ["a", "b", "long"] and calls[9:12] == ["a", "b", "long"]
    assert calls[12:] == ["a", "b"] * 3  # the long kernel: LONG_SAMPLES calls timed
    assert timed["a"] == (pytest.approx(1e-3), 5)
    assert timed["b"] == (pytest.approx(1e-4), 5)
    assert timed["long"] == (pytest.approx(0.2), cpu_cost.LONG_SAMPLES)


def test_chains_time_a_kernel_by_the_cpu_seconds_of_its_threads(model, monkeypatch):
    """The default clock: a compiled kernel's call counts the CPU seconds of the threads
    it runs on over their number (a kernel with a parallel loop: the runtime's pool; one
    without: the calling thread alone), so a core another process holds does not
    stretch it; what is not a compiled kernel is timed on the wall clock. A sleeping
    call with one thread takes no CPU time; a kernel's figure stays about its wall
    time, never above it: each call's figure is bounded by its wall time."""
    import time

    from heterocc.targets.llvm.runtime import num_threads
    from heterocc.tir.stmt import ForKind, SeqStmt
    from heterocc.tir.visitor import collect_statements

    compiled = heterocc.compile(model, target="llvm")
    kernels = {n.name: compiled.kernels[n.name] for n in compiled.graph.nodes
               if n.body is not None and n.name in compiled.kernels}
    threads = {name: cpu_cost.kernel_threads(k) for name, k in kernels.items()}
    for name, kernel in kernels.items():
        parallel = any(getattr(s, "kind", None) is ForKind.PARALLEL
                       for s in collect_statements(kernel.prim.body, lambda s: True))
        assert threads[name] == (num_threads() if parallel else 1)
    assert cpu_cost.kernel_threads(lambda args: None) is None
    inputs = {n.name: n.inputs for n in compiled.graph.nodes if n.name in kernels}
    calls = {name: (k, cpu_cost.random_arguments(inputs[name])) for name, k in kernels.items()}
    cpu = cpu_cost.time_in_chains(calls, min_rounds=10, max_rounds=10)
    wall = cpu_cost.time_in_chains(calls, min_rounds=10, max_rounds=10, clock="wall")
    assert sum(s for s, _ in cpu.values()) <= 1.5 * sum(s for s, _ in wall.values())
    assert all(s > 0 for s, _ in cpu.values())

    class Sleeper:  # a "kernel" without a parallel loop that waits, using no CPU
        prim = type("Prim", (), {"body": SeqStmt(())})()

        def __call__(self, args):
            time.sleep(0.002)

    sleeper = Sleeper()
    assert cpu_cost.kernel_threads(sleeper) == 1
    timed = cpu_cost.time_in_chains({"s": (sleeper, ())}, min_rounds=3, max_rounds=3)
    assert timed["s"][0] < 1e-3
    timed = cpu_cost.time_in_chains({"s": (sleeper, ())}, min_rounds=3, max_rounds=3,
                                    clock="wall")
    assert timed["s"][0] >= 2e-3

    # a clock that counts a second of CPU in a call (as a clock read's own cost, or a
    # spinning thread's, adds to it) leaves the figure at the call's wall time
    thread_clock = [0.0]

    class Counter(Sleeper):
        def __call__(self, args):
            thread_clock[0] += 1.0
            time.sleep(0.002)

    monkeypatch.setattr(cpu_cost.time, "thread_time", lambda: thread_clock[0])
    timed = cpu_cost.time_in_chains({"c": (Counter(), ())}, min_rounds=3, max_rounds=3)
    assert 2e-3 <= timed["c"][0] < 0.5


def _slowed_chain(monkeypatch):
    """Kernels and a reference on a fake wall clock whose every call takes its seconds
    times ``speed[0]`` (a phase of the machine slowing everything at once)."""
    clock, speed = [0.0], [1.0]
    monkeypatch.setattr(cpu_cost.time, "perf_counter", lambda: clock[0])

    def kernel(seconds):
        def call(args):
            clock[0] += seconds * speed[0]
        return call

    calls = {"conv": (kernel(1e-3), ()), "pool": (kernel(2e-5), ())}
    reference = cpu_cost.ChainReference(
        {cpu_cost.EVICT: (kernel(1e-4), ()), cpu_cost.REFERENCE: (kernel(5e-5), ())},
        {cpu_cost.REFERENCE: 5e-5})
    return calls, reference, speed


def test_a_slowed_window_does_not_move_the_normalised_figures(monkeypatch):
    """``normalised``: a chain's figures over the reference kernel timed in its rounds,
    times the reference's baseline. A window in which every call takes 1.4x as long
    (the reference too) gives the same figures as a window at the baseline's speed;
    the reference's own entries are left out."""
    calls, reference, speed = _slowed_chain(monkeypatch)
    both = {**calls, **reference.calls}
    usual = cpu_cost.time_in_chains(both, clock="wall")
    speed[0] = 1.4
    slowed = cpu_cost.time_in_chains(both, clock="wall")
    assert slowed["conv"][0] == pytest.approx(1.4e-3)  # the raw figure moved
    for window in (usual, slowed):
        figures = cpu_cost.normalised(window, reference.seconds)
        assert set(figures) == {"conv", "pool"}
        assert figures["conv"][0] == pytest.approx(1e-3)
        assert figures["pool"][0] == pytest.approx(2e-5)
        assert figures["conv"][1] == window["conv"][1]


def _traced(calls, order):
    def trace(name, call):
        return lambda args: order.append(name) or call(args)
    return {name: (trace(name, call), args) for name, (call, args) in calls.items()}


def test_time_chain_runs_the_reference_in_every_round(monkeypatch):
    """``time_chain`` (what the estimate and the benchmark's check call): the reference's
    calls after the kernels in every round; the first chain sets the reference's
    baseline in the cost cache (its figures its own), a later chain in a window 1.25x
    as slow gets the same figures and says how much slower it ran; without a reference,
    the chain's own figures."""
    calls, reference, speed = _slowed_chain(monkeypatch)
    order = []
    calls, traced = _traced(calls, order), _traced(reference.calls, order)

    class Cpu:  # a target with a cost model and its cache, and no code
        tuning_key = "llvm -mcpu=test"

    target = Cpu()
    target.cost_model = cpu_cost.CpuCostModel(target, CostCache())
    monkeypatch.setattr(cpu_cost, "_reference_calls", lambda target: traced)
    cpu_cost._REFERENCES.clear()
    options = {"min_rounds": 3, "max_rounds": 3, "warm_up": 1}  # fakes: on the wall clock
    first, slower = cpu_cost.time_chain(target, calls, **options)
    # the reference from cold caches, then warm (its hot call)
    assert order == ["conv", "pool", cpu_cost.EVICT, cpu_cost.REFERENCE,
                     cpu_cost.REFERENCE] * 4
    assert slower == 1.0 and first["conv"][0] == pytest.approx(1e-3)
    assert cpu_cost.chain_reference(target).seconds == pytest.approx(5e-5)
    speed[0] = 1.25
    figures, slower = cpu_cost.time_chain(target, calls, **options)
    assert slower == pytest.approx(1.25)
    assert set(figures) == {"conv", "pool"} and figures["conv"][1] == 3
    assert figures["conv"][0] == pytest.approx(1e-3)
    assert figures["pool"][0] == pytest.approx(2e-5)
    monkeypatch.setattr(cpu_cost, "chain_reference", lambda target: None)
    figures, slower = cpu_cost.time_chain(target, calls, **options)
    assert slower is None and figures["conv"][0] == pytest.approx(1.25e-3)
    cpu_cost._REFERENCES.clear()


def _phased(monkeypatch):
    """Kernels and the reference calls on a fake clock (the wall's and the thread's),
    each call taking its seconds times the speed of its kind in ``speed``
    (``"kernels"``; the voters: ``"cold"``, the reference after the cache flush,
    ``"hot"``, the reference called again, ``"peak"``, the peak loop): a phase of the
    machine that slows some alone or all; and a target with a cost model (its cache in
    memory) whose reference calls are those."""
    clock = [0.0]
    speed = {"kernels": 1.0, "cold": 1.0, "hot": 1.0, "peak": 1.0}
    monkeypatch.setattr(cpu_cost.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(cpu_cost.time, "thread_time", lambda: clock[0])
    flushed = [False]

    def kernel(seconds, kind):
        def call(args):
            clock[0] += seconds * speed[kind]
        return call

    def flush(args):
        flushed[0] = True
        clock[0] += 1e-4

    def reference(args):
        clock[0] += 5e-4 * speed["cold" if flushed[0] else "hot"]
        flushed[0] = False

    calls = {f"conv{k}": (kernel(1e-3 * (k + 1), "kernels"), ()) for k in range(4)}

    class Cpu:  # a target with a cost model and its cache, and no code
        tuning_key = "llvm -mcpu=test"
        cpu = "test"

    target = Cpu()
    target.cost_model = cpu_cost.CpuCostModel(target, CostCache())
    monkeypatch.setattr(cpu_cost, "_reference_calls", lambda target: {
        cpu_cost.EVICT: (flush, ()), cpu_cost.REFERENCE: (reference, ())})
    monkeypatch.setattr(cpu_cost, "peak_kernel", lambda cpu: (
        lambda iterations, seed: kernel(2e-5, "peak")(()), 16, 28))
    cpu_cost._REFERENCES.clear()
    return calls, target, speed


def _voters(speed, factor):
    speed.update(cold=factor, hot=factor, peak=factor)


_QUICK = {"min_rounds": 3, "max_rounds": 3, "warm_up": 1}


def test_one_voter_slowed_alone_moves_no_figure(monkeypatch):
    """The failure the voters guard against (a shared machine, two runs in 24): the
    first chain against the cache caught the reference from cold caches alone in a slow
    phase (2.3x, the kernels 1.2x) and set its baseline; every later chain then put its
    figures 1.9x too high, the benchmark's check's too. Its baseline is one of three:
    the median of the voters' slowdowns (the reference warm and the peak loop ran as
    the kernels did) puts a later chain at the first one's figures. Likewise one voter
    slowed alone in a later chain, each kind in turn."""
    calls, target, speed = _phased(monkeypatch)
    speed.update(kernels=1.2, cold=2.3, hot=1.2, peak=1.2)
    first, slower = cpu_cost.time_chain(target, calls, **_QUICK)
    assert slower == 1.0 and first["conv0"][0] == pytest.approx(1.2e-3)
    assert set(cpu_cost.chain_reference(target).baselines) == set(cpu_cost.VOTERS)
    for slowed in (None, "cold", "hot", "peak"):
        speed["kernels"] = 1.0
        _voters(speed, 1.0)
        if slowed:
            speed[slowed] = 2.0
        figures, slower = cpu_cost.time_chain(target, calls, **_QUICK)
        assert slower == pytest.approx(1 / 1.2), slowed
        for name, (seconds, _) in figures.items():
            assert seconds == pytest.approx(first[name][0]), slowed
    cpu_cost._REFERENCES.clear()


def test_the_reference_calls_run_every_other_round_where_they_cost_much(monkeypatch):
    """``sparse_every``: calls that would take more than ``SPARSE_SHARE`` of a round are
    called in every k-th round, never so rarely that the least rounds give them fewer
    than ``MIN_SAMPLES`` samples; cheap ones every round."""
    kernels = {"conv": 6e-3, "pool": 2e-4}
    cheap = {cpu_cost.REFERENCE: 3e-4, cpu_cost.EVICT: 1e-4}
    costly = {cpu_cost.REFERENCE: 2e-3, cpu_cost.EVICT: 1e-4, cpu_cost.HOT_REFERENCE: 2e-3}
    for references, every in ((cheap, 1), (costly, 2)):
        warm = {**kernels, **references}
        assert cpu_cost.sparse_every(warm, set(references), 10) == every
    assert cpu_cost.sparse_every({**kernels, **costly}, set(costly), 40) == 7
    assert cpu_cost.sparse_every({**kernels, **costly}, set(costly), 3) == 1
    assert cpu_cost.sparse_every(costly, set(costly), 10) == 1  # the reference alone
    order, clock = [], [0.0]
    monkeypatch.setattr(cpu_cost.time, "perf_counter", lambda: clock[0])

    def call(name, seconds):
        def run(args):
            order.append(name)
            clock[0] += seconds
        return run

    calls = {"conv": (call("conv", 2e-3), ()), "ref": (call("ref", 2e-3), ())}
    timed = cpu_cost.time_in_chains(calls, min_rounds=10, max_rounds=10, warm_up=1,
                                    clock="wall", sparse={"ref"})
    assert timed["conv"][1] == 10 and timed["ref"][1] == 5
    assert order[:2] == ["conv", "ref"] and order[2:6] == ["conv", "ref", "conv", "conv"]


def test_a_chain_on_the_wall_clock_is_put_in_the_baselines_unit(monkeypatch):
    """A function timed alone (``CpuCostModel._time``: a program, timed on the wall
    clock) is normalised too: against an empty cache, a chain of the reference alone on
    the CPU's clock sets the baseline first; a window 1.4x slower gives the same
    figure."""
    calls, target, speed = _phased(monkeypatch)
    clocks = []
    original = cpu_cost.time_in_chains
    monkeypatch.setattr(cpu_cost, "time_in_chains", lambda calls, **k: clocks.append(
        (set(calls), k.get("clock", "cpu"))) or original(calls, **k))
    one = {"conv0": calls["conv0"]}
    figures, _ = cpu_cost.time_chain(target, one, clock="wall", **_QUICK)
    references = {cpu_cost.EVICT, *cpu_cost.VOTERS}
    assert clocks[0] == (references, "cpu")
    assert clocks[1] == ({"conv0", *references}, "wall")
    assert figures["conv0"][0] == pytest.approx(1e-3)
    speed["kernels"] = 1.4
    _voters(speed, 1.4)
    figures, slower = cpu_cost.time_chain(target, one, clock="wall", **_QUICK)
    assert slower == pytest.approx(1.4) and figures["conv0"][0] == pytest.approx(1e-3)
    cpu_cost._REFERENCES.clear()


def test_the_reference_kernel_is_compiled_code_built_once(monkeypatch):
    """The reference: the target's own int8 convolution (a compiled kernel, on the
    runtime's threads where it has a parallel loop), built on a target of its own (the
    build's target compiles nothing for it) once per process and CPU; the first chain
    sets every voter's baseline; a later chain's figures are its raw figures over the
    voters' median slowdown exactly."""
    llvm = get_target("llvm")
    cpu_cost._REFERENCES.clear()
    reference = cpu_cost.chain_reference(llvm)
    assert reference is not None and reference.seconds is None  # no chain timed yet
    run, args = reference.calls[cpu_cost.REFERENCE]
    assert cpu_cost.kernel_threads(run) is not None and len(args) == 1
    assert args[0].dtype == np.int8 and args[0].shape == (1, 256, 14, 14)
    assert llvm.fallbacks == {} and llvm.distinct_kernels == 0
    # the voters: the reference from cold caches and warm, the peak loop on one thread
    assert reference.calls[cpu_cost.HOT_REFERENCE] == reference.calls[cpu_cost.REFERENCE]
    assert cpu_cost.kernel_threads(reference.calls[cpu_cost.PEAK_LOOP][0]) == 1
    monkeypatch.setattr(cpu_cost, "_reference_calls", lambda target: pytest.fail("built again"))
    assert cpu_cost.chain_reference(get_target("llvm")).calls is reference.calls
    compiled = heterocc.compile(small_cnn(), target=[llvm])
    first = next(n for n in compiled.graph.nodes if n.name in compiled.kernels)
    calls = {first.name: (compiled.kernels[first.name], cpu_cost.random_arguments(first.inputs))}
    original, raw = cpu_cost.time_in_chains, []
    monkeypatch.setattr(cpu_cost, "time_in_chains",
                        lambda *a, **k: raw.append(original(*a, **k)) or raw[-1])
    cpu_cost.time_chain(llvm, calls, min_rounds=3, max_rounds=3)  # sets the baselines
    baselines = cpu_cost.chain_reference(llvm).baselines
    assert baselines == {name: raw[0][name][0] for name in cpu_cost.VOTERS}
    assert cpu_cost.chain_reference(llvm).seconds == baselines[cpu_cost.REFERENCE]
    figures, slower = cpu_cost.time_chain(llvm, calls, min_rounds=3, max_rounds=3)
    assert set(figures) == {first.name} and set(raw[1]) == {first.name, *reference.calls}
    assert slower == pytest.approx(float(np.median(
        [raw[1][name][0] / baselines[name] for name in cpu_cost.VOTERS])))
    assert figures[first.name][0] == pytest.approx(raw[1][first.name][0] / slower)


def test_kernel_shares_split_a_kernel_by_the_weight_of_each_part():
    """A kernel holding a convolution of one part and the element-wise epilogue of
    another gives each its nodes' weight (multiply-accumulates + elements written);
    a part in two kernels gets a share of each."""
    from heterocc.frontend.onnx import from_onnx
    from heterocc.ir.graph import Graph, Node

    graph = from_onnx(small_cnn())
    nodes = graph.nodes
    conv = next(n for n in nodes if n.op == "Conv")
    rest = [n for n in nodes if n is not conv]
    kernel_a = Node("Function", [], [], name="a", body=Graph([], [], [conv, rest[0]]))
    kernel_b = Node("Function", [], [], name="b", body=Graph([], [], rest[1:3]))
    parts = {"conv": frozenset({conv.name}),
             "rest": frozenset(n.name for n in rest)}
    shares = cpu_cost.kernel_shares([kernel_a, kernel_b], parts)
    weight = cpu_cost.node_weight
    assert weight(conv) == multiply_accumulates(conv) + conv.outputs[0].type.size
    (a, conv_share), = shares["conv"]
    assert a is kernel_a
    assert conv_share == pytest.approx(weight(conv) / (weight(conv) + weight(rest[0])))
    assert [k.name for k, _ in shares["rest"]] == ["a", "b"]
    assert shares["rest"][0][1] == pytest.approx(1 - conv_share)
    assert shares["rest"][1][1] == 1.0


def test_throughput_placement_balances_the_devices_for_a_stream(model):
    """An accelerator slower than the CPU on every layer gets none of them by latency;
    for a stream, where the devices overlap across inputs, the throughput placement
    moves layers to it while that lowers the busiest device's time per input, and no
    single move left would lower it further."""
    from heterocc.frontend.onnx import from_onnx
    from heterocc.passes.pipeline import run_pipeline

    targets = _fixed_targets(_THROUGHPUT_ACCELERATOR, _THROUGHPUT_CPU)
    graph = from_onnx(model)
    latency = run_pipeline(graph, targets, "llvm", placement="cost").report.plan
    assert all(u.chosen == "llvm" for u in latency.composites)
    reports = [run_pipeline(graph, targets, "llvm", placement="throughput").report
               for _ in range(2)]
    assert [p.target for p in reports[0].placements] == [p.target for p in reports[1].placements]
    report = reports[0]
    plan = report.plan
    moved = [u for u in plan.composites if u.chosen == "vta"]
    assert moved and all("for throughput" in u.reason for u in moved)
    assert report.by_target().get("vta")
    busy = plan.busy()
    assert set(busy) == {"vta", "llvm"}
    assert max(busy.values()) < max(latency.busy().values())
    peak = max(busy.values())
    for unit in plan.composites:  # a local optimum: no single move lowers the peak
        here = unit.chosen
        there = "vta" if here == "llvm" else "llvm"
        after = dict(busy)
        after[here] -= unit.seconds(here)
        after[there] += unit.seconds(there)
        assert max(after.values()) >= peak * (1 - 1e-9)
    totals = plan.totals()
    assert totals["chosen_busiest_ms"] == pytest.approx(peak * 1e3)
    assert totals["chosen_busiest_ms"] < totals["chosen_ms"]  # both devices carry work
    assert totals["chosen_ms"] >= totals["all_cpu_ms"]  # latency was not the objective


def test_a_stream_placed_for_throughput_overlaps_and_stays_bit_exact(model):
    targets = _fixed_targets(_THROUGHPUT_ACCELERATOR, _THROUGHPUT_CPU)
    compiled = heterocc.compile(model, target=list(targets.values()), placement="throughput")
    assert compiled.placement_report.placement == "throughput"
    assert set(compiled.placement_report.by_target()) == {"vta", "llvm"}
    xs = inputs(3)
    result = compiled.run_stream([[x] for x in xs])
    greedy = _compile(model, VtaTarget(), "greedy")
    for x, out in zip(xs, result.outputs):
        np.testing.assert_array_equal(out[0], greedy.run([x])[0])
    lanes = {span.lane for span in result.pipelined}
    assert {"vta", "llvm"} <= lanes


def test_a_split_slower_as_placed_than_greedy_takes_the_greedy_placement(model):
    """The CPU keeps the additions by a small margin of its whole-graph estimates; asked
    again as placed, its kept kernels take twice as long, so the split would be slower than
    offloading every match: the greedy placement is taken, and the chosen total is never
    above it."""
    from heterocc.frontend.onnx import from_onnx
    from heterocc.passes.pipeline import run_pipeline

    cpu = {"conv2d_bias_requantize": 3e-3, "quantized_add": 1e-3,
           "dense_bias_requantize": 2e-3, "*": 1e-4}
    targets = _fixed_targets({"conv2d_bias_requantize": 1e-3, "quantized_add": 1.1e-3,
                              "dense_bias_requantize": 2e-3, "flatten": 1e-4}, cpu)
    fixed = _Fixed(cpu)

    def twice_as_long(graph, kept, offloaded):
        return {f: CostEstimate(2 * fixed.estimate(f).compute_s, 0.0, "fixed as placed")
                for f in kept if fixed.estimate(f) is not None}

    targets["llvm"].estimate_placed = twice_as_long
    report = run_pipeline(from_onnx(model), targets, "llvm", placement="cost").report
    adds = [u for u in report.plan.composites
            if u.function.attrs["composite"] == "quantized_add"]
    assert adds and all(u.chosen == "vta" and "greedy placement" in u.reason for u in adds)
    assert all(u.chosen == u.greedy for u in report.plan.composites)
    totals = report.plan.totals()
    assert totals["chosen_ms"] <= totals["greedy_ms"]


def _host_part_as_placed(vta_cost, region, kernel, composite) -> float:
    """A region kernel's host part as the placement counts it: its own host part less
    the shares (by bytes, ``with_ports``) of the tensors the region keeps in the
    device's DRAM, which its call neither converts nor copies."""
    estimate = vta_cost.with_ports(
        CostEstimate(0.0, 0.0, "host", host_s=vta_cost.host_seconds(kernel, composite)),
        vta_cost.kernel_ports(kernel), kernel.config)
    kept = sum(port.host_s for position, port in enumerate(estimate.inputs)
               if (composite.name, position) in region.on_device)
    if not region.reads[composite.name]:
        kept += estimate.output.host_s
    return estimate.host_s - kept


@pytest.mark.parametrize("config", ["1x16x16", "1x32x32"])
def test_vta_host_part_against_the_replay(model, config):
    """vta's host part, as the placement sums it over a region's kernels (each timed
    alone, its layouts converted in and out, less the shares of the tensors the region
    keeps in the device's DRAM), against the host part the stream's replay
    measures for the region's call (its kernels run with the device's results replayed:
    layouts converted only at the region's boundary, blocked tensors handed over, but
    every kernel's tiles written into the device's memory through the driver). The
    estimate must not overstate the measured part: it stays within 0.15x to 2x of it.
    (On this CNN's small layers it is 0.25-0.65x: the driver's calls and the writes into
    the simulated DRAM, which the estimate leaves to the link's term, weigh most; on
    ResNet-18 and MobileNetV2 at 224 it was 0.85-1.35x,
    ``benchmarks/placement_host_check.py``.) The region's own figure, its runner timed
    without the device (``region_host_seconds``), is of the same order."""
    from heterocc.targets.vta import cost as vta_cost

    compiled = _compile(model, VtaTarget(config=config), "greedy")
    result = compiled.run_stream([[x] for x in inputs(2)], replays=3)
    measured: dict[int, float] = {}
    # the replay's spans in this process's CPU seconds: a pass preempted by other work
    # on the machine does not count its wait (the estimate keeps the fastest of many calls)
    for task in result.tasks["cpu"]:
        if task.lane == "vta":
            measured[task.index] = min(measured.get(task.index, np.inf), task.host_s)
    assert measured and result.replay_bit_exact
    for index, seconds in measured.items():
        node = compiled.graph.nodes[index]
        kernel = compiled.kernels[node.name]
        body = [node] if "composite" in node.attrs else node.body.nodes
        estimate = sum(_host_part_as_placed(vta_cost, kernel.region, part, composite)
                       if "composite" not in node.attrs
                       else vta_cost.host_seconds(part, composite)
                       for part, composite in zip(kernel.composites, body))
        assert 0.15 * seconds <= estimate <= 2 * seconds, (node.name, estimate, seconds)
        if "composite" not in node.attrs:
            region = vta_cost.region_host_seconds(kernel.region, node)
            # the region's figure is one timing window's fastest call against the
            # replay's fastest of three: 0.6-0.9x of it quietly, once 2.1x beside a busy
            # core (a slow phase of the whole window), so its margin is wider
            assert 0.15 * seconds <= region <= 3 * seconds, (node.name, region, seconds)
