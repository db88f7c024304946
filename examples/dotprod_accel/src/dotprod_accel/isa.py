"""The dot-product array's instruction set.

The machine has three on-chip memories, addressed by element:

* ``INP``: int8 activations,
* ``WGT``: int8 weights,
* ``ACC``: int16 accumulators (also holds biases and results).

and three commands, each one 64-bit word (opcode in bits 0-3, then four 15-bit
fields ``a``, ``b``, ``c``, ``d``):

=========  =======================================  ===========================================
command    fields                                   effect
=========  =======================================  ===========================================
CLEAR      a=acc, b=count                           ``ACC[acc : acc+count] = 0``
DOT        a=inp, b=wgt, c=acc, d=wgt_stride        ``ACC[acc+j] += sum_k INP[inp+k] *
                                                    WGT[wgt + j*wgt_stride + k]``,
                                                    j < LANES, k < DEPTH
VADD       a=dst, b=lhs, c=rhs                      ``ACC[dst+j] = ACC[lhs+j] + ACC[rhs+j]``,
                                                    j < LANES
=========  =======================================  ===========================================

Products are exact (int8 x int8 fits int16 except -128 x -128 = 16384, which does
too); every sum is taken in int16 and **wraps** modulo 2**16 like the hardware's
adders. The compiler offloads only layers whose accumulators provably stay in
range (see ``patterns.py``), so the wrap-around never shows in a compiled model.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from heterocc.sdk import IllegalInstructionError

#: accumulator lanes of one DOT (output channels computed at once)
LANES = 4
#: products summed per lane by one DOT (the reduction depth)
DEPTH = 8
FIELD_BITS = 15
FIELD_LIMIT = 1 << FIELD_BITS


class Memory(enum.Enum):
    INP = "inp"
    WGT = "wgt"
    ACC = "acc"


#: element type of each memory
MEMORY_DTYPES = {Memory.INP: np.int8, Memory.WGT: np.int8, Memory.ACC: np.int16}


@dataclass(frozen=True)
class MachineConfig:
    """Sizes of the on-chip memories, in elements, and the cost model."""

    inp_depth: int = 16384
    wgt_depth: int = 32768
    acc_depth: int = 16384
    #: bytes moved per cycle between host memory and the on-chip memories
    bus_bytes_per_cycle: int = 8

    def depth(self, memory: Memory) -> int:
        return {Memory.INP: self.inp_depth, Memory.WGT: self.wgt_depth,
                Memory.ACC: self.acc_depth}[memory]


class Opcode(enum.IntEnum):
    CLEAR = 1
    DOT = 2
    VADD = 3


@dataclass(frozen=True)
class Command:
    """One command; unused fields are zero."""

    opcode: Opcode
    a: int = 0
    b: int = 0
    c: int = 0
    d: int = 0

    def __str__(self) -> str:
        names = {Opcode.CLEAR: ("acc", "count"), Opcode.DOT: ("inp", "wgt", "acc", "stride"),
                 Opcode.VADD: ("dst", "lhs", "rhs")}[self.opcode]
        fields = (self.a, self.b, self.c, self.d)
        return f"{self.opcode.name} " + " ".join(f"{n}={v}" for n, v in zip(names, fields))


def encode(commands: list[Command]) -> np.ndarray:
    """The command list as 64-bit words."""
    words = np.zeros(len(commands), np.uint64)
    for index, command in enumerate(commands):
        fields = (command.a, command.b, command.c, command.d)
        for name, value in zip("abcd", fields):
            if not 0 <= value < FIELD_LIMIT:
                raise IllegalInstructionError(
                    f"{command.opcode.name} field {name}={value} does not fit "
                    f"{FIELD_BITS} bits (0..{FIELD_LIMIT - 1})", index)
        word = int(command.opcode)
        for slot, value in enumerate(fields):
            word |= value << (4 + FIELD_BITS * slot)
        words[index] = word
    return words


def decode(words: np.ndarray) -> list[Command]:
    """The commands of 64-bit ``words``; IllegalInstructionError on an unknown opcode."""
    commands = []
    for index, word in enumerate(int(w) for w in np.asarray(words, np.uint64)):
        try:
            opcode = Opcode(word & 0xF)
        except ValueError:
            raise IllegalInstructionError(f"unknown opcode {word & 0xF} in word {word:#018x}",
                                          index) from None
        fields = [(word >> (4 + FIELD_BITS * slot)) & (FIELD_LIMIT - 1) for slot in range(4)]
        commands.append(Command(opcode, *fields))
    return commands
