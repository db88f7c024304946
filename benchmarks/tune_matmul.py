"""Tuned fp32 matmul (default 1024^3): tune the matmul template with the XGBoost tuner,
then time the best config against NumPy and the hand-written default schedule in the
same process, and against the 2-core FMA peak measured on the reference machine.

The log is appended to and resumed (run again to tune further). Run:
    python benchmarks/tune_matmul.py [--size 1024] [--trials 48] [--log matmul.jsonl]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from alternating import alternating_medians  # beside this script

from heterocc import te
from heterocc.targets import llvm as hllvm
from heterocc.targets.llvm.schedules import matmul_function
from heterocc.tuning import (
    ApplyHistoryBest,
    MeasureOptions,
    Measurer,
    RecordLog,
    Task,
    XGBTuner,
    tune_task,
)

#: GFLOP/s of two cores each retiring two 16-lane fp32 FMAs per cycle, measured here
FMA_PEAK_GFLOPS = 495.0


def build_config(task: Task, config):
    schedule, tensors = task.definition.instantiate(task.args, config)
    return hllvm.build(te.lower(schedule, tensors, name="tuned"))["tuned"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--trials", type=int, default=48)
    parser.add_argument("--log", default="matmul_tuning.jsonl")
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    n = args.size
    task = Task("matmul", (n, n, n, "float32"))
    start = time.perf_counter()
    with Measurer(MeasureOptions(repeat=3, timeout_s=60)) as measurer, \
            RecordLog(args.log) as log:
        progress = tune_task(task, XGBTuner(task), measurer, args.trials, log=log)
    tuning_s = time.perf_counter() - start
    print(f"tuned {task.workload_key}: {progress.trials} trials ({progress.resumed} resumed), "
          f"{progress.errors} errors, {tuning_s:.0f} s this run "
          f"({tuning_s / max(progress.trials - progress.resumed, 1):.2f} s per trial)")
    config = ApplyHistoryBest(args.log).lookup(task.workload_key)
    print(f"best config: {config.to_json()}")
    tuned = build_config(task, config)
    default = hllvm.build(matmul_function(n, n, n, name="default"))["default"]
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
    print(f"host: {hllvm.host_description()}, runtime threads: {hllvm.num_threads()}")
    print(f"matmul {n}^3 fp32 (max abs error vs numpy {error:.2e})")
    print(f"tuned:            {tuned_g:8.1f} GFLOP/s")
    print(f"default schedule: {default_g:8.1f} GFLOP/s")
    print(f"numpy:            {numpy_g:8.1f} GFLOP/s")
    print(f"tuned/numpy {tuned_g / numpy_g:.2f}x, tuned/default {tuned_g / default_g:.2f}x, "
          f"tuned/peak({FMA_PEAK_GFLOPS:.0f}) {tuned_g / FMA_PEAK_GFLOPS:.2f} "
          "(goal >= 400 GFLOP/s)")


if __name__ == "__main__":
    main()
