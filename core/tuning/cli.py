"""``heterocc tune MODEL --target llvm --trials N --log F``: extract the model's tasks and
tune them, appending to the log (a killed run is resumed by running it again).

``--search template`` (the default) tunes each task's hand-written template for
``--trials`` measurements, with a progress line per task: a bar, trials, errors and the
best so far. ``--search auto`` searches sketches derived from the computes
(:mod:`.auto`), ``--trials`` being the budget of the whole model, spread over its tasks
by the task scheduler (:mod:`.scheduler`), with a live table (per task: trials, best
GFLOP/s, share of the estimated latency; the estimated end-to-end latency) and a final
summary. Measurements run on ``--workers`` local processes or on a Ray cluster
(``--ray``), see :mod:`.pool`."""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

from ..errors import InputError
from ..runtime.inputs import parse_shapes
from .auto import AUTO_PREFIX, EvolutionaryTuner, is_auto
from .extract import extract_tasks, tuning_key, tuning_target
from .measure import CACHE_MODES, MeasureOptions, single_call_timing, tuning_context
from .pool import make_pool
from .records import BASELINE, PAIRED, MeasureRecord, RecordLog, config_costs
from .scheduler import TRANSFERS_PER_BATCH, TaskScheduler
from .task import SCHEDULE_RULES, SEARCHES, Task, with_schedule_rules
from .templates import SECONDS, TargetTuning, tuning_of
from .tuners import TUNERS, CostModel, TuneProgress, make_tuner, remeasure_best, tune_task

BAR_WIDTH = 24
#: how ``heterocc tune`` times a candidate (``--timing``)
TIMINGS = ("averaged", "single")


def add_tune_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``tune`` command to an argparse subparsers object; returns its parser
    (its ``func`` default runs the command)."""
    p = subparsers.add_parser("tune", help="tune the schedules of a model's tasks by measurement")
    p.add_argument("model", help="ONNX model")
    p.add_argument("--target", default="llvm",
                   help="a target with tuning templates (llvm, vta), with its options: "
                        "'llvm -mattr=-avx512f' tunes the AVX2 code (timed on this host, "
                        "which must run it)")
    p.add_argument("--schedule-rules", choices=SCHEDULE_RULES, default="hand",
                   help="none: the target's hand schedule rules off (-schedule-rules=none "
                        "in its target string): the auto search starts from scratch, from "
                        "random points, and its records compete with the generic schedules")
    p.add_argument("--search", default="template", choices=SEARCHES,
                   help="template: the targets' hand-written templates, --trials per task; "
                        "auto: sketches derived from the computes, --trials for the whole "
                        "model, spread by the task scheduler")
    p.add_argument("--trials", type=int, default=64,
                   help="measurements per task (template) or for the model (auto), "
                        "resumed ones included")
    p.add_argument("--log", required=True, help="JSON-lines tuning log (appended, resumed)")
    p.add_argument("--tuner", default="xgb", choices=sorted(TUNERS))
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--timeout", type=float, default=20.0, help="seconds per candidate")
    p.add_argument("--repeat", type=int, default=3, help="timings per candidate")
    p.add_argument("--timing", choices=TIMINGS, default="averaged",
                   help="averaged: each timing averages enough calls to last a few "
                        "milliseconds; single: each candidate timed by single calls, the "
                        "fastest counting (what it costs quiet: on a loaded machine a "
                        "sample of many calls almost always includes a preempted one)")
    p.add_argument("--remeasure", type=int, default=4,
                   help="measure this many best configs and the default again per task "
                        "(twice each; 0: off), so a lucky first timing does not win; "
                        "modelled costs such as an accelerator's cycles are not measured "
                        "again")
    p.add_argument("--early-stop", type=int, default=None,
                   help="auto: stop a task after this many trials without improvement")
    p.add_argument("--transfer", type=int, default=TRANSFERS_PER_BATCH, metavar="N",
                   help="--search auto: per batch, up to N best points of similar tasks "
                        "(the model's other 1x1 convolutions, say) measured on this one "
                        "(0: each task searched on its own)")
    p.add_argument("--workers", type=int, default=1,
                   help="local measuring processes (builds in parallel, one timing at a time)")
    p.add_argument("--ray", metavar="ADDRESS",
                   help="measure as Ray tasks: a cluster address, 'auto' (the cluster "
                        "`ray start --head` started) or 'local' (needs heterocc[distributed])")
    p.add_argument("--cache", choices=CACHE_MODES, default=MeasureOptions.cache,
                   help="what a timed CPU call finds in the caches: hot (its operands, "
                        "left by the call before), flush (its weights evicted from every "
                        "cache level and every core's L2 before each call), rotate (its "
                        "weights and output buffer evicted from the L2, its input as the "
                        "kernel before left it)")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--preset", help="accelerator hardware preset (vta; default 1x16x16)")
    p.add_argument("--shape", action="append", help="NAME=D0,D1,... for symbolic dims")
    p.set_defaults(func=run_tune)
    return p


def format_cost(cost: float, unit: str) -> str:
    """A cost in a template's ``cost_unit``: milliseconds for seconds, else as counted."""
    if math.isinf(cost):
        return "-"
    return f"{cost * 1e3:.3f} ms" if unit == SECONDS else f"{cost:.0f} {unit}"


def progress_line(progress: TuneProgress, number: int, count: int, elapsed_s: float) -> str:
    """``[task 2/5] matmul [#####-----] 12/64 trials, 1 errors, best 0.12 ms (3.4 s)``"""
    done = min(progress.trials / max(progress.total, 1), 1.0)
    filled = int(round(done * BAR_WIDTH))
    bar = "#" * filled + "-" * (BAR_WIDTH - filled)
    unit = progress.task.definition.cost_unit
    best = format_cost(progress.best_cost, unit)
    flops = progress.task.flops
    rate = "" if math.isinf(progress.best_cost) or unit != SECONDS else \
        f", {flops / progress.best_cost / 1e9:.1f} GFLOP/s"
    return (f"[task {number}/{count}] {progress.task.template} [{bar}] "
            f"{progress.trials}/{progress.total} trials, {progress.errors} errors, "
            f"best {best}{rate} ({elapsed_s:.1f} s)")


@dataclass
class ProgressPrinter:
    """Shows the progress of task ``number`` of ``count``: one line redrawn in place on a
    terminal, a line per batch otherwise."""

    stream: TextIO
    number: int
    count: int
    batch_size: int
    start: float = field(default_factory=time.perf_counter)
    shown_trials: int = -1

    def __call__(self, progress: TuneProgress, final: bool = False) -> None:
        line = progress_line(progress, self.number, self.count,
                             time.perf_counter() - self.start)
        if self.stream.isatty():
            self.stream.write("\r" + line + ("\n" if final else ""))
        elif progress.trials != self.shown_trials and (
                final or progress.trials % self.batch_size == 0):
            self.stream.write(line + "\n")
            self.shown_trials = progress.trials
        self.stream.flush()


def run_tune(args, stream: TextIO | None = None) -> int:
    """Run ``heterocc tune`` with parsed ``args``; progress goes to ``stream`` (default:
    the standard error stream at the time of the call)."""
    stream = sys.stderr if stream is None else stream
    if getattr(args, "quiet", False):
        stream = _Discard()
    search = getattr(args, "search", "template")
    rules = getattr(args, "schedule_rules", "hand")
    if rules != "hand" and search != "auto":
        raise InputError(f"--schedule-rules {rules}: the hand-written templates are the hand "
                         "rules' own tiles, which a model compiled without them never reads; "
                         "tune it with --search auto")
    target = tuning_target(with_schedule_rules(args.target, rules), args.preset)
    key = tuning_key(target)
    options = MeasureOptions(timeout_s=args.timeout, repeat=args.repeat, seed=args.seed,
                             target=key, cache=getattr(args, "cache", MeasureOptions.cache))
    if getattr(args, "timing", "averaged") == "single":
        options = single_call_timing(options)
    # the spaces, records and candidates all belong to the tuned target's hardware
    with tuning_context(key):
        tasks = extract_tasks(args.model, target=target, shapes=parse_shapes(args.shape),
                              search=search)
        print(f"{len(tasks)} tasks in {args.model} for {key or args.target} ({search} search)",
              file=stream)
        _tune(args, search, tasks, options, stream, tuning_of(target))
    print(f"log: {args.log}", file=stream)
    return 0


def _tune(args, search: str, tasks: list[Task], options: MeasureOptions,
          stream: TextIO, tuning: TargetTuning) -> None:
    model = CostModel(seed=args.seed)
    with make_pool(options, getattr(args, "workers", 1), getattr(args, "ray", None)) as pool, \
            RecordLog(args.log, target=options.target) as log:
        if search == "auto":
            _run_auto(args, tasks, pool, log, model, stream, tuning)
        else:
            _run_templates(args, tasks, pool, log, model, stream)


def _run_templates(args, tasks, pool, log: RecordLog, model: CostModel, stream) -> None:
    for number, task in enumerate(tasks, 1):
        show = ProgressPrinter(stream, number, len(tasks), args.batch_size)
        tuner = make_tuner(args.tuner, task, seed=args.seed, model=model)
        default = task.default_config()
        progress = tune_task(task, tuner, pool, args.trials, log=log,
                             batch_size=args.batch_size, callback=show, first=[default])
        show(progress, final=True)
        if args.remeasure > 0:
            remeasure_best(task, pool, log, count=args.remeasure, include=[default])
        print(f"  {task.workload_key}: {_summary(task, log)} "
              f"({time.perf_counter() - show.start:.1f} s)", file=stream)


def _run_auto(args, tasks, pool, log: RecordLog, model: CostModel, stream,
              tuning: TargetTuning) -> None:
    start = time.perf_counter()
    table = LiveTable(stream)
    tuners = [EvolutionaryTuner(task, seed=args.seed, model=model) for task in tasks]
    scheduler = TaskScheduler(
        tasks, tuners, pool, args.trials, log, batch_size=args.batch_size,
        early_stop=args.early_stop, first=first_configs(tasks, tuning), callback=table,
        transfer=args.transfer)
    scheduler.run()
    for task in tasks:  # each task's best and its hand schedule timed close together
        if args.remeasure > 0:
            remeasure_best(task, pool, log, count=args.remeasure)
        # remeasuring off: each timed once (from scratch, the generic baselines are
        # many times slower than the search's best and take seconds each)
        measure_hand_schedules([task], pool, log, rounds=max(1, min(3, args.remeasure)),
                               baseline=tuning.baseline)
    table(scheduler, final=True)
    print(f"tuned in {time.perf_counter() - start:.1f} s", file=stream)
    for task in tasks:
        print(f"  {task.workload_key}: {_summary(task, log)}", file=stream)


def first_configs(tasks, tuning: TargetTuning) -> dict[str, list]:
    """What the auto search measures first per task (by workload key): each template's
    default and seeds, or nothing where the target's search starts from scratch
    (:attr:`.templates.TargetTuning.seeded` False: random points only)."""
    if not tuning.seeded:
        return {}
    return {task.workload_key: task.definition.first_configs(task.args) for task in tasks}


def measure_hand_schedules(tasks, pool, log: RecordLog, rounds: int = 3,
                           baseline=None) -> None:
    """Each auto task's hand-written schedule (its template's default config), timed
    ``rounds`` times on the same harness and logged under the template's key, each time
    right after the search's best so far is timed again (a change in load hits both
    alike; the records are tagged :data:`.records.PAIRED` and
    :data:`.records.BASELINE`): compile applies the faster of the
    two searches' records per workload, so it keeps the hand schedule wherever the
    search found nothing faster. ``baseline(task)``: the task compile falls back to
    (:attr:`.templates.TargetTuning.baseline`; None: the template of the auto task's
    name without ``auto.``)."""
    for task in tasks:
        if not is_auto(task.template):
            continue
        try:
            hand = (baseline(task) if baseline is not None
                    else Task(task.template[len(AUTO_PREFIX):], task.args))
            if hand is None:
                continue
            default = hand.default_config()
        except InputError:  # no template for this workload: nothing to compare with
            continue
        costs = config_costs(log.records()).get(task.workload_key, {})
        best = task.space.get(min(costs, key=costs.get)) if costs else None
        for _ in range(rounds):
            if best is not None:
                result = pool.measure_one(task, best)
                log.append(MeasureRecord(task.workload_key, best.to_json(), best.index,
                                         result.costs, result.error, result.message,
                                         PAIRED))
            result = pool.measure_one(hand, default)
            log.append(MeasureRecord(hand.workload_key, default.to_json(), default.index,
                                     result.costs, result.error, result.message, BASELINE))


class _Discard:
    """A stream that drops everything (``--quiet``)."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        """Nothing to flush."""

    def isatty(self) -> bool:
        return False


def table_lines(scheduler: TaskScheduler) -> list[str]:
    """The progress table of an auto search: per task its trials, errors, best
    GFLOP/s and share of the estimated latency; then the total."""
    latency = scheduler.estimated_latency()
    rows = []
    for state in scheduler.states:
        task, progress = state.task, state.progress
        best = progress.best_cost
        unit = task.definition.cost_unit
        rate = f"{task.flops / best / 1e9:9.2f}" if math.isfinite(best) and unit == SECONDS \
            else f"{'-':>9}"
        share = f"{100 * state.weighted_cost / latency:6.1f}%" \
            if math.isfinite(latency) and latency > 0 else f"{'-':>7}"
        name = f"{task.template} {list(task.args)}"
        name = name if len(name) <= 44 else name[:41] + "..."
        flag = " done" if state.done else ""
        rows.append(f"{name:<44} {progress.trials:>6} {progress.errors:>6} {rate} "
                    f"{share} {task.weight:>3}x{flag}")
    total = format_cost(latency, scheduler.states[0].task.definition.cost_unit) \
        if scheduler.states else "-"
    return [f"{'task':<44} {'trials':>6} {'errors':>6} {'GFLOP/s':>9} {'share':>7} runs",
            *rows, f"total: {scheduler.spent}/{scheduler.trials} trials, estimated latency "
                   f"{total}"]


@dataclass
class LiveTable:
    """Shows :func:`table_lines`: redrawn in place on a terminal, printed after each
    batch otherwise (and once at the end)."""

    stream: TextIO
    shown: int = 0
    last_spent: int = -1

    def __call__(self, scheduler: TaskScheduler, final: bool = False) -> None:
        lines = table_lines(scheduler)
        if self.stream.isatty():
            if self.shown:
                self.stream.write(f"\x1b[{self.shown}F\x1b[J")
            self.stream.write("\n".join(lines) + "\n")
            self.shown = len(lines)
        elif final or (scheduler.spent != self.last_spent
                       and scheduler.spent % scheduler.batch_size == 0):
            self.stream.write("\n".join(lines) + "\n")
            self.last_spent = scheduler.spent
        self.stream.flush()


def _summary(task, log: RecordLog) -> str:
    """The task's best config in ``log`` and the default's cost, both by the median of
    their records (what compilation applies)."""
    costs = config_costs(log.records()).get(task.workload_key, {})
    if not costs:
        return "no successful measurement"
    best = min(costs, key=costs.get)
    default = task.default_config()
    unit = task.definition.cost_unit
    text = f"best {format_cost(costs[best], unit)} with {task.space.get(best).to_json()}"
    if default.index in costs:
        text += f", default {format_cost(costs[default.index], unit)}"
    return text
