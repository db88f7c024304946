"""The timing model: three in-order modules running concurrently, gated by tokens.

Every instruction has a fixed cost (see :func:`instruction_cost` and docs/isa.md).
An instruction of a module issues at the earliest cycle when (1) the module's
previous instruction has completed, (2) every queue it pops holds a token (a
token is available from the cycle its producer completed), and (3) every queue
it pushes has a free slot (a slot frees at the cycle its consumer issued). It
pops when it issues and pushes when it completes. Because each queue has exactly
one producer and one consumer, the schedule does not depend on the order in
which this model visits modules, and a stream that cannot finish here deadlocks
on any implementation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import DeadlockError, IllegalInstructionError
from .config import HardwareConfig
from .isa import (
    OPCODE_OF,
    Alu,
    DmaInstruction,
    Finish,
    Gemm,
    Instruction,
    Load,
    Module,
    Queue,
    dram_unit_bytes,
    module_of,
    popped_queues,
    pushed_queues,
)


def transfer_bytes(instruction: DmaInstruction, config: HardwareConfig) -> int:
    """Bytes a DMA moves: padded tiles written to SRAM (LOAD) or tiles written to DRAM."""
    tiles = instruction.y_size * instruction.x_size
    if isinstance(instruction, Load):
        tiles = instruction.padded_rows * instruction.padded_cols
    return tiles * dram_unit_bytes(config, instruction.buffer)


def instruction_cost(instruction: Instruction, config: HardwareConfig) -> int:
    """Cycles an instruction occupies its module once issued.

    DMA: overhead + DRAM latency (when it touches DRAM) + ceil(bytes / bytes per
    cycle). GEMM and ALU: overhead + iterations x cycles per iteration. FINISH:
    overhead.
    """
    overhead = config.instruction_overhead_cycles
    if isinstance(instruction, DmaInstruction):
        touches_dram = instruction.y_size * instruction.x_size > 0
        return (
            overhead
            + (config.dram_latency_cycles if touches_dram else 0)
            + math.ceil(transfer_bytes(instruction, config) / config.dram_bytes_per_cycle)
        )
    if isinstance(instruction, Gemm):
        return overhead + instruction.iterations * config.gemm_cycles_per_iteration
    if isinstance(instruction, Alu):
        return overhead + instruction.iterations * config.alu_cycles_per_iteration
    if isinstance(instruction, Finish):
        return overhead
    raise IllegalInstructionError(f"{type(instruction).__name__} is not an ISA instruction")


def gemm_active_cycles(instruction: Instruction, config: HardwareConfig) -> int:
    """Cycles in which the GEMM core multiplies (non-reset GEMM iterations)."""
    if isinstance(instruction, Gemm) and not instruction.reset:
        return instruction.iterations * config.gemm_cycles_per_iteration
    return 0


@dataclass(frozen=True)
class ScheduledInstruction:
    """When one instruction ran: it issued at ``start`` and completed at ``end``."""

    index: int
    module: Module
    start: int
    end: int


@dataclass(frozen=True)
class ModuleTiming:
    """One module's totals: busy executing, stalled on tokens, instruction count."""

    instructions: int
    busy_cycles: int
    stall_cycles: int


@dataclass(frozen=True)
class TimingReport:
    """Cycle counts of one stream."""

    total_cycles: int
    modules: dict[Module, ModuleTiming]
    gemm_active_cycles: int
    schedule: tuple[ScheduledInstruction, ...]

    @property
    def gemm_utilization(self) -> float:
        """Fraction of all cycles in which the GEMM core performs multiply-accumulates."""
        return self.gemm_active_cycles / self.total_cycles if self.total_cycles else 0.0

    def execution_order(self) -> list[int]:
        """Instruction indices by issue cycle.

        ``schedule`` lists instructions in the order the model issued them, which
        puts every token's producer before its consumer; the stable sort keeps
        that order among instructions issued in the same cycle (a zero-cost
        producer and its consumer, for instance).
        """
        ordered = sorted(self.schedule, key=lambda entry: entry.start)
        return [entry.index for entry in ordered]

    def summary(self) -> str:
        """A short human-readable report."""
        lines = [
            f"total cycles: {self.total_cycles}",
            f"GEMM-core utilization: {self.gemm_utilization:.1%}",
        ]
        for module, timing in self.modules.items():
            lines.append(
                f"{module.name.lower():>8}: {timing.instructions} instructions, "
                f"busy {timing.busy_cycles}, stalled {timing.stall_cycles} cycles"
            )
        return "\n".join(lines)


CostFunction = Callable[[Instruction, HardwareConfig], int]


def schedule_stream(
    instructions: Sequence[Instruction],
    config: HardwareConfig,
    cost: CostFunction = instruction_cost,
) -> TimingReport:
    """Run the timing model; a stream that cannot complete raises DeadlockError."""
    programs = {module: [] for module in Module}
    for index, instruction in enumerate(instructions):
        programs[module_of(instruction)].append(index)
    next_position = dict.fromkeys(Module, 0)
    free_at = dict.fromkeys(Module, 0)
    push_cycles: dict[Queue, list[int]] = {queue: [] for queue in Queue}
    pop_cycles: dict[Queue, list[int]] = {queue: [] for queue in Queue}
    timings = {module: [0, 0, 0] for module in Module}  # instructions, busy, stall
    scheduled: list[ScheduledInstruction] = []
    depth = config.token_queue_depth

    def issue_cycle(module: Module, instruction: Instruction) -> int | None:
        cycle = free_at[module]
        for queue in popped_queues(instruction):
            taken = len(pop_cycles[queue])
            if taken >= len(push_cycles[queue]):
                return None
            cycle = max(cycle, push_cycles[queue][taken])
        for queue in pushed_queues(instruction):
            needs_pop = len(push_cycles[queue]) - depth
            if needs_pop >= 0:
                if needs_pop >= len(pop_cycles[queue]):
                    return None
                cycle = max(cycle, pop_cycles[queue][needs_pop])
        return cycle

    progress = True
    while progress:
        progress = False
        for module in Module:
            program = programs[module]
            while next_position[module] < len(program):
                index = program[next_position[module]]
                instruction = instructions[index]
                start = issue_cycle(module, instruction)
                if start is None:
                    break
                end = start + cost(instruction, config)
                for queue in popped_queues(instruction):
                    pop_cycles[queue].append(start)
                for queue in pushed_queues(instruction):
                    push_cycles[queue].append(end)
                counts = timings[module]
                counts[0] += 1
                counts[1] += end - start
                counts[2] += start - free_at[module]
                free_at[module] = end
                scheduled.append(ScheduledInstruction(index, module, start, end))
                next_position[module] += 1
                progress = True

    blocked = {
        module: programs[module][next_position[module]]
        for module in Module
        if next_position[module] < len(programs[module])
    }
    if blocked:
        raise DeadlockError(
            _deadlock_message(instructions, blocked, push_cycles, pop_cycles, depth)
        )
    return TimingReport(
        total_cycles=max(free_at.values()),
        modules={module: ModuleTiming(*timings[module]) for module in Module},
        gemm_active_cycles=sum(gemm_active_cycles(i, config) for i in instructions),
        schedule=tuple(scheduled),
    )


def _deadlock_message(
    instructions: Sequence[Instruction],
    blocked: dict[Module, int],
    push_cycles: dict[Queue, list[int]],
    pop_cycles: dict[Queue, list[int]],
    depth: int,
) -> str:
    occupancy = {queue: len(push_cycles[queue]) - len(pop_cycles[queue]) for queue in Queue}
    lines = ["the stream deadlocks: no module can issue its next instruction"]
    for module, index in blocked.items():
        instruction = instructions[index]
        reasons = [
            f"a token on {queue.name} (empty)"
            for queue in popped_queues(instruction)
            if occupancy[queue] <= 0
        ] + [
            f"a free slot on {queue.name} (full at depth {depth})"
            for queue in pushed_queues(instruction)
            if occupancy[queue] >= depth
        ]
        lines.append(
            f"  {module.name.lower()} module: instruction {index} "
            f"({OPCODE_OF[type(instruction)].name}) waits for {' and '.join(reasons)}"
        )
    lines.append(
        "  queue depths: " + ", ".join(f"{q.name}={occupancy[q]}" for q in Queue)
    )
    lines.append("fix the pop/push flags so that every pop has an earlier matching push")
    return "\n".join(lines)

