"""The rounds of a chain (``cost.time_in_chains``): at least ``min_rounds``, then more
only while the process has spent less than ``seconds`` of CPU time on the timed
rounds, at most ``max_rounds``. Counted in CPU time, not in a clock or a count, so
the test does not depend on the load: a call that burns CPU ends the rounds early,
one that waits without it runs them all."""

from __future__ import annotations

import time

from heterocc.targets.llvm import cost as cpu_cost


def _burn(seconds: float):
    def call(args):
        start = time.thread_time()
        while time.thread_time() - start < seconds:
            pass
    return call


def test_rounds_stop_at_the_cpu_budget_after_the_least():
    timed = cpu_cost.time_in_chains({"burn": (_burn(0.004), ())}, min_rounds=3,
                                    max_rounds=200, seconds=0.02, warm_up=0, clock="wall")
    assert 3 <= timed["burn"][1] <= 7  # 0.02 s of CPU at 4 ms a round, or the least
    timed = cpu_cost.time_in_chains({"burn": (_burn(0.004), ())}, min_rounds=12,
                                    max_rounds=200, seconds=0.02, warm_up=0, clock="wall")
    assert timed["burn"][1] == 12  # the least number of rounds whatever the budget


def test_a_call_that_spends_no_cpu_runs_every_round():
    timed = cpu_cost.time_in_chains({"wait": (lambda args: time.sleep(0.001), ())},
                                    min_rounds=2, max_rounds=9, seconds=0.05, warm_up=0,
                                    clock="wall")
    assert timed["wait"][1] == 9
