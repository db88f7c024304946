"""vta's host-part estimate against the host part the stream replay measures, per region.

    python benchmarks/placement_host_check.py [--models resnet18,mobilenet_v2] [--size 224]
        [--configs 1x16x16@100,1x32x32@300,1x64x64@300] [--inputs 2] [--replays 3]
        [--host-only CALLS]

Compiles each model with the greedy placement (every pattern match on vta), runs a short
stream with replays (``CompiledModel.run_stream``: the host part of every vta call timed
with the device's results replayed) and prints, per vta region, the measured host part
(fastest over inputs) against the estimate: :func:`heterocc.targets.vta.cost.host_seconds`
of each of the region's kernels, summed (``per kernel``), and the region's own estimate
(:func:`heterocc.targets.vta.cost.region_host_seconds`: the region run as placed, layouts
converted only at its boundary). Then, for the cost placement, the ``--layers``
candidates whose vta estimate comes closest to the CPU's: CPU ms against vta's device,
host part and transfer ms.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from machine import describe  # noqa: E402
from placement import DEFAULT_CONFIGS, vta_config  # noqa: E402
from vta_resnet18 import quantized  # noqa: E402

import heterocc  # noqa: E402
from heterocc.targets.vta.cost import (  # noqa: E402
    host_seconds,
    host_steps,
    region_host_seconds,
    region_host_steps,
)


def _closest(model, text: str, count: int) -> None:
    """The cost placement's ``count`` candidates nearest to a win on vta (every figure
    estimated: ``CostPlan.complete``)."""
    vta = vta_config(text, 1.0)
    plan = heterocc.compile(model, target=[vta, "llvm"],
                            placement="cost").placement_report.plan
    plan.complete()
    units = [u for u in plan.composites if {"vta", "llvm"} <= set(u.candidates)]
    units.sort(key=lambda u: u.candidates["vta"].total_s / u.candidates["llvm"].total_s)
    on_vta = sum(1 for u in plan.composites if u.chosen == "vta")
    print(f"  cost placement: {on_vta} of {len(plan.composites)} candidates on vta; "
          f"closest to a win on vta (ms):")
    print(f"  {'first node':34s} {'cpu':>7s} {'vta all':>8s} {'device':>7s} {'host':>7s} "
          f"{'link':>7s}  ratio")
    for u in units[:count]:
        c, a = u.candidates["llvm"], u.candidates["vta"]
        print(f"  {u.nodes[0].name[:34]:34s} {c.total_s * 1e3:7.3f} {a.total_s * 1e3:8.3f} "
              f"{a.compute_s * 1e3:7.3f} {a.host_s * 1e3:7.3f} {a.transfer_s * 1e3:7.3f}  "
              f"{a.total_s / c.total_s:.2f}")


def _fastest(call, calls: int) -> float:
    call()
    best = np.inf
    for _ in range(calls):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def _host_only(compiled, label: str, calls: int) -> None:
    """The host steps of every vta kernel (``host_steps``), summed, and of every vta
    region's call (``region_host_steps``: conversions only at its boundary), each the
    fastest of ``calls`` calls; their sums by composite kind."""
    kinds: dict[str, float] = {}
    regions = 0.0
    for node in compiled.graph.nodes:
        kernel = compiled.kernels.get(node.name)
        parts = list(getattr(kernel, "composites", ()) or ())
        if not parts:
            continue
        body = node.body.nodes if "composite" not in node.attrs else [node]
        for part, composite in zip(parts, body):
            kind = composite.attrs.get("composite")
            kinds[kind] = kinds.get(kind, 0.0) + _fastest(host_steps(part, composite), calls)
        if "composite" not in node.attrs:
            regions += _fastest(region_host_steps(kernel.region, node), calls)
    print(f"{label}: vta kernels' host steps summed {sum(kinds.values()) * 1e3:.2f} ms ("
          + ", ".join(f"{k} {v * 1e3:.2f}" for k, v in sorted(kinds.items()))
          + f"), regions' calls {regions * 1e3:.2f} ms (load {os.getloadavg()[0]:.2f})")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet18,mobilenet_v2")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--configs", default=DEFAULT_CONFIGS,
                    help="SHAPE@MHZ[/LINK_GBPS], comma-separated (link default 1 GB/s)")
    ap.add_argument("--inputs", type=int, default=2)
    ap.add_argument("--replays", type=int, default=3)
    ap.add_argument("--layers", type=int, default=6,
                    help="print the cost placement's N composites closest to a win on vta")
    ap.add_argument("--host-only", type=int, metavar="CALLS", default=0,
                    help="only time the host steps of the greedy compile's vta kernels "
                         "(each kernel's, summed, and the region's), the fastest of CALLS "
                         "calls each: no stream, no cost placement")
    args = ap.parse_args()
    print(describe())
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    for name in args.models.split(","):
        model = quantized(name, True, args.size, "qdq", "int8", False)
        for text in args.configs.split(","):
            vta = vta_config(text, 1.0)
            compiled = heterocc.compile(model, target=[vta, "llvm"], placement="greedy")
            if args.host_only:
                _host_only(compiled, f"{name} vta {text} MHz", args.host_only)
                continue
            rng = np.random.default_rng(1)
            xs = [[rng.standard_normal((1, 3, args.size, args.size)).astype(np.float32)]
                  for _ in range(args.inputs)]
            result = compiled.run_stream(xs, replays=args.replays)
            measured: dict[int, float] = {}
            for t in result.tasks["wall"]:
                if t.lane == "vta":
                    measured[t.index] = min(measured.get(t.index, np.inf), t.host_s)
            rows = []
            for k, node in enumerate(compiled.graph.nodes):
                if k not in measured:
                    continue
                kernel = compiled.kernels[node.name]
                parts = list(kernel.composites)
                body = node.body.nodes if "composite" not in node.attrs else [node]
                per_kernel = sum(host_seconds(p, n) for p, n in zip(parts, body))
                region = region_host_seconds(kernel.region, node) \
                    if "composite" not in node.attrs else per_kernel
                rows.append((node.name, len(parts), measured[k], per_kernel, region))
            m = sum(r[2] for r in rows)
            e = sum(r[3] for r in rows)
            g = sum(r[4] for r in rows)
            print(f"\n{name} vta {text} MHz, greedy: {len(rows)} vta functions "
                  f"(load {os.getloadavg()[0]:.2f})")
            print(f"  {'function':40s} kernels  measured ms  per-kernel est ms  region est ms")
            for fname, n, mm, ee, gg in rows:
                print(f"  {fname[:40]:40s} {n:7d}  {mm * 1e3:11.3f}  {ee * 1e3:17.3f}  "
                      f"{gg * 1e3:13.3f}")
            print(f"  total: measured {m * 1e3:.3f} ms, per-kernel estimate {e * 1e3:.3f} ms "
                  f"({e / m:.2f}x), region estimate {g * 1e3:.3f} ms ({g / m:.2f}x)")
            if args.layers:
                _closest(model, text, args.layers)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
