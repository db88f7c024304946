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
declared ``signed`` (two's complement in their width).
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
    """Instructions of ``word_bits``-bit words (at most 64) with an ``opcode_bits``-bit
    opcode; CompileError at construction when the declaration is inconsistent
    (repeated names or opcodes, an opcode or the fields not fitting the word)."""

    def __init__(self, name: str, formats: Iterable[InstructionFormat], opcode_bits: int,
                 word_bits: int = 64):
        self.name, self.opcode_bits, self.word_bits = name, opcode_bits, word_bits
        self.formats = list(formats)
        if not 0 < word_bits <= 64:
            raise CompileError(f"ISA {name!r}: words of {word_bits} bits; 1 to 64 are encoded")
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
        """Instruction ``op`` with its fields by name (fields not given are 0)."""
        fmt = self.format(op)
        unknown = set(values) - {f.name for f in fmt.fields}
        if unknown:
            raise IllegalInstructionError(f"{op} has no field(s) {', '.join(sorted(unknown))}; "
                                          f"it has {', '.join(f.name for f in fmt.fields)}")
        return Command(op, tuple((f.name, int(values.get(f.name, 0))) for f in fmt.fields))

    def encode(self, commands: Sequence[Command]) -> np.ndarray:
        """The commands as words (uint64); IllegalInstructionError naming the instruction
        and the field that does not fit."""
        words = np.zeros(len(commands), np.uint64)
        for index, command in enumerate(commands):
            fmt = self.format(command.op)
            word, shift = fmt.opcode, self.opcode_bits
            for spec, (name, value) in zip(fmt.fields, command.values):
                if not spec.low <= value <= spec.high:
                    raise IllegalInstructionError(
                        f"{command.op} field {name}={value} does not fit {spec.bits} bits "
                        f"({spec.low}..{spec.high})", index)
                word |= (value & ((1 << spec.bits) - 1)) << shift
                shift += spec.bits
            words[index] = word
        return words

    def decode(self, words: Iterable[int] | np.ndarray) -> list[Command]:
        """The commands of ``words``; IllegalInstructionError on an unknown opcode."""
        commands = []
        mask = (1 << self.opcode_bits) - 1
        for index, word in enumerate(int(w) for w in np.asarray(words, np.uint64)):
            fmt = self._by_opcode.get(word & mask)
            if fmt is None:
                raise IllegalInstructionError(f"unknown opcode {word & mask} in word "
                                              f"{word:#x}", index)
            values, shift = [], self.opcode_bits
            for spec in fmt.fields:
                raw = (word >> shift) & ((1 << spec.bits) - 1)
                if spec.signed and raw > spec.high:
                    raw -= 1 << spec.bits
                values.append((spec.name, raw))
                shift += spec.bits
            commands.append(Command(fmt.name, tuple(values)))
        return commands

    def table(self) -> str:
        """The instructions as a Markdown table (opcode, fields with their bits, effect),
        for the ISA reference: generated, so it cannot drift from the encoder."""
        lines = [f"| instruction | opcode (bits 0-{self.opcode_bits - 1}) | fields | effect |",
                 "|---|---|---|---|"]
        for fmt in self.formats:
            parts, shift = [], self.opcode_bits
            for spec in fmt.fields:
                sign = ", signed" if spec.signed else ""
                doc = f": {spec.doc}" if spec.doc else ""
                parts.append(f"`{spec.name}` {shift}-{shift + spec.bits - 1}{sign}{doc}")
                shift += spec.bits
            lines.append(f"| {fmt.name} | {fmt.opcode} | {'<br>'.join(parts) or '-'} | "
                         f"{fmt.effect} |")
        return "\n".join(lines)


__all__ = ["Command", "Field", "InstructionFormat", "InstructionSet"]
