"""Tuning records: one JSON line per measured candidate, appended so that nothing is
lost under ``kill -9``.

Each record is written by a single ``os.write`` of the whole line (opened with
``O_APPEND``) followed by ``fsync``, so a killed writer leaves either the whole line or
(at worst, on a failing disk) an unterminated final fragment. Several processes may
append to one log at once (tuning workers, a second ``heterocc tune``): every writer
holds an exclusive ``flock`` on the file while it appends, and an unterminated final
fragment is cut off only under that lock (opening a log, and before each append), when
no writer can be in the middle of a line, so the cut never takes another process's
record. Readers take no lock: they skip an unparsable final line (a line being written,
or a fragment not yet cut), so a later run resumes from every complete record.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import InputError

#: version of the record format, written into every line
RECORD_VERSION = 1
#: tuner tags of the records that time a search's best (``PAIRED``) and the hand
#: schedule it competes with (``BASELINE``) in turn, close together: the pairs a target
#: decides between the two by (timings taken at other times met other loads)
PAIRED = "paired"
BASELINE = "baseline"
#: tuner tag of the records that measure a search's finalists again
#: (``tuners.remeasure_best``): no trials of their own
REMEASURED = "remeasure"


def fastest(costs: Sequence[float]) -> float:
    """What a candidate's timings rank it by: the fastest. Work of other processes on a
    shared machine only ever slows a timing, and it comes in bursts that hit some of a
    candidate's timings and not others (one of three 5x slower, the rest clean), so the
    fastest is the timing least disturbed; a median lets one burst in two timings
    decide and drops good points whenever the machine is busy."""
    return float(min(costs))


@dataclass(frozen=True)
class MeasureRecord:
    """One measured candidate: which task and config, its costs (seconds per call on
    the CPU, cycles on the accelerator) or the error that stopped it, and the hardware
    it was built and timed for (``target``: the tuned target's description, e.g. a CPU
    target string; empty where the target has one form, or in a log written before
    records named it)."""

    workload_key: str
    config: dict
    config_index: int
    costs: tuple[float, ...] = ()
    error: str | None = None
    message: str = ""
    tuner: str = ""
    timestamp: float = field(default_factory=time.time)
    target: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.costs)

    @property
    def cost(self) -> float:
        """The fastest of the record's timings (see :func:`fastest`), infinite
        for a failed candidate."""
        return fastest(self.costs) if self.ok else math.inf

    def to_json(self) -> dict:
        return {"v": RECORD_VERSION, "task": self.workload_key, "config": self.config,
                "index": self.config_index, "costs": list(self.costs), "error": self.error,
                "message": self.message, "tuner": self.tuner, "time": self.timestamp,
                **({"target": self.target} if self.target else {})}

    def is_for(self, target: str | None) -> bool:
        """Whether this record applies to ``target`` (None: any): records that name no
        target apply everywhere, as they did before records named one."""
        return target is None or not self.target or self.target == target

    @classmethod
    def from_json(cls, data: dict) -> MeasureRecord:
        return cls(data["task"], dict(data["config"]), int(data["index"]),
                   tuple(float(c) for c in data["costs"]), data.get("error"),
                   data.get("message", ""), data.get("tuner", ""), float(data.get("time", 0)),
                   str(data.get("target", "")))


class RecordLog:
    """An append-only JSON-lines log of records at ``path`` (created when missing).
    ``target``: the tuned target's description, written into every record appended
    (see :attr:`MeasureRecord.target`); :meth:`records` reads back the ones for it, so
    one log can hold the tunings of several CPUs."""

    def __init__(self, path: str | Path, target: str = ""):
        self.path = Path(path)
        self.target = target
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        with _exclusive(self._fd):
            _drop_torn_tail(self._fd)

    def append(self, record: MeasureRecord) -> None:
        """Write ``record`` (for this log's target) as one line and make it durable
        before returning."""
        if self.target and not record.target:
            record = replace(record, target=self.target)
        line = (json.dumps(record.to_json(), separators=(",", ":")) + "\n").encode()
        with _exclusive(self._fd):
            _drop_torn_tail(self._fd)  # a writer killed since we opened the log
            written = os.write(self._fd, line)
            if written != len(line):
                raise InputError(f"tuning log {self.path}: wrote {written} of {len(line)} "
                                 "bytes (disk full?); free space and resume")
            os.fsync(self._fd)

    def records(self) -> list[MeasureRecord]:
        """The complete records of the log that apply to its target."""
        return read_records(self.path, self.target or None)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> RecordLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@contextlib.contextmanager
def _exclusive(fd: int):
    """The log's exclusive lock (``flock``: released by the kernel if the holder dies)."""
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


#: bytes read at a time while looking back for the end of the last whole line
_TAIL_CHUNK = 1 << 16


def _drop_torn_tail(fd: int) -> None:
    """Cut an unterminated final line (a write a killed writer never finished). Only
    under :func:`_exclusive`: then no live writer is in the middle of a line."""
    end = os.fstat(fd).st_size
    if end == 0 or os.pread(fd, 1, end - 1) == b"\n":
        return
    position = end
    while position > 0:
        start = max(0, position - _TAIL_CHUNK)
        newline = os.pread(fd, position - start, start).rfind(b"\n")
        if newline >= 0:
            os.ftruncate(fd, start + newline + 1)
            return
        position = start
    os.ftruncate(fd, 0)


def read_records(path: str | Path, target: str | None = None) -> list[MeasureRecord]:
    """Every complete record of the log at ``path`` (none when it does not exist; only
    those for ``target`` when given, see :meth:`MeasureRecord.is_for`). An unparsable
    final line is a torn write and is skipped; an unparsable line elsewhere means the
    file is not a tuning log, which raises InputError."""
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_bytes().split(b"\n")
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(MeasureRecord.from_json(json.loads(line)))
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError):
            if number == len(lines):
                continue
            raise InputError(f"tuning log {path}, line {number}: not a tuning record; pass a "
                             "log written by `heterocc tune`") from None
    return [record for record in records if record.is_for(target)]


def config_costs(records: Iterable[MeasureRecord]) -> dict[str, dict[int, float]]:
    """Per task, per config index, the median cost of the config's successful records.
    A config measured again (see ``tuners.remeasure_best``) is ranked by all its
    measurements, so that one lucky timing on a shared machine does not decide."""
    costs: dict[str, dict[int, list[float]]] = {}
    for record in records:
        if record.ok:
            costs.setdefault(record.workload_key, {}).setdefault(
                record.config_index, []).append(record.cost)
    return {key: {index: statistics.median(seen) for index, seen in by_config.items()}
            for key, by_config in costs.items()}


def best_records(records: Iterable[MeasureRecord]) -> dict[str, MeasureRecord]:
    """A successful record of the best config of every task (the config of lowest
    :func:`config_costs`; its fastest record)."""
    records = [record for record in records if record.ok]
    best: dict[str, MeasureRecord] = {}
    for key, costs in config_costs(records).items():
        index = min(costs, key=costs.get)
        best[key] = min((r for r in records
                         if r.workload_key == key and r.config_index == index),
                        key=lambda r: r.cost)
    return best


def best_configs(path: str | Path) -> dict[str, MeasureRecord]:
    """The best record of every task in the log at ``path``."""
    return best_records(read_records(path))
