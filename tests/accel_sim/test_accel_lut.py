"""The ALU's lookup table: LOAD LUT, ALU LUT, and the checker's rules for them."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc.accel_sim import Alu, AluOp, Buffer, Finish, HardwareConfig, Load, Store
from heterocc.accel_sim.checker import find_stream_errors
from heterocc.accel_sim.encoding import decode_stream, encode_stream, encode_uops
from heterocc.accel_sim.functional import FunctionalSimulator
from heterocc.accel_sim.isa import LUT_ENTRIES, LUT_WORDS, MicroOp, lut_words
from heterocc.errors import AcceleratorError

CONFIG = HardwareConfig()
TABLE_BASE = 64  # in 4-byte words: byte 256
ACC_BASE = 16  # in accumulator tiles (64 bytes): byte 1024


def _stream(lut_op: Alu) -> list:
    return [
        Load(buffer=Buffer.UOP, sram_base=0, dram_base=0, y_size=1, x_size=2, x_stride=2),
        Load(buffer=Buffer.LUT, sram_base=0, dram_base=TABLE_BASE, y_size=1,
             x_size=LUT_WORDS, x_stride=LUT_WORDS),
        Load(buffer=Buffer.ACC, sram_base=0, dram_base=ACC_BASE, y_size=1, x_size=2, x_stride=2),
        lut_op,
        Finish(),
    ]


def _machine(table: np.ndarray, acc: np.ndarray) -> FunctionalSimulator:
    dram = np.zeros(2048, np.uint8)
    uops = encode_uops([MicroOp(0, 0), MicroOp(1, 1)], CONFIG)
    dram[: uops.nbytes] = uops.view(np.uint8)
    dram[TABLE_BASE * 4: TABLE_BASE * 4 + LUT_ENTRIES] = table.view(np.uint8)
    dram[ACC_BASE * 64: ACC_BASE * 64 + acc.nbytes] = acc.reshape(-1).view(np.uint8)
    return FunctionalSimulator(CONFIG, dram)


def test_lut_maps_the_low_byte_of_every_element_through_the_table():
    rng = np.random.default_rng(0)
    table = rng.integers(-128, 128, LUT_ENTRIES).astype(np.int8)
    acc = np.concatenate([np.arange(-128, 128, 16), rng.integers(-(2**31), 2**31, 16)]
                         ).astype(np.int32).reshape(2, 1, 16)
    stream = _stream(Alu(alu_op=AluOp.LUT, use_imm=True, uop_begin=0, uop_end=2,
                         loop_outer=1, loop_inner=1))
    assert find_stream_errors(stream, CONFIG, 2048) == []
    machine = _machine(table, acc)
    for index, instruction in enumerate(stream):
        machine.execute(instruction, index)
    expected = table[(acc.astype(np.int64) & 0xFF)].astype(np.int32)
    np.testing.assert_array_equal(machine.acc[:2], expected)
    # the encoder round-trips the new buffer and operation
    assert decode_stream(encode_stream(stream, CONFIG), CONFIG) == stream


def test_lut_words_pack_entries_little_endian():
    words = lut_words(range(-128, 128))
    assert len(words) == LUT_WORDS
    assert words[0] == int.from_bytes(bytes([128, 129, 130, 131]), "little")
    with pytest.raises(AcceleratorError, match="256 entries"):
        lut_words(range(10))


@pytest.mark.parametrize(("stream", "message"), [
    (_stream(Alu(alu_op=AluOp.LUT, uop_begin=0, uop_end=1, loop_outer=1, loop_inner=1)),
     "LUT reads no operand"),
    (_stream(Alu(alu_op=AluOp.LUT, use_imm=True, imm=3, uop_begin=0, uop_end=1,
                 loop_outer=1, loop_inner=1)), "LUT reads no operand"),
    (_stream(Alu(alu_op=AluOp.LUT, use_imm=True, uop_begin=0, uop_end=1, loop_outer=1,
                 loop_inner=1))[:1] + _stream(Alu(alu_op=AluOp.LUT, use_imm=True, uop_begin=0,
                                                  uop_end=1, loop_outer=1, loop_inner=1))[3:],
     "lookup-table word 0 that no earlier LOAD LUT filled"),
    ([Load(buffer=Buffer.LUT, sram_base=60, dram_base=0, y_size=1, x_size=8, x_stride=8),
      Finish()], "beyond the buffer's depth 64"),
    ([Load(buffer=Buffer.LUT, sram_base=0, dram_base=0, y_size=1, x_size=8, x_stride=8,
           pad_value=3), Finish()], "pads with 0"),
    ([Store(buffer=Buffer.LUT, sram_base=0, dram_base=0, y_size=1, x_size=8, x_stride=8),
      Finish()], "STORE cannot use buffer LUT"),
])
def test_checker_refuses_misused_lookup_tables(stream, message):
    errors = find_stream_errors(stream, CONFIG, 2048)
    assert any(message in str(error) for error in errors), errors
