"""Det (core/compute/linalg.py) against the NumPy reference through the llvm target."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc import te
from heterocc.compute import compute_of
from heterocc.errors import CompileError
from heterocc.ir.types import TensorType
from tests.compute.test_elementwise import check, random_array


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (3, 3), (2, 3, 4, 4)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_det(shape, dtype, rng):
    check("Det", [random_array(rng, shape, dtype, high=1.0)], rtol=1e-5, atol=1e-6)


def test_singular_matrix_has_a_zero_determinant():
    check("Det", [np.array([[1.0, 2.0], [2.0, 4.0]])])


def test_large_matrices_are_refused():
    with pytest.raises(CompileError, match="at most"):
        compute_of("Det")([te.placeholder((5, 5), "float32", "x")], {},
                          [TensorType((), "float32")])
