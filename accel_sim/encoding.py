"""Instruction records <-> 128-bit words, micro-ops <-> 32-bit words, the stream
file format, and the disassembler.

Words are little-endian. A field at bit offset ``o`` of width ``w`` occupies bits
``[o, o + w)`` of the word; bits above the last field are reserved and zero. The SDK's
declarative encoder (:class:`heterocc.sdk.InstructionSet`, built for each config by
:func:`~.isa.isa_layout`) packs and unpacks the fields; this module adds the typed
records (enums, flags), the streams and the files.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import AcceleratorError, IllegalInstructionError
from .config import INSTRUCTION_BITS, UOP_BYTES, HardwareConfig
from .isa import (
    CLASS_OF,
    DEPENDENCY_FLAGS,
    OPCODE_OF,
    Alu,
    AluOp,
    Buffer,
    DmaInstruction,
    Field,
    Gemm,
    Instruction,
    MicroOp,
    Opcode,
    isa_layout,
)
from .validation import length_error

INSTRUCTION_BYTES = INSTRUCTION_BITS // 8
_ENUM_FIELDS = {"buffer": Buffer, "alu_op": AluOp}
_BOOL_FIELDS = set(DEPENDENCY_FLAGS) | {"reset", "use_imm", "src_inp"}


def _field_value(instruction: Instruction, field: Field) -> int:
    value = getattr(instruction, field.name)
    return int(value) if isinstance(value, bool | int) else value


def encode_instruction(
    instruction: Instruction, config: HardwareConfig, index: int | None = None
) -> bytes:
    """Encode one instruction as 16 bytes; a field out of range raises IllegalInstructionError."""
    if type(instruction) not in OPCODE_OF:
        raise IllegalInstructionError(
            f"{type(instruction).__name__} is not an instruction type of the ISA", index
        )
    opcode = OPCODE_OF[type(instruction)]
    layout = isa_layout(config)
    isa = layout.instruction_set
    values = {field.name: _field_value(instruction, field)
              for field in layout.fields(opcode)[1:]}
    try:
        word = isa.encode_word(isa.command(opcode.name, **values), index)
    except IllegalInstructionError as error:
        if error.index is not None or index is None:
            raise
        raise IllegalInstructionError(str(error), index, error.field, error.limit) from None
    return word.to_bytes(INSTRUCTION_BYTES, "little")


def decode_instruction(
    data: bytes, config: HardwareConfig, index: int | None = None
) -> Instruction:
    """Decode 16 bytes into an instruction; unknown opcodes or enum values raise."""
    if len(data) != INSTRUCTION_BYTES:
        raise IllegalInstructionError(
            f"an instruction is {INSTRUCTION_BYTES} bytes, got {len(data)}", index
        )
    word = int.from_bytes(data, "little")
    raw_opcode = word & 0b111
    try:
        opcode = Opcode(raw_opcode)
    except ValueError:
        raise IllegalInstructionError(
            f"unknown opcode {raw_opcode}; known opcodes are "
            + ", ".join(f"{op.value}={op.name}" for op in Opcode),
            index, field="opcode", limit=max(Opcode),
        ) from None
    isa = isa_layout(config).instruction_set
    used = isa.used_bits(opcode.name)
    if word >> used:
        raise IllegalInstructionError(
            f"{opcode.name} has reserved bits [{used}, {INSTRUCTION_BITS}) set; the word is "
            "corrupt or was encoded for another hardware config",
            index, field="reserved", limit=0,
        )
    command = isa.decode_word(word, index)
    values = {name: _typed_field(opcode, name, raw, index) for name, raw in command.values}
    return CLASS_OF[opcode](**values)


def _typed_field(opcode: Opcode, name: str, raw: int, index: int | None) -> object:
    if name in _BOOL_FIELDS:
        return bool(raw)
    enum_type = _ENUM_FIELDS.get(name)
    if enum_type is None:
        return raw
    try:
        return enum_type(raw)
    except ValueError:
        raise IllegalInstructionError(
            f"{opcode.name} has unknown {name} {raw}; known values are "
            + ", ".join(f"{member.value}={member.name}" for member in enum_type),
            index, field=name, limit=max(enum_type),
        ) from None


def encode_stream(instructions: Sequence[Instruction], config: HardwareConfig) -> bytes:
    """Encode a whole stream (errors name the instruction index)."""
    return b"".join(
        encode_instruction(instruction, config, index)
        for index, instruction in enumerate(instructions)
    )


def decode_stream(data: bytes, config: HardwareConfig) -> list[Instruction]:
    """Decode a whole stream of 16-byte words (errors name the instruction index).

    A stream that ends inside a word, or holds more instructions than the config's
    ``max_stream_instructions``, is refused before anything is decoded.
    """
    size = INSTRUCTION_BYTES
    count, rest = divmod(len(data), size)
    if rest:
        raise IllegalInstructionError(
            f"the stream ends {rest} byte(s) into this instruction; an instruction stream "
            f"is a multiple of {size} bytes, got {len(data)} (truncated?)",
            count, field="length", limit=count * size,
        )
    too_long = length_error(count, config)
    if too_long is not None:
        raise too_long
    return [
        decode_instruction(data[start : start + size], config, start // size)
        for start in range(0, len(data), size)
    ]


# --- micro-ops ----------------------------------------------------------------------


def encode_uops(uops: Iterable[MicroOp], config: HardwareConfig) -> np.ndarray:
    """Encode micro-ops as little-endian 32-bit words (a uint32 array)."""
    fields = isa_layout(config).uop
    words = []
    for position, uop in enumerate(uops):
        word = 0
        for field in fields:
            value = getattr(uop, field.name)
            if not isinstance(value, int) or not 0 <= value <= field.maximum:
                raise AcceleratorError(
                    f"micro-op {position}: {field.name}={value!r} is outside "
                    f"[0, {field.maximum}] ({field.width} bits in config {config.name})"
                )
            word |= value << field.offset
        words.append(word)
    return np.asarray(words, dtype="<u4")


def uop_fields(words: np.ndarray, config: HardwareConfig) -> dict[str, np.ndarray]:
    """Split micro-op words (any shape) into int64 arrays of dst, src and wgt indices."""
    words = np.asarray(words, dtype=np.uint32).astype(np.int64)
    return {
        field.name: (words >> field.offset) & ((1 << field.width) - 1)
        for field in isa_layout(config).uop
    }


def decode_uops(words: np.ndarray, config: HardwareConfig) -> list[MicroOp]:
    """Decode 32-bit words into micro-ops."""
    split = uop_fields(np.ravel(words), config)
    return [
        MicroOp(int(dst), int(src), int(wgt))
        for dst, src, wgt in zip(split["dst"], split["src"], split["wgt"])
    ]


# --- stream files ---------------------------------------------------------------------

STREAM_MAGIC = b"HCAS"
STREAM_VERSION = 1


@dataclass(frozen=True)
class StreamFile:
    """The contents of a stream file: its config, instructions and micro-ops."""

    config: HardwareConfig
    instructions: list[Instruction]
    uops: list[MicroOp]


def stream_file_bytes(
    config: HardwareConfig, instructions: Sequence[Instruction], uops: Sequence[MicroOp] = ()
) -> bytes:
    """Serialize a stream in the on-disk format documented in docs/isa.md."""
    name = config.name.encode("ascii")
    header = STREAM_MAGIC + struct.pack("<HH", STREAM_VERSION, len(name)) + name
    header += bytes(-len(header) % 16)
    header += struct.pack("<II8x", len(instructions), len(uops))
    return header + encode_stream(instructions, config) + encode_uops(uops, config).tobytes()


def parse_stream_file(data: bytes, source: str = "<bytes>") -> StreamFile:
    """Parse bytes written by :func:`stream_file_bytes`."""
    if data[:4] != STREAM_MAGIC or len(data) < 8:
        raise AcceleratorError(f"{source} is not an accelerator stream file (bad magic)")
    version, name_length = struct.unpack_from("<HH", data, 4)
    if version != STREAM_VERSION:
        raise AcceleratorError(
            f"{source}: stream file version {version}, this build reads version {STREAM_VERSION}"
        )
    name_end = 8 + name_length
    counts_at = name_end + (-name_end % 16)
    if len(data) < counts_at + 16:
        raise AcceleratorError(f"{source}: truncated stream file header")
    config = HardwareConfig.from_name(data[8:name_end].decode("ascii", errors="replace"))
    instruction_count, uop_count = struct.unpack_from("<II", data, counts_at)
    body = counts_at + 16
    uops_at = body + instruction_count * INSTRUCTION_BYTES
    expected = uops_at + uop_count * UOP_BYTES
    if len(data) != expected:
        raise AcceleratorError(
            f"{source}: the header announces {instruction_count} instructions and "
            f"{uop_count} micro-ops ({expected} bytes) but the file has {len(data)} bytes"
        )
    instructions = decode_stream(data[body:uops_at], config)
    uops = decode_uops(np.frombuffer(data[uops_at:expected], dtype="<u4"), config)
    return StreamFile(config, instructions, uops)


def write_stream_file(
    path: str | Path,
    config: HardwareConfig,
    instructions: Sequence[Instruction],
    uops: Sequence[MicroOp] = (),
) -> None:
    """Write a stream file."""
    Path(path).write_bytes(stream_file_bytes(config, instructions, uops))


def read_stream_file(path: str | Path) -> StreamFile:
    """Read a stream file."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise AcceleratorError(f"cannot read stream file {path}: {exc}") from exc
    return parse_stream_file(data, str(path))


# --- disassembly ------------------------------------------------------------------------


def format_instruction(instruction: Instruction) -> str:
    """One readable line for an instruction (without its index)."""
    opcode = OPCODE_OF[type(instruction)]
    if isinstance(instruction, DmaInstruction):
        i = instruction
        body = (
            f"{i.buffer.name:<4} sram={i.sram_base} dram={i.dram_base} y={i.y_size} "
            f"x={i.x_size} stride={i.x_stride}"
        )
        pads = (i.y_pad_top, i.y_pad_bottom, i.x_pad_left, i.x_pad_right)
        if any(pads):
            body += " pad(top,bottom,left,right)=({},{},{},{})".format(*pads)
        if i.pad_value:
            body += f" pad_value={i.pad_value}"
    elif isinstance(instruction, Gemm):
        i = instruction
        body = (
            f"{'reset ' if i.reset else ''}uop=[{i.uop_begin},{i.uop_end}) "
            f"loop={i.loop_outer}x{i.loop_inner} acc=({i.acc_factor_outer},{i.acc_factor_inner}) "
            f"inp=({i.inp_factor_outer},{i.inp_factor_inner}) "
            f"wgt=({i.wgt_factor_outer},{i.wgt_factor_inner})"
        )
    elif isinstance(instruction, Alu):
        i = instruction
        operand = f"imm={i.imm}" if i.use_imm else "inp" if i.src_inp else "acc"
        body = (
            f"{i.alu_op.name:<4} {operand} uop=[{i.uop_begin},{i.uop_end}) "
            f"loop={i.loop_outer}x{i.loop_inner} dst=({i.dst_factor_outer},{i.dst_factor_inner}) "
            f"src=({i.src_factor_outer},{i.src_factor_inner})"
        )
    else:
        body = ""
    flags = [flag for flag in DEPENDENCY_FLAGS if getattr(instruction, flag)]
    text = f"{opcode.name:<6} {body}".rstrip()
    return f"{text}  [{' '.join(flags)}]" if flags else text


def disassemble(
    instructions: Sequence[Instruction], uops: Sequence[MicroOp] = (), title: str = ""
) -> str:
    """A readable listing of a stream and its micro-ops."""
    lines = [f"; {title}"] if title else []
    width = len(str(max(len(instructions) - 1, 0)))
    lines += [
        f"{index:>{width}}: {format_instruction(instruction)}"
        for index, instruction in enumerate(instructions)
    ]
    if uops:
        lines.append(f"; {len(uops)} micro-op(s)")
        uop_width = len(str(len(uops) - 1))
        lines += [
            f"u{index:>{uop_width}}: dst={uop.dst} src={uop.src} wgt={uop.wgt}"
            for index, uop in enumerate(uops)
        ]
    return "\n".join(lines)
