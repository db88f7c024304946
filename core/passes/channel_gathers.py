"""Quantized data movement between convolutions becomes integer, and channel shuffles
and splits become ``ChannelGather`` ops.

Two rewrites, in this order:

1. ``Q(M(DQ(x)))`` for an op ``M`` that only moves elements (Reshape, Transpose,
   Slice, Squeeze, ...) with the same per-tensor scale, zero point and type on both
   sides is ``M(x)`` on the integers: ``Q(DQ(x)) == x`` and ``M`` commutes with an
   element-wise map. An exporter quantizes every step of a channel shuffle this way.
2. A cluster of such ops on int8 tensors (a ShuffleNet unit's Concat ->
   Reshape -> Transpose -> Reshape -> Slice) that turns 4-D tensors into a 4-D tensor
   with the same batch and spatial extents, each output channel one input channel,
   becomes ``ChannelGather(sources..., channels=...)``. The channel map is found by
   running the cluster's own ops (their NumPy references) on the positions of the
   sources' elements, so it is exact by construction. A cluster starts at the inputs
   of a Concat (a Concat's own inputs are its sources) and ends at every tensor that
   something other than such an op reads: a ShuffleNet unit's two Slices become two
   gathers of the two branches, with no Concat between. A lone Concat stays as it is.

The tensors inside a cluster are then unread and left to ``dce``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..ir.graph import Graph, NameScope, Node, Value
from ..ops import get_op
from .manager import register_pass
from .quantize import _same_quantization
from .rewrite import substitute

#: ops whose outputs are elements of their first input (their other operands are
#: shapes, axes or indices), or of all their inputs (Concat)
MOVING = frozenset({"Reshape", "Transpose", "Slice", "Split", "Squeeze", "Unsqueeze",
                    "Flatten", "Identity", "Gather", "Concat"})


def _operands_constant(node: Node) -> bool:
    """Whether every input but the moved data is a constant (shapes, starts, axes)."""
    data = node.inputs if node.op == "Concat" else node.inputs[:1]
    return all(v is None or v.is_const or v in data for v in node.inputs)


def _integer_moves(graph: Graph) -> Graph:
    """Rewrite 1 (module docstring): ``Q(M(DQ(x)))`` -> ``M(x)``, where every output of
    ``M`` (a Split has several) is read only by such QuantizeLinear nodes."""
    scope = NameScope.of(graph)
    producers = graph.producers()
    users = graph.consumers()
    returned = set(graph.outputs)
    order = {node: index for index, node in enumerate(graph.nodes)}
    replaced: dict[Node, Node] = {}
    mapping: dict[Value, Value] = {}
    dropped: set[Node] = set()
    for move in graph.nodes:
        if move.op not in MOVING or move.op == "Concat" or not _operands_constant(move):
            continue
        dq = producers.get(move.inputs[0])
        if dq is None or dq.op != "DequantizeLinear" or dq.inputs[0].is_const or \
                dq.inputs[0].type.dtype != "int8":
            continue
        readers = [users.get(v, []) for v in move.outputs]
        if any(v in returned or not qs for v, qs in zip(move.outputs, readers)) or not all(
                q.op == "QuantizeLinear" and q.inputs[0] is v and _same_quantization(dq, q)
                for v, qs in zip(move.outputs, readers) for q in qs):
            continue
        outputs = [qs[0].outputs[0] for qs in readers]
        mapping.update((q.outputs[0], out) for qs, out in zip(readers, outputs) for q in qs[1:])
        dropped.update(q for qs in readers for q in qs[1:])
        # the integer op takes the place of the first of these QuantizeLinear nodes: it
        # reads only what the float op read, and every reader of its outputs comes later
        first = min((qs[0] for qs in readers), key=order.__getitem__)
        replaced[first] = Node(move.op, [dq.inputs[0], *move.inputs[1:]], outputs,
                               dict(move.attrs), scope.fresh(f"{move.name}_int"))
        dropped.update(qs[0] for qs in readers if qs[0] is not first)
    if not replaced:
        return graph
    nodes = [replaced.get(n, n) for n in graph.nodes if n not in dropped]
    return substitute(graph, mapping, nodes)


def _cluster(value: Value, producers: dict[Value, Node]) -> tuple[list[Node], list[Value]]:
    """The movement nodes computing ``value`` back to its sources (module docstring),
    and the sources in the order first met."""
    nodes: list[Node] = []
    sources: list[Value] = []
    stack = [value]
    while stack:
        v = stack.pop()
        node = producers.get(v)
        if node is None or node.op not in MOVING or not _operands_constant(node) or \
                v.type.dtype != "int8":
            if v not in sources:
                sources.append(v)
            continue
        if node in nodes:
            continue
        nodes.append(node)
        if node.op == "Concat":
            sources.extend(x for x in node.inputs if x is not None and x not in sources)
        else:
            stack.append(node.inputs[0])
    return nodes, sources


def channel_map(value: Value, nodes: list[Node], sources: list[Value],
                order: dict[Node, int]) -> list[int] | None:
    """The source channel (of the sources concatenated along axis 1) of each channel of
    ``value``, or None when ``value`` is not such a gather: the cluster's ``nodes`` run on
    the positions of the sources' elements."""
    out = value.type
    if out.ndim != 4 or any(s.type.ndim != 4 or s.type.shape[:1] + s.type.shape[2:]
                            != out.shape[:1] + out.shape[2:] for s in sources):
        return None
    n, _, h, w = out.shape
    positions = n * h * w
    grid = np.arange(positions, dtype=np.int64).reshape(n, 1, h, w)
    values: dict[Value, np.ndarray] = {}
    offset = 0
    for s in sources:
        channels = np.arange(offset, offset + s.type.shape[1], dtype=np.int64)
        values[s] = channels.reshape(1, -1, 1, 1) * positions + grid
        offset += s.type.shape[1]
    for node in sorted(nodes, key=order.__getitem__):
        args = [None if v is None else v.data if v.is_const else values[v] for v in node.inputs]
        for v, result in zip(node.outputs, get_op(node.op).run(args, node.attrs)):
            values[v] = result
    result = values[value]
    if result.shape != out.shape or not np.array_equal(result % positions,
                                                       np.broadcast_to(grid, out.shape)):
        return None
    source = result // positions
    if not np.array_equal(source, np.broadcast_to(source[:1, :, :1, :1], out.shape)):
        return None
    return source[0, :, 0, 0].tolist()


def _exits(graph: Graph) -> list[Value]:
    """int8 tensors made by a movement op and read by something else (or returned)."""
    users = graph.consumers()
    returned = set(graph.outputs)
    found = []
    for node in graph.nodes:
        if node.op not in MOVING or not _operands_constant(node):
            continue
        for v in node.outputs:
            if v.type.dtype == "int8" and (v in returned or any(
                    u.op not in MOVING or u.op == "Concat" or not _operands_constant(u)
                    for u in users.get(v, ()))):
                found.append(v)
    return found


@register_pass("channel_gathers")
def channel_gathers(graph: Graph) -> Graph:
    """Quantized data movement as integer ops, and channel shuffles and splits of int8
    tensors as ``ChannelGather`` (module docstring)."""
    graph = _integer_moves(graph)
    scope = NameScope.of(graph)
    producers = graph.producers()
    order = {node: index for index, node in enumerate(graph.nodes)}
    gathers: dict[Node, list[Node]] = {}
    listed: set[Node] = set()
    for value in _exits(graph):
        nodes, sources = _cluster(value, producers)
        if all(node.op == "Concat" for node in nodes):
            continue
        channels = channel_map(value, nodes, sources, order)
        if channels is None or (len(sources) == 1 and channels == list(
                range(sources[0].type.shape[1]))):
            continue
        # (a node two gathers share, a shuffle's, is listed by the first)
        absorbed = [f"{node.op}:{node.name}" for node in sorted(nodes, key=order.__getitem__)
                    if node not in listed]
        listed.update(nodes)
        producer = producers[value]
        gathers.setdefault(producer, []).append(Node(
            "ChannelGather", list(sources), [value], {"channels": channels,
                                                     "absorbed": absorbed},
            scope.fresh(f"{producer.name}_gather")))
    if not gathers:
        return graph
    nodes = []
    for node in graph.nodes:
        if node not in gathers:
            nodes.append(node)
            continue
        gathered = {g.outputs[0] for g in gathers[node]}
        if any(v not in gathered for v in node.outputs):
            # a Split whose other outputs stay: it keeps computing them, the gathered
            # ones into fresh tensors nothing reads
            nodes.append(replace(node, outputs=[
                Value(scope.fresh(f"{v.name}_unread"), v.type) if v in gathered else v
                for v in node.outputs]))
        nodes.extend(gathers[node])
    return substitute(graph, {}, nodes)


__all__ = ["MOVING", "channel_gathers", "channel_map"]
