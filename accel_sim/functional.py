"""The bit-exact functional simulator: DRAM as a NumPy byte array, the four SRAM
buffers, and the semantics of every instruction, vectorized per instruction.

A GEMM instruction becomes a few gathers and one ``einsum`` (a BLAS matrix
product whenever the loop nest allows it) on exactly representable float64
values; an ALU instruction becomes one vectorized expression over all its
iterations. Accumulation wraps modulo 2**acc_bits as the hardware does.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..errors import AcceleratorError, IllegalInstructionError
from .config import HardwareConfig
from .encoding import uop_fields
from .isa import (
    Alu,
    AluOp,
    Buffer,
    DmaInstruction,
    Gemm,
    Instruction,
    Load,
    Store,
    dram_unit_bytes,
)
from .validation import WorkMeter, dma_dram_span, dma_sram_tiles, instruction_errors

__all__ = ["FunctionalSimulator", "alu_apply", "product_shift", "dma_dram_span", "dma_sram_tiles"]

_LOOP_AXES = "oiu"  # outer loop, inner loop, micro-op
_FLOAT_EXACT_LIMIT = 1 << 53
_FLOAT32_EXACT_LIMIT = 1 << 24


class FunctionalSimulator:
    """The architectural state of one accelerator and an executor for its instructions.

    ``dram`` is a 1-D uint8 array the simulator reads and writes in place. Every
    instruction is validated before it touches anything (:mod:`.validation`: its
    fields, its SRAM range, its DRAM range against this array, and the config's work
    budget, counted over everything this machine executes), so no instruction,
    checked by the stream checker or not, reads or writes outside the machine's
    arrays; tile indices that depend on micro-op contents are checked as they are
    computed.
    """

    def __init__(self, config: HardwareConfig, dram: np.ndarray):
        if dram.dtype != np.uint8 or dram.ndim != 1 or not dram.flags.c_contiguous:
            raise AcceleratorError("DRAM must be a contiguous 1-D uint8 array")
        self.config = config
        self.dram = dram
        self.inp = np.zeros((config.inp_depth, config.batch, config.block_in), config.inp_dtype)
        self.wgt = np.zeros((config.wgt_depth, config.block_out, config.block_in), config.wgt_dtype)
        self.acc = np.zeros((config.acc_depth, config.batch, config.block_out), config.acc_dtype)
        self.uop_words = np.zeros(config.uop_depth, np.uint32)
        self._uops = uop_fields(self.uop_words, config)
        self._work = WorkMeter(config)
        #: multiply-accumulates performed so far (non-reset GEMM iterations).
        self.macs = 0

    def execute(self, instruction: Instruction, index: int | None = None) -> None:
        """Apply one instruction to the state; errors name ``index``.

        An illegal instruction (or one past the work budget) raises
        IllegalInstructionError and leaves DRAM and the buffers untouched.
        """
        errors = instruction_errors(instruction, index, self.config, self.dram.size)
        if errors:
            raise errors[0]
        refusal = self._work.add(instruction, index)
        if refusal is not None:
            raise refusal
        if isinstance(instruction, Load):
            self._load(instruction)
        elif isinstance(instruction, Store):
            self._store(instruction)
        elif isinstance(instruction, Gemm):
            self._gemm(instruction, index)
        elif isinstance(instruction, Alu):
            self._alu(instruction, index)

    # --- DMA (validated: SRAM and DRAM ranges inside the arrays) -----------------------
    def _dram_block(self, instruction: DmaInstruction) -> np.ndarray:
        """A (y_size, x_size * unit) strided view of the DRAM bytes a transfer touches."""
        unit = dram_unit_bytes(self.config, instruction.buffer)
        first, _ = dma_dram_span(instruction, self.config)
        return as_strided(
            self.dram[first:],
            shape=(instruction.y_size, instruction.x_size * unit),
            strides=(instruction.x_stride * unit, 1),
            writeable=isinstance(instruction, Store),
        )

    def _load(self, instruction: Load) -> None:
        config = self.config
        begin = instruction.sram_base
        end = begin + dma_sram_tiles(instruction)
        raw = np.ascontiguousarray(self._dram_block(instruction))
        rows, cols = instruction.padded_rows, instruction.padded_cols
        interior = (
            slice(instruction.y_pad_top, instruction.y_pad_top + instruction.y_size),
            slice(instruction.x_pad_left, instruction.x_pad_left + instruction.x_size),
        )
        if instruction.buffer == Buffer.UOP:
            words = self.uop_words[begin:end].reshape(rows, cols)
            words[...] = 0
            words[interior] = raw.view("<u4").reshape(instruction.y_size, instruction.x_size)
            fields = uop_fields(self.uop_words[begin:end], config)
            for name, values in fields.items():
                self._uops[name][begin:end] = values
            return
        target = {Buffer.INP: self.inp, Buffer.WGT: self.wgt, Buffer.ACC: self.acc}[
            instruction.buffer
        ]
        block = target[begin:end].reshape(rows, cols, *target.shape[1:])
        block[...] = instruction.pad_value
        block[interior] = raw.view(target.dtype.newbyteorder("<")).reshape(
            instruction.y_size, instruction.x_size, *target.shape[1:]
        )

    def _store(self, instruction: Store) -> None:
        begin = instruction.sram_base
        end = begin + dma_sram_tiles(instruction)
        if begin == end:
            return
        tiles = self.acc[begin:end]
        if instruction.buffer == Buffer.OUT:
            tiles = tiles.astype(self.config.out_dtype)
        data = tiles.astype(tiles.dtype.newbyteorder("<"), copy=False)
        self._dram_block(instruction)[...] = data.view(np.uint8).reshape(
            instruction.y_size, instruction.x_size * data[0].nbytes
        )

    # --- loops ------------------------------------------------------------------------
    def _index_grid(
        self,
        uop_range: slice,
        uop_field: str,
        factors: tuple[int, int],
        loops: tuple[range, range],
        depth: int,
        what: str,
        index: int | None,
    ) -> tuple[np.ndarray, str]:
        """Tile indices ``o * f_outer + i * f_inner + uop.field`` for ``o, i`` in ``loops``,
        over the axes they vary on.

        Returns the indices and the loop axes ("o", "i", "u" in that order) they
        span; an axis along which the index is constant is left out.
        """
        values = self._uops[uop_field][uop_range]
        outer, inner = loops
        extents = (len(outer), len(inner), values.size)
        varies = (
            factors[0] != 0 and extents[0] > 1,
            factors[1] != 0 and extents[1] > 1,
            extents[2] > 1 and bool((values != values[0]).any()),
        )
        outer_part = np.arange(outer.start, outer.stop if varies[0] else outer.start + 1)
        inner_part = np.arange(inner.start, inner.stop if varies[1] else inner.start + 1)
        grid = (outer_part.reshape(-1, 1, 1) * factors[0]
                + inner_part.reshape(1, -1, 1) * factors[1]
                + (values if varies[2] else values[:1]).reshape(1, 1, -1))
        axes = "".join(axis for axis, vary in zip(_LOOP_AXES, varies) if vary)
        highest = int(grid.max())
        if highest >= depth:
            raise IllegalInstructionError(
                f"{what} index {highest} is beyond the buffer's depth {depth} (micro-ops "
                f"[{uop_range.start}, {uop_range.stop}) with factors {factors})",
                index, field=f"micro-op {uop_field}", limit=depth - 1,
            )
        return grid.reshape([n for n, vary in zip(extents, varies) if vary]), axes

    def _gemm(self, instruction: Gemm, index: int | None) -> None:
        if instruction.iterations == 0:
            return
        uops = slice(instruction.uop_begin, instruction.uop_end)
        config = self.config
        # bound the gathered tiles (float64 or int64) of one piece, whatever the loops
        per_iteration = 8 * (config.batch * config.block_in
                             + config.block_out * config.block_in
                             + config.batch * config.block_out)
        for loops in _loop_pieces(instruction.loop_outer, instruction.loop_inner,
                                  uops.stop - uops.start, _GEMM_PIECE_BYTES // per_iteration):
            self._gemm_piece(instruction, uops, loops, index)
        if not instruction.reset:
            self.macs += instruction.iterations * config.macs_per_iteration

    def _gemm_piece(
        self, instruction: Gemm, uops: slice, loops: tuple[range, range], index: int | None
    ) -> None:
        """The iterations of ``loops`` (a block of the loop nest) of one GEMM.

        Iterations that hit one accumulator tile add modulo 2**acc_bits, so blocks
        may run one after the other."""
        config = self.config
        extents = dict(zip(_LOOP_AXES, (len(loops[0]), len(loops[1]), uops.stop - uops.start)))
        dst, dst_axes = self._index_grid(
            uops, "dst", (instruction.acc_factor_outer, instruction.acc_factor_inner), loops,
            config.acc_depth, "GEMM accumulator", index,
        )
        if instruction.reset:
            self.acc[np.unique(dst)] = 0
            return
        src, src_axes = self._index_grid(
            uops, "src", (instruction.inp_factor_outer, instruction.inp_factor_inner), loops,
            config.inp_depth, "GEMM input", index,
        )
        wgt, wgt_axes = self._index_grid(
            uops, "wgt", (instruction.wgt_factor_outer, instruction.wgt_factor_inner), loops,
            config.wgt_depth, "GEMM weight", index,
        )
        read_axes = set(src_axes) | set(wgt_axes)
        kept = "".join(axis for axis in dst_axes if axis in read_axes)
        summed = math.prod(extents[a] for a in read_axes - set(dst_axes))
        repeats = math.prod(
            extents[a] for a in _LOOP_AXES if a not in read_axes and a not in dst_axes
        )
        bound = (
            config.block_in * summed * repeats
            * (1 << (config.inp_bits - 1)) * (1 << (config.wgt_bits - 1))
        )
        # floats reach BLAS and are exact while every partial sum stays below 2**24
        # (float32: half the memory traffic of the gathered tiles) or 2**53 (float64)
        compute_type = (np.float32 if bound < _FLOAT32_EXACT_LIMIT else
                        np.float64 if bound < _FLOAT_EXACT_LIMIT else np.int64)
        products = np.einsum(
            f"{src_axes}bk,{wgt_axes}ck->{kept}bc",
            self.inp[src].astype(compute_type),
            self.wgt[wgt].astype(compute_type),
            optimize=True,
        ).astype(np.int64)
        if repeats > 1:
            products *= repeats
        # give the products every axis of dst (constant along the ones they lack)
        shape = [extents[a] if a in kept else 1 for a in dst_axes]
        products = np.broadcast_to(
            products.reshape(*shape, config.batch, config.block_out),
            (*dst.shape, config.batch, config.block_out),
        ).reshape(-1, config.batch, config.block_out)
        targets, sums = _sum_by_target(dst.ravel(), products)
        self.acc[targets] = (self.acc[targets].astype(np.int64) + sums).astype(config.acc_dtype)

    def _alu(self, instruction: Alu, index: int | None) -> None:
        # validated: at most acc_depth iterations, so every array below is that small
        config = self.config
        if instruction.iterations == 0:
            return
        uops = slice(instruction.uop_begin, instruction.uop_end)
        full_shape = (instruction.loop_outer, instruction.loop_inner, uops.stop - uops.start)
        dst = self._full_indices(
            instruction, uops, "dst",
            (instruction.dst_factor_outer, instruction.dst_factor_inner), full_shape, index,
        )
        iterations = np.arange(dst.size)
        owner = np.full(config.acc_depth, -1, dtype=np.int64)
        owner[dst] = iterations
        if not np.array_equal(owner[dst], iterations):
            twice = int(dst[owner[dst] != iterations][0])
            raise IllegalInstructionError(
                f"ALU writes accumulator tile {twice} in more than one iteration; results "
                "would depend on execution order, so split the instruction",
                index, field="micro-op dst",
            )
        current = self.acc[dst].astype(np.int64)
        if instruction.use_imm:
            operand: np.ndarray | int = instruction.imm
        elif instruction.src_inp:
            src = self._full_indices(
                instruction, uops, "src",
                (instruction.src_factor_outer, instruction.src_factor_inner), full_shape, index,
                config.inp_depth, "input",
            )
            # the input tiles are read, never written, by the ALU: no hazard
            operand = self.inp[src].astype(np.int64).reshape(current.shape)
        else:
            src = self._full_indices(
                instruction, uops, "src",
                (instruction.src_factor_outer, instruction.src_factor_inner), full_shape, index,
            )
            writer = owner[src]
            hazard = (writer >= 0) & (writer != iterations)
            if hazard.any():
                reader = int(np.flatnonzero(hazard)[0])
                raise IllegalInstructionError(
                    f"ALU iteration {reader} reads accumulator tile {int(src[reader])} that "
                    f"iteration {int(writer[reader])} of the same instruction writes; split "
                    "the instruction so reads never depend on its own writes",
                    index, field="micro-op src",
                )
            operand = self.acc[src].astype(np.int64)
        result = alu_apply(instruction.alu_op, current, operand, config.acc_bits,
                           product_shift(instruction))
        self.acc[dst] = result.astype(config.acc_dtype)

    def _full_indices(
        self,
        instruction: Alu,
        uops: slice,
        uop_field: str,
        factors: tuple[int, int],
        full_shape: tuple[int, int, int],
        index: int | None,
        depth: int | None = None,
        buffer: str = "accumulator",
    ) -> np.ndarray:
        loops = (range(instruction.loop_outer), range(instruction.loop_inner))
        grid, axes = self._index_grid(
            uops, uop_field, factors, loops, depth or self.config.acc_depth,
            f"ALU {uop_field} ({buffer})", index,
        )
        shape = [n if axis in axes else 1 for n, axis in zip(full_shape, _LOOP_AXES)]
        return np.broadcast_to(grid.reshape(shape), full_shape).ravel()


#: bytes of gathered tiles one block of a GEMM's loop nest may take (see _loop_pieces)
_GEMM_PIECE_BYTES = 64 << 20


def _loop_pieces(outer: int, inner: int, uops: int, limit: int
                 ) -> Iterator[tuple[range, range]]:
    """Split an ``outer x inner`` loop nest over ``uops`` micro-ops into blocks of at
    most ``max(limit, uops)`` iterations (whole outer iterations where they fit)."""
    per_outer = inner * uops
    if per_outer <= limit:
        step = max(1, limit // per_outer)
        for start in range(0, outer, step):
            yield range(start, min(start + step, outer)), range(inner)
        return
    step = max(1, limit // uops)
    for o in range(outer):
        for start in range(0, inner, step):
            yield range(o, o + 1), range(start, min(start + step, inner))


def product_shift(instruction: Alu) -> int:
    """How far a MUL shifts its exact product right: the immediate field of a MUL with a
    tensor operand (docs/isa.md section 5), 0 for every other ALU instruction."""
    return instruction.imm if instruction.alu_op == AluOp.MUL and not instruction.use_imm \
        else 0


def alu_apply(op: AluOp, value: np.ndarray, operand: np.ndarray | int, acc_bits: int,
              shift: int = 0) -> np.ndarray:
    """One ALU operation on int64 values of accumulator width (result not yet wrapped).

    SHR shifts arithmetically right by a non-negative operand and left by a
    negative one; shift distances saturate at ``acc_bits - 1``. MUL shifts its exact
    product (``2 * acc_bits`` wide, which int64 holds) arithmetically right by
    ``shift`` (``product_shift``) before the caller wraps it to ``acc_bits``.
    """
    if op == AluOp.MIN:
        return np.minimum(value, operand)
    if op == AluOp.MAX:
        return np.maximum(value, operand)
    if op == AluOp.ADD:
        return value + operand
    if op == AluOp.MUL:
        return np.right_shift(value * operand, shift)
    if op == AluOp.SHR:
        shift = np.broadcast_to(np.asarray(operand, dtype=np.int64), value.shape)
        right = np.right_shift(value, np.clip(shift, 0, acc_bits - 1))
        left = np.left_shift(value, np.clip(-shift, 0, acc_bits - 1))
        return np.where(shift >= 0, right, left)
    raise IllegalInstructionError(f"unknown ALU operation {op!r}")


def _sum_by_target(targets: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sum the rows of ``values`` that share a target index (one row per target out)."""
    order = np.argsort(targets, kind="stable")
    ordered = targets[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    if starts.size == targets.size:
        return targets, values
    return ordered[starts], np.add.reduceat(values[order], starts, axis=0)
