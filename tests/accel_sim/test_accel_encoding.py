"""Encoder/decoder round trips (property-based), bad words, stream files, disassembly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heterocc.accel_sim import schedule_stream
from heterocc.accel_sim.cli import main as accel_main
from heterocc.accel_sim.config import HardwareConfig
from heterocc.accel_sim.encoding import (
    INSTRUCTION_BYTES,
    decode_instruction,
    decode_stream,
    decode_uops,
    disassemble,
    encode_instruction,
    encode_stream,
    encode_uops,
    read_stream_file,
    write_stream_file,
)
from heterocc.accel_sim.isa import (
    CLASS_OF,
    Alu,
    AluOp,
    Buffer,
    Finish,
    Gemm,
    Load,
    MicroOp,
    Opcode,
    Store,
    isa_layout,
)
from heterocc.errors import AcceleratorError, IllegalInstructionError

PRESETS = [HardwareConfig.preset(name) for name in ("1x8x8", "1x16x16", "1x32x32", "1x64x64")]
_ENUMS = {"buffer": Buffer, "alu_op": AluOp}
_BOOLS = {"pop_prev", "pop_next", "push_prev", "push_next", "reset", "use_imm"}


def _field_strategy(field):
    if field.name in _ENUMS:
        return st.sampled_from(list(_ENUMS[field.name]))
    if field.name in _BOOLS:
        return st.booleans()
    return st.integers(field.minimum, field.maximum)


@st.composite
def configs_and_instructions(draw):
    config = draw(st.sampled_from(PRESETS))
    opcode = draw(st.sampled_from(list(Opcode)))
    fields = isa_layout(config).fields(opcode)[1:]
    values = {field.name: draw(_field_strategy(field)) for field in fields}
    return config, CLASS_OF[opcode](**values)


@given(configs_and_instructions())
@settings(max_examples=400, deadline=None)
def test_every_instruction_round_trips(case):
    config, instruction = case
    word = encode_instruction(instruction, config)
    assert len(word) == INSTRUCTION_BYTES
    assert decode_instruction(word, config) == instruction


@pytest.mark.parametrize("config", PRESETS, ids=lambda c: c.name)
@pytest.mark.parametrize("extreme", ["minimum", "maximum"])
def test_fields_at_their_limits_round_trip(config, extreme):
    layout = isa_layout(config)
    for opcode in Opcode:
        values = {}
        for field in layout.fields(opcode)[1:]:
            limit = getattr(field, extreme)
            if field.name in _ENUMS:
                members = list(_ENUMS[field.name])
                values[field.name] = members[0] if extreme == "minimum" else members[-1]
            else:
                values[field.name] = bool(limit) if field.name in _BOOLS else limit
        instruction = CLASS_OF[opcode](**values)
        assert decode_instruction(encode_instruction(instruction, config), config) == instruction


@given(st.sampled_from(PRESETS), st.data())
@settings(max_examples=200, deadline=None)
def test_micro_ops_round_trip(config, data):
    fields = isa_layout(config).uop
    uops = data.draw(st.lists(
        st.builds(MicroOp, *(st.integers(0, field.maximum) for field in fields)), max_size=20
    ))
    words = encode_uops(uops, config)
    assert words.dtype == np.dtype("<u4")
    assert decode_uops(words, config) == uops


def test_unknown_opcode_names_the_instruction():
    config = HardwareConfig()
    stream = encode_stream([Finish(), Finish()], config)
    corrupt = bytearray(stream)
    corrupt[INSTRUCTION_BYTES] = 0b110  # opcode 6
    with pytest.raises(IllegalInstructionError, match="instruction 1: unknown opcode 6") as error:
        decode_stream(bytes(corrupt), config)
    assert error.value.index == 1


def test_reserved_bits_and_unknown_enums_are_rejected():
    config = HardwareConfig()
    finish = bytearray(encode_instruction(Finish(), config))
    finish[15] = 0x80
    with pytest.raises(IllegalInstructionError, match="reserved bits"):
        decode_instruction(bytes(finish), config, 0)
    load = encode_instruction(
        Load(buffer=Buffer.INP, sram_base=0, dram_base=0, y_size=1, x_size=1, x_stride=1), config
    )
    buffer_field = next(f for f in isa_layout(config).fields(Opcode.LOAD) if f.name == "buffer")
    word = int.from_bytes(load, "little") | (7 << buffer_field.offset)
    with pytest.raises(IllegalInstructionError, match="unknown buffer 7"):
        decode_instruction(word.to_bytes(16, "little"), config, 3)


def test_field_out_of_range_names_field_and_index():
    config = HardwareConfig()
    too_long = Gemm(uop_begin=0, uop_end=1, loop_outer=1 << 14, loop_inner=1)
    with pytest.raises(IllegalInstructionError, match="instruction 2: GEMM field loop_outer"):
        encode_stream([Finish(), Finish(), too_long], config)
    with pytest.raises(IllegalInstructionError, match="field imm=-32769"):
        encode_instruction(Alu(alu_op=AluOp.ADD, use_imm=True, imm=-32769, uop_begin=0,
                               uop_end=0, loop_outer=0, loop_inner=0), config)
    with pytest.raises(AcceleratorError, match="micro-op 1: wgt=1024"):
        encode_uops([MicroOp(0, 0, 0), MicroOp(0, 0, 1024)], config)


def test_layout_fits_every_preset_and_rejects_oversized_buffers():
    for config in PRESETS:
        layout = isa_layout(config)
        assert all(f[-1].offset + f[-1].width <= 128 for f in layout.instructions.values())
    with pytest.raises(AcceleratorError, match="a GEMM instruction needs 133 bits"):
        HardwareConfig(log_acc_buffer_bytes=20)
    with pytest.raises(AcceleratorError, match="a micro-op needs 34 bits"):
        HardwareConfig(log_acc_buffer_bytes=18, log_uop_buffer_bytes=10)


def test_stream_file_round_trip_and_disassembly(tmp_path, capsys):
    config = HardwareConfig.preset("1x32x32")
    instructions = [
        Load(buffer=Buffer.UOP, sram_base=0, dram_base=0, y_size=1, x_size=2, x_stride=2),
        Load(buffer=Buffer.INP, sram_base=3, dram_base=9, y_size=2, x_size=4, x_stride=8,
             y_pad_top=1, x_pad_right=2, pad_value=-5, push_next=True),
        Gemm(uop_begin=0, uop_end=2, loop_outer=3, loop_inner=4, acc_factor_outer=4,
             acc_factor_inner=1, pop_prev=True, push_next=True),
        Alu(alu_op=AluOp.SHR, use_imm=True, imm=-3, uop_begin=0, uop_end=1, loop_outer=1,
            loop_inner=1),
        Store(buffer=Buffer.OUT, sram_base=0, dram_base=5, y_size=1, x_size=1, x_stride=1,
              pop_prev=True, push_prev=True),
        Finish(pop_next=True),
    ]
    uops = [MicroOp(1, 2, 3), MicroOp(4, 5, 6)]
    path = tmp_path / "gemm.hcas"
    write_stream_file(path, config, instructions, uops)
    stream = read_stream_file(path)
    assert stream.config == config
    assert stream.instructions == instructions
    assert stream.uops == uops

    text = disassemble(instructions, uops)
    assert "1: LOAD   INP  sram=3 dram=9 y=2 x=4 stride=8" in text
    assert "pad(top,bottom,left,right)=(1,0,0,2) pad_value=-5  [push_next]" in text
    assert "ALU    SHR  imm=-3" in text
    assert "u1: dst=4 src=5 wgt=6" in text

    assert accel_main(["disasm", str(path)]) == 0
    printed = capsys.readouterr().out
    assert config.name in printed
    assert "5: FINISH  [pop_next]" in printed


def test_check_command_reports_problems_or_timing(tmp_path, capsys):
    config = HardwareConfig()
    good = tmp_path / "good.hcas"
    write_stream_file(good, config, [Finish()])
    assert accel_main(["check", str(good)]) == 0
    # a lone FINISH: fetching the instruction through the DRAM port, then its own cost
    cycles = schedule_stream([Finish()], config).total_cycles
    assert cycles > config.instruction_overhead_cycles
    assert f"total cycles: {cycles}" in capsys.readouterr().out
    bad = tmp_path / "bad.hcas"
    write_stream_file(bad, config, [Finish(pop_prev=True), Finish()])
    assert accel_main(["check", str(bad)]) == 1
    errors = capsys.readouterr().err
    assert "instruction 0: FINISH must be the last instruction" in errors
    assert "the stream deadlocks" in errors


def test_disasm_reports_bad_files(tmp_path, capsys):
    path = tmp_path / "junk.hcas"
    path.write_bytes(b"not a stream")
    assert accel_main(["disasm", str(path)]) == 1
    assert "bad magic" in capsys.readouterr().err
    config = HardwareConfig()
    good = tmp_path / "short.hcas"
    write_stream_file(good, config, [Finish()])
    good.write_bytes(good.read_bytes()[:-1])
    with pytest.raises(AcceleratorError, match="announces 1 instructions"):
        read_stream_file(good)
