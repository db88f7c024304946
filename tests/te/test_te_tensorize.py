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


def row_product_intrin(width: int, length: int) -> te.TensorIntrin:
    """out[v] (+)= sum(a[k] * b[k, v]) over ``length`` k for ``width`` columns:
    ``implement`` accumulates, ``implement_reset`` starts each column at its first
    product (a unit whose accumulators clear themselves)."""
    a = te.placeholder((length,), "float32", "a")
    b = te.placeholder((length, width), "float32", "b")
    k = te.reduce_axis(length, "k")
    out = te.compute((width,), lambda v: te.sum(a[k] * b[k, v], axis=k), name="out")

    def implement(inputs, output, reset=False):
        column, step = tir.Var("column"), tir.Var("step")
        ra, rb = inputs
        first = ra.load(0) * rb.load(0, column)
        start = output.store(first if reset else output.load(column) + first, column)
        rest = tir.For(step, 1, length - 1, tir.ForKind.SERIAL, output.store(
            output.load(column) + ra.load(step) * rb.load(step, column), column))
        return tir.For(column, 0, width, tir.ForKind.SERIAL, tir.seq([start, rest]))

    return te.TensorIntrin("row_product", out, implement,
                           implement_reset=lambda i, o: implement(i, o, reset=True))


@pytest.mark.parametrize("whole_reduction", [True, False])
def test_an_intrinsic_that_resets_computes_whole_sums_without_the_init(whole_reduction):
    """An intrinsic with ``implement_reset``: where it covers output columns and the
    whole reduction the lowering calls it in place of the init's stores and
    ``implement``; where a reduction loop lies outside it, the init and the
    accumulating ``implement`` as before. The sums are right either way."""
    A = te.placeholder((5, 12), "float32", "A")
    B = te.placeholder((12, 7), "float32", "B")
    r = te.reduce_axis(12, "r")
    C = te.compute((5, 7), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = te.create_schedule(C)
    i, j = C.op.axis
    if whole_reduction:
        s[C].tensorize(j, row_product_intrin(7, 12))
    else:
        ro, ri = s[C].split(r, factor=4)
        s[C].reorder(i, ro, j, ri)
        s[C].tensorize(j, row_product_intrin(7, 4))
    func = te.lower(s, [A, B, C], name="f")
    zeros = [n for n in tir.collect(func.body, lambda n: isinstance(n, tir.BufferStore))
             if isinstance(n.value, tir.FloatImm) and n.value.value == 0]
    assert bool(zeros) != whole_reduction  # the init only where a sum is split
    a = RNG.standard_normal((5, 12)).astype(np.float32)
    b = RNG.standard_normal((12, 7)).astype(np.float32)
    c = np.full((5, 7), 9.0, np.float32)
    hllvm.build(func)["f"](a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


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


def lanes_dot_intrin(lanes: int, steps: int) -> te.TensorIntrin:
    """out[v] += sum(a[k] * b[v, k]) for ``lanes`` outputs over ``steps`` (a dot-product
    instruction's shape: the lanes and the reduction both inside the intrinsic)."""
    a = te.placeholder((steps,), "float32", "a")
    b = te.placeholder((lanes, steps), "float32", "b")
    k = te.reduce_axis(steps, "k")
    out = te.compute((lanes,), lambda v: te.sum(a[k] * b[v, k], axis=k), name="out")

    def implement(inputs, output):
        lane, step = tir.Var("lane"), tir.Var("step")
        ra, rb = inputs
        accumulated = output.load(lane) + ra.load(step) * rb.load(lane, step)
        return tir.For(lane, 0, lanes, tir.ForKind.SERIAL, tir.For(
            step, 0, steps, tir.ForKind.UNROLLED, output.store(accumulated, lane)))

    return te.TensorIntrin("lanes_dot", out, implement)


@pytest.mark.parametrize("vectorize_init", [True, False])
def test_a_tensorized_reductions_init_stores_its_identity_as_one_vector(vectorize_init):
    """The init of a reduction whose update is tensorized at a spatial loop, where the
    schedule asks (``vectorize_init``, the CPU's schedules): that loop (covered by the
    intrinsic in the update, annotated by no schedule) is vectorized in the init, one
    vector store of the identity per tile row; by default the init stays scalar loops
    (what an accelerator's code generator recognises as clearing accumulators). The
    results are the same either way."""
    A = te.placeholder((3, 8), "float32", "A")
    B = te.placeholder((16, 8), "float32", "B")
    r = te.reduce_axis(8, "r")
    C = te.compute((3, 16), lambda i, j: te.sum(A[i, r] * B[j, r], axis=r), name="C")
    s = te.create_schedule(C)
    i, j = C.op.axis
    jo, ji = s[C].split(j, factor=8)
    ro, ri = s[C].split(r, factor=2)
    s[C].reorder(i, jo, ro, ji, ri)
    s[C].tensorize(ji, lanes_dot_intrin(8, 2), vectorize_init=vectorize_init)
    func = te.lower(s, [A, B, C], name="f")
    vector_stores = [n for n in tir.collect(func.body, lambda n: isinstance(n, tir.BufferStore))
                     if isinstance(n.value, tir.Broadcast)]
    if vectorize_init:
        assert vector_stores and all(isinstance(n.indices[0], tir.Ramp)
                                     and n.indices[0].lanes == 8 for n in vector_stores)
    else:
        assert not vector_stores
    a = RNG.standard_normal((3, 8)).astype(np.float32)
    b = RNG.standard_normal((16, 8)).astype(np.float32)
    c = np.full((3, 16), 9.0, np.float32)
    hllvm.build(func)["f"](a, b, c)
    np.testing.assert_allclose(c, a @ b.T, rtol=1e-5, atol=1e-5)


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


# --- tensorize proves the intrinsic computes what the loops compute --------------------

def _gemm_stage(dtype="int8", accumulate="int32"):
    """C[i, j] = sum_r A[i, r] * W[j, r] in ``accumulate`` over ``dtype`` operands, with
    the reduction split so that a 4-long dot product can replace its inner loop."""
    A = te.placeholder((3, 8), dtype, "A")
    W = te.placeholder((5, 8), dtype, "W")
    r = te.reduce_axis(8, "r")
    C = te.compute((3, 5), lambda i, j: te.sum(
        te.cast(accumulate, A[i, r]) * te.cast(accumulate, W[j, r]), axis=r), name="C")
    s = te.create_schedule(C)
    _, r_inner = s[C].split(r, factor=4)
    return s, C, (A, W, C), r_inner


def _dot(body, dtype="int8", accumulate="int32", name="dot4", reduce=True):
    """A 4-long intrinsic whose compute is ``body(a, b, k)`` (summed over k if
    ``reduce``); its implementation is a plain scalar loop (never reached when refused)."""
    a = te.placeholder((4,), dtype, "a")
    b = te.placeholder((4,), dtype, "b")
    k = te.reduce_axis(4, "k")
    if reduce:
        out = te.compute((1,), lambda _: te.sum(body(a, b, k), axis=k), name="out",
                         dtype=accumulate)
    else:  # the same output, without the reduction: every step overwrites it
        out = te.compute((1,), lambda _: body(a, b, 3), name="out", dtype=accumulate)

    def implement(inputs, output):
        step = tir.Var("step")
        ra, rb = inputs
        value = output.load() + tir.Cast(accumulate, ra.load(step)) * \
            tir.Cast(accumulate, rb.load(step))
        return tir.For(step, 0, 4, tir.ForKind.SERIAL, output.store(value))

    return te.TensorIntrin(name, out, implement)


def _widen(t, i, accumulate="int32"):
    return te.cast(accumulate, t[i])


def test_tensorize_accepts_the_same_computation_in_another_operand_order():
    s, C, args, r_inner = _gemm_stage()
    s[C].tensorize(r_inner, _dot(lambda a, b, k: _widen(b, k) * _widen(a, k)))
    a = RNG.integers(-128, 128, (3, 8), dtype=np.int8)
    w = RNG.integers(-128, 128, (5, 8), dtype=np.int8)
    c = np.zeros((3, 5), np.int32)
    hllvm.build(te.lower(s, list(args), name="f"))["f"](a, w, c)
    np.testing.assert_array_equal(c, a.astype(np.int32) @ w.astype(np.int32).T)


@pytest.mark.parametrize(("intrinsic", "message"), [
    (_dot(lambda a, b, k: _widen(a, k) + _widen(b, k)),
     r"the loops compute .*\* .* where the intrinsic computes .*\+"),
    (_dot(lambda a, b, k: te.cast("int16", a[k]) * te.cast("int16", b[k]),
          accumulate="int16"), r"int16"),
    (_dot(lambda a, b, last: _widen(a, last) * _widen(b, last), reduce=False),
     r"the loops compute a sum-reduction .* the intrinsic no reduction"),
], ids=["add-for-multiply", "int16-accumulate", "missing-reduction"])
def test_tensorize_refuses_an_intrinsic_that_computes_something_else(intrinsic, message):
    s, C, args, r_inner = _gemm_stage()
    s[C].tensorize(r_inner, intrinsic)
    with pytest.raises(CompileError, match=message):
        te.lower(s, list(args))


def test_tensorize_refuses_another_combiner():
    a = te.placeholder((4,), "int8", "a")
    b = te.placeholder((4,), "int8", "b")
    k = te.reduce_axis(4, "k")
    out = te.compute((1,), lambda _: te.max(_widen(a, k) * _widen(b, k), axis=k), name="out")
    maximum = te.TensorIntrin("max4", out, lambda inputs, output: tir.Evaluate(0))
    s, C, args, r_inner = _gemm_stage()
    s[C].tensorize(r_inner, maximum)
    with pytest.raises(CompileError, match="the loops combine with 'sum', the intrinsic with "
                                           "'max'"):
        te.lower(s, list(args))


def _tile_stage():
    """C[i, j] = sum_r A[i, r] * W[j, r] on square 4x4 tiles (shapes alone cannot tell
    the operands apart)."""
    A = te.placeholder((4, 4), "float32", "A")
    W = te.placeholder((4, 4), "float32", "W")
    r = te.reduce_axis(4, "r")
    C = te.compute((4, 4), lambda i, j: te.sum(A[i, r] * W[j, r], axis=r), name="C")
    s = te.create_schedule(C)
    return s, C, [A, W, C]


def _tile_intrin(body) -> te.TensorIntrin:
    """A 4x4 tile intrinsic computing ``sum_k body(inp, wgt, b, o, k)``; ``inp`` is
    created first but the binding follows the order in which ``body`` reads them."""
    inp = te.placeholder((4, 4), "float32", "inp")
    wgt = te.placeholder((4, 4), "float32", "wgt")
    k = te.reduce_axis(4, "k")
    out = te.compute((4, 4), lambda b, o: te.sum(body(inp, wgt, b, o, k), axis=k), name="out")
    return te.TensorIntrin("tile", out, lambda inputs, output: tir.Evaluate(0))


@pytest.mark.parametrize(("body", "message"), [
    # the weight read first: bound to A, which the loops index by the output's row
    (lambda inp, wgt, b, o, k: wgt[o, k] * inp[b, k],
     r"A\[i, r\] indexes its dimension 0 with loops \['i'\] but the intrinsic's "
     r"wgt\[o, k\] indexes it with \['o'\]"),
    # the weight transposed
    (lambda inp, wgt, b, o, k: inp[b, k] * wgt[k, o],
     r"W\[j, r\] indexes its dimension 0 with loops \['j'\] but the intrinsic's "
     r"wgt\[k, o\] indexes it with \['k'\]"),
], ids=["swapped-operands", "transposed-weight"])
def test_tensorize_refuses_swapped_or_transposed_operands(body, message):
    s, C, args = _tile_stage()
    s[C].tensorize(C.op.axis[0], _tile_intrin(body))
    with pytest.raises(CompileError, match=message):
        te.lower(s, args)


def test_tensorize_accepts_a_tile_intrinsic_that_reads_like_the_loops():
    s, C, args = _tile_stage()
    s[C].tensorize(C.op.axis[0], _tile_intrin(lambda inp, wgt, b, o, k: inp[b, k] * wgt[o, k]))
    te.lower(s, args)


def test_tensorize_refuses_a_reduction_the_intrinsic_leaves_out():
    """The loops reduce over two axes; the intrinsic reduces over one of them only."""
    A = te.placeholder((4, 4), "float32", "A")
    ry, rx = te.reduce_axis(4, "ry"), te.reduce_axis(4, "rx")
    C = te.compute((1,), lambda _: te.sum(A[ry, rx], axis=[ry, rx]), name="C")
    a = te.placeholder((4,), "float32", "a")
    k = te.reduce_axis(4, "k")
    out = te.compute((1,), lambda _: te.sum(a[k], axis=k), name="out")
    s = te.create_schedule(C)
    s[C].tensorize(ry, te.TensorIntrin("row", out, lambda inputs, output: tir.Evaluate(0)))
    with pytest.raises(CompileError, match=r"A\[ry, rx\] walks 2 dimensions of 'A' "
                                           r"inside the replaced loops, a\[k\] walks 1"):
        te.lower(s, [A, C])
