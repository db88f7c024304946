import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from heterocc.errors import InputError
from heterocc.tuning.measure import Measurer, MeasureResult
from heterocc.tuning.records import (
    MeasureRecord,
    RecordLog,
    best_configs,
    config_costs,
    read_records,
)
from heterocc.tuning.task import Task
from heterocc.tuning.tuners import RandomTuner, tune_task

KEY = '["matmul",4,4,4,"float32"]'


def _record(index, cost):
    return MeasureRecord(KEY, {"i": index}, index, (cost,) if cost else (),
                         None if cost else "build", "" if cost else "failed")


def test_append_read_and_best(tmp_path):
    path = tmp_path / "log.jsonl"
    with RecordLog(path) as log:
        for index, cost in enumerate([3.0, None, 1.0, 2.0]):
            log.append(_record(index, cost))
    records = read_records(path)
    assert [r.config_index for r in records] == [0, 1, 2, 3]
    assert records[1].error == "build" and not records[1].ok
    assert best_configs(path)[KEY].config_index == 2


def test_a_candidate_ranks_by_its_fastest_timing():
    """One of three timings slowed several-fold by a burst of other work (the median of
    the steady one is slower) does not drop a candidate: results and records rank by
    their fastest timing, and a config measured again by the median of those."""
    bursty, steady = (1.0, 5.0, 5.2), (1.5, 1.5, 1.6)
    assert MeasureResult(costs=bursty).cost == 1.0 < MeasureResult(costs=steady).cost
    records = [MeasureRecord(KEY, {"i": 0}, 0, bursty), MeasureRecord(KEY, {"i": 1}, 1, steady),
               MeasureRecord(KEY, {"i": 0}, 0, (1.2, 6.0, 6.0)),
               MeasureRecord(KEY, {"i": 1}, 1, (1.4, 1.5, 1.5))]
    assert records[0].cost == 1.0 and not MeasureRecord(KEY, {}, 2, (), "build").ok
    costs = config_costs(records)[KEY]
    assert costs == {0: pytest.approx(1.1), 1: pytest.approx(1.45)}


def test_torn_final_line_is_ignored_and_cut_before_appending(tmp_path):
    path = tmp_path / "log.jsonl"
    with RecordLog(path) as log:
        log.append(_record(0, 1.0))
    with open(path, "ab") as handle:
        handle.write(b'{"v":1,"task":"[\\"mat')
    assert len(read_records(path)) == 1
    with RecordLog(path) as log:
        log.append(_record(1, 2.0))
    assert [r.config_index for r in read_records(path)] == [0, 1]
    assert path.read_bytes().count(b"\n") == 2


def test_garbage_in_the_middle_is_an_error(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text("not json\n" + json.dumps(_record(0, 1.0).to_json()) + "\n")
    with pytest.raises(InputError, match="line 1"):
        read_records(path)


CHILD = textwrap.dedent("""
    import sys
    from heterocc.tuning.measure import Measurer, MeasureOptions
    from heterocc.tuning.records import RecordLog
    from heterocc.tuning.task import Task
    from heterocc.tuning.tuners import RandomTuner, tune_task

    if __name__ == "__main__":
        task = Task("matmul", (8, 8, 8, "float32"))
        with Measurer(MeasureOptions(repeat=1)) as measurer, RecordLog(sys.argv[1]) as log:
            tune_task(task, RandomTuner(task, seed=1), measurer, 500, log=log, batch_size=2)
""")


def test_kill_9_mid_run_loses_nothing_and_resumes(tmp_path):
    path = tmp_path / "log.jsonl"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    child = subprocess.Popen([sys.executable, str(script), str(path)])
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (
                not path.exists() or path.read_bytes().count(b"\n") < 3):
            time.sleep(0.05)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    data = path.read_bytes()
    complete = data.count(b"\n")
    assert complete >= 3
    records = read_records(path)
    assert len(records) == complete  # every acknowledged record is whole
    task = Task("matmul", (8, 8, 8, "float32"))
    total = complete + 2
    with Measurer() as measurer, RecordLog(path) as log:
        progress = tune_task(task, RandomTuner(task, seed=2), measurer, total, log=log,
                             batch_size=2)
    assert progress.resumed == complete and progress.trials == total
    resumed = read_records(path)
    assert len(resumed) == total
    indices = [r.config_index for r in resumed]
    assert len(set(indices)) == total  # resuming never re-measures a config


def _append_many(path, worker: int, count: int, barrier) -> None:
    """Open the log afresh for every record (each open repairs a torn tail), as
    separate tuning runs and workers do."""
    barrier.wait()
    for k in range(count):
        with RecordLog(path) as log:
            # long lines: a reader may see one half written
            log.append(MeasureRecord(f"task{worker}", {"k": k, "pad": "x" * 100_000}, k,
                                     (1e-3,)))


def _tear_tails(path: str, count: int, barrier) -> None:
    """A writer killed mid-line, ``count`` times: an unterminated fragment appended
    under the log's lock, as a killed writer leaves it."""
    import fcntl

    barrier.wait()
    for _ in range(count):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, b'{"v":1,"task":"torn","conf')
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def test_concurrent_opens_and_appends_lose_no_record(tmp_path):
    import multiprocessing

    path = str(tmp_path / "shared.jsonl")
    writers, per_writer = 4, 40
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(writers + 1)
    processes = [context.Process(target=_append_many, args=(path, w, per_writer, barrier))
                 for w in range(writers)]
    processes.append(context.Process(target=_tear_tails, args=(path, 30, barrier)))
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
    assert [p.exitcode for p in processes] == [0] * len(processes)
    records = read_records(path)
    assert all(r.workload_key != "torn" for r in records)
    by_worker = {w: sorted(r.config_index for r in records if r.workload_key == f"task{w}")
                 for w in range(writers)}
    assert by_worker == {w: list(range(per_writer)) for w in range(writers)}
