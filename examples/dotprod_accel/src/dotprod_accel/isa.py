"""The dot-product array's instruction set.

The machine has three on-chip memories, addressed by element:

* ``INP``: int8 activations,
* ``WGT``: int8 weights,
* ``ACC``: int16 accumulators (also holds biases and results).

and three commands, CLEAR, DOT and VADD, each one 64-bit word: the opcode in bits 0-3,
then the command's 15-bit fields. ``ISA`` declares them once with the SDK's
``InstructionSet``, which encodes, decodes and writes the table of the ISA reference
(``ISA.table()``, shown in docs/add-a-target.md).

Products are exact (int8 x int8 fits int16 except -128 x -128 = 16384, which does
too); every sum is taken in int16 and **wraps** modulo 2**16 like the hardware's
adders. The compiler offloads only layers whose accumulators provably stay in
range (see ``patterns.py``), so the wrap-around never shows in a compiled model.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from heterocc.sdk import Bank, Field, InstructionFormat, InstructionSet

#: accumulator lanes of one DOT (output channels computed at once)
LANES = 4
#: products summed per lane by one DOT (the reduction depth)
DEPTH = 8
FIELD_BITS = 15
FIELD_LIMIT = 1 << FIELD_BITS


def _fields(*names: str) -> tuple[Field, ...]:
    return tuple(Field(name, FIELD_BITS) for name in names)


ISA = InstructionSet("dotprod", opcode_bits=4, word_bits=64, formats=[
    InstructionFormat("CLEAR", 1, _fields("acc", "count"), "``ACC[acc : acc+count] = 0``"),
    InstructionFormat("DOT", 2, _fields("inp", "wgt", "acc", "stride"),
                      "``ACC[acc+j] += sum_k INP[inp+k] * WGT[wgt + j*stride + k]``, "
                      "j < LANES, k < DEPTH"),
    InstructionFormat("VADD", 3, _fields("dst", "lhs", "rhs"),
                      "``ACC[dst+j] = ACC[lhs+j] + ACC[rhs+j]``, j < LANES"),
])


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
    #: the clock and the host link, for time estimates (placement by cost)
    clock_mhz: float = 200.0
    link_gbps: float = 1.0
    link_latency_us: float = 2.0

    def bus_cycles(self, nbytes: int) -> int:
        """Cycles to stage ``nbytes`` into the on-chip memories."""
        return -(-nbytes // self.bus_bytes_per_cycle)

    def depth(self, memory: Memory) -> int:
        return {Memory.INP: self.inp_depth, Memory.WGT: self.wgt_depth,
                Memory.ACC: self.acc_depth}[memory]

    def banks(self) -> list[Bank]:
        """The memories, for the SDK's placer."""
        return [Bank(memory, self.depth(memory)) for memory in Memory]
