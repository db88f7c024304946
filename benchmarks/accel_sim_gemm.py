"""Simulated multiply-accumulates per second on a large tiled GEMM, and the timing
model's cycles and GEMM-core utilization for the same GEMM serialized (one virtual
thread) and double-buffered (two).

    python benchmarks/accel_sim_gemm.py [--size 1024] [--preset 1x16x16] [--blas-threads N]

The peer is NumPy's own float64 matrix product of the same matrices, timed in the
same run; the simulator's result is checked against it.
"""

from __future__ import annotations

import argparse
import os
import time


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024, help="M = N = K of the GEMM")
    parser.add_argument("--preset", default="1x16x16", help="hardware config preset")
    parser.add_argument("--repeat", type=int, default=3, help="runs to take the best of")
    parser.add_argument(
        "--blas-threads", type=int, default=None,
        help="limit BLAS threads (set before NumPy loads; helps on a busy machine)",
    )
    return parser.parse_args()


def main() -> None:
    args = _parse()
    if args.blas_threads is not None:
        for variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[variable] = str(args.blas_threads)
    # NumPy is imported only now so that the thread limit above takes effect
    import numpy as np

    from heterocc.accel_sim.config import HardwareConfig
    from heterocc.accel_sim.reference_programs import default_gemm_tiling, tiled_gemm_program

    config = HardwareConfig.preset(args.preset)
    size = args.size
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (size, size)).astype(np.int8)
    w = rng.integers(-128, 128, (size, size)).astype(np.int8)

    peer_seconds, expected = float("inf"), None
    for _ in range(args.repeat):
        start = time.perf_counter()
        expected = a.astype(np.float64) @ w.astype(np.float64).T
        peer_seconds = min(peer_seconds, time.perf_counter() - start)

    grid = (size // config.batch, size // config.block_out, size // config.block_in)
    tiling = default_gemm_tiling(config, *grid, virtual_threads=2)
    timings = {}
    sim_seconds, macs = float("inf"), 0
    for threads in (1, 2):
        for _ in range(args.repeat if threads == 2 else 1):
            program = tiled_gemm_program(config, a, w, threads, tiling)
            start = time.perf_counter()
            report = program.run()
            elapsed = time.perf_counter() - start
            if threads == 2:
                sim_seconds = min(sim_seconds, elapsed)
        if not np.array_equal(program.read("C"), expected.astype(np.int64)):
            raise SystemExit(f"simulated GEMM with {threads} virtual thread(s) is wrong")
        timings[threads], macs = report.timing, report.macs

    print(f"config {config.name}, GEMM {size}x{size}x{size} int8, tiling {tiling}")
    print(f"instructions: {len(program.instructions)}, MACs: {macs}")
    print(
        f"simulator (check + timing + functional): {sim_seconds:.3f} s, "
        f"{macs / sim_seconds / 1e9:.2f} GMAC/s simulated"
    )
    print(
        f"peer NumPy float64 matmul: {peer_seconds:.3f} s, "
        f"{macs / peer_seconds / 1e9:.2f} GMAC/s; simulator / peer time: "
        f"{sim_seconds / peer_seconds:.1f}x"
    )
    for threads, label in ((1, "serialized"), (2, "double-buffered")):
        timing = timings[threads]
        print(
            f"{label:>16}: {timing.total_cycles} cycles, "
            f"GEMM-core utilization {timing.gemm_utilization:.1%}"
        )
    speedup = timings[1].total_cycles / timings[2].total_cycles
    print(f"speed-up from double buffering: {speedup:.2f}x")


if __name__ == "__main__":
    main()
