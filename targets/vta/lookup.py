"""Lookup-table activations (``LookupTable``, written by the ``lookup_tables`` pass) on
the vector ALU.

The int8 operand is LOADed into the input buffer in the blocked layout of the
convolutions around it, reaches the accumulators through ALU instructions that read
the input buffer (``MUL imm 0`` clears the tiles, ``ADD src_inp`` brings the values),
and ``LUT`` maps every element through the table, which the compute module loads once
per run. The result is an int8 value sign-extended, so the narrowing STORE is exact.

The op's table lists the results for the values -128 .. 127; the ALU indexes its table
by an element's low 8 bits, so entry ``j`` of the loaded table is the op's entry for
the int8 value whose bits are ``j``.

Work is split into chunks of tiles, two chunks in flight (as for residual additions):
the load module fills one chunk's input tiles while the compute module maps the other
and the store module drains a third, synchronized by dependency tokens.
"""

from __future__ import annotations

import functools

import numpy as np

from heterocc.accel_sim import HardwareConfig
from heterocc.accel_sim.isa import LUT_WORDS, Alu, AluOp, Buffer, Load, MicroOp, Store, lut_words
from heterocc.accel_sim.program import Program, ProgramBuilder
from heterocc.ir.graph import Node
from heterocc.sdk.graph import TABLE_OFFSET

#: chunks in flight (each holds its tiles in INP and ACC)
_SLOTS = 2


def device_table(table: np.ndarray) -> np.ndarray:
    """The ALU's table (indexed by an element's low 8 bits) of a ``LookupTable``'s
    (indexed by value + 128)."""
    values = np.arange(256, dtype=np.uint8).view(np.int8).astype(np.int64)
    return np.asarray(table, np.int8)[values + TABLE_OFFSET]


def unsupported(node: Node) -> str | None:
    """Why the accelerator cannot run this ``LookupTable``, or None."""
    x = node.inputs[0].type
    if x.dtype != "int8":
        return f"input is {x.dtype}, not int8"
    if x.ndim not in (2, 4):
        return (f"a {x.ndim}-D tensor (the ALU takes 4-D activations in the blocked layout, "
                "or a dense layer's 2-D ones)")
    return None


def concat_unsupported(node: Node, block: int) -> str | None:
    """Why the accelerator cannot copy this concatenation in the blocked layout of
    ``block``-channel tiles (``copy_program``), or None."""
    shapes = [v.type.shape for v in node.inputs]
    if len(node.outputs[0].type.shape) != 4 or node.attrs.get("axis") % 4 != 1:
        return "not a concatenation of 4-D tensors along the channels"
    if any(v.type.dtype != "int8" for v in node.inputs):
        return "an input is not int8"
    if len(set(node.inputs)) != len(node.inputs):
        return "an input is concatenated twice"
    if shapes[0][0] != 1:
        return f"batch {shapes[0][0]} (one batch group only: its channel blocks are adjacent)"
    if any(shape[1] % block for shape in shapes[:-1]):
        return (f"channels {[shape[1] for shape in shapes]}: every input but the last must "
                f"fill whole {block}-channel tiles for its blocks to follow the previous ones")
    return None


def flatten_unsupported(node: Node) -> str | None:
    """Why the accelerator cannot copy this Flatten or Reshape from the blocked layout to
    a dense layer's matrix (``codegen._flatten``), or None: an int8 (N, C, 1, 1) tensor
    (a pool's) to (N, C)."""
    x, y = node.inputs[0].type, node.outputs[0].type
    if x.dtype != "int8":
        return f"input is {x.dtype}, not int8"
    if x.ndim != 4 or tuple(x.shape[2:]) != (1, 1) or tuple(y.shape) != tuple(x.shape[:2]):
        return (f"{list(x.shape)} -> {list(y.shape)} is not a pooled (N, C, 1, 1) tensor "
                "flattened to (N, C)")
    return None


def chunk_tiles(config: HardwareConfig) -> int:
    """Tiles per chunk: _SLOTS chunks fit the input and the accumulator buffers."""
    return max(1, min(config.inp_depth, config.acc_depth) // _SLOTS)


def lookup_program(config: HardwareConfig, tiles: int, table: bytes) -> Program:
    """The program mapping tensor "X0" (``tiles`` tiles in rows of ``batch x block_in``)
    through the 256-entry int8 ``table`` (the ALU's order: ``device_table``) into "Y"
    (rows of ``batch x block_out``, int8)."""
    return copy_program(config, (tiles,), table)


@functools.lru_cache(maxsize=64)
def copy_program(config: HardwareConfig, sources: tuple[int, ...],
                 table: bytes | None = None) -> Program:
    """The program copying tensors "X0", "X1", ... (``sources[i]`` tiles each, in rows of
    ``batch x block_in``) one after the other into "Y" (rows of ``batch x block_out``,
    int8) through the accumulators, each element mapped through ``table`` when one is
    given (a 256-entry int8 table in the ALU's order, ``device_table``).

    In the blocked layout a channel concatenation of one batch group is exactly this:
    each input's channel blocks follow the previous input's."""
    batch, bi, bo = config.batch, config.block_in, config.block_out
    builder = ProgramBuilder(config)
    xs = [builder.tensor(f"X{i}", Buffer.INP, shape=(tiles * batch, bi))
          for i, tiles in enumerate(sources)]
    y = builder.tensor("Y", Buffer.OUT, shape=(sum(sources) * batch, bo))
    chunk = chunk_tiles(config)
    kernel = [MicroOp(slot * chunk, slot * chunk) for slot in range(_SLOTS)]
    builder.emit(builder.load_uops(builder.uops("kernel", kernel)))
    if table is not None:
        words = np.array(lut_words(np.frombuffer(table, np.int8)), np.uint32).reshape(-1, 1)
        entries = builder.tensor("T", Buffer.LUT, data=words)
        builder.emit(Load(buffer=Buffer.LUT, sram_base=0, dram_base=entries.tile(0, 0),
                          y_size=1, x_size=LUT_WORDS, x_stride=LUT_WORDS))
    # (source tensor, its first tile, tiles, first tile of Y)
    pieces = [(x, start, min(chunk, tiles - start), offset + start)
              for x, tiles, offset in zip(xs, sources, np.cumsum((0, *sources[:-1])))
              for start in range(0, tiles, chunk)]
    for index, (x, start, size, target) in enumerate(pieces):
        slot = index % _SLOTS
        base = slot * chunk
        reuse = index >= _SLOTS  # the slot held an earlier chunk
        again = index + _SLOTS < len(pieces)  # a later chunk reuses the slot
        last = index == len(pieces) - 1
        builder.emit(Load(buffer=Buffer.INP, sram_base=base, dram_base=x.tile(start, 0),
                          y_size=1, x_size=size, x_stride=size, pop_next=reuse,
                          push_next=True))
        loop = dict(uop_begin=slot, uop_end=slot + 1, loop_outer=size, loop_inner=1,
                    dst_factor_outer=1, src_factor_outer=1)
        builder.emit(Alu(alu_op=AluOp.MUL, use_imm=True, imm=0, pop_prev=True,
                         pop_next=reuse, **loop))
        builder.emit(Alu(alu_op=AluOp.ADD, src_inp=True, push_prev=again and table is None,
                         push_next=table is None, **loop))
        if table is not None:
            builder.emit(Alu(alu_op=AluOp.LUT, use_imm=True, push_prev=again,
                             push_next=True, **loop))
        builder.emit(Store(buffer=Buffer.OUT, sram_base=base, dram_base=y.tile(int(target), 0),
                           y_size=1, x_size=size, x_stride=size, pop_prev=True,
                           push_prev=again or last))
    builder.finish(pop_next=True)
    return builder.build()
