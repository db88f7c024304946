"""Yosys synthesizes the accelerator for a Xilinx 7-series device through the fit
flow (``heterocc.accel_sim.fpga_fit``) and the design maps as intended: two int8
multiplies per DSP48E1 in the GEMM core, two DSPs per ALU lane (the rest of its 64-bit
product in logic, hw/rtl/hc_alu_product.v), buffers in block RAM.

CI synthesizes a small config (1x4x4, small buffers), which checks all of that in about
80 CPU seconds of Yosys where the default config took about 10 minutes; the full-size
figures (the default config, the xc7z020 fit of ``pynq-z2``) come from
``python benchmarks/fpga_fit.py``.
"""

from __future__ import annotations

import shutil

import pytest

from heterocc.accel_sim import HardwareConfig
from heterocc.accel_sim.fpga_fit import synthesize

pytestmark = [pytest.mark.rtl, pytest.mark.slow]

#: 16 int8 MACs, a 4-element ALU, 2-8 KiB buffers, a 32-bit bus
SMALL = HardwareConfig(log_block_in=2, log_block_out=2, bus_width_bits=32,
                       log_uop_buffer_bytes=11, log_inp_buffer_bytes=11,
                       log_wgt_buffer_bytes=12, log_acc_buffer_bytes=12)


def test_small_config_maps_two_macs_per_dsp_two_dsps_per_alu_lane_and_buffers_to_bram(tmp_path):
    if shutil.which("yosys") is None:
        pytest.fail("yosys is missing; run bash hw/install_tools.sh")
    result = synthesize(SMALL, "xc7", cache=tmp_path, keep=tmp_path / "report")
    resources = result.resources
    # the GEMM core packs two weights per multiply: half a DSP48E1 per MAC; each ALU
    # lane takes x * y[23:0] on two DSPs and x * y[31:24] in logic; one more DSP is
    # the store's tile count (y_size * x_size, hc_store.v)
    lanes = SMALL.batch * SMALL.block_out
    assert resources.dsp == SMALL.macs_per_iteration // 2 + 2 * lanes + 1, resources
    assert resources.bram36 > 0 and resources.lut > 0 and resources.ff > 0
    again = synthesize(SMALL, "xc7", cache=tmp_path)
    assert again.cached and again.resources == resources and again.key == result.key
