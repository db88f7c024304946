"""Command encoding and the simulator's semantics, against NumPy oracles."""

from pathlib import Path

import numpy as np
import pytest
from dotprod_accel.isa import DEPTH, FIELD_LIMIT, ISA, LANES, MachineConfig, Memory
from dotprod_accel.simulator import execute, fresh_memories

from heterocc.errors import IllegalInstructionError
from heterocc.sdk import DeviceTiming

RNG = np.random.default_rng(3)


def test_encode_decode_round_trip():
    commands = [ISA.command("CLEAR", acc=5, count=12),
                ISA.command("DOT", inp=0, wgt=FIELD_LIMIT - 1, acc=7, stride=16),
                ISA.command("VADD", dst=1, lhs=2, rhs=3)]
    words = ISA.encode(commands)
    assert words.dtype == np.uint64
    assert ISA.decode(words) == commands
    # the layout the module docstring documents: opcode in bits 0-3, 15-bit fields after
    assert int(words[0]) == 1 | 5 << 4 | 12 << 19


def test_encode_rejects_a_field_that_does_not_fit():
    with pytest.raises(IllegalInstructionError, match=r"instruction 1: DOT field wgt=32768"):
        ISA.encode([ISA.command("CLEAR", acc=0, count=1),
                    ISA.command("DOT", inp=0, wgt=FIELD_LIMIT, acc=0, stride=8)])


def test_decode_rejects_an_unknown_opcode():
    with pytest.raises(IllegalInstructionError, match="instruction 0: unknown opcode 9"):
        ISA.decode(np.array([9], np.uint64))


def test_the_documented_table_is_the_generated_one():
    tutorial = Path(__file__).resolve().parents[3] / "docs" / "add-a-target.md"
    assert ISA.table() in tutorial.read_text()


def _dot_oracle(acc, x, w):
    """int16 wrap-around semantics: the exact sum, reduced modulo 2**16."""
    exact = acc.astype(np.int64) + w.astype(np.int64) @ x.astype(np.int64)
    return ((exact + 2 ** 15) % 2 ** 16 - 2 ** 15).astype(np.int16)


def test_dot_wraps_like_int16_hardware():
    memories = fresh_memories_small()
    stride = 11
    x = RNG.integers(-128, 128, DEPTH).astype(np.int8)
    w = RNG.integers(-128, 128, (LANES, stride)).astype(np.int8)
    start = RNG.integers(-2 ** 15, 2 ** 15, LANES).astype(np.int16)
    memories[Memory.INP][3:3 + DEPTH] = x
    memories[Memory.WGT][2:2 + w.size] = w.reshape(-1)
    memories[Memory.ACC][9:9 + LANES] = start
    timing = execute(ISA.encode([ISA.command("DOT", inp=3, wgt=2, acc=9, stride=stride)]),
                     memories)
    np.testing.assert_array_equal(memories[Memory.ACC][9:9 + LANES],
                                  _dot_oracle(start, x, w[:, :DEPTH]))
    assert timing == DeviceTiming(1, {"clear": 0, "dot": 1, "vadd": 0})


def test_vadd_and_clear():
    memories = fresh_memories_small()
    acc = memories[Memory.ACC]
    acc[:12] = RNG.integers(-2 ** 15, 2 ** 15, 12)
    lhs, rhs = acc[0:4].astype(np.int64), acc[4:8].astype(np.int64)
    execute(ISA.encode([ISA.command("VADD", dst=8, lhs=0, rhs=4),
                        ISA.command("CLEAR", acc=0, count=6)]), memories)
    np.testing.assert_array_equal(acc[8:12], ((lhs + rhs + 2 ** 15) % 2 ** 16 - 2 ** 15))
    assert not acc[:6].any() and acc[6:8].any()


def test_out_of_range_address_names_the_command():
    memories = fresh_memories_small()
    depth = len(memories[Memory.INP])
    with pytest.raises(IllegalInstructionError, match=r"instruction 0: DOT .* past its"):
        execute(ISA.encode([ISA.command("DOT", inp=depth - 4, wgt=0, acc=0, stride=DEPTH)]),
                memories)


def fresh_memories_small():
    return fresh_memories(MachineConfig(inp_depth=64, wgt_depth=256, acc_depth=64))
