"""The RTL is lint-clean under ``verilator --lint-only -Wall`` and compiles under
Icarus without warnings, for every preset."""

from __future__ import annotations

import subprocess

import pytest

from heterocc.accel_sim import HardwareConfig
from heterocc.accel_sim.rtl_device import verilator_bin_dir
from heterocc.accel_sim.rtl_header import rtl_sources, write_rtl_header
from tests.hw.conftest import require_rtl_tools

pytestmark = pytest.mark.rtl

PRESETS = ["1x8x8", "1x16x16", "1x32x32"]


@pytest.mark.parametrize("preset", PRESETS)
def test_verilator_lint_is_clean(preset, tmp_path):
    require_rtl_tools("verilator")
    include = write_rtl_header(HardwareConfig.preset(preset), tmp_path).parent
    completed = subprocess.run(
        [str(verilator_bin_dir() / "verilator"), "--lint-only", "-Wall", f"-I{include}",
         "--top-module", "hc_top", *map(str, rtl_sources())],
        capture_output=True, text=True, check=False,
    )
    assert completed.returncode == 0, completed.stderr


@pytest.mark.parametrize("preset", PRESETS)
def test_icarus_compiles_without_warnings(preset, tmp_path):
    require_rtl_tools("icarus")
    include = write_rtl_header(HardwareConfig.preset(preset), tmp_path).parent
    completed = subprocess.run(
        ["iverilog", "-g2012", "-Wall", "-Wno-timescale", "-s", "hc_top", f"-I{include}",
         "-o", str(tmp_path / "top.vvp"), *map(str, rtl_sources())],
        capture_output=True, text=True, check=False,
    )
    assert completed.returncode == 0 and not completed.stderr.strip(), completed.stderr
