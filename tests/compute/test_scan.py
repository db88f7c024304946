"""CumSum and CumProd (core/compute/reduction.py) along any axis, the axis read in the
kernel, against the NumPy references through the llvm target."""

from __future__ import annotations

import numpy as np
import pytest

from tests.compute.test_elementwise import check, random_array


@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
@pytest.mark.parametrize("exclusive,reverse,shape,axis", [
    (0, 0, (37,), 0), (1, 0, (3, 5, 4), 1), (0, 1, (3, 5, 4), -1), (1, 1, (6, 2), 0)])
def test_scans_along_any_axis(op, exclusive, reverse, shape, axis, rng):
    x = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    check(op, [x, np.array(axis, np.int64)], {"exclusive": exclusive, "reverse": reverse},
          rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op,dtype", [("CumSum", "int8"), ("CumProd", "uint64"),
                                      ("CumProd", "int32")])
def test_integer_scans_wrap_exactly(op, dtype, rng):
    x = random_array(rng, (4, 9), dtype)
    check(op, [x, np.array([1], np.int32)], {"exclusive": 0, "reverse": 0})


def test_one_element_axis_is_a_copy(rng):
    x = random_array(rng, (5, 1), "float64")
    check("CumProd", [x, np.array(1, np.int64)], {"exclusive": 0, "reverse": 1})
