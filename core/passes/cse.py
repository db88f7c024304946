"""Common-subexpression elimination (and merging of identical constants)."""

from __future__ import annotations

import hashlib
from collections import Counter

import numpy as np

from ..ir.graph import Graph, Value
from .manager import register_pass
from .rewrite import substitute


def _freeze(value):
    """A hashable, exact key for an attribute value."""
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, float) and value != value:
        return ("nan",)
    return value


def _start_key(v: Value):
    """The type and the first elements of a constant: what two equal constants share."""
    return v.type, np.asarray(v.data).flat[:_START_ELEMENTS].tobytes()


#: elements compared before two constants of one type are hashed whole
_START_ELEMENTS = 16


def _constant_key(v: Value):
    digest = hashlib.blake2b(v.data.tobytes(), digest_size=16).digest()
    return (v.type, digest)


@register_pass("cse")
def eliminate_common_subexpressions(graph: Graph) -> Graph:
    """Merge nodes that apply the same op with the same attributes to the same
    inputs, and constants with identical contents."""
    mapping: dict[Value, Value] = {}
    seen_consts: dict = {}
    constants = graph.constants()
    # only a constant whose type and first elements another one has can have a twin:
    # the others' contents (most of a model's bytes: its weights) need no hashing
    starts = {v: _start_key(v) for v in constants}
    shared = Counter(starts.values())
    for v in constants:
        if shared[starts[v]] < 2:
            continue
        key = _constant_key(v)
        if key in seen_consts:
            mapping[v] = seen_consts[key]
        else:
            seen_consts[key] = v
    seen: dict = {}
    kept = []
    for node in graph.nodes:
        inputs = tuple(mapping.get(v, v) if v is not None else None for v in node.inputs)
        if node.body is not None:
            kept.append(node)
            continue
        key = (node.op, tuple(id(v) for v in inputs), len(node.outputs), _freeze(node.attrs))
        twin = seen.get(key)
        if twin is None:
            seen[key] = node
            kept.append(node)
        else:
            mapping.update(zip(node.outputs, twin.outputs))
    return substitute(graph, mapping, kept)
