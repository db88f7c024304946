"""From a dense composite to a command list.

:func:`lower_dense` writes the composite as TE (an int16-accumulating matmul over
padded operands, then the bias add) and schedules it so that the inner loops are
exactly the array's instructions (``tensorize``). :func:`generate` walks the
lowered TIR with every loop bound, places each buffer in the memory its
instructions need (the SDK's ``MemoryPlacer``, seeded with the memories the lowering
chose, passed on as its metadata), and emits the commands.
"""

from __future__ import annotations

import numpy as np

from heterocc.sdk import (
    Binding,
    Command,
    CompileError,
    CompositeParts,
    Lowering,
    MemoryPlacer,
    Result,
    coalesce,
    element_address,
    evaluate_index,
    leaf_statements,
    lowering_metadata,
    te,
    tir,
)

from .intrinsics import DOT_CALL, VADD_CALL, dot_intrinsic, vadd_intrinsic, widen
from .isa import DEPTH, FIELD_LIMIT, ISA, LANES, MachineConfig, Memory
from .simulator import Program

#: per call: its instruction, and the field and memory of each operand (None: immediate)
CALLS: dict[str, tuple[str, tuple[tuple[str, Memory | None], ...]]] = {
    DOT_CALL: ("DOT", (("inp", Memory.INP), ("wgt", Memory.WGT), ("acc", Memory.ACC),
                       ("stride", None))),
    VADD_CALL: ("VADD", (("dst", Memory.ACC), ("lhs", Memory.ACC), ("rhs", Memory.ACC))),
}


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
    banks = {"inp": Memory.INP, "wgt": Memory.WGT, "acc": Memory.ACC}
    out = acc
    if bias is not None:
        bias_tensor = te.placeholder((padded_channels,), "int16", "bias")
        out = te.compute((rows, padded_channels), lambda i, j: acc[i, j] + bias_tensor[j],
                         name="out")
        # the pattern check proved |bias| + |sum| < 2**15, so int16 holds the bias exactly
        inputs.append(Binding(bias_tensor, constant=_pad_to(bias.astype(np.int16),
                                                            (padded_channels,))))
        banks.update(bias=Memory.ACC, out=Memory.ACC)

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

    return Lowering(schedule, inputs, [Result(out, from_device)], metadata={"banks": banks})


def _collect(func: tir.PrimFunc, placer: MemoryPlacer):
    """(instruction, operands by field) per command, each operand a (buffer, offset) or
    an immediate; the buffers in placement order (parameters, then allocations)."""
    buffers: dict[str, tir.Buffer] = {b.name: b for b in func.params}
    instructions: list[tuple[str, dict]] = []
    for stmt, env in leaf_statements(func):
        if isinstance(stmt, tir.Allocate):
            buffers[stmt.buffer.name] = stmt.buffer
        elif isinstance(stmt, tir.BufferStore):
            value = tir.simplify(stmt.value)
            if not (isinstance(value, tir.IntImm) and value.value == 0):
                raise CompileError(f"{func.name}: store of {tir.expr_to_str(stmt.value)} into "
                                   f"{stmt.buffer.name!r}: the array only clears accumulators; "
                                   "tensorize every computation with its intrinsics")
            placer.assign(stmt.buffer.name, Memory.ACC, "CLEAR")
            cleared = element_address(tir.BufferLoad(stmt.buffer, stmt.indices), env)
            instructions.append(("CLEAR", {"acc": cleared, "count": 1}))
        elif isinstance(stmt, tir.Evaluate) and isinstance(stmt.value, tir.Call) \
                and stmt.value.name in CALLS:
            op, fields = CALLS[stmt.value.name]
            operands = {}
            for (name, memory), arg in zip(fields, stmt.value.args):
                if memory is None:
                    operands[name] = evaluate_index(arg, env)
                else:
                    operands[name] = element_address(arg, env)
                    placer.assign(operands[name][0].name, memory, op)
            instructions.append((op, operands))
        else:
            raise CompileError(f"{func.name}: the dot-product array has no instruction for "
                               f"{tir.stmt_to_str(stmt).strip()!r}")
    return instructions, buffers


def _merge_clears(last: Command, command: Command) -> Command | None:
    """Two CLEARs of consecutive addresses as one (the init loops), or None."""
    if (last.op == command.op == "CLEAR" and last["acc"] + last["count"] == command["acc"]
            and last["count"] + command["count"] < FIELD_LIMIT):
        return last.replace(count=last["count"] + command["count"])
    return None


def generate(func: tir.PrimFunc, config: MachineConfig) -> Program:
    """The program of a lowered, tensorized function."""
    placer = MemoryPlacer(config.banks(), func.name)
    for name, memory in lowering_metadata(func).get("banks", {}).items():
        placer.assign(name, memory, "the lowering")
    instructions, buffers = _collect(func, placer)
    for name, buffer in buffers.items():
        placer.place(name, buffer.shape)

    def value(operand) -> int:
        if isinstance(operand, tuple):
            return placer.layout[operand[0].name].offset + operand[1]
        return operand

    commands = [ISA.command(op, **{name: value(o) for name, o in operands.items()})
                for op, operands in instructions]
    return Program(func.name, ISA.encode(coalesce(commands, _merge_clears)), placer.layout)
