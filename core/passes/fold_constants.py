"""Constant folding: evaluate nodes whose inputs are all constants."""

from __future__ import annotations

import warnings

import numpy as np

from ..ir.graph import Graph, Value, constant
from ..ops import OpDef, get_op
from .manager import register_pass
from .rewrite import substitute

#: results bigger than this stay computed at run time (they would bloat the params)
MAX_FOLDED_BYTES = 256 << 20


#: ops whose result depends only on their input's static type, not its contents
SHAPE_ONLY_OPS = ("Shape", "Size")


def can_fold(op_name: str, inputs: list[Value | None]) -> bool:
    """Whether a node is computable now: all its inputs are constants, or it is
    Shape/Size of a (statically typed) tensor."""
    if op_name in SHAPE_ONLY_OPS:
        return bool(inputs) and inputs[0] is not None
    return all(v is None or v.is_const for v in inputs)


def fold_node(op: OpDef, inputs: list[Value | None], attrs: dict) -> list[np.ndarray]:
    """The outputs of a node :func:`can_fold` accepts, evaluated on the NumPy reference."""
    if op.name in SHAPE_ONLY_OPS:
        t = inputs[0].type
        args = [np.broadcast_to(np.zeros((), t.np_dtype), t.shape)]
    else:
        args = [v.data if v is not None else None for v in inputs]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return op.run(args, attrs)


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
        if node.body is not None or not can_fold(node.op, inputs) \
                or sum(v.type.nbytes for v in node.outputs) > MAX_FOLDED_BYTES:
            kept.append(node)
            continue
        results = fold_node(get_op(node.op), inputs, node.attrs)
        for v, data in zip(node.outputs, results):
            mapping[v] = constant(np.require(data, v.type.np_dtype, "C"), v.name)
    return substitute(graph, mapping, kept)
