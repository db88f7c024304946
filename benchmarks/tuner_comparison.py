"""Trials the XGBoost tuner needs to reach 95% of the best configuration found, against
random search: same task, same trial budget, median over seeds. With ``--searches``: the
template search (XGBoost over the hand-written template) against the template-free auto
search (sketches from the compute, evolutionary search) at equal budgets.

Every configuration is measured once per run of this script and its cost reused by all
tuners and seeds (tuners compare on identical numbers; machine noise cannot favour one).
Tasks: ``vta`` (a GEMM tiling on the accelerator, cycles of the timing model: exact,
so the default), or on the CPU, measured in an isolated worker (seconds per call, so
timing noise moves the 95% line a little): ``matmul`` (fp32 1024^3, the issue's task),
``matmul256`` (fp32 256^3) or ``conv2d`` (a ResNet 3x3 layer). Run:
    python benchmarks/tuner_comparison.py [--task vta|matmul|matmul256|conv2d]
        [--budget 64] [--seeds 3]
    python benchmarks/tuner_comparison.py --searches [--task matmul256|matmul|conv_layer]
        [--budget 64]
    python benchmarks/tuner_comparison.py --searches --model resnet18 [--budget 96]

With ``--searches`` on a task, both searches tune the same workload (the template's
``matmul`` / ``conv2d_nchwc`` and its ``auto.`` twin) for ``--budget`` trials, each
starting from its default point; printed: trials to 95% of the best either found and the
final best. On a model, each search gets ``--budget`` trials for the whole model (the
template search splits them evenly over the tasks, the auto search lets its task
scheduler spread them), then the model compiled with each log is timed against the
untuned one (median of ``--runs`` calls, alternating).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

from heterocc.targets.vta.tuning import vta_gemm_task
from heterocc.tuning import (
    CostModel,
    InProcessMeasurer,
    MeasureOptions,
    Measurer,
    RandomTuner,
    RecordLog,
    Task,
    XGBTuner,
    extract_tasks,
    tune_task,
)
from heterocc.tuning.auto import EvolutionaryTuner
from heterocc.tuning.cli import measure_hand_schedules
from heterocc.tuning.pool import LocalPool
from heterocc.tuning.scheduler import TaskScheduler

sys.path.insert(0, os.path.dirname(__file__))
from machine import describe  # noqa: E402

TASKS = {
    "matmul": Task("matmul", (1024, 1024, 1024, "float32")),
    "matmul256": Task("matmul", (256, 256, 256, "float32")),
    "conv2d": Task("conv2d_nchw", (1, 64, 16, 16, 64, 3, 3, 1, 1, "float32")),
    "vta": vta_gemm_task(64, 256, 128, "1x16x16", True),
    # a ResNet-18 3x3 layer (64 -> 64 channels, 56x56) as the llvm target compiles it:
    # blocked NCHW16c, weights packed (16x16 blocks)
    "conv_layer": Task("conv2d_nchwc", (1, 4, 56, 56, 16, 4, 16, 3, 3, 1, 1, 1, 1, 1, 1,
                                        1, 1, "float32")),
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


def compare_searches_on_task(task: Task, budget: int, batch_size: int) -> None:
    """Template (xgb) and auto search on one workload, ``budget`` trials each."""
    auto = Task("auto." + task.template, task.args)
    options = MeasureOptions(repeat=3, timeout_s=30)
    curves = {}
    with Measurer(options) as measurer:
        for name, current, tuner in (
                ("template", task, XGBTuner(task, seed=0, model=CostModel(seed=0))),
                ("auto", auto, EvolutionaryTuner(auto, seed=0, model=CostModel(seed=0)))):
            start = time.perf_counter()
            curve: list[float] = []
            tune_task(current, tuner, measurer, budget, batch_size=batch_size,
                      callback=lambda progress, c=curve: c.append(progress.best_cost),
                      first=[current.default_config()])
            curves[name] = (curve, time.perf_counter() - start)
    best = min(min(curve) for curve, _ in curves.values())
    print(f"task {task.workload_key}: budget {budget} trials per search; load average "
          f"(1 min) {os.getloadavg()[0]:.2f}")
    for name, (curve, seconds) in curves.items():
        reached = trials_to_reach(curve, best)
        shown = str(reached) if reached <= budget else f">{budget}"
        final = min(curve)
        print(f"{name:>8}: trials to {CLOSE_ENOUGH:.0%} of best {shown:>4}, final "
              f"{final * 1e3:.3f} ms ({task.flops / final / 1e9:.1f} GFLOP/s), default point "
              f"{curve[0] * 1e3:.3f} ms, {seconds:.0f} s")


def _time_model(compiled, inputs, runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        compiled.run(inputs)
        samples.append(time.perf_counter() - start)
    return samples


def compare_searches_on_model(name: str, budget: int, batch_size: int, runs: int) -> None:
    """Template vs auto search on a whole model at one trial budget, then end to end."""
    import heterocc
    from heterocc import models

    model = getattr(models, name)()
    folder = tempfile.mkdtemp()
    logs = {}
    options = MeasureOptions(repeat=2, timeout_s=30)
    for search in ("template", "auto"):
        tasks = extract_tasks(model, search=search)
        path = logs[search] = os.path.join(folder, f"{search}.jsonl")
        start = time.perf_counter()
        model_ = CostModel(seed=0)
        with LocalPool(options) as pool, RecordLog(path) as log:
            if search == "auto":
                tuners = [EvolutionaryTuner(t, seed=0, model=model_) for t in tasks]
                TaskScheduler(tasks, tuners, pool, budget, log, batch_size=batch_size,
                              first={t.workload_key: t.definition.first_configs(t.args)
                                     for t in tasks}).run()
                # as `tune --search auto`: each function's hand schedule timed beside its
                # best, so compile applies an auto record only where it won
                measure_hand_schedules(tasks, pool, log)
            else:
                per_task = max(1, budget // len(tasks))
                for task in tasks:
                    tune_task(task, XGBTuner(task, seed=0, model=model_), pool, per_task,
                              log=log, batch_size=batch_size, first=[task.default_config()])
        print(f"{search:>8}: {len(tasks)} tasks, {budget} trials, "
              f"{time.perf_counter() - start:.0f} s of tuning")
    rng = np.random.default_rng(0)
    untuned = heterocc.compile(model, target="llvm")
    shapes = [tuple(v.type.tensor_type.shape.dim) for v in model.graph.input]
    inputs = [rng.standard_normal([d.dim_value for d in dims]).astype(np.float32)
              for dims in shapes][:1]
    compiled = {"untuned": untuned, **{s: heterocc.compile(model, target="llvm",
                                                           tuning_log=logs[s])
                                       for s in logs}}
    samples: dict[str, list[float]] = {k: [] for k in compiled}
    for _ in range(3):  # alternate, so that a change in load hits all alike
        for key, c in compiled.items():
            samples[key] += _time_model(c, inputs, runs)
    base = statistics.median(samples["untuned"])
    print(f"{name} end to end (median of {3 * runs} runs, load average "
          f"{os.getloadavg()[0]:.2f}):")
    for key, seconds in samples.items():
        median = statistics.median(seconds)
        print(f"{key:>8}: {median * 1e3:.2f} ms ({base / median:.2f}x untuned)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(TASKS), default="vta")
    parser.add_argument("--budget", type=int, default=64)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--searches", action="store_true",
                        help="template (xgb) vs auto search instead of xgb vs random")
    parser.add_argument("--model", help="with --searches: a model of heterocc.models "
                                        "(resnet18) tuned and timed end to end")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    if args.searches:
        print(describe("llvm"))
        if args.model:
            compare_searches_on_model(args.model, args.budget, args.batch_size, args.runs)
        else:
            compare_searches_on_task(TASKS[args.task], args.budget, args.batch_size)
        return
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
