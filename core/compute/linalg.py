"""Det of small matrices by the Leibniz formula (a sum over the permutations of the
rows), in float64 as the reference computes, rounded to the input dtype."""

from __future__ import annotations

import itertools

from .. import te
from ..errors import CompileError
from .common import float_only
from .registry import register_compute

#: the largest matrix whose n! permutation terms are expanded
MAX_LEIBNIZ_SIZE = 4


def _parity(permutation: tuple[int, ...]) -> int:
    inversions = sum(1 for i, j in itertools.combinations(range(len(permutation)), 2)
                     if permutation[i] > permutation[j])
    return -1 if inversions % 2 else 1


@register_compute("Det")
def det(inputs, attrs, out_types):
    x = inputs[0]
    float_only(x.dtype, "Det")
    n = x.shape[-1]
    if n > MAX_LEIBNIZ_SIZE:
        raise CompileError(f"Det of {n} x {n} matrices has no TE compute (at most "
                           f"{MAX_LEIBNIZ_SIZE} x {MAX_LEIBNIZ_SIZE})")

    def body(*batch):
        total = te.const(0.0, "float64")
        for permutation in itertools.permutations(range(n)):
            term = te.const(float(_parity(permutation)), "float64")
            for row, column in enumerate(permutation):
                term = term * te.cast("float64", x[(*batch, row, column)])
            total = total + term
        return te.cast(x.dtype, total)

    return [te.compute(out_types[0].shape, body, name="det", dtype=x.dtype)]
