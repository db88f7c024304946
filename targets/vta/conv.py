"""Direct 2-D convolution on the accelerator: no im2col on the host.

The input is in the accelerator's blocked layout, (N/batch, C/block_in, H, W,
batch, block_in); the weights (O/block_out, C/block_in, KH, KW, block_out,
block_in) are packed once at compile time; the output is (N/batch, O/block_out,
OH, OW, batch, block_out). In TE the convolution reads a padded view of the input
whose border holds the input's zero point; the schedule stages a window of input
rows (all the rows a block of output rows needs) into the input buffer, where the
LOAD writes that border itself (``pad_value``), and the GEMM's two hardware
loops walk the output rows and columns while its micro-ops walk the kernel
window, so every input tile crosses DRAM once per block of output channels
instead of KH x KW times. The requantizing epilogue is the GEMM's
(``schedule.epilogue_stages``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from heterocc.accel_sim import HardwareConfig
from heterocc.accel_sim.isa import Alu, AluOp, Buffer, Gemm, Load, Store
from heterocc.accel_sim.timing import instruction_cost
from heterocc.sdk import CompileError, te

from .epilogue import EpilogueStep
from .intrin import ACC_SCOPE, INP_SCOPE, WGT_SCOPE, gemm_intrin
from .schedule import PackedGemm, epilogue_stages, thread_tasks_and_inline_epilogue


@dataclass(frozen=True)
class ConvGeometry:
    """A convolution in tiles: ``channels`` and ``filters`` count blocks of block_in and
    block_out; sizes and pads in pixels."""

    batches: int
    channels: int
    height: int
    width: int
    filters: int
    kernel: tuple[int, int]
    strides: tuple[int, int]
    pads: tuple[int, int, int, int]  # top, left, bottom, right
    #: each output channel block reads only its own input channel block, through
    #: diagonal weight tiles (depthwise: one filter per input channel) or block-diagonal
    #: ones (grouped, whole groups in a tile: ``codegen._tile_holds_whole_groups``)
    depthwise: bool = False

    @property
    def out_height(self) -> int:
        return (self.height + self.pads[0] + self.pads[2] - self.kernel[0]) // self.strides[0] + 1

    @property
    def out_width(self) -> int:
        return (self.width + self.pads[1] + self.pads[3] - self.kernel[1]) // self.strides[1] + 1


@dataclass(frozen=True)
class ConvTiling:
    """One task computes ``rows`` output rows (all columns) of ``filters`` output channel
    blocks; each reduction step stages ``channels`` input channel blocks."""

    rows: int
    filters: int
    channels: int


def packed_conv2d(config: HardwareConfig, geometry: ConvGeometry,
                  epilogue: list[EpilogueStep] | None, pad_value: int = 0) -> PackedGemm:
    """The blocked convolution with its epilogue (as ``schedule.packed_gemm`` builds the
    GEMM's): tensors "X" (input), "W" (weights), the epilogue's constants and "Y"."""
    g = geometry
    batch, block_in, block_out = config.batch, config.block_in, config.block_out
    x = te.placeholder((g.batches, g.channels, g.height, g.width, batch, block_in), "int8",
                       "X")
    w = te.placeholder((g.filters, 1 if g.depthwise else g.channels, *g.kernel, block_out,
                        block_in), "int8", "W")
    top, left, bottom, right = g.pads
    padded_h, padded_w = g.height + top + bottom, g.width + left + right

    def pad_body(n, c, y, col, b, i):
        inside = te.logical_and(te.logical_and(y >= top, y < top + g.height),
                                te.logical_and(col >= left, col < left + g.width))
        return te.if_then_else(inside, x[n, c, y - top, col - left, b, i],
                               te.const(pad_value, "int8"))

    padded = te.compute((g.batches, g.channels, padded_h, padded_w, batch, block_in), pad_body,
                        name="X_padded", dtype="int8")
    ry, rx = te.reduce_axis(g.kernel[0], "ry"), te.reduce_axis(g.kernel[1], "rx")
    ri = te.reduce_axis(block_in, "ri")
    sy, sx = g.strides
    shape = (g.batches, g.filters, g.out_height, g.out_width, batch, block_out)
    if g.depthwise:
        acc = te.compute(shape, lambda n, o, y, col, b, oo: te.sum(
            te.cast("int32", padded[n, o, y * sy + ry, col * sx + rx, b, ri])
            * te.cast("int32", w[o, 0, ry, rx, oo, ri]), axis=[ry, rx, ri]), name="C")
    else:
        rc = te.reduce_axis(g.channels, "rc")
        acc = te.compute(shape, lambda n, o, y, col, b, oo: te.sum(
            te.cast("int32", padded[n, rc, y * sy + ry, col * sx + rx, b, ri])
            * te.cast("int32", w[o, rc, ry, rx, oo, ri]), axis=[rc, ry, rx, ri]), name="C")
    if epilogue is None:
        out = te.compute(acc.shape, lambda *i: acc[i], name="Y")
        return PackedGemm(config, x, w, acc, [], [], out, [], [padded])
    constants, readers, stages, last = epilogue_stages(acc, epilogue, g.filters, config)
    out = te.compute(acc.shape, lambda *i: te.cast("int8", last[i]), name="Y")
    return PackedGemm(config, x, w, acc, constants, stages, out, readers, [padded])


def tile_counts(config: HardwareConfig, g: ConvGeometry, t: ConvTiling) -> dict[str, int]:
    """On-chip tiles one virtual thread's task uses in each buffer."""
    window_rows = (t.rows - 1) * g.strides[0] + g.kernel[0]
    window_cols = (g.out_width - 1) * g.strides[1] + g.kernel[1]
    staged = t.filters if g.depthwise else t.channels  # input channel blocks on chip
    return {"inp": staged * window_rows * window_cols,
            "wgt": t.filters * t.channels * g.kernel[0] * g.kernel[1],
            "acc": t.filters * t.rows * g.out_width}


#: at most this many candidates (by increasing cycle bound) are timed per convolution
MAX_CONV_CANDIDATES = 2


def candidate_conv_tilings(config: HardwareConfig, g: ConvGeometry, threads: int,
                           const_tiles: int) -> list[ConvTiling]:
    """Tilings whose task fits a virtual thread's share of every buffer (the epilogue's
    ``const_tiles`` stay resident in the accumulator buffer), with a task count that
    splits over the threads."""
    slots = {"inp": config.inp_depth // threads, "wgt": config.wgt_depth // threads,
             "acc": (config.acc_depth - const_tiles) // threads}
    found = []
    # a depthwise task stages exactly the channel blocks of its filters: channels is 1
    for rows, filters, channels in itertools.product(
            _divisors(g.out_height), _divisors(g.filters),
            [1] if g.depthwise else _divisors(g.channels)):
        t = ConvTiling(rows, filters, channels)
        tasks = g.batches * (g.out_height // rows) * (g.filters // filters)
        if tasks % threads == 0 and all(
                n <= slots[k] for k, n in tile_counts(config, g, t).items()):
            found.append(t)
    return found


def conv_cycles_bound(config: HardwareConfig, g: ConvGeometry, t: ConvTiling,
                      alu_steps: int) -> int:
    """A lower bound on the modelled cycles of tiling ``t``: the busiest of the three
    modules' summed instruction costs (``accel_sim.timing.instruction_cost``), whatever
    the threads. Per task: a reset, one GEMM per reduction step and ``alu_steps`` ALU
    passes on compute; per step one input LOAD per channel block and one weight LOAD
    per (filter, channel) block pair; one STORE per filter block."""
    cost = _cost(config)
    tasks = g.batches * (g.out_height // t.rows) * (g.filters // t.filters)
    steps = 1 if g.depthwise else g.channels // t.channels
    staged = t.filters if g.depthwise else t.channels
    tiles = tile_counts(config, g, t)
    window_rows = (t.rows - 1) * g.strides[0] + g.kernel[0]
    window = g.kernel[0] * g.kernel[1]
    loops = dict(uop_begin=0, loop_outer=t.rows, loop_inner=g.out_width)
    reset = Gemm(reset=True, uop_end=t.filters, **loops)
    gemm = Gemm(uop_end=t.filters * t.channels * window, **loops)
    alu = Alu(alu_op=AluOp.ADD, uop_end=t.filters, **loops)
    compute = cost(reset) + steps * cost(gemm) + alu_steps * cost(alu)
    inp = Load(buffer=Buffer.INP, sram_base=0, dram_base=0, y_size=window_rows,
               x_size=tiles["inp"] // (staged * window_rows), x_stride=g.width)
    wgt = Load(buffer=Buffer.WGT, sram_base=0, dram_base=0, y_size=g.kernel[0],
               x_size=g.kernel[1], x_stride=g.kernel[1])
    load = steps * (staged * cost(inp) + t.filters * t.channels * cost(wgt))
    store = t.filters * cost(Store(buffer=Buffer.OUT, sram_base=0, dram_base=0,
                                   y_size=t.rows, x_size=g.out_width, x_stride=g.out_width))
    return tasks * max(compute, load, store)


def _cost(config: HardwareConfig):
    return lambda instruction: instruction_cost(instruction, config)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def schedule_packed_conv2d(conv: PackedGemm, geometry: ConvGeometry, tiling: ConvTiling,
                           virtual_threads: int) -> te.Schedule:
    """The accelerator schedule of ``conv`` (from ``packed_conv2d``) for ``tiling``."""
    g, t = geometry, tiling
    if g.out_height % t.rows or g.filters % t.filters or g.channels % t.channels or \
            (g.depthwise and t.channels != 1):
        raise CompileError(f"tiling {t} does not divide the convolution {g}")
    s = te.create_schedule(conv.out)
    out = s[conv.out]
    n, o, y, col, _, _ = out.axis
    y_outer, y_inner = out.split(y, factor=t.rows)
    o_outer, o_inner = out.split(o, factor=t.filters)
    out.reorder(n, y_outer, o_outer, o_inner, y_inner, col)
    task = thread_tasks_and_inline_epilogue(s, conv, out.fuse(out.fuse(n, y_outer), o_outer),
                                            virtual_threads)
    (padded,) = conv.inlined
    s[padded].compute_inline()  # the LOAD pads: the copy reads X where it is inside
    acc = s[conv.acc]
    acc.set_scope(ACC_SCOPE)
    acc.compute_at(out, task)
    inp = s.cache_read(padded, INP_SCOPE, [conv.acc])
    wgt = s.cache_read(conv.wgt, WGT_SCOPE, [conv.acc])
    an, ao, ay, ax, ab, aoo = acc.axis
    if g.depthwise:  # the task's channel blocks are staged once
        ry, rx, ri = acc.reduce_axis
        # a unit outer reduction loop keeps the accumulator reset outside the hardware
        # loops: one reset and one GEMM per task
        whole, ry = acc.split(ry, factor=g.kernel[0])
        acc.reorder(an, whole, ay, ax, ao, ry, rx, ab, aoo, ri)
        stage_at = whole
    else:
        rc, ry, rx, ri = acc.reduce_axis
        rc_outer, rc_inner = acc.split(rc, factor=t.channels)
        # hardware loops: output rows and columns; micro-ops: filters x channels x window
        acc.reorder(rc_outer, ay, ax, ao, rc_inner, ry, rx, ab, aoo, ri)
        stage_at = rc_outer
    s[inp].compute_at(acc, stage_at)
    s[wgt].compute_at(acc, stage_at)
    acc.tensorize(ab, gemm_intrin(conv.config))
    return s
