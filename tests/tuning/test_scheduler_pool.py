"""The task scheduler over a model's tasks, the measuring pools (local workers, Ray),
the live table, and resuming an auto search after kill -9."""

import argparse
import io
import math
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import onnx
import pytest
from onnx import helper

from heterocc.errors import InputError
from heterocc.targets.vta.tuning import vta_gemm_task
from heterocc.tuning import measure
from heterocc.tuning.auto import EvolutionaryTuner
from heterocc.tuning.cli import add_tune_parser, table_lines
from heterocc.tuning.extract import extract_tasks
from heterocc.tuning.measure import MeasureOptions, MeasureResult
from heterocc.tuning.pool import LocalPool, RayPool
from heterocc.tuning.records import RecordLog, read_records
from heterocc.tuning.scheduler import TaskScheduler
from heterocc.tuning.task import Task
from heterocc.tuning.tuners import GridTuner, RandomTuner
from tests.conftest import make_model

FAULTY_SETUP = ("tests.tuning.faulty_templates",)


class CostPool:
    """Replays a cost per config (the pools' interface, no processes)."""

    def __init__(self, cost):
        self.cost, self.calls = cost, []

    def measure_batch(self, task, configs, on_result=None):
        results = []
        for config in configs:
            self.calls.append(task.workload_key)
            results.append(MeasureResult(costs=(self.cost(task, config),)))
            if on_result is not None:
                on_result(config, results[-1])
        return results

    def measure_one(self, task, config):
        return self.measure_batch(task, [config])[0]


def _tasks():
    # two accelerator tilings: small spaces, costs from a formula
    heavy = vta_gemm_task(16, 64, 32, "1x16x16", False).weighted(4)
    light = vta_gemm_task(16, 32, 16, "1x16x16", False)
    return heavy, light


def _cost(task, config):
    # the heavy task keeps improving with its index, the light one is flat
    base = 10.0 if task.weight > 1 else 1.0
    return base / (1 + config.index) if task.weight > 1 else base


def test_scheduler_spends_the_budget_where_latency_falls_most(tmp_path):
    heavy, light = _tasks()
    pool = CostPool(_cost)
    with RecordLog(tmp_path / "log.jsonl") as log:
        scheduler = TaskScheduler([heavy, light], [GridTuner(heavy), GridTuner(light)],
                                  pool, trials=24, log=log, batch_size=4, early_stop=2)
        states = scheduler.run()
    assert scheduler.spent == 24 and len(read_records(tmp_path / "log.jsonl")) == 24
    trials = {s.task.workload_key: s.progress.trials for s in states}
    # every task got its first batch; the flat one stopped early (no gain in 3 trials),
    # the improving one (weighted by how often it runs) took the rest
    assert trials[light.workload_key] == 4 and states[1].done
    assert trials[heavy.workload_key] == 20 and not states[0].done
    latency = scheduler.estimated_latency()
    assert latency == pytest.approx(4 * states[0].progress.best_cost + 1.0)
    lines = table_lines(scheduler)
    assert "share" in lines[0] and lines[-1].startswith("total: 24/24 trials")


class AvoidingTuner(GridTuner):
    """Walks its space in index order but never proposes ``avoided``: a search that
    would not find that point by itself."""

    def __init__(self, task, avoided):
        super().__init__(task)
        self.avoided = avoided

    def _propose(self, size):
        return [i for i in super()._propose(size + 1) if i != self.avoided][:size]


def _fast_point(task):
    # in either accelerator tiling's space, the one point that runs fast
    return task.space.from_values({"block_rows": 16, "block_cols": 1, "k_chunk": 2,
                                   "virtual_threads": 2})


@pytest.mark.parametrize("transfer", [2, 0])
def test_the_best_point_of_a_similar_task_is_measured_on_the_others(transfer, tmp_path):
    """A point one task of a kind found fast is carried into its similar tasks' batches
    (their spaces differ: the light tiling has no second column block), where their
    own search would never propose it; ``transfer=0`` turns that off."""
    heavy, light = _tasks()

    def cost(task, config):
        return 1.0 if config.index == _fast_point(task).index else 10.0

    tuners = [GridTuner(heavy), AvoidingTuner(light, _fast_point(light).index)]
    with RecordLog(tmp_path / "log.jsonl") as log:
        scheduler = TaskScheduler([heavy, light], tuners, CostPool(cost), trials=16,
                                  log=log, batch_size=4, transfer=transfer,
                                  first={heavy.workload_key: [_fast_point(heavy)]})
        states = scheduler.run()
    assert states[0].progress.best_cost == 1.0
    light_indices = [r.config_index for r in read_records(tmp_path / "log.jsonl")
                     if r.workload_key == light.workload_key]
    if transfer:  # first in a batch of the light task, ahead of its tuner's proposals
        # (not its first: that one is proposed while the heavy task's is measured)
        assert light_indices.index(_fast_point(light).index) % 4 == 0
        assert states[1].progress.best_cost == 1.0
        assert scheduler.transfers(states[1]) == []  # measured: carried once only
    else:
        assert _fast_point(light).index not in light_indices
        assert states[1].progress.best_cost == 10.0


def test_a_negative_transfer_is_refused_with_what_it_means():
    heavy, light = _tasks()
    with pytest.raises(InputError, match="transfer is -1: give how many points"):
        TaskScheduler([heavy, light], [GridTuner(heavy), GridTuner(light)], CostPool(_cost),
                      trials=8, transfer=-1)


def test_only_similar_tasks_points_are_carried_each_knob_from_the_donor_or_the_own_best():
    large = Task("auto.matmul", (64, 64, 64, "float32"))
    small = Task("auto.matmul", (16, 32, 16, "float32"))
    other = Task("matmul", (16, 32, 16, "float32"))  # another template: not similar
    tasks = [large, small, other]
    scheduler = TaskScheduler(tasks, [RandomTuner(t) for t in tasks], CostPool(_cost),
                              trials=24, batch_size=8, transfer=0)
    states = scheduler.run()
    assert scheduler.transfers(states[2]) == []
    own, visited = states[1].progress.best_config, states[1].tuner.visited
    # the large product's best as a point the small one's space offers in part (so some
    # knobs come from it, others from the small product's own best), and that the small
    # product has not measured: its draws alone need not give one
    small_knobs = {knob.name: knob.options for knob in small.space.knobs}

    def mixes(donor):
        offered = [name for name, value in donor.values.items()
                   if value in small_knobs[name]]
        adopted = small.space.adopt(donor.values, own.values)
        return (adopted is not None and adopted.index not in visited
                and small.definition.admissible(small.args, adopted.values)
                and len(offered) < len(small_knobs)
                and any(donor[name] != own[name] for name in offered))

    candidates = (large.space.get(i) for i in large.space.random_indices(
        np.random.default_rng(0), 4000))
    donor = next(config for config in candidates if mixes(config))
    states[0].progress.best_config = donor
    (config,) = scheduler.transfers(states[1])
    assert config.index not in visited
    for knob in small.space.knobs:
        expected = donor[knob.name] if donor[knob.name] in knob.options else own[knob.name]
        assert config[knob.name] == expected


def test_a_task_far_below_the_throughput_of_a_similar_one_gets_more_trials():
    # three tasks, each with a flat cost (more trials find nothing better): a large
    # product fast per flop, a small one of the same template 32x slower per flop, and
    # a third as slow per flop but of another template (no similar task to compare to)
    large = Task("auto.matmul", (64, 64, 64, "float32"))
    small = Task("auto.matmul", (16, 32, 16, "float32"))
    other = Task("matmul", (16, 32, 16, "float32"))
    costs = {large.workload_key: 1e-4, small.workload_key: 1e-4, other.workload_key: 1e-4}
    tasks = [large, small, other]
    scheduler = TaskScheduler(tasks, [RandomTuner(t) for t in tasks],
                              CostPool(lambda task, config: costs[task.workload_key]),
                              trials=24, batch_size=8)
    states = scheduler.run()
    assert [s.progress.trials for s in states] == [8, 8, 8]
    large_state, small_state, other_state = states
    assert scheduler.peak_throughput(small_state) == pytest.approx(large.flops / 1e-4)
    assert scheduler.peak_throughput(other_state) == pytest.approx(other.flops / 1e-4)
    # as if each had had 64 trials, its last point the best: by its trials alone each
    # would expect 1e-4 / 64 s per trial; the small product is 1e-4 s from the
    # 2 * 16384 / 5.2e9 s its kind reaches elsewhere, expected over a window of 8
    for state in states:
        state.best_history, state.stalled = [1e-4] * 64, 0
    gains = [scheduler.gradient(s) for s in states]
    assert gains[1] > gains[0] == pytest.approx(gains[2])
    assert scheduler.next_state() is small_state
    # the term fades while the task finds nothing better
    small_state.stalled = 64
    assert scheduler.gradient(small_state) < gains[1]


class OverlapPool(CostPool):
    """Measures a batch only once a batch proposed after it (of another task) exists,
    unless the budget leaves none to propose: the next proposal must be made while this
    batch is in flight. Records which tasks had a batch in flight at each proposal."""

    def __init__(self, cost, trials):
        super().__init__(cost)
        self.trials, self.proposals, self.numbers = trials, 0, {}
        self.changed, self.in_flight, self.overlapped = threading.Condition(), set(), 0

    def proposed(self, task, batch):
        with self.changed:
            self.proposals += 1
            self.numbers[task.workload_key, tuple(c.index for c in batch)] = self.proposals
            self.changed.notify_all()

    def measure_batch(self, task, configs, on_result=None):
        number = self.numbers[task.workload_key, tuple(c.index for c in configs)]
        self.in_flight.add(task.workload_key)
        if len(self.calls) + len(configs) < self.trials:  # a successor is due
            with self.changed:
                if self.changed.wait_for(lambda: self.proposals > number, timeout=60):
                    self.overlapped += 1
        self.in_flight.discard(task.workload_key)
        return super().measure_batch(task, configs, on_result)


class WatchedTuner(GridTuner):
    """A grid tuner that tells the pool of its proposals, noting whether its own task had
    a batch in flight then."""

    def __init__(self, task, pool):
        super().__init__(task)
        self.pool, self.proposed_while_measuring = pool, []

    def next_batch(self, size):
        self.proposed_while_measuring.append(self.task.workload_key in self.pool.in_flight)
        batch = super().next_batch(size)
        self.pool.proposed(self.task, batch)
        return batch


def test_the_next_batch_is_proposed_while_the_last_is_measured(tmp_path):
    heavy, light = _tasks()
    pool = OverlapPool(_cost, trials=16)
    tuners = [WatchedTuner(heavy, pool), WatchedTuner(light, pool)]
    with RecordLog(tmp_path / "log.jsonl") as log:
        scheduler = TaskScheduler([heavy, light], tuners, pool, trials=16, log=log,
                                  batch_size=4)
        scheduler.run()
    assert scheduler.spent == 16 and len(read_records(tmp_path / "log.jsonl")) == 16
    # every batch but the last (the budget leaves it no successor) overlapped the
    # proposal of the next, which went to the other task
    assert pool.overlapped == 3
    assert [key == heavy.workload_key for key in pool.calls[::4]] == [True, False] * 2
    # a task never proposes while its own batch is measured: it waits for its results
    assert not any(flag for tuner in tuners for flag in tuner.proposed_while_measuring)


class LimitedPool(CostPool):
    """A pool with options: records the options each batch is measured under."""

    def __init__(self, cost, elapsed_s):
        super().__init__(cost)
        self.options, self.elapsed_s, self.batches = MeasureOptions(timeout_s=20.0), elapsed_s, []

    def measure_batch(self, task, configs, on_result=None, options=None):
        results = []
        for config in configs:
            self.batches.append(options() if callable(options) else options)
            results.append(MeasureResult(costs=(self.cost(task, config),),
                                         elapsed_s=self.elapsed_s))
            if on_result is not None:
                on_result(config, results[-1])
        self.calls.append([r.cost for r in results])
        return results


def test_scheduler_measures_a_timed_task_under_its_limits():
    task = Task("auto.matmul", (16, 32, 16, "float32"))
    pool = LimitedPool(lambda task, config: 0.001 * (1 + config.index % 7), elapsed_s=3.0)
    TaskScheduler([task], [RandomTuner(task)], pool, trials=8, batch_size=4).run()
    first, second, *_, last = pool.batches
    # nothing known yet: no cutoff, the floor's time-out (a tiny task's calls are short)
    assert math.isinf(first.cutoff_s) and first.timeout_s == measure.TIMEOUT_FLOOR_S
    # from the second candidate on (within the first batch too): one call settles a
    # candidate 4x slower than the best so far; 4x the slowest success
    assert second.cutoff_s == pytest.approx(measure.CUTOFF_MULTIPLE * pool.calls[0][0])
    assert second.timeout_s == pytest.approx(measure.TIMEOUT_MULTIPLE * 3.0)
    measured = pool.calls[0] + pool.calls[1][:-1]
    assert last.cutoff_s == pytest.approx(measure.CUTOFF_MULTIPLE * min(measured))
    # a modelled cost (cycles) is measured as the pool's options say
    heavy, _ = _tasks()
    modelled = LimitedPool(_cost, elapsed_s=3.0)
    TaskScheduler([heavy], [RandomTuner(heavy)], modelled, trials=8, batch_size=4).run()
    assert modelled.batches == [None] * 8


def test_scheduler_resumes_from_the_log(tmp_path):
    heavy, light = _tasks()
    path = tmp_path / "log.jsonl"
    with RecordLog(path) as log:
        TaskScheduler([heavy, light], [RandomTuner(heavy), RandomTuner(light)],
                      CostPool(_cost), trials=8, log=log, batch_size=4).run()
    pool = CostPool(_cost)
    with RecordLog(path) as log:
        scheduler = TaskScheduler([heavy, light], [RandomTuner(heavy), RandomTuner(light)],
                                  pool, trials=12, log=log, batch_size=4)
        assert scheduler.spent == 8  # the log's records count
        scheduler.run()
    assert len(pool.calls) == 4 and len(read_records(path)) == 12


def test_local_pool_survives_a_crashing_and_a_hanging_candidate(tmp_path):
    task = Task("faulty_matmul", (8, 8, 8, "float32"))
    import tests.tuning.faulty_templates  # noqa: F401  (registers the template here too)

    space = task.space
    configs = [space.from_values({"behavior": b}) for b in ("ok", "crash", "hang", "ok")]
    arrived = []
    with LocalPool(MeasureOptions(timeout_s=4, repeat=1), workers=2,
                   setup_modules=FAULTY_SETUP) as pool:
        start = time.perf_counter()
        results = pool.measure_batch(task, configs,
                                     lambda c, r: arrived.append(c["behavior"]))
        elapsed = time.perf_counter() - start
        again = pool.measure_one(task, configs[0])  # the pool goes on after both
    assert [r.error for r in results] == [None, "crash", "timeout", None]
    assert sorted(arrived) == ["crash", "hang", "ok", "ok"]
    assert again.ok and elapsed < 60


def _model_path(tmp_path):
    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                       [("a", "float32", [16, 24])], [("y", "float32", None)],
                       {"b": np.random.default_rng(0).standard_normal((24, 32))
                        .astype(np.float32)})
    path = tmp_path / "mm.onnx"
    onnx.save(model, str(path))
    return path


def _tune(argv, stream):
    parser = argparse.ArgumentParser()
    add_tune_parser(parser.add_subparsers())
    args = parser.parse_args(["tune", *argv])
    return args.func(args, stream)


def test_the_tune_command_passes_its_transfer_to_the_scheduler(tmp_path):
    path, log = _model_path(tmp_path), tmp_path / "auto.jsonl"
    with pytest.raises(InputError, match="transfer is -1"):
        _tune([str(path), "--search", "auto", "--trials", "2", "--log", str(log),
               "--transfer", "-1", "--quiet"], io.StringIO())
    assert not os.path.exists(log) or read_records(log) == []  # refused before measuring


def test_auto_search_command_shows_the_table_and_logs_every_trial(tmp_path):
    path, log = _model_path(tmp_path), tmp_path / "auto.jsonl"
    out = io.StringIO()
    assert _tune([str(path), "--search", "auto", "--trials", "6", "--log", str(log),
                  "--batch-size", "3", "--repeat", "1", "--remeasure", "0",
                  "--workers", "2"], out) == 0
    records = read_records(log)
    (task,) = extract_tasks(str(path), search="auto")  # the model's one function
    searched = [r for r in records if r.tuner == "auto"]
    assert len(searched) == 6 and {r.workload_key for r in searched} == {task.workload_key}
    # the function's hand schedule, timed on the same harness under the hand template's
    # key, so compile keeps it where the search found nothing faster (once, beside the
    # best timed again once: remeasuring is off)
    hand = [r for r in records if r.tuner == "baseline"]
    assert len(hand) == 1 and {r.workload_key for r in hand} == {
        Task("function", task.args).workload_key}
    assert all(r.ok for r in hand) and len(records) == 8
    # each timing of it follows one of the search's best (a change in load hits both)
    again = [r for r in records if r.tuner == "paired"]
    assert len(again) == 1
    assert [r.tuner for r in records[6:]] == ["paired", "baseline"]
    text = out.getvalue()
    assert "GFLOP/s" in text and "total: 6/6 trials, estimated latency" in text
    quiet = io.StringIO()
    _tune([str(path), "--search", "auto", "--trials", "6", "--log", str(log), "--quiet"],
          quiet)
    assert quiet.getvalue() == ""


def test_auto_search_resumes_after_kill_9_without_losing_a_record(tmp_path):
    path, log = _model_path(tmp_path), tmp_path / "killed.jsonl"
    argv = [sys.executable, "-m", "heterocc.cli", "tune", str(path), "--search", "auto",
            "--trials", "40", "--log", str(log), "--batch-size", "2", "--repeat", "1",
            "--remeasure", "0", "--quiet"]
    process = subprocess.Popen(argv, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and (not log.exists() or
                                      log.read_bytes().count(b"\n") < 4):
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    kept = read_records(log)
    assert len(kept) >= 4
    resumed = subprocess.run([*argv[:8], "12", *argv[9:]], timeout=300)
    assert resumed.returncode == 0
    after = read_records(log)
    assert after[:len(kept)] == kept  # nothing completed was lost
    searched = [r for r in after if r.tuner == "auto"]
    assert len(searched) == max(12, len(kept))  # resumed: 12 trials in all
    # and the hand schedule timed once (remeasuring off), after the best so far
    assert len(after) == len(searched) + 2


def test_ray_pool_runs_a_small_tuning_in_process(tmp_path):
    ray = pytest.importorskip("ray", reason="Ray is the optional extra heterocc[distributed]")
    import tests.tuning.faulty_templates  # noqa: F401

    task = Task("faulty_matmul", (8, 8, 8, "float32"))
    configs = [task.space.from_values({"behavior": b}) for b in ("ok", "wrong", "crash")]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with RecordLog(tmp_path / "ray.jsonl") as log:
            pool = RayPool("local", MeasureOptions(timeout_s=30, repeat=1),
                           setup_modules=FAULTY_SETUP)
            tuner = EvolutionaryTuner(Task("auto.matmul", (8, 16, 8, "float32")), seed=0)
            scheduler = TaskScheduler([tuner.task], [tuner], pool, trials=4, log=log,
                                      batch_size=2)
            scheduler.run()
            results = pool.measure_batch(task, configs)
    finally:
        ray.shutdown()
    assert len(read_records(tmp_path / "ray.jsonl")) == 4
    assert all(r.ok for r in read_records(tmp_path / "ray.jsonl"))
    # a candidate that kills its Ray worker costs that one trial
    assert [r.error for r in results] == [None, "wrong", "crash"]


def test_the_accelerator_tiling_is_searched_by_the_same_machinery(tmp_path):
    """--search auto on the accelerator: its tiling spaces (no auto twin: the instruction
    shape fixes the schedule's form) searched by the evolutionary search and the task
    scheduler, measured by the timing model."""
    from heterocc.tuning.measure import InProcessMeasurer
    from tests.tuning.test_cli_apply import _model

    tasks = extract_tasks(_model(tmp_path / "m.onnx"), target="vta", search="auto")
    assert [t.template for t in tasks] == ["vta_gemm", "vta_gemm"]
    log_path = tmp_path / "vta.jsonl"
    with RecordLog(log_path) as log:
        scheduler = TaskScheduler(tasks, [EvolutionaryTuner(t, seed=0) for t in tasks],
                                  InProcessMeasurer(), trials=20, log=log, batch_size=4,
                                  first={t.workload_key: [t.default_config()] for t in tasks})
        states = scheduler.run()
    records = read_records(log_path)
    assert len(records) == 20 and all(r.ok for r in records)
    for state in states:  # never worse than the hand tiling it started from
        default = next(r for r in records if r.workload_key == state.task.workload_key
                       and r.config_index == state.task.default_config().index)
        assert state.progress.best_cost <= default.cost
    assert "cycles" in table_lines(scheduler)[-1]


def test_auto_tasks_carry_how_often_the_model_runs_them(tmp_path):
    from tests.tuning.test_cli_apply import _model

    tasks = extract_tasks(_model(tmp_path / "m.onnx"), search="auto")
    # whole functions: the two equal depthwise convolutions' functions are one task
    assert [(t.template, t.args[0], t.weight) for t in tasks] == [
        ("auto.function", "conv2d_nchwc", 1), ("auto.function", "depthwise_conv2d_nchwc", 2),
        ("auto.function", "matmul", 1)]
    # the weight is no part of a task's identity (its workload key)
    assert tasks[1] == Task(tasks[1].template, tasks[1].args)
    with pytest.raises(InputError, match="no search .exhaustive."):
        extract_tasks(_model(tmp_path / "m.onnx"), search="exhaustive")


def test_timings_on_one_machine_never_overlap(tmp_path, monkeypatch):
    """Each timing holds the node's slot (a file lock: also between processes, and
    between the Ray tasks of one node)."""
    import threading

    from heterocc.tuning.measure import TIMING_LOCK_ENV, exclusive_timing

    monkeypatch.setenv(TIMING_LOCK_ENV, str(tmp_path / "timing.lock"))
    spans = []

    def timed():
        with exclusive_timing():
            start = time.perf_counter()
            time.sleep(0.1)
            spans.append((start, time.perf_counter()))

    threads = [threading.Thread(target=timed) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    spans.sort()
    assert len(spans) == 3
    assert all(end <= next_start for (_, end), (next_start, _) in zip(spans, spans[1:]))


def test_the_tune_command_times_in_the_cache_mode_it_is_given(tmp_path, monkeypatch):
    from heterocc.tuning import cli

    path, log = _model_path(tmp_path), tmp_path / "cache.jsonl"
    seen = []
    monkeypatch.setattr(cli, "_tune", lambda args, search, tasks, options, stream, tuning:
                        seen.append(options))
    for extra in ([], ["--cache", "hot"], ["--cache", "rotate"]):
        _tune([str(path), "--search", "auto", "--log", str(log), "--quiet", *extra],
              io.StringIO())
    assert [o.cache for o in seen] == ["flush", "hot", "rotate"]
    with pytest.raises(SystemExit):
        _tune([str(path), "--log", str(log), "--cache", "cold"], io.StringIO())
