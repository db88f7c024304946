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


def test_full_token_queue_blocks_its_producer():
    config = HardwareConfig(token_queue_depth=2)
    pushes = [_inp_load(push_next=True) for _ in range(3)]
    stream = [_uop_load(), *pushes, Finish(pop_prev=True), _gemm(pop_prev=True),
              _gemm(pop_prev=True)]
    stream.append(stream.pop(4))  # FINISH last: the compute module pops 3 tokens
    check_stream(stream, config)
    # compute waits for the store module, so the load module fills its queue and stops
    stuck = [_uop_load(), *pushes, _gemm(pop_next=True, pop_prev=True), _gemm(pop_prev=True),
             _store(push_prev=True), Finish(pop_prev=True)]
    with pytest.raises(DeadlockError, match="free slot on LOAD_TO_COMPUTE"):
        check_stream(stuck, config)


def test_sram_dram_and_micro_op_ranges():
    stream = _valid_stream()
    stream[1] = Load(buffer=Buffer.INP, sram_base=CONFIG.inp_depth - 2, dram_base=0, y_size=1,
                     x_size=1, x_stride=1, x_pad_left=1, x_pad_right=1, push_next=True)
    with pytest.raises(IllegalInstructionError, match="instruction 1: LOAD INP covers SRAM"):
        check_stream(stream, CONFIG)
    stream = _valid_stream()
    with pytest.raises(IllegalInstructionError, match="instruction 3: STORE OUT touches DRAM"):
        check_stream([*stream[:3], _store(pop_prev=True, push_prev=True) | {}, stream[4]]
                     if False else stream, CONFIG, dram_bytes=8)
