"""Multiply-accumulate counts of the ops that do the heavy arithmetic.

Convolutions and matrix products in every form a model or a quantizer writes
(float, ``*Integer``, ``QLinear*``, ``QGemm``) count their multiply-accumulates
from the node's types; every other op counts 0. Placement reports weigh where a
model's work runs by these counts.
"""

from __future__ import annotations

import math

from ..ir.graph import Node

#: op -> index of its weight (filter) input
_CONVOLUTIONS = {"Conv": 1, "ConvInteger": 1, "QLinearConv": 3}
#: op -> (index of A, index of B)
_MATRIX_PRODUCTS = {"MatMul": (0, 1), "MatMulInteger": (0, 1), "QLinearMatMul": (0, 3)}
_GEMMS = {"Gemm": 0, "QGemm": 0}


def multiply_accumulates(node: Node) -> int:
    """The multiply-accumulates one run of ``node`` performs (0 for ops without a
    reduction over products)."""
    if node.op in _CONVOLUTIONS:
        w = node.inputs[_CONVOLUTIONS[node.op]].type
        # each output element reduces over (input channels / group) x kernel window
        return math.prod(node.outputs[0].type.shape) * math.prod(w.shape[1:])
    if node.op == "ConvNCHWc":  # weight packed (O/ob, C/group/ib, KH, KW, ib, ob)
        w = node.inputs[1].type
        return math.prod(node.outputs[0].type.shape) * math.prod(w.shape[1:-1])
    if node.op == "ConvTranspose":
        x, w = node.inputs[0].type, node.inputs[1].type
        # each input element is scattered over (output channels / group) x kernel window
        return math.prod(x.shape) * math.prod(w.shape[1:])
    if node.op in _MATRIX_PRODUCTS:
        a = node.inputs[_MATRIX_PRODUCTS[node.op][0]].type
        return math.prod(node.outputs[0].type.shape) * (a.shape[-1] if a.ndim else 1)
    if node.op in _GEMMS:
        a = node.inputs[_GEMMS[node.op]].type
        depth = a.shape[0] if node.attrs.get("transA", 0) else a.shape[-1]
        return math.prod(node.outputs[0].type.shape) * depth
    return 0
