"""The stream checker: everything about a stream that can be verified before it runs.

It flags field ranges, dependency flags a module has no queue for, buffer
misuse, SRAM and DRAM ranges, micro-op ranges (and micro-ops never loaded),
FINISH placement, token balance per queue and deadlock (by the timing model's
token semantics). What depends on micro-op contents (the exact tile indices of
GEMM and ALU iterations) is checked again by the simulator when it executes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import AcceleratorError, DeadlockError, IllegalInstructionError
from .config import HardwareConfig
from .encoding import encode_instruction
from .functional import dma_dram_span, dma_sram_tiles
from .isa import (
    OPCODE_OF,
    Alu,
    Buffer,
    DmaInstruction,
    Finish,
    Gemm,
    Instruction,
    Load,
    LoopInstruction,
    Queue,
    Store,
    buffer_depth,
    illegal_flags,
    module_of,
    popped_queues,
    pushed_queues,
)
from .timing import schedule_stream


def find_stream_errors(
    instructions: Sequence[Instruction],
    config: HardwareConfig,
    dram_bytes: int | None = None,
) -> list[AcceleratorError]:
    """Every problem found in a stream, in instruction order (empty when it is valid).

    ``dram_bytes`` is the size of the DRAM the stream will run against; without
    it DRAM ranges are not checked.
    """
    errors: list[AcceleratorError] = []
    uop_loaded = np.zeros(config.uop_depth, dtype=bool)
    for index, instruction in enumerate(instructions):
        if type(instruction) not in OPCODE_OF:
            errors.append(
                IllegalInstructionError(f"{instruction!r} is not an ISA instruction", index)
            )
            continue
        errors.extend(_instruction_errors(instruction, index, config, dram_bytes, uop_loaded))
    errors.extend(_finish_errors(instructions))
    if any(type(i) not in OPCODE_OF for i in instructions):
        return errors
    errors.extend(_token_balance_errors(instructions))
    try:
        schedule_stream(instructions, config)
    except DeadlockError as deadlock:
        errors.append(deadlock)
    return errors


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


def _instruction_errors(
    instruction: Instruction,
    index: int,
    config: HardwareConfig,
    dram_bytes: int | None,
    uop_loaded: np.ndarray,
) -> list[AcceleratorError]:
    errors: list[AcceleratorError] = []
    try:
        encode_instruction(instruction, config, index)
    except IllegalInstructionError as error:
        return [error]
    name = OPCODE_OF[type(instruction)].name
    module = module_of(instruction)
    for flag in illegal_flags(instruction):
        errors.append(
            IllegalInstructionError(
                f"{name} runs on the {module.name.lower()} module, which has no queue for "
                f"{flag}; the load module may only pop/push next, the store module only "
                "prev",
                index,
            )
        )
    if isinstance(instruction, DmaInstruction):
        errors.extend(_dma_errors(instruction, index, config, dram_bytes))
        if isinstance(instruction, Load) and instruction.buffer == Buffer.UOP:
            end = min(instruction.sram_base + dma_sram_tiles(instruction), config.uop_depth)
            uop_loaded[instruction.sram_base : end] = True
    elif isinstance(instruction, LoopInstruction):
        errors.extend(_loop_errors(instruction, index, config, uop_loaded))
    return errors


def _dma_errors(
    instruction: DmaInstruction, index: int, config: HardwareConfig, dram_bytes: int | None
) -> list[AcceleratorError]:
    name = "LOAD" if isinstance(instruction, Load) else "STORE"
    allowed = (
        {Buffer.UOP, Buffer.INP, Buffer.WGT, Buffer.ACC}
        if isinstance(instruction, Load)
        else {Buffer.OUT, Buffer.ACC}
    )
    if instruction.buffer not in allowed:
        return [
            IllegalInstructionError(
                f"{name} cannot use buffer {instruction.buffer.name}; allowed: "
                + ", ".join(sorted(b.name for b in allowed)),
                index,
            )
        ]
    errors: list[AcceleratorError] = []
    if isinstance(instruction, Store):
        pads = (
            instruction.y_pad_top, instruction.y_pad_bottom,
            instruction.x_pad_left, instruction.x_pad_right,
        )
        if any(pads) or instruction.pad_value:
            errors.append(
                IllegalInstructionError(
                    "STORE does not pad; set its four pad fields and pad_value to 0", index)
            )
        if instruction.y_size > 1 and instruction.x_stride < instruction.x_size:
            errors.append(
                IllegalInstructionError(
                    f"STORE rows overlap in DRAM (x_stride {instruction.x_stride} < x_size "
                    f"{instruction.x_size})",
                    index,
                )
            )
    if isinstance(instruction, Load) and instruction.pad_value and \
            instruction.buffer != Buffer.INP:
        errors.append(
            IllegalInstructionError(
                f"LOAD {instruction.buffer.name} pads with 0; only an INP load takes a "
                f"pad_value (got {instruction.pad_value})",
                index,
            )
        )
    depth = buffer_depth(config, instruction.buffer)
    sram_end = instruction.sram_base + dma_sram_tiles(instruction)
    if sram_end > depth:
        errors.append(
            IllegalInstructionError(
                f"{name} {instruction.buffer.name} covers SRAM entries "
                f"[{instruction.sram_base}, {sram_end}) beyond the buffer's depth {depth}",
                index,
            )
        )
    first, end = dma_dram_span(instruction, config)
    if dram_bytes is not None and end > dram_bytes:
        errors.append(
            IllegalInstructionError(
                f"{name} {instruction.buffer.name} touches DRAM bytes [{first}, {end}) beyond "
                f"the {dram_bytes}-byte DRAM",
                index,
            )
        )
    return errors


def _loop_errors(
    instruction: LoopInstruction, index: int, config: HardwareConfig, uop_loaded: np.ndarray
) -> list[AcceleratorError]:
    name = OPCODE_OF[type(instruction)].name
    begin, end = instruction.uop_begin, instruction.uop_end
    if not begin <= end <= config.uop_depth:
        return [
            IllegalInstructionError(
                f"{name} micro-op range [{begin}, {end}) is not inside the micro-op buffer "
                f"[0, {config.uop_depth})",
                index,
            )
        ]
    errors: list[AcceleratorError] = []
    if isinstance(instruction, Alu) and instruction.src_inp:
        if instruction.use_imm:
            errors.append(IllegalInstructionError(
                "ALU sets both use_imm and src_inp; its operand is either the immediate "
                "or an input tile", index))
        elif config.block_in != config.block_out:
            errors.append(IllegalInstructionError(
                f"ALU with src_inp needs input tiles shaped like accumulator tiles, but "
                f"{config.name} has block_in={config.block_in} != "
                f"block_out={config.block_out}", index))
    if instruction.iterations and not uop_loaded[begin:end].all():
        missing = begin + int(np.argmin(uop_loaded[begin:end]))
        errors.append(
            IllegalInstructionError(
                f"{name} uses micro-op slot {missing} that no earlier LOAD UOP filled",
                index,
            )
        )
    for what, factors, depth in _factor_bounds(instruction, config):
        reach = (
            (instruction.loop_outer - 1) * factors[0] + (instruction.loop_inner - 1) * factors[1]
            if instruction.iterations
            else 0
        )
        if reach >= depth:
            errors.append(
                IllegalInstructionError(
                    f"{name} loop factors {factors} over {instruction.loop_outer}x"
                    f"{instruction.loop_inner} iterations reach {what} index {reach}, beyond "
                    f"the buffer's depth {depth}",
                    index,
                )
            )
    return errors


def _factor_bounds(
    instruction: LoopInstruction, config: HardwareConfig
) -> list[tuple[str, tuple[int, int], int]]:
    if isinstance(instruction, Gemm):
        return [
            ("accumulator", (instruction.acc_factor_outer, instruction.acc_factor_inner),
             config.acc_depth),
            ("input", (instruction.inp_factor_outer, instruction.inp_factor_inner),
             config.inp_depth),
            ("weight", (instruction.wgt_factor_outer, instruction.wgt_factor_inner),
             config.wgt_depth),
        ]
    if not isinstance(instruction, Alu):
        return []
    bounds = [
        ("accumulator", (instruction.dst_factor_outer, instruction.dst_factor_inner),
         config.acc_depth)
    ]
    if not instruction.use_imm:
        bounds.append(
            ("input source", (instruction.src_factor_outer, instruction.src_factor_inner),
             config.inp_depth) if instruction.src_inp else
            ("accumulator source",
             (instruction.src_factor_outer, instruction.src_factor_inner), config.acc_depth)
        )
    return bounds


def _finish_errors(instructions: Sequence[Instruction]) -> list[AcceleratorError]:
    finishes = [i for i, instruction in enumerate(instructions) if isinstance(instruction, Finish)]
    if not finishes:
        return [
            IllegalInstructionError(
                "the stream has no FINISH; append one so the host's wait can return",
                len(instructions),
            )
        ]
    if finishes[0] != len(instructions) - 1:
        return [
            IllegalInstructionError(
                f"FINISH must be the last instruction, but {len(instructions) - 1 - finishes[0]} "
                "instruction(s) follow it",
                finishes[0],
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
                    pushes[queue][popped],
                )
            )
        elif popped > pushed:
            errors.append(
                IllegalInstructionError(
                    f"pops {queue.name} but no instruction pushes a token for it ({pushed} "
                    f"pushed, {popped} popped)",
                    pops[queue][pushed],
                )
            )
    return errors
