"""Programs the RTL benches run: the reference GEMMs, hand-written programs that
cover padding, micro-op loops and the ALU, and a generator of random legal
programs whose modules overlap through the token protocol.

Every program is checked with ``check_stream`` before it reaches the RTL, so a
generator bug shows up as an ISA error rather than as an RTL mismatch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from heterocc.accel_sim import (
    Alu,
    AluOp,
    Buffer,
    Gemm,
    HardwareConfig,
    Load,
    MicroOp,
    Program,
    ProgramBuilder,
    Store,
    check_stream,
)
from heterocc.accel_sim.reference_programs import (
    GemmTiling,
    Requantization,
    padded_conv3x3_program,
    tiled_gemm_program,
)


@dataclass(frozen=True)
class NamedProgram:
    """A program with a name for reports and test ids."""

    name: str
    program: Program


def _int8(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(-128, 128, shape)


def reference_gemms(config: HardwareConfig, rng: np.random.Generator) -> list[NamedProgram]:
    """Tiled GEMMs from reference_programs: one and two virtual threads, ACC and OUT."""
    k = 4 * config.block_in
    a = _int8(rng, (4 * config.batch, k))
    w = _int8(rng, (4 * config.block_out, k))
    fine = GemmTiling(block_rows=2, block_cols=2, k_chunk=2)
    return [
        NamedProgram("gemm_1thread", tiled_gemm_program(config, a, w, virtual_threads=1)),
        NamedProgram("gemm_2threads", tiled_gemm_program(config, a, w, virtual_threads=2)),
        NamedProgram(
            "gemm_2threads_fine",
            tiled_gemm_program(config, a, w, virtual_threads=2, tiling=fine, output=Buffer.OUT),
        ),
    ]


def requantized_gemm(config: HardwareConfig, rng: np.random.Generator) -> NamedProgram:
    """The stream the VTA target emits for a dense or convolution composite: a tiled
    GEMM with the requantizing ALU epilogue and a narrowing store."""
    k, n = 3 * config.block_in, 2 * config.block_out
    a = _int8(rng, (2 * config.batch, k))
    w = _int8(rng, (n, k))
    shift = rng.integers(12, 15, n)
    epilogue = Requantization(
        bias=rng.integers(-3000, 3000, n), limit=np.full(n, 1 << 20),
        multiplier=rng.integers(1, 5, n), rounding=1 << (shift - 1), shift=shift,
        zero_point=int(rng.integers(-5, 6)), qmin=-128, qmax=127,
    )
    program = tiled_gemm_program(config, a, w, virtual_threads=2, output=Buffer.OUT,
                                 epilogue=epilogue)
    return NamedProgram("gemm_requantize_epilogue", program)


def precise_requantized_gemm(config: HardwareConfig, rng: np.random.Generator
                             ) -> NamedProgram:
    """The requantizing epilogue with 31-bit multipliers: a MUL with a tensor operand
    whose 64-bit product is shifted right by its immediate (docs/isa.md section 5)."""
    k, n = 3 * config.block_in, 2 * config.block_out
    a = _int8(rng, (2 * config.batch, k))
    w = _int8(rng, (n, k))
    shift = rng.integers(10, 13, n)
    epilogue = Requantization(
        bias=rng.integers(-3000, 3000, n), limit=np.full(n, 1 << 20),
        multiplier=rng.integers(1 << 29, (1 << 31) - 1, n), rounding=1 << (shift - 1),
        shift=shift, zero_point=int(rng.integers(-5, 6)), qmin=-128, qmax=127,
        product_shift=22,
    )
    program = tiled_gemm_program(config, a, w, virtual_threads=2, output=Buffer.OUT,
                                 epilogue=epilogue)
    return NamedProgram("gemm_precise_requantize", program)


def convolution(config: HardwareConfig, rng: np.random.Generator,
                pad_value: int = 0) -> NamedProgram:
    """A 3x3 convolution through micro-op loops over a padded 2-D DMA (zeros, or
    ``pad_value`` in every element of the padding tiles, as for an input's zero point)."""
    height, width, blocks_in = 3, 4, 2
    image = _int8(rng, (height * width, blocks_in * config.block_in))
    weights = _int8(rng, (config.block_out, 9 * blocks_in * config.block_in))
    name = "convolution_padded" + (f"_value{pad_value}" if pad_value else "")
    return NamedProgram(name, padded_conv3x3_program(config, image, weights, height, width,
                                                     pad_value=pad_value))


def requantize(config: HardwareConfig, rng: np.random.Generator) -> NamedProgram:
    """GEMM, bias add from an accumulator operand, shift and clamp, narrowed store."""
    rows, k_tiles, n_tiles = 2, 3, 2
    a = _int8(rng, (rows * config.batch, k_tiles * config.block_in))
    w = _int8(rng, (n_tiles * config.block_out, k_tiles * config.block_in))
    bias = rng.integers(-5000, 5000, (config.batch, n_tiles * config.block_out))
    builder = ProgramBuilder(config)
    a_t = builder.tensor("A", Buffer.INP, data=a)
    w_t = builder.tensor("W", Buffer.WGT, data=w)
    b_t = builder.tensor("bias", Buffer.ACC, data=bias)
    out_t = builder.tensor("OUT", Buffer.OUT, shape=(rows * config.batch,
                                                     n_tiles * config.block_out))
    bias_slot = rows * n_tiles
    kernel = builder.uops(
        "k", [MicroOp(0, 0, 0), MicroOp(0, bias_slot, 0)]
        + [MicroOp(0, kk, kk) for kk in range(k_tiles)],
    )
    builder.emit(builder.load_uops(kernel))
    builder.emit(builder.load_tiles(b_t, bias_slot, 0, 0, 1, n_tiles))
    builder.emit(builder.load_tiles(a_t, 0, 0, 0, rows, k_tiles))
    builder.emit(builder.load_tiles(w_t, 0, 0, 0, n_tiles, k_tiles, push_next=True))
    tiles = dict(loop_outer=rows, loop_inner=n_tiles)
    dst = dict(dst_factor_outer=n_tiles, dst_factor_inner=1)
    acc = dict(acc_factor_outer=n_tiles, acc_factor_inner=1)
    builder.emit(Gemm(reset=True, uop_begin=0, uop_end=1, **acc, **tiles))
    builder.emit(Gemm(uop_begin=2, uop_end=2 + k_tiles, inp_factor_outer=k_tiles,
                      wgt_factor_inner=k_tiles, pop_prev=True, **acc, **tiles))
    builder.emit(Alu(alu_op=AluOp.ADD, uop_begin=1, uop_end=2, src_factor_inner=1,
                     **dst, **tiles))
    for op, imm in ((AluOp.MUL, 3), (AluOp.SHR, 6), (AluOp.MAX, -128), (AluOp.SHR, -1),
                    (AluOp.MIN, 127)):
        builder.emit(Alu(alu_op=op, use_imm=True, imm=imm, uop_begin=0, uop_end=1,
                         **dst, **tiles))
    builder.emit(Alu(alu_op=AluOp.ADD, use_imm=True, imm=-3, uop_begin=0, uop_end=1,
                     push_next=True, **dst, **tiles))
    builder.emit(builder.store_tiles(out_t, 0, 0, 0, rows, n_tiles, pop_prev=True,
                                     push_prev=True))
    builder.finish(pop_next=True)
    return NamedProgram("requantize_alu_chain", builder.build())


def residual_add(config: HardwareConfig, rng: np.random.Generator) -> NamedProgram:
    """Two int8 tensors brought into the accumulators by ALUs reading the input buffer
    (``src_inp``), each centered and scaled, added, rounded, shifted and clamped: the
    quantized residual addition. ACC starts from whatever a previous run left there, so
    the first pass multiplies by 0."""
    tiles = 3
    a = _int8(rng, (tiles * config.batch, config.block_in))
    b = _int8(rng, (tiles * config.batch, config.block_in))
    builder = ProgramBuilder(config)
    a_t = builder.tensor("A", Buffer.INP, data=a)
    b_t = builder.tensor("B", Buffer.INP, data=b)
    out_t = builder.tensor("OUT", Buffer.OUT, shape=(tiles * config.batch, config.block_out))
    # dst t (a's sum) and t + tiles (b's), src the input tiles t and t + tiles
    kernel = builder.uops("k", [MicroOp(0, 0), MicroOp(tiles, tiles), MicroOp(0, tiles)])
    builder.emit(builder.load_uops(kernel))
    builder.emit(builder.load_tiles(a_t, 0, 0, 0, tiles, 1))
    builder.emit(builder.load_tiles(b_t, tiles, 0, 0, tiles, 1, push_next=True))
    loop = dict(loop_outer=tiles, loop_inner=1, dst_factor_outer=1, src_factor_outer=1)
    both = dict(uop_begin=0, uop_end=2, **loop)
    builder.emit(Alu(alu_op=AluOp.MUL, use_imm=True, imm=0, pop_prev=True, **both))
    builder.emit(Alu(alu_op=AluOp.ADD, src_inp=True, **both))
    for uop, (zero, multiplier) in enumerate(((-3, 11000), (5, 23000))):
        one = dict(uop_begin=uop, uop_end=uop + 1, **loop)
        builder.emit(Alu(alu_op=AluOp.ADD, use_imm=True, imm=-zero, **one))
        builder.emit(Alu(alu_op=AluOp.MUL, use_imm=True, imm=multiplier, **one))
    # a's sum += b's sum (micro-op 2: dst t, src t + tiles in ACC)
    builder.emit(Alu(alu_op=AluOp.ADD, uop_begin=2, uop_end=3, **loop))
    first = dict(uop_begin=0, uop_end=1, **loop)
    for op, imm in ((AluOp.ADD, 1 << 13), (AluOp.SHR, 14), (AluOp.ADD, 4),
                    (AluOp.MAX, -128), (AluOp.MIN, 127)):
        builder.emit(Alu(alu_op=op, use_imm=True, imm=imm, **first,
                         push_next=op == AluOp.MIN))
    builder.emit(builder.store_tiles(out_t, 0, 0, 0, tiles, 1, pop_prev=True, push_prev=True))
    builder.finish(pop_next=True)
    return NamedProgram("residual_add_src_inp", builder.build())


# --- random legal programs ---------------------------------------------------------------

#: SRAM entries random programs use at the bottom of each buffer, small so that
#: random indices hit loaded data.
_WINDOW = 24
_DRAM_TILES = 48
#: a padding-only LOAD of _CLEAR_SIDE x _CLEAR_SIDE zero tiles clears the window
#: and whatever factors add to it.
_CLEAR_SIDE = 8


@dataclass
class _RandomProgramContext:
    config: HardwareConfig
    rng: np.random.Generator
    builder: ProgramBuilder

    def integer(self, low: int, high: int) -> int:
        """A random integer in [low, high]."""
        return int(self.rng.integers(low, high + 1))


def _random_dma_block(ctx: _RandomProgramContext, depth: int, padded: bool) -> dict[str, int]:
    """Sizes, pads and an SRAM base of a 2-D transfer that fits ``depth`` entries."""
    while True:
        y_size, x_size = ctx.integer(1, 3), ctx.integer(1, 4)
        pads = [ctx.integer(0, 1) if padded else 0 for _ in range(4)]
        entries = (pads[0] + y_size + pads[1]) * (pads[2] + x_size + pads[3])
        if entries <= min(depth, _WINDOW):
            break
    return dict(
        sram_base=ctx.integer(0, min(depth, _WINDOW) - entries), y_size=y_size, x_size=x_size,
        y_pad_top=pads[0], y_pad_bottom=pads[1], x_pad_left=pads[2], x_pad_right=pads[3],
    )


def _random_load(ctx: _RandomProgramContext, tensor, buffer: Buffer, depth: int) -> Load:
    """A random padded LOAD; an INP load pads with a random int8 value half the time."""
    block = _random_dma_block(ctx, depth, padded=True)
    x_stride = block["x_size"] + ctx.integer(0, 3)
    span = (block["y_size"] - 1) * x_stride + block["x_size"]
    offset = ctx.integer(0, tensor.grid_rows * tensor.grid_cols - span)
    pad_value = ctx.integer(-128, 127) if buffer == Buffer.INP and ctx.integer(0, 1) else 0
    return Load(buffer=buffer, dram_base=tensor.tile_base + offset, x_stride=x_stride,
                pad_value=pad_value, **block)


def _random_gemm(ctx: _RandomProgramContext, kernel_base: int, kernel_size: int) -> Gemm:
    begin = kernel_base + ctx.integer(0, kernel_size - 1)
    end = ctx.integer(begin + 1, kernel_base + kernel_size)
    return Gemm(
        reset=ctx.integer(0, 4) == 0, uop_begin=begin, uop_end=end,
        loop_outer=ctx.integer(1, 3), loop_inner=ctx.integer(1, 3),
        acc_factor_outer=ctx.integer(0, 3), acc_factor_inner=ctx.integer(0, 2),
        inp_factor_outer=ctx.integer(0, 3), inp_factor_inner=ctx.integer(0, 2),
        wgt_factor_outer=ctx.integer(0, 3), wgt_factor_inner=ctx.integer(0, 2),
    )


def _random_alu(ctx: _RandomProgramContext, kernel_base: int, kernel_size: int,
                same_tile: bool) -> Alu:
    """An ALU whose iterations write distinct tiles and read no other iteration's tile.

    The kernel's micro-ops have dst = k (distinct) and src = k or k + _WINDOW (both
    inside the input buffer's loaded window too, for ``src_inp``); with
    the inner factor the kernel length and the outer factor one inner sweep, every
    iteration writes its own tile, and sources either alias their own destination
    or lie above every destination.
    """
    outer, inner = ctx.integer(1, 2), ctx.integer(1, 2)
    op = AluOp(ctx.integer(0, 4))
    use_imm = ctx.integer(0, 1) == 1
    imm = ctx.integer(-40, 40) if op == AluOp.SHR else ctx.integer(-(2**15), 2**15 - 1)
    if op == AluOp.MUL and not use_imm:
        # a tensor MUL's imm is how far its exact product shifts right
        imm %= 2 * ctx.config.acc_bits
    dst_inner, dst_outer = kernel_size, kernel_size * inner
    # a quarter of the tensor operands come from the input buffer (never written by an ALU)
    src_inp = not use_imm and ctx.config.block_in == ctx.config.block_out and \
        ctx.integer(0, 3) == 0
    return Alu(
        alu_op=op, use_imm=use_imm, imm=imm, src_inp=src_inp, uop_begin=kernel_base,
        uop_end=kernel_base + kernel_size, loop_outer=outer, loop_inner=inner,
        dst_factor_outer=dst_outer, dst_factor_inner=dst_inner,
        src_factor_outer=dst_outer if same_tile else 0,
        src_factor_inner=dst_inner if same_tile else 0,
    )


def random_program(config: HardwareConfig, seed: int, phases: int = 3) -> NamedProgram:
    """A random legal program of ``phases`` load -> compute -> store rounds.

    Load round k waits for compute round k-1 (it overwrites its inputs), compute
    round k waits for load round k and for store round k-1 (it overwrites the
    accumulators being stored), store round k waits for compute round k. So
    loads of the next round overlap stores of the previous one.
    """
    rng = np.random.default_rng(seed)
    builder = ProgramBuilder(config)
    ctx = _RandomProgramContext(config, rng, builder)
    inp = builder.tensor("inp", Buffer.INP, data=_int8(rng, (config.batch,
                                                             config.block_in * _DRAM_TILES)))
    wgt = builder.tensor("wgt", Buffer.WGT, data=_int8(rng, (config.block_out,
                                                             config.block_in * _DRAM_TILES)))
    acc_bound = 1 << (config.acc_bits - 1)
    acc = builder.tensor("acc", Buffer.ACC, data=rng.integers(
        -acc_bound, acc_bound, (config.batch, config.block_out * _DRAM_TILES)))
    gemm_kernel = [MicroOp(ctx.integer(0, _WINDOW - 1), ctx.integer(0, _WINDOW - 1),
                           ctx.integer(0, min(_WINDOW, config.wgt_depth) - 1))
                   for _ in range(8)]
    alu_kernel = [MicroOp(k, k) for k in range(4)] + [MicroOp(k, k + _WINDOW) for k in range(4)]
    # a leading spare word puts the kernels at an odd word address, so that micro-op
    # loads exercise words that straddle bus beats
    kernels = builder.uops("kernels", [MicroOp(0, 0)] + gemm_kernel + alu_kernel)
    outputs = {
        buffer: builder.tensor(f"out_{buffer.name.lower()}", buffer, shape=(
            config.batch, config.block_out * phases * 4 * _WINDOW))
        for buffer in (Buffer.OUT, Buffer.ACC)
    }
    next_output = dict.fromkeys(outputs, 0)

    def emit_round(instructions: list, pops: dict[str, bool], pushes: dict[str, bool]) -> None:
        instructions[0] = replace(instructions[0], **pops)
        instructions[-1] = replace(instructions[-1], **pushes)
        for instruction in instructions:
            builder.emit(instruction)

    # Hardware keeps SRAM contents from run to run (the simulator starts from zeros),
    # so clear the windows the random indices reach with padding-only LOADs first.
    clear = dict(dram_base=0, y_size=0, x_size=0, x_stride=0, y_pad_top=_CLEAR_SIDE,
                 x_pad_left=_CLEAR_SIDE)
    for buffer in (Buffer.INP, Buffer.WGT, Buffer.ACC):
        builder.emit(Load(buffer=buffer, sram_base=0, **clear))
    uop_base = ctx.integer(0, 5)
    for phase in range(phases):
        more = phase < phases - 1
        loads = [
            _random_load(ctx, *((inp, Buffer.INP, config.inp_depth) if ctx.integer(0, 1)
                                else (wgt, Buffer.WGT, config.wgt_depth)))
            for _ in range(ctx.integer(1, 3))
        ]
        emit_round(loads, {"pop_next": phase > 0}, {"push_next": True})

        compute: list = []
        if phase == 0:
            compute.append(Load(buffer=Buffer.UOP, sram_base=uop_base,
                                dram_base=kernels.tile_base + 1,
                                y_size=1, x_size=len(gemm_kernel) + len(alu_kernel),
                                x_stride=len(gemm_kernel) + len(alu_kernel),
                                x_pad_left=ctx.integer(0, 1)))
            uop_base += compute[-1].x_pad_left
        if ctx.integer(0, 1):
            compute.append(_random_load(ctx, acc, Buffer.ACC, config.acc_depth))
        compute += [_random_gemm(ctx, uop_base, len(gemm_kernel)) for _ in range(ctx.integer(1, 3))]
        alu_base = uop_base + len(gemm_kernel)
        compute += [_random_alu(ctx, alu_base + (0 if same else 4), 4, same)
                    for same in rng.integers(0, 2, ctx.integer(0, 3)).astype(bool)]
        emit_round(compute, {"pop_prev": True, "pop_next": phase > 0},
                   {"push_prev": more, "push_next": True})

        stores = []
        for _ in range(ctx.integer(1, 2)):
            buffer = Buffer.OUT if ctx.integer(0, 1) else Buffer.ACC
            block = _random_dma_block(ctx, config.acc_depth, padded=False)
            x_stride = block["x_size"] + ctx.integer(0, 2)
            tensor = outputs[buffer]
            stores.append(Store(buffer=buffer, dram_base=tensor.tile_base + next_output[buffer],
                                x_stride=x_stride, **block))
            next_output[buffer] += (block["y_size"] - 1) * x_stride + block["x_size"]
        emit_round(stores, {"pop_prev": True}, {"push_prev": True})
    builder.finish(pop_next=True)
    program = builder.build()
    check_stream(program.instructions, config, dram_bytes=program.dram.size)
    return NamedProgram(f"random_{seed}", program)


def ci_programs(config: HardwareConfig, random_count: int, seed: int = 0) -> list[NamedProgram]:
    """The program set the system bench runs: reference, hand-written and random."""
    rng = np.random.default_rng(seed)
    programs = reference_gemms(config, rng) + [
        requantized_gemm(config, rng), convolution(config, rng), requantize(config, rng),
        convolution(config, rng, pad_value=-7), residual_add(config, rng),
        precise_requantized_gemm(config, rng),
    ]
    programs += [random_program(config, seed=1000 + index) for index in range(random_count)]
    return programs
