"""Full-system bench: reference GEMMs, hand-written and random programs run on the
RTL (Icarus and Verilator) through the AXI4-Lite control port, DRAM compared bit
for bit with the simulator and cycles with the timing model.

Each run writes ``hw/build/reports/system_<simulator>_<preset>.json`` with the
per-program cycles, their ratio to the model and the simulation speed.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from heterocc.accel_sim import Finish, Gemm, HardwareConfig, schedule_stream
from heterocc.accel_sim.rtl_device import RtlRun, RtlSimulator, bench_timing_config
from tests.hw.conftest import (
    BUILD_ROOT,
    CI_RANDOM_PROGRAMS,
    REPORT_DIR,
    SystemRun,
    system_runs,
)
from tests.hw.programs import ci_programs

pytestmark = pytest.mark.rtl

RANDOM_PROGRAMS = int(os.environ.get("HC_RTL_RANDOM_PROGRAMS", CI_RANDOM_PROGRAMS))
#: (simulator, preset) pairs; 1x8x8 and pynq-z2 (the xc7z020 fit: smaller buffers) once,
#: on Icarus (no C++ build), to keep CI short; HC_RTL_FULL=1 adds pynq-z2 on Verilator.
SETUPS = [("icarus", "1x16x16"), ("verilator", "1x16x16"), ("icarus", "1x8x8"),
          ("icarus", "pynq-z2")]
if os.environ.get("HC_RTL_FULL"):
    SETUPS.append(("verilator", "pynq-z2"))
#: RTL cycles against the timing model, which models the shared read port, fetch
#: and the bench memory (bench_timing_config): the contract is 5%
CYCLE_TOLERANCE = 0.05


def _program_names(preset: str) -> list[str]:
    return [named.name for named in ci_programs(HardwareConfig.preset(preset), RANDOM_PROGRAMS)]


def _by_name(simulator: str, preset: str, name: str) -> SystemRun:
    runs = system_runs(simulator, preset, RANDOM_PROGRAMS)
    return next(run for run in runs if run.named.name == name)


@pytest.mark.parametrize(
    ("simulator", "preset", "name"),
    [(sim, preset, name) for sim, preset in SETUPS for name in _program_names(preset)],
)
def test_dram_matches_simulator(simulator, preset, name):
    run = _by_name(simulator, preset, name)
    assert run.rtl.done, f"{name} did not finish on the RTL ({run.rtl.retired} retired)"
    assert not run.rtl.bus_error
    produced = run.rtl.dram[: run.expected_dram.size]
    differing = np.flatnonzero(produced != run.expected_dram)
    assert differing.size == 0, (
        f"{name}: {differing.size} DRAM bytes differ from the simulator, first at byte "
        f"{differing[:1]}; locate the instruction with heterocc.accel_sim.hil.compare_stream"
    )
    assert run.rtl.retired == len(run.named.program.instructions)


@pytest.mark.parametrize(("simulator", "preset"), SETUPS)
def test_cycles_follow_timing_model(simulator, preset):
    config = HardwareConfig.preset(preset)
    model_config = bench_timing_config(config)
    rows = []
    for run in system_runs(simulator, preset, RANDOM_PROGRAMS):
        model = schedule_stream(run.named.program.instructions, model_config).total_cycles
        rows.append({
            "program": run.named.name,
            "instructions": len(run.named.program.instructions),
            "rtl_cycles": run.rtl.cycles,
            "model_cycles": model,
            "ratio": run.rtl.cycles / model,
            "simulated_cycles": run.rtl.simulated_cycles,
            "wall_seconds": run.rtl.wall_seconds,
        })
    simulated = sum(row["simulated_cycles"] for row in rows)
    wall = sum(row["wall_seconds"] for row in rows)
    REPORT_DIR.mkdir(parents=True, exist_ok=True)
    (REPORT_DIR / f"system_{simulator}_{preset}.json").write_text(json.dumps({
        "simulator": simulator,
        "config": config.name,
        "programs": rows,
        "simulated_cycles_per_second": simulated / wall,
        "max_cycle_error": max(abs(row["ratio"] - 1) for row in rows),
    }, indent=1))
    outliers = [row for row in rows if abs(row["ratio"] - 1) > CYCLE_TOLERANCE]
    assert not outliers, (
        f"RTL cycles off the timing model by more than {CYCLE_TOLERANCE:.0%}: {outliers}")


@pytest.mark.parametrize(("simulator", "preset"), SETUPS[:2])
def test_control_port_reports_progress_of_a_stream_that_cannot_finish(simulator, preset):
    config = HardwareConfig.preset(preset)
    program = system_runs(simulator, preset, RANDOM_PROGRAMS)[0].named.program
    # the no-op GEMM takes the last STORE's token, so FINISH waits for one nobody pushes;
    # the bench must report how far the stream got instead of hanging
    stuck = [
        *program.instructions[:-1],
        Gemm(uop_begin=0, uop_end=0, loop_outer=0, loop_inner=0, pop_next=True),
        Finish(pop_next=True),
    ]
    result = RtlSimulator(config, simulator, BUILD_ROOT).run(
        [RtlRun.for_stream(program.dram, stuck, config, max_cycles=5_000)]
    )[0]
    assert not result.done
    assert result.retired == len(stuck) - 1
