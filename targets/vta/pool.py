"""Integer max pooling (a ResNet stem's MaxPool) on the vector ALU.

``realize_qdq`` turns a quantized pool ``Q(MaxPool(DQ(x)))`` into ``MaxPool`` on the
int8 tensor itself (``quantize._integer_max_pool``), whose reference pads with -128.
The accelerator runs it on the tensor in the blocked layout of the convolutions
around it (tiles of ``batch x block_in`` elements; per batch group and channel block,
a plane of ``height x width`` tiles, rows outermost), a chunk of output tiles at a
time:

- a LOAD copies the input rows and columns the chunk's windows cover into the input
  buffer, padding with -128 where a window leaves the tensor, so padding never wins;
- ``MUL imm 0`` then ``ADD src_inp`` copy each window's first element into the
  accumulators, and one ``MAX src_inp`` per further window element takes the max,
  the ALU's two loops walking the chunk's output rows and columns with the pool's
  strides (one micro-op per window element: an ALU instruction may not write a tile
  twice);
- a STORE narrows the int8 results (exact: a max of int8 values) into the output.

Two chunks are in flight, as for the residual additions (``residual``): the load
module fills one chunk's input tiles while the compute module pools the other and
the store module drains a third, synchronized by dependency tokens.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from heterocc.accel_sim import HardwareConfig
from heterocc.accel_sim.isa import (
    DMA_PAD_BITS,
    LOOP_EXTENT_BITS,
    Alu,
    AluOp,
    Buffer,
    Load,
    MicroOp,
    Store,
)
from heterocc.accel_sim.program import Program, ProgramBuilder
from heterocc.ir.graph import Node
from heterocc.sdk import CompileError
from heterocc.sdk.graph import pool_geometry

#: chunks in flight
_SLOTS = 2
#: the int8 minimum: what a padding element holds (as the integer pool's reference pads)
PAD_VALUE = -128


@dataclass(frozen=True)
class MaxPoolGeometry:
    """One max pool in tiles: ``planes`` (batch groups x channel blocks) of ``height x
    width`` input tiles; window ``kernel``, ``strides``, ``pads`` (top, left, bottom,
    right, as ONNX orders them) and output ``out_height x out_width``."""

    planes: int
    height: int
    width: int
    kernel: tuple[int, int]
    strides: tuple[int, int]
    pads: tuple[int, int, int, int]
    out_height: int
    out_width: int

    def rows_in(self, rows: int) -> int:
        """Input rows ``rows`` consecutive output rows read."""
        return (rows - 1) * self.strides[0] + self.kernel[0]

    def cols_in(self, cols: int) -> int:
        """Input columns ``cols`` consecutive output columns read."""
        return (cols - 1) * self.strides[1] + self.kernel[1]


def unsupported(pool: Node) -> str | None:
    """Why no accelerator configuration can run this max pool, or None."""
    x = pool.inputs[0].type
    if x.dtype != "int8":
        return f"input is {x.dtype}; the ALU pools int8 input tiles"
    if x.ndim != 4:
        return f"{x.ndim - 2}-D pooling (only 2-D)"
    if len(pool.outputs) > 1:
        return "the pool's indices output is used"
    try:
        geo = pool_geometry(x.shape, pool.attrs)
    except ValueError as error:
        return str(error)
    if any(d != 1 for d in geo.dilations):
        return f"dilated pooling (dilations={list(geo.dilations)})"
    (kh, kw), (sy, sx), pads = geo.kernel, geo.strides, geo.pads
    if any(p >= k for p, k in zip(pads, (kh, kw, kh, kw))):
        return f"pads {list(pads)} reach a whole window {[kh, kw]} (a window of padding alone)"
    limit = (1 << DMA_PAD_BITS) - 1
    # a ceil_mode window may read up to stride - 1 elements past the end padding
    if max(pads[0], pads[1], pads[2] + sy - 1, pads[3] + sx - 1) > limit:
        return f"pads {list(pads)} exceed the LOAD's {limit}-tile padding"
    return None


def max_pool_geometry(pool: Node, config: HardwareConfig) -> MaxPoolGeometry | str:
    """The pool in tiles of ``config``, or why the accelerator cannot run it."""
    why = unsupported(pool)
    if why is not None:
        return why
    x = pool.inputs[0].type
    if config.block_in != config.block_out:
        return "the input tiles are not shaped like accumulator tiles"
    if x.shape[0] % config.batch:
        return f"batch {x.shape[0]} is not a multiple of {config.batch}"
    geo = pool_geometry(x.shape, pool.attrs)
    found = MaxPoolGeometry(
        x.shape[0] // config.batch * -(-x.shape[1] // config.block_in), x.shape[2],
        x.shape[3], tuple(geo.kernel), tuple(geo.strides), tuple(geo.pads), *geo.out)
    chunk = chunk_shape(config, found)
    return chunk if isinstance(chunk, str) else found


def chunk_shape(config: HardwareConfig, geo: MaxPoolGeometry) -> tuple[int, int] | str:
    """(output rows, output columns) of a chunk: whole output rows, as many as _SLOTS
    chunks fit the input and the accumulator buffers, or part of one row where a
    row does not fit; or why no chunk fits."""
    inp, acc = config.inp_depth // _SLOTS, config.acc_depth // _SLOTS
    loop_limit = (1 << LOOP_EXTENT_BITS) - 1
    width = geo.out_width
    if geo.rows_in(1) * geo.cols_in(width) <= inp and width <= min(acc, loop_limit):
        rows = 1
        while rows < min(geo.out_height, loop_limit) and \
                geo.rows_in(rows + 1) * geo.cols_in(width) <= inp and (rows + 1) * width <= acc:
            rows += 1
        return rows, width
    cols = min(width, acc, loop_limit)
    while cols and geo.rows_in(1) * geo.cols_in(cols) > inp:
        cols -= 1
    if not cols:
        return (f"one {geo.kernel[0]}x{geo.kernel[1]} window does not fit half the "
                f"{config.inp_depth}-tile input buffer")
    return 1, cols


def _chunks(geo: MaxPoolGeometry, rows: int, cols: int):
    """(plane, first output row, rows, first output column, columns) of every chunk."""
    for plane in range(geo.planes):
        for y in range(0, geo.out_height, rows):
            for x in range(0, geo.out_width, cols):
                yield plane, y, min(rows, geo.out_height - y), x, min(cols, geo.out_width - x)


def _span(first: int, count: int, stride: int, kernel: int, pad: int, size: int):
    """(first input index read, elements read inside the tensor, padding before, padding
    after) of ``count`` windows from output index ``first`` along one axis."""
    begin = first * stride - pad
    end = (first + count - 1) * stride - pad + kernel
    return max(begin, 0), min(end, size) - max(begin, 0), max(-begin, 0), max(end - size, 0)


@functools.lru_cache(maxsize=64)
def pool_program(config: HardwareConfig, geo: MaxPoolGeometry) -> Program:
    """The program pooling tensor "X" (``planes x height x width`` tiles, rows of
    ``batch x block_in``) into "Y" (``planes x out_height x out_width`` tiles, int8)."""
    chunk = chunk_shape(config, geo)
    if isinstance(chunk, str):
        raise CompileError(f"max pool {geo}: {chunk}")
    rows, cols = chunk
    (kh, kw), (sy, sx) = geo.kernel, geo.strides
    batch, bi, bo = config.batch, config.block_in, config.block_out
    builder = ProgramBuilder(config)
    x = builder.tensor("X", Buffer.INP, shape=(geo.planes * geo.height * geo.width * batch, bi))
    y = builder.tensor("Y", Buffer.OUT,
                       shape=(geo.planes * geo.out_height * geo.out_width * batch, bo))
    inp_slot, acc_slot = config.inp_depth // _SLOTS, config.acc_depth // _SLOTS
    chunks = list(_chunks(geo, rows, cols))
    # one micro-op per window element, per slot and input row pitch (a partial last
    # chunk of a row loads fewer columns)
    pitches = sorted({geo.cols_in(width) for *_, width in chunks})
    kernel, first_uop = [], {}
    for slot in range(_SLOTS):
        for pitch in pitches:
            first_uop[slot, pitch] = len(kernel)
            kernel += [MicroOp(slot * acc_slot, slot * inp_slot + ky * pitch + kx)
                       for ky in range(kh) for kx in range(kw)]
    if len(kernel) > config.uop_depth:
        raise CompileError(f"max pool {geo}: {len(kernel)} micro-ops exceed the "
                           f"{config.uop_depth}-entry micro-op buffer")
    builder.emit(builder.load_uops(builder.uops("kernel", kernel)))
    taps = kh * kw
    for index, (plane, oy, height, ox, width) in enumerate(chunks):
        slot = index % _SLOTS
        reuse = index >= _SLOTS  # the slot held an earlier chunk
        again = index + _SLOTS < len(chunks)  # a later chunk reuses the slot
        last = index == len(chunks) - 1
        iy, y_size, top, bottom = _span(oy, height, sy, kh, geo.pads[0], geo.height)
        ix, x_size, left, right = _span(ox, width, sx, kw, geo.pads[1], geo.width)
        pitch = left + x_size + right
        builder.emit(Load(buffer=Buffer.INP, sram_base=slot * inp_slot,
                          dram_base=x.tile((plane * geo.height + iy) * geo.width + ix, 0),
                          y_size=y_size, x_size=x_size, x_stride=geo.width, y_pad_top=top,
                          y_pad_bottom=bottom, x_pad_left=left, x_pad_right=right,
                          pad_value=PAD_VALUE, pop_next=reuse, push_next=True))
        uop = first_uop[slot, pitch]
        loop = dict(loop_outer=height, loop_inner=width, dst_factor_outer=width,
                    dst_factor_inner=1, src_factor_outer=sy * pitch, src_factor_inner=sx)
        steps = [(0, AluOp.MUL, True)] + [(tap, AluOp.ADD if tap == 0 else AluOp.MAX, False)
                                          for tap in range(taps)]
        for position, (tap, op, immediate) in enumerate(steps):
            first, final = position == 0, position == len(steps) - 1
            builder.emit(Alu(alu_op=op, uop_begin=uop + tap, uop_end=uop + tap + 1,
                             use_imm=immediate, imm=0, src_inp=not immediate,
                             pop_prev=first, pop_next=first and reuse,
                             push_prev=final and again, push_next=final, **loop))
        builder.emit(Store(buffer=Buffer.OUT, sram_base=slot * acc_slot,
                           dram_base=y.tile((plane * geo.out_height + oy) * geo.out_width + ox,
                                            0),
                           y_size=height, x_size=width, x_stride=geo.out_width, pop_prev=True,
                           push_prev=again or last))
    builder.finish(pop_next=True)
    return builder.build()
