"""The simulator behind the driver protocol."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc.accel_sim.config import HardwareConfig
from heterocc.accel_sim.device import SimulatorDevice
from heterocc.accel_sim.driver import AcceleratorDriver, execute_program, relocate
from heterocc.accel_sim.isa import Buffer, Load
from heterocc.accel_sim.reference_programs import tiled_gemm_program
from heterocc.errors import AcceleratorError


def test_simulator_device_runs_a_program_through_the_protocol():
    config = HardwareConfig()
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (64, 64)).astype(np.int8)
    w = rng.integers(-128, 128, (32, 64)).astype(np.int8)
    program = tiled_gemm_program(config, a, w, virtual_threads=2)
    device = SimulatorDevice(config, dram_bytes=1 << 20)
    assert isinstance(device, AcceleratorDriver)
    device.allocate(100)  # the program must not rely on sitting at address 0
    status = execute_program(device, program)
    np.testing.assert_array_equal(program.read("C"), a.astype(np.int64) @ w.astype(np.int64).T)
    assert status.cycles == status.report.timing.total_cycles > 0


def test_device_rejects_bad_use():
    config = HardwareConfig()
    device = SimulatorDevice(config, dram_bytes=8192)
    with pytest.raises(AcceleratorError, match="DRAM exhausted"):
        device.allocate(10_000)
    with pytest.raises(AcceleratorError, match="outside"):
        device.write(8190, b"1234")
    with pytest.raises(AcceleratorError, match="without a preceding start"):
        device.wait()
    other = tiled_gemm_program(HardwareConfig.preset("1x8x8"), np.zeros((8, 8), np.int8),
                               np.zeros((8, 8), np.int8))
    with pytest.raises(AcceleratorError, match="built for 1x8x8"):
        execute_program(device, other)


def test_relocation_needs_tile_aligned_offsets():
    config = HardwareConfig()
    load = Load(buffer=Buffer.WGT, sram_base=0, dram_base=2, y_size=1, x_size=1, x_stride=1)
    assert relocate([load], config, 4096)[0].dram_base == 2 + 4096 // 256
    with pytest.raises(AcceleratorError, match="instruction 0: cannot move a WGT transfer"):
        relocate([load], config, 128)
