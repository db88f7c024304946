"""The array's two instructions as TE tensor intrinsics, for ``Stage.tensorize``.

Each intrinsic declares what its instruction computes as a small TE compute and
implements it as one TIR call (``dotprod.dot`` / ``dotprod.vadd``) whose
arguments are the first element of each region (a buffer and an index, from
which the codegen takes memory and address) plus any immediate operand.
"""

from __future__ import annotations

from heterocc.sdk import BufferRegion, TensorIntrin, te, tir

from .isa import DEPTH, LANES

DOT_CALL = "dotprod.dot"
VADD_CALL = "dotprod.vadd"


def widen(value: te.TensorLoad) -> tir.Expr:
    """An int8 operand as the int16 the multipliers see."""
    return te.cast("int16", value)


def dot_intrinsic() -> TensorIntrin:
    """``acc[j] += sum_k inp[k] * wgt[j, k]`` for LANES x DEPTH int8 operands."""
    inp = te.placeholder((DEPTH,), "int8", "inp")
    wgt = te.placeholder((LANES, DEPTH), "int8", "wgt")
    k = te.reduce_axis(DEPTH, "k")
    acc = te.compute((LANES,), lambda j: te.sum(widen(inp[k]) * widen(wgt[j, k]), axis=k),
                     name="acc")

    def implement(inputs: list[BufferRegion], output: BufferRegion) -> tir.Stmt:
        inp_region, wgt_region = inputs
        row_stride = tir.IntImm(wgt_region.buffer.shape[-1])
        return tir.Evaluate(tir.Call(DOT_CALL, (inp_region.load(0), wgt_region.load(0, 0),
                                                output.load(0), row_stride), "int32"))

    return TensorIntrin("dotprod_dot_1x8x4", acc, implement, {"lanes": LANES, "depth": DEPTH})


def vadd_intrinsic() -> TensorIntrin:
    """``dst[j] = lhs[j] + rhs[j]`` for LANES int16 accumulators."""
    lhs = te.placeholder((LANES,), "int16", "lhs")
    rhs = te.placeholder((LANES,), "int16", "rhs")
    dst = te.compute((LANES,), lambda j: lhs[j] + rhs[j], name="dst")

    def implement(inputs: list[BufferRegion], output: BufferRegion) -> tir.Stmt:
        lhs_region, rhs_region = inputs
        return tir.Evaluate(tir.Call(VADD_CALL, (output.load(0), lhs_region.load(0),
                                                 rhs_region.load(0)), "int32"))

    return TensorIntrin("dotprod_vadd_4", dst, implement, {"lanes": LANES})
