"""Unit benches of the accelerator's blocks, each against a Python oracle.

Every ``@cocotb.test`` here targets one top level; ``HC_UNIT`` (set by the
pytest entry point, tests/hw/test_rtl_units.py) names the block under test and
``HC_CONFIG_NAME`` the HardwareConfig the RTL header was generated from.

- ``hc_gemm_core``: random and extreme tiles, checked against a NumPy matmul
  wrapped to the accumulator width;
- ``hc_alu``: every operation with immediate and tensor operands, checked
  against the simulator's own ``alu_apply``;
- ``hc_fifo`` and ``hc_token_queue``: random push/pop traffic against a deque
  and a counter;
- ``hc_burst_gen``: random 2-D transfers, checked against a Python split of
  each row at MAX_BEATS beats and 4 KiB boundaries.
"""

from __future__ import annotations

import os
import random
from collections import deque

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, FallingEdge, RisingEdge, Timer

from heterocc.accel_sim import AluOp, HardwareConfig
from heterocc.accel_sim.functional import alu_apply, lut_apply
from heterocc.accel_sim.isa import LUT_ENTRIES

UNIT = os.environ.get("HC_UNIT", "")
CONFIG = HardwareConfig.from_name(os.environ.get("HC_CONFIG_NAME", HardwareConfig().name))
SEED = 1234


def _pack(values: np.ndarray, bits: int) -> int:
    """Little-endian bit vector of signed elements, element 0 in the low bits."""
    word = 0
    for index, value in enumerate(np.ravel(values)):
        word |= (int(value) & ((1 << bits) - 1)) << (index * bits)
    return word


def _unpack(word: int, count: int, bits: int) -> np.ndarray:
    values = [(word >> (index * bits)) & ((1 << bits) - 1) for index in range(count)]
    return np.array([v - (1 << bits) if v >> (bits - 1) else v for v in values], np.int64)


def _wrap(values: np.ndarray, bits: int) -> np.ndarray:
    values = np.asarray(values, np.int64) & ((1 << bits) - 1)
    return np.where(values >> (bits - 1), values - (1 << bits), values)


async def _clock_and_reset(dut) -> None:
    Clock(dut.clk, 10, unit="ns").start()
    dut.rst.value = 1
    await ClockCycles(dut.clk, 2)
    dut.rst.value = 0


@cocotb.test(skip=UNIT != "hc_gemm_core")
async def gemm_core_matches_numpy(dut):
    """dot[b][n] = sum_k inp[b][k] * wgt[n][k], wrapped to acc_bits."""
    rng = np.random.default_rng(SEED)
    batch, block_in, block_out = CONFIG.batch, CONFIG.block_in, CONFIG.block_out
    low_i, high_i = -(1 << (CONFIG.inp_bits - 1)), 1 << (CONFIG.inp_bits - 1)
    low_w, high_w = -(1 << (CONFIG.wgt_bits - 1)), 1 << (CONFIG.wgt_bits - 1)
    cases = [
        (np.full((batch, block_in), low_i), np.full((block_out, block_in), low_w)),
        (np.full((batch, block_in), high_i - 1), np.full((block_out, block_in), low_w)),
    ] + [
        (rng.integers(low_i, high_i, (batch, block_in)),
         rng.integers(low_w, high_w, (block_out, block_in)))
        for _ in range(20)
    ]
    # extremes mixed per element: the packed multiplies (two weights of neighbouring
    # outputs in one operand) must separate every sign combination exactly
    extremes_i = [low_i, low_i + 1, -1, 0, 1, high_i - 2, high_i - 1]
    extremes_w = [low_w, low_w + 1, -1, 0, 1, high_w - 2, high_w - 1]
    cases += [
        (rng.choice(extremes_i, (batch, block_in)), rng.choice(extremes_w, (block_out, block_in)))
        for _ in range(40)
    ]
    for inp, wgt in cases:
        dut.inp.value = _pack(inp, CONFIG.inp_bits)
        dut.wgt.value = _pack(wgt, CONFIG.wgt_bits)
        await Timer(1, unit="ns")
        expected = _wrap(inp.astype(np.int64) @ wgt.astype(np.int64).T, CONFIG.acc_bits)
        got = _unpack(int(dut.dot.value), batch * block_out, CONFIG.acc_bits)
        np.testing.assert_array_equal(got.reshape(batch, block_out), expected)


@cocotb.test(skip=UNIT != "hc_alu")
async def alu_matches_simulator(dut):
    """Every ALU operation, immediate and tensor operand, against alu_apply (LUT,
    which ignores its operand, against lut_apply with a random table)."""
    rng = np.random.default_rng(SEED)
    bits = CONFIG.acc_bits
    elements = CONFIG.batch * CONFIG.block_out
    table = rng.integers(-128, 128, LUT_ENTRIES).astype(np.int8)
    # the table goes in as the compute module loads it: a word of four entries a cycle
    Clock(dut.clk, 10, unit="ns").start()
    words = np.frombuffer(table.tobytes(), "<u4")
    dut.table_write.value = 1
    for index, word in enumerate(words):
        dut.table_word.value = index
        dut.table_data.value = int(word)
        await RisingEdge(dut.clk)
    dut.table_write.value = 0
    extremes = np.array([-(1 << (bits - 1)), -1, 0, 1, (1 << (bits - 1)) - 1])
    for trial in range(12):
        x = rng.integers(-(1 << (bits - 1)), 1 << (bits - 1), elements)
        y = rng.integers(-(1 << (bits - 1)), 1 << (bits - 1), elements)
        if trial < 5:
            x[: extremes.size] = extremes
            y[: extremes.size] = np.roll(extremes, trial)
        for op in AluOp:
            for use_imm in (False, True):
                if op == AluOp.SHR:
                    imm = int(rng.integers(-40, 41))
                    y_operand = rng.integers(-40, 41, elements) if trial % 2 else y
                elif op == AluOp.MUL and not use_imm:
                    # a tensor MUL's imm: how far its 2*acc_bits-bit product shifts right
                    imm = int(rng.integers(0, 2 * bits))
                    y_operand = y
                else:
                    imm = int(rng.integers(-(1 << 15), 1 << 15))
                    y_operand = y
                dut.op.value = int(op)
                dut.use_imm.value = int(use_imm)
                dut.imm.value = imm & 0xFFFF
                dut.x_tile.value = _pack(x, bits)
                dut.y_tile.value = _pack(y_operand, bits)
                await Timer(1, unit="ns")
                operand = imm if use_imm else y_operand
                shift = imm if op == AluOp.MUL and not use_imm else 0
                expected = _wrap(lut_apply(table, x.astype(np.int64)) if op == AluOp.LUT
                                 else alu_apply(op, x.astype(np.int64), operand, bits, shift),
                                 bits)
                got = _unpack(int(dut.result.value), elements, bits)
                np.testing.assert_array_equal(got, expected, err_msg=f"{op.name} imm={use_imm}")


@cocotb.test(skip=UNIT != "hc_fifo")
async def fifo_matches_deque(dut):
    """Random pushes and pops against a deque, full and empty flags included."""
    await _clock_and_reset(dut)
    capacity = 1 << int(dut.LOG_DEPTH.value)
    model: deque[int] = deque()
    chooser = random.Random(SEED)
    for _ in range(300):
        await FallingEdge(dut.clk)
        assert bool(dut.empty.value) == (not model)
        assert bool(dut.full.value) == (len(model) == capacity)
        assert int(dut.count.value) == len(model)
        if model:
            assert int(dut.head.value) == model[0]
        push = chooser.random() < 0.55
        pop = chooser.random() < 0.5
        value = chooser.getrandbits(int(dut.WIDTH.value))
        dut.push.value = int(push)
        dut.pop.value = int(pop)
        dut.push_data.value = value
        await RisingEdge(dut.clk)
        was_full, was_empty = len(model) == capacity, not model
        if pop and not was_empty:
            model.popleft()
        if push and not was_full:
            model.append(value)
    dut.push.value = 0
    dut.pop.value = 0


@cocotb.test(skip=UNIT != "hc_token_queue")
async def token_queue_matches_counter(dut):
    """Random pushes and pops against a counter; room ends at DEPTH tokens."""
    await _clock_and_reset(dut)
    depth = int(dut.DEPTH.value)
    tokens = 0
    chooser = random.Random(SEED)
    for step in range(300):
        await FallingEdge(dut.clk)
        assert int(dut.count.value) == tokens
        assert bool(dut.has_token.value) == (tokens > 0)
        assert bool(dut.has_room.value) == (tokens < depth)
        # mostly pushes early, mostly pops late: the queue fills up and drains
        push = tokens < depth and chooser.random() < (0.8 if step < 150 else 0.3)
        pop = tokens > 0 and chooser.random() < (0.3 if step < 150 else 0.8)
        dut.push.value = int(push)
        dut.pop.value = int(pop)
        await RisingEdge(dut.clk)
        tokens += int(push) - int(pop)


def _reference_bursts(first: int, stride: int, rows: int, row_bytes: int,
                      bus_bytes: int, max_beats: int) -> list[tuple[int, int]]:
    bursts = []
    for row in range(rows):
        start = first + row * stride
        address = start - start % bus_bytes
        beats = -(-(start + row_bytes - address) // bus_bytes)
        while beats:
            length = min(beats, max_beats, (4096 - address % 4096) // bus_bytes)
            bursts.append((address, length))
            address += length * bus_bytes
            beats -= length
    return bursts


@cocotb.test(skip=UNIT != "hc_burst_gen")
async def burst_gen_matches_reference(dut):
    """Random transfers (tile and micro-op word mode) against a Python split."""
    await _clock_and_reset(dut)
    bus_bytes = CONFIG.bus_width_bits // 8
    chooser = random.Random(SEED)
    for trial in range(30):
        word_mode = trial % 3 == 0
        log_tile_beats = 0 if word_mode else chooser.randint(0, 5)
        unit = 4 if word_mode else bus_bytes << log_tile_beats
        rows, elements = chooser.randint(1, 4), chooser.randint(1, 300)
        first = chooser.randint(0, 3000) * unit
        stride = (elements + chooser.randint(0, 50)) * unit
        await FallingEdge(dut.clk)
        dut.start.value = 1
        dut.word_mode.value = int(word_mode)
        dut.log_tile_beats.value = log_tile_beats
        dut.first_byte.value = first
        dut.stride_bytes.value = stride
        dut.rows.value = rows
        dut.elements.value = elements
        dut.accept.value = 0
        await FallingEdge(dut.clk)
        dut.start.value = 0
        produced = []
        # values seen at a falling edge hold through the next rising edge, which
        # takes the burst when accept is high
        while dut.valid.value:
            accept = chooser.random() < 0.7
            dut.accept.value = int(accept)
            if accept:
                produced.append((int(dut.addr.value), int(dut.beats.value)))
            await FallingEdge(dut.clk)
        dut.accept.value = 0
        expected = _reference_bursts(first, stride, rows, elements * unit, bus_bytes,
                                     int(dut.MAX_BEATS.value))
        assert produced == expected, f"trial {trial}: {produced[:4]} != {expected[:4]}"
