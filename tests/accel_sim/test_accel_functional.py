"""Hand-built accelerator programs checked bit-exactly against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc.accel_sim.config import HardwareConfig
from heterocc.accel_sim.functional import FunctionalSimulator, alu_apply
from heterocc.accel_sim.isa import Alu, AluOp, Buffer, Gemm, Load, MicroOp, Store
from heterocc.accel_sim.program import ProgramBuilder, pack_tiles, unpack_tiles
from heterocc.accel_sim.reference_programs import (
    GemmTiling,
    padded_conv3x3_program,
    tiled_gemm_program,
)
from heterocc.errors import IllegalInstructionError

RNG = np.random.default_rng(2026)


def _int8(shape: tuple[int, ...]) -> np.ndarray:
    return RNG.integers(-128, 128, shape).astype(np.int8)


def _matmul(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    return a.astype(np.int64) @ w.astype(np.int64).T


def test_pack_and_unpack_tiles_are_inverse():
    matrix = np.arange(8 * 12).reshape(8, 12)
    tiles = pack_tiles(matrix, 4, 3)
    assert tiles.shape == (2, 4, 4, 3)
    np.testing.assert_array_equal(tiles[1, 2], matrix[4:8, 6:9])
    np.testing.assert_array_equal(unpack_tiles(tiles), matrix)


def test_single_gemm_tile_matches_numpy():
    config = HardwareConfig()
    a, w = _int8((1, 16)), _int8((16, 16))
    builder = ProgramBuilder(config)
    a_t = builder.tensor("A", Buffer.INP, data=a)
    w_t = builder.tensor("W", Buffer.WGT, data=w)
    c_t = builder.tensor("C", Buffer.ACC, shape=(1, 16))
    kernel = builder.uops("k", [MicroOp(dst=0, src=0, wgt=0)])
    builder.emit(builder.load_uops(kernel))
    builder.emit(builder.load_tiles(a_t, 0, 0, 0, 1, 1))
    builder.emit(builder.load_tiles(w_t, 0, 0, 0, 1, 1, push_next=True))
    builder.emit(Gemm(reset=True, uop_begin=0, uop_end=1, loop_outer=1, loop_inner=1))
    builder.emit(Gemm(uop_begin=0, uop_end=1, loop_outer=1, loop_inner=1,
                      pop_prev=True, push_next=True))
    builder.emit(builder.store_tiles(c_t, 0, 0, 0, 1, 1, pop_prev=True, push_prev=True))
    builder.finish(pop_next=True)
    program = builder.build()
    report = program.run()
    np.testing.assert_array_equal(program.read("C"), _matmul(a, w))
    assert report.macs == 256


@pytest.mark.parametrize(
    "config",
    [*(HardwareConfig.preset(name) for name in ("1x8x8", "1x16x16", "1x32x32")),
     HardwareConfig(log_batch=1)],
    ids=lambda config: config.name.split("_")[0],
)
@pytest.mark.parametrize("threads", [1, 2])
def test_tiled_gemm_on_every_preset(config, threads):
    a, w = _int8((96, 128)), _int8((64, 128))
    tiling = GemmTiling(block_rows=96 // config.batch // 3,
                        block_cols=64 // config.block_out // 2, k_chunk=2)
    program = tiled_gemm_program(config, a, w, threads, tiling)
    report = program.run()
    np.testing.assert_array_equal(program.read("C"), _matmul(a, w))
    assert report.macs == 96 * 64 * 128


def test_gemm_accumulates_with_int32_wraparound():
    config = HardwareConfig()
    machine = FunctionalSimulator(config, np.zeros(64, np.uint8))
    machine.acc[0] = 2**31 - 1
    machine.inp[0] = 1
    machine.wgt[0] = 1
    # the (zero) micro-op 0 names acc 0, inp 0 and wgt 0; each output adds 16
    machine.execute(Gemm(uop_begin=0, uop_end=1, loop_outer=1, loop_inner=1))
    np.testing.assert_array_equal(machine.acc[0], np.full((1, 16), -(2**31) + 15))


PRESETS = ["1x8x8", "1x16x16", "1x32x32"]


@pytest.mark.parametrize("preset, pad_value", [(p, 0) for p in PRESETS] + [("1x16x16", -7)])
def test_convolution_through_micro_op_loops_with_padding(preset, pad_value):
    config = HardwareConfig.preset(preset)
    height, width = 5, 6
    channels_in, channels_out = 2 * config.block_in, config.block_out
    image = _int8((height, width, channels_in))
    weights = _int8((channels_out, 3, 3, channels_in))
    program = padded_conv3x3_program(config, image.reshape(height * width, channels_in),
                                     weights.reshape(channels_out, 9 * channels_in),
                                     height, width, pad_value)
    program.run()

    padded = np.pad(image.astype(np.int64), ((1, 1), (1, 1), (0, 0)), constant_values=pad_value)
    expected = np.zeros((height, width, channels_out), np.int64)
    for kh in range(3):
        for kw in range(3):
            patch = padded[kh : kh + height, kw : kw + width]
            expected += patch @ weights[:, kh, kw, :].astype(np.int64).T
    np.testing.assert_array_equal(
        program.read("Y"), expected.reshape(height * width, channels_out)
    )


@pytest.mark.parametrize("preset", PRESETS)
def test_alu_requantize_chain(preset):
    config = HardwareConfig.preset(preset)
    rows, k_tiles, n_tiles = 4, 4, 2
    k, n = k_tiles * config.block_in, n_tiles * config.block_out
    a, w = _int8((rows, k)), _int8((n, k))
    bias = RNG.integers(-5000, 5000, (1, n)).astype(np.int32)
    builder = ProgramBuilder(config)
    a_t = builder.tensor("A", Buffer.INP, data=a)
    w_t = builder.tensor("W", Buffer.WGT, data=w)
    b_t = builder.tensor("bias", Buffer.ACC, data=bias)
    out_t = builder.tensor("OUT", Buffer.OUT, shape=(rows, n))
    bias_slot = rows * n_tiles
    kernel = builder.uops(
        "k",
        [MicroOp(0, 0, 0), MicroOp(0, bias_slot, 0)]
        + [MicroOp(0, kk, kk) for kk in range(k_tiles)],
    )
    builder.emit(builder.load_uops(kernel))
    builder.emit(builder.load_tiles(b_t, bias_slot, 0, 0, 1, n_tiles))
    builder.emit(builder.load_tiles(a_t, 0, 0, 0, rows, k_tiles))
    builder.emit(builder.load_tiles(w_t, 0, 0, 0, n_tiles, k_tiles, push_next=True))
    tiles = dict(loop_outer=rows, loop_inner=n_tiles)
    dst = dict(dst_factor_outer=n_tiles, dst_factor_inner=1)
    builder.emit(Gemm(reset=True, uop_begin=0, uop_end=1, acc_factor_outer=n_tiles,
                      acc_factor_inner=1, **tiles))
    builder.emit(Gemm(uop_begin=2, uop_end=2 + k_tiles, acc_factor_outer=n_tiles,
                      acc_factor_inner=1, inp_factor_outer=k_tiles, wgt_factor_inner=k_tiles,
                      pop_prev=True, **tiles))
    builder.emit(Alu(alu_op=AluOp.ADD, uop_begin=1, uop_end=2, src_factor_inner=1,
                     **dst, **tiles))
    for op, imm in ((AluOp.SHR, 6), (AluOp.MAX, -128)):
        builder.emit(Alu(alu_op=op, use_imm=True, imm=imm, uop_begin=0, uop_end=1,
                         **dst, **tiles))
    builder.emit(Alu(alu_op=AluOp.MIN, use_imm=True, imm=127, uop_begin=0, uop_end=1,
                     push_next=True, **dst, **tiles))
    builder.emit(builder.store_tiles(out_t, 0, 0, 0, rows, n_tiles, pop_prev=True,
                                     push_prev=True))
    builder.finish(pop_next=True)
    program = builder.build()
    program.run()
    expected = np.clip((_matmul(a, w) + bias) >> 6, -128, 127).astype(np.int8)
    np.testing.assert_array_equal(program.read("OUT"), expected)


def test_alu_operations_match_reference_semantics():
    values = np.array([-(2**31), -7, -1, 0, 5, 2**31 - 1], dtype=np.int64)
    np.testing.assert_array_equal(alu_apply(AluOp.MIN, values, 3, 32), np.minimum(values, 3))
    np.testing.assert_array_equal(alu_apply(AluOp.MAX, values, -2, 32), np.maximum(values, -2))
    np.testing.assert_array_equal(alu_apply(AluOp.SHR, values, 2, 32), values >> 2)
    np.testing.assert_array_equal(alu_apply(AluOp.SHR, values, 40, 32), values >> 31)
    np.testing.assert_array_equal(
        alu_apply(AluOp.SHR, values, -3, 32).astype(np.int32), (values << 3).astype(np.int32)
    )
    np.testing.assert_array_equal(
        alu_apply(AluOp.MUL, values, values, 32).astype(np.int32),
        (values * values).astype(np.int32),
    )
    # a shifted product keeps the high bits an int32 product loses
    multiplier = np.int64(1_518_500_250)
    exact = [(int(v) * int(multiplier)) >> 40 for v in values]
    np.testing.assert_array_equal(alu_apply(AluOp.MUL, values, multiplier, 32, 40), exact)


def _machine_with_uops(config: HardwareConfig, uops: list[MicroOp]) -> FunctionalSimulator:
    machine = FunctionalSimulator(config, np.zeros(4096, np.uint8))
    builder = ProgramBuilder(config)
    kernel = builder.uops("k", uops)
    program = builder.build()
    machine.dram[: program.dram.size] = program.dram
    machine.execute(builder.load_uops(kernel))
    return machine


def test_alu_with_accumulator_operand_and_factors():
    config = HardwareConfig()
    machine = _machine_with_uops(config, [MicroOp(dst=0, src=100)])
    machine.acc[:100] = RNG.integers(-1000, 1000, machine.acc[:100].shape)
    machine.acc[100:110] = RNG.integers(-1000, 1000, machine.acc[100:110].shape)
    before = machine.acc.astype(np.int64)
    machine.execute(Alu(alu_op=AluOp.MUL, uop_begin=0, uop_end=1, loop_outer=5, loop_inner=2,
                        dst_factor_outer=2, dst_factor_inner=1, src_factor_outer=2,
                        src_factor_inner=1))
    np.testing.assert_array_equal(machine.acc[:10], before[:10] * before[100:110])
    np.testing.assert_array_equal(machine.acc[10:], before[10:])


def test_alu_rejects_order_dependent_iterations():
    config = HardwareConfig()
    machine = _machine_with_uops(config, [MicroOp(dst=0, src=1)])
    with pytest.raises(IllegalInstructionError,
                       match="instruction 3: ALU iteration 0 reads accumulator tile 1"):
        machine.execute(Alu(alu_op=AluOp.ADD, uop_begin=0, uop_end=1, loop_outer=2,
                            loop_inner=1, dst_factor_outer=1, src_factor_outer=1), 3)
    # the fields alone show a tile written twice (its loop part repeats): refused at once
    with pytest.raises(IllegalInstructionError, match="instruction 4: ALU destination factors"):
        machine.execute(Alu(alu_op=AluOp.ADD, use_imm=True, imm=1, uop_begin=0, uop_end=1,
                            loop_outer=2, loop_inner=1), 4)
    # two micro-ops that name one tile: found when the indices are computed
    machine = _machine_with_uops(config, [MicroOp(dst=5, src=0), MicroOp(dst=5, src=1)])
    with pytest.raises(IllegalInstructionError, match="instruction 6: ALU writes accumulator "
                       "tile 5 in more than one iteration"):
        machine.execute(Alu(alu_op=AluOp.ADD, use_imm=True, imm=1, uop_begin=0, uop_end=2,
                            loop_outer=1, loop_inner=1), 6)


def test_runtime_index_beyond_buffer_names_instruction():
    config = HardwareConfig()
    machine = _machine_with_uops(config, [MicroOp(dst=config.acc_depth - 1, src=0, wgt=0)])
    with pytest.raises(IllegalInstructionError, match="instruction 7: GEMM accumulator index"):
        machine.execute(Gemm(uop_begin=0, uop_end=1, loop_outer=2, loop_inner=1,
                             acc_factor_outer=1), 7)


def test_store_and_load_outside_dram_are_rejected():
    config = HardwareConfig()
    machine = FunctionalSimulator(config, np.zeros(1024, np.uint8))
    with pytest.raises(IllegalInstructionError, match="instruction 2: LOAD INP touches DRAM"):
        machine.execute(Load(buffer=Buffer.INP, sram_base=0, dram_base=60, y_size=2, x_size=4,
                             x_stride=4), 2)
    with pytest.raises(IllegalInstructionError, match="beyond the buffer's depth"):
        machine.execute(Store(buffer=Buffer.ACC, sram_base=config.acc_depth - 1, dram_base=0,
                              y_size=1, x_size=2, x_stride=2), 5)


def test_alu_reads_sign_extended_input_tiles():
    """src_inp: the operand is an input tile, each int8 element sign-extended; the input
    buffer is never written, so reading tiles the instruction's destinations alias in
    ACC is no hazard."""
    config = HardwareConfig()
    machine = _machine_with_uops(config, [MicroOp(dst=0, src=3)])
    machine.inp[3:9] = _int8(machine.inp[3:9].shape)
    machine.acc[:6] = RNG.integers(-(2 ** 31), 2 ** 31 - 1, machine.acc[:6].shape)
    before = machine.acc.astype(np.int64)
    machine.execute(Alu(alu_op=AluOp.ADD, src_inp=True, uop_begin=0, uop_end=1, loop_outer=6,
                        loop_inner=1, dst_factor_outer=1, src_factor_outer=1))
    expected = (before[:6] + machine.inp[3:9].astype(np.int64) + 2 ** 31) % 2 ** 32 - 2 ** 31
    np.testing.assert_array_equal(machine.acc[:6], expected)
    np.testing.assert_array_equal(machine.acc[6:], before[6:])
    machine.execute(Alu(alu_op=AluOp.MIN, src_inp=True, uop_begin=0, uop_end=1, loop_outer=6,
                        loop_inner=1, dst_factor_outer=1, src_factor_outer=1))
    np.testing.assert_array_equal(machine.acc[:6], np.minimum(expected, machine.inp[3:9]))


def test_alu_input_operand_needs_square_tiles():
    config = HardwareConfig(log_block_in=3, log_inp_buffer_bytes=14, log_wgt_buffer_bytes=16)
    machine = _machine_with_uops(config, [MicroOp(dst=0, src=0)])
    with pytest.raises(IllegalInstructionError, match="block_in=8 != block_out=16"):
        machine.execute(Alu(alu_op=AluOp.ADD, src_inp=True, uop_begin=0, uop_end=1,
                            loop_outer=1, loop_inner=1), 2)
