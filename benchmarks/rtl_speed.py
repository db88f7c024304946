"""Simulated clock cycles per second of the accelerator RTL on the full-system bench,
under Verilator and Icarus, on a few programs; every run is checked bit for bit
against the simulator.

    python benchmarks/rtl_speed.py [--simulators verilator icarus] [--preset 1x16x16]

The bench (hw/tb) simulates hc_top with its DRAM in Verilog and drives only the
AXI4-Lite control port from Python, so the figure is the HDL simulator's own speed
on the whole design: cycles from the start write to the ``irq`` line over the wall
time that took. The end-to-end time of each batch (simulator start, memory loads
and dumps, builds excluded) is printed too. The peer is the other simulator, in the
same run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def _machine() -> str:
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from machine import describe
    except ImportError:
        name = "unknown CPU"
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        return f"CPU: {name}"
    return describe()


def _programs(config, seed: int = 0):
    """(name, Program): a GEMM, a GEMM with the requantizing epilogue, a padded 3x3
    convolution (pad value -3) and random programs of the system bench."""
    from heterocc.accel_sim import Buffer
    from heterocc.accel_sim.reference_programs import (
        Requantization,
        padded_conv3x3_program,
        tiled_gemm_program,
    )

    sys.path.insert(0, str(REPO))
    from tests.hw.programs import random_program

    rng = np.random.default_rng(seed)
    bi, bo = config.block_in, config.block_out

    def int8(*shape):
        return rng.integers(-128, 128, shape)

    n = 8 * bo
    shift = rng.integers(12, 15, n)
    epilogue = Requantization(
        bias=rng.integers(-3000, 3000, n), limit=np.full(n, 1 << 20),
        multiplier=rng.integers(1, 5, n), rounding=1 << (shift - 1), shift=shift,
        zero_point=-3, qmin=-128, qmax=127,
    )
    programs = [
        ("gemm_64x256x256", tiled_gemm_program(config, int8(64, 16 * bi), int8(16 * bo, 16 * bi),
                                               output=Buffer.OUT)),
        ("gemm_requantized_64x256x128", tiled_gemm_program(
            config, int8(64, 16 * bi), int8(n, 16 * bi), output=Buffer.OUT, epilogue=epilogue)),
        ("conv3x3_16x16x32_pad-3", padded_conv3x3_program(
            config, int8(256, 2 * bi), int8(bo, 18 * bi), 16, 16, pad_value=-3)),
    ]
    programs += [(f"random_{s}", random_program(config, s).program) for s in (1000, 1001, 1002)]
    return programs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulators", nargs="+", default=["verilator", "icarus"])
    parser.add_argument("--preset", default="1x16x16", help="hardware config preset")
    parser.add_argument("--build-root", default=str(REPO / "hw" / "build"),
                        help="RTL build folder (builds are reused)")
    args = parser.parse_args()

    from heterocc.accel_sim import HardwareConfig
    from heterocc.accel_sim.rtl_device import BENCH_MEMORY, RtlRun, RtlSimulator

    print(_machine())
    config = HardwareConfig.preset(args.preset)
    programs = _programs(config)
    expected = []
    for _, program in programs:
        before = program.dram.copy()
        program.run()
        expected.append(program.dram.copy())
        program.dram[...] = before
    print(f"config {config.name}; bench memory: latency {BENCH_MEMORY.latency} cycles, one "
          f"{config.bus_width_bits}-bit beat per cycle")
    speeds = {}
    for simulator in args.simulators:
        rtl = RtlSimulator(config, simulator, args.build_root)
        began = time.perf_counter()
        rtl.build()
        built = time.perf_counter()
        results = rtl.run([RtlRun.from_program(program, max_cycles=2_000_000)
                           for _, program in programs])
        ended = time.perf_counter()
        print(f"\n{simulator}: build (incremental) {built - began:.1f} s, batch of "
              f"{len(programs)} runs {ended - built:.1f} s end to end")
        print(f"  {'program':30s} {'cycles':>9s} {'wall s':>8s} {'cycles/s':>10s}  DRAM")
        for (name, _), want, result in zip(programs, expected, results):
            agrees = result.done and np.array_equal(result.dram[: want.size], want)
            print(f"  {name:30s} {result.cycles:9d} {result.wall_seconds:8.3f} "
                  f"{result.simulated_cycles / result.wall_seconds:10,.0f}  "
                  f"{'agrees' if agrees else 'DIFFERS'}")
        cycles = sum(r.simulated_cycles for r in results)
        wall = sum(r.wall_seconds for r in results)
        speeds[simulator] = cycles / wall
        print(f"  {'all':30s} {cycles:9d} {wall:8.3f} {speeds[simulator]:10,.0f}")
    if len(speeds) > 1:
        first, *others = speeds
        for other in others:
            print(f"\n{first} / {other}: {speeds[first] / speeds[other]:.1f}x")


if __name__ == "__main__":
    main()
