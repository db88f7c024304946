"""Tuners on the accelerator's GEMM tiling task (deterministic cycle counts from the
timing model, measured in process so the tests stay fast)."""

import math

import numpy as np
import pytest

from heterocc import te
from heterocc.targets.vta.tuning import vta_gemm_task
from heterocc.tuning.features import FEATURE_NAMES, loop_nest_features
from heterocc.tuning.measure import InProcessMeasurer
from heterocc.tuning.task import Task
from heterocc.tuning.tuners import TUNERS, CostModel, XGBTuner, make_tuner, tune_task

TASK = vta_gemm_task(16, 64, 32, "1x16x16", False)


@pytest.fixture(scope="module")
def exhaustive():
    """Cycles of every config of TASK."""
    measurer = InProcessMeasurer()
    return {i: measurer.measure_one(TASK, TASK.space.get(i)).cost
            for i in range(TASK.space.size)}


class TableMeasurer:
    """Replays the exhaustive measurements (same interface as the measurers)."""

    def __init__(self, table):
        self.table, self.calls = table, 0

    def measure_one(self, task, config):
        from heterocc.tuning.measure import MeasureResult

        self.calls += 1
        return MeasureResult(costs=(self.table[config.index],))


@pytest.mark.parametrize("name", sorted(TUNERS))
def test_tuners_propose_distinct_configs_and_track_the_best(name, exhaustive):
    measurer = TableMeasurer(exhaustive)
    tuner = make_tuner(name, TASK, seed=3)
    seen = []
    progress = tune_task(TASK, tuner, measurer, 20, batch_size=5,
                         callback=lambda p: seen.append(p.trials))
    assert progress.trials == 20 == measurer.calls and seen == list(range(1, 21))
    assert len(tuner.visited) == 20
    measured = [exhaustive[i] for i in tuner.visited]
    assert progress.best_cost == min(measured)
    assert progress.best_config.index in tuner.visited


def test_grid_tuner_walks_the_space_in_order(exhaustive):
    tuner = make_tuner("grid", TASK)
    assert [c.index for c in tuner.next_batch(4)] == [0, 1, 2, 3]
    assert [c.index for c in tuner.next_batch(2)] == [4, 5]


def test_tuning_stops_when_the_space_is_exhausted(exhaustive):
    progress = tune_task(TASK, make_tuner("random", TASK), TableMeasurer(exhaustive),
                         TASK.space.size + 10)
    assert progress.trials == TASK.space.size
    assert progress.best_cost == min(exhaustive.values())


def test_xgb_tuner_finds_the_optimum_with_fewer_trials_than_the_space(exhaustive):
    best = min(exhaustive.values())
    tuner = XGBTuner(TASK, seed=0, initial=8)
    progress = tune_task(TASK, tuner, TableMeasurer(exhaustive), 32, batch_size=8)
    assert progress.best_cost <= 1.05 * best
    assert tuner.model.trained


def test_accelerator_tuning_beats_or_matches_the_default_tiling(exhaustive):
    default = exhaustive[TASK.default_config().index]
    assert min(exhaustive.values()) <= default
    assert not math.isinf(default)


def test_cost_model_ranks_unseen_candidates():
    rng = np.random.default_rng(0)
    weights = np.array([1.0, -2.0, 0.5, 0.0])
    model = CostModel(seed=0)
    for task in ("a", "b"):
        features = rng.random((60, 4))
        model.add(task, list(features), list(np.exp(features @ weights)))
    model.fit()
    unseen = rng.random((40, 4))
    scores = model.predict(unseen)
    true_speed = -(unseen @ weights)
    ranks = np.argsort(np.argsort(scores)), np.argsort(np.argsort(true_speed))
    assert np.corrcoef(*ranks)[0, 1] > 0.8


def test_loop_nest_features_see_the_schedule():
    task = Task("matmul", (32, 128, 32, "float32"))
    space = task.space

    def features(**values):
        config = space.from_values({**task.default_config().to_json(), **values})
        schedule, tensors = task.definition.instantiate(task.args, config)
        return dict(zip(FEATURE_NAMES, loop_nest_features(te.lower(schedule, tensors,
                                                                    optimize=False))))

    parallel, serial = features(parallel="outer"), features(parallel="none")
    assert parallel["log_extent_parallel"] > serial["log_extent_parallel"]
    registers, memory = features(accumulate="registers"), features(accumulate="memory")
    assert registers["log_local_bytes"] > 0 == memory["log_local_bytes"]
    assert registers["vector_contiguous"] > 0


def test_simulated_annealing_proposals_and_a_model_shared_across_tasks(exhaustive):
    model = CostModel(seed=0)
    annealing = XGBTuner(TASK, seed=1, model=model, initial=8, exhaustive_limit=0,
                         walkers=8, steps=10)
    progress = tune_task(TASK, annealing, TableMeasurer(exhaustive), 32, batch_size=8)
    assert progress.trials == 32 == len(annealing.visited)
    assert progress.best_cost <= 1.1 * min(exhaustive.values())
    other = vta_gemm_task(32, 64, 32, "1x16x16", False)
    second = XGBTuner(other, seed=1, model=model, initial=0)
    # the shared model is already trained, so the second task starts model-guided
    assert second.model.trained and len(second.next_batch(4)) == 4
