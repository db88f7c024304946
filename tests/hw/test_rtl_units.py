"""Unit benches of the RTL blocks (hw/tb/hc_unit_benches.py), on both simulators."""

from __future__ import annotations

import os

import pytest

from heterocc.accel_sim import HardwareConfig
from heterocc.accel_sim.rtl_device import CocotbBench
from tests.hw.conftest import BUILD_ROOT, require_rtl_tools

pytestmark = pytest.mark.rtl

#: (top level, its parameters); the FIFO and queue get small depths so that the
#: random traffic reaches full and empty often.
UNITS = {
    "hc_gemm_core": {},
    "hc_alu": {},
    "hc_fifo": {"WIDTH": 16, "LOG_DEPTH": 3},
    "hc_token_queue": {"DEPTH": 5, "COUNT_BITS": 3},
    "hc_burst_gen": {"MAX_BEATS": 64},
}


#: (unit, simulator, preset): every unit on Icarus for the default config and the
#: arithmetic for 1x8x8 too. The full-system bench runs the same blocks under
#: Verilator; separate Verilator unit builds (about a minute and a half each)
#: are opt-in with HC_RTL_FULL=1.
CASES = [(unit, "icarus", "1x16x16") for unit in sorted(UNITS)] + [
    (unit, "icarus", "1x8x8") for unit in ("hc_alu", "hc_gemm_core")
]
if os.environ.get("HC_RTL_FULL"):
    CASES += [(unit, "verilator", "1x16x16") for unit in sorted(UNITS)]


@pytest.mark.parametrize(("unit", "simulator", "preset"), CASES)
def test_unit_bench(unit, simulator, preset, tmp_path):
    require_rtl_tools(simulator)
    config = HardwareConfig.preset(preset)
    bench = CocotbBench(
        config, simulator, unit, BUILD_ROOT / f"unit_{simulator}_{unit}_{config.name}",
        parameters=UNITS[unit],
    )
    bench.test("hc_unit_benches", tmp_path, {"HC_UNIT": unit})
