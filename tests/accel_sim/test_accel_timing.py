"""The timing model: the shared-port model of the RTL (exact schedules worked out by
hand from the RTL's rules, the shared read port, fetch, look-ahead), the cost-only
model, and double buffering."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc.accel_sim.config import HardwareConfig
from heterocc.accel_sim.isa import Alu, AluOp, Buffer, Finish, Gemm, Load, Module, Store
from heterocc.accel_sim.reference_programs import GemmTiling, tiled_gemm_program
from heterocc.accel_sim.timing import MachineTiming, instruction_cost, schedule_stream
from heterocc.errors import DeadlockError

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


def _small_stream():
    load = Load(buffer=Buffer.INP, sram_base=0, dram_base=0, y_size=1, x_size=8, x_stride=8,
                push_next=True)  # 16 beats
    uops = Load(buffer=Buffer.UOP, sram_base=0, dram_base=0, y_size=1, x_size=2, x_stride=2)
    gemm = Gemm(uop_begin=0, uop_end=1, loop_outer=10, loop_inner=1, pop_prev=True,
                push_next=True)
    store = Store(buffer=Buffer.OUT, sram_base=0, dram_base=0, y_size=1, x_size=1, x_stride=1,
                  pop_prev=True, push_prev=True)  # 2 beats
    return [load, uops, gemm, store, Finish(pop_next=True)]


def test_cost_only_model_overlaps_modules_and_tokens_gate_them():
    # 28 cycles for the input load (2 + 10 + 16), 13 for the micro-ops, 12 for the
    # GEMM, 14 for the store (2 + 10 + 2), 2 for FINISH
    report = schedule_stream(_small_stream(), CONFIG, cost=instruction_cost)
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


RTL_LIKE = HardwareConfig(instruction_overhead_cycles=4, dram_latency_cycles=10)


def test_shared_port_model_schedule_worked_out_by_hand():
    """Edges from the start, as the RTL has them (docs/isa.md section 7), latency 10."""
    report = schedule_stream(_small_stream(), RTL_LIKE)
    spans = {entry.index: (entry.start, entry.end) for entry in report.schedule}
    # fetch: one burst of five instructions (10 beats) granted at edge 3, first beat
    # at 3 + 10 + 1 = 14; instruction k arrives at 15 + 2k, is dispatched one edge
    # later and may issue the edge after that
    # input LOAD: issues at 17, its burst is granted at 19 and waits for the fetch
    # burst (last beat 23) and the latency: beats 30..45, end 45 + 3
    assert spans[0] == (17, 48)
    # micro-op LOAD: issues at 19, granted at 21, its beat follows the input burst on
    # the shared data channel: words written at 46 and 47, end 50
    assert spans[1] == (19, 50)
    # GEMM: 4 + 10 iterations once the input token (48) and the module (50) are ready
    assert spans[2] == (50, 64)
    # STORE: beats at +3 and +4, answered 10 cycles after the last, end 2 later
    assert spans[3] == (64, 80)
    assert spans[4] == (80, 82)
    assert report.total_cycles == 83
    assert report.modules[Module.LOAD].stall_cycles == 17
    assert report.modules[Module.COMPUTE].busy_cycles == (50 - 19) + 14 + 2


def test_concurrent_loads_share_the_read_port():
    wide = dict(sram_base=0, dram_base=0, y_size=8, x_size=8, x_stride=8)
    weights = Load(buffer=Buffer.WGT, **wide)  # 64 tiles of 32 beats
    accumulators = Load(buffer=Buffer.ACC, **wide)  # 64 tiles of 8 beats

    def load_end(stream, index):
        report = schedule_stream(stream, RTL_LIKE)
        return next(entry.end for entry in report.schedule if entry.index == index)

    alone = {"wgt": load_end([weights, Finish()], 0), "acc": load_end([accumulators, Finish()], 0)}
    together = schedule_stream([weights, accumulators, Finish()], RTL_LIKE)
    ends = {entry.index: entry.end for entry in together.schedule}
    # both run at once, so each takes longer than alone, and together they cannot beat
    # one beat per cycle over all 64 * (32 + 8) beats
    assert ends[0] > alone["wgt"] and ends[1] > alone["acc"]
    assert max(ends[0], ends[1]) >= 64 * (32 + 8)
    # the cost-only model gives each its own port
    separate = schedule_stream([weights, accumulators, Finish()], RTL_LIKE, cost=instruction_cost)
    assert separate.total_cycles < together.total_cycles


def test_instruction_fetch_bounds_short_instructions():
    config = HardwareConfig(dram_latency_cycles=64)
    gemms = [Gemm(uop_begin=0, uop_end=1, loop_outer=1, loop_inner=1) for _ in range(160)]
    report = schedule_stream([*gemms, Finish()], config)
    # 5-cycle GEMMs, but each burst of 8 instructions takes the latency and 16 beats
    bursts = -(-len(gemms) // 8)
    assert report.total_cycles >= bursts * (64 + 16)
    assert report.total_cycles > 2 * len(gemms) * 5


def test_a_stream_beyond_the_command_queues_still_gets_a_schedule():
    # the load module's first LOAD waits for the GEMM's token, but 70 more loads come
    # before the GEMM: the RTL's 64-entry command queue and its fetch would stall, so
    # the model times it as if the queues were unbounded
    tile = dict(buffer=Buffer.INP, sram_base=0, dram_base=0, y_size=1, x_size=1, x_stride=1)
    stream = [Load(pop_next=True, **tile), *[Load(**tile) for _ in range(70)],
              Gemm(uop_begin=0, uop_end=0, loop_outer=0, loop_inner=0, push_prev=True),
              Finish()]
    report = schedule_stream(stream, RTL_LIKE)
    assert len(report.schedule) == len(stream)
    small = MachineTiming(command_queue_depth=128)
    assert schedule_stream(stream, RTL_LIKE, machine=small).total_cycles == report.total_cycles


def test_deadlocks_are_reported_by_both_models():
    stream = [Gemm(uop_begin=0, uop_end=1, loop_outer=1, loop_inner=1, pop_prev=True),
              Finish()]
    for cost in (None, instruction_cost):
        with pytest.raises(DeadlockError, match="LOAD_TO_COMPUTE"):
            schedule_stream(stream, CONFIG, cost=cost)


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
