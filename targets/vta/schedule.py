"""The packed GEMM with its requantizing epilogue in TE, and its accelerator schedule.

Operands are in the accelerator's block layout: the input ``A`` is
(M/batch, K/block_in, batch, block_in), the weights ``W`` (N/block_out,
K/block_in, block_out, block_in), the accumulator ``C`` and the output
(M/batch, N/block_out, batch, block_out). The epilogue's per-column constants
are (N/block_out, batch, block_out) tensors, one block row per column tile.

The schedule tiles the output into ``GemmTiling`` blocks (one task per block),
splits the tasks over virtual threads, computes each task's accumulator block in
the accumulator buffer, stages the input and weight chunks of each reduction step
into their buffers, keeps the epilogue constants resident in the accumulator
buffer, and tensorizes the tile loops with the GEMM intrinsic.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from heterocc.accel_sim import HardwareConfig
from heterocc.accel_sim.reference_programs import GemmTiling
from heterocc.sdk import CompileError, te

from .epilogue import EpilogueStep, column_steps
from .intrin import ACC_SCOPE, INP_SCOPE, WGT_SCOPE, gemm_intrin

#: TE form of each ALU operation of the epilogue
_OPERATIONS = {"add": lambda x, c: x + c, "mul": lambda x, c: x * c,
               "shr": lambda x, c: x >> c, "min": te.minimum, "max": te.maximum}


def _shifted_product(shift: int):
    """``int32((int64(x) * int64(c)) >> shift)``: a MUL whose exact product shifts right
    (the ALU's tensor MUL with ``shift`` in its immediate field)."""
    def f(x, c):
        wide = te.cast("int64", x) * te.cast("int64", c)
        return te.cast("int32", wide >> te.const(shift, "int64"))
    return f


@dataclass
class PackedGemm:
    """The tensors of one packed GEMM: ``out = epilogue(acc)``, ``acc = A @ W.T``."""

    config: HardwareConfig
    inp: te.Tensor
    wgt: te.Tensor
    acc: te.Tensor
    constants: list[te.Tensor]
    epilogue: list[te.Tensor]
    out: te.Tensor
    constant_readers: list[te.Tensor] = dataclasses.field(default_factory=list)
    #: stages the schedule inlines into the on-chip copies (a convolution's padding)
    inlined: list[te.Tensor] = dataclasses.field(default_factory=list)

    @property
    def args(self) -> list[te.Tensor]:
        """The lowered function's parameters: inputs, constants, then the output."""
        return [self.inp, self.wgt, *self.constants, self.out]


def packed_gemm(config: HardwareConfig, m_tiles: int, k_tiles: int, n_tiles: int,
                epilogue: list[EpilogueStep] | None) -> PackedGemm:
    """``C = A @ W.T`` over tile grids of the given sizes, then (with an ``epilogue``)
    one stage per ALU step and an int8 output; without one the output is the int32
    accumulator."""
    batch, block_in, block_out = config.batch, config.block_in, config.block_out
    a = te.placeholder((m_tiles, k_tiles, batch, block_in), "int8", "A")
    w = te.placeholder((n_tiles, k_tiles, block_out, block_in), "int8", "W")
    ko = te.reduce_axis(k_tiles, "ko")
    ki = te.reduce_axis(block_in, "ki")
    acc = te.compute(
        (m_tiles, n_tiles, batch, block_out),
        lambda m, n, b, o: te.sum(te.cast("int32", a[m, ko, b, ki]) *
                                  te.cast("int32", w[n, ko, o, ki]), axis=[ko, ki]),
        name="C")
    if epilogue is None:
        out = te.compute(acc.shape, lambda *i: acc[i], name="Y")
        return PackedGemm(config, a, w, acc, [], [], out)
    constants, readers, stages, last = epilogue_stages(acc, epilogue, n_tiles, config)
    out = te.compute(acc.shape, lambda *i: te.cast("int8", last[i]), name="Y")
    return PackedGemm(config, a, w, acc, constants, stages, out, readers)


def epilogue_stages(acc: te.Tensor, epilogue: list[EpilogueStep], n_tiles: int,
                    config: HardwareConfig):
    """(constants, the stages reading them, every stage, the last stage): one stage per
    ALU step over the accumulator ``acc``, whose axis 1 is the output-channel tile and
    whose last two axes walk one tile; a step with per-column operands reads a
    (n_tiles, batch, block_out) constant."""
    constants, readers, stages, current = [], [], [], acc
    for step in epilogue:
        f = _OPERATIONS[step.op]
        if step.product_shift:
            f = _shifted_product(step.product_shift)
        if step.column is not None:
            const = te.placeholder((n_tiles, config.batch, config.block_out), "int32",
                                   step.name)
            constants.append(const)
            current = te.compute(
                acc.shape, lambda *i, prev=current, c=const, f=f: f(prev[i],
                                                                    c[i[1], i[-2], i[-1]]),
                name=f"requant.{step.name}")
            readers.append(current)
        else:
            current = te.compute(
                acc.shape, lambda *i, prev=current, f=f, v=step.immediate: f(
                    prev[i], te.const(v, "int32")),
                name=f"requant.{step.name}")
        stages.append(current)
    return constants, readers, stages, current


def constant_blocks(config: HardwareConfig, epilogue: list[EpilogueStep],
                    n_tiles: int) -> list[np.ndarray]:
    """The epilogue's per-column constants as the (N/block_out, batch, block_out) blocks
    the packed GEMM's constant parameters take (the same values in every batch row)."""
    blocks = []
    for step in column_steps(epilogue):
        column = np.asarray(step.column, np.int64).reshape(n_tiles, 1, config.block_out)
        blocks.append(np.repeat(column, config.batch, axis=1))
    return blocks


def thread_tasks_and_inline_epilogue(s: te.Schedule, packed: PackedGemm, task,
                                     virtual_threads: int):
    """What the GEMM and convolution schedules share: the output's fused task loop split
    over the virtual threads (returned: the loop each thread's work hangs off), the
    epilogue stages inlined into the output, and the epilogue's constants resident in
    the accumulator buffer for the whole program."""
    out = s[packed.out]
    if virtual_threads > 1:
        _, task = out.split(task, factor=virtual_threads)
        out.bind(task, "vthread")
    for stage in packed.epilogue:
        s[stage].compute_inline()
    for const, stage in zip(packed.constants, packed.constant_readers):
        s.cache_read(const, ACC_SCOPE, [stage])
    return task


def schedule_packed_gemm(gemm: PackedGemm, tiling: GemmTiling,
                         virtual_threads: int) -> te.Schedule:
    """The accelerator schedule of ``gemm`` for ``tiling`` (block sizes in tiles) with 1
    or 2 virtual threads (the task count must be a multiple of it)."""
    m_tiles, n_tiles = gemm.out.shape[:2]
    k_tiles = gemm.inp.shape[1]
    rows, cols, k_chunk = tiling.block_rows, tiling.block_cols, tiling.k_chunk
    if m_tiles % rows or n_tiles % cols or k_tiles % k_chunk:
        raise CompileError(f"tiling {tiling} does not divide the {m_tiles}x{n_tiles}x{k_tiles} "
                           "tile grid")
    tasks = (m_tiles // rows) * (n_tiles // cols)
    if virtual_threads < 1 or tasks % virtual_threads:
        raise CompileError(f"{tasks} tasks do not split over {virtual_threads} virtual threads")
    s = te.create_schedule(gemm.out)
    out = s[gemm.out]
    m, n, _, _ = out.axis
    m_outer, m_inner = out.split(m, factor=rows)
    n_outer, n_inner = out.split(n, factor=cols)
    out.reorder(m_outer, n_outer, m_inner, n_inner)
    task = out.fuse(m_outer, n_outer)
    task = thread_tasks_and_inline_epilogue(s, gemm, task, virtual_threads)
    acc = s[gemm.acc]
    acc.set_scope(ACC_SCOPE)
    acc.compute_at(out, task)
    inp = s.cache_read(gemm.inp, INP_SCOPE, [gemm.acc])
    wgt = s.cache_read(gemm.wgt, WGT_SCOPE, [gemm.acc])
    am, an, ab, ao = acc.axis
    ko, ki = acc.reduce_axis
    k_outer, k_inner = acc.split(ko, factor=k_chunk)
    acc.reorder(k_outer, am, an, k_inner, ab, ao, ki)
    s[inp].compute_at(acc, k_outer)
    s[wgt].compute_at(acc, k_outer)
    acc.tensorize(ab, gemm_intrin(gemm.config))
    return s
