"""Algebraic simplification: remove no-op nodes and collapse reshape/transpose chains."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

import numpy as np

from ..ir.graph import Graph, NameScope, Node, Value, constant
from ..ir.types import TensorType
from .manager import register_pass
from .rewrite import substitute

#: ops that only change the shape of a contiguous tensor
_RESHAPE_LIKE = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")

Rule = Callable[[Node, dict[Value, Node]], "Value | Node | list[Node] | None"]


def _forward_if_same_type(node: Node, _producers) -> Value | None:
    """Ops that are the identity when the output type equals the input type."""
    src = node.inputs[0] if node.inputs else None
    if src is not None and len(node.outputs) == 1 and node.outputs[0].type == src.type:
        return src
    return None


def _dropout(node: Node, _producers) -> Value | None:
    training = node.inputs[2] if len(node.inputs) > 2 else None
    if training is not None and not (training.is_const and not bool(training.data)):
        return None
    if len(node.outputs) > 1:  # the mask is read: keep the node
        return None
    return node.inputs[0]


def _reshape_chain(node: Node, producers) -> Node | Value | None:
    src = node.inputs[0]
    if src.type.shape == node.outputs[0].type.shape:
        return src
    inner = producers.get(src)
    if inner is None or inner.op not in _RESHAPE_LIKE:
        return None
    shape = node.outputs[0].type.shape
    target = constant(np.asarray(shape, dtype=np.int64), f"{node.name}_shape")
    return Node("Reshape", [inner.inputs[0], target], node.outputs,
                {"allowzero": int(0 in shape)}, node.name)


def _transpose(node: Node, producers) -> Node | Value | None:
    src = node.inputs[0]
    perm = node.attrs.get("perm") or list(range(src.type.ndim))[::-1]
    if list(perm) == list(range(src.type.ndim)):
        return src
    inner = producers.get(src)
    if inner is None or inner.op != "Transpose":
        return None
    inner_perm = inner.attrs.get("perm") or list(range(inner.inputs[0].type.ndim))[::-1]
    composed = [inner_perm[p] for p in perm]
    if composed == list(range(len(composed))):
        return inner.inputs[0]
    return replace(node, inputs=[inner.inputs[0]], attrs={**node.attrs, "perm": composed})


#: integer exponents a float Pow of a constant exponent computes by multiplications
#: (ONNX Runtime does for 2 and 3): a vector ``pow`` call costs tens of times more
POW_BY_PRODUCTS = (1, 2, 3, 4)


def _pow_by_products(node: Node, _producers, scope: NameScope | None = None
                     ) -> Value | Node | list[Node] | None:
    """``Pow(x, n)`` of a float ``x`` and a constant one-element exponent ``n`` in
    :data:`POW_BY_PRODUCTS` as products of ``x`` (GPT-2's tanh GELU cubes its input):
    ``x``, ``x * x``, ``(x * x) * x``, ``(x * x) * (x * x)``."""
    x, exponent = node.inputs
    if (not exponent.is_const or exponent.data.size != 1 or len(node.outputs) != 1
            or not x.type.dtype.startswith("float")
            or node.outputs[0].type != x.type):
        return None
    value = float(exponent.data.reshape(()))
    if value not in POW_BY_PRODUCTS:
        return None
    if value == 1:
        return x
    out = node.outputs[0]
    if value == 2:
        return Node("Mul", [x, x], [out], {}, node.name)
    fresh = scope.fresh if scope is not None else str
    square = Value(fresh(f"{out.name}_square"), x.type)
    last = [x, square] if value == 3 else [square, square]
    return [Node("Mul", [x, x], [square], {}, fresh(f"{node.name}_square")),
            Node("Mul", last, [out], {}, node.name)]


def _batched_rows_as_matrix(node: Node, _producers, scope: NameScope | None = None
                            ) -> list[Node] | None:
    """``MatMul(A[b..., 1, K], B[K, N])``, a batch of one-row products of one matrix
    (ViT's QKV projection of ``[tokens, 1, dim]``), as one product of the rows
    ``A[(b...), K] x B`` reshaped back: each batch would otherwise stream all of B
    for a single row."""
    a, b = node.inputs
    if (len(node.outputs) != 1 or b.type.ndim != 2 or a.type.ndim < 3
            or a.type.shape[-2] != 1 or not a.type.dtype.startswith("float")):
        return None
    rows = int(np.prod(a.type.shape[:-2]))
    if rows <= 1:
        return None
    fresh = scope.fresh if scope is not None else str
    out = node.outputs[0]
    matrix = Value(fresh(f"{a.name}_rows"), TensorType((rows, a.type.shape[-1]), a.type.dtype))
    product = Value(fresh(f"{out.name}_rows"), TensorType((rows, b.type.shape[1]),
                                                          out.type.dtype))
    return [Node("Reshape", [a, constant(np.asarray(matrix.type.shape, np.int64),
                                         fresh(f"{matrix.name}_shape"))],
                 [matrix], {"allowzero": 0}, fresh(f"{node.name}_rows")),
            Node("MatMul", [matrix, b], [product], {}, fresh(f"{node.name}_matrix")),
            Node("Reshape", [product, constant(np.asarray(out.type.shape, np.int64),
                                               fresh(f"{out.name}_shape"))],
                 [out], {"allowzero": 0}, node.name)]


def _product_between_reshapes(node: Node, producers, uses: dict[Value, int],
                              scope: NameScope | None = None) -> list[Node] | None:
    """``Reshape(Gemm(Reshape(x[..., K]) -> [M, K], W[K, N], bias[N])) -> [..., N]`` (a
    ``torch`` ``addmm`` of flattened rows: GPT-2's layers) as ``MatMul(x, W) + bias``
    on ``x`` as it is: the reshapes between the product and what follows it (GPT-2's
    GELU, a residual Add) kept those out of the product's function, each a pass of its
    own over the product's output."""
    gemm = producers.get(node.inputs[0])
    if (gemm is None or gemm.op != "Gemm" or gemm.body is not None
            or uses.get(node.inputs[0], 0) != 1 or len(node.outputs) != 1
            or gemm.attrs.get("alpha", 1.0) != 1.0 or gemm.attrs.get("beta", 1.0) != 1.0
            or gemm.attrs.get("transA", 0) or gemm.attrs.get("transB", 0)):
        return None
    a, w = gemm.inputs[:2]
    bias = gemm.inputs[2] if len(gemm.inputs) > 2 else None
    flatten = producers.get(a)
    if flatten is None or flatten.op not in _RESHAPE_LIKE:
        return None
    x, out = flatten.inputs[0], node.outputs[0]
    lead, n = x.type.shape[:-1], w.type.shape[1]
    if (x.type.ndim < 3 or not x.type.dtype.startswith("float")
            or a.type.shape != (int(np.prod(lead)), x.type.shape[-1])
            or out.type.shape != (*lead, n) or out.type.dtype != x.type.dtype
            or (bias is not None and not (bias.is_const and bias.data.size == n))):
        return None
    fresh = scope.fresh if scope is not None else str
    if bias is None:
        return [Node("MatMul", [x, w], [out], {}, gemm.name)]
    product = Value(fresh(f"{out.name}_product"), out.type)
    return [Node("MatMul", [x, w], [product], {}, gemm.name),
            Node("Add", [product, constant(bias.data.reshape(n), fresh(f"{bias.name}_row"))],
                 [out], {}, node.name)]


def _swish(node: Node, producers) -> Node | None:
    """``Mul(x, Sigmoid(x))`` (SiLU, as torch exports it: EfficientNet's activation) as
    one ``Swish(x)``: a function of one read of ``x``, which a convolution then finishes
    in its register tile (a Sigmoid read beside ``x`` by the Mul is a branch in the
    function, which the convolution's epilogue does not take). The Sigmoid stays for
    any other reader (``dce`` drops it otherwise). Same float32 operations, same bits."""
    if len(node.outputs) != 1 or len(node.inputs) != 2:
        return None
    for x, other in (node.inputs, node.inputs[::-1]):
        sigmoid = producers.get(other)
        if (sigmoid is not None and sigmoid.op == "Sigmoid" and sigmoid.body is None
                and sigmoid.inputs[0] is x and x.type.dtype.startswith("float")
                and node.outputs[0].type == x.type):
            return Node("Swish", [x], list(node.outputs), {"alpha": 1.0}, node.name)
    return None


def _single_concat(node: Node, _producers) -> Value | None:
    given = [v for v in node.inputs if v is not None]
    return given[0] if len(given) == 1 else None


RULES: dict[str, Rule] = {
    "Identity": lambda node, _p: node.inputs[0],
    "Dropout": _dropout,
    "Cast": _forward_if_same_type,
    "CastLike": _forward_if_same_type,
    "Expand": _forward_if_same_type,
    "Squeeze": _forward_if_same_type,
    "Unsqueeze": _forward_if_same_type,
    "Flatten": _forward_if_same_type,
    "Reshape": _reshape_chain,
    "Transpose": _transpose,
    "Concat": _single_concat,
    "Pow": _pow_by_products,
    "Mul": _swish,
}


@register_pass("simplify")
def simplify(graph: Graph) -> Graph:
    """Remove Identity, inference-mode Dropout, no-op Cast/Reshape/Expand/Transpose,
    single-input Concat; collapse chains of reshapes and of transposes; compute a
    float Pow by a small constant integer as products; a batch of one-row products
    of one matrix as one product; ``x * Sigmoid(x)`` as ``Swish(x)``; a Gemm of
    flattened rows reshaped back as a MatMul and an Add of the rows as they are."""
    mapping: dict[Value, Value] = {}
    producers: dict[Value, Node] = {}
    scope = NameScope.of(graph)
    uses: dict[Value, int] = {}
    for node in graph.nodes:
        for v in node.inputs:
            if v is not None:
                uses[v] = uses.get(v, 0) + 1
    for v in graph.outputs:
        uses[v] = uses.get(v, 0) + 1
    product = partial(_product_between_reshapes, uses=uses, scope=scope)
    rules = {**RULES, "Pow": partial(_pow_by_products, scope=scope),
             "MatMul": partial(_batched_rows_as_matrix, scope=scope),
             "Reshape": lambda node, p: product(node, p) or _reshape_chain(node, p)}
    kept = []
    for node in graph.nodes:
        inputs = [mapping.get(v, v) if v is not None else None for v in node.inputs]
        if inputs != node.inputs:
            node = replace(node, inputs=inputs)
        rule = rules.get(node.op) if node.body is None else None
        result = rule(node, producers) if rule is not None else None
        if isinstance(result, Value):
            mapping[node.outputs[0]] = result
            continue
        if isinstance(result, list):  # nodes computing the output, the last one its
            *before, result = result
            kept.extend(before)
            producers.update((v, n) for n in before for v in n.outputs)
        if isinstance(result, Node):
            node = result
        kept.append(node)
        producers.update((v, node) for v in node.outputs)
    return substitute(graph, mapping, kept)
