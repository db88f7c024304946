"""TE computes of index-driven ops, gathers and scatters (core/compute/indexing.py)
against the NumPy reference, through the llvm target; every case must really compile
(no fallback)."""

from __future__ import annotations

import numpy as np
import pytest

import heterocc
from tests.compute.test_elementwise import check, random_array
from tests.compute.test_tensor import (
    assert_llvm_matches_reference,
    ints,
    single_node,
)


@pytest.fixture
def data(rng):
    return rng.standard_normal((3, 4, 5)).astype(np.float32)


@pytest.mark.parametrize("axis,indices", [
    (0, ints(2, -1, 0, 1)),
    (1, ints(-4, 3, 1, 1, 0, 2).reshape(2, 3)),
    (-1, np.array(-2, np.int64)),
    (2, np.array([[4], [0]], np.int32)),
])
def test_gather(data, axis, indices):
    operands = [("x", data, False), ("indices", indices, False)]
    assert_llvm_matches_reference(*single_node("Gather", operands, {"axis": axis}))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(rng, data, axis):
    shape = list(data.shape)
    shape[axis] = 2
    dim = data.shape[axis]
    indices = rng.integers(-dim, dim, shape).astype(np.int64)
    operands = [("x", data, False), ("indices", indices, False)]
    assert_llvm_matches_reference(*single_node("GatherElements", operands, {"axis": axis}))


@pytest.mark.parametrize("batch_dims,indices", [
    (0, ints(0, 1, 2, 2, -1, 0).reshape(2, 3)),
    (0, ints(1, -3, 2, 0).reshape(2, 1, 2)),
    (1, ints(3, 0, -1).reshape(3, 1)),
    (1, ints(0, 4, 2, 2, 1, 1).reshape(3, 1, 2)),
])
def test_gather_nd(data, batch_dims, indices):
    operands = [("x", data, False), ("indices", indices, False)]
    assert_llvm_matches_reference(*single_node("GatherND", operands,
                                               {"batch_dims": batch_dims}))


def test_out_of_range_index_reads_the_edge_instead_of_out_of_bounds(data):
    """The reference rejects an out-of-range index; the kernel clamps it (documented)."""
    model, _ = single_node("Gather", [("x", data, False), ("indices", ints(0, 0), False)],
                           {"axis": 1})
    compiled = heterocc.compile(model, target="llvm")
    out = compiled.run([data, ints(7, -9)])[0]
    np.testing.assert_array_equal(out, data[:, [3, 0]])


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot(axis):
    indices = np.array([[0, 3, -1], [-4, 7, 2.7]], np.float32)
    operands = [("indices", indices, False), ("depth", np.array([4], np.int64), True),
                ("values", np.array([-1, 5], np.int32), False)]
    assert_llvm_matches_reference(*single_node("OneHot", operands, {"axis": axis},
                                               out_dtype="int32"))


def test_gather_from_an_empty_axis_never_compiles_a_load(rng):
    """No index is in range of an empty axis: the kernel would have nothing to clamp to."""
    data = np.zeros((2, 0), np.float32)
    model, inputs = single_node("Gather", [("x", data, False), ("indices", ints(0), False)],
                                {"axis": 1})
    compiled = heterocc.compile(model, target="llvm")
    with pytest.raises(heterocc.errors.InputError):
        compiled.run(inputs)  # the NumPy fallback rejects the index, as the reference does
    fallbacks = compiled.fallbacks
    assert any("empty axis" in reason for reason in fallbacks.values()), fallbacks


@pytest.mark.parametrize("batch_axis,time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence(batch_axis, time_axis, rng):
    shape = [0, 0, 3]
    shape[batch_axis], shape[time_axis] = 4, 5
    x = rng.standard_normal(shape).astype(np.float32)
    lengths = np.array([5, 0, 2, 1], np.int64)
    model, inputs = single_node("ReverseSequence", [("x", x, False), ("lens", lengths, False)],
                                {"batch_axis": batch_axis, "time_axis": time_axis})
    assert_llvm_matches_reference(model, inputs)


@pytest.mark.parametrize("reduction,axis,dtype", [
    ("none", 0, "float32"), ("add", 1, "int32"), ("mul", -1, "float32"), ("max", 0, "int32"),
    ("min", 1, "float32"), ("none", -1, "int32")])
def test_scatter_elements(reduction, axis, dtype, rng):
    data = random_array(rng, (4, 5), dtype, -9, 9)
    size = data.shape[axis]
    indices = rng.integers(-size, size, (3, 2)).astype(np.int64)
    updates = random_array(rng, (3, 2), dtype, -9, 9)
    check("ScatterElements", [data, indices, updates], {"axis": axis, "reduction": reduction})


def test_scatter_is_scatter_elements_without_reduction(rng):
    data = random_array(rng, (3, 3), "float32")
    indices = np.array([[1, 0, 2], [0, 2, 1]], np.int32)
    check("Scatter", [data, indices, random_array(rng, (2, 3), "float32")], {"axis": 1})


SLICES = np.array([[1], [3], [1]])  # slices, one repeated


PAIRS = np.array([[0, 1], [2, -1]])  # rows of the first two axes


TUPLES = np.array([[[0, 0, 1]], [[1, 2, 3]]])  # single elements, a 2-D grid of updates


@pytest.mark.parametrize("reduction,indices", [
    ("none", SLICES), ("add", PAIRS), ("mul", TUPLES), ("max", SLICES), ("min", PAIRS),
    ("none", TUPLES)])
def test_scatter_nd(reduction, indices, rng):
    data = random_array(rng, (4, 3, 4), "float64")
    depth = indices.shape[-1]
    updates = random_array(rng, indices.shape[:-1] + data.shape[depth:], "float64")
    check("ScatterND", [data, indices.astype(np.int64), updates], {"reduction": reduction})


@pytest.mark.parametrize("mode,with_indices", [("linear", False), ("linear", True),
                                               ("circular", True)])
def test_tensor_scatter(mode, with_indices, rng):
    cache = random_array(rng, (2, 3, 6, 4), "float32")
    update = random_array(rng, (2, 3, 3, 4), "float32")
    starts = np.array([1, 3] if mode == "linear" else [4, 5], np.int64) if with_indices \
        else None
    check("TensorScatter", [cache, update, starts], {"mode": mode, "axis": -2})
