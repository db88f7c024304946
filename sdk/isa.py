"""A declarative instruction encoder: an accelerator's instructions and their bit-fields
declared once, and from that one declaration the encoder, the decoder and the table of
the ISA document.

    ISA = InstructionSet("dotprod", opcode_bits=4, word_bits=64, formats=[
        InstructionFormat("CLEAR", 1, (Field("acc", 15), Field("count", 15)),
                          "ACC[acc : acc+count] = 0"),
        ...])
    words = ISA.encode([ISA.command("CLEAR", acc=16, count=4)])
    ISA.decode(words)          # [Command("CLEAR", acc=16, count=4)]
    print(ISA.table())         # a Markdown table for the ISA reference

A word holds the opcode in its lowest ``opcode_bits`` bits, then the instruction's
fields in the order declared, each from the next free bit. Fields are unsigned unless
declared ``signed`` (two's complement in their width). Words of up to 64 bits encode
to ``uint64`` arrays (:meth:`InstructionSet.encode`); wider ones (the in-tree
accelerator's 128-bit instructions) one at a time as Python integers
(:meth:`InstructionSet.encode_word`, :meth:`InstructionSet.decode_word`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from heterocc.errors import CompileError, IllegalInstructionError


@dataclass(frozen=True)
class Field:
    """One bit-field of an instruction: ``bits`` wide; ``signed`` for two's complement."""

    name: str
    bits: int
    doc: str = ""
    signed: bool = False

    @property
    def low(self) -> int:
        """The smallest value the field holds."""
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def high(self) -> int:
        """The largest value the field holds."""
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1


@dataclass(frozen=True)
class InstructionFormat:
    """One instruction: its mnemonic ``name``, ``opcode``, ``fields`` (in bit order after
    the opcode) and ``effect`` (what it does, for the ISA table)."""

    name: str
    opcode: int
    fields: tuple[Field, ...]
    effect: str = ""


@dataclass(frozen=True)
class Command:
    """One decoded (or to-be-encoded) instruction: its mnemonic and its field values,
    in the format's order. ``command["acc"]`` reads a field."""

    op: str
    values: tuple[tuple[str, int], ...]

    def __getitem__(self, name: str) -> int:
        for field_name, value in self.values:
            if field_name == name:
                return value
        raise KeyError(f"{self.op} has no field {name!r}; it has "
                       f"{', '.join(n for n, _ in self.values) or 'none'}")

    def replace(self, **values: int) -> Command:
        """This command with some fields changed."""
        unknown = set(values) - {n for n, _ in self.values}
        if unknown:
            raise KeyError(f"{self.op} has no field(s) {', '.join(sorted(unknown))}")
        return Command(self.op, tuple((n, values.get(n, v)) for n, v in self.values))

    def __str__(self) -> str:
        return " ".join([self.op, *(f"{n}={v}" for n, v in self.values)])


class InstructionSet:
    """Instructions of ``word_bits``-bit words with an ``opcode_bits``-bit opcode (0 bits:
    one format, a word of fields only); CompileError at construction when the declaration
    is inconsistent (repeated names or opcodes, an opcode or the fields not fitting the
    word)."""

    def __init__(self, name: str, formats: Iterable[InstructionFormat], opcode_bits: int,
                 word_bits: int = 64):
        self.name, self.opcode_bits, self.word_bits = name, opcode_bits, word_bits
        self.formats = list(formats)
        if word_bits <= 0 or opcode_bits < 0:
            raise CompileError(f"ISA {name!r}: words of {word_bits} bits with a "
                               f"{opcode_bits}-bit opcode; both must be positive")
        self._by_name: dict[str, InstructionFormat] = {}
        self._by_opcode: dict[int, InstructionFormat] = {}
        for fmt in self.formats:
            if fmt.name in self._by_name or fmt.opcode in self._by_opcode:
                raise CompileError(f"ISA {name!r}: instruction {fmt.name} repeats a name or "
                                   f"the opcode {fmt.opcode}")
            if not 0 <= fmt.opcode < 1 << opcode_bits:
                raise CompileError(f"ISA {name!r}: opcode {fmt.opcode} of {fmt.name} does not "
                                   f"fit {opcode_bits} bits")
            used = opcode_bits + sum(f.bits for f in fmt.fields)
            if used > word_bits:
                raise CompileError(f"ISA {name!r}: {fmt.name} needs {used} bits, the word has "
                                   f"{word_bits}")
            if len({f.name for f in fmt.fields}) != len(fmt.fields):
                raise CompileError(f"ISA {name!r}: {fmt.name} repeats a field name")
            self._by_name[fmt.name] = fmt
            self._by_opcode[fmt.opcode] = fmt

    def format(self, op: str) -> InstructionFormat:
        """The declaration of instruction ``op``."""
        try:
            return self._by_name[op]
        except KeyError:
            raise IllegalInstructionError(f"ISA {self.name!r} has no instruction {op!r}; it has "
                                          f"{', '.join(self._by_name)}") from None

    def command(self, op: str, **values: int) -> Command:
        """Instruction ``op`` with its fields by name (fields not given are 0);
        IllegalInstructionError for a field it lacks or a value that is not an integer."""
        fmt = self.format(op)
        unknown = set(values) - {f.name for f in fmt.fields}
        if unknown:
            raise IllegalInstructionError(f"{op} has no field(s) {', '.join(sorted(unknown))}; "
                                          f"it has {', '.join(f.name for f in fmt.fields)}")
        for name, value in values.items():
            if not isinstance(value, int | np.integer):
                raise IllegalInstructionError(f"{op} field {name}={value!r} is not an integer",
                                              field=name)
        return Command(op, tuple((f.name, int(values.get(f.name, 0))) for f in fmt.fields))

    def layout(self, op: str) -> tuple[tuple[Field, int], ...]:
        """The fields of instruction ``op`` with the lowest bit of each, in bit order."""
        placed, shift = [], self.opcode_bits
        for spec in self.format(op).fields:
            placed.append((spec, shift))
            shift += spec.bits
        return tuple(placed)

    def used_bits(self, op: str) -> int:
        """The bits of a word of ``op`` that the opcode and fields take (the rest are
        reserved and zero)."""
        return self.opcode_bits + sum(f.bits for f in self.format(op).fields)

    def encode_word(self, command: Command, index: int | None = None) -> int:
        """One command as an integer word; IllegalInstructionError naming the field that
        does not fit (``index``: the command's position, for the message)."""
        fmt = self.format(command.op)
        word = fmt.opcode
        for (spec, shift), (name, value) in zip(self.layout(command.op), command.values):
            if not spec.low <= value <= spec.high:
                raise IllegalInstructionError(
                    f"{command.op} field {name}={value} does not fit {spec.bits} bits "
                    f"({spec.low}..{spec.high}) of ISA {self.name!r}", index, field=name,
                    limit=spec.high if value > spec.high else spec.low)
            word |= (value & ((1 << spec.bits) - 1)) << shift
        return word

    def decode_word(self, word: int, index: int | None = None) -> Command:
        """The command of an integer word; IllegalInstructionError on an unknown opcode."""
        opcode = word & ((1 << self.opcode_bits) - 1)
        fmt = self._by_opcode.get(opcode)
        if fmt is None:
            raise IllegalInstructionError(f"unknown opcode {opcode} in word {word:#x}", index,
                                          field="opcode")
        values = []
        for spec, shift in self.layout(fmt.name):
            raw = (word >> shift) & ((1 << spec.bits) - 1)
            if spec.signed and raw > spec.high:
                raw -= 1 << spec.bits
            values.append((spec.name, raw))
        return Command(fmt.name, tuple(values))

    def _check_uint64(self) -> None:
        if self.word_bits > 64:
            raise CompileError(f"ISA {self.name!r}: words of {self.word_bits} bits do not fit "
                               "uint64; encode_word / decode_word take one word at a time")

    def encode(self, commands: Sequence[Command]) -> np.ndarray:
        """The commands as words (uint64, for words of at most 64 bits);
        IllegalInstructionError naming the instruction and the field that does not fit."""
        self._check_uint64()
        return np.array([self.encode_word(c, index) for index, c in enumerate(commands)],
                        np.uint64)

    def decode(self, words: Iterable[int] | np.ndarray) -> list[Command]:
        """The commands of ``words`` (uint64); IllegalInstructionError on an unknown
        opcode."""
        self._check_uint64()
        return [self.decode_word(int(word), index)
                for index, word in enumerate(np.asarray(words, np.uint64))]

    def table(self) -> str:
        """The instructions as a Markdown table (opcode, fields with their bits, effect),
        for the ISA reference: generated, so it cannot drift from the encoder."""
        lines = [f"| instruction | opcode (bits 0-{self.opcode_bits - 1}) | fields | effect |",
                 "|---|---|---|---|"]
        for fmt in self.formats:
            parts = []
            for spec, shift in self.layout(fmt.name):
                sign = ", signed" if spec.signed else ""
                doc = f": {spec.doc}" if spec.doc else ""
                parts.append(f"`{spec.name}` {shift}-{shift + spec.bits - 1}{sign}{doc}")
            lines.append(f"| {fmt.name} | {fmt.opcode} | {'<br>'.join(parts) or '-'} | "
                         f"{fmt.effect} |")
        return "\n".join(lines)


__all__ = ["Command", "Field", "InstructionFormat", "InstructionSet"]
