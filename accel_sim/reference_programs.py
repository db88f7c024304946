"""Tiled GEMM programs with one or two virtual threads, optionally followed by a
requantizing ALU epilogue (bias, fixed-point multiply, rounding shift, clamp).

They exercise the whole ISA contract (DMA, micro-op loops, token protocol); they
serve as workloads for tests, benchmarks and the RTL test benches, and the
accelerator target lowers dense layers and (im2col) convolutions onto them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import AcceleratorError
from .config import HardwareConfig
from .isa import Alu, AluOp, Buffer, Gemm, Load, MicroOp
from .program import Program, ProgramBuilder


@dataclass(frozen=True)
class GemmTiling:
    """Chunk sizes of a tiled GEMM, in tiles: rows of A, columns of C and of the reduction."""

    block_rows: int
    block_cols: int
    k_chunk: int


@dataclass(frozen=True)
class Requantization:
    """Per output column, with ``a = clamp(acc + bias, -limit, limit)`` and
    ``p = (a * multiplier) >> product_shift`` (the exact product, shifted, then wrapped):
    ``clamp(((p + rounding) >> shift) + zero_point, qmin, qmax)`` in accumulator
    arithmetic (wrapping), then a narrowing store. ``bias``, ``limit``, ``multiplier``,
    ``rounding`` and ``shift`` hold one value per column of C; ``product_shift`` is one
    for all (the MUL's immediate field, docs/isa.md section 5)."""

    bias: np.ndarray
    limit: np.ndarray
    multiplier: np.ndarray
    rounding: np.ndarray
    shift: np.ndarray
    zero_point: int
    qmin: int
    qmax: int
    product_shift: int = 0

    @property
    def column_constants(self) -> tuple[np.ndarray, ...]:
        return (self.bias, -np.asarray(self.limit), self.limit, self.multiplier,
                self.rounding, self.shift)


#: (ALU op, index into Requantization.column_constants) of the epilogue's tensor steps
_EPILOGUE_TENSOR_STEPS = ((AluOp.ADD, 0), (AluOp.MAX, 1), (AluOp.MIN, 2), (AluOp.MUL, 3),
                          (AluOp.ADD, 4), (AluOp.SHR, 5))


def _largest_divisor(n: int, limit: int) -> int:
    return max(d for d in range(1, min(n, max(limit, 1)) + 1) if n % d == 0)


def default_gemm_tiling(
    config: HardwareConfig, m_tiles: int, n_tiles: int, k_tiles: int, virtual_threads: int,
    acc_depth: int | None = None,
) -> GemmTiling:
    """Chunk sizes that fit one virtual thread's share of every buffer (of
    ``acc_depth`` accumulator tiles, by default the whole buffer)."""
    inp_slot = config.inp_depth // virtual_threads
    wgt_slot = config.wgt_depth // virtual_threads
    acc_slot = (config.acc_depth if acc_depth is None else acc_depth) // virtual_threads
    k_chunk = _largest_divisor(k_tiles, min(16, inp_slot, wgt_slot))
    block_cols = _largest_divisor(n_tiles, min(wgt_slot // k_chunk, acc_slot))
    block_rows = _largest_divisor(m_tiles, min(inp_slot // k_chunk, acc_slot // block_cols))
    return GemmTiling(block_rows, block_cols, k_chunk)


def tiled_gemm_program(
    config: HardwareConfig,
    a: np.ndarray,
    w: np.ndarray,
    virtual_threads: int = 2,
    tiling: GemmTiling | None = None,
    output: Buffer = Buffer.ACC,
    epilogue: Requantization | None = None,
) -> Program:
    """``C = A @ W.T`` for A (M x K) and W (N x K), stored to tensor "C".

    With two virtual threads the input, weight and accumulator buffers are split
    in halves so that loading the next chunk overlaps computing the current one
    and storing one output block overlaps computing the next; with one, every
    step waits for the previous one. With an ``epilogue``, each output block is
    requantized by the ALU before it is stored (to OUT: narrowed to ``out_bits``).
    """
    if virtual_threads not in (1, 2):
        raise AcceleratorError(f"virtual_threads must be 1 or 2, got {virtual_threads}")
    (m, k), (n, k_w) = a.shape, w.shape
    if k != k_w:
        raise AcceleratorError(f"A is {m}x{k} but W is {n}x{k_w}: reduction lengths differ")
    builder = ProgramBuilder(config)
    a_tensor = builder.tensor("A", Buffer.INP, data=a)
    w_tensor = builder.tensor("W", Buffer.WGT, data=w)
    c_tensor = builder.tensor("C", output, shape=(m, n))
    m_tiles, n_tiles, k_tiles = a_tensor.grid_rows, w_tensor.grid_rows, a_tensor.grid_cols
    threads = virtual_threads
    # the epilogue's per-column constants live at the top of the accumulator buffer
    const_tiles = 0 if epilogue is None else len(epilogue.column_constants) * n_tiles
    usable = config.acc_depth - const_tiles
    if usable < threads:
        raise AcceleratorError(f"{n_tiles} output column tiles of epilogue constants do not "
                               "fit the accumulator buffer")
    tiling = tiling or default_gemm_tiling(config, m_tiles, n_tiles, k_tiles, threads,
                                           acc_depth=usable)
    rows, cols, k_chunk = tiling.block_rows, tiling.block_cols, tiling.k_chunk
    if m_tiles % rows or n_tiles % cols or k_tiles % k_chunk:
        raise AcceleratorError(
            f"tiling {tiling} does not divide the {m_tiles}x{n_tiles}x{k_tiles} tile grid"
        )
    inp_slot, wgt_slot = config.inp_depth // threads, config.wgt_depth // threads
    acc_slot = usable // threads
    if rows * k_chunk > inp_slot or cols * k_chunk > wgt_slot or rows * cols > acc_slot:
        raise AcceleratorError(f"tiling {tiling} overflows a virtual thread's buffer share")
    const_base = threads * acc_slot

    # micro-ops: one reset kernel per accumulator slot, then one GEMM kernel per
    # (accumulator slot, input/weight slot) pair
    resets = [MicroOp(dst=slot * acc_slot, src=0, wgt=0) for slot in range(threads)]
    kernels = [
        MicroOp(dst=acc * acc_slot, src=data * inp_slot + u, wgt=data * wgt_slot + u)
        for acc in range(threads)
        for data in range(threads)
        for u in range(k_chunk)
    ]
    # epilogue micro-ops: per (accumulator slot, column block, constant) the slot's
    # first tile against the block's first constant tile
    n_blocks = n_tiles // cols
    epilogue_base = len(resets) + len(kernels)
    epilogue_uops = [] if epilogue is None else [
        MicroOp(dst=acc * acc_slot, src=const_base + c * n_tiles + block * cols, wgt=0)
        for acc in range(threads) for block in range(n_blocks)
        for c in range(len(epilogue.column_constants))]
    uop_tensor = builder.uops("uops", resets + kernels + epilogue_uops)
    builder.emit(builder.load_uops(uop_tensor))
    if epilogue is not None:
        for c, values in enumerate(epilogue.column_constants):
            # one tile row of constants: the same values in each of the batch rows
            const = builder.tensor(f"epilogue{c}", Buffer.ACC, data=np.repeat(
                np.asarray(values, np.int64).reshape(1, n), config.batch, axis=0))
            builder.emit(builder.load_tiles(const, const_base + c * n_tiles, 0, 0, 1, n_tiles))

    steps_per_task = k_tiles // k_chunk
    tasks = [(r, c) for r in range(m_tiles // rows) for c in range(n_tiles // cols)]
    total_steps = len(tasks) * steps_per_task
    for task, (row_block, col_block) in enumerate(tasks):
        acc = task % threads
        for step in range(steps_per_task):
            global_step = task * steps_per_task + step
            data = global_step % threads
            builder.emit(builder.load_tiles(
                a_tensor, data * inp_slot, row_block * rows, step * k_chunk, rows, k_chunk,
                pop_next=global_step >= threads,
            ))
            builder.emit(builder.load_tiles(
                w_tensor, data * wgt_slot, col_block * cols, step * k_chunk, cols, k_chunk,
                push_next=True,
            ))
            if step == 0:
                builder.emit(Gemm(
                    reset=True, uop_begin=acc, uop_end=acc + 1, loop_outer=rows,
                    loop_inner=cols, acc_factor_outer=cols, acc_factor_inner=1,
                    pop_next=task >= threads,
                ))
            kernel = threads + (acc * threads + data) * k_chunk
            builder.emit(Gemm(
                uop_begin=kernel, uop_end=kernel + k_chunk, loop_outer=rows, loop_inner=cols,
                acc_factor_outer=cols, acc_factor_inner=1,
                inp_factor_outer=k_chunk, wgt_factor_inner=k_chunk,
                pop_prev=True,
                push_prev=global_step + threads < total_steps,
                push_next=step == steps_per_task - 1 and epilogue is None,
            ))
        if epilogue is not None:
            first = epilogue_base + (acc * n_blocks + col_block) * len(epilogue.column_constants)
            _emit_epilogue(builder, epilogue, first, rows, cols)
        builder.emit(builder.store_tiles(
            c_tensor, acc * acc_slot, row_block * rows, col_block * cols, rows, cols,
            pop_prev=True,
            push_prev=task + threads < len(tasks) or task == len(tasks) - 1,
        ))
    builder.finish(pop_next=True)
    return builder.build()


def _emit_epilogue(builder: ProgramBuilder, epilogue: Requantization, first_uop: int,
                   rows: int, cols: int) -> None:
    """ALU steps over a ``rows x cols`` accumulator block; the last signals the store."""
    tiles = dict(loop_outer=rows, loop_inner=cols, dst_factor_outer=cols, dst_factor_inner=1)
    for op, c in _EPILOGUE_TENSOR_STEPS:
        builder.emit(Alu(alu_op=op, uop_begin=first_uop + c, uop_end=first_uop + c + 1,
                         imm=epilogue.product_shift if op == AluOp.MUL else 0,
                         src_factor_outer=0, src_factor_inner=1, **tiles))
    immediates = [(AluOp.ADD, epilogue.zero_point), (AluOp.MAX, epilogue.qmin),
                  (AluOp.MIN, epilogue.qmax)]
    immediates = [(op, imm) for op, imm in immediates if not (op == AluOp.ADD and imm == 0)]
    for k, (op, imm) in enumerate(immediates):
        builder.emit(Alu(alu_op=op, use_imm=True, imm=imm, uop_begin=first_uop,
                         uop_end=first_uop + 1, push_next=k == len(immediates) - 1, **tiles))


def padded_conv3x3_program(config: HardwareConfig, image: np.ndarray, weights: np.ndarray,
                           height: int, width: int, pad_value: int = 0) -> Program:
    """A 3x3, stride-1, pad-1 convolution of one ``height x width`` image through
    micro-op loops over a 2-D DMA padded with ``pad_value``: ``image`` is
    (height*width, C) in HWC order, ``weights`` (O, 9*C) in (kh, kw, c) order; the
    result is tensor "Y" (height*width, O) in ACC."""
    channels_in = image.shape[1]
    blocks_in = channels_in // config.block_in
    builder = ProgramBuilder(config)
    x_t = builder.tensor("X", Buffer.INP, data=image)
    w_t = builder.tensor("W", Buffer.WGT, data=weights)
    y_t = builder.tensor("Y", Buffer.ACC, shape=(height * width, weights.shape[0]))
    padded_row = (width + 2) * blocks_in
    uops = [
        MicroOp(dst=0, src=(kh * (width + 2) + kw) * blocks_in + cb,
                wgt=(kh * 3 + kw) * blocks_in + cb)
        for kh in range(3) for kw in range(3) for cb in range(blocks_in)
    ]
    kernel = builder.uops("conv", [MicroOp(0, 0, 0)] + uops)
    builder.emit(builder.load_uops(kernel))
    # one 2-D DMA: image rows of width * blocks_in tiles, one pixel of padding around
    builder.emit(Load(
        buffer=Buffer.INP, sram_base=0, dram_base=x_t.tile_base, y_size=height,
        x_size=width * blocks_in, x_stride=width * blocks_in, y_pad_top=1, y_pad_bottom=1,
        x_pad_left=blocks_in, x_pad_right=blocks_in, pad_value=pad_value,
    ))
    builder.emit(builder.load_tiles(w_t, 0, 0, 0, 1, 9 * blocks_in, push_next=True))
    loops = dict(loop_outer=height, loop_inner=width, acc_factor_outer=width, acc_factor_inner=1)
    builder.emit(Gemm(reset=True, uop_begin=0, uop_end=1, **loops))
    builder.emit(Gemm(
        uop_begin=1, uop_end=1 + len(uops), inp_factor_outer=padded_row,
        inp_factor_inner=blocks_in, pop_prev=True, push_next=True, **loops,
    ))
    builder.emit(builder.store_tiles(y_t, 0, 0, 0, height * width, 1, pop_prev=True,
                                     push_prev=True))
    builder.finish(pop_next=True)
    return builder.build()
