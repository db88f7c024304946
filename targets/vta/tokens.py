"""The dependency-token pass: DAE tokens between the load, compute and store queues.

Each instruction declares the on-chip tile ranges it reads and writes. An
instruction that reads what a neighbouring module wrote (data ready), or
overwrites what it read (buffer free again), must wait for that module's
instruction: the producer pushes a token toward the consumer, which pops it. A
token also orders everything after the consumer in its module, so a pop is only
added when the dependency is newer than the last one already waited for. Every
dependency points backwards in program order, so the stream cannot deadlock
(the stream checker verifies it anyway).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from heterocc.accel_sim import HardwareConfig
from heterocc.accel_sim.isa import Buffer, Instruction, Module, buffer_depth, module_of

_NEIGHBOURS = {Module.LOAD: (Module.COMPUTE,), Module.COMPUTE: (Module.LOAD, Module.STORE),
               Module.STORE: (Module.COMPUTE,)}


@dataclass(frozen=True)
class TileRange:
    """Tiles ``[begin, end)`` of one on-chip buffer."""

    buffer: Buffer
    begin: int
    end: int


@dataclass
class Step:
    """An instruction (without tokens) and the on-chip tiles it reads and writes."""

    instruction: Instruction
    reads: list[TileRange] = field(default_factory=list)
    writes: list[TileRange] = field(default_factory=list)


def _flags(producer: Module, consumer: Module) -> tuple[str, str]:
    """(push flag of the producer, pop flag of the consumer) of the queue between them."""
    return ("push_next", "pop_prev") if producer < consumer else ("push_prev", "pop_next")


def insert_dependency_tokens(steps: list[Step], config: HardwareConfig) -> list[Instruction]:
    """The instructions of ``steps`` with the push/pop flags their dependencies need."""
    # last_read[module][buffer][tile]: the index of the module's last step that read the
    # tile (-1: none); a table is made when its module first touches that buffer (a
    # missing one reads as all -1: most modules touch one or two of the buffers, and a
    # stream has a step per instruction)
    last_read: dict[Module, dict[Buffer, np.ndarray]] = {m: {} for m in Module}
    last_write: dict[Module, dict[Buffer, np.ndarray]] = {m: {} for m in Module}

    def latest(tables: dict[Buffer, np.ndarray], r: TileRange) -> int:
        table = tables.get(r.buffer)
        return -1 if table is None or r.end <= r.begin else int(table[r.begin:r.end].max())

    def record(tables: dict[Buffer, np.ndarray], r: TileRange, index: int) -> None:
        table = tables.get(r.buffer)
        if table is None:
            table = tables[r.buffer] = np.full(buffer_depth(config, r.buffer), -1)
        table[r.begin:r.end] = index

    waited = {(y, x): -1 for x in Module for y in _NEIGHBOURS[x]}
    flags: list[dict[str, bool]] = [{} for _ in steps]
    for index, step in enumerate(steps):
        module = module_of(step.instruction)
        for other in _NEIGHBOURS[module]:
            need = -1
            written, read = last_write[other], last_read[other]
            if written:
                for r in step.reads:
                    need = max(need, latest(written, r))
            if written or read:
                for w in step.writes:
                    need = max(need, latest(read, w), latest(written, w))
            if need > waited[(other, module)]:
                push, pop = _flags(other, module)
                flags[need][push] = True
                flags[index][pop] = True
                waited[(other, module)] = need
        for r in step.reads:
            record(last_read[module], r, index)
        for w in step.writes:
            record(last_write[module], w, index)
    return [dataclasses.replace(step.instruction, **f) if f else step.instruction
            for step, f in zip(steps, flags)]
