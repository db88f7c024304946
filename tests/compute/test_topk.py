"""TopK (core/compute/topk.py) against the NumPy reference through the llvm target:
ties keep the lower index first, NaN ranks as the largest value."""

from __future__ import annotations

import numpy as np
import pytest

from tests.compute.test_elementwise import check, random_array


@pytest.mark.parametrize("largest,axis,k,dtype", [
    (1, -1, 3, "float32"), (0, 0, 2, "int64"), (1, 1, 6, "uint8"), (0, 2, 5, "float32")])
def test_topk(largest, axis, k, dtype, rng):
    x = random_array(rng, (4, 6, 5), dtype, 0, 5)  # few values: many ties
    k = min(k, x.shape[axis])
    check("TopK", [x, np.array([k], np.int64)], {"axis": axis, "largest": largest})


@pytest.mark.parametrize("largest", [0, 1])
def test_topk_with_nan(largest, rng):
    x = np.array([[1.0, np.nan, 3.0, -np.inf, np.nan, 2.0]], np.float64)
    check("TopK", [x, np.array([4], np.int64)], {"axis": 1, "largest": largest})
