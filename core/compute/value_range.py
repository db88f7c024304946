"""The values an integer TE tensor can hold, from the computes that produce it.

A compute may pick a cheaper exact form where its input is known to be small (a
requantization of an int8 operand less its zero point, see
:func:`heterocc.compute.qnn._split_product_form`): the bound is read off the
expressions the input's compute chain is made of, an interval per node, each
clipped to its dtype's range (a step that may wrap can hold any value of its dtype).
"""

from __future__ import annotations

import numpy as np

from ..te.tensor import ComputeOp, ConstantOp, Tensor, TensorLoad
from ..tir import Interval, IntervalAnalysis
from ..tir.expr import is_int


def _dtype_range(dtype: str) -> Interval:
    info = np.iinfo(dtype)
    return Interval(int(info.min), int(info.max))


class _ValueBounds(IntervalAnalysis):
    """Interval analysis through tensor reads: a read of a computed tensor takes the
    bound of that tensor's body, a read of a constant (a table, or a scalar folded into
    the code) its data's, any other read (an input) its dtype's."""

    def __init__(self):
        super().__init__({})
        self.tensors: dict[int, tuple[Tensor, Interval]] = {}

    def expr(self, node) -> Interval:
        bound = super().expr(node)
        if not is_int(node.dtype) or node.dtype == "bool":
            return bound
        whole = _dtype_range(node.dtype)
        return bound if whole.lo <= bound.lo and bound.hi <= whole.hi else whole

    def visit_TensorLoad(self, node: TensorLoad) -> Interval:
        return self.tensor(node.tensor)

    def tensor(self, tensor: Tensor) -> Interval:
        hit = self.tensors.get(id(tensor))
        if hit is None:
            op = tensor.op
            if isinstance(op, ComputeOp):
                bound = self.expr(op.body)
            elif isinstance(op, ConstantOp) and op.data.size:
                bound = Interval(int(op.data.min()), int(op.data.max()))
            elif op.folded is not None:
                bound = Interval(int(op.folded.min()), int(op.folded.max()))
            else:
                bound = _dtype_range(tensor.dtype)
            hit = self.tensors[id(tensor)] = (tensor, bound)
        return hit[1]


def value_range(tensor: Tensor) -> tuple[int, int] | None:
    """``(lo, hi)``, inclusive, bounding every element of the integer ``tensor``; None
    for a tensor of another dtype."""
    if not is_int(tensor.dtype) or tensor.dtype == "bool":
        return None
    try:
        bound = _ValueBounds().tensor(tensor)
    except RecursionError:  # a chain of computes too deep to walk: its dtype's range
        bound = _dtype_range(tensor.dtype)
    return int(bound.lo), int(bound.hi)
