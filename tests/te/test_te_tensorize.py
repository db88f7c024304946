"""tensorize: loops replaced by a TensorIntrin's implementation, checked against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc import te, tir
from heterocc.errors import CompileError
from heterocc.targets import llvm as hllvm

RNG = np.random.default_rng(11)


def vector_add_intrin(width: int) -> te.TensorIntrin:
    """out[v] = a[v] + b[v] for ``width`` lanes, as one vectorized TIR loop."""
    a = te.placeholder((width,), "float32", "a")
    b = te.placeholder((width,), "float32", "b")
    out = te.compute((width,), lambda v: a[v] + b[v], name="out")

    def implement(inputs, output):
        assert tir.structurally_equal(output.elem_offset, tir.simplify(
            output.bases[0] * output.buffer.shape[1] + output.bases[1]))
        lane = tir.Var("lane")
        ra, rb = inputs
        store = output.store(ra.load(lane) + rb.load(lane), lane)
        return tir.For(lane, 0, width, tir.ForKind.VECTORIZED, store)

    return te.TensorIntrin("vadd", out, implement)


def dot_intrin(length: int) -> te.TensorIntrin:
    """out[0] += sum(a[k] * b[k]) over ``length`` elements (accumulating)."""
    a = te.placeholder((length,), "float32", "a")
    b = te.placeholder((length,), "float32", "b")
    k = te.reduce_axis(length, "k")
    out = te.compute((1,), lambda _: te.sum(a[k] * b[k], axis=k), name="out")

    def implement(inputs, output):
        step = tir.Var("step")
        ra, rb = inputs
        accumulated = output.load() + ra.load(step) * rb.load(step)
        return tir.For(step, 0, length, tir.ForKind.UNROLLED, output.store(accumulated))

    return te.TensorIntrin("dot", out, implement)


def test_tensorize_elementwise_inner_loop():
    A = te.placeholder((6, 32), "float32", "A")
    B = te.placeholder((6, 32), "float32", "B")
    C = te.compute((6, 32), lambda i, j: A[i, j] + B[i, j], name="C")
    s = te.create_schedule(C)
    _, inner = s[C].split(C.op.axis[1], factor=8)
    s[C].tensorize(inner, vector_add_intrin(8))
    func = te.lower(s, [A, B, C], name="f")
    assert tir.collect(func.body, lambda n: isinstance(n, tir.Ramp))
    a, b, c = RNG.standard_normal((6, 32), np.float32), RNG.standard_normal((6, 32), np.float32), \
        np.zeros((6, 32), np.float32)
    hllvm.build(func)["f"](a, b, c)
    np.testing.assert_allclose(c, a + b, rtol=1e-6)


@pytest.mark.parametrize("inner_reduction_only", [True, False])
def test_tensorize_reduction_accumulates(inner_reduction_only):
    A = te.placeholder((5, 12), "float32", "A")
    B = te.placeholder((12, 7), "float32", "B")
    r = te.reduce_axis(12, "r")
    C = te.compute((5, 7), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = te.create_schedule(C)
    if inner_reduction_only:
        _, ri = s[C].split(r, factor=4)
        s[C].tensorize(ri, dot_intrin(4))
    else:
        s[C].tensorize(r, dot_intrin(12))
    a = RNG.standard_normal((5, 12)).astype(np.float32)
    b = RNG.standard_normal((12, 7)).astype(np.float32)
    c = np.full((5, 7), 9.0, np.float32)
    hllvm.build(te.lower(s, [A, B, C], name="f"))["f"](a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_tensorize_refuses_mismatched_shape_and_tails():
    A = te.placeholder((6, 30), "float32", "A")
    B = te.placeholder((6, 30), "float32", "B")
    C = te.compute((6, 30), lambda i, j: A[i, j] + B[i, j], name="C")
    s = te.create_schedule(C)
    _, inner = s[C].split(C.op.axis[1], factor=8)
    s[C].tensorize(inner, vector_add_intrin(8))
    with pytest.raises(CompileError, match="non-dividing"):
        te.lower(s, [A, B, C])
    s = te.create_schedule(C)
    _, inner = s[C].split(C.op.axis[1], factor=6)
    s[C].tensorize(inner, vector_add_intrin(8))
    with pytest.raises(CompileError, match=r"float32\[1, 6\]"):
        te.lower(s, [A, B, C])
