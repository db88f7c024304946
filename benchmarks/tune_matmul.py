"""Tuned fp32 matmul (default 1024^3): tune the matmul template with the XGBoost tuner,
then time the best config against NumPy and the hand-written default schedule in the
same process, and against the 2-core FMA peak measured on the reference machine.

Tuning measures the default config first (so the log's best is never one slower than
the default as this run measured it) and ends by measuring the log's ``--finalists``
fastest configs again (a config is ranked by the median of its records, so a lucky
timing on a shared machine does not pick the tuned one). The tuned kernel is built the
way compilation applies a log (``ApplyHistoryBest``: the packed panel width and the
schedule both from the log's best). The log is appended to and resumed. Run:
    python benchmarks/tune_matmul.py [--size 1024] [--trials 64] [--log matmul.jsonl]
"""

from __future__ import annotations

import argparse
import functools
import os
import time

import numpy as np
from alternating import alternating_medians  # beside this script

from heterocc import te
from heterocc.targets import llvm as hllvm
from heterocc.targets.llvm.cpu import active_cpu
from heterocc.targets.llvm.schedules import matmul, matmul_function
from heterocc.targets.llvm.tuning import matmul_panel, schedule_matmul_tuned
from heterocc.tuning import (
    ApplyHistoryBest,
    MeasureOptions,
    Measurer,
    RecordLog,
    Task,
    XGBTuner,
    remeasure_best,
    tune_task,
)

#: GFLOP/s of two cores each retiring two 16-lane fp32 FMAs per cycle, measured here
FMA_PEAK_GFLOPS = 495.0


def build_applied(n: int, log: str):
    """The n^3 matmul compiled under the log, as ``heterocc.compile(tuning_log=...)``
    schedules one."""
    A = te.placeholder((n, n), "float32", "A")
    B = te.placeholder((n, n), "float32", "B")
    applied = ApplyHistoryBest(log)
    C = matmul(A, B, panel_of=functools.partial(matmul_panel, applied), cpu=active_cpu())
    schedule = te.create_schedule(C)
    if not schedule_matmul_tuned(applied, schedule, C):
        raise SystemExit(f"{log} has no applicable matmul config for {n}^3")
    return hllvm.build(te.lower(schedule, [A, B, C], name="tuned"))["tuned"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--log", default="matmul_tuning.jsonl")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--finalists", type=int, default=4)
    args = parser.parse_args()
    n = args.size
    task = Task("matmul", (n, n, n, "float32"))
    start = time.perf_counter()
    with Measurer(MeasureOptions(repeat=5, timeout_s=60)) as measurer, \
            RecordLog(args.log) as log:
        progress = tune_task(task, XGBTuner(task), measurer, args.trials, log=log,
                             first=[task.default_config()])
        remeasure_best(task, measurer, log, count=args.finalists, rounds=2,
                       include=[task.default_config()])
    tuning_s = time.perf_counter() - start
    new_trials = progress.trials - progress.resumed
    per_trial = f", {tuning_s / new_trials:.2f} s per new trial" if new_trials else ""
    print(f"tuned {task.workload_key}: {progress.trials} trials ({progress.resumed} resumed), "
          f"{progress.errors} errors; tuning time for this task {tuning_s:.1f} s this run "
          f"(re-measuring the {args.finalists} finalists included{per_trial})")
    config = ApplyHistoryBest(args.log).lookup(task.workload_key)
    is_default = config.index == task.default_config().index
    print(f"tuned config: {config.to_json()}{' (the default)' if is_default else ''}")

    tuned = build_applied(n, args.log)
    default = hllvm.build(matmul_function(n, n, n, name="default", cpu=active_cpu()))["default"]
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)
    tuned(a, b, c)
    error = float(np.abs(c - a @ b).max())
    flops = 2.0 * n ** 3
    times = alternating_medians([lambda: tuned(a, b, c), lambda: default(a, b, c),
                                 lambda: np.matmul(a, b, out=c)], args.repeat)
    tuned_g, default_g, numpy_g = (flops / t / 1e9 for t in times)
    print(f"host: {hllvm.host_description()}, runtime threads: {hllvm.num_threads()}, "
          f"load average (1 min) {os.getloadavg()[0]:.2f}")
    print(f"matmul {n}^3 fp32 (max abs error vs numpy {error:.2e}); medians of {args.repeat} "
          "runs in alternating blocks")
    print(f"tuned:            {tuned_g:8.1f} GFLOP/s")
    print(f"default schedule: {default_g:8.1f} GFLOP/s")
    print(f"numpy:            {numpy_g:8.1f} GFLOP/s")
    print(f"tuned/numpy {tuned_g / numpy_g:.2f}x, tuned/default {tuned_g / default_g:.2f}x, "
          f"tuned/peak({FMA_PEAK_GFLOPS:.0f}) {tuned_g / FMA_PEAK_GFLOPS:.2f} "
          "(goal >= 400 GFLOP/s)")


if __name__ == "__main__":
    main()
