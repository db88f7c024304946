"""The CPU matmul path of tuning: the default measured first, finalists re-measured
until the log's best is the fastest over repeated measurements, and a log's best config
(its panel width included) applied when the product is compiled."""

import dataclasses
import functools

import numpy as np
import pytest

from heterocc import te
from heterocc.targets.llvm.cpu import active_cpu, compiling_for
from heterocc.targets.llvm.module import build
from heterocc.targets.llvm.schedules import (
    default_panel,
    matmul,
    matmul_tile_rows,
    panel_group,
    schedule_matmul,
    vector_lanes,
)
from heterocc.targets.llvm.tuning import (
    MATMUL,
    matmul_panel,
    schedule_matmul_config,
    schedule_matmul_tuned,
)
from heterocc.tuning.apply import ApplyHistoryBest
from heterocc.tuning.measure import (
    SINGLE_CALL_SAMPLES,
    MeasureOptions,
    MeasureResult,
    measure_in_process,
    single_call_timing,
    task_inputs,
)
from heterocc.tuning.records import MeasureRecord, RecordLog, config_costs, read_records
from heterocc.tuning.task import Task
from heterocc.tuning.tuners import RandomTuner, remeasure_best, tune_task

TASK = Task("matmul", (16, 128, 24, "float32"))


class ScriptedMeasurer:
    """Costs per config index: a list consumed one measurement at a time (the last
    value repeats), so a config can be lucky once and slow afterwards."""

    def __init__(self, script, default=1.0):
        self.script, self.default, self.measured = script, default, []

    def measure_one(self, task, config):
        self.measured.append(config.index)
        costs = self.script.get(config.index, [self.default])
        cost = costs.pop(0) if len(costs) > 1 else costs[0]
        return MeasureResult(costs=(cost,))


def test_tuning_measures_the_given_first_configs_first_and_once():
    default = TASK.default_config()
    measurer = ScriptedMeasurer({})
    progress = tune_task(TASK, RandomTuner(TASK, seed=3), measurer, 6, batch_size=4,
                         first=[default, default])
    assert measurer.measured[0] == default.index
    assert len(measurer.measured) == len(set(measurer.measured)) == progress.trials == 6


def test_a_lucky_first_timing_does_not_pick_the_tuned_config(tmp_path):
    space = TASK.space
    lucky, steady, default = space.get(5), space.get(9), TASK.default_config()
    # lucky: fast once, then slow; steady: a little slower than lucky's first timing
    measurer = ScriptedMeasurer({lucky.index: [1.0, 3.0], steady.index: [1.5],
                                 default.index: [2.0]}, default=4.0)
    log_path = tmp_path / "t.jsonl"
    with RecordLog(log_path) as log:
        tune_task(TASK, RandomTuner(TASK, seed=0), measurer, 1, log=log, first=[default])
        for config in (lucky, steady, space.get(11)):
            result = measurer.measure_one(TASK, config)
            log.append(MeasureRecord(TASK.workload_key, config.to_json(), config.index,
                                     result.costs))
        assert ApplyHistoryBest(log_path).lookup(TASK.workload_key).index == lucky.index
        finalists = remeasure_best(TASK, measurer, log, count=2, rounds=2,
                                   include=[default])
    assert finalists[0].index == steady.index
    assert ApplyHistoryBest(log_path).lookup(TASK.workload_key).index == steady.index
    # the finalists end with three records each; lucky left them after its second
    counts = {index: measurer.measured.count(index) for index in set(measurer.measured)}
    assert counts[steady.index] == counts[default.index] == 3
    assert counts[lucky.index] == 2 and counts[space.get(11).index] == 1
    records = read_records(log_path)
    assert config_costs(records)[TASK.workload_key][lucky.index] == 2.0
    assert {r.tuner for r in records if r.config_index == steady.index} == {"", "remeasure"}
    # resuming counts configs, not records: re-measurements are not new trials
    measured_before = len(measurer.measured)
    with RecordLog(log_path) as log:
        progress = tune_task(TASK, RandomTuner(TASK), measurer, 4, log=log)
    assert progress.resumed == progress.trials == 4
    assert progress.best_config.index == steady.index and progress.best_cost == 1.5
    assert len(measurer.measured) == measured_before



def test_finalists_are_measured_again_by_single_calls(tmp_path):
    """A pool's finalists are timed by single calls, the fastest counting
    (``single_call_timing`` of the pool's options), not by the search's averaged
    samples; options given to ``remeasure_best`` are used as given."""
    class Recording(ScriptedMeasurer):
        options = MeasureOptions(repeat=3, min_repeat_s=0.002, timeout_s=9.0)

        def measure_one(self, task, config, options=None):
            self.given.append(options)
            return super().measure_one(task, config)

    measurer = Recording({})
    measurer.given = []
    with RecordLog(tmp_path / "t.jsonl") as log:
        tune_task(TASK, RandomTuner(TASK, seed=1), measurer, 3, log=log)
        searched = len(measurer.given)
        remeasure_best(TASK, measurer, log, count=2, rounds=1)
        again = measurer.given[searched:]
        assert len(again) == 2
        assert all(o == single_call_timing(Recording.options) for o in again)
        assert again[0].repeat == SINGLE_CALL_SAMPLES and again[0].min_repeat_s == 0
        assert again[0].timeout_s == 9.0
        given = MeasureOptions(repeat=5)
        remeasure_best(TASK, measurer, log, count=3, rounds=1, options=given)
    assert measurer.given[searched + 2:] == [given]  # the third config's one timing


def _product(panel=None, log=None):
    """The product packed with ``panel``, else tuning ``log``'s panel for its shape."""
    A = te.placeholder((16, 24), "float32", "A")
    B = te.placeholder((24, 128), "float32", "B")
    return A, B, matmul(A, B, panel=panel, panel_of=functools.partial(matmul_panel, log),
                        cpu=active_cpu())


def _run(schedule, tensors):
    module = build(te.lower(schedule, tensors, name="mm"))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 24)).astype(np.float32)
    b = rng.standard_normal((24, 128)).astype(np.float32)
    c = np.zeros((16, 128), np.float32)
    module(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_the_logs_panel_width_is_packed_and_its_config_applied():
    default = default_panel(128, "float32", cpu=active_cpu())
    tuned = 64 if default != 64 else 32
    config = TASK.space.from_values({**TASK.default_config().to_json(), "panel": tuned,
                                     "tile_rows": 4, "parallel": "inner"})
    records = [MeasureRecord(TASK.workload_key, config.to_json(), config.index, (1.0,))]
    assert matmul_panel(None, 16, 128, 24, "float32") is None
    assert _product()[2].op.attrs["packed_B"].shape[-1] == default  # no log
    log = ApplyHistoryBest(records)
    assert matmul_panel(log, 16, 128, 24, "float32") == tuned
    A, B, C = _product(log=log)
    schedule = te.create_schedule(C)
    assert schedule_matmul_tuned(log, schedule, C)
    assert C.op.attrs["packed_B"].shape[-1] == tuned
    _run(schedule, [A, B, C])
    # the default schedule follows whatever panel the product was packed with
    A, B, C = _product(panel=tuned)
    schedule = te.create_schedule(C)
    schedule_matmul(schedule, C, cpu=active_cpu())
    _run(schedule, [A, B, C])


@pytest.mark.parametrize("m,n,k,l2,grouped", [
    (100, 96, 64, None, False), (1024, 64, 48, None, False), (1, 64, 7, None, False),
    (13, 32, 29, None, False),
    # A (50 KiB) does not fit an L2 of four panels: panel groups
    (200, 1024, 64, "four panels", True),
])
def test_default_config_is_the_default_schedule(m, n, k, l2, grouped):
    """Without a log a product's schedule is exactly the matmul template's default
    config (its rows those of the evened register tile, 13 for 100 rows; its panels
    grouped when A does not fit the L2) applied to it."""
    if l2 == "four panels":
        l2 = 4 * k * default_panel(n, "float32", cpu=active_cpu()) * 4
    cpu = dataclasses.replace(active_cpu(), l2=l2 or active_cpu().l2, num_cores=2)
    with compiling_for(cpu):
        task = Task("matmul", (m, n, k, "float32"))
        config = task.default_config()
        assert config["tile_rows"] == matmul_tile_rows(m, config["panel"], "float32", cpu=cpu)
        assert config["panel_group"] == panel_group(
            m, k, -(-n // config["panel"]), config["panel"], 4, cpu=cpu)
        assert (config["panel_group"] > 1) == grouped
        _check_default_config_is_the_default_schedule(m, n, k, config)


def _check_default_config_is_the_default_schedule(m, n, k, config):
    lowered = []
    for apply_config in (True, False):
        A = te.placeholder((m, k), "float32", "A")
        B = te.placeholder((k, n), "float32", "B")
        C = matmul(A, B, cpu=active_cpu())
        assert C.op.attrs["packed_B"].shape[-1] == config["panel"]
        schedule = te.create_schedule(C)
        if apply_config:
            schedule_matmul_config(schedule, C, C.op.attrs["packed_B"], config)
        else:
            schedule_matmul(schedule, C, cpu=active_cpu())
        lowered.append(str(te.lower(schedule, [A, B, C], name="mm")))
    assert lowered[0] == lowered[1]


def test_a_record_written_before_the_panel_group_knob_still_applies():
    """Its config takes one panel per group, what its schedule did."""
    values = {**TASK.default_config().to_json(), "tile_rows": 4}
    del values["panel_group"]
    record = MeasureRecord(TASK.workload_key, values, 3, (1.0,))  # an older index
    config = ApplyHistoryBest([record]).lookup(TASK.workload_key)
    assert config["panel_group"] == 1 and config["tile_rows"] == 4
    assert config.index == TASK.config_of(values).index


def test_panel_options_divide_the_columns_when_some_do():
    panels = TASK.space.knobs[1].options
    assert panels and all(128 % p == 0 for p in panels)
    assert MATMUL.space((8, 40, 8, "float32")).knobs[1].options == (16, 32, 48)
    parallel = {k.name: k.options for k in TASK.space.knobs}["parallel"]
    assert parallel == ("outer", "inner", "none")


def test_panel_groups_leave_no_ragged_group_beside_the_default():
    """A group that does not divide the panels lowers its last group as a guarded scalar
    loop that LLVM took over a minute to optimize (tile rows and reduction unrolled)."""
    for n in (40, 48, 120, 1000):
        args = (64, n, 48, "float32")
        lanes = vector_lanes("float32", cpu=active_cpu())
        panels = -(-n // lanes)
        options = {k.name: k.options for k in MATMUL.space(args).knobs}["panel_group"]
        default = MATMUL.default_config(args)["panel_group"]
        assert options and all(panels % g == 0 or g == default for g in options)


def test_the_reference_is_computed_once_per_task_and_its_inputs_are_read_only():
    options = MeasureOptions(repeat=1)
    task_inputs.cache_clear()
    space = TASK.space
    for index in (0, 7, TASK.default_config().index):
        assert measure_in_process(TASK, space.get(index), options).ok
    info = task_inputs.cache_info()
    assert (info.misses, info.hits) == (1, 2)
    inputs, _ = task_inputs(TASK.workload_key, options.seed)
    assert not any(array.flags.writeable for array in inputs)


def test_a_record_written_before_the_reduction_unroll_knob_runs_one_step_an_iteration():
    """Its config unrolls no reduction steps, what its schedule did; a config's unroll_k
    is the most steps up to it that divide the reduction (of 24 here: 4 of 4, 12 of 16)."""
    values = TASK.default_config().to_json()
    del values["unroll_k"]
    config = ApplyHistoryBest([MeasureRecord(TASK.workload_key, values, 3, (1.0,))]).lookup(
        TASK.workload_key)
    assert config["unroll_k"] == 1
    for unroll, steps in ((1, None), (4, 4), (16, 12)):
        A, B, C = _product(panel=config["panel"])
        schedule = te.create_schedule(C)
        schedule_matmul_config(schedule, C, C.op.attrs["packed_B"],
                               TASK.space.from_values({**config.to_json(), "unroll_k": unroll}))
        text = str(te.lower(schedule, [A, B, C], name="mm"))
        assert ("k.inner" not in text) if steps is None else (
            f"for k.inner in unroll_hint(0, {steps})" in text)
        _run(schedule, [A, B, C])
