"""How well the CPU cost model's reference kernel tracks a model's kernels from one timing
window to the next, on a shared machine.

    python benchmarks/chain_reference_windows.py [--models resnet18,mobilenet_v2]
        [--chains 12] [--cpu llvm] [--json FILE] [--cost N]

Each model (torch-exported, ``quantize_static`` QDQ per-channel, as in
``benchmarks/placement.py``) is compiled for the CPU alone and its kernels are timed in
``--chains`` chains (``time_in_chains``: graph order, one call of each per round) with
the reference kernel (``chain_reference``: caches evicted, then the reference) timed
twice in every round: before the kernels and after them. Every call's samples are kept
(``--json``). Then, for every ordered pair of chains (an estimate's chain and a later
check's), the kernels of 0.1 ms or more whose figures agree within 25% are counted
under each normalisation: raw, by the reference after the kernels (the old one), by
the reference before and after together, and by each with the baseline taken over the
chains so far; printed with the reference's and the kernels' slowdown per chain.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time

import heterocc
from heterocc.sdk.cost import random_arguments
from heterocc.sdk.registry import parse_target_spec
from heterocc.targets import get_target
from heterocc.targets.llvm import cost as cpu_cost
from heterocc.targets.llvm.peak import PEAK_ITERATIONS, peak_kernel
from heterocc.tir.stmt import SeqStmt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from machine import describe  # noqa: E402
from vta_resnet18 import quantized  # noqa: E402

BEFORE_EVICT, BEFORE = "<evict before>", "<reference before>"
HOT, PEAK = "<reference hot>", "<peak loop>"


class _Peak:
    """The vector peak loop as a one-thread call (timed on its thread's CPU clock)."""

    prim = type("Prim", (), {"body": SeqStmt(())})()

    def __init__(self, call):
        self.call = call

    def __call__(self, args):
        self.call(PEAK_ITERATIONS, 0.999)


def peak_call(llvm):
    return _Peak(peak_kernel(llvm.cpu)[0])


def timed_samples(calls) -> dict[str, list[float]]:
    """Every timed sample of each of ``calls`` in one chain (``time_in_chains``'s own
    loop; its ``fastest`` is watched to keep the samples)."""
    kept: list[list[float]] = []
    original = cpu_cost.fastest

    def keep(found):
        kept.append(list(found))
        return original(found)

    cpu_cost.fastest = keep
    try:
        cpu_cost.time_in_chains(calls)
    finally:
        cpu_cost.fastest = original
    return dict(zip(calls, kept))


def agreement(first: dict[str, float], second: dict[str, float], names: list[str]
              ) -> tuple[int, int, float]:
    """Of ``names``, those whose figure in ``first`` lies within 25% of ``second``'s,
    their number, the largest deviation of ``first`` from ``second``."""
    deviations = [abs(first[n] - second[n]) / second[n] for n in names]
    return sum(d <= 0.25 for d in deviations), len(names), max(deviations, default=0.0)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet18,mobilenet_v2")
    ap.add_argument("--chains", type=int, default=12)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--cpu", default="llvm")
    ap.add_argument("--json", help="write every chain's samples here")
    ap.add_argument("--cost", type=int, default=0, metavar="N",
                    help="instead: the CPU seconds of a chain of the model's kernels alone, "
                         "with the reference from cold caches every round (the earlier "
                         "design) and with time_chain's reference calls, N times each in "
                         "alternating order")
    args = ap.parse_args()
    print(describe())
    name, options = parse_target_spec(args.cpu)
    llvm = get_target(name, **options)
    reference = cpu_cost.chain_reference(llvm)
    ref_calls = reference.calls
    evict = ref_calls[cpu_cost.EVICT]
    peak = peak_call(llvm)
    study = {}
    for model_name in args.models.split(","):
        model = quantized(model_name, True, args.size, "qdq", "int8", False)
        compiled = heterocc.compile(model, target=[llvm])
        kernels = compiled.kernels
        calls = {n.name: (kernels[n.name], random_arguments(n.inputs))
                 for n in compiled.graph.nodes if n.body is not None and n.name in kernels}
        if args.cost:
            cost(model_name, calls, ref_calls, args.cost)
            continue
        chains = []
        for k in range(args.chains):
            cold = {cpu_cost.EVICT: evict, cpu_cost.REFERENCE: ref_calls[cpu_cost.REFERENCE]}
            samples = timed_samples({BEFORE_EVICT: evict, BEFORE: ref_calls[cpu_cost.REFERENCE],
                                     **calls, **cold, HOT: ref_calls[cpu_cost.REFERENCE],
                                     PEAK: (peak, ())})
            chains.append({"load": os.getloadavg()[0], "time": time.time(),
                           "samples": samples})
            fast = {n: min(s) for n, s in samples.items()}
            print(f"{model_name} chain {k}: load {chains[-1]['load']:.1f}, reference before "
                  f"{fast[BEFORE] * 1e3:.3f} after {fast[cpu_cost.REFERENCE] * 1e3:.3f} ms, "
                  f"kernels {sum(fast[n] for n in calls) * 1e3:.3f} ms", flush=True)
        study[model_name] = {"kernels": list(calls), "chains": chains}
        report(model_name, list(calls), chains)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(study, f)
    return 0


def cost(model_name: str, calls: dict, ref_calls: dict, times: int) -> None:
    """The CPU seconds (this process's, every thread) of one chain of ``calls`` three
    ways, in alternating order: alone; with the reference from cold caches in every
    round; with every reference call, sparse as ``time_chain`` runs them."""
    cold = {name: ref_calls[name] for name in (cpu_cost.EVICT, cpu_cost.REFERENCE)}
    ways = {"kernels alone": ({**calls}, ()),
            "reference from cold caches, every round": ({**calls, **cold}, ()),
            "the voters, sparse": ({**calls, **ref_calls}, set(ref_calls))}
    spent: dict[str, list[float]] = {way: [] for way in ways}
    for _ in range(times):
        for way, (chain, sparse) in ways.items():
            start = time.process_time()
            cpu_cost.time_in_chains(chain, sparse=sparse)
            spent[way].append(time.process_time() - start)
    alone = statistics.median(spent["kernels alone"])
    for way, found in spent.items():
        print(f"{model_name}: {way}: median {statistics.median(found):.3f} CPU-s a chain "
              f"(+{statistics.median(found) - alone:.3f} over the kernels alone; "
              f"load {os.getloadavg()[0]:.1f})", flush=True)


def report(model_name: str, names: list[str], chains: list[dict]) -> None:
    """Each normalisation's agreement over every ordered pair of chains."""
    fast = [{n: min(s) for n, s in c["samples"].items()} for c in chains]
    kernels_total = [sum(f[n] for n in names) for f in fast]
    first = kernels_total[0]
    for k, f in enumerate(fast):
        print(f"  chain {k}: kernels {kernels_total[k] / first:.2f}x, reference after "
              f"{f[cpu_cost.REFERENCE] / fast[0][cpu_cost.REFERENCE]:.2f}x, before "
              f"{f[BEFORE] / fast[0][BEFORE]:.2f}x")
    for label, voter in (("evict", cpu_cost.EVICT), ("hot", HOT), ("peak", PEAK),
                         ("cold", cpu_cost.REFERENCE)):
        errors = []
        for i, j in itertools.permutations(range(len(fast)), 2):
            kernels = statistics.median(fast[j][n] / fast[i][n] for n in names
                                        if fast[j][n] >= 1e-4)
            errors.append((fast[j][voter] / fast[i][voter]) / kernels)
        print(f"  voter {label}: its slowdown over the kernels' median slowdown, pairs of "
              f"chains: {min(errors):.2f} to {max(errors):.2f}, "
              f"{sum(abs(e - 1) > 0.1 for e in errors)}/{len(errors)} off by >10%")
    schemes = {
        "raw": lambda f: 1.0,
        "reference after": lambda f: f[cpu_cost.REFERENCE],
        "reference before+after (fastest)": lambda f: min(f[cpu_cost.REFERENCE], f[BEFORE]),
        "reference before+after (mean)": lambda f: (f[cpu_cost.REFERENCE] + f[BEFORE]) / 2,
        "median of cold, hot, peak": lambda f: statistics.median(
            (f[cpu_cost.REFERENCE] / fast[0][cpu_cost.REFERENCE], f[HOT] / fast[0][HOT],
             f[PEAK] / fast[0][PEAK])),
        "median of cold, evict, peak": lambda f: statistics.median(
            (f[cpu_cost.REFERENCE] / fast[0][cpu_cost.REFERENCE],
             f[cpu_cost.EVICT] / fast[0][cpu_cost.EVICT], f[PEAK] / fast[0][PEAK])),
    }
    for label, speed in schemes.items():
        within = total = 0
        worst = 0.0
        bad = 0
        for i, j in itertools.permutations(range(len(fast)), 2):
            a = {n: fast[i][n] / speed(fast[i]) for n in names}
            b = {n: fast[j][n] / speed(fast[j]) for n in names}
            w, t, d = agreement(a, b, [n for n in names if fast[j][n] >= 1e-4])
            within, total, worst = within + w, total + t, max(worst, d)
            bad += w < t
        pairs = len(fast) * (len(fast) - 1)
        print(f"  {label}: {within}/{total} kernel pairs within 25% "
              f"({100 * within / max(total, 1):.1f}%), pairs of chains with a miss "
              f"{bad}/{pairs}, largest deviation {100 * worst:.0f}%, median kernel "
              f"ratio spread {spread(fast, names, speed):.2f}")


def spread(fast, names, speed) -> float:
    """The largest over the smallest of the chains' median normalised kernel figure
    (relative to the first chain): how far apart whole chains lie."""
    medians = [statistics.median(f[n] / speed(f) / (fast[0][n] / speed(fast[0]))
                                 for n in names) for f in fast]
    return max(medians) / min(medians)


if __name__ == "__main__":
    sys.exit(main())
