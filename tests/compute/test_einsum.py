"""Einsum (core/compute/einsum.py) against the NumPy reference through the llvm
target: the common forms and general sums of products with ellipses."""

from __future__ import annotations

import pytest

from tests.compute.test_elementwise import check, random_array


@pytest.mark.parametrize("equation,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ii->i", [(4, 4)]),
    ("i,i", [(5,), (5,)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (3, 4, 2)]),
    ("abc,cd,bd->ad", [(2, 3, 4), (4, 5), (3, 5)]),
    ("ba", [(3, 4)]),
])
def test_einsum_forms(equation, shapes, rng):
    inputs = [random_array(rng, shape, "float32") for shape in shapes]
    check("Einsum", inputs, {"equation": equation}, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", ["int32", "float64"])
def test_einsum_dtypes(dtype, rng):
    inputs = [random_array(rng, (3, 4), dtype, -50, 50), random_array(rng, (4, 2), dtype,
                                                                      -50, 50)]
    check("Einsum", inputs, {"equation": "ij,jk->ik"})
