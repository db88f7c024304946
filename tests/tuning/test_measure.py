import math

import pytest

from heterocc.errors import InputError
from heterocc.targets.vta.tuning import vta_gemm_task
from heterocc.tuning import measure
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


def test_a_crashed_worker_is_replaced_at_once_by_a_standby():
    """After a candidate kills its worker, the successor is spawned before the next
    candidate comes (it starts while the tuner works), then measures it; closing the
    measurer ends the standby too."""
    task = Task("faulty_matmul", (8, 8, 8, "float32"))
    with Measurer(MeasureOptions(timeout_s=8, repeat=1), setup_modules=SETUP) as m:
        crashed = m.measure_one(task, task.space.from_values({"behavior": "crash"}))
        assert crashed.error == "crash"
        standby = m._process
        assert standby is not None and standby.is_alive() and not m._ready
        assert m.measure_one(task, task.space.from_values({"behavior": "ok"})).ok
        assert m._process is standby  # the standby measured it, no other was started
    assert m._process is None and not standby.is_alive()


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


class _FakeClock:
    """A clock that only the fake calls move: a call lasts 1 s, a flush 100 s."""

    def __init__(self):
        self.now = 0.0
        self.events = []

    def perf_counter(self):
        return self.now

    def call(self):
        self.events.append("call")
        self.now += 1.0

    def flush(self):
        self.events.append("flush")
        self.now += 100.0


def test_a_flushed_timing_flushes_before_every_call_and_counts_only_the_calls(monkeypatch):
    clock = _FakeClock()
    monkeypatch.setattr(measure, "time", clock)
    options = MeasureOptions(repeat=3, min_repeat_s=2.5, cache="flush")
    samples = measure._time_calls(clock.call, options, clock.flush)
    assert samples == (1.0, 1.0, 1.0)  # the flushes' 100 s are never in a sample
    # one untimed call to size the samples (3 calls of 1 s reach 2.5 s), then 3 x 3
    assert clock.events == ["flush", "call"] * (1 + 3 * 3)


def test_flushed_samples_time_at_most_a_bounded_number_of_calls(monkeypatch):
    clock = _FakeClock()
    clock.call = lambda: clock.events.append("call")  # a call too short for the clock
    monkeypatch.setattr(measure, "time", clock)
    options = MeasureOptions(repeat=2, min_repeat_s=1.0, cache="flush")
    measure._time_calls(clock.call, options, clock.flush)
    assert clock.events.count("call") == 1 + 2 * measure.FLUSHED_CALLS
    assert clock.events.count("flush") == clock.events.count("call")


@pytest.mark.parametrize("cache", ["hot", "flush"])
def test_a_call_beyond_the_cutoff_is_timed_once_more_only(monkeypatch, cache):
    clock = _FakeClock()
    monkeypatch.setattr(measure, "time", clock)
    options = MeasureOptions(repeat=3, min_repeat_s=2.5, cache=cache, cutoff_s=0.5)
    flush = clock.flush if cache == "flush" else None
    assert measure._time_calls(clock.call, options, flush) == (1.0, 1.0)
    assert clock.events == (["flush", "call"] if flush else ["call"]) * 2
    within = MeasureOptions(repeat=3, min_repeat_s=2.5, cache=cache, cutoff_s=1.5)
    assert measure._time_calls(clock.call, within, flush) == (1.0, 1.0, 1.0)


class _SlowWhileWatched:
    """A watch that finds the first ``degraded`` samples ran on fewer cores, and a call
    that lasts 2 s in those samples (one core) and 1 s in the others."""

    def __init__(self, clock, degraded):
        self.clock, self.left, self.watches = clock, degraded, 0

    def watch(self):
        self.watches += 1
        slow = self.left > 0
        self.left -= 1
        self.clock.call_s = 2.0 if slow else 1.0
        return lambda: slow

    def call(self):
        self.clock.events.append("call")
        self.clock.now += getattr(self.clock, "call_s", 1.0)


@pytest.mark.parametrize("cache", ["hot", "flush"])
def test_a_sample_its_watch_finds_degraded_is_taken_again(monkeypatch, cache):
    """A sample that ran on one core (the target's watch says so) is retaken: the figure
    is the code's, not that of where the scheduler put its threads."""
    clock = _FakeClock()
    monkeypatch.setattr(measure, "time", clock)
    flush = clock.flush if cache == "flush" else None
    options = MeasureOptions(repeat=3, min_repeat_s=0.0, cache=cache)
    watched = _SlowWhileWatched(clock, degraded=2)
    assert measure._time_calls(watched.call, options, flush, watched.watch) == (1.0,) * 3
    assert watched.watches == 3 + 2  # the first sample was taken three times
    assert clock.events.count("call") == 1 + 3 + 2


def test_a_sample_always_degraded_counts_its_fastest_take(monkeypatch):
    clock = _FakeClock()
    monkeypatch.setattr(measure, "time", clock)
    watched = _SlowWhileWatched(clock, degraded=10 ** 6)
    samples = measure._time_calls(watched.call, MeasureOptions(repeat=2, min_repeat_s=0.0),
                                  None, watched.watch)
    assert samples == (2.0, 2.0)
    assert watched.watches == 2 * (1 + measure.SAMPLE_RETAKES)  # bounded, then it goes on


def test_candidate_limits_follow_the_tasks_best_and_slowest_success():
    options = MeasureOptions(timeout_s=20.0)
    first = measure.candidate_limits(options, math.inf, 0.0)
    assert first.timeout_s == 20.0 and math.isinf(first.cutoff_s)
    limits = measure.candidate_limits(options, 0.010, 1.0)
    assert limits.cutoff_s == pytest.approx(measure.CUTOFF_MULTIPLE * 0.010)
    assert limits.timeout_s == measure.TIMEOUT_FLOOR_S  # 4 x 1 s is below the floor
    assert measure.candidate_limits(options, 0.010, 3.0).timeout_s == pytest.approx(
        measure.TIMEOUT_MULTIPLE * 3.0)
    assert measure.candidate_limits(options, 0.010, 30.0).timeout_s == 20.0  # never more
    # before any success: the floor plus two calls of the task's work at a scalar rate
    small = measure.candidate_limits(options, math.inf, 0.0, flops=1e6)
    assert small.timeout_s == measure.TIMEOUT_FLOOR_S and math.isinf(small.cutoff_s)
    assert measure.candidate_limits(options, math.inf, 0.0, flops=4e9).timeout_s == \
        pytest.approx(2 * 4e9 / measure.SLOWEST_RATE)
    assert limits.repeat == options.repeat and limits.cache == options.cache


def test_a_hot_timing_runs_the_calls_back_to_back(monkeypatch):
    clock = _FakeClock()
    monkeypatch.setattr(measure, "time", clock)
    samples = measure._time_calls(clock.call, MeasureOptions(repeat=2, min_repeat_s=2.5))
    assert samples == (1.0, 1.0)
    assert clock.events == ["call"] * (1 + 2 * 3)


def test_an_unknown_cache_mode_is_refused():
    with pytest.raises(InputError, match="cache='cold'.*hot, flush, rotate"):
        MeasureOptions(cache="cold")


@pytest.mark.parametrize("cache", ["hot", "flush"])
def test_a_single_call_timing_times_each_call_alone(monkeypatch, cache):
    """Finalists are measured again by single calls (the fastest of several counts): a
    short call often runs whole between other processes' time slices on a loaded
    machine, a sample averaging many calls almost never does."""
    clock = _FakeClock()
    monkeypatch.setattr(measure, "time", clock)
    options = measure.single_call_timing(MeasureOptions(repeat=3, min_repeat_s=2.5,
                                                        cache=cache))
    assert options.repeat == measure.SINGLE_CALL_SAMPLES and options.cache == cache
    flush = clock.flush if cache == "flush" else None
    samples = measure._time_calls(clock.call, options, flush)
    assert samples == (1.0,) * measure.SINGLE_CALL_SAMPLES
    # the untimed first call, then one call per sample (where 2.5 s asked for three)
    per_call = ["flush", "call"] if flush else ["call"]
    assert clock.events == per_call * (1 + measure.SINGLE_CALL_SAMPLES)


def test_a_proposal_waits_for_the_timing_under_way(monkeypatch, tmp_path):
    """wait_for_timings returns at once while no timing holds the slot, and waits for
    the end of one that does (the tuning process's proposals never share the cores
    with a timing)."""
    import threading

    monkeypatch.setenv(measure.TIMING_LOCK_ENV, str(tmp_path / "timing.lock"))
    measure.wait_for_timings()  # nobody times: returns
    holding, release, waited = threading.Event(), threading.Event(), threading.Event()

    def timing():
        with measure.exclusive_timing():
            holding.set()
            release.wait(30)

    def proposal():
        measure.wait_for_timings()
        waited.set()

    timer = threading.Thread(target=timing)
    timer.start()
    assert holding.wait(30)
    proposer = threading.Thread(target=proposal)
    proposer.start()
    proposer.join(0.3)
    assert not waited.is_set()  # the timing still holds the slot
    release.set()
    timer.join(30)
    proposer.join(30)
    assert waited.is_set()
    measure.wait_for_timings()  # and again once it is free
