"""The RTL is lint-clean under ``verilator --lint-only -Wall`` and compiles under
Icarus without warnings, for every preset; so does the system bench's harness
around it (hc_bench_top with its Verilog DRAM)."""

from __future__ import annotations

import subprocess

import pytest

from heterocc.accel_sim import HardwareConfig
from heterocc.accel_sim.rtl_device import (
    BENCH_SOURCES,
    BENCH_TOP_LEVEL,
    TOP_LEVEL,
    verilator_bin_dir,
)
from heterocc.accel_sim.rtl_header import rtl_sources, write_rtl_header
from tests.hw.conftest import require_rtl_tools

pytestmark = pytest.mark.rtl

PRESETS = ["1x8x8", "1x16x16", "1x32x32"]
#: (top level, sources after the accelerator's own)
TOPS = {"accelerator": (TOP_LEVEL, ()), "bench": (BENCH_TOP_LEVEL, BENCH_SOURCES)}
CASES = [(preset, top) for preset in PRESETS for top in TOPS]


def _sources(top: str) -> list[str]:
    return [str(path) for path in (*rtl_sources(), *TOPS[top][1])]


@pytest.mark.parametrize(("preset", "top"), CASES)
def test_verilator_lint_is_clean(preset, top, tmp_path):
    require_rtl_tools("verilator")
    include = write_rtl_header(HardwareConfig.preset(preset), tmp_path).parent
    completed = subprocess.run(
        [str(verilator_bin_dir() / "verilator"), "--lint-only", "-Wall", f"-I{include}",
         "--top-module", TOPS[top][0], *_sources(top)],
        capture_output=True, text=True, check=False,
    )
    assert completed.returncode == 0, completed.stderr


@pytest.mark.parametrize(("preset", "top"), CASES)
def test_icarus_compiles_without_warnings(preset, top, tmp_path):
    require_rtl_tools("icarus")
    include = write_rtl_header(HardwareConfig.preset(preset), tmp_path).parent
    completed = subprocess.run(
        ["iverilog", "-g2012", "-Wall", "-Wno-timescale", "-s", TOPS[top][0], f"-I{include}",
         "-o", str(tmp_path / "top.vvp"), *_sources(top)],
        capture_output=True, text=True, check=False,
    )
    assert completed.returncode == 0 and not completed.stderr.strip(), completed.stderr
