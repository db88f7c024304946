"""The device boundary under mutation fuzzing: 1,000 mutants of real streams (the
reference programs and a compiled CNN's accelerator functions) through decode, the
checker, the timing model, an unchecked run and the simulator one instruction at a
time: no crash other than the project's own errors, no write outside DRAM, no hang."""

from __future__ import annotations

import pytest

from heterocc.accel_sim.fuzz import (
    MUTATIONS,
    STAGES,
    budget_for,
    fuzz,
    mutants,
    reference_seeds,
)
from heterocc.targets.vta.seeds import tiny_cnn_seeds

STREAMS = 1000
#: the issue's ceiling on the checker's memory, whatever the fields say
CHECKER_MEMORY_LIMIT = 100 << 20


@pytest.fixture(scope="module")
def seeds():
    return reference_seeds() + tiny_cnn_seeds()


def _described(outcomes) -> list[str]:
    return [f"{o.mutant.seed.name} {o.mutant.mutation}: {o.stages}" for o in outcomes[:5]]


def _assert_held(tally, streams: int) -> None:
    assert tally.streams == streams
    assert not tally.crashes, _described(tally.crashes)
    assert not tally.out_of_bounds, _described(tally.out_of_bounds)
    assert not tally.hangs, _described(tally.hangs)


def test_mutated_streams_never_crash_write_out_of_bounds_or_hang(seeds):
    """The default config, budget included: the boundary as users get it."""
    tally = fuzz(seeds, STREAMS, seed=2026, time_limit_s=10.0)
    _assert_held(tally, STREAMS)
    # not vacuous: every mutation ran, and every stage both accepted and refused some
    assert set(tally.by_mutation) == set(MUTATIONS)
    for stage in STAGES:
        results = tally.by_stage[stage]
        assert results["ok"] > 0, stage
        assert any(result.startswith("refused:") for result in results), stage


def test_mutants_over_a_tight_work_budget_are_refused(seeds):
    """Each seed's budget four times its own work: mutants that ask for more work are
    refused by the budget, wherever they enter."""
    tally = fuzz(seeds, 300, seed=7, config=budget_for, time_limit_s=10.0,
                 measure_checker=True)
    _assert_held(tally, 300)
    refusals = {result for stage in STAGES for result in tally.by_stage[stage]}
    assert any("max_stream_" in result or "loop_outer*loop_inner" in result
               for result in refusals)
    assert 0 < tally.checker_peak_bytes < CHECKER_MEMORY_LIMIT


@pytest.mark.slow
def test_many_more_mutated_streams_hold(seeds):
    tally = fuzz(seeds, 4000, seed=31337, time_limit_s=10.0)
    _assert_held(tally, 4000)


def test_mutants_are_deterministic(seeds):
    first = [(m.mutation, m.words, m.records) for m in mutants(seeds, 50, seed=5)]
    again = [(m.mutation, m.words, m.records) for m in mutants(seeds, 50, seed=5)]
    assert first == again
