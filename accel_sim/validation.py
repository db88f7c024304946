"""Arithmetic validation of instruction records: every rule of docs/isa.md section 6
that an instruction's own fields decide, and the stream's work budget.

This is the device boundary's first line. The checker, the timing model and the
functional simulator all start here, so that no field value reaches an allocation,
a slice or a loop before it has been bounded: every limit below is computed with
integer arithmetic on the fields (Python integers do not overflow), so refusing a
hostile instruction costs the same few microseconds and bytes as accepting a
benign one. Every refusal is an :class:`IllegalInstructionError` naming the
instruction's index, the field (or product of fields) at fault and the limit.

What depends on micro-op contents (the exact tile of every GEMM or ALU iteration)
is known only when the stream runs; the simulator checks it then.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from ..errors import AcceleratorError, IllegalInstructionError
from .config import HardwareConfig
from .isa import (
    OPCODE_OF,
    Alu,
    AluOp,
    Buffer,
    DmaInstruction,
    Gemm,
    Instruction,
    Load,
    LoopInstruction,
    buffer_depth,
    dram_unit_bytes,
    illegal_flags,
    isa_layout,
    module_of,
)

_ENUMS = {"buffer": Buffer, "alu_op": AluOp}
#: the integer types a field may hold (an enumeration member is checked for membership)
_INT_TYPES = frozenset({int, bool, Buffer, AluOp})
#: the field a loop's iteration count is named by in refusals
ITERATIONS_FIELD = "loop_outer*loop_inner*(uop_end-uop_begin)"
#: at most this many problems are listed for one stream (the rest are counted)
MAX_LISTED_ERRORS = 100


def dma_dram_span(instruction: DmaInstruction, config: HardwareConfig) -> tuple[int, int]:
    """Byte range [first, end) of DRAM a transfer touches (empty when it moves no tile)."""
    unit = dram_unit_bytes(config, instruction.buffer)
    if instruction.y_size == 0 or instruction.x_size == 0:
        return 0, 0
    first = instruction.dram_base * unit
    last_tile = instruction.dram_base + (instruction.y_size - 1) * instruction.x_stride
    return first, (last_tile + instruction.x_size) * unit


def dma_sram_tiles(instruction: DmaInstruction) -> int:
    """SRAM entries a transfer covers from sram_base (padded block for a LOAD)."""
    if isinstance(instruction, Load):
        return instruction.padded_rows * instruction.padded_cols
    return instruction.y_size * instruction.x_size


@dataclass(frozen=True)
class Work:
    """What an instruction asks of the machine: DMA tiles moved (the padded block a
    LOAD writes, the tiles a STORE reads) and GEMM/ALU micro-op iterations."""

    tiles: int = 0
    iterations: int = 0


def instruction_work(instruction: Instruction) -> Work:
    """The work of one (field-valid) instruction, counted against the budget."""
    if isinstance(instruction, DmaInstruction):
        return Work(tiles=dma_sram_tiles(instruction))
    if isinstance(instruction, LoopInstruction):
        return Work(iterations=instruction.iterations)
    return Work()


def loop_part_injective(outer: int, inner: int, factor_outer: int, factor_inner: int) -> bool:
    """Whether ``(o, i) -> o * factor_outer + i * factor_inner`` is one-to-one on
    ``[0, outer) x [0, inner)`` (non-negative factors).

    Two iterations ``(o, i) != (o', i')`` collide when ``do * factor_outer ==
    -di * factor_inner`` for some ``|do| < outer``, ``|di| < inner``; the smallest such
    non-zero step is ``(factor_inner / g, factor_outer / g)`` with ``g`` their gcd.
    """
    if (outer > 1 and factor_outer == 0) or (inner > 1 and factor_inner == 0):
        return False
    if outer > 1 and inner > 1:
        g = math.gcd(factor_outer, factor_inner)
        return not (factor_inner // g < outer and factor_outer // g < inner)
    return True


def _error(message: str, index: int | None, field: str, limit: int | None
           ) -> IllegalInstructionError:
    return IllegalInstructionError(message, index, field=field, limit=limit)


@dataclass(frozen=True)
class _FieldSpec:
    name: str
    minimum: int
    maximum: int
    width: int
    members: frozenset[int] | None  # the values an enumeration field may take


class InstructionValidator:
    """The per-instruction rules for one config, with every bound the rules need
    computed once (the checker, the timing model and the simulator call it for
    every instruction they see)."""

    def __init__(self, config: HardwareConfig):
        self.config = config
        layout = isa_layout(config)
        self._fields = {
            cls: tuple(
                _FieldSpec(f.name, f.minimum, f.maximum, f.width,
                           frozenset(int(m) for m in _ENUMS[f.name])
                           if f.name in _ENUMS else None)
                for f in layout.fields(opcode)[1:])
            for cls, opcode in OPCODE_OF.items()
        }
        self._getters = {cls: operator.attrgetter(*(spec.name for spec in specs))
                         for cls, specs in self._fields.items() if specs}
        self._ranges = {cls: (tuple(spec.minimum for spec in specs),
                              tuple(spec.maximum for spec in specs))
                        for cls, specs in self._fields.items()}
        self._enum_fields = {cls: tuple(spec for spec in specs if spec.members is not None)
                             for cls, specs in self._fields.items()}
        self._depth = {buffer: buffer_depth(config, buffer) for buffer in Buffer}
        self._unit = {buffer: dram_unit_bytes(config, buffer) for buffer in Buffer}
        self.uop_depth = config.uop_depth
        self.acc_depth = config.acc_depth
        self.inp_depth = config.inp_depth
        self.wgt_depth = config.wgt_depth
        self.max_iterations = config.max_stream_iterations
        #: id -> (instruction, DRAM bytes it needs) of instructions found legal
        self._legal: dict[int, tuple[Instruction, int]] = {}

    def errors(self, instruction: Instruction, index: int | None,
               dram_bytes: int | None = None) -> list[IllegalInstructionError]:
        """Every rule ``instruction`` breaks on its own (empty when it is legal);
        ``dram_bytes``: the size of the DRAM it runs against (None: unchecked)."""
        # a compiled stream runs again and again: an instruction object found legal once
        # (frozen, and kept alive by the cache, so its id is its own) stays legal, for
        # any DRAM that holds what it touches
        known = self._legal.get(id(instruction))
        if known is not None and known[0] is instruction and \
                (dram_bytes is None or known[1] <= dram_bytes):
            return []
        errors = self._errors(instruction, index, dram_bytes)
        if not errors:
            if len(self._legal) >= _LEGAL_CACHE_SIZE:
                self._legal.clear()
            end = dma_dram_span(instruction, self.config)[1] \
                if isinstance(instruction, DmaInstruction) else 0
            self._legal[id(instruction)] = (instruction, end)
        return errors

    def _errors(self, instruction: Instruction, index: int | None,
                dram_bytes: int | None) -> list[IllegalInstructionError]:
        specs = self._fields.get(type(instruction))
        if specs is None:
            return [IllegalInstructionError(f"{instruction!r} is not an ISA instruction", index)]
        errors = self._field_errors(instruction, specs, index)
        if errors:
            return errors
        name = OPCODE_OF[type(instruction)].name
        if instruction.pop_prev or instruction.pop_next or instruction.push_prev \
                or instruction.push_next:
            module = module_of(instruction)
            for flag in illegal_flags(instruction):
                errors.append(_error(
                    f"{name} runs on the {module.name.lower()} module, which has no queue "
                    f"for {flag}; the load module may only pop/push next, the store module "
                    "only prev", index, flag, 0))
        if isinstance(instruction, DmaInstruction):
            errors.extend(self._dma_errors(instruction, index, dram_bytes))
        elif isinstance(instruction, LoopInstruction):
            errors.extend(self._loop_errors(instruction, index))
        return errors

    def _field_errors(self, instruction: Instruction, specs: tuple[_FieldSpec, ...],
                      index: int | None) -> list[IllegalInstructionError]:
        """Every field an integer inside its encoded width; enumerations known members."""
        values = self._getters[type(instruction)](instruction)
        if all(value.__class__ in _INT_TYPES and low <= value <= high
               for value, low, high in zip(values, *self._ranges[type(instruction)])) \
                and all(getattr(instruction, spec.name) in spec.members
                        for spec in self._enum_fields[type(instruction)]):
            return []
        for spec in specs:
            value = getattr(instruction, spec.name)
            if not isinstance(value, int):
                return [_error(f"{type(instruction).__name__.upper()} field {spec.name}="
                               f"{value!r} is not an integer", index, spec.name, None)]
            if value < spec.minimum or value > spec.maximum:
                limit = spec.minimum if value < spec.minimum else spec.maximum
                return [_error(
                    f"{type(instruction).__name__.upper()} field {spec.name}={value} is "
                    f"outside [{spec.minimum}, {spec.maximum}] ({spec.width} bits in config "
                    f"{self.config.name})", index, spec.name, limit)]
            if spec.members is not None and value not in spec.members:
                enum = _ENUMS[spec.name]
                known = ", ".join(f"{member.value}={member.name}" for member in enum)
                return [_error(f"{type(instruction).__name__.upper()} has unknown "
                               f"{spec.name} {value}; known values are {known}",
                               index, spec.name, max(spec.members))]
        return []

    def _dma_errors(self, instruction: DmaInstruction, index: int | None,
                    dram_bytes: int | None) -> list[IllegalInstructionError]:
        is_load = isinstance(instruction, Load)
        name = "LOAD" if is_load else "STORE"
        allowed = _LOAD_BUFFERS if is_load else _STORE_BUFFERS
        buffer = Buffer(instruction.buffer)
        if buffer not in allowed:
            return [_error(
                f"{name} cannot use buffer {buffer.name}; allowed: "
                + ", ".join(sorted(b.name for b in allowed)), index, "buffer", None)]
        errors: list[IllegalInstructionError] = []
        if not is_load:
            if (instruction.y_pad_top or instruction.y_pad_bottom or instruction.x_pad_left
                    or instruction.x_pad_right or instruction.pad_value):
                errors.append(_error(
                    "STORE does not pad; set its four pad fields and pad_value to 0",
                    index, "y_pad_top/y_pad_bottom/x_pad_left/x_pad_right/pad_value", 0))
            if instruction.y_size > 1 and instruction.x_stride < instruction.x_size:
                errors.append(_error(
                    f"STORE rows overlap in DRAM (x_stride {instruction.x_stride} < x_size "
                    f"{instruction.x_size})", index, "x_stride", instruction.x_size))
        elif instruction.pad_value and buffer != Buffer.INP:
            errors.append(_error(
                f"LOAD {buffer.name} pads with 0; only an INP load takes a pad_value (got "
                f"{instruction.pad_value})", index, "pad_value", 0))
        depth = self._depth[buffer]
        sram_end = instruction.sram_base + dma_sram_tiles(instruction)
        if sram_end > depth:
            covered = ("(y_pad_top+y_size+y_pad_bottom)*(x_pad_left+x_size+x_pad_right)"
                       if is_load else "y_size*x_size")
            errors.append(_error(
                f"{name} {buffer.name} covers SRAM entries [{instruction.sram_base}, "
                f"{sram_end}) beyond the buffer's depth {depth} (sram_base + {covered} must "
                f"be <= {depth})", index, f"sram_base+{covered}", depth))
        if dram_bytes is not None and instruction.y_size and instruction.x_size:
            unit = self._unit[buffer]
            end = (instruction.dram_base + (instruction.y_size - 1) * instruction.x_stride
                   + instruction.x_size) * unit
            if end > dram_bytes:
                errors.append(_error(
                    f"{name} {buffer.name} touches DRAM bytes "
                    f"[{instruction.dram_base * unit}, {end}) beyond the {dram_bytes}-byte "
                    f"DRAM (dram_base + (y_size-1)*x_stride + x_size, in {unit}-byte units)",
                    index, "dram_base+(y_size-1)*x_stride+x_size", dram_bytes))
        return errors

    def _loop_errors(self, instruction: LoopInstruction, index: int | None
                     ) -> list[IllegalInstructionError]:
        name = OPCODE_OF[type(instruction)].name
        begin, end = instruction.uop_begin, instruction.uop_end
        if not begin <= end <= self.uop_depth:
            beyond = end > self.uop_depth
            return [_error(
                f"{name} micro-op range [{begin}, {end}) is not inside the micro-op buffer "
                f"[0, {self.uop_depth}) with uop_begin <= uop_end",
                index, "uop_end" if beyond else "uop_begin",
                self.uop_depth if beyond else end)]
        errors: list[IllegalInstructionError] = []
        iterations = instruction.iterations
        if iterations > self.max_iterations:
            errors.append(_error(
                f"{name} asks for {iterations} micro-op iterations, more than the whole "
                f"stream's budget of {self.max_iterations} "
                "(HardwareConfig.max_stream_iterations)",
                index, ITERATIONS_FIELD, self.max_iterations))
        if isinstance(instruction, Alu):
            errors.extend(self._alu_errors(instruction, index))
        if not iterations:
            return errors
        for what, fields, factors, depth in self._factor_bounds(instruction):
            reach = ((instruction.loop_outer - 1) * factors[0]
                     + (instruction.loop_inner - 1) * factors[1])
            if reach >= depth:
                errors.append(_error(
                    f"{name} loop factors {factors} over {instruction.loop_outer}x"
                    f"{instruction.loop_inner} iterations reach {what} index {reach}, beyond "
                    f"the buffer's depth {depth}",
                    index, f"(loop_outer-1)*{fields[0]}+(loop_inner-1)*{fields[1]}",
                    depth - 1))
        return errors

    def _alu_errors(self, instruction: Alu, index: int | None
                    ) -> list[IllegalInstructionError]:
        """The ALU's own rules (docs/isa.md section 5): an operand is the immediate or
        an input tile, never both; an input-tile operand needs tiles shaped alike; and
        no accumulator tile is written by two iterations, which its fields alone
        already decide when the loop part of the destination index repeats a value
        (the same micro-op then writes one tile twice) or when there are more
        iterations than tiles."""
        errors: list[IllegalInstructionError] = []
        config = self.config
        if instruction.src_inp:
            if instruction.use_imm:
                errors.append(_error(
                    "ALU sets both use_imm and src_inp; its operand is either the immediate "
                    "or an input tile", index, "use_imm", 0))
            elif config.block_in != config.block_out:
                errors.append(_error(
                    f"ALU with src_inp needs input tiles shaped like accumulator tiles, but "
                    f"{config.name} has block_in={config.block_in} != "
                    f"block_out={config.block_out}", index, "src_inp", 0))
        if instruction.alu_op == AluOp.MUL and not instruction.use_imm and \
                not 0 <= instruction.imm < 2 * config.acc_bits:
            errors.append(_error(
                f"MUL with a tensor operand shifts its {2 * config.acc_bits}-bit product "
                f"right by imm, which must lie in [0, {2 * config.acc_bits - 1}], not "
                f"{instruction.imm}", index, "imm", 0))
        iterations = instruction.iterations
        if not iterations:
            return errors
        if iterations > self.acc_depth:
            errors.append(_error(
                f"ALU runs {iterations} iterations but the accumulator holds "
                f"{self.acc_depth} tiles, so some tile would be written twice; split the "
                "instruction", index, ITERATIONS_FIELD, self.acc_depth))
        elif not loop_part_injective(instruction.loop_outer, instruction.loop_inner,
                                     instruction.dst_factor_outer,
                                     instruction.dst_factor_inner):
            errors.append(_error(
                f"ALU destination factors ({instruction.dst_factor_outer}, "
                f"{instruction.dst_factor_inner}) over {instruction.loop_outer}x"
                f"{instruction.loop_inner} loops give two iterations of one micro-op the "
                "same accumulator tile, which it would write twice; an ALU writes each tile "
                "once (use distinct factors, or split the instruction)",
                index, "dst_factor_outer/dst_factor_inner", None))
        return errors

    def _factor_bounds(self, instruction: LoopInstruction
                       ) -> list[tuple[str, tuple[str, str], tuple[int, int], int]]:
        """(what, factor fields, factors, depth) of every buffer a loop indexes."""
        if isinstance(instruction, Gemm):
            return [
                ("accumulator", ("acc_factor_outer", "acc_factor_inner"),
                 (instruction.acc_factor_outer, instruction.acc_factor_inner), self.acc_depth),
                ("input", ("inp_factor_outer", "inp_factor_inner"),
                 (instruction.inp_factor_outer, instruction.inp_factor_inner), self.inp_depth),
                ("weight", ("wgt_factor_outer", "wgt_factor_inner"),
                 (instruction.wgt_factor_outer, instruction.wgt_factor_inner), self.wgt_depth),
            ]
        if not isinstance(instruction, Alu):
            return []
        bounds = [("accumulator", ("dst_factor_outer", "dst_factor_inner"),
                   (instruction.dst_factor_outer, instruction.dst_factor_inner),
                   self.acc_depth)]
        if not instruction.use_imm:
            source = "input source" if instruction.src_inp else "accumulator source"
            depth = self.inp_depth if instruction.src_inp else self.acc_depth
            bounds.append((source, ("src_factor_outer", "src_factor_inner"),
                           (instruction.src_factor_outer, instruction.src_factor_inner), depth))
        return bounds


#: instructions the validator remembers as legal (then it starts over)
_LEGAL_CACHE_SIZE = 1 << 16

_LOAD_BUFFERS = frozenset({Buffer.UOP, Buffer.INP, Buffer.WGT, Buffer.ACC})
_STORE_BUFFERS = frozenset({Buffer.OUT, Buffer.ACC})


@functools.lru_cache(maxsize=64)
def validator(config: HardwareConfig) -> InstructionValidator:
    """The (shared) validator of ``config``."""
    return InstructionValidator(config)


def instruction_errors(
    instruction: Instruction,
    index: int | None,
    config: HardwareConfig,
    dram_bytes: int | None = None,
) -> list[IllegalInstructionError]:
    """Every rule one instruction breaks on its own (empty when it is legal).

    ``dram_bytes``: the size of the DRAM it runs against (None: DRAM ranges unchecked).
    """
    return validator(config).errors(instruction, index, dram_bytes)


class WorkMeter:
    """Running totals of a stream's work against its config's budget.

    ``add`` returns the refusal for the instruction at which a total first passes
    its limit (None while within budget).
    """

    def __init__(self, config: HardwareConfig):
        self.config = config
        self.tiles = 0
        self.iterations = 0

    def add(self, instruction: Instruction, index: int | None) -> IllegalInstructionError | None:
        """Count one field-valid instruction's work; the refusal if it passes the budget."""
        work = instruction_work(instruction)
        self.tiles += work.tiles
        self.iterations += work.iterations
        config = self.config
        if work.tiles and self.tiles > config.max_stream_tiles:
            return _error(
                f"the stream's DMA transfers reach {self.tiles} tiles here, beyond the "
                f"budget of {config.max_stream_tiles} (HardwareConfig.max_stream_tiles); "
                "split the work into several streams or raise the budget",
                index, "max_stream_tiles", config.max_stream_tiles)
        if work.iterations and self.iterations > config.max_stream_iterations:
            return _error(
                f"the stream's GEMM/ALU iterations reach {self.iterations} here, beyond the "
                f"budget of {config.max_stream_iterations} "
                "(HardwareConfig.max_stream_iterations); split the work into several "
                "streams or raise the budget",
                index, "max_stream_iterations", config.max_stream_iterations)
        return None


def length_error(count: int, config: HardwareConfig) -> IllegalInstructionError | None:
    """The refusal of a stream longer than the budget allows (None when it is not)."""
    if count <= config.max_stream_instructions:
        return None
    return _error(
        f"the stream has {count} instructions, more than the budget of "
        f"{config.max_stream_instructions} (HardwareConfig.max_stream_instructions)",
        config.max_stream_instructions, "max_stream_instructions",
        config.max_stream_instructions)


#: a further rule applied to each instruction that passed its own (the checker's
#: stream rules): called with the instruction and its index, returns its refusals
StreamRule = Callable[[Instruction, int], Iterable[AcceleratorError]]


def iter_stream_errors(
    instructions: Sequence[Instruction],
    config: HardwareConfig,
    dram_bytes: int | None = None,
    rule: StreamRule | None = None,
) -> Iterator[AcceleratorError]:
    """Every per-instruction and budget refusal of a stream, in instruction order
    (with ``rule``'s, for each instruction that passed its own rules).

    A stream longer than the budget is refused at once, without looking further.
    """
    too_long = length_error(len(instructions), config)
    if too_long is not None:
        yield too_long
        return
    meter = WorkMeter(config)
    check = validator(config).errors
    over_budget = False
    for index, instruction in enumerate(instructions):
        errors = check(instruction, index, dram_bytes)
        if errors:
            yield from errors
            continue
        if not over_budget:
            refusal = meter.add(instruction, index)
            if refusal is not None:
                over_budget = True
                yield refusal
        if rule is not None:
            yield from rule(instruction, index)


def first_errors(errors: Iterable[AcceleratorError], limit: int = MAX_LISTED_ERRORS
            ) -> list[AcceleratorError]:
    """The first ``limit`` errors; the last one kept notes how many more there were."""
    kept: list[AcceleratorError] = []
    more = 0
    for error in errors:
        if len(kept) < limit:
            kept.append(error)
        else:
            more += 1
    if more:
        kept[-1].add_note(f"{more} more problem(s) not listed")
    return kept


def validate_stream(
    instructions: Sequence[Instruction], config: HardwareConfig, dram_bytes: int | None = None
) -> None:
    """Raise the first per-instruction or budget refusal of a stream (the timing
    model's and the simulator's entry check; the checker adds the stream rules)."""
    for error in iter_stream_errors(instructions, config, dram_bytes):
        raise error
