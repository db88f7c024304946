"""The floating-point peak of this CPU's vector units: what no kernel can beat, to read
the matmul and tuning figures against (a product at 88% of it has little left to win).

A loop of independent vector multiply-adds on registers (no memory), as wide and as
many as the target's CPU description says (every vector register but four holds an
accumulator: enough chains to cover the FMA latency on every port), generated with
llvmlite for that description and run on one thread, then on every core at once. Prints
the machine and the CPU/ISA the code is generated for (first line), then GFLOP/s (the
best of several runs). Run:
    python benchmarks/fma_peak.py [--target "llvm -mattr=-avx512f"] [--seconds 0.5]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import time
from concurrent.futures import ThreadPoolExecutor

import llvmlite.binding as llvm
from machine import cpu_target, describe  # beside this script

from heterocc.targets.llvm.module import machines
from heterocc.targets.llvm.peak import peak_kernel_ir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="llvm",
                        help='the CPU to generate code for, e.g. "llvm -mattr=-avx512f"')
    parser.add_argument("--seconds", type=float, default=0.5, help="length of one run")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(describe(args.target))
    description = cpu_target(args.target)
    state = machines(description)
    if state.engine is None:
        raise SystemExit(f"code for {description.triple} does not run on this machine")
    lanes = description.vector_bytes // 4
    chains = max(8, description.vector_registers - 4)
    module = llvm.parse_assembly(peak_kernel_ir(lanes, chains, description.fma))
    module.verify()
    engine = llvm.create_mcjit_compiler(module, state.jit_machine)
    engine.finalize_object()
    # ctypes releases the GIL during the call: the threads run the loop side by side
    peak = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64, ctypes.c_float)(
        engine.get_function_address("peak"))
    start = time.perf_counter()
    peak(1_000_000, 0.999)
    count = max(1, int(1_000_000 * args.seconds / (time.perf_counter() - start)))
    flops_per_call = count * chains * lanes * 2
    print(f"{chains} chains of {lanes}-lane float32 multiply-adds, {count} iterations a run")
    for threads in sorted({1, os.cpu_count() or 1}):
        best = 0.0
        with ThreadPoolExecutor(threads) as pool:
            for _ in range(args.runs):
                start = time.perf_counter()
                list(pool.map(lambda _: peak(count, 0.999), range(threads)))
                best = max(best, threads * flops_per_call / (time.perf_counter() - start))
        print(f"{threads} thread{'s' if threads > 1 else ''}: {best / 1e9:.0f} GFLOP/s "
              f"(best of {args.runs})")


if __name__ == "__main__":
    main()
