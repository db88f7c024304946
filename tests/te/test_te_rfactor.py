"""rfactor: a reduction split into a stage of partial results (kept inner or outer part of
the axis as a data-parallel axis) and a final reduction over them gives NumPy's values,
for sum, max and min, dividing and non-dividing factors, several reduction axes, and
with the partial stage vectorized, parallel or computed inside its reader's loop."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc import te
from heterocc.errors import CompileError
from tests.te.test_te_schedule import rand, run


def row_reduction(rows, length, combiner="sum"):
    A = te.placeholder((rows, length), "float32", "A")
    k = te.reduce_axis(length, "k")
    reduce = getattr(te, combiner)
    B = te.compute((rows,), lambda i: reduce(A[i, k], axis=k), name="B")
    return A, k, B


NUMPY = {"sum": np.sum, "max": np.max, "min": np.min}


@pytest.mark.parametrize("combiner", ["sum", "max", "min"])
@pytest.mark.parametrize("keep", ["inner", "outer"])
@pytest.mark.parametrize("length,factor", [(1024, 16), (1000, 16), (37, 8), (5, 5), (9, 1)])
def test_rfactor_keeps_the_values(combiner, keep, length, factor):
    A, k, B = row_reduction(3, length, combiner)
    s = te.create_schedule(B)
    rf = s.rfactor(B, k, factor, keep=keep)
    kept = factor if keep == "inner" else -(-length // factor)
    assert rf.shape == (3, kept)
    assert [iv.extent for iv in s[B].reduce_axis] == [kept]
    # all-negative rows for max and all-positive for min: a padded element that leaked
    # the identity's neighbour (or a zero) would win
    a = rand(3, length) + {"sum": 0.0, "max": -10.0, "min": 10.0}[combiner]
    np.testing.assert_allclose(run(s, [A, B], a), NUMPY[combiner](a, axis=1), rtol=1e-5)


def test_vectorized_partials_of_a_full_reduction():
    """One output point: the partial sums run as one vector accumulator (inner part
    kept and vectorized), reduced across the lanes once."""
    A = te.placeholder((4000,), "float32", "A")
    k = te.reduce_axis(4000, "k")
    B = te.compute((1,), lambda i: te.sum(A[k] * 2.0, axis=k), name="B")
    s = te.create_schedule(B)
    rf = s.rfactor(B, k, 16)
    *_, lanes = s[rf].op.axis
    (outer,) = s[rf].op.reduce_axis
    s[rf].reorder(*s[rf].op.axis[:-1], outer, lanes)
    s[rf].vectorize(lanes)
    func = te.lower(s, [A, B], name="kernel")
    # one 16-lane accumulator updated per step of the outer loop
    assert "B.rf[ramp(0, 1, 16)] = (B.rf[ramp(0, 1, 16)] + " in str(func)
    a = rand(4000)
    np.testing.assert_allclose(run(s, [A, B], a), [2.0 * a.sum()], rtol=1e-4)


def test_parallel_chunks_of_a_long_reduction():
    """Few output points, a long reduction: chunks of it (outer part kept) in parallel."""
    A, k, B = row_reduction(2, 100_000, "max")
    s = te.create_schedule(B)
    rf = s.rfactor(B, k, 4096, keep="outer")
    i, chunk = s[rf].op.axis
    s[rf].parallel(s[rf].fuse(i, chunk))
    a = rand(2, 100_000)
    np.testing.assert_array_equal(run(s, [A, B], a), a.max(axis=1))


def test_rfactor_of_one_of_several_reduction_axes_computed_at_the_reader():
    """A 2-D window sum: rfactor over the long axis, the partials computed per output
    row inside the final stage's loop."""
    A = te.placeholder((6, 50, 7), "float32", "A")
    r = te.reduce_axis(50, "r")
    c = te.reduce_axis(7, "c")
    B = te.compute((6,), lambda i: te.sum(A[i, r, c] * A[i, r, c], axis=[r, c]), name="B")
    s = te.create_schedule(B)
    rf = s.rfactor(B, r, 8)
    assert {iv.name for iv in s[rf].op.reduce_axis} == {"r.outer", "c"}
    s[rf].compute_at(s[B], s[B].op.axis[0])
    a = rand(6, 50, 7)
    np.testing.assert_allclose(run(s, [A, B], a), (a * a).sum(axis=(1, 2)), rtol=1e-5)


def test_rfactor_is_checked():
    A, k, B = row_reduction(3, 64)
    s = te.create_schedule(B)
    with pytest.raises(CompileError, match="factor 65 must be in"):
        s.rfactor(B, k, 65)
    with pytest.raises(CompileError, match="keep must be"):
        s.rfactor(B, k, 8, keep="middle")
    other = te.reduce_axis(64, "other")
    with pytest.raises(CompileError, match="'other' is not a reduction axis of 'B'"):
        s.rfactor(B, other, 8)
    s[B].parallel(s[B].op.axis[0])
    with pytest.raises(CompileError, match="already scheduled"):
        s.rfactor(B, k, 8)
    C = te.compute((3,), lambda i: A[i, 0] + 1.0, name="C")
    with pytest.raises(CompileError, match="'C' is not a reduction"):
        te.create_schedule(C).rfactor(C, k, 8)
