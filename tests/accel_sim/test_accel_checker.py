"""The stream checker and the simulator's run-time deadlock detection."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc.accel_sim.checker import check_stream, find_stream_errors
from heterocc.accel_sim.config import HardwareConfig
from heterocc.accel_sim.isa import Alu, AluOp, Buffer, Finish, Gemm, Instruction, Load, Store
from heterocc.accel_sim.simulator import run_stream
from heterocc.errors import DeadlockError, IllegalInstructionError

CONFIG = HardwareConfig()


def _uop_load(**flags: bool) -> Load:
    return Load(buffer=Buffer.UOP, sram_base=0, dram_base=0, y_size=1, x_size=4, x_stride=4,
                **flags)


def _inp_load(**flags: bool) -> Load:
    return Load(buffer=Buffer.INP, sram_base=0, dram_base=0, y_size=1, x_size=1, x_stride=1,
                **flags)


def _gemm(**flags: bool) -> Gemm:
    return Gemm(uop_begin=0, uop_end=1, loop_outer=1, loop_inner=1, **flags)


def _store(**flags: bool) -> Store:
    return Store(buffer=Buffer.OUT, sram_base=0, dram_base=0, y_size=1, x_size=1, x_stride=1,
                 **flags)


def _valid_stream() -> list[Instruction]:
    return [
        _uop_load(),
        _inp_load(push_next=True),
        _gemm(pop_prev=True, push_next=True),
        _store(pop_prev=True, push_prev=True),
        Finish(pop_next=True),
    ]


def test_valid_stream_passes():
    assert find_stream_errors(_valid_stream(), CONFIG, dram_bytes=4096) == []
    check_stream(_valid_stream(), CONFIG)


@pytest.mark.parametrize(
    ("instruction", "flag"),
    [
        (_inp_load(pop_prev=True), "pop_prev"),
        (_inp_load(push_prev=True), "push_prev"),
        (_store(push_next=True), "push_next"),
        (_store(pop_next=True), "pop_next"),
    ],
)
def test_illegal_flags_name_module_and_index(instruction, flag):
    stream = _valid_stream()
    stream.insert(1, instruction)
    errors = find_stream_errors(stream, CONFIG)
    first = errors[0]
    assert isinstance(first, IllegalInstructionError) and first.index == 1
    assert f"no queue for {flag}" in str(first)


def test_missing_finish_and_instructions_after_finish():
    stream = _valid_stream()[:-1]
    stream[3] = _store(pop_prev=True)
    with pytest.raises(IllegalInstructionError, match="instruction 4: the stream has no FINISH"):
        check_stream(stream, CONFIG)
    stream = [*_valid_stream(), _gemm()]
    with pytest.raises(IllegalInstructionError, match="instruction 4: FINISH must be the last"):
        check_stream(stream, CONFIG)


def test_token_imbalance_names_the_unmatched_instruction():
    stream = _valid_stream()
    stream[1] = _inp_load(push_next=True)
    stream.insert(2, _inp_load(push_next=True))
    errors = [e for e in find_stream_errors(stream, CONFIG) if "never popped" in str(e)]
    assert len(errors) == 1 and errors[0].index == 2
    assert "LOAD_TO_COMPUTE" in str(errors[0])


def test_deadlock_is_reported_with_blocked_instructions_and_queue_depths():
    stream = [
        _uop_load(),
        _inp_load(pop_next=True, push_next=True),  # waits for compute ...
        _gemm(pop_prev=True, push_prev=True),  # ... which waits for load
        Finish(),
    ]
    with pytest.raises(DeadlockError) as error:
        check_stream(stream, CONFIG)
    message = str(error.value)
    assert "load module: instruction 1 (LOAD) waits for a token on COMPUTE_TO_LOAD" in message
    assert "compute module: instruction 2 (GEMM) waits for a token on LOAD_TO_COMPUTE" in message
    assert "COMPUTE_TO_LOAD=0" in message
    # without the checker, the simulator itself detects it instead of hanging
    with pytest.raises(DeadlockError, match="instruction 2"):
        run_stream(stream, CONFIG, np.zeros(4096, np.uint8), check=False)


def _idle_gemm(**flags: bool) -> Gemm:
    return Gemm(uop_begin=0, uop_end=0, loop_outer=0, loop_inner=0, **flags)


def test_full_token_queues_block_their_producers():
    # each module pushes three tokens before it pops any of the other's
    stream = [_inp_load(push_next=True) for _ in range(3)]
    stream += [_idle_gemm(push_prev=True) for _ in range(3)]
    stream += [_inp_load(pop_next=True) for _ in range(3)]
    stream += [_idle_gemm(pop_prev=True) for _ in range(2)] + [Finish(pop_prev=True)]
    check_stream(stream, HardwareConfig(token_queue_depth=3))
    with pytest.raises(DeadlockError) as error:
        check_stream(stream, HardwareConfig(token_queue_depth=2))
    message = str(error.value)
    assert "instruction 2 (LOAD) waits for a free slot on LOAD_TO_COMPUTE (full at depth 2)" in (
        message
    )
    assert "instruction 5 (GEMM) waits for a free slot on COMPUTE_TO_LOAD" in message


def test_sram_dram_and_micro_op_ranges():
    stream = _valid_stream()
    stream[1] = Load(buffer=Buffer.INP, sram_base=CONFIG.inp_depth - 2, dram_base=0, y_size=1,
                     x_size=1, x_stride=1, x_pad_left=1, x_pad_right=1, push_next=True)
    with pytest.raises(IllegalInstructionError, match="instruction 1: LOAD INP covers SRAM"):
        check_stream(stream, CONFIG)

    stream = _valid_stream()
    stream[3] = Store(buffer=Buffer.OUT, sram_base=0, dram_base=1, y_size=1, x_size=1,
                      x_stride=1, pop_prev=True, push_prev=True)
    with pytest.raises(IllegalInstructionError, match=r"instruction 3: STORE OUT touches DRAM "
                       r"bytes \[16, 32\) beyond the 16-byte DRAM"):
        check_stream(stream, CONFIG, dram_bytes=16)

    stream = _valid_stream()
    stream[2] = Gemm(uop_begin=2, uop_end=6, loop_outer=1, loop_inner=1, pop_prev=True,
                     push_next=True)
    with pytest.raises(IllegalInstructionError, match="instruction 2: GEMM uses micro-op slot 4 "
                       "that no earlier LOAD UOP filled"):
        check_stream(stream, CONFIG)

    stream[2] = Gemm(uop_begin=3, uop_end=2, loop_outer=1, loop_inner=1, pop_prev=True,
                     push_next=True)
    with pytest.raises(IllegalInstructionError, match=r"micro-op range \[3, 2\)"):
        check_stream(stream, CONFIG)

    stream[2] = Alu(alu_op=AluOp.ADD, uop_begin=0, uop_end=1,
                    loop_outer=CONFIG.acc_depth // 2 + 1, loop_inner=1, dst_factor_outer=1,
                    src_factor_outer=2, pop_prev=True, push_next=True)
    with pytest.raises(IllegalInstructionError, match="reach accumulator source index 2048"):
        check_stream(stream, CONFIG)


def test_buffer_misuse_is_rejected():
    stream = _valid_stream()
    stream[3] = Store(buffer=Buffer.INP, sram_base=0, dram_base=0, y_size=1, x_size=1,
                      x_stride=1, pop_prev=True, push_prev=True)
    with pytest.raises(IllegalInstructionError, match="STORE cannot use buffer INP"):
        check_stream(stream, CONFIG)
    stream[3] = Store(buffer=Buffer.OUT, sram_base=0, dram_base=0, y_size=1, x_size=1,
                      x_stride=1, x_pad_left=1, pop_prev=True, push_prev=True)
    with pytest.raises(IllegalInstructionError, match="STORE does not pad"):
        check_stream(stream, CONFIG)
    stream[3] = Store(buffer=Buffer.OUT, sram_base=0, dram_base=0, y_size=1, x_size=1,
                      x_stride=1, pad_value=3, pop_prev=True, push_prev=True)
    with pytest.raises(IllegalInstructionError, match="STORE does not pad"):
        check_stream(stream, CONFIG)
    stream[3] = Store(buffer=Buffer.OUT, sram_base=0, dram_base=0, y_size=2, x_size=2,
                      x_stride=1, pop_prev=True, push_prev=True)
    with pytest.raises(IllegalInstructionError, match="STORE rows overlap"):
        check_stream(stream, CONFIG)
    stream = _valid_stream()
    stream[0] = Load(buffer=Buffer.OUT, sram_base=0, dram_base=0, y_size=1, x_size=1,
                     x_stride=1)
    with pytest.raises(IllegalInstructionError, match="instruction 0: LOAD cannot use buffer OUT"):
        check_stream(stream, CONFIG)


def test_several_problems_are_all_listed():
    stream = [_inp_load(pop_prev=True), _store(pop_next=True)]
    errors = find_stream_errors(stream, CONFIG)
    assert [getattr(e, "index", None) for e in errors][:3] == [0, 1, 2]
    with pytest.raises(IllegalInstructionError) as error:
        check_stream(stream, CONFIG)
    assert "more problem(s)" in error.value.__notes__[0]


def test_only_an_input_load_pads_with_a_value():
    stream = _valid_stream()
    stream[1] = Load(buffer=Buffer.INP, sram_base=0, dram_base=0, y_size=1, x_size=1,
                     x_stride=1, x_pad_left=1, pad_value=-128, push_next=True)
    assert find_stream_errors(stream, CONFIG, dram_bytes=4096) == []
    stream[0] = Load(buffer=Buffer.UOP, sram_base=0, dram_base=0, y_size=1, x_size=1,
                     x_stride=1, pad_value=1)
    with pytest.raises(IllegalInstructionError, match="only an INP load takes a pad_value"):
        check_stream(stream, CONFIG)


def test_a_tensor_mul_shifts_its_product_by_at_most_twice_the_accumulator_width():
    """A MUL with a tensor operand takes its product shift from imm, in [0, 63] for
    32-bit accumulators; a MUL by an immediate takes any 16-bit value."""
    alu = Alu(alu_op=AluOp.MUL, uop_begin=0, uop_end=1, loop_outer=1, loop_inner=1,
              pop_prev=True, push_next=True)
    stream = _valid_stream()
    for imm in (0, 63):
        stream[2] = Alu(**{**alu.__dict__, "imm": imm})
        assert find_stream_errors(stream, CONFIG, dram_bytes=4096) == []
    stream[2] = Alu(**{**alu.__dict__, "imm": -5, "use_imm": True})
    assert find_stream_errors(stream, CONFIG, dram_bytes=4096) == []
    for imm in (-1, 64):
        stream[2] = Alu(**{**alu.__dict__, "imm": imm})
        with pytest.raises(IllegalInstructionError, match=r"shifts its 64-bit product"):
            check_stream(stream, CONFIG)


def test_alu_input_operand_rules():
    """An ALU reading INP (src_inp) takes no immediate, needs block_in == block_out, and
    its source factors are bounded by the input buffer."""
    alu = Alu(alu_op=AluOp.ADD, src_inp=True, uop_begin=0, uop_end=1, loop_outer=1,
              loop_inner=1, pop_prev=True, push_next=True)
    stream = _valid_stream()
    stream[2] = alu
    assert find_stream_errors(stream, CONFIG, dram_bytes=4096) == []
    stream[2] = Alu(**{**alu.__dict__, "use_imm": True})
    with pytest.raises(IllegalInstructionError, match="both use_imm and src_inp"):
        check_stream(stream, CONFIG)
    stream[2] = Alu(**{**alu.__dict__, "loop_outer": CONFIG.inp_depth // 2 + 1,
                       "src_factor_outer": 2, "dst_factor_outer": 1})
    with pytest.raises(IllegalInstructionError, match="input source index"):
        check_stream(stream, CONFIG)
    narrow = HardwareConfig(log_block_in=3, log_inp_buffer_bytes=14, log_wgt_buffer_bytes=16)
    stream[2] = alu
    with pytest.raises(IllegalInstructionError, match="block_in=8 != block_out=16"):
        check_stream(stream, narrow)
