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
activations arrive as int8. Before it, an accelerator's pipeline realizes QDQ with
``realize_qdq_before_tables``, which leaves the chains of :func:`tabulable_chains`
whole: made integer products first, GELU's ``x * 0.5`` or the product of
``x * sigmoid(x)`` would cut a chain in two.
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
    """The nodes of one candidate chain, collected backwards from its QuantizeLinear.

    The walk goes on through an inner ``QuantizeLinear`` -> ``DequantizeLinear`` pair
    (the inner quantization of ``x * sigmoid(x)``) unless something below it is not
    element-wise (the convolution that computed ``x``, still in QDQ form before
    ``realize_qdq``): then that pair's quantized tensor is a source instead, and the walk
    starts again."""

    def __init__(self, quantize: Node, producers: dict[Value, Node]):
        stops: set[Node] = set()
        while True:
            self.nodes: list[Node] = []
            self.sources: set[Value] = set()
            ok, via = self._collect(quantize, producers, stops)
            if ok or via is None:
                self.ok = ok and len(self.sources) == 1
                return
            stops.add(via)

    def _collect(self, quantize: Node, producers: dict[Value, Node],
                 stops: set[Node]) -> tuple[bool, Node | None]:
        """Whether the chain is element-wise down to its sources; when not, the inner
        QuantizeLinear through which the walk reached the failing node (None: none)."""
        seen: set[Node] = set()
        stack: list[tuple[Node, Node | None]] = [(quantize, None)]
        while stack:
            node, via = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            if node.op not in ELEMENTWISE or node.body is not None or len(node.outputs) != 1:
                return False, via
            self.nodes.append(node)
            operands = [v for v in node.inputs if v is not None and not v.is_const]
            if any(v.is_const and v.data.size != 1 for v in node.inputs if v is not None):
                return False, via
            if node.op == "DequantizeLinear" and operands:
                source = producers.get(node.inputs[0])
                if source is None or source.op != "QuantizeLinear" or source in stops:
                    self.sources.add(node.inputs[0])
                    continue
                stack.append((source, source))
                continue
            for value in operands:
                producer = producers.get(value)
                if producer is None:
                    return False, via  # a graph input in float: not a quantized tensor
                stack.append((producer, via))
        return True, None

    @property
    def own(self) -> list[Node]:
        """The chain's nodes but those computing a constant (the DequantizeLinear of a
        quantized coefficient), which chains may share once ``cse`` merged them."""
        return [n for n in self.nodes if any(v is not None and not v.is_const for v in n.inputs)]

    @property
    def source(self) -> Value:
        return next(iter(self.sources))


def _closed(chain: _Chain, users: dict[Value, list[Node]], returned: set[Value],
            output: Value) -> bool:
    """Whether no tensor inside the chain (but its output) is read outside it."""
    inside = set(chain.nodes)
    return all(v is output or (v not in returned and all(u in inside for u in users.get(v, ())))
               for node in chain.own for v in node.outputs)


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


def _qualifying_chain(quantize: Node, producers: dict[Value, Node],
                      users: dict[Value, list[Node]], returned: set[Value],
                      taken: set[Node], dtypes: tuple[str, ...]) -> _Chain | None:
    """The chain (module docstring) that ends at ``quantize``, when one qualifies with
    source and output of one of ``dtypes`` and none of its nodes in ``taken`` (a chain
    read later in the graph already holds them)."""
    if quantize.op != "QuantizeLinear" or quantize in taken or \
            quantize.outputs[0].type.dtype not in dtypes:
        return None
    chain = _Chain(quantize, producers)
    if chain.ok and len(chain.nodes) > 1 and not taken.intersection(chain.own) \
            and chain.source.type.dtype in dtypes \
            and all(v.type.shape == chain.source.type.shape or v.type.size == 1
                    for n in chain.nodes for v in n.outputs) \
            and _closed(chain, users, returned, quantize.outputs[0]):
        return chain
    return None


def tabulable_chains(graph: Graph) -> set[Node]:
    """The nodes of every chain :func:`lookup_tables` will take, int8 or uint8 (before
    ``uint8_to_int8``), their QuantizeLinear included: for ``realize_qdq`` to leave
    them whole rather than make one of their products or sums an integer op first
    (GELU's ``x * 0.5``, the product of ``x * sigmoid(x)``), which would cut the
    table's chain in two."""
    producers = graph.producers()
    users = graph.consumers()
    returned = set(graph.outputs)
    taken: set[Node] = set()
    for node in reversed(graph.nodes):
        chain = _qualifying_chain(node, producers, users, returned, taken, ("int8", "uint8"))
        if chain is not None:
            taken.update(chain.own)
    return taken


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
    constants: set[Node] = set()
    for node in reversed(graph.nodes):
        chain = _qualifying_chain(node, producers, users, returned, dropped, ("int8",))
        if chain is None:
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
        dropped.update(n for n in chain.own if n is not node)
        constants.update(n for n in chain.nodes if n not in chain.own)
    if not replaced:
        return graph
    nodes = [replaced.get(n, n) for n in graph.nodes if n not in dropped]
    return substitute(graph, {}, _without_unread(nodes, constants, returned))


def _without_unread(nodes: list[Node], candidates: set[Node], returned: set[Value]) -> list[Node]:
    """``nodes`` less those of ``candidates`` whose outputs nothing reads any more (a
    coefficient's DequantizeLinear that only a replaced chain read)."""
    while True:
        read = {v for n in nodes for v in n.inputs if v is not None} | returned
        kept = [n for n in nodes if n not in candidates or any(v in read for v in n.outputs)]
        if len(kept) == len(nodes):
            return kept
        nodes = kept


__all__ = ["ELEMENTWISE", "lookup_tables", "tabulable_chains"]
