"""Tuners: which configs of a task to measure next.

Every tuner proposes batches of unmeasured configs (``next_batch``) and learns from
their results (``update``): :class:`RandomTuner` and :class:`GridTuner` ignore them,
:class:`GeneticTuner` breeds the fastest, and :class:`XGBTuner` fits a ranking cost
model (XGBoost, ``rank:pairwise``) on candidate features and explores it by simulated
annealing, choosing each batch for predicted speed and for diversity. A
:class:`CostModel` can be shared by the XGBoost tuners of several tasks of a session,
so what was learnt on one task informs the next. :func:`tune_task` drives one tuner,
measuring, logging and resuming.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from .features import candidate_features
from .measure import (
    InProcessMeasurer,
    MeasureOptions,
    Measurer,
    MeasureResult,
    single_call_timing,
    wait_for_timings,
)
from .records import REMEASURED, MeasureRecord, RecordLog, config_costs
from .space import Config
from .task import Task, reindexed
from .templates import SECONDS


class Tuner:
    """Base of the tuners: tracks what was measured. Subclasses implement ``_propose``."""

    name = "base"

    def __init__(self, task: Task, seed: int = 0):
        self.task = task
        self.space = task.space
        self.rng = np.random.default_rng(seed)
        self.visited: set[int] = set()
        self.costs: dict[int, float] = {}

    def has_next(self) -> bool:
        return len(self.visited) < self.space.size

    def next_batch(self, size: int) -> list[Config]:
        """Up to ``size`` configs never proposed before."""
        indices = [i for i in dict.fromkeys(self._propose(size)) if i not in self.visited]
        indices = indices[:size]
        self.visited.update(indices)
        return [self.space.get(i) for i in indices]

    def update(self, configs: Sequence[Config], costs: Sequence[float]) -> None:
        """Learn from measured ``costs`` (``inf`` for a failed candidate)."""
        for config, cost in zip(configs, costs):
            self.visited.add(config.index)
            self.costs[config.index] = cost

    def _propose(self, size: int) -> list[int]:
        raise NotImplementedError


class RandomTuner(Tuner):
    """Uniformly random unmeasured configs."""

    name = "random"

    def _propose(self, size: int) -> list[int]:
        return self.space.random_indices(self.rng, size, exclude=self.visited)


class GridTuner(Tuner):
    """Configs in index order (the first knob varies fastest)."""

    name = "grid"

    def _propose(self, size: int) -> list[int]:
        found: list[int] = []
        index = 0
        while len(found) < size and index < self.space.size:
            if index not in self.visited:
                found.append(index)
            index += 1
        return found


class GeneticTuner(Tuner):
    """A genetic algorithm over knob digits: the fittest (fastest) configs are kept,
    parents drawn by fitness are crossed knob by knob and mutated."""

    name = "genetic"

    def __init__(self, task: Task, seed: int = 0, population: int = 16, elite: int = 4,
                 mutation: float = 0.1):
        super().__init__(task, seed)
        self.population, self.elite, self.mutation = population, elite, mutation

    def _propose(self, size: int) -> list[int]:
        measured = sorted((c, i) for i, c in self.costs.items() if math.isfinite(c))
        if len(measured) < 2:
            return self.space.random_indices(self.rng, size, exclude=self.visited)
        parents = [i for _, i in measured[:self.population]]
        fitness = np.array([1.0 / c for c, _ in measured[:self.population]])
        fitness /= fitness.sum()
        children: list[int] = []
        for _ in range(20 * size):
            if len(children) >= size:
                break
            a, b = (self.space.digits(parents[int(self.rng.choice(len(parents), p=fitness))])
                    for _ in range(2))
            digits = [x if self.rng.random() < 0.5 else y for x, y in zip(a, b)]
            for knob, radix in enumerate(self.space.radices):
                if self.rng.random() < self.mutation:
                    digits[knob] = int(self.rng.integers(radix))
            child = self.space.index_of_digits(digits)
            if child not in self.visited and child not in children:
                children.append(child)
        if len(children) < size:
            children += self.space.random_indices(self.rng, size - len(children),
                                                  exclude=self.visited | set(children))
        return children


@dataclass
class CostModel:
    """An XGBoost ranking model over candidate features, trained on every task it saw.

    Each task is one query group: within it, a candidate's label is its speed relative
    to the task's fastest (failed candidates 0), and the ``rank:pairwise`` objective
    learns to order candidates, which is all a tuner needs."""

    seed: int = 0
    rounds: int = 60
    _data: dict[str, tuple[list[np.ndarray], list[float]]] = field(default_factory=dict)
    _booster: object = None

    def add(self, workload_key: str, features: Sequence[np.ndarray],
            costs: Sequence[float]) -> None:
        rows, costs_seen = self._data.setdefault(workload_key, ([], []))
        rows.extend(features)
        costs_seen.extend(costs)

    @property
    def trained(self) -> bool:
        return self._booster is not None

    def fit(self) -> None:
        """Retrain on everything added so far (no-op until some candidate succeeded)."""
        import xgboost

        rows, labels, groups = [], [], []
        for group, (features, costs) in enumerate(self._data.values()):
            finite = [c for c in costs if math.isfinite(c)]
            if not finite:
                continue
            best = min(finite)
            rows.extend(features)
            labels.extend(best / c if math.isfinite(c) else 0.0 for c in costs)
            groups.extend([group] * len(costs))
        if len(set(labels)) < 2:
            return
        matrix = xgboost.DMatrix(np.stack(rows), label=np.array(labels), qid=np.array(groups))
        params = {"objective": "rank:pairwise", "eta": 0.2, "max_depth": 6,
                  "min_child_weight": 1, "subsample": 1.0, "seed": self.seed,
                  "verbosity": 0, "nthread": 1}
        self._booster = xgboost.train(params, matrix, num_boost_round=self.rounds)

    def predict(self, features: np.ndarray) -> np.ndarray:
        """Scores of candidates (rows of ``features``): higher is predicted faster."""
        import xgboost

        return self._booster.predict(xgboost.DMatrix(np.atleast_2d(features)))


class ModelGuidedTuner(Tuner):
    """A tuner whose proposals a :class:`CostModel` ranks: the model learns from every
    measured batch, on features of the lowered candidates (cached per config)."""

    def __init__(self, task: Task, seed: int = 0, model: CostModel | None = None,
                 feature_cache: dict[int, np.ndarray] | None = None):
        super().__init__(task, seed)
        self.model = model if model is not None else CostModel(seed=seed)
        # features depend only on the task and config, so tuners of one task may share them
        self._features = feature_cache if feature_cache is not None else {}

    def features(self, indices: Sequence[int]) -> np.ndarray:
        """Features of configs ``indices`` (cached)."""
        for index in indices:
            if index not in self._features:
                wait_for_timings()  # a proposal never shares the cores with a timing
                self._features[index] = candidate_features(self.task, self.space.get(index))
        return np.stack([self._features[i] for i in indices])

    def update(self, configs: Sequence[Config], costs: Sequence[float]) -> None:
        super().update(configs, costs)
        if configs:
            self.model.add(self.task.workload_key, list(self.features([c.index for c in configs])),
                           list(costs))
            self.model.fit()


class XGBTuner(ModelGuidedTuner):
    """Model-guided search: measure ``initial`` random configs, then each batch is the
    best of the model's predictions over the candidates simulated annealing finds (or
    over the whole space when it has at most ``exhaustive_limit`` points), picked for
    predicted speed and for covering knob values the batch lacks, with one random
    config in ``1 / epsilon`` for exploration."""

    name = "xgb"

    def __init__(self, task: Task, seed: int = 0, model: CostModel | None = None,
                 initial: int = 8, epsilon: float = 0.05, exhaustive_limit: int = 2048,
                 walkers: int = 16, steps: int = 24, diversity: float = 0.05,
                 feature_cache: dict[int, np.ndarray] | None = None):
        super().__init__(task, seed, model, feature_cache)
        self.initial, self.epsilon = initial, epsilon
        self.exhaustive_limit, self.walkers, self.steps = exhaustive_limit, walkers, steps
        self.diversity = diversity

    def _propose(self, size: int) -> list[int]:
        if len(self.costs) < self.initial or not self.model.trained:
            return self.space.random_indices(self.rng, size, exclude=self.visited)
        candidates = self._candidates(3 * size)
        if not candidates:
            return self.space.random_indices(self.rng, size, exclude=self.visited)
        scores = self.model.predict(self.features(candidates))
        chosen = self._diverse(candidates, scores, size)
        explore = sum(self.rng.random() < self.epsilon for _ in chosen)
        if explore:
            chosen = chosen[:len(chosen) - explore] + self.space.random_indices(
                self.rng, explore, exclude=self.visited | set(chosen))
        return chosen

    def _candidates(self, count: int) -> list[int]:
        if self.space.size <= self.exhaustive_limit:
            return [i for i in range(self.space.size) if i not in self.visited]
        return self._anneal(count)

    def _anneal(self, count: int) -> list[int]:
        """Unvisited configs with the best predicted scores that simulated annealing
        walks reach, starting from the best measured configs and random ones."""
        measured = sorted((c, i) for i, c in self.costs.items() if math.isfinite(c))
        starts = [i for _, i in measured[:self.walkers // 2]]
        starts += self.space.random_indices(self.rng, self.walkers - len(starts))
        points = np.array(starts)
        scores = self.model.predict(self.features(list(points)))
        found: dict[int, float] = {}
        for step in range(self.steps):
            temperature = 1.0 - step / self.steps
            proposals = np.array([self.space.neighbor(int(p), self.rng) for p in points])
            new_scores = self.model.predict(self.features(list(proposals)))
            accept = np.exp(np.minimum(new_scores - scores, 0) / max(temperature, 1e-3))
            take = self.rng.random(len(points)) < accept
            points = np.where(take, proposals, points)
            scores = np.where(take, new_scores, scores)
            for point, score in zip(proposals, new_scores):
                if int(point) not in self.visited:
                    found[int(point)] = float(score)
        return sorted(found, key=found.get, reverse=True)[:count]

    def _diverse(self, candidates: list[int], scores: np.ndarray, size: int) -> list[int]:
        """Greedy batch: each pick maximizes its score plus a bonus per knob value that
        no earlier pick of the batch has."""
        spread = float(scores.max() - scores.min()) or 1.0
        normalized = (scores - scores.min()) / spread
        digits = [self.space.digits(i) for i in candidates]
        covered: list[set[int]] = [set() for _ in self.space.knobs]
        chosen: list[int] = []
        available = list(range(len(candidates)))
        while available and len(chosen) < size:
            def gain(position: int) -> float:
                new = sum(d not in seen for d, seen in zip(digits[position], covered))
                return normalized[position] + self.diversity * new

            best = max(available, key=gain)
            available.remove(best)
            chosen.append(candidates[best])
            for seen, digit in zip(covered, digits[best]):
                seen.add(digit)
        return chosen


TUNERS: dict[str, type[Tuner]] = {
    tuner.name: tuner for tuner in (RandomTuner, GridTuner, GeneticTuner, XGBTuner)}


def make_tuner(name: str, task: Task, seed: int = 0, model: CostModel | None = None) -> Tuner:
    """The tuner called ``name`` for ``task`` (``model`` is shared by ``xgb`` tuners)."""
    if name not in TUNERS:
        raise InputError(f"no tuner {name!r}; choose one of {', '.join(TUNERS)}")
    if name == "xgb":
        return XGBTuner(task, seed=seed, model=model)
    return TUNERS[name](task, seed=seed)


@dataclass
class TuneProgress:
    """Where the tuning of one task stands (passed to the progress callback)."""

    task: Task
    trials: int
    total: int
    errors: int
    best_cost: float
    best_config: Config | None
    resumed: int = 0


def resume(task: Task, tuner: Tuner, log: RecordLog | None, trials: int,
           records: Sequence[MeasureRecord] | None = None) -> TuneProgress:
    """The progress of ``task`` as its records in ``log`` (or ``records``, read from it
    once for several tasks) leave it, taught to ``tuner``: every record counts as a
    trial, so a killed run resumes where it stopped. A config measured more than once
    (``remeasure_best``) is one trial, at its median cost."""
    if records is None:
        records = [] if log is None else log.records()
    history = reindexed(r for r in records if r.workload_key == task.workload_key)
    first_record = {}
    for record in history:
        first_record.setdefault(record.config_index, record)
    costs = config_costs(history).get(task.workload_key, {})
    previous = [(task.config_of(record.config), costs.get(index, math.inf), index not in costs)
                for index, record in first_record.items()]
    progress = TuneProgress(task, 0, trials, 0, math.inf, None, resumed=len(previous))
    if previous:
        tuner.update([c for c, _, _ in previous], [cost for _, cost, _ in previous])
        for config, cost, failed in previous:
            account(progress, config, cost, failed)
    return progress


def tune_task(task: Task, tuner: Tuner, measurer: Measurer | InProcessMeasurer, trials: int,
              log: RecordLog | None = None, batch_size: int = 8,
              callback: Callable[[TuneProgress], None] | None = None,
              first: Sequence[Config] = ()) -> TuneProgress:
    """Measure up to ``trials`` configs of ``task`` proposed by ``tuner``, appending each
    record to ``log``. Records of this task already in the log count as trials and
    teach the tuner (so a killed run resumes where it stopped). Configs of ``first`` not
    measured yet are measured before the tuner's proposals (and count as trials): pass
    ``[task.default_config()]`` so that the best found is never one slower than the
    hand-written schedule as measured by the same run."""
    progress = resume(task, tuner, log, trials)
    queued = [config for config in dict.fromkeys(first) if config.index not in tuner.visited]
    while progress.trials < trials and (queued or tuner.has_next()):
        batch = queued[:trials - progress.trials] or tuner.next_batch(
            min(batch_size, trials - progress.trials))
        queued = []
        if not batch:
            break

        def arrived(config: Config, result: MeasureResult) -> None:
            if log is not None:
                log.append(MeasureRecord(task.workload_key, config.to_json(), config.index,
                                         result.costs, result.error, result.message,
                                         tuner.name))
            account(progress, config, result.cost, result.error is not None)
            if callback is not None:
                callback(progress)

        if hasattr(measurer, "measure_batch"):  # a pool: the batch runs concurrently
            results = measurer.measure_batch(task, batch, arrived)
        else:
            results = []
            for config in batch:
                results.append(measurer.measure_one(task, config))
                arrived(config, results[-1])
        tuner.update(batch, [r.cost for r in results])
    return progress


def remeasure_best(task: Task, measurer: Measurer | InProcessMeasurer, log: RecordLog,
                   count: int = 4, rounds: int = 2, include: Sequence[Config] = (),
                   options: MeasureOptions | None = None) -> list[Config]:
    """Measure the fastest configs of ``task`` in ``log`` again until each of the
    ``count`` best ranked (and each of ``include``, e.g. the default) has ``rounds``
    more records than its first, appending every record; returns the final top
    ``count``, fastest first.

    On a shared machine the fastest first timing is often a lucky one. A config is
    ranked by the median of its records (:func:`.records.config_costs`), so a finalist
    whose luck does not repeat drops and the next in line is measured in turn; after
    this the log's best (what compilation applies) is the fastest over repeated
    measurements. Each pass measures the unconfirmed configs one after another (a
    change in load hits them alike); at most ``4 * count * rounds`` measurements.

    ``options``: how the finalists are timed; default the measurer's own options
    timing single calls (:func:`.measure.single_call_timing`: on a loaded machine the
    fastest of many single calls is what a kernel costs quiet, where the search's
    averaged samples rank its points by the load they met).

    A modelled cost (a template whose ``cost_unit`` is not seconds, e.g. an
    accelerator's cycles from its timing model) is the same every time it is measured:
    nothing is measured again."""
    wanted = 1 + rounds
    budget = 4 * count * rounds if task.definition.cost_unit == SECONDS else 0
    own = getattr(measurer, "options", None)
    if options is None and own is not None:
        options = single_call_timing(own)
    while True:
        records = reindexed(r for r in log.records()
                            if r.workload_key == task.workload_key)
        costs = config_costs(records).get(task.workload_key, {})
        seen = Counter(r.config_index for r in records if r.ok)
        ranked = sorted(costs, key=costs.get)
        finalists = list(dict.fromkeys([*ranked[:count],
                                        *(c.index for c in include if c.index in costs)]))
        pending = [index for index in finalists if seen[index] < wanted]
        if not pending or budget <= 0:
            return [task.space.get(index) for index in ranked[:count]]
        for index in pending[:budget]:
            config = task.space.get(index)
            result = (measurer.measure_one(task, config) if options is None
                      else measurer.measure_one(task, config, options))
            log.append(MeasureRecord(task.workload_key, config.to_json(), index,
                                     result.costs, result.error, result.message, REMEASURED))
            budget -= 1


def account(progress: TuneProgress, config: Config, cost: float, failed: bool) -> None:
    """Count one measured trial of ``config`` in ``progress``."""
    progress.trials += 1
    progress.errors += failed
    if cost < progress.best_cost:
        progress.best_cost, progress.best_config = cost, config
