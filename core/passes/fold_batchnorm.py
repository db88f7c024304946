"""BatchNormalization folding (inference mode)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..ir.graph import Graph, Node, Value, constant
from .manager import register_pass
from .rewrite import single_consumer, substitute


def _bn_scale_shift(bn: Node) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-channel (scale, shift) with y = x * scale + shift, if BN is foldable."""
    if bn.attrs.get("training_mode", 0) or len(bn.outputs) != 1:
        return None
    params = bn.inputs[1:5]
    if len(params) != 4 or not all(v is not None and v.is_const for v in params):
        return None
    gamma, beta, mean, var = (v.data.astype(np.float64) for v in params)
    scale = gamma / np.sqrt(var + bn.attrs["epsilon"])
    return scale, beta - mean * scale


def _fold_into_conv(conv: Node, scale, shift, out: Value) -> Node | None:
    weight = conv.inputs[1]
    if not weight.is_const or (len(conv.inputs) > 2 and conv.inputs[2] is not None
                               and not conv.inputs[2].is_const):
        return None
    dtype = weight.type.np_dtype
    w = weight.data.astype(np.float64) * scale.reshape((-1,) + (1,) * (weight.type.ndim - 1))
    bias = conv.inputs[2].data.astype(np.float64) if len(conv.inputs) > 2 and \
        conv.inputs[2] is not None else 0.0
    b = bias * scale + shift
    return replace(conv, inputs=[conv.inputs[0], constant(w.astype(dtype), f"{conv.name}_w_bn"),
                                 constant(b.astype(dtype), f"{conv.name}_b_bn")],
                   outputs=[out])


def _fold_into_gemm(gemm: Node, scale, shift, out: Value) -> Node | None:
    a, b = gemm.inputs[0], gemm.inputs[1]
    c = gemm.inputs[2] if len(gemm.inputs) > 2 else None
    if not b.is_const or (c is not None and not c.is_const) or out.type.ndim != 2:
        return None
    dtype = b.type.np_dtype
    bw = b.data.astype(np.float64)
    bw = bw * (scale[:, None] if gemm.attrs.get("transB", 0) else scale[None, :])
    cval = c.data.astype(np.float64) * gemm.attrs.get("beta", 1.0) if c is not None else 0.0
    new_c = np.broadcast_to(cval * scale + shift, np.broadcast_shapes(np.shape(cval), scale.shape))
    return replace(gemm, inputs=[a, constant(bw.astype(dtype), f"{gemm.name}_b_bn"),
                                 constant(np.ascontiguousarray(new_c, dtype), f"{gemm.name}_c_bn")],
                   attrs={**gemm.attrs, "beta": 1.0}, outputs=[out])


def _as_mul_add(bn: Node, scale, shift) -> list[Node]:
    x, y = bn.inputs[0], bn.outputs[0]
    dtype = x.type.np_dtype
    bshape = (-1,) + (1,) * (x.type.ndim - 2)
    s = constant(scale.reshape(bshape).astype(dtype), f"{bn.name}_scale")
    t = constant(shift.reshape(bshape).astype(dtype), f"{bn.name}_shift")
    scaled = Value(f"{bn.name}_scaled", x.type)
    return [Node("Mul", [x, s], [scaled], {}, f"{bn.name}_mul"),
            Node("Add", [scaled, t], [y], {}, f"{bn.name}_add")]


@register_pass("fold_batchnorm")
def fold_batchnorm(graph: Graph) -> Graph:
    """Fold inference-mode BatchNormalization into the Conv or Gemm before it
    (when that op's only reader is the BN and its weights are constants);
    any other foldable BN becomes a per-channel Mul and Add."""
    only_reader = single_consumer(graph)
    producers = graph.producers()
    replaced: dict[Node, Node | None] = {}
    extra: dict[Node, list[Node]] = {}
    for node in graph.nodes:
        if node.op != "BatchNormalization" or node.body is not None:
            continue
        folded = _bn_scale_shift(node)
        if folded is None:
            continue
        scale, shift = folded
        src = node.inputs[0]
        prev = producers.get(src)
        new = None
        if prev is not None and only_reader.get(src) is node and prev not in replaced:
            if prev.op == "Conv":
                new = _fold_into_conv(prev, scale, shift, node.outputs[0])
            elif prev.op == "Gemm":
                new = _fold_into_gemm(prev, scale, shift, node.outputs[0])
        if new is not None:
            replaced[prev] = new
            replaced[node] = None
        elif src.type.ndim >= 2:
            extra[node] = _as_mul_add(node, scale, shift)
    nodes = []
    for node in graph.nodes:
        if node in extra:
            nodes.extend(extra[node])
        elif node in replaced:
            if replaced[node] is not None:
                nodes.append(replaced[node])
        else:
            nodes.append(node)
    return substitute(graph, {}, nodes)
