"""The accelerator's device boundary under mutation fuzzing: N mutants of real
streams (the reference programs and the accelerator functions of a compiled CNN)
through decode, the stream checker, the timing model, ``run_stream(...,
check=False)`` and the functional simulator one instruction at a time, with DRAM
inside guard bytes and a wall-clock limit per stream.

    python benchmarks/stream_fuzz.py [--count 1000] [--seed 2026]
        [--budget seed|default] [--no-model] [--no-memory] [--time-limit 10] [--top 12]
        [--costliest-gemm]

Prints the counts by outcome: crashes (anything but the project's own errors),
out-of-bounds writes (changed guard bytes), hangs (over the limit), accepted and
refused streams per stage with the refusals by error and field, the mutations run,
the checker's peak traced memory and the slowest stream. ``--budget default`` (the
default) keeps HardwareConfig's work budget, as users get it; ``--budget seed``
gives each seed a budget four times its own work, so that mutants asking for more
are refused by the budget. ``--costliest-gemm`` first times the single GEMM
instruction the default budget lets cost the simulator most.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

from heterocc.accel_sim import (
    Buffer,
    FunctionalSimulator,
    Gemm,
    HardwareConfig,
    Load,
    MicroOp,
    encode_uops,
)
from heterocc.accel_sim.fuzz import STAGES, budget_for, fuzz, reference_seeds

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import describe  # noqa: E402


def costliest_gemm(config: HardwareConfig) -> None:
    """Seconds the simulator takes for the costliest GEMM the default budget admits:
    every tile index varying on every loop (nothing to share between iterations)."""
    uop_count = 128
    uops = [MicroOp(dst=u % 4, src=u % 16, wgt=u % 16) for u in range(uop_count)]
    extent = math.isqrt(config.max_stream_iterations // uop_count)
    machine = FunctionalSimulator(config, encode_uops(uops, config).view(np.uint8).copy())
    machine.execute(Load(buffer=Buffer.UOP, sram_base=0, dram_base=0, y_size=1,
                         x_size=uop_count, x_stride=uop_count), 0)
    gemm = Gemm(uop_begin=0, uop_end=uop_count, loop_outer=extent, loop_inner=extent,
                acc_factor_outer=2, acc_factor_inner=1, inp_factor_outer=2,
                inp_factor_inner=1, wgt_factor_outer=1, wgt_factor_inner=1)
    started = time.perf_counter()
    machine.execute(gemm, 1)
    print(f"costliest GEMM within the budget ({gemm.iterations:,} iterations of "
          f"{config.max_stream_iterations:,}, every index varying): "
          f"{time.perf_counter() - started:.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000, help="mutated streams")
    parser.add_argument("--seed", type=int, default=2026, help="random seed of the mutations")
    parser.add_argument("--budget", choices=("seed", "default"), default="default",
                        help="seed: 4x each seed's own work; default: HardwareConfig's")
    parser.add_argument("--no-model", action="store_true",
                        help="only the reference programs (no compiled CNN)")
    parser.add_argument("--no-memory", action="store_true",
                        help="do not trace the checker's memory (faster)")
    parser.add_argument("--time-limit", type=float, default=10.0,
                        help="seconds one stream may take before it counts as a hang")
    parser.add_argument("--top", type=int, default=12,
                        help="outcome kinds listed per stage (the rest are summed)")
    parser.add_argument("--costliest-gemm", action="store_true",
                        help="also time the costliest single GEMM the default budget admits")
    args = parser.parse_args(argv)

    print(describe())
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    if args.costliest_gemm:
        costliest_gemm(HardwareConfig())
    seeds = reference_seeds()
    if not args.no_model:
        from heterocc.targets.vta.seeds import tiny_cnn_seeds

        seeds += tiny_cnn_seeds()
    print(f"seeds: {', '.join(f'{s.name} ({len(s.instructions)})' for s in seeds)}")
    started = time.perf_counter()
    tally = fuzz(seeds, args.count, args.seed,
                 config=budget_for if args.budget == "seed" else None,
                 time_limit_s=args.time_limit, measure_checker=not args.no_memory)
    elapsed = time.perf_counter() - started
    print(f"\n{tally.streams} mutated streams in {elapsed:.1f} s "
          f"(slowest {tally.slowest_s:.2f} s; load average now {os.getloadavg()[0]:.2f})")
    print(f"crashes: {len(tally.crashes)}   out-of-bounds writes: {len(tally.out_of_bounds)}"
          f"   hangs: {len(tally.hangs)}")
    if not args.no_memory:
        print(f"checker peak traced memory: {tally.checker_peak_bytes / 2**20:.2f} MiB")
    print("mutations: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.by_mutation.items())))
    for stage in STAGES:
        results = tally.by_stage[stage]
        print(f"\n{stage}: {sum(results.values())} streams")
        listed = results.most_common(args.top)
        for result, count in listed:
            print(f"  {count:5d}  {result}")
        rest = sum(results.values()) - sum(count for _, count in listed)
        if rest:
            print(f"  {rest:5d}  refused, {len(results) - len(listed)} other kinds")
    for outcome in (tally.crashes + tally.out_of_bounds + tally.hangs)[:10]:
        print(f"\nFAILED {outcome.mutant.seed.name} {outcome.mutant.mutation}: {outcome.stages}")
    return 1 if tally.crashes or tally.out_of_bounds or tally.hangs else 0


if __name__ == "__main__":
    raise SystemExit(main())
