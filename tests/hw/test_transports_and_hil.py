"""The RTL and FPGA transports of the driver protocol, and the HIL comparison.

The FPGA transport is tested against a stand-in for PYNQ whose MMIO forwards the
RTL's register map to the RTL itself, so driver and hardware agree on one map.
The divergence search is tested with a fake device that computes one ALU
operation wrongly, and with the real RTL on streams where both sides agree.
"""

from __future__ import annotations

import argparse
import tracemalloc
from dataclasses import dataclass, field, replace

import numpy as np
import pytest

from heterocc.accel_sim import (
    AluOp,
    Finish,
    FunctionalSimulator,
    HardwareConfig,
    SimulatorDevice,
    decode_stream,
    encode_stream,
    encode_uops,
    execute_program,
    schedule_stream,
    write_stream_file,
)
from heterocc.accel_sim.fpga_device import FpgaDevice
from heterocc.accel_sim.hil import (
    add_hil_parser,
    compare_stream,
    dram_for_stream,
    find_first_divergence,
    prefix_with_dump,
    simulate,
)
from heterocc.accel_sim.isa import Alu, Buffer, Gemm, Load, MicroOp, Store
from heterocc.accel_sim.rtl_device import (
    REG_CONFIG_ID,
    REG_CONTROL,
    REG_CYCLES_HI,
    REG_CYCLES_LO,
    REG_INSN_ADDR,
    REG_INSN_COUNT,
    REG_RETIRED,
    REG_STATUS,
    STATUS_DONE,
    RtlDevice,
    RtlRun,
    RtlRunResult,
    RtlSimulator,
)
from heterocc.accel_sim.rtl_header import config_id
from heterocc.errors import AcceleratorError, IllegalInstructionError
from tests.hw.conftest import BUILD_ROOT, require_rtl_tools
from tests.hw.programs import random_program, reference_gemms, requantize

CONFIG = HardwareConfig()


def _simulated(program) -> np.ndarray:
    device = SimulatorDevice(CONFIG, dram_bytes=1 << 20)
    execute_program(device, program)
    return program.dram.copy()


# --- a PYNQ stand-in whose registers are the RTL's ---------------------------------------


class _Buffer:
    """A window of the board's memory, shaped like a pynq.allocate buffer."""

    def __init__(self, memory: np.ndarray, physical_address: int, nbytes: int):
        self.physical_address = physical_address
        self._view = memory[physical_address : physical_address + nbytes]
        self.flushes = 0

    def __setitem__(self, index, value) -> None:
        self._view[index] = value

    def __getitem__(self, index):
        return self._view[index]

    def flush(self) -> None:
        self.flushes += 1

    def invalidate(self) -> None:
        """Nothing is cached in this stand-in."""


@dataclass
class _Board:
    """Host memory, a contiguous allocator, and the accelerator's control port.

    A start runs the RTL on the memory through RtlSimulator; the status, cycle
    and retired registers then read what the RTL's own registers held.
    """

    config: HardwareConfig
    rtl: RtlSimulator | None
    memory: np.ndarray = field(default_factory=lambda: np.zeros(1 << 20, np.uint8))
    registers: dict[int, int] = field(default_factory=dict)
    next_free: int = 0x1000
    buffers: list[_Buffer] = field(default_factory=list)

    def allocate(self, shape: tuple[int], dtype) -> _Buffer:
        assert np.dtype(dtype) == np.uint8
        buffer = _Buffer(self.memory, self.next_free, shape[0])
        self.next_free += shape[0] + 64  # buffers are not adjacent, as on a board
        self.buffers.append(buffer)
        return buffer

    def read(self, offset: int) -> int:
        if offset == REG_CONFIG_ID:
            return config_id(self.config)
        return self.registers.get(offset, 0)

    def write(self, offset: int, value: int) -> None:
        self.registers[offset] = value
        if offset == REG_CONTROL and value & 1 and self.rtl is not None:
            run = RtlRun(self.memory[: self.next_free].copy(), self.registers[REG_INSN_ADDR],
                         self.registers[REG_INSN_COUNT], max_cycles=100_000)
            result = self.rtl.run([run])[0]
            self.memory[: result.dram.size] = result.dram
            self.registers[REG_STATUS] = STATUS_DONE if result.done else 2
            self.registers[REG_CYCLES_LO] = result.cycles & 0xFFFFFFFF
            self.registers[REG_CYCLES_HI] = result.cycles >> 32
            self.registers[REG_RETIRED] = result.retired


def test_fpga_device_refuses_a_bitstream_for_another_config():
    board = _Board(HardwareConfig.preset("1x8x8"), rtl=None)
    with pytest.raises(AcceleratorError, match="bitstream was built for config ID"):
        FpgaDevice(CONFIG, board, board.allocate)


def test_fpga_device_reports_a_stream_that_never_finishes():
    board = _Board(CONFIG, rtl=None)
    device = FpgaDevice(CONFIG, board, board.allocate, poll_interval_s=0.001)
    address = device.allocate(16)
    device.write(address, encode_stream([Finish()], CONFIG))
    device.start(address, 1)
    assert board.registers[REG_CONTROL] == 1
    with pytest.raises(AcceleratorError, match="did not finish"):
        device.wait(timeout_s=0.01)


def test_fpga_device_keeps_accesses_inside_allocated_buffers():
    board = _Board(CONFIG, rtl=None)
    device = FpgaDevice(CONFIG, board, board.allocate)
    address = device.allocate(100)
    device.write(address, np.arange(100, dtype=np.uint8))
    np.testing.assert_array_equal(device.read(address + 10, 5), np.arange(10, 15))
    assert board.buffers[0].flushes == 1
    with pytest.raises(AcceleratorError, match="not inside one buffer"):
        device.read(address + 90, 20)


def test_fpga_device_confines_the_accelerators_dma_to_allocated_buffers():
    board = _Board(CONFIG, rtl=None)
    device = FpgaDevice(CONFIG, board, board.allocate)
    data = device.allocate(CONFIG.acc_tile_bytes)
    code = device.allocate(32)
    unit = CONFIG.acc_tile_bytes
    for address, accepted in ((0, False), (data - unit, False), (data, True)):
        stream = [Store(buffer=Buffer.ACC, sram_base=0, dram_base=address // unit, y_size=1,
                        x_size=1, x_stride=1), Finish()]
        device.write(code, encode_stream(stream, CONFIG))
        board.registers.pop(REG_CONTROL, None)
        if accepted:
            device.start(code, 2)
            assert board.registers[REG_CONTROL] == 1
        else:
            with pytest.raises(IllegalInstructionError, match="instruction 0: STORE ACC "
                               "touches physical bytes"):
                device.start(code, 2)
            assert REG_CONTROL not in board.registers
    # a stream the checker refuses never reaches the control port either
    board.registers.clear()
    device.write(code, encode_stream([Gemm(uop_begin=0, uop_end=1, loop_outer=1,
                                           loop_inner=1), Finish()], CONFIG))
    with pytest.raises(IllegalInstructionError, match="no earlier LOAD UOP filled"):
        device.start(code, 2)
    assert REG_CONTROL not in board.registers


def test_rtl_device_refuses_what_the_simulator_refuses_before_the_rtl_runs():
    device = RtlDevice(CONFIG, "icarus", dram_bytes=1 << 16, build_root=BUILD_ROOT)
    hostile = [Load(buffer=Buffer.INP, sram_base=0, dram_base=0, y_size=65535, x_size=65535,
                    x_stride=65535), Finish()]
    code = device.allocate(32)
    device.write(code, encode_stream(hostile, CONFIG))
    with pytest.raises(IllegalInstructionError, match="instruction 0: LOAD INP covers SRAM"):
        device.start(code, 2)
    # two micro-ops naming one accumulator tile: legal fields, so only running the
    # stream shows it (the simulator refuses it; the hardware would write the tile twice)
    uops = device.allocate(8)
    device.write(uops, encode_uops([MicroOp(dst=5, src=0), MicroOp(dst=5, src=1)], CONFIG)
                 .view(np.uint8))
    stream = [Load(buffer=Buffer.UOP, sram_base=0, dram_base=uops // 4, y_size=1, x_size=2,
                   x_stride=2),
              Alu(alu_op=AluOp.ADD, use_imm=True, imm=1, uop_begin=0, uop_end=2,
                  loop_outer=1, loop_inner=1),
              Finish()]
    code = device.allocate(16 * len(stream))
    device.write(code, encode_stream(stream, CONFIG))
    with pytest.raises(IllegalInstructionError, match="instruction 1: ALU writes accumulator "
                       "tile 5 in more than one iteration"):
        device.start(code, len(stream))
    with pytest.raises(AcceleratorError, match="without a preceding start"):
        device.wait()


@pytest.mark.rtl
@pytest.mark.hil
def test_fpga_device_runs_a_program_on_the_rtl_register_map():
    require_rtl_tools("verilator")
    program = requantize(CONFIG, np.random.default_rng(3)).program
    expected = _simulated(replace(program, dram=program.dram.copy()))
    board = _Board(CONFIG, RtlSimulator(CONFIG, "verilator", BUILD_ROOT))
    device = FpgaDevice(CONFIG, board, board.allocate, poll_interval_s=0.0)
    status = execute_program(device, program)
    np.testing.assert_array_equal(program.dram, expected)
    assert status.cycles > 0


@pytest.mark.rtl
@pytest.mark.hil
@pytest.mark.parametrize("simulator", ["icarus", "verilator"])
def test_rtl_device_runs_a_program_through_the_driver_protocol(simulator):
    require_rtl_tools(simulator)
    program = reference_gemms(CONFIG, np.random.default_rng(4))[1].program
    expected = _simulated(replace(program, dram=program.dram.copy()))
    device = RtlDevice(CONFIG, simulator, dram_bytes=1 << 20, build_root=BUILD_ROOT)
    status = execute_program(device, program)
    np.testing.assert_array_equal(program.dram, expected)
    assert status.cycles == device.last_result.cycles > 0


# --- divergence search ------------------------------------------------------------------


class _MaxIsMinDevice:
    """A fake RTL that executes ALU MAX as MIN: wrong in exactly one operation."""

    def __init__(self, config: HardwareConfig):
        self.config = config

    def run(self, runs: list[RtlRun]) -> list[RtlRunResult]:
        results = []
        for run in runs:
            words = run.dram[run.instruction_address:][: 16 * run.instruction_count]
            stream = [
                replace(i, alu_op=AluOp.MIN) if isinstance(i, Alu) and i.alu_op == AluOp.MAX
                else i
                for i in decode_stream(words.tobytes(), self.config)
            ]
            dram, cycles = simulate(stream, self.config, run.dram)
            results.append(RtlRunResult(dram, True, False, cycles, len(stream), cycles, 0.0))
        return results


def test_divergence_search_names_the_first_wrong_instruction():
    # a random program one of whose ALU MAXes changes what reaches DRAM when run as MIN
    program = random_program(CONFIG, seed=1010).program
    maxes = [i for i, ins in enumerate(program.instructions)
             if isinstance(ins, Alu) and ins.alu_op == AluOp.MAX]
    assert maxes, "the program must contain an ALU MAX for this test"
    comparison = compare_stream("random", program.instructions, CONFIG, program.dram,
                                _MaxIsMinDevice(CONFIG))
    assert not comparison.matches
    assert comparison.first_divergence in maxes
    assert "MAX" in comparison.divergence_detail
    # the named instruction is the first MAX the machine executes: every earlier
    # prefix agrees, which the search established by bisection
    index = find_first_divergence(program.instructions, CONFIG, program.dram,
                                  _MaxIsMinDevice(CONFIG))
    assert index == comparison.first_divergence


def test_execution_prefixes_with_the_dump_tail_run_to_completion():
    program = random_program(CONFIG, seed=1001).program
    body = program.instructions[:-1]
    order = schedule_stream(body, CONFIG).execution_order()
    dump_tile = -(-program.dram.size // CONFIG.acc_tile_bytes)
    image = np.zeros((dump_tile + CONFIG.acc_depth) * CONFIG.acc_tile_bytes, np.uint8)
    image[: program.dram.size] = program.dram
    for length in (1, 5, len(order) // 2, len(order)):
        stream = prefix_with_dump(body, order[:length], CONFIG, dump_tile)
        dram, _ = simulate(stream, CONFIG, image)
        # the dump holds the accumulator buffer as the prefix left it
        machine = FunctionalSimulator(CONFIG, image.copy())
        for index in schedule_stream(stream, CONFIG).execution_order():
            machine.execute(stream[index], index)
        dumped = dram[dump_tile * CONFIG.acc_tile_bytes:].view("<i4")
        np.testing.assert_array_equal(dumped, machine.acc.reshape(-1))


def test_dram_for_stream_lays_out_micro_ops_where_the_stream_loads_them():
    program = requantize(CONFIG, np.random.default_rng(5)).program
    image = dram_for_stream(program.instructions, program.uops, CONFIG)
    load = next(i for i in program.instructions
                if isinstance(i, Load) and i.buffer == Buffer.UOP)
    span = slice(4 * load.dram_base, 4 * (load.dram_base + load.x_size))
    np.testing.assert_array_equal(image[span], program.dram[span])


@pytest.mark.rtl
@pytest.mark.hil
def test_hil_command_reports_agreement_on_the_rtl(tmp_path, capsys):
    require_rtl_tools("verilator")
    program = random_program(CONFIG, seed=1002).program
    stream_path = tmp_path / "random.hcas"
    write_stream_file(stream_path, CONFIG, program.instructions, program.uops)
    program.dram.tofile(tmp_path / "dram.bin")
    parser = argparse.ArgumentParser()
    add_hil_parser(parser.add_subparsers())
    args = parser.parse_args(["hil", str(stream_path), "--dram", str(tmp_path / "dram.bin"),
                              "--build-dir", str(BUILD_ROOT)])
    assert args.func(args) == 0
    output = capsys.readouterr().out
    assert "DRAM agrees" in output and "RTL" in output


def test_hil_command_refuses_a_hostile_stream_before_building_any_image(tmp_path, capsys):
    """One LOAD of 65535 x 65535 tiles at the top of a 4 GiB DRAM: refused by the
    checker, no DRAM image allocated for it, no RTL run."""
    hostile = [Load(buffer=Buffer.INP, sram_base=0, dram_base=(1 << 32) - 1, y_size=65535,
                    x_size=65535, x_stride=65535), Finish()]
    stream_path = tmp_path / "hostile.hcas"
    write_stream_file(stream_path, CONFIG, hostile)
    parser = argparse.ArgumentParser()
    add_hil_parser(parser.add_subparsers())
    args = parser.parse_args(["hil", str(stream_path), "--build-dir", str(tmp_path)])
    tracemalloc.start()
    try:
        assert args.func(args) == 2
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100 << 20
    assert "instruction 0: LOAD INP covers SRAM entries" in capsys.readouterr().out
    assert not any(tmp_path.glob("*_1x16x16*"))
