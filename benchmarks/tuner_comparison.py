"""Trials the XGBoost tuner needs to reach 95% of the best configuration found, against
random search: same task, same trial budget, median over seeds.

Every configuration is measured once per run of this script and its cost reused by all
tuners and seeds (tuners compare on identical numbers; machine noise cannot favour one).
Tasks: ``vta`` (a GEMM tiling on the accelerator, cycles of the timing model: exact,
so the default), or on the CPU, measured in an isolated worker (seconds per call, so
timing noise moves the 95% line a little): ``matmul`` (fp32 1024^3, the issue's task),
``matmul256`` (fp32 256^3) or ``conv2d`` (a ResNet 3x3 layer). Run:
    python benchmarks/tuner_comparison.py [--task vta|matmul|matmul256|conv2d]
        [--budget 64] [--seeds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from heterocc.targets.vta.tuning import vta_gemm_task
from heterocc.tuning import (
    CostModel,
    InProcessMeasurer,
    MeasureOptions,
    Measurer,
    RandomTuner,
    Task,
    XGBTuner,
    tune_task,
)

TASKS = {
    "matmul": Task("matmul", (1024, 1024, 1024, "float32")),
    "matmul256": Task("matmul", (256, 256, 256, "float32")),
    "conv2d": Task("conv2d_nchw", (1, 64, 16, 16, 64, 3, 3, 1, 1, "float32")),
    "vta": vta_gemm_task(64, 256, 128, "1x16x16", True),
}
#: a configuration within this fraction of the best one's speed counts as reaching it
CLOSE_ENOUGH = 0.95


class MemoizedMeasurer:
    """Measures each config of a task once; later requests replay the result."""

    def __init__(self, measurer):
        self.measurer, self.results, self.seconds = measurer, {}, 0.0

    def measure_one(self, task, config):
        if config.index not in self.results:
            start = time.perf_counter()
            self.results[config.index] = self.measurer.measure_one(task, config)
            self.seconds += time.perf_counter() - start
        return self.results[config.index]


def best_so_far_curve(task, tuner, measurer, budget: int, batch_size: int) -> list[float]:
    curve: list[float] = []
    tune_task(task, tuner, measurer, budget, batch_size=batch_size,
              callback=lambda progress: curve.append(progress.best_cost))
    return curve


def trials_to_reach(curve: list[float], target_cost: float) -> int:
    """First trial (1-based) whose best-so-far is within CLOSE_ENOUGH of the target;
    one past the budget when it never is."""
    for trial, cost in enumerate(curve, 1):
        if target_cost / cost >= CLOSE_ENOUGH:
            return trial
    return len(curve) + 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(TASKS), default="vta")
    parser.add_argument("--budget", type=int, default=64)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    task = TASKS[args.task]
    options = MeasureOptions(repeat=3, timeout_s=30)
    inner = InProcessMeasurer(options) if task.target == "vta" else Measurer(options)
    measurer = MemoizedMeasurer(inner)
    features: dict = {}
    curves: dict[str, list[list[float]]] = {"xgb": [], "random": []}
    tuning_s: dict[str, float] = {"xgb": 0.0, "random": 0.0}
    try:
        for seed in range(args.seeds):
            for name in curves:
                tuner = (XGBTuner(task, seed=seed, model=CostModel(seed=seed),
                                  feature_cache=features)
                         if name == "xgb" else RandomTuner(task, seed=seed))
                start = time.perf_counter()
                curves[name].append(best_so_far_curve(task, tuner, measurer, args.budget,
                                                      args.batch_size))
                tuning_s[name] += time.perf_counter() - start
        default = measurer.measure_one(task, task.default_config()).cost
    finally:
        inner.close()
    best = min(min(curve) for runs in curves.values() for curve in runs)
    best_config = min(measurer.results, key=lambda index: measurer.results[index].cost)
    measured = len(measurer.results)
    print(f"task {task.workload_key}: space {task.space.size} configs, budget {args.budget} "
          f"trials, {args.seeds} seeds, {measured} distinct configs measured "
          f"({measurer.seconds:.0f} s, {measurer.seconds / measured:.2f} s per config); "
          f"load average (1 min) now {os.getloadavg()[0]:.2f}")
    if task.target == "vta":
        print(f"best found: {best:.6g} cycles; default schedule: {default:.6g} cycles")
    else:
        print(f"best found: {best:.6g} s ({task.flops / best / 1e9:.1f} GFLOP/s); default "
              f"schedule: {default:.6g} s ({task.flops / default / 1e9:.1f} GFLOP/s)")
    print(f"best config: {task.space.get(best_config).to_json()}")
    medians = {}
    for name, runs in curves.items():
        reached = [trials_to_reach(curve, best) for curve in runs]
        medians[name] = statistics.median(reached)
        shown = [str(r) if r <= args.budget else f">{args.budget}" for r in reached]
        print(f"{name:>6}: trials to {CLOSE_ENOUGH:.0%} of best per seed [{', '.join(shown)}], "
              f"median {medians[name]}, wall time {tuning_s[name]:.0f} s over {args.seeds} runs")
    # a tuner that never got there is counted at budget + 1, so the ratio is then a bound
    bound = "<= " if medians["random"] > args.budget else ""
    print(f"ratio xgb/random (median trials): {bound}{medians['xgb'] / medians['random']:.2f}x "
          "(goal <= 0.5x)")


if __name__ == "__main__":
    main()
