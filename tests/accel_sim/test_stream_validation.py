"""The device boundary: every field bounded before anything is allocated, the ALU's
write-once rule, the work budget, and no access outside DRAM with or without the
checker (docs/isa.md section 6)."""

from __future__ import annotations

import dataclasses
import itertools
import re
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from heterocc.accel_sim import (
    Alu,
    AluOp,
    Buffer,
    Finish,
    FunctionalSimulator,
    Gemm,
    HardwareConfig,
    Load,
    MicroOp,
    Store,
    check_stream,
    decode_stream,
    encode_stream,
    encode_uops,
    find_stream_errors,
    run_stream,
    schedule_stream,
)
from heterocc.accel_sim.config import WORK_BUDGET_KEYS
from heterocc.accel_sim.fuzz import GuardedDram, reference_seeds
from heterocc.accel_sim.hil import dram_for_stream
from heterocc.accel_sim.validation import instruction_work, loop_part_injective
from heterocc.errors import AcceleratorError, IllegalInstructionError

CONFIG = HardwareConfig()
#: the issue's ceiling on the checker's memory, whatever the fields say
CHECKER_MEMORY_LIMIT = 100 << 20


def _hostile_load() -> Load:
    """One 16-byte LOAD asking for 65535 x 65535 tiles at the end of a 4 GiB DRAM."""
    return Load(buffer=Buffer.INP, sram_base=0, dram_base=(1 << 32) - 1, y_size=65535,
                x_size=65535, x_stride=65535, y_pad_top=15, y_pad_bottom=15, x_pad_left=15,
                x_pad_right=15, push_next=True)


def _hostile_gemm() -> Gemm:
    """Every loop extent at its largest: 16383 x 16383 x 8191 iterations."""
    return Gemm(uop_begin=0, uop_end=CONFIG.uop_depth - 1, loop_outer=(1 << 14) - 1,
                loop_inner=(1 << 14) - 1, pop_prev=True)


def _peak_bytes(action) -> int:
    tracemalloc.start()
    try:
        action()
    except AcceleratorError:
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


@pytest.mark.parametrize("hostile", [_hostile_load, _hostile_gemm], ids=["load", "gemm"])
def test_hostile_fields_are_refused_in_bounded_memory(hostile):
    stream = [hostile(), Finish()]
    words = encode_stream(stream, CONFIG)
    dram = np.zeros(1 << 16, np.uint8)
    for action in (
        lambda: check_stream(decode_stream(words, CONFIG), CONFIG, dram_bytes=dram.size),
        lambda: schedule_stream(stream, CONFIG),
        lambda: run_stream(stream, CONFIG, dram, check=False),
        lambda: FunctionalSimulator(CONFIG, dram).execute(stream[0], 0),
        lambda: dram_for_stream(stream, [], CONFIG),
    ):
        assert _peak_bytes(action) < CHECKER_MEMORY_LIMIT
        with pytest.raises(IllegalInstructionError) as refused:
            action()
        assert refused.value.index == 0 and refused.value.field and refused.value.limit


def test_refusals_name_the_index_field_and_limit():
    with pytest.raises(IllegalInstructionError) as refused:
        check_stream([Finish(), _hostile_load(), Finish()], CONFIG)
    error = refused.value
    assert error.index == 1
    assert error.field.startswith("sram_base+") and error.limit == CONFIG.inp_depth
    assert "instruction 1: LOAD INP covers SRAM entries" in str(error)
    assert "beyond the buffer's depth 2048" in str(error)


@pytest.mark.parametrize("field", ["dram_base", "sram_base", "x_stride", "y_size"])
@pytest.mark.parametrize("value", [-1, -(1 << 31), 1 << 40])
def test_unencodable_record_fields_are_refused_everywhere(field, value):
    store = Store(buffer=Buffer.ACC, sram_base=0, dram_base=0, y_size=1, x_size=1, x_stride=1)
    stream = [dataclasses.replace(store, **{field: value}), Finish()]
    memory = GuardedDram(4096)
    for action in (
        lambda: check_stream(stream, CONFIG),
        lambda: schedule_stream(stream, CONFIG),
        lambda: run_stream(stream, CONFIG, memory.dram, check=False),
        lambda: FunctionalSimulator(CONFIG, memory.dram).execute(stream[0], 0),
    ):
        with pytest.raises(IllegalInstructionError, match=f"instruction 0: STORE field {field}"):
            action()
    assert memory.intact()


def test_unchecked_runs_never_write_outside_dram():
    """A STORE that reaches one tile past the end: refused by the simulator itself."""
    memory = GuardedDram(4 * CONFIG.acc_tile_bytes)
    store = Store(buffer=Buffer.ACC, sram_base=0, dram_base=3, y_size=1, x_size=2, x_stride=2)
    with pytest.raises(IllegalInstructionError, match="touches DRAM bytes"):
        run_stream([store, Finish()], CONFIG, memory.dram, check=False)
    with pytest.raises(IllegalInstructionError, match="touches DRAM bytes"):
        FunctionalSimulator(CONFIG, memory.dram).execute(store, 0)
    assert memory.intact()


def test_enumerations_in_records_must_be_members():
    load = Load(buffer=7, sram_base=0, dram_base=0, y_size=1, x_size=1, x_stride=1)
    with pytest.raises(IllegalInstructionError, match="unknown buffer 7") as refused:
        check_stream([load, Finish()], CONFIG)
    assert refused.value.field == "buffer"
    alu = Alu(alu_op=6, uop_begin=0, uop_end=0, loop_outer=0, loop_inner=0)
    with pytest.raises(IllegalInstructionError, match="unknown alu_op 6"):
        FunctionalSimulator(CONFIG, np.zeros(16, np.uint8)).execute(alu, 0)


def test_truncated_and_overlong_streams_are_refused_by_decode():
    words = encode_stream([Finish(), Finish()], CONFIG)
    with pytest.raises(IllegalInstructionError, match="instruction 1: the stream ends 5 byte"):
        decode_stream(words[:21], CONFIG)
    small = dataclasses.replace(CONFIG, max_stream_instructions=1)
    with pytest.raises(IllegalInstructionError, match="2 instructions, more than the budget of 1"):
        decode_stream(words, small)
    with pytest.raises(IllegalInstructionError, match="more than the budget of 1"):
        check_stream([Finish(), Finish()], small)


# --- the ALU's write-once rule --------------------------------------------------------------


def _alu_stream(**fields) -> list:
    uops = Load(buffer=Buffer.UOP, sram_base=0, dram_base=0, y_size=1, x_size=1, x_stride=1)
    alu = Alu(alu_op=AluOp.ADD, use_imm=True, imm=1, uop_begin=0, uop_end=1, **fields)
    return [uops, alu, Finish()]


@pytest.mark.parametrize("fields", [
    dict(loop_outer=1, loop_inner=16),                      # one tile, sixteen times
    dict(loop_outer=4, loop_inner=1, dst_factor_inner=1),   # the outer loop repeats a tile
    dict(loop_outer=2, loop_inner=2, dst_factor_outer=1, dst_factor_inner=1),  # (1,0) = (0,1)
    dict(loop_outer=3, loop_inner=8, dst_factor_outer=4, dst_factor_inner=2),  # (1,0) = (0,2)
    dict(loop_outer=CONFIG.acc_depth, loop_inner=2, dst_factor_outer=2, dst_factor_inner=1),
])
def test_checker_refuses_alu_loops_that_rewrite_a_tile(fields):
    with pytest.raises(IllegalInstructionError, match="instruction 1: ALU") as refused:
        check_stream(_alu_stream(**fields), CONFIG)
    assert "written twice" in str(refused.value) or "write twice" in str(refused.value)


@pytest.mark.parametrize("fields", [
    dict(loop_outer=4, loop_inner=4, dst_factor_outer=4, dst_factor_inner=1),
    dict(loop_outer=16, loop_inner=1, dst_factor_outer=1),
    dict(loop_outer=3, loop_inner=4, dst_factor_outer=2, dst_factor_inner=3),  # gcd 1, 3 < 3?
])
def test_checker_accepts_alu_loops_that_write_each_tile_once(fields):
    assert find_stream_errors(_alu_stream(**fields), CONFIG) == []


def test_loop_part_injectivity_matches_enumeration():
    for outer, inner, f_outer, f_inner in itertools.product(range(1, 6), range(1, 6),
                                                            range(0, 7), range(0, 7)):
        values = [o * f_outer + i * f_inner for o in range(outer) for i in range(inner)]
        assert loop_part_injective(outer, inner, f_outer, f_inner) == \
            (len(set(values)) == len(values)), (outer, inner, f_outer, f_inner)


# --- the work budget ------------------------------------------------------------------------


def _gemm_stream(count: int) -> list:
    uops = Load(buffer=Buffer.UOP, sram_base=0, dram_base=0, y_size=1, x_size=1, x_stride=1)
    gemm = Gemm(uop_begin=0, uop_end=1, loop_outer=10, loop_inner=10)
    return [uops, *[gemm] * count, Finish()]


def test_budget_refuses_where_the_total_passes_it():
    config = dataclasses.replace(CONFIG, max_stream_iterations=250)
    check_stream(_gemm_stream(2), config)
    with pytest.raises(IllegalInstructionError) as refused:
        check_stream(_gemm_stream(3), config)
    assert refused.value.index == 3 and refused.value.limit == 250
    assert refused.value.field == "max_stream_iterations"
    for action in (lambda: schedule_stream(_gemm_stream(3), config),
                   lambda: run_stream(_gemm_stream(3), config, np.zeros(64, np.uint8),
                                      check=False)):
        with pytest.raises(IllegalInstructionError, match="instruction 3: the stream's GEMM"):
            action()
    machine = FunctionalSimulator(config, np.zeros(64, np.uint8))
    for index, instruction in enumerate(_gemm_stream(3)[:3]):
        machine.execute(instruction, index)
    with pytest.raises(IllegalInstructionError, match="beyond the budget of 250"):
        machine.execute(_gemm_stream(3)[3], 3)


def test_budget_counts_dma_tiles():
    config = dataclasses.replace(CONFIG, max_stream_tiles=100)
    load = Load(buffer=Buffer.INP, sram_base=0, dram_base=0, y_size=6, x_size=6, x_stride=6,
                y_pad_top=2, x_pad_left=2)  # 8 x 8 = 64 padded tiles
    assert instruction_work(load).tiles == 64
    with pytest.raises(IllegalInstructionError, match="reach 128 tiles here") as refused:
        check_stream([load, load, Finish()], config)
    assert refused.value.index == 1 and refused.value.field == "max_stream_tiles"


def test_reference_programs_are_far_inside_the_default_budget():
    for seed in reference_seeds():
        work = [instruction_work(i) for i in seed.instructions]
        assert len(seed.instructions) * 1000 < CONFIG.max_stream_instructions
        assert sum(w.tiles for w in work) * 1000 < CONFIG.max_stream_tiles
        assert sum(w.iterations for w in work) * 1000 < CONFIG.max_stream_iterations


def test_a_gemm_with_more_iterations_than_a_piece_is_exact():
    """The simulator runs long GEMM loop nests in pieces; the sums are the same."""
    rng = np.random.default_rng(7)
    uops = [MicroOp(dst=u % 7, src=u, wgt=(3 * u) % 11) for u in range(64)]
    dram = np.zeros(4 * len(uops), np.uint8)
    dram[:] = encode_uops(uops, CONFIG).view(np.uint8)
    machine = FunctionalSimulator(CONFIG, dram)
    machine.execute(Load(buffer=Buffer.UOP, sram_base=0, dram_base=0, y_size=1,
                         x_size=len(uops), x_stride=len(uops)), 0)
    machine.inp[:] = rng.integers(-128, 128, machine.inp.shape)
    machine.wgt[:] = rng.integers(-128, 128, machine.wgt.shape)
    gemm = Gemm(uop_begin=0, uop_end=64, loop_outer=40, loop_inner=30, acc_factor_outer=7,
                inp_factor_outer=1, inp_factor_inner=2, wgt_factor_inner=3)
    o, i, u = np.meshgrid(np.arange(40), np.arange(30), np.arange(64), indexing="ij")
    dst = (o * 7 + u % 7).ravel()
    src = (o + 2 * i + u).ravel()
    wgt = (3 * i + (3 * u) % 11).ravel()
    products = np.einsum("nbk,nck->nbc", machine.inp[src].astype(np.int64),
                         machine.wgt[wgt].astype(np.int64))
    expected = np.zeros(machine.acc.shape, np.int64)
    np.add.at(expected, dst, products)
    machine.execute(gemm, 1)
    np.testing.assert_array_equal(machine.acc, expected.astype(np.int32))


def test_docs_list_the_budget_the_code_has():
    """docs/isa.md's config table gives every budget key with the code's default."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "isa.md").read_text()
    for key in WORK_BUDGET_KEYS:
        listed = re.search(rf"^\| `{key}` \| (\d+) \|", text, re.MULTILINE)
        assert listed, f"docs/isa.md does not list {key}"
        assert int(listed.group(1)) == getattr(HardwareConfig(), key), key


def test_a_stream_files_config_name_cannot_ask_for_huge_buffers():
    with pytest.raises(AcceleratorError, match="on-chip buffers are at most 2\\*\\*24 bytes"):
        HardwareConfig.from_name("1x1x1_i8w8a32o8_15_15_18_30_b64q64")


def test_an_instruction_found_legal_is_still_checked_against_a_smaller_dram():
    store = Store(buffer=Buffer.ACC, sram_base=0, dram_base=10, y_size=1, x_size=1,
                  x_stride=1)
    FunctionalSimulator(CONFIG, np.zeros(4096, np.uint8)).execute(store, 0)
    memory = GuardedDram(10 * CONFIG.acc_tile_bytes)
    with pytest.raises(IllegalInstructionError, match="touches DRAM bytes"):
        FunctionalSimulator(CONFIG, memory.dram).execute(store, 0)
    assert memory.intact()
    # equal but not the same object, with a field of another type: validated afresh
    looks_alike = Store(buffer=Buffer.ACC, sram_base=0, dram_base=10, y_size=1.0, x_size=1,
                        x_stride=1)
    with pytest.raises(IllegalInstructionError, match="y_size=1.0 is not an integer"):
        FunctionalSimulator(CONFIG, np.zeros(4096, np.uint8)).execute(looks_alike, 0)
