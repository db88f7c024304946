"""Yosys synthesizes the default config for a Xilinx 7-series device and reports
its resources (hw/synth/run_synth.py); the report lands in
hw/build/synth_<config>/resources.json.

It takes minutes, hence the ``slow`` marker besides ``rtl``.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from heterocc.accel_sim import HardwareConfig
from tests.hw.conftest import BUILD_ROOT

pytestmark = [pytest.mark.rtl, pytest.mark.slow]

_RUN_SYNTH = Path(__file__).resolve().parents[2] / "hw" / "synth" / "run_synth.py"


def _run_synth_module():
    spec = importlib.util.spec_from_file_location("run_synth", _RUN_SYNTH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_parse_stat_counts_resource_classes():
    stat = "\n".join([
        "   Number of cells:  10",
        "     DSP48E1                       3",
        "     FDRE                         20",
        "     FDSE                          2",
        "     LUT6                          7",
        "     LUT2                          1",
        "     RAMB36E1                      4",
        "     RAM64M                        2",
    ])
    counts = _run_synth_module().parse_stat(stat)
    assert counts["DSP"] == 3 and counts["FF"] == 22 and counts["LUT"] == 8
    assert counts["BRAM36"] == 4 and counts["LUTRAM"] == 2


def test_default_config_synthesizes_with_a_dsp_per_mac():
    if shutil.which("yosys") is None:
        pytest.fail("yosys is missing; run bash hw/install_tools.sh")
    config = HardwareConfig()
    summary = _run_synth_module().synthesize(config, BUILD_ROOT / f"synth_{config.name}")
    resources = summary["resources"]
    # one DSP48E1 per 8x8 multiply of the GEMM core; the ALU's 32-bit multipliers add more
    assert resources["DSP"] >= config.macs_per_iteration
    assert resources["BRAM36"] > 0 and resources["LUT"] > 0 and resources["FF"] > 0
