"""Template instruction streams: a GEMM's or a direct convolution's program built once
per shape, tiling, thread count and epilogue signature, and filled per layer.

What the stream depends on is the geometry and the kinds of the epilogue's steps, not
the weights, the column constants or the immediates' values: those are packed into a
copy of the template's DRAM image and patched into its instructions
(``filled_program``), so the layers of a network that share a shape share one lowered,
generated stream (and one timing-model run, ``conv_timing``).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools

import numpy as np

from heterocc.accel_sim import HardwareConfig, schedule_stream
from heterocc.accel_sim.isa import Alu, Buffer, Load
from heterocc.accel_sim.program import (
    DramTensor,
    Program,
    ProgramBuilder,
    element_dtype,
    pack_tiles,
)
from heterocc.accel_sim.reference_programs import GemmTiling, Requantization
from heterocc.sdk import CompileError, te, tir

from .conv import (
    MAX_CONV_CANDIDATES,
    ConvGeometry,
    ConvTiling,
    candidate_conv_tilings,
    conv_cycles_bound,
    packed_conv2d,
    schedule_packed_conv2d,
)
from .dae import check_program, emit_program
from .epilogue import EpilogueStep, plan_epilogue
from .schedule import constant_blocks, packed_gemm, schedule_packed_gemm
from .tiling import task_threads
from .vthreads import interleave_virtual_threads


def usable_threads(config: HardwareConfig, rows: int, n: int, tiling: GemmTiling,
                   virtual_threads: int) -> int:
    """``virtual_threads``, or 1 when the tiling's task count does not split over them."""
    return task_threads(rows // config.batch, n // config.block_out, tiling, virtual_threads)


def lower_gemm(config: HardwareConfig, rows: int, k: int, n: int, tiling: GemmTiling,
               virtual_threads: int, epilogue: list[EpilogueStep] | None,
               name: str = "gemm") -> tuple[tir.PrimFunc, list[te.Tensor]]:
    """The accelerator TIR of a (rows x k) @ (k x n) GEMM with its epilogue, virtual
    threads interleaved, and the TE tensors of its parameters."""
    gemm = packed_gemm(config, rows // config.batch, k // config.block_in,
                       n // config.block_out, epilogue)
    schedule = schedule_packed_gemm(gemm, tiling, virtual_threads)
    func = te.lower(schedule, gemm.args, name=name, optimize=False)
    return interleave_virtual_threads(tir.remove_true_guards(func)), gemm.args


def gemm_program(config: HardwareConfig, rows: int, w: np.ndarray, tiling: GemmTiling,
                 virtual_threads: int,
                 epilogue: Requantization | list[EpilogueStep] | None) -> Program:
    """The program computing tensor "C" = epilogue(A @ W.T) for an A of ``rows`` rows
    (tensor "A", written per call) and the constant W (N x K, packed here). A
    ``Requantization`` is first planned into ALU steps (``epilogue.plan_epilogue``).

    The instruction stream depends on the shapes, the tiling, the threads and the
    kinds of the epilogue's steps, not on the weights, the column constants or the
    immediates' values, so it is generated once per such combination (``_stream``);
    each call fills in its own immediates and packs its own constants into a copy of
    that program's DRAM image."""
    n, k = w.shape
    if isinstance(epilogue, Requantization):
        epilogue = plan_epilogue(epilogue, w, n, config.acc_bits)
    stream = _stream(config, rows, k, n, tiling, virtual_threads, epilogue_signature(epilogue))
    return filled_program(stream, config, {"W": w}, epilogue, n)


def epilogue_signature(epilogue: list[EpilogueStep] | None) -> tuple | None:
    """What a template stream depends on of an epilogue: its steps' names and ops,
    which take an immediate, and their product shifts (a MUL's immediate field)."""
    return None if epilogue is None else tuple(
        (step.name, step.op, step.immediate is not None, step.product_shift)
        for step in epilogue)


def _template_epilogue(signature: tuple | None, n: int) -> list[EpilogueStep] | None:
    """An epilogue of the steps ``signature`` names, with zero column constants and
    placeholder immediates (``_PLACEHOLDER`` + their index)."""
    if signature is None:
        return None
    epilogue, count = [], itertools.count(_PLACEHOLDER)
    for name, op, is_immediate, product_shift in signature:
        epilogue.append(EpilogueStep(name, op, immediate=next(count)) if is_immediate
                        else EpilogueStep(name, op, column=np.zeros(n, np.int64),
                                          product_shift=product_shift))
    return epilogue


def filled_program(stream: Program, config: HardwareConfig, weights: dict[str, np.ndarray],
            epilogue: list[EpilogueStep] | None, n: int, pad_value: int = 0) -> Program:
    """The template ``stream`` with its weights, its epilogue's column constants (``n``
    columns), its immediates and the value its padded input LOADs pad with (the
    input's zero point) filled in."""
    dram = stream.dram.copy()
    constants = dict(weights)
    immediates = {}
    if epilogue is not None:
        blocks = constant_blocks(config, epilogue, n // config.block_out)
        names = [step.name for step in epilogue if step.column is not None]
        constants.update((name, block.transpose(1, 0, 2).reshape(config.batch, n))
                         for name, block in zip(names, blocks))
        steps = [step for step in epilogue if step.immediate is not None]
        immediates = {_PLACEHOLDER + i: step.immediate for i, step in enumerate(steps)}
    for name, matrix in constants.items():
        _write_tensor(config, stream.tensors[name], matrix, dram)
    instructions = [_fill_pad_value(_fill_immediate(i, immediates), pad_value)
                    for i in stream.instructions]
    return dataclasses.replace(stream, instructions=instructions, dram=dram)


def _fill_pad_value(instruction, pad_value: int):
    """A template stream pads its input with 0; a padded input LOAD gets ``pad_value``."""
    if not (pad_value and isinstance(instruction, Load) and instruction.buffer == Buffer.INP):
        return instruction
    padded = instruction.padded_rows * instruction.padded_cols != \
        instruction.y_size * instruction.x_size
    return dataclasses.replace(instruction, pad_value=pad_value) if padded else instruction


#: the template stream's immediates: placeholder + index of the immediate step (values
#: that no simplification touches, distinct from each other)
_PLACEHOLDER = 1000


def _fill_immediate(instruction, immediates: dict[int, int]):
    if not (isinstance(instruction, Alu) and instruction.use_imm):
        return instruction
    if instruction.imm not in immediates:
        raise CompileError(f"ALU immediate {instruction.imm} of the template stream is not a "
                           "placeholder of an epilogue step")
    return dataclasses.replace(instruction, imm=immediates[instruction.imm])


def _write_tensor(config: HardwareConfig, tensor: DramTensor, matrix: np.ndarray,
                  dram: np.ndarray) -> None:
    dtype = element_dtype(config, tensor.buffer)
    if not np.array_equal(matrix.astype(dtype), matrix):
        raise CompileError(f"tensor {tensor.name!r} holds values that do not fit {dtype.name}")
    packed = pack_tiles(matrix.astype(dtype), tensor.tile_rows, tensor.tile_cols).tobytes()
    dram[tensor.byte_address: tensor.byte_address + len(packed)] = np.frombuffer(packed,
                                                                                 np.uint8)


@functools.lru_cache(maxsize=32)
def _stream(config: HardwareConfig, rows: int, k: int, n: int, tiling: GemmTiling,
            virtual_threads: int, signature: tuple | None) -> Program:
    """The program of a GEMM with zero weights and zero column constants, for an
    epilogue of the steps ``signature`` names ((name, op, whether its operand is an
    immediate)); immediates are placeholders (``_PLACEHOLDER`` + their index)."""
    epilogue = _template_epilogue(signature, n)
    func, args = lower_gemm(config, rows, k, n, tiling, virtual_threads, epilogue)
    builder = ProgramBuilder(config)
    tensors = {"A": builder.tensor("A", Buffer.INP, shape=(rows, k)),
               "W": builder.tensor("W", Buffer.WGT, shape=(n, k))}
    return _emit(func, args, config, builder, tensors, "C", (rows, n), n)


def _emit(func: tir.PrimFunc, args: list[te.Tensor], config: HardwareConfig,
          builder: ProgramBuilder, tensors: dict[str, DramTensor], output: str,
          output_shape: tuple[int, int], columns: int, check: bool = True) -> Program:
    """The program of ``func``: ``tensors`` holds the input and weight tensors; the
    epilogue's constants (``args[2:-1]``, one per each of ``columns`` output channels)
    and the output (as ``output``: int8 after an epilogue, else the accumulators) are
    added."""
    for tensor in args[2:-1]:
        tensors[tensor.name] = builder.tensor(tensor.name, Buffer.ACC,
                                              shape=(config.batch, columns))
    kind = Buffer.OUT if args[-1].dtype == "int8" else Buffer.ACC
    tensors[args[-1].name] = builder.tensor(output, kind, shape=output_shape)
    return emit_program(func, config, builder, tensors, check)


@functools.lru_cache(maxsize=64)
def conv_stream(config: HardwareConfig, g: ConvGeometry, tiling: ConvTiling,
                virtual_threads: int, signature: tuple | None) -> Program:
    """The program of a direct convolution with zero weights, zero column constants and
    zero padding (see ``_stream``; ``filled_program`` sets each layer's own): tensors "X"
    (blocked input), "W" (blocked weights) and "Y". Its stream has passed the checker."""
    program = _candidate_conv_stream(config, g, tiling, virtual_threads, signature)
    check_program(program, config)
    return program


@functools.lru_cache(maxsize=64)
def _candidate_conv_stream(config: HardwareConfig, g: ConvGeometry, tiling: ConvTiling,
                           virtual_threads: int, signature: tuple | None) -> Program:
    """``conv_stream``'s program before the stream checker: what a candidate tiling is
    timed by (``conv_timing``), so only the tiling chosen pays for the checker."""
    bi, bo, batch = config.block_in, config.block_out, config.batch
    epilogue = _template_epilogue(signature, g.filters * bo)
    conv = packed_conv2d(config, g, epilogue)
    schedule = schedule_packed_conv2d(conv, g, tiling, virtual_threads)
    func = te.lower(schedule, conv.args, name="conv2d", optimize=False)
    func = interleave_virtual_threads(tir.remove_true_guards(func))
    builder = ProgramBuilder(config)
    inputs = g.batches * g.channels * g.height * g.width * batch
    weights = g.filters * g.channels * g.kernel[0] * g.kernel[1] * bo
    outputs = g.batches * g.filters * g.out_height * g.out_width * batch
    tensors = {"X": builder.tensor("X", Buffer.INP, shape=(inputs, bi)),
               "W": builder.tensor("W", Buffer.WGT, shape=(weights, bi))}
    return _emit(func, conv.args, config, builder, tensors, "Y", (outputs, bo), g.filters * bo,
                 check=False)


@functools.lru_cache(maxsize=64)
def conv_timing(config: HardwareConfig, g: ConvGeometry, tiling: ConvTiling,
                virtual_threads: int, signature: tuple | None):
    """The timing model's report of ``conv_stream``'s program (the same for every layer
    that shares the stream: timing does not depend on weights, constants or padding).
    The timing model validates each instruction; the stream checker's further rules are
    left to ``conv_stream``, which the chosen tiling's program comes from."""
    stream = _candidate_conv_stream(config, g, tiling, virtual_threads, signature)
    return schedule_stream(stream.instructions, config)


@functools.lru_cache(maxsize=64)
def best_conv_tiling(config: HardwareConfig, g: ConvGeometry, threads: int,
                     signature: tuple | None) -> tuple[ConvTiling, int] | None:
    """(the tiling with the fewest modelled cycles, its thread count) for a direct
    convolution with an epilogue of ``signature``'s steps, or None when no tiling fits
    the buffers. As for GEMMs (``tiling.best_tiling``), candidates are timed in the
    order of a lower bound on their cycles until no bound can beat the best."""
    columns = sum(1 for _, _, immediate, _ in signature or () if not immediate)
    alu_steps = len(signature or ())
    best = None  # (cycles, tiling, threads)
    for count in dict.fromkeys((threads, 1)):
        candidates = candidate_conv_tilings(config, g, count, columns * g.filters)
        bounds = {t: conv_cycles_bound(config, g, t, alu_steps) for t in candidates}
        for tiling in sorted(candidates, key=bounds.__getitem__)[:MAX_CONV_CANDIDATES]:
            if best is not None and bounds[tiling] > best[0]:
                break
            try:
                cycles = conv_timing(config, g, tiling, count, signature).total_cycles
            except CompileError:
                continue  # e.g. a window beyond the LOAD's padding fields
            if best is None or cycles < best[0]:
                best = (cycles, tiling, count)
        if best is not None:
            break
    return None if best is None else (best[1], best[2])
