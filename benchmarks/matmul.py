"""fp32 matmul (default 1024^3): heterocc's default CPU schedule vs NumPy, same process.

Prints GFLOP/s of both (median of repeated runs) and their ratio. Run:
    python benchmarks/matmul.py [--size 1024] [--repeat 10]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from heterocc import te
from heterocc.targets import llvm as hllvm

#: register tile of the micro-kernel: rows x (vector width) columns of C kept in registers.
TILE_ROWS = 8
TILE_COLS = 32


def matmul_schedule(size_m: int, size_n: int, size_k: int):
    """The matmul with B packed into column panels, and a register-tiled, vectorized,
    parallel schedule; returns (schedule, [A, B, C])."""
    A = te.placeholder((size_m, size_k), "float32", "A")
    B = te.placeholder((size_k, size_n), "float32", "B")
    panels = -(-size_n // TILE_COLS)
    packed = te.compute(
        (panels, size_k, TILE_COLS),
        lambda p, k, c: te.if_then_else(p * TILE_COLS + c < size_n,
                                        B[k, te.minimum(p * TILE_COLS + c, size_n - 1)], 0.0),
        name="B_packed")
    k = te.reduce_axis(size_k, "k")
    C = te.compute((size_m, size_n), lambda i, j: te.sum(
        A[i, k] * packed[j // TILE_COLS, k, j % TILE_COLS], axis=k), name="C")
    s = te.create_schedule(C)
    pp, pk, pc = s[packed].op.axis
    s[packed].parallel(pp)
    s[packed].vectorize(pc)
    local = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, jo, ii, ji = s[C].tile(i, j, TILE_ROWS, TILE_COLS)
    s[C].reorder(jo, io, ii, ji)
    s[C].parallel(jo)
    s[C].unroll(ii)
    s[C].vectorize(ji)
    s[local].compute_at(s[C], io)
    li, lj = s[local].op.axis
    (lk,) = s[local].op.reduce_axis
    s[local].reorder(lk, li, lj)
    s[local].unroll(li)
    s[local].vectorize(lj)
    return s, [A, B, C]


def median_seconds(run, repeat: int) -> float:
    run()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    n = args.size
    schedule, tensors = matmul_schedule(n, n, n)
    module = hllvm.build(te.lower(schedule, tensors, name="matmul"))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)
    module["matmul"](a, b, c)
    error = float(np.abs(c - a @ b).max())
    flops = 2.0 * n ** 3
    ours = flops / median_seconds(lambda: module["matmul"](a, b, c), args.repeat) / 1e9
    theirs = flops / median_seconds(lambda: np.matmul(a, b, out=c), args.repeat) / 1e9
    print(f"host: {hllvm.host_description()}, runtime threads: {hllvm.num_threads()}")
    print(f"matmul {n}x{n}x{n} fp32 (max abs error vs numpy {error:.2e})")
    print(f"heterocc: {ours:8.1f} GFLOP/s")
    print(f"numpy:    {theirs:8.1f} GFLOP/s")
    print(f"ratio heterocc/numpy: {ours / theirs:.2f}x")


if __name__ == "__main__":
    main()
