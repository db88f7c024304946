"""A run's profile as files other tools open: JSON and CSV tables (one row per node), and a
Chrome trace (``chrome://tracing``, https://ui.perfetto.dev) with one span per call.

    compiled.enable_profiling(); compiled.run(x)
    write_profile("profile.csv", compiled.profile_entries())
    write_profile("trace.json", compiled.profile_entries(), trace=True)

The spans are wall-clock times measured on the host around each kernel call; a device
kernel's ``cycles`` and bytes moved (what the device reports of its last call) ride along
as the span's arguments.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from pathlib import Path

from .errors import InputError
from .runtime.executor import ProfileEntry

#: the columns of the JSON and CSV tables, before the device counters
COLUMNS = ("node", "op", "target", "calls", "total_ms", "ms_per_call", "share")


def profile_rows(entries: Sequence[ProfileEntry]) -> list[dict]:
    """One dict per node, slowest first: :data:`COLUMNS`, then each device counter
    (``cycles``, ``bytes_in``, ...) per call."""
    total = sum(e.seconds for e in entries) or 1.0
    rows = []
    for e in sorted(entries, key=lambda e: -e.seconds):
        calls = max(e.calls, 1)
        row = {"node": e.node, "op": e.op, "target": e.target, "calls": e.calls,
               "total_ms": round(e.seconds * 1e3, 6),
               "ms_per_call": round(e.seconds * 1e3 / calls, 6),
               "share": round(e.seconds / total, 6)}
        row.update({k: v / calls for k, v in sorted(e.extra.items())})
        rows.append(row)
    return rows


def profile_csv(entries: Sequence[ProfileEntry]) -> str:
    """The rows of :func:`profile_rows` as CSV, with a header (counters a node lacks are
    empty)."""
    rows = profile_rows(entries)
    counters = sorted({k for r in rows for k in r} - set(COLUMNS))
    out = io.StringIO()
    writer = csv.DictWriter(out, [*COLUMNS, *counters], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def chrome_trace(entries: Sequence[ProfileEntry]) -> dict:
    """The calls as Chrome trace events (complete events, microseconds from the first
    call), one track (``tid``) per target, the node's op and counters as arguments."""
    starts = [start for e in entries for start, _ in e.spans]
    origin = min(starts, default=0.0)
    tracks = {t: i for i, t in enumerate(sorted({e.target for e in entries}))}
    events = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": i, "args": {"name": t}}
              for t, i in tracks.items()]
    for e in entries:
        calls = max(e.calls, 1)
        args = {"op": e.op, **{k: v / calls for k, v in e.extra.items()}}
        events += [{"name": e.node, "cat": e.target, "ph": "X", "pid": 0,
                    "tid": tracks[e.target], "ts": round((start - origin) * 1e6, 3),
                    "dur": round(seconds * 1e6, 3), "args": args}
                   for start, seconds in e.spans]
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_profile(path: str | Path, entries: Sequence[ProfileEntry],
                  trace: bool = False) -> None:
    """Write the profile to ``path``: a Chrome trace with ``trace``, else a table by the
    suffix, ``.csv`` or ``.json``."""
    path = Path(path)
    if not entries:
        raise InputError(f"no profile to write to {path}: enable profiling and run first")
    if trace:
        path.write_text(json.dumps(chrome_trace(entries)))
    elif path.suffix == ".csv":
        path.write_text(profile_csv(entries))
    elif path.suffix == ".json":
        path.write_text(json.dumps(profile_rows(entries), indent=1))
    else:
        raise InputError(f"profile file {path}: name it .csv or .json (or write a Chrome "
                         "trace)")
