"""``heterocc tune MODEL --target llvm --trials N --log F``: extract the model's tasks and
tune each, appending to the log (a killed run is resumed by running it again), with a
progress line per task: a bar, trials, errors and the best so far."""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field
from typing import TextIO

from ..runtime.inputs import parse_shapes
from .measure import MeasureOptions, Measurer
from .records import RecordLog, config_costs, read_records
from .task import extract_tasks
from .templates import SECONDS
from .tuners import TUNERS, CostModel, TuneProgress, make_tuner, remeasure_best, tune_task

BAR_WIDTH = 24


def add_tune_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``tune`` command to an argparse subparsers object; returns its parser
    (its ``func`` default runs the command)."""
    p = subparsers.add_parser("tune", help="tune the schedules of a model's tasks by measurement")
    p.add_argument("model", help="ONNX model")
    p.add_argument("--target", default="llvm",
                   help="a target with tuning templates (llvm, vta)")
    p.add_argument("--trials", type=int, default=64, help="measurements per task (with resumed)")
    p.add_argument("--log", required=True, help="JSON-lines tuning log (appended, resumed)")
    p.add_argument("--tuner", default="xgb", choices=sorted(TUNERS))
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--timeout", type=float, default=20.0, help="seconds per candidate")
    p.add_argument("--repeat", type=int, default=3, help="timings per candidate")
    p.add_argument("--remeasure", type=int, default=4,
                   help="measure this many best configs and the default again per task "
                        "(twice each; 0: off), so a lucky first timing does not win")
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
    tasks = extract_tasks(args.model, target=args.target, preset=args.preset,
                          shapes=parse_shapes(args.shape))
    print(f"{len(tasks)} tasks in {args.model} for {args.target}", file=stream)
    options = MeasureOptions(timeout_s=args.timeout, repeat=args.repeat, seed=args.seed)
    model = CostModel(seed=args.seed)
    with Measurer(options) as measurer, RecordLog(args.log) as log:
        for number, task in enumerate(tasks, 1):
            show = ProgressPrinter(stream, number, len(tasks), args.batch_size)
            tuner = make_tuner(args.tuner, task, seed=args.seed, model=model)
            default = task.default_config()
            progress = tune_task(task, tuner, measurer, args.trials, log=log,
                                 batch_size=args.batch_size, callback=show, first=[default])
            show(progress, final=True)
            if args.remeasure > 0:
                remeasure_best(task, measurer, log, count=args.remeasure, include=[default])
            print(f"  {task.workload_key}: {_summary(task, log)} "
                  f"({time.perf_counter() - show.start:.1f} s)", file=stream)
    print(f"log: {args.log}", file=stream)
    return 0


def _summary(task, log: RecordLog) -> str:
    """The task's best config in ``log`` and the default's cost, both by the median of
    their records (what compilation applies)."""
    costs = config_costs(read_records(log.path)).get(task.workload_key, {})
    if not costs:
        return "no successful measurement"
    best = min(costs, key=costs.get)
    default = task.default_config()
    unit = task.definition.cost_unit
    text = f"best {format_cost(costs[best], unit)} with {task.space.get(best).to_json()}"
    if default.index in costs:
        text += f", default {format_cost(costs[default.index], unit)}"
    return text
