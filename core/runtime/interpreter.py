"""Evaluate a graph on the NumPy reference implementations of its ops.

This is the semantics oracle: the reference target runs on it, and tests
compare every other target's results against it.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from ..ir.graph import Graph, Value
from ..ops import get_op


def evaluate(graph: Graph, inputs: Sequence[np.ndarray],
             record: dict[Value, np.ndarray] | None = None) -> list[np.ndarray]:
    """The graph's outputs for positional ``inputs`` (one per graph input).

    ``record``, when given, receives every value computed (top level only).
    """
    env: dict[Value, np.ndarray] = dict(zip(graph.inputs, inputs))

    def read(v: Value | None) -> np.ndarray | None:
        if v is None:
            return None
        return v.data if v.is_const else env[v]

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        for node in graph.nodes:
            args = [read(v) for v in node.inputs]
            if node.body is not None:
                results = evaluate(node.body, args)
            else:
                results = get_op(node.op).run(args, node.attrs)
            for v, r in zip(node.outputs, results):
                env[v] = np.asarray(r, dtype=v.type.np_dtype)
    if record is not None:
        record.update(env)
    return [read(v) for v in graph.outputs]
