"""The vectorized GEMM and ALU against a sequential, one-iteration-at-a-time model."""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from heterocc.accel_sim.config import HardwareConfig
from heterocc.accel_sim.encoding import encode_uops
from heterocc.accel_sim.functional import FunctionalSimulator, alu_apply
from heterocc.accel_sim.isa import Alu, AluOp, Buffer, Gemm, Load, MicroOp
from heterocc.errors import IllegalInstructionError

# tiny buffers (2x4x8 core) so that random indices collide often
CONFIG = HardwareConfig(
    log_batch=1, log_block_in=2, log_block_out=3, log_uop_buffer_bytes=6,
    log_inp_buffer_bytes=7, log_wgt_buffer_bytes=8, log_acc_buffer_bytes=9,
)
SMALL = st.integers(0, 3)


def _wrap(values: np.ndarray) -> np.ndarray:
    return values.astype(CONFIG.acc_dtype)


def _machine(seed: int, uops: list[MicroOp]) -> FunctionalSimulator:
    rng = np.random.default_rng(seed)
    machine = FunctionalSimulator(CONFIG, np.zeros(64, np.uint8))
    machine.inp[...] = rng.integers(-128, 128, machine.inp.shape)
    machine.wgt[...] = rng.integers(-128, 128, machine.wgt.shape)
    machine.acc[...] = rng.integers(-(2**31), 2**31, machine.acc.shape)
    words = encode_uops(uops, CONFIG)
    machine.dram[: words.nbytes] = words.view(np.uint8)
    machine.execute(Load(buffer=Buffer.UOP, sram_base=0, dram_base=0, y_size=1,
                         x_size=len(uops), x_stride=len(uops)))
    return machine


def _iterations(instruction, factors: dict[str, tuple[int, int]], uops: list[MicroOp]):
    for o in range(instruction.loop_outer):
        for i in range(instruction.loop_inner):
            for u in range(instruction.uop_begin, instruction.uop_end):
                yield {
                    name: o * outer + i * inner + getattr(uops[u], name)
                    for name, (outer, inner) in factors.items()
                }


uop_lists = st.lists(st.builds(MicroOp, st.integers(0, 7), st.integers(0, 7), st.integers(0, 7)),
                     min_size=1, max_size=5)


@given(uop_lists, st.data(), st.integers(0, 2**32 - 1))
@settings(max_examples=300, deadline=None)
def test_gemm_matches_sequential_model(uops, data, seed):
    begin = data.draw(st.integers(0, len(uops)))
    end = data.draw(st.integers(begin, len(uops)))
    gemm = Gemm(
        reset=data.draw(st.booleans()), uop_begin=begin, uop_end=end,
        loop_outer=data.draw(SMALL), loop_inner=data.draw(SMALL),
        acc_factor_outer=data.draw(SMALL), acc_factor_inner=data.draw(SMALL),
        inp_factor_outer=data.draw(SMALL), inp_factor_inner=data.draw(SMALL),
        wgt_factor_outer=data.draw(SMALL), wgt_factor_inner=data.draw(SMALL),
    )
    factors = {
        "dst": (gemm.acc_factor_outer, gemm.acc_factor_inner),
        "src": (gemm.inp_factor_outer, gemm.inp_factor_inner),
        "wgt": (gemm.wgt_factor_outer, gemm.wgt_factor_inner),
    }
    steps = list(_iterations(gemm, factors, uops))
    depths = {"dst": CONFIG.acc_depth, "src": CONFIG.inp_depth, "wgt": CONFIG.wgt_depth}
    assume(all(step[name] < depths[name] for step in steps for name in depths))
    machine = _machine(seed, uops)
    expected = machine.acc.astype(np.int64)
    for step in steps:
        if gemm.reset:
            expected[step["dst"]] = 0
        else:
            expected[step["dst"]] += machine.inp[step["src"]].astype(np.int64) @ (
                machine.wgt[step["wgt"]].astype(np.int64).T
            )
        expected = _wrap(expected).astype(np.int64)
    machine.execute(gemm)
    np.testing.assert_array_equal(machine.acc, _wrap(expected))


@given(uop_lists, st.data(), st.integers(0, 2**32 - 1))
@settings(max_examples=300, deadline=None)
def test_alu_matches_sequential_model_or_rejects_order_dependence(uops, data, seed):
    begin = data.draw(st.integers(0, len(uops)))
    end = data.draw(st.integers(begin, len(uops)))
    op, use_imm = data.draw(st.sampled_from(list(AluOp))), data.draw(st.booleans())
    # a MUL with a tensor operand shifts its product by imm, in [0, 2 * acc_bits - 1]
    shifts_product = op == AluOp.MUL and not use_imm
    alu = Alu(
        alu_op=op, use_imm=use_imm,
        imm=data.draw(st.integers(0, 63) if shifts_product else st.integers(-(2**15),
                                                                            2**15 - 1)),
        uop_begin=begin, uop_end=end,
        loop_outer=data.draw(SMALL), loop_inner=data.draw(SMALL),
        dst_factor_outer=data.draw(SMALL), dst_factor_inner=data.draw(SMALL),
        src_factor_outer=data.draw(SMALL), src_factor_inner=data.draw(SMALL),
    )
    factors = {
        "dst": (alu.dst_factor_outer, alu.dst_factor_inner),
        "src": (alu.src_factor_outer, alu.src_factor_inner),
    }
    steps = list(_iterations(alu, factors, uops))
    assume(all(step[name] < CONFIG.acc_depth for step in steps for name in factors))
    writes = [step["dst"] for step in steps]
    order_dependent = len(set(writes)) < len(writes) or (
        not alu.use_imm
        and any(
            step["src"] in writes and writes.index(step["src"]) != position
            for position, step in enumerate(steps)
        )
    )
    machine = _machine(seed, uops)
    expected = machine.acc.astype(np.int64)
    for step in steps:
        operand = alu.imm if alu.use_imm else expected[step["src"]]
        expected[step["dst"]] = _wrap(alu_apply(alu.alu_op, expected[step["dst"]], operand, 32,
                                                alu.imm if shifts_product else 0))
    if order_dependent:
        try:
            machine.execute(alu, 0)
        except IllegalInstructionError:
            return
        raise AssertionError("an order-dependent ALU instruction was accepted")
    machine.execute(alu, 0)
    np.testing.assert_array_equal(machine.acc, _wrap(expected))
