"""TopK without sorting: each element's rank is the count of elements ordered before
it, and output slot r gathers the element of rank r (O(n^2) per slice)."""

from __future__ import annotations

import numpy as np

from .. import te
from ..errors import CompileError
from ..ops.common import normalize_axis
from ..ops.reduction import ReferenceSite
from ..tir import expr as tx
from .common import require_native
from .reduction import is_nan, require_nonempty
from .registry import register_compute

#: most comparisons (slice length squared, times slices) the ranking may cost
TOPK_MAX_WORK = 1 << 26


def _ahead(a, b, largest: bool) -> tx.Expr:
    """Whether value ``a`` sorts strictly before ``b``: NaN counts as the largest value
    (as in the reference's stable argsort)."""
    if not tx.is_float(a.dtype):
        return a > b if largest else a < b
    # equal(v, v): v is not NaN
    if largest:
        return te.logical_or(a > b, te.logical_and(is_nan(a), te.equal(b, b)))
    return te.logical_or(a < b, te.logical_and(is_nan(b), te.equal(a, a)))


def _tied(a, b) -> tx.Expr:
    if not tx.is_float(a.dtype):
        return te.equal(a, b)
    return te.logical_or(te.equal(a, b), te.logical_and(is_nan(a), is_nan(b)))


@register_compute("TopK")
def topk(inputs, attrs, out_types):
    x = inputs[0]
    require_native([x.dtype], "TopK")
    require_nonempty(x.shape, "TopK")
    axis = normalize_axis(ReferenceSite("TopK"), attrs["axis"], x.ndim)
    n = x.shape[axis]
    if n * int(np.prod(x.shape)) > TOPK_MAX_WORK:
        raise CompileError(f"TopK over {list(x.shape)} along axis {axis} is too large for its "
                           "quadratic TE compute")
    largest = bool(attrs["largest"])
    values_type, _ = out_types
    if 0 in values_type.shape:
        raise CompileError("TopK with k=0 has no TE compute (an empty output)")

    def at(index, position):
        return tuple(position if d == axis else i for d, i in enumerate(index))

    def rank_body(*index):
        m = te.reduce_axis(n, "m")
        mine, other = x[index], x[at(index, m.var)]
        before = te.logical_or(_ahead(other, mine, largest),
                               te.logical_and(_tied(other, mine), m.var < index[axis]))
        return te.sum(te.cast("int64", before), axis=m)

    rank = te.compute(x.shape, rank_body, name="topk_rank", dtype="int64")

    def index_body(*out_index):
        j = te.reduce_axis(n, "j")
        chosen = te.equal(rank[at(out_index, j.var)], te.cast("int64", out_index[axis]))
        return te.sum(te.if_then_else(chosen, te.cast("int64", j.var), te.const(0, "int64")),
                      axis=j)

    indices = te.compute(values_type.shape, index_body, name="topk_indices", dtype="int64")
    values = te.compute(values_type.shape, lambda *i: x[at(i, indices[i])], name="topk_values",
                        dtype=x.dtype)
    return [values, indices]
