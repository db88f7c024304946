"""What placement by cost adds to compile time, on a shared machine.

    python benchmarks/placement_compile_time.py [--rounds 3] [--config 1x16x16@100]
        [--models resnet18,mobilenet_v2] [--size 224] [--alone]

Each model (torch-exported, ``quantize_static`` QDQ per-channel, as in
``benchmarks/placement.py``) is compiled for ``vta,llvm`` in a fresh interpreter per
compile, round after round: cost with an empty estimate cache (and how many
accelerator kernels it compiled only to estimate them, left unused by its build), the
split it chose built directly, its decisions given and nothing estimated ("pinned"),
cost again with the cache the first left, and greedy: the cost compile's time over the
pinned one's is what the placement itself adds, printed as the ratio of the medians and
as each round's ratio (compiles next to each other in time; the load drifts) with their
median; and, a figure the load moves far less, the placement's own work inside the cold
compile: its pass's CPU seconds less those of the CPU kernels it compiles for the build
(which takes them), over the pinned compile's (over greedy, the build of
another split is in the difference too: an int8 layer kept on the CPU compiles slower
than its accelerator stream); ``--alone`` adds, before them, cost with an
empty cache where the CPU times each candidate fused alone (without
``estimate_within``: its kernels are not the build's). Prints the medians over the
rounds of the wall time and of the compile's CPU time (user + system, its LLVM worker
processes' included): other processes
on a loaded machine stretch wall times (identical compiles here differ twofold at a load
of 12) far more than the CPU time a compile spends, so the CPU time is the figure to
compare.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from machine import describe  # noqa: E402
from vta_resnet18 import quantized  # noqa: E402

CHILD = r"""
import json, resource, sys, time
import onnx, heterocc
from heterocc.targets.vta import VtaTarget
path, placement, config = sys.argv[1:4]
if placement == "alone":  # the CPU times each candidate fused alone, as before the hook
    from heterocc.targets.llvm.target import LLVMTarget
    del LLVMTarget.estimate_within
    placement = "cost"
elif placement.startswith("pinned="):  # the split a cost compile chose, built directly:
    # the decisions (the first node of each composite offloaded) given, nothing estimated
    import heterocc.passes.partition as partition
    from heterocc.passes.placement import CostPlan, UnitCost
    offloaded = set(json.loads(placement[len("pinned="):]))

    def pinned(graph, composites, claimed, targets, fallback):
        units = [UnitCost(nodes, greedy=target, reason="pinned",
                          chosen=target if nodes[0].name in offloaded else fallback)
                 for target, _, nodes in composites]
        return CostPlan(units, [], fallback)

    partition.plan_by_cost = pinned
    placement = "cost"
else:  # the placement's own CPU seconds: its pass less the CPU kernels it compiles for
    # the build (compile_all inside it: the build takes them), LLVM's own threads included
    import heterocc.passes.partition as partition
    from heterocc.targets.llvm.target import LLVMTarget
    spent = {"placing": 0.0, "kernels": 0.0, "inside": False}
    plan_by_cost, compile_all = partition.plan_by_cost, LLVMTarget.compile_all

    def placing(*args):
        start, spent["inside"] = time.process_time(), True
        try:
            return plan_by_cost(*args)
        finally:
            spent["placing"] += time.process_time() - start
            spent["inside"] = False

    def compiling(self, functions):
        start = time.process_time()
        try:
            return compile_all(self, functions)
        finally:
            if spent["inside"]:
                spent["kernels"] += time.process_time() - start

    partition.plan_by_cost, LLVMTarget.compile_all = placing, compiling
shape, _, clock = config.partition("@")
vta = VtaTarget(config=shape, clock_mhz=float(clock or 100), link_gbps=1)
model = onnx.load(path)
def children():  # CPU seconds of the processes this one started and waited for
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime
wall, cpu, workers = time.perf_counter(), time.process_time(), children()
compiled = heterocc.compile(model, target=[vta, "llvm"], placement=placement)
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
# LLVM's worker processes (a second core's codegen) are this compile's work too: ended
# and waited for, their CPU seconds count (else the compile's CPU time depends on how
# much of its codegen happened to land in them)
from heterocc.targets.llvm.module import _llvm_pool
_llvm_pool().shutdown()
cpu += children() - workers
plan = compiled.placement_report.plan
own = spent["placing"] - spent["kernels"] if "spent" in globals() else 0.0
print(json.dumps({"wall": wall, "cpu": cpu, "own": own,
                  # accelerator kernels compiled to be estimated that the build left
                  "unused_vta": len(vta.cost_model.compiled),
                  "offloaded": sum(u.chosen == "vta" for u in plan.composites) if plan else None,
                  "split": [u.nodes[0].name for u in plan.composites if u.chosen == "vta"]
                  if plan else []}))
"""


def _compile(path: str, placement: str, config: str, cache: str) -> dict:
    env = dict(os.environ, HETEROCC_CACHE_DIR=cache)
    out = subprocess.run([sys.executable, "-c", CHILD, path, placement, config], env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet18,mobilenet_v2")
    ap.add_argument("--config", default="1x16x16@100")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--alone", action="store_true",
                    help="also cost with an empty cache, each candidate timed alone")
    args = ap.parse_args()
    print(describe())
    for name in args.models.split(","):
        path = os.path.join(tempfile.mkdtemp(), f"{name}.onnx")
        onnx.save(quantized(name, True, args.size, "qdq", "int8", False), path)
        load = os.getloadavg()[0]
        rows: dict[str, list[dict]] = {"greedy": [], "cold": [], "warm": [], "alone": [],
                                       "pinned": []}
        # in each round the pinned compile (the split the cold compile chose, built
        # directly, nothing estimated: what the placement itself adds is the cost
        # compile's time over this one's) runs between the cold and the warm compile, so
        # that each is compared with a compile next to it in time (the load drifts)
        arms = [("cold", "cost"), ("pinned", None), ("warm", "cost"), ("greedy", "greedy")]
        if args.alone:
            arms.insert(0, ("alone", "alone"))
        for _ in range(args.rounds):
            cache = tempfile.mkdtemp(prefix="heterocc-costs-")
            for label, placement in arms:
                where = tempfile.mkdtemp(prefix="heterocc-costs-") \
                    if label in ("alone", "pinned") else cache
                if label == "pinned":
                    placement = "pinned=" + json.dumps(rows["cold"][-1]["split"])
                rows[label].append(_compile(path, placement, args.config, where))
        for key in ("cpu", "wall"):
            g, c, w, p = (statistics.median(r[key] for r in rows[k])
                          for k in ("greedy", "cold", "warm", "pinned"))
            print(f"{name} vta {args.config} + llvm, {key} time: greedy {g:.2f} s; cost, "
                  f"empty estimate cache {c:.2f} s ({100 * (c / g - 1):+.1f}%); cost, cache "
                  f"warm {w:.2f} s ({100 * (w / g - 1):+.1f}%)  (medians of {args.rounds})")
            print(f"  {key} time, the cost placement's split built directly (no estimates) "
                  f"{p:.2f} s: cost adds {100 * (c / p - 1):+.1f}% with an empty estimate "
                  f"cache, {100 * (w / p - 1):+.1f}% with it warm")
            paired = [[100 * (r[key] / q[key] - 1) for r, q in zip(rows[label], rows["pinned"])]
                      for label in ("cold", "warm")]
            print(f"  {key} time over the pinned compile of the same round: cold "
                  + ", ".join(f"{v:+.1f}%" for v in paired[0])
                  + f" (median {statistics.median(paired[0]):+.1f}%); warm "
                  + ", ".join(f"{v:+.1f}%" for v in paired[1])
                  + f" (median {statistics.median(paired[1]):+.1f}%)")
            if rows["alone"]:
                a = statistics.median(r[key] for r in rows["alone"])
                print(f"  {key} time, cost, empty cache, each candidate timed alone: "
                      f"{a:.2f} s ({100 * (a / g - 1):+.1f}%)")
        own = [r["own"] / q["cpu"] for r, q in zip(rows["cold"], rows["pinned"])]
        print("  the placement's own work in the cold compile (its pass's CPU seconds less "
              "the CPU kernels it compiles for the build): "
              + ", ".join(f"{r['own']:.2f}" for r in rows["cold"])
              + " s, over the pinned compile of the same round "
              + ", ".join(f"{100 * v:+.1f}%" for v in own)
              + f" (median {100 * statistics.median(own):+.1f}%)")
        for label in ("cold", "warm"):
            print(f"  cost, {label}: candidates offloaded {rows[label][-1]['offloaded']}, "
                  f"accelerator kernels compiled to estimate and left unused by the build "
                  f"{rows[label][-1]['unused_vta']}")
        print(f"  load average: {os.getloadavg()[0]:.2f} (at the start {load:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
