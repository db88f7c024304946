"""The task scheduler: one trial budget for a whole model, spent where it cuts the
estimated end-to-end latency most (the gradient scheme of the Ansor paper).

The estimated latency of the model is ``sum(weight_i * best_i)`` over its tasks (weight:
how often the model runs the task). Every task is first given one batch; after that
each round goes to the task with the largest estimated gain per trial,

    weight * (alpha * backward + (1 - alpha) * forward)

where ``backward`` is how much its best cost fell per trial over its last ``window``
trials and ``forward`` an optimistic guess: the larger of what its trials gained on
average so far (``best / trials``) and how far its best is from the cost it would have
at ``1 / beta`` of the best throughput a similar task (the same template and kind of
workload, e.g. another depthwise convolution) has reached so far
(``best - beta * flops / peak``), spread over a ``window`` of trials (Ansor's rounds)
or over the trials since the task last improved where those are more. The second term
is Ansor's: a task whose best is far below what its kind reaches elsewhere has room
left, however many trials it has had (a cheap task, given few trials by the first
term, whose first points were poor); it fades while the task finds nothing better. A
task whose best has not improved for ``early_stop`` trials, or whose space is
exhausted, gets no more.

A batch starts with up to ``transfer`` of the similar tasks' best points carried into
the task's space (:meth:`TaskScheduler.transfers`), ahead of its tuner's proposals.

The next batch is proposed (its candidates scored by the cost model) while the last one
is measured, for another task (:meth:`TaskScheduler.run`).

A pool that exposes its ``options`` measures each candidate of a timed task under its
:func:`~.measure.candidate_limits` as the candidate starts: candidates far slower than
the task's best so far are timed by one call, and the time-out follows what the task's
candidates take.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from ..errors import InputError
from .measure import MeasureResult, candidate_limits
from .records import MeasureRecord, RecordLog
from .space import Config
from .task import Task
from .templates import SECONDS
from .tuners import TuneProgress, Tuner, account, resume

#: Ansor's beta: a task is expected to reach at least ``1 / PEAK_BETA`` of the best
#: throughput (flops per unit of cost) that a similar task has reached
PEAK_BETA = 2.0

#: how many of a batch's points are the best points of similar tasks carried over
#: (:meth:`TaskScheduler.transfers`), ahead of the tuner's own proposals
TRANSFERS_PER_BATCH = 2


@dataclass
class TaskState:
    """Where one task of the schedule stands."""

    task: Task
    tuner: Tuner
    progress: TuneProgress
    best_history: list[float] = field(default_factory=list)
    stalled: int = 0
    done: bool = False
    #: seconds the slowest successful measurement of the task took (build included)
    slowest_s: float = 0.0
    #: the task's flops (``Task.flops``, counted once: a function task's reads its graph)
    flops: int = 0

    @property
    def weighted_cost(self) -> float:
        return self.task.weight * self.progress.best_cost

    @property
    def throughput(self) -> float:
        """Flops per unit of cost of the task's best point (0 where unknown)."""
        best = self.progress.best_cost
        return self.flops / best if self.flops > 0 and 0 < best < math.inf else 0.0


def similarity(task: Task) -> tuple:
    """Which tasks are alike for the scheduler's expected peak: the same template and,
    where its first argument names the kind of workload (a function task's op, e.g.
    ``depthwise_conv2d_nchwc``), the same kind."""
    kind = task.args[0] if task.args and isinstance(task.args[0], str) else None
    return task.template, kind


class TaskScheduler:
    """Spend ``trials`` measurements over ``tasks`` (each with its own tuner, e.g. an
    :class:`~.auto.EvolutionaryTuner`) through ``pool`` (a :class:`~.pool.LocalPool` or
    :class:`~.pool.RayPool`), appending every record to ``log`` as it arrives.
    ``first``: configs to measure first per task (by workload key; e.g. the default).
    ``callback(scheduler)`` is called after every result."""

    def __init__(self, tasks: Sequence[Task], tuners: Sequence[Tuner], pool, trials: int,
                 log: RecordLog | None = None, batch_size: int = 8,
                 early_stop: int | None = None, alpha: float = 0.2, window: int | None = None,
                 first: dict[str, Sequence[Config]] | None = None,
                 callback: Callable[[TaskScheduler], None] | None = None,
                 transfer: int = TRANSFERS_PER_BATCH):
        self.pool, self.trials, self.log = pool, trials, log
        self.batch_size, self.early_stop, self.alpha = batch_size, early_stop, alpha
        if transfer < 0:
            raise InputError(f"transfer is {transfer}: give how many points of similar tasks "
                             "a batch may carry over, 0 or more")
        self.transfer = transfer
        self.window = window or batch_size
        self.callback = callback
        self.first = first or {}
        records = [] if log is None else log.records()
        self.states = []
        for task, tuner in zip(tasks, tuners):
            progress = resume(task, tuner, log, trials, records)
            state = TaskState(task, tuner, progress, flops=task.flops)
            state.best_history = [progress.best_cost] * progress.trials
            self.states.append(state)

    # ------------------------------------------------------------------ estimates

    @property
    def spent(self) -> int:
        return sum(state.progress.trials for state in self.states)

    def estimated_latency(self) -> float:
        """``sum(weight * best cost)``; infinite while a task has no successful trial."""
        return sum(state.weighted_cost for state in self.states)

    def gradient(self, state: TaskState) -> float:
        """Estimated latency gain per trial of one more batch of ``state``'s task."""
        history = state.best_history
        if not history or not math.isfinite(state.progress.best_cost):
            return math.inf
        best = state.progress.best_cost
        then = history[max(0, len(history) - 1 - self.window)]
        steps = min(self.window, len(history) - 1) or 1
        backward = (then - best) / steps if math.isfinite(then) else best / len(history)
        forward = best / len(history)
        peak = self.peak_throughput(state)
        if peak > 0:
            gap = best - PEAK_BETA * state.flops / peak
            forward = max(forward, gap / max(self.window, state.stalled))
        return state.task.weight * (self.alpha * backward + (1 - self.alpha) * forward)

    def peak_throughput(self, state: TaskState) -> float:
        """The best throughput a task similar to ``state``'s (:func:`similarity`; itself
        included) has reached; 0 where none is known (no flops, no result yet)."""
        return max((other.throughput for other in self.similar(state)), default=0.0)

    def similar(self, state: TaskState) -> list[TaskState]:
        """The states of the tasks similar to ``state``'s (:func:`similarity`), itself
        included."""
        kind = similarity(state.task)
        return [other for other in self.states if similarity(other.task) == kind]

    def transfers(self, state: TaskState) -> list[Config]:
        """The best points of the tasks similar to ``state``'s (:func:`similarity`), each
        carried into its space (:meth:`~.space.ConfigSpace.adopt`: each knob keeps the
        other point's choice where this space offers it, else takes this task's own best
        point's, where it has one), those its tuner has not measured and its sampling
        rules admit, the fastest donors (by throughput) first.

        Tasks of one kind in a model (its 1x1 convolutions, its depthwise ones) are
        fast at much the same points, while a search gives each only tens of trials: a
        point one of them found is worth measuring on the others. After a 1000-trial
        MobileNetV2 search from scratch whose picks summed to 0.89x the hand schedules'
        speed, each task keeping the faster of its own pick and the similar tasks'
        best points summed to 1.05x (docs/tuning.md)."""
        task, visited = state.task, state.tuner.visited
        own = state.progress.best_config
        rule = task.definition.admissible
        donors = sorted((other for other in self.similar(state)
                         if other is not state and other.progress.best_config is not None),
                        key=lambda other: other.throughput, reverse=True)
        found: dict[int, Config] = {}
        for donor in donors:
            config = task.space.adopt(donor.progress.best_config.values,
                                      own.values if own is not None else None)
            if (config is not None and config.index not in visited
                    and (rule is None or rule(task.args, config.values))):
                found.setdefault(config.index, config)
        return list(found.values())

    def next_state(self, busy: TaskState | None = None) -> TaskState | None:
        """The task that gets the next batch (None when every task is done); ``busy``:
        a task whose batch is being measured, which waits for its results."""
        live = [s for s in self.states if not s.done and s is not busy]
        if not live:
            return None
        untried = [s for s in live if s.progress.trials == 0]
        if untried:
            return untried[0]
        return max(live, key=self.gradient)

    # ------------------------------------------------------------------ running

    def run(self) -> list[TaskState]:
        """Measure until the budget is spent or every task is done; returns the states.

        The next batch is proposed while the last one is measured (in a thread of this
        process; the candidates build and run in the pool's workers): a model-guided
        proposal scores a hundred candidates or more, about as long as measuring a
        batch takes, and the two overlapped spend each trial's time once. The proposal
        goes to another task than the one being measured (that one waits for its
        results), chosen on the results in so far, and its tuner's cost model has not
        yet learnt from the batch in flight: one batch behind, as Ansor's measurements
        are."""
        flight: tuple[TaskState, list[Config], Future] | None = None
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="measure") as measuring:
            while True:
                state, batch = self._proposal(flight)
                if flight is not None:
                    self._finish(*flight)
                if not batch:
                    if flight is None:
                        break
                    flight = None  # its results may free a task or the budget
                    continue
                run = contextvars.copy_context().run  # the tuning context, in the thread
                flight = (state, batch, measuring.submit(run, self._measure, state, batch))
        return self.states

    def _proposal(self, flight) -> tuple[TaskState | None, list[Config]]:
        """The next task and its batch, the budget of the batch in ``flight`` held back;
        no batch when the budget is spent or no other task can take one now."""
        busy, holding = (flight[0], len(flight[1])) if flight is not None else (None, 0)
        while True:
            left = self.trials - self.spent - holding
            state = self.next_state(busy) if left > 0 else None
            if state is None:
                return None, []
            batch = self._batch(state, min(self.batch_size, left))
            if batch:
                return state, batch
            state.done = True

    def _batch(self, state: TaskState, size: int) -> list[Config]:
        """The task's configs to measure first (``first``) not yet measured, then up to
        ``transfer`` of its similar tasks' best points (:meth:`transfers`), then its
        tuner's proposals, ``size`` in all."""
        tuner, task = state.tuner, state.task
        queued = [c for c in dict.fromkeys(self.first.get(task.workload_key, ()))
                  if c.index not in tuner.visited]
        if self.transfer:
            queued += self.transfers(state)[:self.transfer]
        batch = list(dict.fromkeys(queued))[:size]
        if batch:
            tuner.visited.update(c.index for c in batch)
        if len(batch) < size and tuner.has_next():
            batch += tuner.next_batch(size - len(batch))
        return batch

    def _measure(self, state: TaskState, batch: list[Config]) -> list[MeasureResult]:
        """Measure ``batch`` of ``state``'s task through the pool, logging and accounting
        each result as it arrives."""
        tuner, task = state.tuner, state.task

        def arrived(config: Config, result: MeasureResult) -> None:
            if self.log is not None:
                self.log.append(MeasureRecord(task.workload_key, config.to_json(),
                                              config.index, result.costs, result.error,
                                              result.message, tuner.name))
            if result.ok:
                state.slowest_s = max(state.slowest_s, result.elapsed_s)
            before = state.progress.best_cost
            account(state.progress, config, result.cost, result.error is not None)
            state.best_history.append(state.progress.best_cost)
            state.stalled = 0 if state.progress.best_cost < before else state.stalled + 1
            if self.callback is not None:
                self.callback(self)

        options = getattr(self.pool, "options", None)
        if options is None or task.definition.cost_unit != SECONDS:  # modelled: no limits
            return self.pool.measure_batch(task, batch, arrived)

        def limits():  # as each candidate starts: the batch's earlier ones count
            return candidate_limits(options, state.progress.best_cost, state.slowest_s,
                                    task.flops)

        return self.pool.measure_batch(task, batch, arrived, options=limits)

    def _finish(self, state: TaskState, batch: list[Config], measured: Future) -> None:
        """Wait for the batch's results and teach the task's tuner."""
        results = measured.result()
        state.tuner.update(batch, [r.cost for r in results])
        if self.early_stop is not None and state.stalled >= self.early_stop:
            state.done = True
        if not state.tuner.has_next():
            state.done = True
