"""The accelerator's tensor intrinsic and on-chip memory scopes.

The GEMM core multiplies one ``batch x block_in`` input tile by one
``block_out x block_in`` weight tile and accumulates into a ``batch x block_out``
accumulator tile. ``gemm_intrin`` declares exactly that in TE, so that
``Stage.tensorize`` can replace the innermost loops of a packed GEMM by one
``vta.gemm`` call, which the DAE code generator turns into micro-ops.
"""

from __future__ import annotations

from heterocc.accel_sim import HardwareConfig
from heterocc.accel_sim.isa import Buffer
from heterocc.sdk import te, tir

#: name of the TIR call that stands for one tile multiply-accumulate
GEMM_CALL = "vta.gemm"

#: memory scopes naming the on-chip buffers
INP_SCOPE, WGT_SCOPE, ACC_SCOPE = "vta.inp", "vta.wgt", "vta.acc"
SCOPE_BUFFERS = {INP_SCOPE: Buffer.INP, WGT_SCOPE: Buffer.WGT, ACC_SCOPE: Buffer.ACC}


def region_start(region: te.BufferRegion) -> tir.BufferLoad:
    """The first element of a tensorized region: it stands for the region's address (the
    buffer and the index of its first tile) in the ``vta.gemm`` call."""
    return tir.BufferLoad(region.buffer, region.bases)


def gemm_intrin(config: HardwareConfig) -> te.TensorIntrin:
    """``acc[b, o] += sum_i inp[b, i] * wgt[o, i]`` over one tile of each buffer
    (int8 x int8 -> int32), implemented as ``vta.gemm(acc, inp, wgt)``."""
    batch, block_in, block_out = config.batch, config.block_in, config.block_out
    inp = te.placeholder((batch, block_in), "int8", "inp")
    wgt = te.placeholder((block_out, block_in), "int8", "wgt")
    i = te.reduce_axis(block_in, "i")
    acc = te.compute(
        (batch, block_out),
        lambda b, o: te.sum(te.cast("int32", inp[b, i]) * te.cast("int32", wgt[o, i]), axis=i),
        name="acc")

    def implement(inputs, output):
        inp_region, wgt_region = inputs
        args = (region_start(output), region_start(inp_region), region_start(wgt_region))
        return tir.Evaluate(tir.Call(GEMM_CALL, args, "int32"))

    return te.TensorIntrin(GEMM_CALL, acc, implement,
                           attrs={"batch": batch, "block_in": block_in, "block_out": block_out})
