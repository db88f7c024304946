"""Quantized element-wise functions of one int8 tensor become 256-entry lookup tables.

Between a DequantizeLinear of an int8 tensor ``x`` and a QuantizeLinear to int8, a
chain of element-wise operators (Sigmoid, HardSwish, Tanh, Erf and the arithmetic
of a GELU, ``x * sigmoid(x)`` with its own inner quantization, ...) computes each
output element from the one element of ``x`` at the same position. ``x`` takes 256
values, so the whole chain is a table: this pass evaluates the chain's own nodes
(their NumPy references, the semantics every target implements) on the 256 values
and replaces it by ``LookupTable(x, table)``. The result is exact by construction:
the table holds what the QDQ graph computes for each input.

A chain qualifies when every operator in it is element-wise (one of
``ELEMENTWISE``), every intermediate tensor has ``x``'s shape, every other operand
is a one-element constant (a per-tensor scale, zero point, clamp bound or
coefficient), its only non-constant input is ``x``, and nothing outside reads its
intermediate tensors. The rewrite runs after ``uint8_to_int8``, so uint8
activations arrive as int8.
"""

from __future__ import annotations

import numpy as np

from ..ir.graph import Graph, NameScope, Node, Value, constant
from ..ops import get_op
from ..ops.lookup import TABLE_ENTRIES, TABLE_OFFSET
from .manager import register_pass
from .rewrite import substitute

#: operators that compute each output element from the elements at the same position
#: of their inputs (with one-element constants broadcast)
ELEMENTWISE = frozenset({
    "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Erf", "Relu", "LeakyRelu", "Clip", "Elu",
    "Selu", "Celu", "Softplus", "Softsign", "Exp", "Log", "Sqrt", "Abs", "Neg",
    "Reciprocal", "Gelu", "Mish", "Sin", "Cos", "Tan", "Atan", "Sinh", "Cosh", "Floor",
    "Ceil", "Round", "Sign", "Mul", "Add", "Sub", "Div", "Pow", "Max", "Min", "PRelu",
    "ThresholdedRelu", "Shrink", "QuantizeLinear", "DequantizeLinear", "Cast", "Identity"})


class _Chain:
    """The nodes of one candidate chain, collected backwards from its QuantizeLinear."""

    def __init__(self, quantize: Node, producers: dict[Value, Node], through_quantize: bool):
        self.nodes: list[Node] = []
        self.sources: set[Value] = set()
        self.ok = self._collect(quantize, producers, through_quantize)

    def _collect(self, quantize: Node, producers: dict[Value, Node],
                 through_quantize: bool) -> bool:
        seen: set[Node] = set()
        stack = [quantize]
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            if node.op not in ELEMENTWISE or node.body is not None or len(node.outputs) != 1:
                return False
            self.nodes.append(node)
            operands = [v for v in node.inputs if v is not None and not v.is_const]
            if any(v.is_const and v.data.size != 1 for v in node.inputs if v is not None):
                return False
            if node.op == "DequantizeLinear" and operands:
                source = producers.get(node.inputs[0])
                if not (through_quantize and source is not None
                        and source.op == "QuantizeLinear"):
                    self.sources.add(node.inputs[0])
                    continue
            for value in operands:
                producer = producers.get(value)
                if producer is None:
                    return False  # a graph input in float: not a quantized tensor
                stack.append(producer)
        return len(self.sources) == 1

    @property
    def source(self) -> Value:
        return next(iter(self.sources))


def _closed(chain: _Chain, users: dict[Value, list[Node]], returned: set[Value],
            output: Value) -> bool:
    """Whether no tensor inside the chain (but its output) is read outside it."""
    inside = set(chain.nodes)
    return all(v is output or (v not in returned and all(u in inside for u in users.get(v, ())))
               for node in chain.nodes for v in node.outputs)


def _table(chain: _Chain, graph_order: dict[Node, int]) -> np.ndarray | None:
    """The chain's output for the 256 int8 inputs, in the LookupTable's order."""
    values: dict[Value, np.ndarray] = {
        chain.source: np.arange(-TABLE_OFFSET, TABLE_ENTRIES - TABLE_OFFSET, dtype=np.int8)}
    result = None
    with np.errstate(all="ignore"):
        for node in sorted(chain.nodes, key=graph_order.__getitem__):
            args = [None if v is None else v.data if v.is_const else values[v]
                    for v in node.inputs]
            (result,) = get_op(node.op).run(args, node.attrs)
            values[node.outputs[0]] = result
    if result is None or result.dtype != np.int8 or result.size != TABLE_ENTRIES:
        return None
    return result.reshape(-1)


@register_pass("lookup_tables")
def lookup_tables(graph: Graph) -> Graph:
    """Replace every qualifying quantized element-wise chain (module docstring) by a
    ``LookupTable`` of its source tensor."""
    scope = NameScope.of(graph)
    producers = graph.producers()
    users = graph.consumers()
    returned = set(graph.outputs)
    order = {node: index for index, node in enumerate(graph.nodes)}
    replaced: dict[Node, Node] = {}
    dropped: set[Node] = set()
    for node in reversed(graph.nodes):
        if node.op != "QuantizeLinear" or node in dropped or \
                node.outputs[0].type.dtype != "int8":
            continue
        for through_quantize in (True, False):
            chain = _Chain(node, producers, through_quantize)
            if chain.ok and len(chain.nodes) > 1 and not dropped.intersection(chain.nodes) \
                    and chain.source.type.dtype == "int8" \
                    and all(v.type.shape == chain.source.type.shape or v.type.size == 1
                            for n in chain.nodes for v in n.outputs) \
                    and _closed(chain, users, returned, node.outputs[0]):
                break
        else:
            continue
        table = _table(chain, order)
        if table is None:
            continue
        absorbed = [f"{n.op}:{n.name}" for n in sorted(chain.nodes, key=order.__getitem__)
                    if n.op not in ("QuantizeLinear", "DequantizeLinear")]
        name = scope.fresh(f"{node.name or 'q'}_table")
        replaced[node] = Node("LookupTable",
                              [chain.source, constant(table, scope.fresh(f"{name}_entries"))],
                              [node.outputs[0]], {"absorbed": absorbed}, name)
        dropped.update(n for n in chain.nodes if n is not node)
    if not replaced:
        return graph
    nodes = [replaced.get(n, n) for n in graph.nodes if n not in dropped]
    return substitute(graph, {}, nodes)


__all__ = ["ELEMENTWISE", "lookup_tables"]
