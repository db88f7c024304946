"""The bit-exact functional simulator: DRAM as a NumPy byte array, the four SRAM
buffers, and the semantics of every instruction, vectorized per instruction.

A GEMM instruction becomes a few gathers and one ``einsum`` (a BLAS matrix
product whenever the loop nest allows it) on exactly representable float64
values; an ALU instruction becomes one vectorized expression over all its
iterations. Accumulation wraps modulo 2**acc_bits as the hardware does.
"""

from __future__ import annotations

import math

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
    Finish,
    Gemm,
    Instruction,
    Load,
    LoopInstruction,
    Store,
    buffer_depth,
    dram_unit_bytes,
)

_LOOP_AXES = "oiu"  # outer loop, inner loop, micro-op
_FLOAT_EXACT_LIMIT = 1 << 53


def _require(condition: bool, message: str, index: int | None) -> None:
    if not condition:
        raise IllegalInstructionError(message, index)


def dma_dram_span(instruction: DmaInstruction, config: HardwareConfig) -> tuple[int, int]:
    """Byte range [first, end) of DRAM a transfer touches (empty when it moves no tile)."""
    unit = dram_unit_bytes(config, instruction.buffer)
    if instruction.y_size == 0 or instruction.x_size == 0:
        return 0, 0
    first = instruction.dram_base * unit
    last_tile = instruction.dram_base + (instruction.y_size - 1) * instruction.x_stride
    return first, (last_tile + instruction.x_size) * unit


def dma_sram_tiles(instruction: DmaInstruction) -> int:
    """SRAM entries a transfer covers from sram_base (padded block for a LOAD)."""
    if isinstance(instruction, Load):
        return instruction.padded_rows * instruction.padded_cols
    return instruction.y_size * instruction.x_size


class FunctionalSimulator:
    """The architectural state of one accelerator and an executor for its instructions.

    ``dram`` is a 1-D uint8 array the simulator reads and writes in place.
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
        #: multiply-accumulates performed so far (non-reset GEMM iterations).
        self.macs = 0

    def execute(self, instruction: Instruction, index: int | None = None) -> None:
        """Apply one instruction to the state; errors name ``index``."""
        if isinstance(instruction, Load):
            self._load(instruction, index)
        elif isinstance(instruction, Store):
            self._store(instruction, index)
        elif isinstance(instruction, Gemm):
            self._gemm(instruction, index)
        elif isinstance(instruction, Alu):
            self._alu(instruction, index)
        elif not isinstance(instruction, Finish):
            raise IllegalInstructionError(f"cannot execute {type(instruction).__name__}", index)

    # --- DMA ------------------------------------------------------------------------
    def _dram_block(self, instruction: DmaInstruction, index: int | None) -> np.ndarray:
        """A (y_size, x_size * unit) strided view of the DRAM bytes a transfer touches."""
        unit = dram_unit_bytes(self.config, instruction.buffer)
        first, end = dma_dram_span(instruction, self.config)
        _require(
            end <= self.dram.size,
            f"{type(instruction).__name__.upper()} {instruction.buffer.name} touches DRAM bytes "
            f"[{first}, {end}) beyond the {self.dram.size}-byte DRAM; check dram_base, "
            "y_size, x_size and x_stride",
            index,
        )
        return as_strided(
            self.dram[first:],
            shape=(instruction.y_size, instruction.x_size * unit),
            strides=(instruction.x_stride * unit, 1),
            writeable=isinstance(instruction, Store),
        )

    def _sram_block(self, instruction: DmaInstruction, index: int | None) -> tuple[int, int]:
        depth = buffer_depth(self.config, instruction.buffer)
        end = instruction.sram_base + dma_sram_tiles(instruction)
        _require(
            end <= depth,
            f"{type(instruction).__name__.upper()} {instruction.buffer.name} covers SRAM entries "
            f"[{instruction.sram_base}, {end}) beyond the buffer's depth {depth}",
            index,
        )
        return instruction.sram_base, end

    def _load(self, instruction: Load, index: int | None) -> None:
        config = self.config
        _require(
            instruction.buffer != Buffer.OUT,
            "LOAD cannot target OUT (a STORE-only view of the accumulator); load ACC instead",
            index,
        )
        begin, end = self._sram_block(instruction, index)
        raw = np.ascontiguousarray(self._dram_block(instruction, index))
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

    def _store(self, instruction: Store, index: int | None) -> None:
        _require(
            instruction.buffer in (Buffer.OUT, Buffer.ACC),
            f"STORE reads the accumulator as OUT or ACC, not {instruction.buffer.name}",
            index,
        )
        begin, end = self._sram_block(instruction, index)
        if begin == end:
            return
        tiles = self.acc[begin:end]
        if instruction.buffer == Buffer.OUT:
            tiles = tiles.astype(self.config.out_dtype)
        data = tiles.astype(tiles.dtype.newbyteorder("<"), copy=False)
        self._dram_block(instruction, index)[...] = data.view(np.uint8).reshape(
            instruction.y_size, instruction.x_size * data[0].nbytes
        )

    # --- loops ------------------------------------------------------------------------
    def _uop_range(self, instruction: LoopInstruction, index: int | None) -> slice:
        _require(
            instruction.uop_begin <= instruction.uop_end <= self.config.uop_depth,
            f"micro-op range [{instruction.uop_begin}, {instruction.uop_end}) is not inside "
            f"the micro-op buffer [0, {self.config.uop_depth})",
            index,
        )
        return slice(instruction.uop_begin, instruction.uop_end)

    def _index_grid(
        self,
        instruction: LoopInstruction,
        uop_range: slice,
        uop_field: str,
        factors: tuple[int, int],
        depth: int,
        what: str,
        index: int | None,
    ) -> tuple[np.ndarray, str]:
        """Tile indices ``o * f_outer + i * f_inner + uop.field`` over the axes they vary on.

        Returns the indices and the loop axes ("o", "i", "u" in that order) they
        span; an axis along which the index is constant is left out.
        """
        values = self._uops[uop_field][uop_range]
        extents = (instruction.loop_outer, instruction.loop_inner, values.size)
        varies = (
            factors[0] != 0 and extents[0] > 1,
            factors[1] != 0 and extents[1] > 1,
            extents[2] > 1 and bool((values != values[0]).any()),
        )
        outer = np.arange(extents[0] if varies[0] else 1).reshape(-1, 1, 1) * factors[0]
        inner = np.arange(extents[1] if varies[1] else 1).reshape(1, -1, 1) * factors[1]
        grid = outer + inner + (values if varies[2] else values[:1]).reshape(1, 1, -1)
        axes = "".join(axis for axis, vary in zip(_LOOP_AXES, varies) if vary)
        highest = int(grid.max())
        _require(
            highest < depth,
            f"{what} index {highest} is beyond the buffer's depth {depth} (micro-ops "
            f"[{uop_range.start}, {uop_range.stop}) with factors {factors})",
            index,
        )
        return grid.reshape([n for n, vary in zip(extents, varies) if vary]), axes

    def _gemm(self, instruction: Gemm, index: int | None) -> None:
        config = self.config
        uops = self._uop_range(instruction, index)
        if instruction.iterations == 0:
            return
        extents = dict(zip(_LOOP_AXES, (instruction.loop_outer, instruction.loop_inner,
                                        uops.stop - uops.start)))
        dst, dst_axes = self._index_grid(
            instruction, uops, "dst",
            (instruction.acc_factor_outer, instruction.acc_factor_inner),
            config.acc_depth, "GEMM accumulator", index,
        )
        if instruction.reset:
            self.acc[np.unique(dst)] = 0
            return
        src, src_axes = self._index_grid(
            instruction, uops, "src",
            (instruction.inp_factor_outer, instruction.inp_factor_inner),
            config.inp_depth, "GEMM input", index,
        )
        wgt, wgt_axes = self._index_grid(
            instruction, uops, "wgt",
            (instruction.wgt_factor_outer, instruction.wgt_factor_inner),
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
        # float64 reaches BLAS and is exact while every partial sum stays below 2**53
        compute_type = np.float64 if bound < _FLOAT_EXACT_LIMIT else np.int64
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
        self.macs += instruction.iterations * config.macs_per_iteration

    def _alu(self, instruction: Alu, index: int | None) -> None:
        config = self.config
        _require(
            not instruction.src_inp or instruction.use_imm
            or config.block_in == config.block_out,
            f"ALU with src_inp needs input tiles shaped like accumulator tiles, but "
            f"block_in={config.block_in} != block_out={config.block_out}",
            index,
        )
        uops = self._uop_range(instruction, index)
        if instruction.iterations == 0:
            return
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
                index,
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
                    index,
                )
            operand = self.acc[src].astype(np.int64)
        result = alu_apply(instruction.alu_op, current, operand, config.acc_bits)
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
        grid, axes = self._index_grid(
            instruction, uops, uop_field, factors, depth or self.config.acc_depth,
            f"ALU {uop_field} ({buffer})", index,
        )
        shape = [n if axis in axes else 1 for n, axis in zip(full_shape, _LOOP_AXES)]
        return np.broadcast_to(grid.reshape(shape), full_shape).ravel()


def alu_apply(op: AluOp, value: np.ndarray, operand: np.ndarray | int, acc_bits: int) -> np.ndarray:
    """One ALU operation on int64 values of accumulator width (result not yet wrapped).

    SHR shifts arithmetically right by a non-negative operand and left by a
    negative one; shift distances saturate at ``acc_bits - 1``.
    """
    if op == AluOp.MIN:
        return np.minimum(value, operand)
    if op == AluOp.MAX:
        return np.maximum(value, operand)
    if op == AluOp.ADD:
        return value + operand
    if op == AluOp.MUL:
        return value * operand
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
