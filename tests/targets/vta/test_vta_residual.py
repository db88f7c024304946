"""The quantized addition's ALU program (targets/vta/residual.py) against its NumPy
semantics, over tile counts that leave chunks partly full and reuse both slots."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc.accel_sim import HardwareConfig, check_stream, run_stream
from heterocc.accel_sim.program import read_tensor
from heterocc.targets.vta.residual import QuantizedAdd, QuantizedMul, add_program, chunk_tiles


@pytest.mark.parametrize("preset", ["1x8x8", "1x16x16"])
@pytest.mark.parametrize("chunks", [0.5, 1, 2.25, 5.1])
@pytest.mark.parametrize("add", [
    QuantizedAdd(-3, 21000, 7, 9000, 15, -5, -128, 127),  # zero points everywhere
    QuantizedAdd(4, 16384, 4, 16384, 15, 0, 0, 127),      # one zero point, a ReLU clamp
    QuantizedAdd(0, 3, 0, 2, 0, 0, -128, 127),            # no shift, saturating
    # 31-bit multipliers from tiles, their 64-bit products shifted (one or both terms)
    QuantizedAdd(-3, 1_518_500_249, 7, 2_000_000_001, 15, -5, -128, 127, 17, 19),
    QuantizedAdd(5, 21000, 0, 1_234_567_891, 15, 2, 0, 127, 0, 16),
    # products (a squeeze-excite scale, x * sigmoid(x)): X *= Y, then the multiplier tile
    QuantizedMul(-3, 7, 1_518_500_249, 27, 15, -5, -128, 127),
    QuantizedMul(0, -128, 1_100_000_000, 30, 12, 0, -128, 127),
    # shifts above 15: the rounding constant 2**14 after a first shift by s - 15
    QuantizedAdd(-3, 1_518_500_249, 7, 2_000_000_001, 22, -5, -128, 127, 10, 10),
    QuantizedMul(-3, 7, 1_518_500_249, 20, 22, -5, -128, 127),
])
def test_add_program_matches_its_semantics(preset, chunks, add):
    config = HardwareConfig.preset(preset)
    reserved = 1 if isinstance(add, QuantizedMul) else \
        sum(1 for k in (add.product_shift_a, add.product_shift_b) if k)
    tiles = max(1, int(chunks * chunk_tiles(config, reserved)))
    program = add_program(config, tiles, add)
    check_stream(program.instructions, config, dram_bytes=program.dram.size)
    rng = np.random.default_rng(tiles)
    a, b = (rng.integers(-128, 128, (tiles * config.batch, config.block_in)).astype(np.int8)
            for _ in range(2))
    dram = program.dram.copy()
    program.write("A", a, dram)
    program.write("B", b, dram)
    run_stream(program.instructions, config, dram)
    got = read_tensor(config, program.tensors["Y"], dram)
    np.testing.assert_array_equal(got, add.reference(a, b))
