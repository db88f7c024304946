import math

import pytest

from heterocc.targets.vta.tuning import vta_gemm_task
from heterocc.tuning.measure import MeasureOptions, Measurer, measure_in_process
from heterocc.tuning.task import Task
from tests.tuning import faulty_templates  # noqa: F401  (registers faulty_matmul here too)

SETUP = ("tests.tuning.faulty_templates",)


@pytest.fixture(scope="module")
def measurer():
    with Measurer(MeasureOptions(timeout_s=8, repeat=2), setup_modules=SETUP) as m:
        yield m


def test_errors_are_recorded_and_measurement_goes_on(measurer):
    task = Task("faulty_matmul", (8, 8, 8, "float32"))
    space = task.space
    by_behavior = {}
    for behavior in ("ok", "wrong", "crash", "ok", "hang", "ok"):
        result = measurer.measure_one(task, space.from_values({"behavior": behavior}))
        by_behavior.setdefault(behavior, []).append(result)
    assert all(r.ok and len(r.costs) == 2 and r.cost > 0 for r in by_behavior["ok"])
    assert by_behavior["wrong"][0].error == "wrong"
    assert "reference" in by_behavior["wrong"][0].message
    assert by_behavior["crash"][0].error == "crash"
    assert by_behavior["hang"][0].error == "timeout"
    assert math.isinf(by_behavior["hang"][0].cost)


def test_accelerator_candidates_are_checked_and_overflows_are_build_errors():
    from heterocc.targets.vta.tuning import VTA_GEMM  # noqa: F401

    task = vta_gemm_task(16, 64, 32, "1x16x16", False)
    ok = measure_in_process(task, task.default_config(), MeasureOptions())
    assert ok.ok and ok.cost > 0
    requantized = vta_gemm_task(16, 64, 32, "1x16x16", True)
    result = measure_in_process(requantized, requantized.default_config(), MeasureOptions())
    assert result.ok, result.message
    tall = vta_gemm_task(2048, 64, 32, "1x16x16", False)
    too_big = tall.space.from_values({"block_rows": 2048, "block_cols": 2, "k_chunk": 4,
                                      "virtual_threads": 2})
    result = measure_in_process(tall, too_big, MeasureOptions())
    assert result.error == "build" and "overflows" in result.message
