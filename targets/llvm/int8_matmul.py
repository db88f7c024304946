"""The CPU's integer matrix products as 1x1 integer convolutions (a graph pass).

A ``MatMulInteger`` of 8-bit rows ``[..., M, K]`` by a constant int8 weight ``[K, N]``
(what ``realize_qdq`` makes of a quantized Gemm or MatMul: a classifier's last layer, a
transformer's projections and feed-forward layers), with its bias ``Add`` and
per-column ``Requantize``, is the 1x1 ``ConvInteger`` of the rows as ``M`` (times the
leading dimensions) images of ``K`` channels and one pixel by the weight as
``[N, K, 1, 1]``: the same int32 sums, so the same bits. The CPU's integer convolution
computes those on its 8-bit dot product from the int8 weight (one row:
:mod:`.schedules.int8_conv`'s channel lanes; more: :mod:`.schedules.int8_rows`), where
the float product read a weight dequantized to four times the bytes. The requantized
``[M, N, 1, 1]`` result is reshaped back to ``[..., M, N]``.
"""

from __future__ import annotations

import numpy as np

from heterocc.ir.graph import Graph, NameScope, Node, Value, constant
from heterocc.ir.types import TensorType
from heterocc.sdk.graph import get_op

PASS_NAME = "integer_products_as_convolutions"


def _reshape(data: Value, shape: tuple[int, ...], out: Value | None, name: str,
             scope: NameScope) -> tuple[Node, Value]:
    out = out or Value(scope.fresh(f"{name}_4d"), TensorType(shape, data.type.dtype))
    target = constant(np.asarray(shape, np.int64), scope.fresh(f"{name}_shape"))
    return Node("Reshape", [data, target], [out], {}, scope.fresh(f"{name}_reshape")), out


def _product_chain(node: Node, users) -> list[Node] | None:
    """``[MatMulInteger, (Add,) Requantize]`` from ``node`` when it is such a chain of
    ``[..., M, K]`` rows by a constant ``[K, N]`` int8 weight without zero point, each
    intermediate read by the next alone, requantized per column (its last axis); else
    None."""
    if node.op != "MatMulInteger" or len(node.inputs) > 3:
        return None
    rows, weight = node.inputs[:2]
    if (rows.type.ndim < 2 or weight.data is None or weight.data.ndim != 2
            or weight.type.dtype != "int8"):
        return None
    ndim = rows.type.ndim
    chain = [node]
    while True:
        readers = users.get(chain[-1].outputs[0], ())
        if len(readers) != 1:
            return None
        (reader,) = readers
        chain.append(reader)
        if reader.op == "Requantize":
            return chain if int(reader.attrs.get("axis", 1)) % ndim == ndim - 1 else None
        if reader.op != "Add" or len(chain) > 2 or not _is_column_bias(reader, chain[-2]):
            return None


def _is_column_bias(add: Node, product: Node) -> bool:
    """Whether ``add`` adds a constant of one value per column to ``product``'s result
    (``[N]``, or ones before it: ``[1, N]``, ``[1, 1, N]``)."""
    if add.inputs[0] is not product.outputs[0]:
        return False
    bias = add.inputs[1]
    n = product.outputs[0].type.shape[-1]
    return (bias.data is not None and bias.data.size == n and bias.data.shape[-1:] == (n,)
            and bias.data.ndim <= product.outputs[0].type.ndim)


def _as_convolution(chain: list[Node], scope: NameScope) -> list[Node]:
    product, *middle, requantize = chain
    rows, weight, *zero = product.inputs
    *leading, k = rows.type.shape
    m = int(np.prod(leading))
    n = weight.type.shape[1]
    name = product.name
    reshape_in, images = _reshape(rows, (m, k, 1, 1), None, name, scope)
    kernel = constant(np.ascontiguousarray(weight.data.T.reshape(n, k, 1, 1)),
                      scope.fresh(f"{name}_kernel"))
    sums = Value(scope.fresh(f"{name}_sums"), TensorType((m, n, 1, 1), "int32"))
    conv = Node("ConvInteger", [images, kernel, *zero], [sums], {}, scope.fresh(f"{name}_conv"))
    nodes = [reshape_in, conv]
    for add in middle:
        bias = constant(add.inputs[1].data.reshape(1, n, 1, 1), scope.fresh(f"{name}_bias"))
        biased = Value(scope.fresh(f"{name}_biased"), sums.type)
        nodes.append(Node("Add", [sums, bias], [biased], {}, scope.fresh(f"{name}_bias_add")))
        sums = biased
    out = requantize.outputs[0]
    wide = Value(scope.fresh(f"{name}_requantized"), TensorType((m, n, 1, 1), out.type.dtype))
    nodes.append(Node("Requantize", [sums], [wide], {**requantize.attrs, "axis": 1},
                      requantize.name))
    nodes.append(_reshape(wide, (*leading, n), out, name, scope)[0])
    return nodes


def integer_products_as_convolutions(graph: Graph) -> Graph:
    """Each ``MatMulInteger -> (Add) -> Requantize`` chain of rows by a constant
    int8 weight (see the module's docstring) as the 1x1 ``ConvInteger`` of the rows as
    one-pixel images, its requantized result reshaped back: the same bits."""
    scope = NameScope.of(graph)
    users = graph.consumers()
    replaced: dict[Node, list[Node]] = {}
    dropped: set[Node] = set()
    for node in graph.nodes:
        chain = _product_chain(node, users)
        if chain is not None:
            replaced[chain[-1]] = _as_convolution(chain, scope)
            dropped.update(chain[:-1])
    if not replaced:
        return graph
    nodes = []
    for node in graph.nodes:
        if node not in dropped:
            nodes.extend(replaced.get(node, [node]))
    for node in (n for new in replaced.values() for n in new):
        node.attrs = get_op(node.op).normalize_attrs(node.attrs, node.name)
    return graph.rebuild(nodes, list(graph.outputs))


integer_products_as_convolutions.pass_name = PASS_NAME
