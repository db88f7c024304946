"""Applying a tuning log at compile time: the best measured config of each task.

``with ApplyHistoryBest("tune.jsonl"): heterocc.compile(...)`` makes the log's best
configs current for the code inside the block; targets then ask :func:`lookup` (through
their own helpers, e.g. ``heterocc.targets.llvm.tuning.schedule_matmul_tuned``) for the
config of a workload and fall back to their default schedule when it has none. The
current context is a ``ContextVar``, so threads and nested blocks each see their own.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from .records import MeasureRecord, config_costs, read_records
from .space import Config
from .task import Task, reindexed

_CURRENT: contextvars.ContextVar[ApplyHistoryBest | None] = contextvars.ContextVar(
    "heterocc_tuning_context", default=None)
#: the hardware being compiled or tuned for, as records name it (None: not said)
_RECORD_TARGET: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "heterocc_record_target", default=None)


@contextlib.contextmanager
def records_for(target: str | None) -> Iterator[None]:
    """Inside the block, the applied log offers only records for ``target`` (and those
    that name no target): a target enters it while it compiles for one description of
    its hardware (the CPU target: its CPU), so that records tuned for another CPU, or on
    another machine, never apply."""
    token = _RECORD_TARGET.set(target)
    try:
        yield
    finally:
        _RECORD_TARGET.reset(token)


def record_target() -> str | None:
    """The target :func:`records_for` set here, if any."""
    return _RECORD_TARGET.get()


@dataclass
class _Index:
    """The successful records of one target, best config first per task."""

    #: every successful record per task, in log order
    records: dict[str, list[MeasureRecord]]
    by_task: dict[str, list[MeasureRecord]]
    best_cost: dict[str, float]
    #: the fastest single timing of each config: what it costs when nothing else
    #: takes the cores (a timing disturbed by other work is only ever slower)
    floor: dict[tuple[str, int], float]


def _index(records: list[MeasureRecord]) -> _Index:
    first_record: dict[tuple[str, int], MeasureRecord] = {}
    floor: dict[tuple[str, int], float] = {}
    in_order: dict[str, list[MeasureRecord]] = {}
    for record in records:
        if record.ok:
            in_order.setdefault(record.workload_key, []).append(record)
            where = (record.workload_key, record.config_index)
            first_record.setdefault(where, record)
            floor[where] = min(floor.get(where, math.inf), *record.costs)
    by_cost = config_costs(records)
    return _Index(in_order,
                  {key: [first_record[key, index] for index in sorted(costs, key=costs.get)]
                   for key, costs in by_cost.items()},
                  {key: min(costs.values()) for key, costs in by_cost.items()}, floor)


class ApplyHistoryBest:
    """The successfully measured configs of a log (a path, or records), best first per
    task; a config measured several times is ranked by the median of its records
    (:func:`.records.config_costs`). Where a target said which hardware it compiles for
    (:func:`records_for`), only the records for it count."""

    def __init__(self, log: str | Path | Iterable[MeasureRecord]):
        self._records = reindexed(read_records(log) if isinstance(log, str | Path) else log)
        self._indexes: dict[str | None, _Index] = {}
        self._token = None

    def _current(self) -> _Index:
        target = record_target()
        if target not in self._indexes:
            self._indexes[target] = _index([r for r in self._records if r.is_for(target)])
        return self._indexes[target]

    @property
    def workload_keys(self) -> list[str]:
        return list(self._current().by_task)

    def lookup(self, key: str, where: Callable[[Config], bool] | None = None) -> Config | None:
        """The fastest config of task ``key`` (satisfying ``where`` when given), or None."""
        records = self._current().by_task.get(key)
        if not records:
            return None
        task = Task.from_key(key)
        for record in records:
            try:
                config = task.config_of(record.config)
            except InputError:  # written for an earlier form of the space: not a point
                continue
            if where is None or where(config):
                return config
        return None

    def records(self, key: str, tuner: str | None = None) -> list[MeasureRecord]:
        """The successful records of task ``key`` in log order (those a ``tuner`` tag
        wrote, when given)."""
        return [r for r in self._current().records.get(key, ())
                if tuner is None or r.tuner == tuner]

    def floor_cost(self, key: str, index: int) -> float | None:
        """The fastest single timing of config ``index`` of task ``key`` in the log."""
        return self._current().floor.get((key, index))

    def best_cost(self, key: str) -> float | None:
        """The cost of task ``key``'s best config (None without a successful record)."""
        return self._current().best_cost.get(key)

    def best_of(self, keys: Iterable[str]) -> tuple[str | None, Config | None]:
        """Among tasks ``keys`` (e.g. one workload's template and auto-search keys), the
        one whose best config is fastest, and that config; ``(None, None)`` when none
        has a successful record. Records of the two searches time the same workload,
        so their costs compare."""
        found = [(cost, key) for key in keys if (cost := self.best_cost(key)) is not None]
        for _, key in sorted(found):
            config = self.lookup(key)
            if config is not None:  # else its records do not fit today's space
                return key, config
        return None, None

    def __enter__(self) -> ApplyHistoryBest:
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc) -> None:
        _CURRENT.reset(self._token)


def current() -> ApplyHistoryBest | None:
    """The tuning log applied here, if any."""
    return _CURRENT.get()


def lookup(key: str, where: Callable[[Config], bool] | None = None) -> Config | None:
    """The best config of workload ``key`` in the current log (None outside one, or when
    the log has no successful record of it)."""
    context = current()
    return None if context is None else context.lookup(key, where)


def best_of(keys: Iterable[str]) -> tuple[str | None, Config | None]:
    """:meth:`ApplyHistoryBest.best_of` of the current log; ``(None, None)`` outside
    one."""
    context = current()
    return (None, None) if context is None else context.best_of(keys)
