"""What placement by cost adds to compile time, on a shared machine.

    python benchmarks/placement_compile_time.py [--rounds 5] [--config 1x16x16@100]
        [--models resnet18,mobilenet_v2] [--size 224] [--arms cold,pinned,warm,greedy]
        [--first] [--alone] [--compare PYTHON]

Each model (torch-exported, ``quantize_static`` QDQ per-channel, as in
``benchmarks/placement.py``) is compiled for ``vta,llvm`` in a fresh interpreter per
compile, round after round. The arms:

- ``cold``: ``--placement cost`` with an empty estimate cache: every figure it needs
  measured (the CPU's kernels compiled and timed, the accelerator's compiled), the
  whole compile with them. What the cache holds is the reference kernel's code
  (``targets/llvm/reference_kernel.py``: one fixed convolution, the same for every
  model, built by the first compile on the machine and kept beside the estimates), as
  a new model's first compile finds it; ``--first`` adds ``first``, the same with
  nothing cached at all (the first compile on the machine);
- ``pinned``: the split the cold compile chose, built directly: its decisions given,
  nothing estimated. What the placement adds is the cold compile's time over this one's;
- ``warm``: cost again with the cache the cold compile left (estimates nothing);
- ``greedy``: every pattern match on the accelerator (another split: an int8 layer
  kept on the CPU compiles slower than its accelerator stream, so not a baseline of
  what placing costs).

The figure is CPU time: user + system seconds of the compiling process and of the
processes it waited for (LLVM's worker processes: a second core's code generation),
since other processes on a loaded machine stretch wall times (identical compiles
differ twofold at a load of 12) far more than the CPU time a compile spends. Even
that moves 10-40% between identical compiles on a busy machine, so: the cold and the
pinned compile run next to each other, their order alternating from round to round
(cold first, then pinned first: a drift of the load favours neither), and the
figure is the median over the rounds of each round's ratio cold / pinned. Beside it,
a figure the load moves far less: the placement's own work inside the cold compile,
its pass's CPU seconds less those of the CPU kernels it compiles that the build then
takes (the kernels it compiles that the build does not take stay counted: their
lowering and LLVM's seconds, which every kernel records), over the pinned compile's
CPU seconds. ``--alone`` adds, before them, cost with an empty cache where the CPU
times each candidate fused alone (without ``estimate_within``: its kernels are not
the build's). Wall times are printed too, for what they are worth at the load printed.
``--compare PYTHON``: the same with another interpreter's heterocc (a tree before a
change) in every round, the two taking turns to go first, and this one's cold compile
over the other's, round by round.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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
from heterocc.sdk.te_target import TETarget, structure_key
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
else:  # the placement's own CPU seconds: its pass less the CPU kernels it compiles that
    # the build takes (compile_all inside it), LLVM's own threads included
    import heterocc.passes.partition as partition
    from heterocc.targets.llvm.target import LLVMTarget
    spent = {"placing": 0.0, "kernels": 0.0, "inside": False}
    lowering = {}  # (target, structure key) -> CPU seconds lowering it here, while placing
    used = set()  # structure keys the build asked for
    plan_by_cost, compile_all = partition.plan_by_cost, LLVMTarget.compile_all
    start_structure, compiled_of = LLVMTarget._start_structure, TETarget.compiled

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

    def starting(self, function):
        start = time.thread_time()
        try:
            return start_structure(self, function)
        finally:
            if spent["inside"]:
                key = (id(self), structure_key(function.body))
                lowering[key] = lowering.get(key, 0.0) + time.thread_time() - start

    def asked(self, function):
        if not spent["inside"] and isinstance(self, LLVMTarget):
            used.add(structure_key(function.body))
        return compiled_of(self, function)

    partition.plan_by_cost, LLVMTarget.compile_all = placing, compiling
    LLVMTarget._start_structure, TETarget.compiled = starting, asked
shape, _, clock = config.partition("@")
vta = VtaTarget(config=shape, clock_mhz=float(clock or 100), link_gbps=1)
model = onnx.load(path)
def children():  # CPU seconds of the processes this one started and waited for
    used_ = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used_.ru_utime + used_.ru_stime
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
own = unused = 0
if "spent" in globals():
    own = spent["placing"] - spent["kernels"]
    llvm = compiled.placement_report.plan.targets["llvm"]
    # kernels compiled while placing that the build did not take: their lowering and
    # LLVM's CPU seconds (each module records them) are the placement's work too
    for (target, key), seconds in lowering.items():
        if target != id(llvm) or key in used:
            continue  # the reference kernel's own target is counted in the pass already
        unused += 1
        code = llvm._compiled[key].code
        own += seconds + getattr(getattr(code, "owner", None), "llvm_cpu_seconds", 0.0)
print(json.dumps({"wall": wall, "cpu": cpu, "own": own, "unused_cpu": unused,
                  # accelerator kernels compiled to be estimated that the build left
                  "unused_vta": len(vta.cost_model.compiled),
                  "offloaded": sum(u.chosen == "vta" for u in plan.composites) if plan else None,
                  "split": [u.nodes[0].name for u in plan.composites if u.chosen == "vta"]
                  if plan else []}))
"""

#: builds the reference kernel's code into a cache folder (what a first compile on the
#: machine leaves there for every later one); a compiler that keeps none (before session
#: 17, for ``--compare``) leaves nothing
SEED = r"""
import sys
from heterocc.targets.llvm.target import LLVMTarget
try:
    from heterocc.targets.llvm.reference_kernel import reference_kernel
except ImportError:
    sys.exit()
reference_kernel(LLVMTarget(), sys.argv[1])
"""


def _run(python: str, code: str, args: list[str], cache: str) -> str:
    env = dict(os.environ, HETEROCC_CACHE_DIR=cache)
    return subprocess.run([python, "-c", code, *args], env=env, capture_output=True,
                          text=True, check=True).stdout


def _compile(python: str, path: str, placement: str, config: str, cache: str) -> dict:
    out = _run(python, CHILD, [path, placement, config], cache)
    return json.loads(out.strip().splitlines()[-1])


def _cache(seed: str | None = None) -> str:
    """A new cache folder: empty, or holding only what ``seed`` holds (the reference
    kernel's code, no estimate)."""
    cache = tempfile.mkdtemp(prefix="heterocc-costs-")
    for name in os.listdir(seed) if seed else ():
        shutil.copy2(os.path.join(seed, name), cache)  # its owner-only mode kept
    return cache


def _pct(ratio: float) -> str:
    return f"{100 * (ratio - 1):+.1f}%"


class Compiler:
    """One interpreter's heterocc (this one, or ``--compare``'s) and its figures."""

    def __init__(self, python: str, arms: list[str]):
        self.python = python
        self.seed = _cache()
        _run(python, SEED, [self.seed], self.seed)
        self.rows: dict[str, list[dict]] = {k: [] for k in ("cold", "pinned", *arms)}
        self.split: list[str] | None = None
        self.changed = 0

    def round(self, path: str, config: str, cold_first: bool, arms: list[str]) -> None:
        """The cold and the pinned compile (in the order given; the pinned one needs a
        split: the first round starts cold), then the other arms."""
        cache = _cache(self.seed)
        order = ["cold", "pinned"] if cold_first or self.split is None else ["pinned", "cold"]
        for label in order + arms:
            if label == "cold":
                row = _compile(self.python, path, "cost", config, cache)
                if self.split is not None and row["split"] != self.split:
                    self.changed += 1  # the pinned compile beside it built another split
                self.split = row["split"]
            elif label == "pinned":
                row = _compile(self.python, path, "pinned=" + json.dumps(self.split), config,
                               _cache())
            elif label == "warm":
                row = _compile(self.python, path, "cost", config, cache)
            elif label == "greedy":
                row = _compile(self.python, path, "greedy", config, _cache())
            else:  # first, alone: nothing cached
                row = _compile(self.python, path, "cost" if label == "first" else "alone",
                               config, _cache())
            self.rows[label].append(row)

    def report(self) -> None:
        rows, pinned = self.rows, self.rows["pinned"]
        for key in ("cpu", "wall"):
            p = statistics.median(q[key] for q in pinned)
            print(f"  {key} time, pinned (the cost placement's split built directly) "
                  f"{p:.2f} s (each round: " + ", ".join(f"{q[key]:.2f}" for q in pinned)
                  + ")")
            for label in rows:
                if label == "pinned":
                    continue
                ratios = [row[key] / q[key] for row, q in zip(rows[label], pinned)]
                print(f"    {label:6s} {statistics.median(row[key] for row in rows[label]):.2f}"
                      f" s, over the pinned compile of its round: median "
                      f"{_pct(statistics.median(ratios))} (each: "
                      + ", ".join(_pct(v) for v in ratios) + ")")
        own = [row["own"] / q["cpu"] for row, q in zip(rows["cold"], pinned)]
        print("  the placement's own work in the cold compile (its pass's CPU seconds less "
              "the CPU kernels it compiles that the build takes): "
              + ", ".join(f"{row['own']:.2f}" for row in rows["cold"])
              + " s; over the pinned compile of its round: median "
              + f"{100 * statistics.median(own):+.1f}% (each: "
              + ", ".join(f"{100 * v:+.1f}%" for v in own) + ")")
        last = rows["cold"][-1]
        print(f"  cold: candidates offloaded {last['offloaded']}; kernels compiled while "
              f"placing that the build left: {last['unused_vta']} accelerator, "
              f"{last['unused_cpu']} CPU" + (f"; the split changed in {self.changed} of "
                                              f"{len(pinned) - 1} rounds" if self.changed
                                              else ""))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet18,mobilenet_v2")
    ap.add_argument("--config", default="1x16x16@100")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--arms", default="cold,pinned,warm,greedy",
                    help="which compiles besides cold and pinned (warm, greedy)")
    ap.add_argument("--first", action="store_true",
                    help="also cost with nothing cached, the reference kernel's code neither")
    ap.add_argument("--alone", action="store_true",
                    help="also cost with an empty cache, each candidate timed alone")
    ap.add_argument("--compare", metavar="PYTHON",
                    help="an interpreter with another heterocc (before a change): each "
                         "round compiles with both, their order alternating")
    args = ap.parse_args()
    arms = [a for a in args.arms.split(",") if a in ("warm", "greedy")]
    if args.first:
        arms.append("first")
    if args.alone:
        arms.append("alone")
    print(describe())
    pythons = [sys.executable] + ([args.compare] if args.compare else [])
    for name in args.models.split(","):
        path = os.path.join(tempfile.mkdtemp(), f"{name}.onnx")
        onnx.save(quantized(name, True, args.size, "qdq", "int8", False), path)
        loads = [os.getloadavg()[0]]
        compilers = [Compiler(python, arms) for python in pythons]
        for r in range(args.rounds):
            for compiler in compilers if r % 2 == 0 else compilers[::-1]:
                compiler.round(path, args.config, r % 2 == 0, arms)
            loads.append(os.getloadavg()[0])
        print(f"{name} vta {args.config} + llvm, {args.rounds} rounds (cold and pinned "
              f"alternating first), load {min(loads):.1f} to {max(loads):.1f}:")
        for compiler in compilers:
            if len(compilers) > 1:
                print(f" {compiler.python}:")
            compiler.report()
        if len(compilers) > 1:
            mine, other = compilers
            ratios = [a["cpu"] / b["cpu"] for a, b in zip(mine.rows["cold"], other.rows["cold"])]
            print(f"  cold compile's CPU time, this heterocc over --compare's in each round: "
                  f"median {_pct(statistics.median(ratios))} (each: "
                  + ", ".join(_pct(v) for v in ratios) + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
