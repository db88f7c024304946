"""Every schedule primitive keeps the computed values equal to NumPy's, including
non-dividing split factors and partial regions of compute_at stages."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc import te, tir
from heterocc.errors import CompileError, TypeInferenceError
from heterocc.targets import llvm as hllvm

RNG = np.random.default_rng(7)


def run(schedule, tensors, *inputs):
    """Lower + build + call; returns the output arrays (tensors after the inputs). Every
    load of these schedules is provably in bounds, so none may have been clamped."""
    func = te.lower(schedule, tensors, name="kernel")
    assert "max(min(" not in str(func)
    module = hllvm.build(func)
    outputs = [np.full(t.shape, -7, dtype=t.dtype) for t in tensors[len(inputs):]]
    module["kernel"](*inputs, *outputs)
    return outputs[0] if len(outputs) == 1 else outputs


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


def matmul(m, n, k):
    A = te.placeholder((m, k), "float32", "A")
    B = te.placeholder((k, n), "float32", "B")
    r = te.reduce_axis(k, "r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return A, B, C


def elementwise(shape=(7, 13)):
    A = te.placeholder(shape, "float32", "A")
    B = te.placeholder(shape, "float32", "B")
    C = te.compute(shape, lambda i, j: A[i, j] + B[i, j] * 2.0, name="C")
    return A, B, C


def test_default_schedule_elementwise():
    A, B, C = elementwise()
    a, b = rand(7, 13), rand(7, 13)
    np.testing.assert_allclose(run(te.create_schedule(C), [A, B, C], a, b), a + b * 2, rtol=1e-6)


@pytest.mark.parametrize("factor", [1, 4, 5, 13, 20])
def test_split_factor_including_non_dividing(factor):
    A, B, C = elementwise()
    s = te.create_schedule(C)
    s[C].split(C.op.axis[1], factor=factor)
    a, b = rand(7, 13), rand(7, 13)
    np.testing.assert_allclose(run(s, [A, B, C], a, b), a + b * 2, rtol=1e-6)


@pytest.mark.parametrize("nparts", [2, 3, 7, 9])
def test_split_nparts(nparts):
    A, B, C = elementwise()
    s = te.create_schedule(C)
    s[C].split(C.op.axis[0], nparts=nparts)
    a, b = rand(7, 13), rand(7, 13)
    np.testing.assert_allclose(run(s, [A, B, C], a, b), a + b * 2, rtol=1e-6)


def test_nested_splits_of_split_outputs():
    A, B, C = elementwise((5, 37))
    s = te.create_schedule(C)
    jo, ji = s[C].split(C.op.axis[1], factor=6)
    s[C].split(jo, factor=4)
    s[C].split(ji, nparts=4)
    a, b = rand(5, 37), rand(5, 37)
    np.testing.assert_allclose(run(s, [A, B, C], a, b), a + b * 2, rtol=1e-6)


@pytest.mark.parametrize("tiles", [(2, 4), (3, 5), (4, 8)])
def test_tile_and_reorder_matmul(tiles):
    A, B, C = matmul(10, 13, 7)
    s = te.create_schedule(C)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], *tiles)
    (r,) = s[C].op.reduce_axis
    ro, ri = s[C].split(r, factor=3)
    s[C].reorder(jo, io, ro, ii, ri, ji)
    a, b = rand(10, 7), rand(7, 13)
    np.testing.assert_allclose(run(s, [A, B, C], a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_fuse_then_split_parallel():
    A, B, C = elementwise((6, 11))
    s = te.create_schedule(C)
    fused = s[C].fuse(*C.op.axis)
    outer, inner = s[C].split(fused, factor=8)
    s[C].parallel(outer)
    s[C].vectorize(inner)
    a, b = rand(6, 11), rand(6, 11)
    np.testing.assert_allclose(run(s, [A, B, C], a, b), a + b * 2, rtol=1e-6)


def test_fuse_three_axes_of_reduction_output():
    A = te.placeholder((3, 4, 5, 6), "float32", "A")
    r = te.reduce_axis(6, "r")
    S = te.compute((3, 4, 5), lambda i, j, k: te.sum(A[i, j, k, r], axis=r), name="S")
    s = te.create_schedule(S)
    fused = s[S].fuse(*S.op.axis)
    s[S].parallel(fused)
    a = rand(3, 4, 5, 6)
    np.testing.assert_allclose(run(s, [A, S], a), a.sum(-1), rtol=1e-5, atol=1e-6)


def test_compute_inline_chain():
    A = te.placeholder((4, 9), "float32", "A")
    B = te.compute((4, 9), lambda i, j: A[i, j] * 3.0, name="B")
    D = te.compute((4, 9), lambda i, j: te.exp(B[i, j]), name="D")
    C = te.compute((4, 9), lambda i, j: D[i, j] + B[i, j], name="C")
    s = te.create_schedule(C)
    s[B].compute_inline()
    s[D].compute_inline()
    func = te.lower(s, [A, C])
    assert not tir.collect(func.body, lambda n: isinstance(n, tir.Allocate))
    a = rand(4, 9)
    np.testing.assert_allclose(run(s, [A, C], a), np.exp(a * 3) + a * 3, rtol=1e-5)


def test_intermediate_at_root_is_allocated():
    A = te.placeholder((4, 9), "float32", "A")
    B = te.compute((4, 9), lambda i, j: A[i, j] * 3.0, name="B")
    C = te.compute((4, 9), lambda i, j: B[i, j] - 1.0, name="C")
    s = te.create_schedule(C)
    func = te.lower(s, [A, C])
    allocations = tir.collect(func.body, lambda n: isinstance(n, tir.Allocate))
    assert [a.buffer.name for a in allocations] == ["B"]
    a = rand(4, 9)
    np.testing.assert_allclose(run(s, [A, C], a), a * 3 - 1, rtol=1e-6)


@pytest.mark.parametrize("factor", [4, 5])
def test_compute_at_stencil_partial_region(factor):
    """The producer is computed per tile of the consumer, for the tile plus the halo the
    stencil reads; with a non-dividing factor the last tile's region is clipped."""
    n = 23
    A = te.placeholder((3, n), "float32", "A")
    B = te.compute((3, n), lambda i, j: te.exp(A[i, j]), name="B")
    C = te.compute((3, n - 2), lambda i, j: B[i, j] + B[i, j + 1] * B[i, j + 2], name="C")
    s = te.create_schedule(C)
    jo, ji = s[C].split(C.op.axis[1], factor=factor)
    s[B].compute_at(s[C], jo)
    func = te.lower(s, [A, C])
    allocations = tir.collect(func.body, lambda n: isinstance(n, tir.Allocate))
    assert {a.buffer.shape for a in allocations} == {(1, factor + 2)}
    a = rand(3, n)
    b = np.exp(a)
    expected = b[:, :-2] + b[:, 1:-1] * b[:, 2:]
    np.testing.assert_allclose(run(s, [A, C], a), expected, rtol=1e-5)


def test_a_stage_read_across_fused_rows_is_computed_a_tile_at_a_time():
    """A consumer whose rows are fused and split into tiles of 8 reads its producer,
    flat over the rows (``B[(y * 6 + x)]``), through ``(f // 6) * 6 + f % 6``: the
    producer computed at a tile is one tile of 8, not the two rows the tile's quotient
    and remainder span on their own; the last tile's 4 past the 36 pixels are computed
    in the producer's padded length and dropped."""
    A = te.placeholder((40,), "float32", "A")
    B = te.compute((40,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((6, 6), lambda y, x: B[y * 6 + x] + 1.0, name="C")
    s = te.create_schedule(C)
    tile, lane = s[C].split(s[C].fuse(*C.op.axis), 8)
    s[B].compute_at(s[C], tile)
    func = te.lower(s, [A, C])
    allocations = tir.collect(func.body, lambda n: isinstance(n, tir.Allocate))
    assert {a.buffer.shape for a in allocations} == {(8,)}
    a = rand(40)
    np.testing.assert_allclose(run(s, [A, C], a), (a[:36] * 2 + 1).reshape(6, 6), rtol=1e-6)


def test_a_stage_read_through_a_non_dividing_split_covers_only_the_guarded_rows():
    """A consumer's block of 7 rows of 14, its pixels fused (98) and split into vectors of
    16 (7 x 16 = 112 with the guard ``f < 98``), reads its producer by row and column
    (``f // 14``, ``f % 14``): the producer computed at the block is its 7 rows, not the
    8 that the split's 112 positions would reach without the guard (an int8
    convolution's sums at 14x14 computed one row of the next block for nothing)."""
    A = te.placeholder((14, 14), "float32", "A")
    B = te.compute((14, 14), lambda y, x: A[y, x] * 2.0, name="B")
    C = te.compute((14, 14), lambda y, x: B[y, x] + 1.0, name="C")
    s = te.create_schedule(C)
    block, row = s[C].split(C.op.axis[0], 7)
    _, lane = s[C].split(s[C].fuse(row, C.op.axis[1]), 16)
    s[B].compute_at(s[C], block)
    func = te.lower(s, [A, C])
    allocations = tir.collect(func.body, lambda n: isinstance(n, tir.Allocate))
    assert {a.buffer.shape for a in allocations} == {(7, 14)}
    a = rand(14, 14)
    np.testing.assert_allclose(run(s, [A, C], a), a * 2 + 1, rtol=1e-6)


def test_cache_write_register_tile_matmul_non_dividing():
    A, B, C = matmul(19, 45, 11)
    s = te.create_schedule(C)
    CC = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 16)
    s[C].parallel(io)
    s[C].vectorize(ji)
    s[CC].compute_at(s[C], jo)
    ci, cj = s[CC].op.axis
    (k,) = s[CC].op.reduce_axis
    s[CC].reorder(k, ci, cj)
    s[CC].unroll(ci)
    s[CC].vectorize(cj)
    a, b = rand(19, 11), rand(11, 45)
    np.testing.assert_allclose(run(s, [A, B, C], a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_cache_read_at_reduction_loop():
    A, B, C = matmul(8, 12, 10)
    s = te.create_schedule(C)
    AA = s.cache_read(A, "local", [C])
    (r,) = s[C].op.reduce_axis
    ro, ri = s[C].split(r, factor=4)
    i, j = s[C].op.axis
    s[C].reorder(i, ro, j, ri)
    s[AA].compute_at(s[C], ro)
    func = te.lower(s, [A, B, C])
    allocations = tir.collect(func.body, lambda n: isinstance(n, tir.Allocate))
    assert {(a.buffer.shape, a.buffer.scope) for a in allocations} == {((1, 4), "local")}
    a, b = rand(8, 10), rand(10, 12)
    np.testing.assert_allclose(run(s, [A, B, C], a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_vectorize_dividing_emits_vector_ir():
    A, B, C = elementwise((4, 32))
    s = te.create_schedule(C)
    jo, ji = s[C].split(C.op.axis[1], factor=16)
    s[C].vectorize(ji)
    func = te.lower(s, [A, B, C])
    assert tir.collect(func.body, lambda n: isinstance(n, tir.Ramp))
    module = hllvm.build(func)
    assert "<16 x float>" in module.unoptimized_ir
    a, b = rand(4, 32), rand(4, 32)
    c = np.empty((4, 32), np.float32)
    module(a, b, c)
    np.testing.assert_allclose(c, a + b * 2, rtol=1e-6)


def test_vectorize_non_dividing_and_reduction_axis_stay_correct():
    A, B, C = matmul(5, 10, 9)
    s = te.create_schedule(C)
    jo, ji = s[C].split(C.op.axis[1], factor=4)
    (r,) = s[C].op.reduce_axis
    s[C].vectorize(ji)
    s[C].vectorize(r)
    a, b = rand(5, 9), rand(9, 10)
    np.testing.assert_allclose(run(s, [A, B, C], a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_unroll_replicates_body():
    A, B, C = elementwise((3, 10))
    s = te.create_schedule(C)
    jo, ji = s[C].split(C.op.axis[1], factor=4)
    s[C].unroll(ji)
    func = te.lower(s, [A, B, C])
    stores = tir.collect(func.body, lambda n: isinstance(n, tir.BufferStore))
    assert len(stores) == 4 + 2  # the unrolled main loop body, then the partitioned tail
    assert not any(loop.var.name == "j.inner" for loop in
                   tir.collect(func.body, lambda n: isinstance(n, tir.For)))
    a, b = rand(3, 10), rand(3, 10)
    np.testing.assert_allclose(run(s, [A, B, C], a, b), a + b * 2, rtol=1e-6)


@pytest.mark.parametrize("reducer,oracle", [(te.max, np.max), (te.min, np.min),
                                            (te.sum, np.sum)])
def test_reductions_with_offset_axis(reducer, oracle):
    A = te.placeholder((6, 9), "float32", "A")
    r = te.reduce_axis((2, 7), "r")
    R = te.compute((6,), lambda i: reducer(A[i, r], axis=r), name="R")
    s = te.create_schedule(R)
    ro, ri = s[R].split(r, factor=2)
    a = rand(6, 9)
    np.testing.assert_allclose(run(s, [A, R], a), oracle(a[:, 2:7], axis=1), rtol=1e-5)


def test_two_reduction_axes_reordered_outside_spatial():
    A = te.placeholder((4, 5, 6), "int32", "A")
    r1, r2 = te.reduce_axis(5, "r1"), te.reduce_axis(6, "r2")
    S = te.compute((4,), lambda i: te.sum(A[i, r1, r2], axis=[r1, r2]), name="S")
    s = te.create_schedule(S)
    s[S].reorder(r2, S.op.axis[0], r1)
    a = RNG.integers(-50, 50, (4, 5, 6)).astype(np.int32)
    np.testing.assert_array_equal(run(s, [A, S], a), a.sum(axis=(1, 2)))


def test_padding_with_guarded_loads():
    """A select guarding out-of-range reads (as in padded convolution) stays correct."""
    n, taps = 17, 5
    A = te.placeholder((n,), "float32", "A")
    W = te.placeholder((taps,), "float32", "W")
    k = te.reduce_axis(taps, "k")
    C = te.compute((n,), lambda i: te.sum(te.if_then_else(
        te.logical_and(i + k - 2 >= 0, i + k - 2 < n), A[i + k - 2], 0.0) * W[k], axis=k),
        name="C")
    s = te.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=8)
    s[C].vectorize(ii)
    a, w = rand(n), rand(taps)
    expected = np.convolve(np.pad(a, 2), w[::-1], mode="valid")
    np.testing.assert_allclose(run(s, [A, W, C], a, w), expected, rtol=1e-5, atol=1e-6)


def test_bind_lowers_to_thread_loops_but_not_on_cpu():
    A, B, C = elementwise((4, 64))
    s = te.create_schedule(C)
    fused = s[C].fuse(*C.op.axis)
    bx, tx = s[C].split(fused, factor=32)
    s[C].bind(bx, "blockIdx.x")
    s[C].bind(tx, "threadIdx.x")
    func = te.lower(s, [A, B, C])
    tags = [loop.thread_tag for loop in tir.collect(func.body, lambda n: isinstance(n, tir.For))]
    assert tags == ["blockIdx.x", "threadIdx.x"]
    with pytest.raises(CompileError, match="GPU"):
        hllvm.build(func)


def test_schedule_errors_name_the_problem():
    A, B, C = matmul(4, 4, 4)
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    s[C].split(i, factor=2)
    with pytest.raises(CompileError, match="not one of its current loops"):
        s[C].split(i, factor=2)
    with pytest.raises(CompileError, match="reduction loop"):
        s[C].parallel(s[C].op.reduce_axis[0])
    with pytest.raises(CompileError, match="output"):
        te.lower(s, [A, B])
    with pytest.raises(CompileError, match="never computed"):
        te.lower(s, [A, C])
    with pytest.raises(CompileError, match="thread tag"):
        s[C].bind(j, "warp.y")


def test_compute_at_refuses_a_reader_outside_the_loop():
    """B computed at C's loop is also read by D, which runs outside it: refused."""
    A = te.placeholder((8,), "float32", "A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((8,), lambda i: B[i] * 2.0, name="C")
    D = te.compute((8,), lambda i: B[i] + C[i], name="D")
    s = te.create_schedule(D)
    s[B].compute_at(s[C], s[C].op.axis[0])
    with pytest.raises(CompileError, match="each reader"):
        te.lower(s, [A, D])


def test_compute_at_with_readers_inside_the_loop_computes_the_union_of_their_reads():
    """A row stage E read by two stages of the row loop (its sum S, attached there, and
    the loop's own stage Q = E / S, a softmax's shape) and one read through a stage it
    feeds (P, read by E alone): each is computed once per row, over what all its
    readers read there (E: the whole row; P, S: one element), and the values stay
    NumPy's."""
    A = te.placeholder((6, 10), "float32", "A")
    P = te.compute((6, 1), lambda i, _: A[i, 0] * 0.5, name="P")
    E = te.compute((6, 10), lambda i, j: te.exp(A[i, j] - P[i, 0]), name="E")
    r = te.reduce_axis(10, "r")
    S = te.compute((6, 1), lambda i, _: te.sum(E[i, r], axis=r), name="S")
    Q = te.compute((6, 10), lambda i, j: E[i, j] / S[i, 0], name="Q")
    s = te.create_schedule(Q)
    row = s[Q].op.axis[0]
    for stage in (S, E, P):
        s[stage].compute_at(s[Q], row)
    func = te.lower(s, [A, Q], name="kernel")
    sizes = {a.buffer.name: a.buffer.size
             for a in tir.collect(func.body, lambda n: isinstance(n, tir.Allocate))}
    assert sizes == {"P": 1, "E": 10, "S": 1}
    a = rand(6, 10)
    e = np.exp(a - 0.5 * a[:, :1])
    np.testing.assert_allclose(run(s, [A, Q], a), e / e.sum(axis=1, keepdims=True),
                               rtol=1e-5)


def test_compute_rejects_nested_reduction_and_bad_indices():
    A = te.placeholder((4, 4), "float32", "A")
    r = te.reduce_axis(4, "r")
    with pytest.raises(TypeInferenceError, match="whole body"):
        te.compute((4,), lambda i: te.sum(A[i, r], axis=r) + 1.0)
    with pytest.raises(TypeInferenceError, match="rank"):
        te.compute((4,), lambda i: A[i])
    with pytest.raises(TypeInferenceError, match="integers"):
        te.compute((4,), lambda i: A[i, A[i, 0]])


def test_lowered_function_prints_readably():
    A, B, C = matmul(8, 8, 8)
    s = te.create_schedule(C)
    func = te.lower(s, [A, B, C], name="mm", optimize=False)
    text = str(func)
    assert text.splitlines()[0] == "def mm(A: float32[8, 8], B: float32[8, 8], C: float32[8, 8]):"
    assert "for r in serial(0, 8):" in text
    assert "C[i, j] = (C[i, j] + (A[i, r] * B[r, j]))" in text


def test_scalar_and_empty_tensors():
    A = te.placeholder((), "float32", "A")
    B = te.compute((), lambda: A[()] * 2.0, name="B")
    np.testing.assert_array_equal(run(te.create_schedule(B), [A, B], np.array(3.0, np.float32)),
                                  6.0)
    r = te.reduce_axis(4, "r")
    V = te.placeholder((4,), "float32", "V")
    S = te.compute((), lambda: te.sum(V[r], axis=r), name="S")
    total = run(te.create_schedule(S), [V, S], np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(total, 6.0)
    E = te.placeholder((0, 5), "float32", "E")
    F = te.compute((0, 5), lambda i, j: E[i, j] + 1.0, name="F")
    s = te.create_schedule(F)
    s[F].vectorize(s[F].op.axis[1])
    assert run(s, [E, F], np.zeros((0, 5), np.float32)).shape == (0, 5)


def test_reads_of_answers_each_body_once_and_forgets_it_with_the_body():
    import gc

    from heterocc.te import schedule_reads

    x = te.placeholder((4, 3), "float32", "x")
    w = te.placeholder((3,), "float32", "w")
    y = te.compute((4, 3), lambda i, j: x[i, j] * w[j] + x[i, j], name="y")
    first = schedule_reads.reads_of(y.op.body)
    assert first == [x, w]
    first.append(y)  # the caller's list is its own: the remembered answer unchanged
    assert schedule_reads.reads_of(y.op.body) == [x, w]
    assert y.op.body in schedule_reads._READS
    size = len(schedule_reads._READS)
    del y, first
    gc.collect()
    assert len(schedule_reads._READS) == size - 1  # nothing kept alive by the memo


def _stencil_chain():
    """``D = 2 * C``, ``C[i, j] = B[i, j] + B[i + 1, j + 2]``, ``B = A + 1``: B read only
    by C, C only by D."""
    A = te.placeholder((10, 12), "float32", "A")
    B = te.compute((10, 12), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((9, 10), lambda i, j: B[i, j] + B[i + 1, j + 2], name="C")
    D = te.compute((9, 10), lambda i, j: C[i, j] * 2.0, name="D")
    return A, B, C, D


@pytest.mark.parametrize("c_at_outer", [True, False], ids=["reader-at-same-loop",
                                                          "reader-at-inner-loop"])
def test_compute_at_a_loop_its_reader_runs_inside(c_at_outer):
    """A stage may be computed at a loop of a stage that does not read it, where its only
    reader runs inside that loop (attached there or within it): it computes the region
    that reader reads in one iteration, found through the reader's own region; the
    values stay NumPy's (with a non-dividing split)."""
    A, B, C, D = _stencil_chain()
    s = te.create_schedule(D)
    io, ii = s[D].split(s[D].op.axis[0], factor=4)
    s[C].compute_at(s[D], io if c_at_outer else ii)
    s[B].compute_at(s[D], io)
    func = te.lower(s, [A, D], name="kernel")
    b = next(a for a in tir.collect(func.body, lambda n: isinstance(n, tir.Allocate))
             if a.buffer.name == "B")
    assert b.buffer.size == 5 * 12  # 4 rows of C read 5 rows of B (not all 10)
    a = rand(10, 12)
    bb = a + 1.0
    np.testing.assert_allclose(run(s, [A, D], a), 2.0 * (bb[:-1, :-2] + bb[1:, 2:]),
                               rtol=1e-6)


def test_compute_at_refuses_a_loop_inside_the_readers():
    """Where the only reader runs outside the loop (attached at an outer one), the stage
    computed inside it would not exist when read: refused."""
    A, B, C, D = _stencil_chain()
    s = te.create_schedule(D)
    io, ii = s[D].split(s[D].op.axis[0], factor=4)
    s[C].compute_at(s[D], io)
    s[B].compute_at(s[D], ii)
    with pytest.raises(CompileError, match="each reader"):
        te.lower(s, [A, D])


def test_a_stage_computed_at_a_loop_rounds_its_region_and_allocates_read_slack():
    """``REGION_MULTIPLE``: the region of the last axis rounded up to whole multiples
    (whole rows of a flat axis); ``READ_SLACK``: that many more elements allocated past
    it, never computed (a vector read's dropped lanes)."""
    A = te.placeholder((4, 40), "float32", "A")
    B = te.compute((4, 40), lambda i, j: A[i, j] * 3.0, name="B",
                   attrs={te.REGION_MULTIPLE: 8, te.READ_SLACK: 5})
    C = te.compute((4, 10), lambda i, j: B[i, j] + B[i, j + 2], name="C")
    s = te.create_schedule(C)
    s[B].compute_at(s[C], s[C].op.axis[0])
    func = te.lower(s, [A, C], name="kernel")
    b = next(a for a in tir.collect(func.body, lambda n: isinstance(n, tir.Allocate))
             if a.buffer.name == "B")
    assert tuple(b.buffer.shape) == (1, 16 + 5)  # 12 read -> 16 computed, + 5
    a = rand(4, 40)
    b = a * np.float32(3.0)  # as B holds it: 3a + 3b may differ from 3(a + b) in an ulp
    np.testing.assert_allclose(run(s, [A, C], a), b[:, :10] + b[:, 2:12], rtol=1e-6)


def test_a_region_multiple_may_name_the_axis_it_rounds():
    """``REGION_MULTIPLE`` as ``(axis, multiple)`` rounds that axis's region (a flat
    axis of positions before an innermost group of four), capped at the axis's extent."""
    A = te.placeholder((4, 40, 4), "float32", "A")
    B = te.compute((4, 40, 4), lambda i, j, g: A[i, j, g] * 3.0, name="B",
                   attrs={te.REGION_MULTIPLE: (-2, 8)})
    C = te.compute((4, 10, 4), lambda i, j, g: B[i, j, g] + B[i, j + 2, g], name="C")
    s = te.create_schedule(C)
    s[B].compute_at(s[C], s[C].op.axis[0])
    func = te.lower(s, [A, C], name="kernel")
    b = next(a for a in tir.collect(func.body, lambda n: isinstance(n, tir.Allocate))
             if a.buffer.name == "B")
    assert tuple(b.buffer.shape) == (1, 16, 4)  # 12 positions read -> 16, groups whole
    a = rand(4, 40, 4)
    b = a * np.float32(3.0)
    np.testing.assert_allclose(run(s, [A, C], a), b[:, :10] + b[:, 2:12], rtol=1e-6)
