"""Which timing of a tuning candidate agrees with what the model pays: for the fused
functions that take most of a model's time, the hand schedule and three points of the
auto search's space (its seeds first) are timed by the tuning harness in each cache mode
(``MeasureOptions.cache``: hot, flush, rotate) and, compiled into the model, by the
executor's per-function profile. Printed per function: in-model and harness times in
ms (hand first), then for each mode

- pairwise: of all pairs of a function's four points, how many the harness orders as
  the model does;
- pick: the in-model time of the harness's fastest auto point over the in-model fastest
  auto point, summed over the functions (the number of functions at best);
- verdict: functions where "the harness's auto pick beats the hand schedule by 3%"
  is as true in the harness as in the model.

Run (a few minutes; the model's input is [1,3,224,224]):
    python benchmarks/tuning_cache_modes.py MODEL.onnx [--functions 10] [--rounds 5]
        [--blocks 16]
The harness timings of the modes alternate round by round, the four models alternate
block by block, and each figure is a minimum, so a burst of other work on a shared
machine hits all alike.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import math
import os
import statistics
import tempfile

import numpy as np

import heterocc
from heterocc.targets.llvm import LLVMTarget
from heterocc.targets.llvm import tuning as llvm_tuning
from heterocc.tuning.auto import auto_name
from heterocc.tuning.measure import CACHE_MODES, MeasureOptions, measure_in_process
from heterocc.tuning.records import MeasureRecord
from heterocc.tuning.task import Task, workload_key

#: points per function: the hand schedule and this many less one of the auto space
POINTS = 4
MARGIN = 0.97


def _profile(models, x, blocks: int) -> list[dict[str, float]]:
    """Per model, each function's fastest ms per call over ``blocks`` profiled blocks
    of five runs, the models taking turns."""
    best = [collections.defaultdict(lambda: float("inf")) for _ in models]
    for model in models:
        for _ in range(3):
            model.run([x])
    for _ in range(blocks):
        for slot, model in enumerate(models):
            model.enable_profiling()
            for _ in range(5):
                model.run([x])
            for line in model.profile_report().splitlines()[1:]:
                name, _, _, ms = line.split()[:4]
                best[slot][name] = min(best[slot][name], float(ms))
    return best


def _functions(model) -> dict[str, list[tuple[str, str, str]]]:
    """The compiled model's tunable functions by auto workload key: (name, kind, spec)."""
    found = collections.defaultdict(list)
    for node in model.graph.nodes:
        if node.body is None:
            continue
        kind = llvm_tuning._function_kind(node.body)
        spec = llvm_tuning._spec_or_none(node.body) if kind is not None else None
        if spec is not None:
            found[workload_key(auto_name(llvm_tuning.FUNCTION), (kind, spec))].append(
                (node.name, kind, spec))
    return found


def _points(task: Task, rng: np.random.Generator) -> list:
    """``POINTS - 1`` distinct points of the auto space: its seeds, then random ones."""
    values = llvm_tuning._auto_function_seeds(task.args)
    values += [task.space.get(int(i)).to_json()
               for i in task.space.random_indices(rng, 2 * POINTS)]
    configs = {}
    for v in values:
        config = task.space.from_values(v)
        configs.setdefault(config.index, config)
    return list(configs.values())[:POINTS - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--functions", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--blocks", type=int, default=16)
    args = parser.parse_args()
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    untuned = heterocc.compile(args.model, target=[LLVMTarget()])
    functions = _functions(untuned)
    (base,) = _profile([untuned], x, 1)
    keys = sorted(functions, key=lambda k: -sum(base[n] for n, _, _ in functions[k]))
    rng = np.random.default_rng(1)
    chosen = {}
    for key in keys[:args.functions]:
        _, kind, spec = functions[key][0]
        task = Task(auto_name(llvm_tuning.FUNCTION), (kind, spec))
        hand = Task(llvm_tuning.FUNCTION, task.args)
        chosen[key] = [(hand, hand.default_config())] + [(task, c) for c in _points(task, rng)]
    harness = {key: {mode: [math.inf for _ in points] for mode in CACHE_MODES}
               for key, points in chosen.items()}
    for _ in range(args.rounds):
        for mode in CACHE_MODES:
            options = MeasureOptions(repeat=5, cache=mode)
            for key, points in chosen.items():
                for i, (task, config) in enumerate(points):
                    result = measure_in_process(task, config, options)
                    harness[key][mode][i] = min(harness[key][mode][i], result.cost * 1e3)
    with tempfile.TemporaryDirectory() as folder:
        models = [untuned]
        for slot in range(1, POINTS):  # model ``slot`` runs point ``slot`` of each function
            path = os.path.join(folder, f"forced{slot}.jsonl")
            with open(path, "w") as log:
                for key, points in chosen.items():
                    config = points[slot][1]
                    record = MeasureRecord(key, config.to_json(), config.index, (1e-6,),
                                           tuner="forced")
                    log.write(json.dumps(record.to_json()) + "\n")
            models.append(heterocc.compile(args.model, target=[LLVMTarget()],
                                           tuning_log=path))
        in_model = _profile(models, x, args.blocks)
    pairwise, pick, verdict = (collections.Counter() for _ in range(3))
    for key in chosen:
        names = [n for n, _, _ in functions[key]]
        model_ms = [statistics.mean(in_model[s][n] for n in names) for s in range(POINTS)]
        row = f"{names[0]:30s} x{len(names)} model {_fmt(model_ms)}"
        for mode, ms in harness[key].items():
            row += f"  {mode} {_fmt(ms)}"
            pairwise[mode] += sum((ms[a] < ms[b]) == (model_ms[a] < model_ms[b])
                                  for a, b in itertools.combinations(range(POINTS), 2))
            best = 1 + int(np.argmin(ms[1:]))
            pick[mode] += model_ms[best] / min(model_ms[1:])
            verdict[mode] += ((ms[best] < MARGIN * ms[0])
                              == (model_ms[best] < MARGIN * model_ms[0]))
        print(row)
    pairs = len(chosen) * POINTS * (POINTS - 1) // 2
    for mode in CACHE_MODES:
        print(f"{mode:7s} pairwise {pairwise[mode]}/{pairs}  pick {pick[mode]:.3f} "
              f"(best {len(chosen)})  verdict {verdict[mode]}/{len(chosen)}")
    print("load average", os.getloadavg())


def _fmt(values) -> str:
    return "[" + " ".join(f"{v:.3f}" for v in values) + "]"


if __name__ == "__main__":
    main()
