"""The CPU's estimates for placement by cost read the kernel times a tuning log measured
(the log ``heterocc tune`` writes and ``compile`` applies), where it has them."""

from __future__ import annotations

import numpy as np
import pytest

import heterocc
from heterocc.targets import parse_targets
from heterocc.targets.llvm import LLVMTarget
from heterocc.targets.llvm import cost as cpu_cost
from heterocc.tuning.extract import extract_tasks
from heterocc.tuning.records import MeasureRecord, RecordLog
from heterocc.tuning.task import Task
from tests.tuning.test_function_tasks import _conv_model as conv_model


@pytest.fixture(autouse=True)
def cost_cache(tmp_path, monkeypatch):
    """Every estimate cached under the test's own directory, never the user's."""
    monkeypatch.setenv("HETEROCC_CACHE_DIR", str(tmp_path / "cache"))


def _conv_model():
    """Conv + bias + ReLU6: one fused CPU function with a function tuning task."""
    return conv_model(np.random.default_rng(0))


def _log(path, model, costs, target: str = ""):
    """A log holding one record of the model's function under the hand schedule (what
    compile builds without an auto record) with the timings ``costs``."""
    (task,) = extract_tasks(model, search="auto")
    hand = Task("function", task.args)
    with RecordLog(path) as log:
        log.append(MeasureRecord(hand.workload_key, {"schedule": "hand"},
                                 hand.default_config().index, costs, target=target))
    return str(path)


def _cpu_rows(compiled):
    report = compiled.placement_report
    report.plan.complete()  # the figures placing did not need: the CPU's, here
    return {p.op: p.estimates["llvm"] for p in report.placements if "llvm" in p.estimates}


def test_cpu_estimate_reads_the_kernel_time_the_tuning_log_measured(tmp_path):
    model = _conv_model()
    # timings no kernel of this size takes here: only the log can have given them
    log = _log(tmp_path / "tune.jsonl", model, (0.25, 0.125))
    placed = heterocc.compile(model, target="vta,llvm", placement="cost", tuning_log=log)
    rows = _cpu_rows(placed)
    assert rows["Conv"].source == cpu_cost.LOGGED
    # the function's fastest logged timing, shared between its nodes by their weight
    total = placed.placement_report.plan.totals()["all_cpu_ms"]
    assert total == pytest.approx(125.0)
    assert rows["Conv"].total_s > rows["Clip"].total_s > 0
    # without the log the same function is measured here, and the log's figures are
    # cached apart from the measured ones (the cache is warm for both now)
    measured = heterocc.compile(model, target="vta,llvm", placement="cost")
    assert _cpu_rows(measured)["Conv"].source.startswith(cpu_cost.MEASURED)
    assert measured.placement_report.plan.totals()["all_cpu_ms"] < 50
    again = heterocc.compile(model, target="vta,llvm", placement="cost", tuning_log=log)
    assert _cpu_rows(again)["Conv"].source == f"{cpu_cost.LOGGED} (cached)"
    assert again.placement_report.plan.totals()["all_cpu_ms"] == pytest.approx(125.0)
    x = np.random.default_rng(1).standard_normal((1, 16, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(placed.run([x])[0], measured.run([x])[0])


def test_records_of_another_cpu_are_not_read(tmp_path):
    model = _conv_model()
    other = parse_targets("llvm -mcpu=znver3")[0].tuning_key
    assert other != LLVMTarget().tuning_key
    log = _log(tmp_path / "tune.jsonl", model, (0.125,), target=other)
    placed = heterocc.compile(model, target="vta,llvm", placement="cost", tuning_log=log)
    assert _cpu_rows(placed)["Conv"].source == cpu_cost.MEASURED
    assert placed.placement_report.plan.totals()["all_cpu_ms"] < 50
