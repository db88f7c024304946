"""A NumPy simulator of the dot-product array, and the device that drives it.

:func:`execute` runs a command list on the three memories bit-exactly (int16
arithmetic wraps, as in ``isa.py``) and counts cycles: one per DOT and VADD,
``ceil(count / LANES)`` per CLEAR. :class:`SimulatorDevice` implements the SDK's
``ResidentDevice`` protocol on top of it: buffers in a device memory that keeps them
across runs, staged into the on-chip memories by each run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from heterocc.sdk import (
    AcceleratorError,
    Command,
    DeviceTiming,
    IllegalInstructionError,
    InputError,
    Placement,
)

from .isa import DEPTH, ISA, LANES, MEMORY_DTYPES, MachineConfig, Memory


@dataclass
class Program:
    """What the codegen produces: the encoded commands and the buffer layout (each
    buffer's ``Placement``: its memory, offset and shape)."""

    name: str
    words: np.ndarray
    layout: dict[str, Placement]

    def listing(self) -> str:
        """The commands, one per line (for docs and debugging)."""
        return "\n".join(f"{k:5d}  {c}" for k, c in enumerate(ISA.decode(self.words)))


def fresh_memories(config: MachineConfig) -> dict[Memory, np.ndarray]:
    return {m: np.zeros(config.depth(m), MEMORY_DTYPES[m]) for m in Memory}


def _span(memories, memory: Memory, start: int, length: int, index: int,
          command: Command) -> slice:
    if start + length > len(memories[memory]):
        raise IllegalInstructionError(
            f"{command}: reads or writes {memory.value}[{start}:{start + length}], past its "
            f"{len(memories[memory])} elements", index)
    return slice(start, start + length)


def _dot(memories, command: Command, index: int) -> None:
    inp, wgt, acc, stride = (command[n] for n in ("inp", "wgt", "acc", "stride"))
    x = memories[Memory.INP][_span(memories, Memory.INP, inp, DEPTH, index, command)]
    last_row = wgt + (LANES - 1) * stride
    _span(memories, Memory.WGT, last_row, DEPTH, index, command)
    rows = np.stack([memories[Memory.WGT][wgt + j * stride: wgt + j * stride + DEPTH]
                     for j in range(LANES)])
    out = memories[Memory.ACC][_span(memories, Memory.ACC, acc, LANES, index, command)]
    products = rows.astype(np.int16) * x.astype(np.int16)
    # the adder tree and the accumulator are 16 bits wide: every sum wraps
    with np.errstate(over="ignore"):
        out += products.sum(axis=1, dtype=np.int16)


def _vadd(memories, command: Command, index: int) -> None:
    acc = memories[Memory.ACC]
    dst, lhs, rhs = (_span(memories, Memory.ACC, a, LANES, index, command)
                     for a in (command["dst"], command["lhs"], command["rhs"]))
    with np.errstate(over="ignore"):
        acc[dst] = acc[lhs] + acc[rhs]


def command_cycles(command: Command) -> int:
    """Cycles one command keeps the array busy."""
    return -(-command["count"] // LANES) if command.op == "CLEAR" else 1


def count_cycles(words: np.ndarray) -> DeviceTiming:
    """The cycles of a command list, per kind of command, without running it (what the
    target's cost model reads; :func:`execute` counts the same)."""
    busy = {fmt.name.lower(): 0 for fmt in ISA.formats}
    for command in ISA.decode(words):
        busy[command.op.lower()] += command_cycles(command)
    return DeviceTiming(sum(busy.values()), busy)


def execute(words: np.ndarray, memories: dict[Memory, np.ndarray]) -> DeviceTiming:
    """Run the encoded commands on ``memories`` (changed in place)."""
    busy = {fmt.name.lower(): 0 for fmt in ISA.formats}
    for index, command in enumerate(ISA.decode(words)):
        if command.op == "CLEAR":
            memories[Memory.ACC][_span(memories, Memory.ACC, command["acc"], command["count"],
                                       index, command)] = 0
        elif command.op == "DOT":
            _dot(memories, command, index)
        else:
            _vadd(memories, command, index)
        busy[command.op.lower()] += command_cycles(command)
    return DeviceTiming(sum(busy.values()), busy)


@dataclass
class SimulatorDevice:
    """The dot-product array simulated in NumPy (the SDK ``ResidentDevice`` protocol).

    Like a board, it has a device memory beside the on-chip memories: ``copy_in``
    writes a buffer of a loaded program there, where it stays across runs (so
    weights are written once per loaded model); ``run`` stages the program's buffers
    into the on-chip memories at the places its layout gives, and runs the commands;
    ``copy_out`` reads the on-chip memories. A run's timing counts the commands and
    the staging (``stage``, ``bus_bytes_per_cycle`` bytes per cycle);
    ``transfer_cycles`` adds up every host copy in and out.
    """

    config: MachineConfig = field(default_factory=MachineConfig)
    name: str = "dotprod-sim"
    memories: dict[Memory, np.ndarray] = field(init=False)
    transfer_cycles: int = 0
    #: per loaded program (by identity): the program and its buffers in device memory
    _loaded: dict[int, tuple[Program, dict[str, np.ndarray]]] = field(
        init=False, default_factory=dict, repr=False)

    def __post_init__(self):
        self.memories = fresh_memories(self.config)

    def load(self, program: Program) -> None:
        self._loaded.setdefault(id(program), (program, {}))

    def resident(self, program: Program, buffer: str) -> bool:
        return buffer in self._stored(program)

    def reset(self) -> None:
        self.memories = fresh_memories(self.config)
        self._loaded.clear()

    def _stored(self, program: Program) -> dict[str, np.ndarray]:
        entry = self._loaded.get(id(program))
        return {} if entry is None else entry[1]

    def _place(self, program: Program, buffer: str) -> Placement:
        try:
            place = program.layout[buffer]
        except KeyError:
            raise InputError(f"program {program.name!r} has no buffer {buffer!r}; it has "
                             f"{', '.join(program.layout)}") from None
        if place.offset + place.size > len(self.memories[place.bank]):
            raise AcceleratorError(f"buffer {buffer!r} of program {program.name!r} does not fit "
                                   f"{place.bank.value} ({len(self.memories[place.bank])} "
                                   "elements)")
        return place

    def _cycles(self, nbytes: int) -> int:
        return self.config.bus_cycles(nbytes)

    def copy_in(self, program: Program, buffer: str, array: np.ndarray) -> None:
        place = self._place(program, buffer)
        array = np.asarray(array)
        if array.shape != place.shape:
            raise InputError(f"copy into {buffer!r} of program {program.name!r}: shape "
                             f"{array.shape}, the buffer is {place.shape}")
        target_dtype = MEMORY_DTYPES[place.bank]
        converted = array.astype(target_dtype)
        if not np.array_equal(converted, array):
            raise InputError(f"copy into {buffer!r}: values do not fit "
                             f"{np.dtype(target_dtype).name} ({place.bank.value} memory)")
        self.load(program)
        self._stored(program)[buffer] = converted.reshape(-1)
        self.transfer_cycles += self._cycles(converted.nbytes)

    def run(self, program: Program) -> DeviceTiming:
        staged = 0
        for buffer, data in self._stored(program).items():
            place = program.layout[buffer]
            self.memories[place.bank][place.offset: place.offset + place.size] = data
            staged += self._cycles(data.nbytes)
        timing = execute(program.words, self.memories)
        return DeviceTiming(timing.cycles + staged, {**timing.detail, "stage": staged})

    def copy_out(self, program: Program, buffer: str) -> np.ndarray:
        place = self._place(program, buffer)
        result = self.memories[place.bank][place.offset: place.offset + place.size]
        result = result.reshape(place.shape).copy()
        self.transfer_cycles += self._cycles(result.nbytes)
        return result
