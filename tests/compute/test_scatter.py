"""ScatterElements, Scatter, ScatterND and TensorScatter (core/compute/scatter.py)
against the NumPy references through the llvm target, repeated indices included (the
last update wins, as NumPy's assignment)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.compute.test_elementwise import check, random_array


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
