"""Placement by cost against the greedy and the all-CPU placements, on CNNs quantized by
onnxruntime's quantize_static (QDQ, int8 activations, per-channel weights) for
``vta,llvm``.

    python benchmarks/placement.py [--models resnet18,mobilenet_v2] [--size 224]
        [--configs 1x16x16@100,1x32x32@300] [--link-gbps 1] [--onnx-helper]

Prints the machine, the accelerator configs with their clock and the host link; then
per model and config:

- the model's estimated end-to-end latency (one input, devices taking turns) of the
  cost placement, all on the CPU and the greedy placement (every pattern match on the
  accelerator), and the check that cost <= both;
- the accelerator's estimate per region against the cycles its kernels report in a run
  (the simulator's timing model) at the clock: the largest deviation;
- the CPU's estimate per function placed on the CPU against the same program timed
  again here: median and largest deviation;
- bit-exactness: the cost placement's output against the greedy placement's and the
  reference integer semantics of the partitioned graph (NumPy);
- compile time: greedy, cost with an empty estimate cache, cost again (cache warm), and
  placement's share of each cost compile (the partition pass, and the extra time over
  the greedy compile).

The CPU estimates are the fastest of several calls, and so is the measurement they are
compared with; figures depend on the load of the machine (printed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from machine import describe  # noqa: E402
from vta_resnet18 import quantized  # noqa: E402

import heterocc  # noqa: E402
from heterocc.runtime.interpreter import evaluate  # noqa: E402
from heterocc.targets import get_target  # noqa: E402
from heterocc.targets.llvm import cost as cpu_cost  # noqa: E402
from heterocc.targets.vta import VtaTarget  # noqa: E402


def _compile(model, vta: VtaTarget, placement: str):
    start = time.perf_counter()
    compiled = heterocc.compile(model, target=[vta, "llvm"], placement=placement)
    seconds = time.perf_counter() - start
    partition = sum(r.seconds for r in compiled.pass_records if r.name == "partition")
    return compiled, seconds, partition


def _accelerator_accuracy(compiled, vta: VtaTarget) -> tuple[int, float]:
    """Regions compared, and the largest relative deviation of the estimate's cycles
    from the cycles the region's kernels reported in the last run."""
    ran = {k.name: k.last_cycles for k in vta.kernels}
    regions: dict[str, list[int]] = {}
    for p in compiled.placement_report.placements:
        if p.target == "vta" and "vta" in p.estimates and p.function in ran:
            sums = regions.setdefault(p.region, [0, 0])
            sums[0] += p.estimates["vta"].detail["cycles"]
            sums[1] += ran[p.function]
    worst = max((abs(e - c) / c for e, c in regions.values() if c), default=0.0)
    return len(regions), worst


def _cpu_accuracy(report) -> list[float]:
    """Relative deviation of each CPU-placed function's estimate from its program timed
    again here (fastest of at least 5 calls and 0.2 s)."""
    llvm = get_target("llvm")
    deviations = []
    for unit in [*report.plan.composites, *report.plan.others]:
        if unit.chosen != "llvm" or "llvm" not in unit.candidates:
            continue
        run, graph = cpu_cost.cpu_program(llvm, unit.function)
        measured = min(cpu_cost.time_call(run, cpu_cost.random_arguments(graph.inputs),
                                          min_samples=5, min_seconds=0.2))
        deviations.append(abs(unit.candidates["llvm"].compute_s - measured) / measured)
    return deviations


def _config(text: str, link_gbps: float) -> VtaTarget:
    shape, _, clock = text.partition("@")
    return VtaTarget(config=shape, clock_mhz=float(clock or 100), link_gbps=link_gbps)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet18,mobilenet_v2")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--configs", default="1x16x16@100,1x32x32@300",
                    help="accelerator shapes and clocks (MHz), comma-separated")
    ap.add_argument("--link-gbps", type=float, default=1.0)
    ap.add_argument("--onnx-helper", action="store_true",
                    help="build the models with onnx.helper instead of exporting from torch")
    args = ap.parse_args()
    print(describe())
    print(f"load average at start: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    configs = args.configs.split(",")
    for text in configs:
        c = _config(text, args.link_gbps).config
        print(f"accelerator {c.name}: {c.block_in}x{c.block_out} GEMM core at "
              f"{c.clock_mhz} MHz; host link {c.link_mbytes_per_s / 1000:g} GB/s, "
              f"{c.link_latency_ns / 1000:g} us per transfer")
    failures = []
    strictly_better = False
    for name in args.models.split(","):
        model = quantized(name, not args.onnx_helper, args.size, "qdq", "int8", False)
        x = np.random.default_rng(0).standard_normal((1, 3, args.size, args.size)).astype(
            np.float32)
        for text in configs:
            os.environ["HETEROCC_CACHE_DIR"] = tempfile.mkdtemp(prefix="heterocc-costs-")
            greedy_vta = _config(text, args.link_gbps)
            greedy, t_greedy, _ = _compile(model, greedy_vta, "greedy")
            cold, t_cold, p_cold = _compile(model, _config(text, args.link_gbps), "cost")
            vta = _config(text, args.link_gbps)
            warm, t_warm, p_warm = _compile(model, vta, "cost")
            report = warm.placement_report
            totals = report.plan.totals()
            chosen, cpu, greedy_ms = totals["chosen_ms"], totals["all_cpu_ms"], \
                totals["greedy_ms"]
            ok = chosen <= cpu and chosen <= greedy_ms
            strictly_better |= chosen < cpu and chosen < greedy_ms
            moved = sum(1 for u in report.plan.composites if u.chosen != u.greedy)
            print(f"\n{name} on vta {text} MHz + llvm, link {args.link_gbps:g} GB/s: "
                  f"{len(report.plan.composites)} candidate composites, {moved} kept on "
                  "the CPU by cost")
            print(f"  estimated latency: cost {chosen:.2f} ms, all-CPU {cpu:.2f} ms, greedy "
                  f"{greedy_ms:.2f} ms -> cost <= both: {ok}; vs greedy "
                  f"{greedy_ms / chosen:.3f}x, vs all-CPU {cpu / chosen:.2f}x")
            (out,) = warm.run([x])
            (expected,) = greedy.run([x])
            exact = np.array_equal(out, expected) and np.array_equal(
                out, evaluate(warm.graph, [x])[0])
            regions, worst = _accelerator_accuracy(warm, vta)
            deviations = _cpu_accuracy(report)
            print(f"  accelerator estimate vs timing model in the run: {regions} regions, "
                  f"largest deviation {100 * worst:.2f}%")
            if deviations:
                within = sum(1 for d in deviations if d <= 0.25)
                print(f"  CPU estimate vs measured again: {len(deviations)} functions, "
                      f"median deviation {100 * statistics.median(deviations):.1f}%, "
                      f"largest {100 * max(deviations):.1f}%, {within} within 25%")
            print(f"  bit-exact (cost vs greedy vs integer reference): {exact}")
            print(f"  compile: greedy {t_greedy:.2f} s; cost, empty cache {t_cold:.2f} s "
                  f"(partition {p_cold:.2f} s = {100 * p_cold / t_cold:.1f}%, "
                  f"{100 * max(0.0, t_cold - t_greedy) / t_cold:.1f}% over greedy); "
                  f"cost, warm cache {t_warm:.2f} s (partition {p_warm:.2f} s = "
                  f"{100 * p_warm / t_warm:.1f}%)")
            if not ok or not exact:
                failures.append(f"{name} {text}")
    print(f"\ncost strictly better than both on at least one: {strictly_better}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    if failures:
        print("FAILED:", ", ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
