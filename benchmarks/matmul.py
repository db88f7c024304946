"""fp32 matmul (default 1024^3): heterocc's CPU schedule (targets/llvm/schedules.py) vs
NumPy, measured in the same process.

Prints the machine and the CPU/ISA the code is generated for (first line), then GFLOP/s
of both (medians of repeated runs, in alternating blocks) and their ratio. Run:
    python benchmarks/matmul.py [--size 1024] [--repeat 10] [--target "llvm -mattr=-avx512f"]
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from alternating import alternating_medians  # beside this script
from machine import cpu_target, describe  # beside this script

from heterocc.targets import llvm as hllvm
from heterocc.targets.llvm.schedules import matmul_function


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--target", default="llvm",
                        help='the CPU to generate code for, e.g. "llvm -mattr=-avx512f"')
    args = parser.parse_args()
    print(describe(args.target))
    n = args.size
    cpu = cpu_target(args.target)
    module = hllvm.build(matmul_function(n, n, n, name="matmul", cpu=cpu), cpu=cpu)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)
    module["matmul"](a, b, c)
    error = float(np.abs(c - a @ b).max())
    flops = 2.0 * n ** 3
    ours_s, theirs_s = alternating_medians(
        [lambda: module["matmul"](a, b, c), lambda: np.matmul(a, b, out=c)], args.repeat)
    ours, theirs = flops / ours_s / 1e9, flops / theirs_s / 1e9
    print(f"runtime threads: {hllvm.num_threads()}, "
          f"load average (1 min) {os.getloadavg()[0]:.2f}")
    print(f"matmul {n}x{n}x{n} fp32 (max abs error vs numpy {error:.2e})")
    print(f"heterocc: {ours:8.1f} GFLOP/s")
    print(f"numpy:    {theirs:8.1f} GFLOP/s")
    print(f"ratio heterocc/numpy: {ours / theirs:.2f}x")


if __name__ == "__main__":
    main()
