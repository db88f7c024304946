"""Einsum as one sum of products over the labels the output drops."""

from __future__ import annotations

import numpy as np

from .. import te
from ..ops.reduction import ReferenceSite, accumulator_dtype, plan_einsum
from .common import require_native
from .registry import register_compute


def _spelled_out(term: str, rank: int, ellipsis_labels: str) -> str:
    """``term`` with its ellipsis replaced by the trailing ``ellipsis_labels`` it covers
    (an operand's ellipsis is right-aligned with the broadcast ellipsis dims)."""
    if "..." not in term:
        return term
    spare = rank - len(term.replace("...", ""))
    covered = ellipsis_labels[len(ellipsis_labels) - spare:] if spare else ""
    return term.replace("...", covered)


def labelled_terms(equation: str, shapes) -> tuple[list[str], str, dict[str, int]]:
    """The equation's operand terms and output term with one letter per axis (ellipses
    spelled out in letters the equation does not use) and each label's extent (the
    broadcast one for ellipsis dims)."""
    lhs, rhs = equation.split("->")
    terms = lhs.split(",")
    unused = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
              if c not in equation]
    widest = max((len(s) - len(t.replace("...", "")) for t, s in zip(terms, shapes)
                  if "..." in t), default=0)
    ellipsis_labels = "".join(unused[:widest])
    spelled = [_spelled_out(t, len(s), ellipsis_labels) for t, s in zip(terms, shapes)]
    sizes: dict[str, int] = {}
    for term, shape in zip(spelled, shapes):
        for label, size in zip(term, shape):
            sizes[label] = max(sizes.get(label, 1), size)
    return spelled, _spelled_out(rhs, len(ellipsis_labels) + len(rhs.replace("...", "")),
                                 ellipsis_labels), sizes


@register_compute("Einsum")
def einsum(inputs, attrs, out_types):
    """``out[o] = sum over the dropped labels of prod_k input_k[labels of k]``, in the
    reference's accumulator dtype; a size-1 operand axis under a wider label (ellipsis
    broadcasting) is read at 0."""
    out = out_types[0]
    require_native([t.dtype for t in inputs] + [out.dtype], "Einsum")
    shapes = [tuple(t.shape) for t in inputs]
    plan = plan_einsum(ReferenceSite("Einsum"), attrs["equation"], shapes)
    terms, output, sizes = labelled_terms(plan.equation, shapes)
    acc = np.dtype(accumulator_dtype(out.dtype)).name
    dropped = sorted({label for term in terms for label in term} - set(output))

    def product(at: dict):
        value = None
        for t, term in zip(inputs, terms):
            index = tuple(0 if size == 1 and sizes[label] != 1 else at[label]
                          for label, size in zip(term, t.shape))
            factor = te.cast(acc, t[index])
            value = factor if value is None else value * factor
        return value

    def body(*index):
        at = dict(zip(output, index))
        if not dropped:
            return product(at)
        axes = [te.reduce_axis(sizes[label], f"r_{label}") for label in dropped]
        at.update({label: axis.var for label, axis in zip(dropped, axes)})
        return te.sum(product(at), axis=axes)

    if any(sizes[label] == 0 for label in dropped):
        total = te.compute(out.shape, lambda *i: te.const(0, acc), name="einsum", dtype=acc)
    else:
        total = te.compute(out.shape, body, name="einsum", dtype=acc)
    if acc == out.dtype:
        return [total]
    return [te.compute(out.shape, lambda *i: te.cast(out.dtype, total[i]), name="einsum_cast",
                       dtype=out.dtype)]
