"""From a dense composite to a command list.

:func:`lower_dense` writes the composite as TE (an int16-accumulating matmul over
padded operands, then the bias add) and schedules it so that the inner loops are
exactly the array's instructions (``tensorize``). :func:`generate` walks the
lowered TIR with every loop bound, places each buffer in the memory its
instructions need, and emits the commands.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from heterocc.sdk import (
    Binding,
    CompileError,
    CompositeParts,
    Lowering,
    Result,
    evaluate_index,
    leaf_statements,
    te,
    tir,
)

from .intrinsics import DOT_CALL, VADD_CALL, dot_intrinsic, vadd_intrinsic, widen
from .isa import DEPTH, FIELD_LIMIT, LANES, Command, MachineConfig, Memory, Opcode, encode
from .simulator import Placement, Program

#: the memory each operand of a call reads or writes (None: an immediate)
OPERAND_MEMORIES: dict[str, tuple[Memory | None, ...]] = {
    DOT_CALL: (Memory.INP, Memory.WGT, Memory.ACC, None),
    VADD_CALL: (Memory.ACC, Memory.ACC, Memory.ACC),
}
CALL_OPCODES = {DOT_CALL: Opcode.DOT, VADD_CALL: Opcode.VADD}


def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def dense_operands(parts: CompositeParts) -> tuple[np.ndarray, np.ndarray | None]:
    """The composite's weights (K x N) and its per-channel bias (N,) or None."""
    matmul = parts.require("MatMulInteger")
    weights = parts.constant(matmul, 1)
    add = parts.node("Add")
    if add is None:
        return weights, None
    bias = parts.constant(add, 1)
    channels = weights.shape[1]
    return weights, np.broadcast_to(bias.reshape(-1), (channels,))


def _pad_to(array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return np.pad(array, [(0, want - have) for have, want in zip(array.shape, shape)])


def lower_dense(parts: CompositeParts) -> Lowering:
    """MatMulInteger (+ bias Add) as TE, tensorized for the array."""
    weights, bias = dense_operands(parts)
    matmul = parts.require("MatMulInteger")
    rows, depth = matmul.inputs[0].type.shape
    channels = weights.shape[1]
    padded_depth, padded_channels = round_up(depth, DEPTH), round_up(channels, LANES)

    inp = te.placeholder((rows, padded_depth), "int8", "inp")
    wgt = te.placeholder((padded_channels, padded_depth), "int8", "wgt")
    r = te.reduce_axis(padded_depth, "r")
    acc = te.compute((rows, padded_channels),
                     lambda i, j: te.sum(widen(inp[i, r]) * widen(wgt[j, r]), axis=r),
                     name="acc")
    inputs = [Binding(inp, argument=parts.argument_index(matmul.inputs[0]),
                      to_device=lambda x: _pad_to(x, (rows, padded_depth))),
              Binding(wgt, constant=_pad_to(weights.T, (padded_channels, padded_depth)))]
    out = acc
    if bias is not None:
        bias_tensor = te.placeholder((padded_channels,), "int16", "bias")
        out = te.compute((rows, padded_channels), lambda i, j: acc[i, j] + bias_tensor[j],
                         name="out")
        # the pattern check proved |bias| + |sum| < 2**15, so int16 holds the bias exactly
        inputs.append(Binding(bias_tensor, constant=_pad_to(bias.astype(np.int16),
                                                            (padded_channels,))))

    schedule = te.create_schedule(out)
    i, j = acc.op.axis
    j_outer, j_inner = schedule[acc].split(j, factor=LANES)
    r_outer, r_inner = schedule[acc].split(r, factor=DEPTH)
    schedule[acc].reorder(i, j_outer, r_outer, j_inner, r_inner)
    schedule[acc].tensorize(j_inner, dot_intrinsic())
    if out is not acc:
        _, lane = schedule[out].split(out.op.axis[1], factor=LANES)
        schedule[out].tensorize(lane, vadd_intrinsic())

    def from_device(result: np.ndarray) -> np.ndarray:
        return result[:, :channels].astype(np.int32)

    return Lowering(schedule, inputs, [Result(out, from_device)])


@dataclass(frozen=True)
class _Operand:
    buffer: tir.Buffer
    index: int


def _flat_index(buffer: tir.Buffer, indices: list[int]) -> int:
    flat = 0
    for index, extent in zip(indices, buffer.shape[-len(indices):]):
        flat = flat * extent + index
    return flat


def _operand(arg: tir.Expr, env: dict) -> _Operand | int:
    """A call argument: an element of a buffer (the start of a region) or an immediate."""
    if isinstance(arg, tir.BufferLoad):
        return _Operand(arg.buffer, _flat_index(arg.buffer, [evaluate_index(i, env)
                                                             for i in arg.indices]))
    return evaluate_index(arg, env)


def _collect(func: tir.PrimFunc):
    """(opcode, operands) per instruction, the memory every buffer must live in, and
    the buffers in placement order (parameters, then allocations)."""
    buffers: dict[str, tir.Buffer] = {b.name: b for b in func.params}
    memory_of: dict[str, Memory] = {}
    instructions: list[tuple[Opcode, list]] = []

    def require(buffer: tir.Buffer, memory: Memory, what: str) -> None:
        if memory_of.setdefault(buffer.name, memory) is not memory:
            raise CompileError(f"{func.name}: buffer {buffer.name!r} is used in "
                               f"{memory_of[buffer.name].value} and, by {what}, in "
                               f"{memory.value}; the array cannot move data between them")

    for stmt, env in leaf_statements(func):
        if isinstance(stmt, tir.Allocate):
            buffers[stmt.buffer.name] = stmt.buffer
        elif isinstance(stmt, tir.BufferStore):
            value = tir.simplify(stmt.value)
            if not (isinstance(value, tir.IntImm) and value.value == 0):
                raise CompileError(f"{func.name}: store of {tir.expr_to_str(stmt.value)} into "
                                   f"{stmt.buffer.name!r}: the array only clears accumulators; "
                                   "tensorize every computation with its intrinsics")
            require(stmt.buffer, Memory.ACC, "CLEAR")
            cleared = _operand(tir.BufferLoad(stmt.buffer, stmt.indices), env)
            instructions.append((Opcode.CLEAR, [cleared, 1]))
        elif isinstance(stmt, tir.Evaluate) and isinstance(stmt.value, tir.Call) \
                and stmt.value.name in OPERAND_MEMORIES:
            call = stmt.value
            operands = [_operand(a, env) for a in call.args]
            for operand, memory in zip(operands, OPERAND_MEMORIES[call.name]):
                if memory is not None:
                    require(operand.buffer, memory, call.name)
            instructions.append((CALL_OPCODES[call.name], operands))
        else:
            raise CompileError(f"{func.name}: the dot-product array has no instruction for "
                               f"{tir.stmt_to_str(stmt).strip()!r}")
    return instructions, memory_of, buffers


def _place(func_name: str, buffers: dict[str, tir.Buffer], memory_of: dict[str, Memory],
           config: MachineConfig) -> dict[str, Placement]:
    layout: dict[str, Placement] = {}
    next_free = dict.fromkeys(Memory, 0)
    for name, buffer in buffers.items():
        if name not in memory_of:
            raise CompileError(f"{func_name}: no instruction touches buffer {name!r}")
        memory = memory_of[name]
        place = Placement(memory, next_free[memory], tuple(buffer.shape))
        next_free[memory] += place.size
        if next_free[memory] > config.depth(memory):
            raise CompileError(f"{func_name}: buffers of {memory.value} need "
                               f"{next_free[memory]} elements, it holds "
                               f"{config.depth(memory)}; use smaller layers")
        layout[name] = place
    return layout


def _merge_clears(commands: list[Command]) -> list[Command]:
    """Adjacent CLEARs of consecutive addresses become one (the init loops)."""
    merged: list[Command] = []
    for command in commands:
        last = merged[-1] if merged else None
        if (command.opcode is Opcode.CLEAR and last is not None
                and last.opcode is Opcode.CLEAR and last.a + last.b == command.a
                and last.b + command.b < FIELD_LIMIT):
            merged[-1] = Command(Opcode.CLEAR, last.a, last.b + command.b)
        else:
            merged.append(command)
    return merged


def generate(func: tir.PrimFunc, config: MachineConfig) -> Program:
    """The program of a lowered, tensorized function."""
    instructions, memory_of, buffers = _collect(func)
    layout = _place(func.name, buffers, memory_of, config)

    def field(operand: _Operand | int) -> int:
        if isinstance(operand, _Operand):
            return layout[operand.buffer.name].offset + operand.index
        return operand

    commands = [Command(opcode, *(field(o) for o in operands))
                for opcode, operands in instructions]
    return Program(func.name, encode(_merge_clears(commands)), layout)
