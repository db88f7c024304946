"""How steady the CPU's kernel times are on each clock, on a shared machine.

    python benchmarks/cpu_estimate_clock.py [--models resnet18,mobilenet_v2] [--chains 3]
        [--size 224]

Each model (torch-exported, ``quantize_static`` QDQ per-channel, as in
``benchmarks/placement.py``) is compiled for the CPU alone, and its kernels are timed
the way the placement's CPU estimate times them (``time_in_chains``: graph order, one
call of each kernel per round, the fastest call), ``--chains`` times on each clock in
alternating order: ``cpu`` (the estimate's: the CPU seconds of the threads a call runs
on over their number) and ``wall``. Prints the sum over the kernels for every chain,
with the load average, and the spread (largest over smallest) of each clock's sums.
Run it in two processes to see how the figures move between them.
"""

from __future__ import annotations

import argparse
import os
import sys

import heterocc
from heterocc.sdk.cost import random_arguments
from heterocc.targets.llvm import cost as cpu_cost

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from machine import describe  # noqa: E402
from vta_resnet18 import quantized  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet18,mobilenet_v2")
    ap.add_argument("--chains", type=int, default=3)
    ap.add_argument("--size", type=int, default=224)
    args = ap.parse_args()
    print(describe())
    for name in args.models.split(","):
        model = quantized(name, True, args.size, "qdq", "int8", False)
        compiled = heterocc.compile(model, target="llvm")
        kernels = compiled.kernels
        calls = {n.name: (kernels[n.name], random_arguments(n.inputs))
                 for n in compiled.graph.nodes if n.body is not None and n.name in kernels}
        sums: dict[str, list[float]] = {"cpu": [], "wall": []}
        for _ in range(args.chains):
            for clock in ("cpu", "wall"):
                timed = cpu_cost.time_in_chains(calls, clock=clock)
                sums[clock].append(sum(seconds for seconds, _ in timed.values()))
                print(f"{name}: {len(calls)} kernels, {clock} clock {sums[clock][-1] * 1e3:.3f} "
                      f"ms (load {os.getloadavg()[0]:.2f})", flush=True)
        for clock, found in sums.items():
            print(f"{name}: {clock} clock, spread over {len(found)} chains "
                  f"{max(found) / min(found):.2f}x ({min(found) * 1e3:.3f} to "
                  f"{max(found) * 1e3:.3f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
