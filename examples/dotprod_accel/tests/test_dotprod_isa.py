"""Command encoding and the simulator's semantics, against NumPy oracles."""

import numpy as np
import pytest
from dotprod_accel.isa import (
    DEPTH,
    FIELD_LIMIT,
    LANES,
    Command,
    MachineConfig,
    Memory,
    Opcode,
    decode,
    encode,
)
from dotprod_accel.simulator import execute, fresh_memories

from heterocc.errors import IllegalInstructionError
from heterocc.sdk import DeviceTiming

RNG = np.random.default_rng(3)


def test_encode_decode_round_trip():
    commands = [Command(Opcode.CLEAR, 5, 12), Command(Opcode.DOT, 0, FIELD_LIMIT - 1, 7, 16),
                Command(Opcode.VADD, 1, 2, 3)]
    words = encode(commands)
    assert words.dtype == np.uint64
    assert decode(words) == commands


def test_encode_rejects_a_field_that_does_not_fit():
    with pytest.raises(IllegalInstructionError, match=r"instruction 1: DOT field b=32768"):
        encode([Command(Opcode.CLEAR, 0, 1), Command(Opcode.DOT, 0, FIELD_LIMIT, 0, 8)])


def test_decode_rejects_an_unknown_opcode():
    with pytest.raises(IllegalInstructionError, match="instruction 0: unknown opcode 9"):
        decode(np.array([9], np.uint64))


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
    timing = execute(encode([Command(Opcode.DOT, 3, 2, 9, stride)]), memories)
    np.testing.assert_array_equal(memories[Memory.ACC][9:9 + LANES],
                                  _dot_oracle(start, x, w[:, :DEPTH]))
    assert timing == DeviceTiming(1, {"clear": 0, "dot": 1, "vadd": 0})


def test_vadd_and_clear():
    memories = fresh_memories_small()
    acc = memories[Memory.ACC]
    acc[:12] = RNG.integers(-2 ** 15, 2 ** 15, 12)
    lhs, rhs = acc[0:4].astype(np.int64), acc[4:8].astype(np.int64)
    execute(encode([Command(Opcode.VADD, 8, 0, 4), Command(Opcode.CLEAR, 0, 6)]), memories)
    np.testing.assert_array_equal(acc[8:12], ((lhs + rhs + 2 ** 15) % 2 ** 16 - 2 ** 15))
    assert not acc[:6].any() and acc[6:8].any()


def test_out_of_range_address_names_the_command():
    memories = fresh_memories_small()
    depth = len(memories[Memory.INP])
    with pytest.raises(IllegalInstructionError, match=r"instruction 0: DOT .* past its"):
        execute(encode([Command(Opcode.DOT, depth - 4, 0, 0, DEPTH)]), memories)


def fresh_memories_small():
    return fresh_memories(MachineConfig(inp_depth=64, wgt_depth=256, acc_depth=64))
