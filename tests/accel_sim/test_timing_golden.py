"""The shared-port timing model's figures, pinned: every cycle count, per-module busy and
stall total, GEMM activity and the whole schedule (as a digest) of a handful of streams
under a few configs and machines, recorded in ``timing_golden.json``.

The figures were recorded from the model before its port model was restructured into
steps; they pin the model's behaviour, so a change to them is a change to the timing
model and must be deliberate: rerun ``python -m tests.accel_sim.test_timing_golden``
to rewrite the file, and say why in the commit. The streams cover the paths of the
model: the periodic skip over runs of identical bursts (long GEMM/convolution loads),
fetch-bound streams, padded loads, stores, and the fallback for streams that need more
look-ahead than the command queues hold.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from heterocc.accel_sim import timing
from heterocc.accel_sim.config import HardwareConfig
from heterocc.accel_sim.isa import Buffer, Finish, Gemm, Load, Store
from heterocc.accel_sim.reference_programs import padded_conv3x3_program, tiled_gemm_program
from heterocc.accel_sim.timing import MachineTiming, TimingReport, schedule_stream
from heterocc.targets.vta.pool import MaxPoolGeometry, pool_program
from tests.hw.programs import random_program

GOLDEN = Path(__file__).with_name("timing_golden.json")

CONFIGS = {
    "default": HardwareConfig(),
    "rtl_like": HardwareConfig(instruction_overhead_cycles=4, dram_latency_cycles=10),
    "slow_bus": HardwareConfig(dram_bytes_per_cycle=2, dram_latency_cycles=100,
                               instruction_overhead_cycles=6),
}
MACHINES = {
    "rtl": MachineTiming(),
    # short bursts, a 256-byte boundary, 2 reads in flight and 8-entry command queues:
    # most streams need the unbounded-queue fallback here
    "small": MachineTiming(burst_beats=4, boundary_bytes=256, outstanding_reads=2,
                           fetch_burst=4, staging_depth=8, command_queue_depth=8,
                           write_responses=2),
}


def _streams() -> dict[str, list]:
    config = HardwareConfig()
    rng = np.random.default_rng(0)
    tile = dict(buffer=Buffer.INP, sram_base=0, dram_base=0, y_size=1, x_size=1, x_stride=1)
    streams = {
        "load_gemm_store": [
            Load(buffer=Buffer.INP, sram_base=0, dram_base=0, y_size=1, x_size=8, x_stride=8,
                 push_next=True),
            Load(buffer=Buffer.UOP, sram_base=0, dram_base=0, y_size=1, x_size=2, x_stride=2),
            Gemm(uop_begin=0, uop_end=1, loop_outer=10, loop_inner=1, pop_prev=True,
                 push_next=True),
            Store(buffer=Buffer.OUT, sram_base=0, dram_base=0, y_size=1, x_size=1, x_stride=1,
                  pop_prev=True, push_prev=True),
            Finish(pop_next=True),
        ],
        "beyond_command_queues": [
            Load(pop_next=True, **tile), *[Load(**tile) for _ in range(70)],
            Gemm(uop_begin=0, uop_end=0, loop_outer=0, loop_inner=0, push_prev=True), Finish(),
        ],
        "fetch_bound_gemms": [*[Gemm(uop_begin=0, uop_end=1, loop_outer=5, loop_inner=1)
                                for _ in range(40)], Finish()],
    }
    for m, k, n, threads in ((16, 64, 64, 2), (64, 256, 128, 2), (8, 512, 256, 1)):
        a = rng.integers(-8, 8, (m, k)).astype(np.int8)
        w = rng.integers(-8, 8, (n, k)).astype(np.int8)
        streams[f"gemm_{m}x{k}x{n}_vt{threads}"] = list(
            tiled_gemm_program(config, a, w, virtual_threads=threads).instructions)
    image = rng.integers(-8, 8, (6 * 10, 32)).astype(np.int8)
    weights = rng.integers(-8, 8, (16, 9 * 32)).astype(np.int8)
    streams["conv3x3_6x10"] = list(padded_conv3x3_program(config, image, weights, 6, 10)
                                   .instructions)
    geometry = MaxPoolGeometry(2, 16, 16, (3, 3), (2, 2), (1, 1, 1, 1), 8, 8)
    streams["max_pool_stem"] = list(pool_program(config, geometry).instructions)
    for seed in (3000, 3001, 3002):
        streams[f"random_{seed}"] = list(random_program(config, seed).program.instructions)
    return streams


def figures(report: TimingReport) -> dict:
    """What the model reports, with the schedule as a digest of (index, module, start,
    end) in issue order."""
    schedule = [[s.index, int(s.module), s.start, s.end] for s in report.schedule]
    return {
        "total_cycles": report.total_cycles,
        "gemm_active_cycles": report.gemm_active_cycles,
        "modules": {m.name: [t.instructions, t.busy_cycles, t.stall_cycles]
                    for m, t in report.modules.items()},
        "schedule_sha256": hashlib.sha256(json.dumps(schedule).encode()).hexdigest(),
    }


def measure() -> dict[str, dict]:
    streams = _streams()
    return {
        f"{config}/{machine}/{name}": figures(
            schedule_stream(stream, CONFIGS[config], machine=MACHINES[machine]))
        for config in CONFIGS for machine in MACHINES for name, stream in streams.items()
    }


@pytest.fixture(scope="module")
def measured() -> dict[str, dict]:
    return measure()


def test_timing_model_figures_are_unchanged(measured):
    expected = json.loads(GOLDEN.read_text())
    assert sorted(measured) == sorted(expected)
    changed = [key for key in expected if measured[key] != expected[key]]
    assert not changed, f"timing model figures changed for {changed}"


def test_the_golden_streams_reach_every_path_of_the_port_model(monkeypatch):
    """The pinned figures are worth something only where the streams drive the model
    through its periodic skip and its unbounded-queue fallback."""
    reached = {"skip": 0, "stuck": 0}
    windows, run = timing._PortRun.periodic_windows, timing._PortRun.run

    def counted_windows(self, *args):
        skipped = windows(self, *args)
        reached["skip"] += skipped > 0
        return skipped

    def counted_run(self):
        try:
            return run(self)
        except timing._Stuck:
            reached["stuck"] += 1
            raise

    monkeypatch.setattr(timing._PortRun, "periodic_windows", counted_windows)
    monkeypatch.setattr(timing._PortRun, "run", counted_run)
    measure()
    assert reached["skip"] > 0 and reached["stuck"] > 0


if __name__ == "__main__":  # rewrite the golden file (a deliberate change of the model)
    GOLDEN.write_text(json.dumps(measure(), indent=1, sort_keys=True) + "\n")
    sys.exit(0)
