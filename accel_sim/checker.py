"""The stream checker: everything about a stream that can be verified before it runs.

Per instruction (:mod:`.validation`, before anything else is looked at): field
ranges, dependency flags a module has no queue for, buffer misuse, SRAM and DRAM
ranges, micro-op ranges, the ALU's own rules and the stream's work budget. Then
the stream rules: micro-ops and lookup tables never loaded, FINISH placement, token
balance per queue and deadlock (by the timing model's token semantics). What depends on
micro-op contents (the exact tile indices of GEMM and ALU iterations) is checked
again by the simulator when it executes.

The checker's memory does not depend on any field's value: every bound is
integer arithmetic on the fields, the micro-op bookkeeping is one flag per
micro-op slot, and the deadlock check runs only on streams whose every
instruction passed, under a constant cost per instruction.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from ..errors import AcceleratorError, DeadlockError, IllegalInstructionError
from .config import HardwareConfig
from .isa import (
    LUT_WORDS,
    Alu,
    AluOp,
    Buffer,
    Finish,
    Instruction,
    Load,
    LoopInstruction,
    Queue,
    popped_queues,
    pushed_queues,
)
from .timing import schedule_with_costs
from .validation import (
    dma_sram_tiles,
    first_errors,
    iter_stream_errors,
)


def find_stream_errors(
    instructions: Sequence[Instruction],
    config: HardwareConfig,
    dram_bytes: int | None = None,
) -> list[AcceleratorError]:
    """Every problem found in a stream, in instruction order (empty when it is valid).

    ``dram_bytes`` is the size of the DRAM the stream will run against; without
    it DRAM ranges are not checked. At most ``validation.MAX_LISTED_ERRORS`` are
    listed; the last one listed notes how many more there were.
    """
    return first_errors(_stream_errors(instructions, config, dram_bytes))


def _stream_errors(
    instructions: Sequence[Instruction], config: HardwareConfig, dram_bytes: int | None
) -> Iterator[AcceleratorError]:
    uops = _UopTracker(config)
    found = 0
    for error in iter_stream_errors(instructions, config, dram_bytes, uops):
        found += 1
        yield error
    if len(instructions) > config.max_stream_instructions:
        return
    yield from _finish_errors(instructions)
    if found > uops.refused:
        # the token rules need every instruction's module and flags to be sound
        return
    yield from _token_balance_errors(instructions)
    try:
        # tokens alone decide whether a stream deadlocks: time it at one cycle each (every
        # instruction passed validation above: the timing model's own entry check, which
        # schedule_stream would run again, is skipped)
        schedule_with_costs(instructions, config, _unit_cost)
    except DeadlockError as deadlock:
        yield deadlock


def _unit_cost(instruction: Instruction, config: HardwareConfig) -> int:
    return 1


def check_stream(
    instructions: Sequence[Instruction],
    config: HardwareConfig,
    dram_bytes: int | None = None,
) -> None:
    """Raise the first problem :func:`find_stream_errors` finds (noting how many more)."""
    errors = find_stream_errors(instructions, config, dram_bytes)
    if not errors:
        return
    first = errors[0]
    if len(errors) > 1:
        first.add_note(f"{len(errors) - 1} more problem(s) in this stream")
    raise first


class _UopTracker:
    """The stream rules that loops use only micro-op slots an earlier LOAD UOP filled
    (one flag per slot), and that an ALU LUT uses a table earlier LOAD LUTs filled
    whole."""

    def __init__(self, config: HardwareConfig):
        self.loaded = np.zeros(config.uop_depth, dtype=bool)
        self.table_loaded = np.zeros(LUT_WORDS, dtype=bool)
        self.refused = 0

    def __call__(self, instruction: Instruction, index: int) -> list[IllegalInstructionError]:
        if isinstance(instruction, Load) and instruction.buffer in (Buffer.UOP, Buffer.LUT):
            flags = self.loaded if instruction.buffer == Buffer.UOP else self.table_loaded
            flags[instruction.sram_base:instruction.sram_base + dma_sram_tiles(instruction)] = True
        elif isinstance(instruction, LoopInstruction) and instruction.iterations:
            begin, end = instruction.uop_begin, instruction.uop_end
            if not self.loaded[begin:end].all():
                missing = begin + int(np.argmin(self.loaded[begin:end]))
                self.refused += 1
                return [IllegalInstructionError(
                    f"{type(instruction).__name__.upper()} uses micro-op slot {missing} that "
                    "no earlier LOAD UOP filled", index, field="uop_begin/uop_end",
                    limit=missing)]
            if isinstance(instruction, Alu) and instruction.alu_op == AluOp.LUT \
                    and not self.table_loaded.all():
                missing = int(np.argmin(self.table_loaded))
                self.refused += 1
                return [IllegalInstructionError(
                    f"ALU LUT uses lookup-table word {missing} that no earlier LOAD LUT "
                    f"filled; load all {LUT_WORDS} words of the table first", index,
                    field="alu_op", limit=missing)]
        return []


def _finish_errors(instructions: Sequence[Instruction]) -> list[AcceleratorError]:
    finishes = [i for i, instruction in enumerate(instructions) if isinstance(instruction, Finish)]
    if not finishes:
        return [
            IllegalInstructionError(
                "the stream has no FINISH; append one so the host's wait can return",
                len(instructions), field="opcode",
            )
        ]
    if finishes[0] != len(instructions) - 1:
        return [
            IllegalInstructionError(
                f"FINISH must be the last instruction, but {len(instructions) - 1 - finishes[0]} "
                "instruction(s) follow it",
                finishes[0], field="opcode", limit=len(instructions) - 1,
            )
        ]
    return []


def _token_balance_errors(instructions: Sequence[Instruction]) -> list[AcceleratorError]:
    pushes: dict[Queue, list[int]] = {queue: [] for queue in Queue}
    pops: dict[Queue, list[int]] = {queue: [] for queue in Queue}
    for index, instruction in enumerate(instructions):
        for queue in pushed_queues(instruction):
            pushes[queue].append(index)
        for queue in popped_queues(instruction):
            pops[queue].append(index)
    errors: list[AcceleratorError] = []
    for queue in Queue:
        pushed, popped = len(pushes[queue]), len(pops[queue])
        if pushed > popped:
            errors.append(
                IllegalInstructionError(
                    f"its token on {queue.name} is never popped ({pushed} pushed, {popped} "
                    "popped); a stream must leave every queue empty",
                    pushes[queue][popped], field=f"push ({queue.name})", limit=popped,
                )
            )
        elif popped > pushed:
            errors.append(
                IllegalInstructionError(
                    f"pops {queue.name} but no instruction pushes a token for it ({pushed} "
                    f"pushed, {popped} popped)",
                    pops[queue][pushed], field=f"pop ({queue.name})", limit=pushed,
                )
            )
    return errors
