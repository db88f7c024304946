"""Constant folding: evaluate nodes whose inputs are all constants."""

from __future__ import annotations

import warnings

import numpy as np

from ..ir.graph import Graph, Value, constant
from ..ops import get_op
from .manager import register_pass
from .rewrite import substitute

#: results bigger than this stay computed at run time (they would bloat the params)
MAX_FOLDED_BYTES = 256 << 20


@register_pass("fold_constants")
def fold_constants(graph: Graph) -> Graph:
    """Replace every node computable at compile time by constants.

    That is a node all of whose inputs are constants, and ``Shape`` / ``Size``
    of any tensor (shapes are static).
    """
    mapping: dict[Value, Value] = {}
    kept = []
    for node in graph.nodes:
        inputs = [mapping.get(v, v) if v is not None else None for v in node.inputs]
        foldable = node.body is None and (
            node.op in ("Shape", "Size")
            or all(v is None or v.is_const for v in inputs))
        if not foldable or sum(v.type.nbytes for v in node.outputs) > MAX_FOLDED_BYTES:
            kept.append(node)
            continue
        if node.op in ("Shape", "Size"):
            inputs = [np.broadcast_to(np.zeros((), v.type.np_dtype), v.type.shape)
                      for v in inputs[:1]]
        else:
            inputs = [v.data if v is not None else None for v in inputs]
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            results = get_op(node.op).run(inputs, node.attrs)
        for v, data in zip(node.outputs, results):
            mapping[v] = constant(np.require(data, v.type.np_dtype, "C"), v.name)
    return substitute(graph, mapping, kept)
