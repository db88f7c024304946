"""The accelerator's instruction set: opcodes, instruction records, modules, token
queues and the bit layout of every instruction word (derived from the config).

``docs/isa.md`` is the reference; this module is its executable form.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass

from heterocc.sdk import Field as IsaField
from heterocc.sdk import InstructionFormat, InstructionSet

from ..errors import AcceleratorError
from .config import INSTRUCTION_BITS, UOP_BYTES, HardwareConfig


class Opcode(enum.IntEnum):
    """The 3-bit opcode in bits [0, 3) of every instruction."""

    LOAD = 0
    STORE = 1
    GEMM = 2
    ALU = 3
    FINISH = 4


class Buffer(enum.IntEnum):
    """The on-chip buffer a LOAD fills or a STORE drains."""

    UOP = 0
    INP = 1
    WGT = 2
    ACC = 3
    #: the accumulator buffer read through the narrowing path (STORE only).
    OUT = 4


class AluOp(enum.IntEnum):
    """Element-wise operations of the ALU (signed, in accumulator width)."""

    MIN = 0
    MAX = 1
    ADD = 2
    SHR = 3
    MUL = 4


class Module(enum.IntEnum):
    """The three concurrently running modules (in pipeline order)."""

    LOAD = 0
    COMPUTE = 1
    STORE = 2


class Queue(enum.IntEnum):
    """The four dependency-token queues between neighbouring modules."""

    LOAD_TO_COMPUTE = 0
    COMPUTE_TO_LOAD = 1
    COMPUTE_TO_STORE = 2
    STORE_TO_COMPUTE = 3


@dataclass(frozen=True, kw_only=True)
class Instruction:
    """Fields every instruction carries: the four dependency-token flags."""

    pop_prev: bool = False
    pop_next: bool = False
    push_prev: bool = False
    push_next: bool = False


@dataclass(frozen=True, kw_only=True)
class DmaInstruction(Instruction):
    """A 2-D strided transfer between DRAM and one on-chip buffer.

    ``dram_base`` and ``x_stride`` count tiles of the buffer's type (micro-op
    words for UOP). A LOAD writes the padded block of
    ``(y_pad_top + y_size + y_pad_bottom) x (x_pad_left + x_size + x_pad_right)``
    tiles row-major from ``sram_base``; every element of a padding tile is
    ``pad_value`` (a LOAD into INP may pad with any int8 value, such as the input's
    zero point; every other transfer pads with 0).
    """

    buffer: Buffer
    sram_base: int
    dram_base: int
    y_size: int
    x_size: int
    x_stride: int
    y_pad_top: int = 0
    y_pad_bottom: int = 0
    x_pad_left: int = 0
    x_pad_right: int = 0
    pad_value: int = 0

    @property
    def padded_rows(self) -> int:
        """Rows of tiles written to (or read from) SRAM."""
        return self.y_pad_top + self.y_size + self.y_pad_bottom

    @property
    def padded_cols(self) -> int:
        """Tiles per SRAM row."""
        return self.x_pad_left + self.x_size + self.x_pad_right


@dataclass(frozen=True, kw_only=True)
class Load(DmaInstruction):
    """DRAM -> SRAM: UOP, INP, WGT or ACC."""


@dataclass(frozen=True, kw_only=True)
class Store(DmaInstruction):
    """SRAM -> DRAM from the accumulator buffer: OUT narrows, ACC stores full width."""


@dataclass(frozen=True, kw_only=True)
class LoopInstruction(Instruction):
    """A micro-op range run inside two nested loops (outer, inner)."""

    uop_begin: int
    uop_end: int
    loop_outer: int
    loop_inner: int

    @property
    def iterations(self) -> int:
        """Micro-op iterations the instruction performs."""
        return self.loop_outer * self.loop_inner * max(self.uop_end - self.uop_begin, 0)


@dataclass(frozen=True, kw_only=True)
class Gemm(LoopInstruction):
    """``acc[dst] += inp[src] @ wgt[wgt].T`` per iteration, or ``acc[dst] = 0`` with reset.

    Each index is ``outer * factor_outer + inner * factor_inner + micro-op field``.
    """

    reset: bool = False
    acc_factor_outer: int = 0
    acc_factor_inner: int = 0
    inp_factor_outer: int = 0
    inp_factor_inner: int = 0
    wgt_factor_outer: int = 0
    wgt_factor_inner: int = 0


@dataclass(frozen=True, kw_only=True)
class Alu(LoopInstruction):
    """``acc[dst] = op(acc[dst], imm if use_imm else inp[src] if src_inp else acc[src])``
    per iteration.

    ``src_inp`` reads the operand from the input buffer, each int8 element
    sign-extended to the accumulator's width (a quantized tensor such as a residual
    shortcut, brought into the accumulators without a GEMM); it needs input tiles
    the shape of accumulator tiles (``block_in == block_out``).
    """

    alu_op: AluOp
    use_imm: bool = False
    imm: int = 0
    dst_factor_outer: int = 0
    dst_factor_inner: int = 0
    src_factor_outer: int = 0
    src_factor_inner: int = 0
    src_inp: bool = False


@dataclass(frozen=True, kw_only=True)
class Finish(Instruction):
    """Ends the stream; the host's wait returns once it completes."""


@dataclass(frozen=True)
class MicroOp:
    """One 32-bit micro-op: accumulator, source and weight tile indices.

    For ALU instructions ``src`` indexes the accumulator buffer (the input buffer with
    ``src_inp``) and ``wgt`` is unused.
    """

    dst: int
    src: int
    wgt: int = 0


OPCODE_OF: dict[type[Instruction], Opcode] = {
    Load: Opcode.LOAD,
    Store: Opcode.STORE,
    Gemm: Opcode.GEMM,
    Alu: Opcode.ALU,
    Finish: Opcode.FINISH,
}
CLASS_OF: dict[Opcode, type[Instruction]] = {opcode: cls for cls, opcode in OPCODE_OF.items()}


def module_of(instruction: Instruction) -> Module:
    """The module that executes ``instruction``.

    Load: INP and WGT loads. Compute: UOP and ACC loads, GEMM, ALU, FINISH.
    Store: STOREs.
    """
    if isinstance(instruction, Store):
        return Module.STORE
    if isinstance(instruction, Load) and instruction.buffer in (Buffer.INP, Buffer.WGT):
        return Module.LOAD
    return Module.COMPUTE


#: (flag, queue) pairs each module may use; every other flag is illegal there.
_POPS = {
    Module.LOAD: {"pop_next": Queue.COMPUTE_TO_LOAD},
    Module.COMPUTE: {"pop_prev": Queue.LOAD_TO_COMPUTE, "pop_next": Queue.STORE_TO_COMPUTE},
    Module.STORE: {"pop_prev": Queue.COMPUTE_TO_STORE},
}
_PUSHES = {
    Module.LOAD: {"push_next": Queue.LOAD_TO_COMPUTE},
    Module.COMPUTE: {"push_prev": Queue.COMPUTE_TO_LOAD, "push_next": Queue.COMPUTE_TO_STORE},
    Module.STORE: {"push_prev": Queue.STORE_TO_COMPUTE},
}
DEPENDENCY_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")


def illegal_flags(instruction: Instruction) -> list[str]:
    """Dependency flags set on ``instruction`` that its module has no queue for."""
    module = module_of(instruction)
    allowed = _POPS[module].keys() | _PUSHES[module].keys()
    return [flag for flag in DEPENDENCY_FLAGS if getattr(instruction, flag) and flag not in allowed]


def popped_queues(instruction: Instruction) -> list[Queue]:
    """Queues the instruction takes a token from before it starts (legal flags only)."""
    return [q for flag, q in _POPS[module_of(instruction)].items() if getattr(instruction, flag)]


def pushed_queues(instruction: Instruction) -> list[Queue]:
    """Queues the instruction puts a token into when it completes (legal flags only)."""
    return [q for flag, q in _PUSHES[module_of(instruction)].items() if getattr(instruction, flag)]


def buffer_depth(config: HardwareConfig, buffer: Buffer) -> int:
    """Entries (tiles, or micro-ops) of an on-chip buffer; OUT is the accumulator."""
    return {
        Buffer.UOP: config.uop_depth,
        Buffer.INP: config.inp_depth,
        Buffer.WGT: config.wgt_depth,
        Buffer.ACC: config.acc_depth,
        Buffer.OUT: config.acc_depth,
    }[buffer]


def dram_unit_bytes(config: HardwareConfig, buffer: Buffer) -> int:
    """Bytes of one DRAM element of a transfer (the unit of dram_base and x_stride)."""
    return {
        Buffer.UOP: UOP_BYTES,
        Buffer.INP: config.inp_tile_bytes,
        Buffer.WGT: config.wgt_tile_bytes,
        Buffer.ACC: config.acc_tile_bytes,
        Buffer.OUT: config.out_tile_bytes,
    }[buffer]


def index_bits(depth: int) -> int:
    """Bits of an index into a buffer of ``depth`` entries."""
    return max((depth - 1).bit_length(), 1)


# --- bit layout -------------------------------------------------------------------

LOOP_EXTENT_BITS = 14
DMA_SIZE_BITS = 16
DMA_PAD_BITS = 4
#: the signed value a LOAD writes into every element of its padding tiles (int8)
DMA_PAD_VALUE_BITS = 8
DRAM_ADDRESS_BITS = 32
ALU_IMM_BITS = 16


@dataclass(frozen=True)
class Field:
    """One bit field of an instruction or micro-op word: the SDK's declaration of it
    (``spec``: name, width, signedness and so its range) at bit ``offset``."""

    spec: IsaField
    offset: int

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def width(self) -> int:
        return self.spec.bits

    @property
    def signed(self) -> bool:
        return self.spec.signed

    @property
    def minimum(self) -> int:
        """Smallest encodable value."""
        return self.spec.low

    @property
    def maximum(self) -> int:
        """Largest encodable value."""
        return self.spec.high


@dataclass(frozen=True)
class IsaLayout:
    """Every field's bit position, for one config: the instructions as the SDK's
    declarative encoder (:class:`heterocc.sdk.InstructionSet`, which encodes and decodes
    them), and the positions it gives each field."""

    instructions: dict[Opcode, tuple[Field, ...]]
    uop: tuple[Field, ...]
    instruction_set: InstructionSet

    def fields(self, opcode: Opcode) -> tuple[Field, ...]:
        """Fields of an instruction word of ``opcode`` (opcode and flags first)."""
        return self.instructions[opcode]


#: bits of the opcode, the lowest of every instruction word
OPCODE_BITS = 3


def _declare(spec: list[tuple[str, int] | tuple[str, int, bool]]) -> tuple[IsaField, ...]:
    return tuple(IsaField(name, width, signed=bool(signed and signed[0]))
                 for name, width, *signed in spec)


def _placed(isa: InstructionSet, name: str) -> tuple[Field, ...]:
    """The fields of ``name`` with their bit positions as ``isa`` lays them out, the
    opcode (when ``isa`` has one) first."""
    opcode = (Field(IsaField("opcode", isa.opcode_bits), 0),) if isa.opcode_bits else ()
    return opcode + tuple(Field(spec, low) for spec, low in isa.layout(name))


@functools.lru_cache(maxsize=64)
def isa_layout(config: HardwareConfig) -> IsaLayout:
    """Derive the bit layout of every instruction and of the micro-op from ``config``.

    Raises AcceleratorError when the config's buffers need more index bits than a
    128-bit instruction or a 32-bit micro-op has room for.
    """
    uop_bits = index_bits(config.uop_depth)
    inp_bits = index_bits(config.inp_depth)
    wgt_bits = index_bits(config.wgt_depth)
    acc_bits = index_bits(config.acc_depth)
    sram_bits = max(uop_bits, inp_bits, wgt_bits, acc_bits)
    head = [(flag, 1) for flag in DEPENDENCY_FLAGS]
    dma = head + [
        ("buffer", 3),
        ("sram_base", sram_bits),
        ("dram_base", DRAM_ADDRESS_BITS),
        ("y_size", DMA_SIZE_BITS),
        ("x_size", DMA_SIZE_BITS),
        ("x_stride", DMA_SIZE_BITS),
        ("y_pad_top", DMA_PAD_BITS),
        ("y_pad_bottom", DMA_PAD_BITS),
        ("x_pad_left", DMA_PAD_BITS),
        ("x_pad_right", DMA_PAD_BITS),
        ("pad_value", DMA_PAD_VALUE_BITS, True),
    ]
    loops = [
        ("uop_begin", uop_bits),
        ("uop_end", uop_bits + 1),
        ("loop_outer", LOOP_EXTENT_BITS),
        ("loop_inner", LOOP_EXTENT_BITS),
    ]
    gemm = head + [("reset", 1)] + loops + [
        ("acc_factor_outer", acc_bits),
        ("acc_factor_inner", acc_bits),
        ("inp_factor_outer", inp_bits),
        ("inp_factor_inner", inp_bits),
        ("wgt_factor_outer", wgt_bits),
        ("wgt_factor_inner", wgt_bits),
    ]
    alu = head + [("alu_op", 3), ("use_imm", 1), ("imm", ALU_IMM_BITS, True)] + loops + [
        ("dst_factor_outer", acc_bits),
        ("dst_factor_inner", acc_bits),
        ("src_factor_outer", acc_bits),
        ("src_factor_inner", acc_bits),
        ("src_inp", 1),
    ]
    declared = {Opcode.LOAD: dma, Opcode.STORE: dma, Opcode.GEMM: gemm, Opcode.ALU: alu,
                Opcode.FINISH: head}
    for opcode, fields in declared.items():
        used = OPCODE_BITS + sum(width for _, width, *_ in fields)
        if used > INSTRUCTION_BITS:
            raise AcceleratorError(
                f"hardware config {config.name}: a {opcode.name} instruction needs {used} bits "
                f"(> {INSTRUCTION_BITS}); shrink the buffers (fewer index bits) to fit"
            )
    isa = InstructionSet(
        f"accelerator config {config.name}",
        [InstructionFormat(opcode.name, int(opcode), _declare(fields))
         for opcode, fields in declared.items()],
        opcode_bits=OPCODE_BITS, word_bits=INSTRUCTION_BITS)
    uop_spec = [("dst", acc_bits), ("src", max(inp_bits, acc_bits)), ("wgt", wgt_bits)]
    uop_used = sum(width for _, width in uop_spec)
    if uop_used > UOP_BYTES * 8:
        raise AcceleratorError(
            f"hardware config {config.name}: a micro-op needs {uop_used} bits (> 32) for "
            f"indices of the acc ({acc_bits} bits), inp ({inp_bits}) and wgt ({wgt_bits}) "
            "buffers; shrink those buffers"
        )
    # a micro-op word is fields only: one format, no opcode bits
    uops = InstructionSet(f"micro-ops of config {config.name}",
                          [InstructionFormat("UOP", 0, _declare(uop_spec))],
                          opcode_bits=0, word_bits=UOP_BYTES * 8)
    return IsaLayout({opcode: _placed(isa, opcode.name) for opcode in declared},
                     _placed(uops, "UOP"), isa)
