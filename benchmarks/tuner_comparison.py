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
    python benchmarks/tuner_comparison.py --rules --model resnet18 [--budget 1000]
        [--workers 1] [--rounds 3] [--search-minutes 18] [--log-dir DIR] [--scratch-only]
        [--remeasure 4] [--timing single|averaged] [--kernel-sums]
        [--other-log LABEL=PATH ...] [--seed 0] [--transfer 2] [--cache flush]

With ``--searches`` on a task, both searches tune the same workload (the template's
``matmul`` / ``conv2d_nchwc`` and its ``auto.`` twin) for ``--budget`` trials, each
starting from its default point; printed: trials to 95% of the best either found and the
final best. On a model, each search gets ``--budget`` trials for the whole model (the
template search splits them evenly over the tasks, the auto search lets its task
scheduler spread them), then the model compiled with each log is timed against the
untuned one (median of ``--runs`` calls, alternating).

With ``--rules`` (issue #35's comparison, float, llvm): the template-free search from
scratch (``heterocc tune --search auto --schedule-rules none``: the hand schedule rules
off, random first points, no seeds from the hand schedules, the generic schedule as the
baseline) against the same search from the hand rules (``--search auto``: seeded, the
hand schedule as the baseline), ``--budget`` trials each for the whole model; then, in
alternating rounds in this process, the model under the hand rules, with the rules off
untuned, from scratch after the budget, from hand after the budget, and ONNX Runtime
(``--model`` resnet18 or mobilenet_v2: torchvision's export when torch is installed,
else ``heterocc.models``'). Printed: seconds per trial, the estimated latency of the
search at quarters of its budget (its trend), and each engine's median latency against
the hand rules and ORT. The searches time candidates by single calls (``--timing
single``: the fastest of 15, what a kernel costs quiet, on a shared machine too) and
measure each task's ``--remeasure`` best again after the search; ``--kernel-sums``
also sums each function's fastest single calls, hand schedule against the pick from
scratch (an estimate a loaded machine disturbs less than timing the whole model), and
lists the tasks whose picks lose most to the hand schedules, with the trials each got
(and the same for every ``--other-log``). ``--transfer N``: the searches' points of
similar tasks carried into each batch (``heterocc tune --transfer``; 0: each task
searched on its own, as before session 30).
"""

from __future__ import annotations

import argparse
import collections
import json
import math
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
    remeasure_best,
    tune_task,
)
from heterocc.tuning.auto import EvolutionaryTuner
from heterocc.tuning.cli import measure_hand_schedules
from heterocc.tuning.measure import CACHE_MODES, single_call_timing
from heterocc.tuning.pool import LocalPool
from heterocc.tuning.records import BASELINE, PAIRED, REMEASURED, read_records
from heterocc.tuning.scheduler import TRANSFERS_PER_BATCH, TaskScheduler

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


def _rules_model(name: str, folder: str) -> tuple[str, str]:
    """An ONNX file of ``name`` and where it came from: torchvision's export (as
    ``benchmarks/zoo.py`` makes it) when torch is installed, else ``heterocc.models``."""
    import onnx

    from heterocc import models

    path = os.path.join(folder, f"{name}.onnx")
    if os.path.exists(path):  # a resumed run: the model its logs were tuned on
        return path, f"{path}, kept from an earlier run"
    try:
        from zoo import export  # the zoo benchmark beside this script
        skipped = export(name, path)
    except ImportError as error:
        skipped = str(error)
    if skipped is None:
        return path, "torchvision export"
    onnx.save(getattr(models, name)(), path)
    return path, f"heterocc.models ({skipped})"


def _search_model(path: str, rules: str, budget: int, batch_size: int, workers: int,
                  log_path: str, minutes: float | None = None, remeasure: int = 4,
                  timing: str = "single", seed: int = 0,
                  transfer: int = TRANSFERS_PER_BATCH, cache: str = MeasureOptions.cache
                  ) -> dict:
    """The auto search on the model at ``path`` as ``heterocc tune --search auto
    --schedule-rules RULES`` runs it: ``budget`` trials for the whole model (or as many
    as ``minutes`` allow: the batch under way when they are up is the last), then each
    task's ``remeasure`` best measured again (single calls, see ``remeasure_best``; no
    trials of their own) and its best timed in turn with its baseline (hand or generic
    schedule). ``timing`` ``single``: each candidate timed by single calls, the fastest
    counting (``single_call_timing``: what it costs quiet, on a loaded machine too);
    ``averaged``: by samples averaging calls (``heterocc tune``'s default). ``seed``:
    the cost model's and the tuners' (``heterocc tune --seed``), the first random points
    with them; ``transfer``: points of similar tasks carried into each batch
    (``heterocc tune --transfer``); ``cache``: what a timed call finds in the caches
    (``heterocc tune --cache``)."""
    from heterocc.sdk.registry import get_target
    from heterocc.tuning.cli import first_configs
    from heterocc.tuning.extract import tuning_key
    from heterocc.tuning.measure import tuning_context
    from heterocc.tuning.pool import make_pool
    from heterocc.tuning.templates import tuning_of

    target = get_target("llvm", schedule_rules=rules)
    key = tuning_key(target)
    tuning = tuning_of(target)
    options = MeasureOptions(repeat=3, timeout_s=15, target=key, seed=seed, cache=cache)
    if timing == "single":
        options = single_call_timing(options)
    start = time.perf_counter()
    deadline = math.inf if minutes is None else start + 60 * minutes

    def progress(scheduler: TaskScheduler) -> None:
        if time.perf_counter() > deadline:  # out of time: this batch is the last
            scheduler.trials = min(scheduler.trials, scheduler.spent)

    with tuning_context(key):
        tasks = extract_tasks(path, target=target, search="auto")
        with make_pool(options, workers) as pool, RecordLog(log_path, target=key) as log:
            model = CostModel(seed=seed)
            tuners = [EvolutionaryTuner(t, seed=seed, model=model) for t in tasks]
            scheduler = TaskScheduler(
                tasks, tuners, pool, budget, log, batch_size=batch_size,
                first=first_configs(tasks, tuning),
                callback=progress, transfer=transfer)
            resumed = scheduler.spent
            scheduler.run()
            searched_s = time.perf_counter() - start
            for task in tasks if remeasure > 0 else ():
                remeasure_best(task, pool, log, count=remeasure)
            remeasured_s = time.perf_counter() - start - searched_s
            measure_hand_schedules(tasks, pool, log, baseline=tuning.baseline)
    curve, errors, log_s = _log_curve(log_path, tasks)
    return {"tasks": len(tasks), "trials": scheduler.spent, "search_s": searched_s,
            "resumed": resumed, "remeasured_s": remeasured_s,
            "total_s": time.perf_counter() - start, "curve": curve,
            "errors": errors, "log_s": log_s}


def _log_curve(log_path: str, tasks) -> tuple[list[tuple[int, int, float]], dict, float]:
    """The search's progress as its log holds it (a resumed run's earlier trials too):
    after each trial, the tasks with a working point and the sum of their best costs x
    weights; the failed trials by kind; seconds from its first to its last trial."""
    weights = {task.workload_key: task.weight for task in tasks}
    best: dict[str, float] = {}
    curve: list[tuple[int, int, float]] = []
    errors: dict[str, int] = {}
    times = []
    for record in read_records(log_path):
        if record.workload_key not in weights or record.tuner in (PAIRED, BASELINE,
                                                                  REMEASURED):
            continue
        times.append(record.timestamp)
        if record.ok:
            best[record.workload_key] = min(best.get(record.workload_key, math.inf),
                                            record.cost)
        else:
            errors[record.error] = errors.get(record.error, 0) + 1
        curve.append((len(curve) + 1, len(best),
                      sum(weights[key] * cost for key, cost in best.items())))
    return curve, errors, (max(times) - min(times)) if times else 0.0


def _trend(curve: list[tuple[int, int, float]], budget: int) -> str:
    """At each quarter of the budget: the tasks with a working point so far and the sum
    of their best costs x weights (the scheduler's estimated latency once every task
    has one)."""
    points = []
    for quarter in (1, 2, 3, 4):
        wanted = max(1, budget * quarter // 4)
        reached = [(tasks, latency) for spent, tasks, latency in curve if spent <= wanted]
        if reached:
            tasks, latency = reached[-1]
            points.append(f"{wanted}: {tasks} tasks, {latency * 1e3:.2f} ms")
    return "; ".join(points)


def _against_baselines(log_path: str) -> str:
    """Per searched task, its baseline's median over its best's median in the timings
    taken in turn (``paired`` and ``baseline`` records): above 1.03 the best is applied."""
    records = read_records(log_path)
    best: dict[str, list[float]] = {}
    baseline: dict[str, list[float]] = {}
    for record in records:
        if record.ok and record.tuner in (PAIRED, BASELINE):
            workload = json.loads(record.workload_key)[1:]  # the task's args
            into = best if record.tuner == PAIRED else baseline
            into.setdefault(json.dumps(workload), []).append(record.cost)
    ratios = sorted(statistics.median(baseline[k]) / statistics.median(v)
                    for k, v in best.items() if k in baseline)
    applied = sum(r > 1 / 0.97 for r in ratios)
    return (f"{applied} of {len(ratios)} searched tasks beat their baseline (baseline / "
            f"best: {', '.join(f'{r:.2f}' for r in ratios)})")


def _timed_rounds(engines: dict, rounds: int, block: int) -> dict[str, list[float]]:
    """Seconds of each engine's calls in alternating rounds: a warm-up call, then
    ``block`` timed calls (one where a call takes over a second: the generic schedules
    of a whole model)."""
    samples: dict[str, list[float]] = {name: [] for name in engines}
    for _ in range(rounds):
        for name, run in engines.items():
            time.sleep(0.2)
            begin = time.perf_counter()
            run()  # warm-up
            calls = 1 if time.perf_counter() - begin > 1.0 else block
            for _ in range(calls):
                begin = time.perf_counter()
                run()
                samples[name].append(time.perf_counter() - begin)
    return samples


def _profile_gaps(models: dict, feed: dict, rounds: int, shown: int = 12) -> None:
    """Per function, its time under the hand rules and tuned from scratch (profiled in
    alternating rounds), the functions with the largest gap first: where the search from
    scratch falls short."""
    names = list(models)
    for model in models.values():
        model.enable_profiling()
    for _ in range(rounds):
        for model in models.values():
            model.run(feed)
    per_call = {key: {e.node: (e.seconds / max(e.calls, 1), e.op)
                      for e in model.profile_entries()} for key, model in models.items()}
    hand, scratch = (per_call[key] for key in names)
    rows = sorted(((scratch.get(node, (math.nan,))[0] - seconds, node, seconds, op)
                   for node, (seconds, op) in hand.items()), reverse=True)
    total = {key: sum(seconds for seconds, _ in found.values())
             for key, found in per_call.items()}
    print(f"  per function ({rounds} profiled runs each; totals: "
          + ", ".join(f"{key} {seconds * 1e3:.2f} ms" for key, seconds in total.items())
          + "), largest gaps first:")
    for gap, _node, seconds, op in rows[:shown]:
        print(f"    {op[:44]:<44} {names[0]} {seconds * 1e3:8.3f} ms, {names[1]} "
              f"{(seconds + gap) * 1e3:8.3f} ms, gap {gap * 1e3:+8.3f} ms")


def _kernel_sums(path: str, logs: dict[str, str], rounds: int = 3, shown: int = 8) -> None:
    """Per function of the model at ``path`` (rules off), its hand schedule and the
    config each log (by label) makes compile apply (the best last timed beside its
    baseline, else the log's best), each built and timed by single calls (the fastest
    of 15, ``single_call_timing``) in alternating rounds in this process; printed: the
    sums over the functions x how often the model runs them. An estimate of the
    model's kernel time that a loaded machine disturbs far less than timing the model
    (for kernels under a millisecond or so: a longer single call is itself often
    preempted). Then the ``shown`` tasks whose picks lose most time against the hand
    schedule (weighted), each with its kind, input shape and the trials the search
    spent on it: where the search falls short."""
    from heterocc.sdk.registry import get_target
    from heterocc.targets.llvm.tuning import FUNCTION
    from heterocc.tuning.extract import tuning_key
    from heterocc.tuning.measure import measure_in_process, tuning_context
    from heterocc.tuning.records import best_records

    target = get_target("llvm", schedule_rules="none")
    key = tuning_key(target)
    options = single_call_timing(MeasureOptions(target=key, timeout_s=60))
    with tuning_context(key):
        tasks = extract_tasks(path, target=target, search="auto")
    picks, trials = {}, {}
    for label, log in logs.items():
        records = read_records(log)
        trials[label] = collections.Counter(r.workload_key for r in records
                                            if r.tuner == EvolutionaryTuner.name)
        picks[label] = {key: record.config_index for key, record in best_records(
            r for r in records if r.tuner != PAIRED).items()}
        picks[label].update({r.workload_key: r.config_index for r in records
                             if r.tuner == PAIRED})
    sums = dict.fromkeys(["hand rules", *logs], 0.0)
    rows = []
    for task in tasks:
        hand = Task(FUNCTION, task.args)
        candidates = {"hand rules": (hand, hand.default_config())}
        candidates.update({label: (task, task.space.get(picks[label][task.workload_key]))
                           for label in logs if task.workload_key in picks[label]})
        fastest = dict.fromkeys(candidates, math.inf)
        for _ in range(rounds):
            for label, (timed, config) in candidates.items():
                fastest[label] = min(fastest[label],
                                     measure_in_process(timed, config, options).cost)
        for label, seconds in fastest.items():
            sums[label] += task.weight * seconds
        rows.append((task, fastest))
    hand_sum = sums["hand rules"]
    print(f"  kernels, fastest single calls summed over {len(tasks)} functions x runs "
          f"({rounds} alternating rounds; load average {os.getloadavg()[0]:.2f}): "
          + ", ".join(f"{label} {seconds * 1e3:.2f} ms ({hand_sum / seconds:.2f}x the hand "
                      "rules' speed)" for label, seconds in sums.items()), flush=True)
    for label in logs:
        worst = sorted(rows, key=lambda row: row[0].weight * (row[1]["hand rules"]
                                                               - row[1].get(label, math.inf)))
        print(f"  {label}: the {shown} largest weighted losses to the hand schedules "
              "(task, runs per model, trials; hand and pick fastest calls):")
        for task, fastest in worst[:shown]:
            spent = trials[label][task.workload_key]
            hand, pick = fastest["hand rules"], fastest.get(label, math.inf)
            print(f"    {_task_label(task):<52} x{task.weight} {spent:4d} trials  hand "
                  f"{hand * 1e6:8.1f} us, pick {pick * 1e6:8.1f} us ({pick / hand:.2f}x)")


def _task_label(task: Task) -> str:
    """A function task by its kind and first input's shape (e.g. ``depthwise_conv2d_nchwc
    [1, 2, 112, 112, 16]``); another task by its template and arguments."""
    kind, graph = (task.args + (None, None))[:2]
    try:
        shape = json.loads(graph)["inputs"][0][0]
    except (TypeError, ValueError, KeyError, IndexError):
        return f"{task.template} {task.args}"[:52]
    return f"{kind} {shape}"


def compare_rules_on_model(name: str, budget: int, batch_size: int, workers: int,
                           rounds: int, block: int, minutes: float | None = None,
                           log_dir: str | None = None, from_hand: bool = True,
                           remeasure: int = 4, timing: str = "single",
                           kernel_sums: bool = False,
                           other_logs: dict[str, str] | None = None, seed: int = 0,
                           transfer: int = TRANSFERS_PER_BATCH,
                           cache: str = MeasureOptions.cache) -> None:
    """Hand rules vs the search from scratch vs the search from hand on one model.
    ``log_dir``: where the searches' logs are kept (resumed when there already: a
    killed run goes on where it stopped); ``from_hand`` False: the search from scratch
    only; ``remeasure``: finalists per task measured again after each search;
    ``timing``: how the searches time candidates (see ``_search_model``);
    ``kernel_sums``: also the functions' fastest single calls summed (``_kernel_sums``);
    ``other_logs``: more logs from scratch (by label), e.g. earlier searches, compiled
    and timed in the same rounds (the spread between searches of equal trials); ``seed``:
    the searches' (two runs of one code with different seeds: the spread of one
    search); ``transfer``: the searches' points of similar tasks per batch; ``cache``:
    their timings' cache mode."""
    import onnxruntime as ort

    import heterocc

    folder = log_dir or tempfile.mkdtemp()
    os.makedirs(folder, exist_ok=True)
    path, source = _rules_model(name, folder)
    print(f"{name}: {source}; budget {budget} trials per search, seed {seed}, {workers} measuring "
          f"worker(s), {timing} timing; logs in {folder}; load average "
          f"{os.getloadavg()[0]:.2f}", flush=True)
    logs = {}
    searches = (("from scratch", "none"), ("from hand", "hand"))[:2 if from_hand else 1]
    for search, rules in searches:
        logs[search] = os.path.join(folder, f"{name}_{rules}.jsonl")
        # equal trials: the search from hand gets what the one from scratch spent (all
        # of the budget unless --search-minutes stopped it), without a time limit
        found = _search_model(path, rules, budget, batch_size, workers, logs[search],
                              minutes if search == "from scratch" else None, remeasure,
                              timing, seed, transfer, cache)
        budget = found["trials"]
        ran = found["trials"] - found["resumed"]
        print(f"search {search} (--schedule-rules {rules}): {found['tasks']} tasks, "
              f"{found['trials']} trials ({found['resumed']} resumed from the log; its "
              f"trials span {found['log_s']:.0f} s, "
              f"{found['log_s'] / max(found['trials'], 1):.2f} s per trial), this run "
              f"{ran} in {found['search_s']:.0f} s, its {remeasure} best per task measured "
              f"again in {found['remeasured_s']:.0f} s, {found['total_s']:.0f} s with the "
              f"baselines timed; failed trials {found['errors'] or 'none'}; load average "
              f"{os.getloadavg()[0]:.2f}", flush=True)
        print(f"  by trials: {_trend(found['curve'], found['trials'])}", flush=True)
        print(f"  {_against_baselines(logs[search])}", flush=True)
    session_options = ort.SessionOptions()
    session_options.intra_op_num_threads = os.cpu_count() or 1
    session = ort.InferenceSession(path, session_options, providers=["CPUExecutionProvider"])
    feed = {i.name: np.random.default_rng(1).standard_normal(
        [d if isinstance(d, int) else 1 for d in i.shape]).astype(np.float32)
        for i in session.get_inputs()}
    (expected,) = session.run(None, feed)[:1]
    compiled = {
        "hand rules": heterocc.compile(path, target="llvm"),
        "rules off, untuned": heterocc.compile(path, target="llvm", schedule_rules="none"),
        "from scratch, tuned": heterocc.compile(
            path, target="llvm", schedule_rules="none", tuning_log=logs["from scratch"]),
    }
    for label, log in (other_logs or {}).items():
        compiled[f"from scratch, {label}"] = heterocc.compile(
            path, target="llvm", schedule_rules="none", tuning_log=log)
    if "from hand" in logs:
        compiled["from hand, tuned"] = heterocc.compile(path, target="llvm",
                                                        tuning_log=logs["from hand"])
    for key, model in compiled.items():
        error = float(np.max(np.abs(model.run(feed)[0] - expected)))
        print(f"  {key}: max |difference| from ORT {error:.2g}", flush=True)
    engines = {key: (lambda m=model: m.run(feed)) for key, model in compiled.items()}
    engines["ONNX Runtime"] = lambda: session.run(None, feed)
    samples = _timed_rounds(engines, rounds, block)
    medians = {key: statistics.median(times) for key, times in samples.items()}
    hand, theirs = medians["hand rules"], medians["ONNX Runtime"]
    fastest = {key: min(times) for key, times in samples.items()}
    print(f"{name} latency (median, alternating rounds; load average "
          f"{os.getloadavg()[0]:.2f}; fastest call beside it, the nearer to a quiet "
          "machine's figure on a loaded one):")
    print(f"  {'engine':<28} {'ms':>9} {'runs':>5} {'speed vs hand':>14} {'x ORT':>7} "
          f"{'fastest ms':>11} {'vs hand':>8}")
    for key, median in medians.items():
        print(f"  {key:<28} {median * 1e3:9.2f} {len(samples[key]):5d} "
              f"{hand / median:13.2f}x {median / theirs:6.2f}x "
              f"{fastest[key] * 1e3:11.2f} {fastest['hand rules'] / fastest[key]:7.2f}x")
    _profile_gaps({"hand": compiled["hand rules"], "scratch": compiled["from scratch, tuned"]},
                  feed, rounds * block)
    if kernel_sums:
        _kernel_sums(path, {"from scratch": logs["from scratch"], **(other_logs or {})})


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
    parser.add_argument("--rules", action="store_true",
                        help="with --model: hand rules vs search from scratch vs search "
                             "from hand, and ORT")
    parser.add_argument("--workers", type=int, default=1,
                        help="with --rules: measuring processes")
    parser.add_argument("--rounds", type=int, default=3,
                        help="with --rules: alternating timing rounds")
    parser.add_argument("--search-minutes", type=float, default=None,
                        help="with --rules: stop each search after this many minutes "
                             "(the trials done are printed)")
    parser.add_argument("--block", type=int, default=5,
                        help="with --rules: timed calls per engine and round")
    parser.add_argument("--log-dir",
                        help="with --rules: keep the searches' logs here (MODEL_none.jsonl, "
                             "MODEL_hand.jsonl) and resume them: run the command again after "
                             "a kill and it goes on where it stopped")
    parser.add_argument("--scratch-only", action="store_true",
                        help="with --rules: the search from scratch only (no search from "
                             "the hand rules)")
    parser.add_argument("--remeasure", type=int, default=4,
                        help="with --rules: each task's best configs measured again after "
                             "its search, as `heterocc tune --remeasure` does (0: off)")
    parser.add_argument("--timing", choices=("single", "averaged"), default="single",
                        help="with --rules: candidates timed by single calls, the fastest "
                             "counting (right on a loaded machine too), or by samples "
                             "averaging calls")
    parser.add_argument("--kernel-sums", action="store_true",
                        help="with --rules: also each function's hand schedule and the "
                             "search from scratch's pick timed by single calls, summed (an "
                             "estimate a loaded machine disturbs less than the model's "
                             "time), and the tasks whose picks lose most")
    parser.add_argument("--seed", type=int, default=0,
                        help="with --rules: the searches' seed (first points, cost model)")
    parser.add_argument("--transfer", type=int, default=TRANSFERS_PER_BATCH,
                        help="with --rules: per batch, best points of similar tasks "
                             "measured on the task (0: each task on its own)")
    parser.add_argument("--cache", choices=CACHE_MODES, default=MeasureOptions.cache,
                        help="with --rules: what the searches' timed calls find in the "
                             "caches (heterocc tune --cache)")
    parser.add_argument("--other-log", action="append", default=[], metavar="LABEL=PATH",
                        help="with --rules: another log from scratch (e.g. an earlier "
                             "search's) timed in the same rounds; repeatable")
    args = parser.parse_args()
    if args.rules:
        if not args.model:
            parser.error("--rules compares on a model: give --model resnet18 or mobilenet_v2")
        print(describe("llvm"))
        compare_rules_on_model(args.model, args.budget, args.batch_size, args.workers,
                               args.rounds, args.block, args.search_minutes, args.log_dir,
                               from_hand=not args.scratch_only, remeasure=args.remeasure,
                               timing=args.timing, kernel_sums=args.kernel_sums,
                               other_logs=dict(item.split("=", 1) for item in args.other_log),
                               seed=args.seed, transfer=args.transfer, cache=args.cache)
        return
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
