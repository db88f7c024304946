"""The timing model: cost formulas, concurrency, and double buffering."""

from __future__ import annotations

import numpy as np

from heterocc.accel_sim.config import HardwareConfig
from heterocc.accel_sim.isa import Alu, AluOp, Buffer, Finish, Gemm, Load, Module, Store
from heterocc.accel_sim.reference_programs import GemmTiling, tiled_gemm_program
from heterocc.accel_sim.timing import instruction_cost, schedule_stream

CONFIG = HardwareConfig(
    instruction_overhead_cycles=2, dram_latency_cycles=10, dram_bytes_per_cycle=8,
    gemm_cycles_per_iteration=1, alu_cycles_per_iteration=2,
)


def test_cost_formulas():
    # 2 x 3 input tiles of 16 bytes plus one padding row of 3 tiles: 144 bytes
    load = Load(buffer=Buffer.INP, sram_base=0, dram_base=0, y_size=2, x_size=3, x_stride=3,
                y_pad_top=1)
    assert instruction_cost(load, CONFIG) == 2 + 10 + 144 // 8
    # one row of padding around an empty interior: one zero tile, no DRAM access
    padding_only = Load(buffer=Buffer.ACC, sram_base=0, dram_base=0, y_size=0, x_size=1,
                        x_stride=0, y_pad_top=1)
    assert instruction_cost(padding_only, CONFIG) == 2 + 64 // 8
    store = Store(buffer=Buffer.OUT, sram_base=0, dram_base=0, y_size=1, x_size=3, x_stride=3)
    assert instruction_cost(store, CONFIG) == 2 + 10 + 6
    gemm = Gemm(uop_begin=2, uop_end=5, loop_outer=4, loop_inner=5)
    assert instruction_cost(gemm, CONFIG) == 2 + 60
    alu = Alu(alu_op=AluOp.ADD, uop_begin=0, uop_end=1, loop_outer=3, loop_inner=1)
    assert instruction_cost(alu, CONFIG) == 2 + 6
    assert instruction_cost(Finish(), CONFIG) == 2


def test_modules_overlap_and_tokens_gate_them():
    load = Load(buffer=Buffer.INP, sram_base=0, dram_base=0, y_size=1, x_size=8, x_stride=8,
                push_next=True)  # 2 + 10 + 16 = 28 cycles
    uops = Load(buffer=Buffer.UOP, sram_base=0, dram_base=0, y_size=1, x_size=2, x_stride=2)
    gemm = Gemm(uop_begin=0, uop_end=1, loop_outer=10, loop_inner=1, pop_prev=True,
                push_next=True)  # 12 cycles
    store = Store(buffer=Buffer.OUT, sram_base=0, dram_base=0, y_size=1, x_size=1, x_stride=1,
                  pop_prev=True, push_prev=True)  # 2 + 10 + 2 = 14 cycles
    report = schedule_stream([load, uops, gemm, store, Finish(pop_next=True)], CONFIG)
    starts = {entry.index: (entry.start, entry.end) for entry in report.schedule}
    assert starts[0] == (0, 28)
    assert starts[1] == (0, 2 + 10 + 1)  # concurrent with the input load
    assert starts[2] == (28, 40)  # waits for the input load's token
    assert starts[3] == (40, 54)
    assert starts[4] == (54, 56)
    assert report.total_cycles == 56
    compute = report.modules[Module.COMPUTE]
    assert compute.busy_cycles == 13 + 12 + 2
    assert compute.stall_cycles == (28 - 13) + (54 - 40)
    assert report.modules[Module.STORE].stall_cycles == 40
    assert report.gemm_active_cycles == 10
    assert report.execution_order() == [0, 1, 2, 3, 4]


def test_double_buffering_beats_serial_execution():
    config = HardwareConfig()
    rng = np.random.default_rng(7)
    a = rng.integers(-128, 128, (256, 256)).astype(np.int8)
    w = rng.integers(-128, 128, (128, 256)).astype(np.int8)
    tiling = GemmTiling(block_rows=32, block_cols=4, k_chunk=4)
    reports = {}
    for threads in (1, 2):
        program = tiled_gemm_program(config, a, w, threads, tiling)
        reports[threads] = program.run().timing
        np.testing.assert_array_equal(
            program.read("C"), a.astype(np.int64) @ w.astype(np.int64).T
        )
    serial, double = reports[1], reports[2]
    assert serial.gemm_active_cycles == double.gemm_active_cycles
    assert double.total_cycles < serial.total_cycles
    assert double.gemm_utilization > serial.gemm_utilization
    assert (
        double.modules[Module.COMPUTE].stall_cycles < serial.modules[Module.COMPUTE].stall_cycles
    )
