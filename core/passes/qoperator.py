"""Expand ONNX Runtime's QOperator format into the QDQ format.

``onnxruntime.quantization.quantize_static(quant_format=QuantFormat.QOperator)``
writes quantized models with one op per quantized operation: ONNX
``QLinearConv`` and ``QLinearMatMul`` and the ``com.microsoft`` ops ``QGemm``,
``QLinearAdd``, ``QLinearMul``, ``QLinearGlobalAveragePool``,
``QLinearAveragePool``, ``QLinearConcat``, ``QLinearSigmoid``, ``QLinearLeakyRelu``
and ``QLinearSoftmax`` (a transformer's attention). This pass rewrites each into the
form the QDQ quantizer would have written for the same float model::

    y_q = QuantizeLinear(op(DequantizeLinear(x_q, x_scale, x_zp), ...), y_scale, y_zp)

keeping per-channel weight scales (with their axis) and the int32 bias of
convolutions and dense layers, which is dequantized with the scale
``x_scale * w_scale`` it was quantized with. The rest of the compiler then
sees one quantized format only: ``realize_qdq`` turns the convolution and
dense chains into integer arithmetic for an accelerator, and constant folding
turns the dequantized weights of the CPU's float ops into constants.

QGemm's ``alpha`` (and a ``y_scale`` given without ``y_zero_point``, which
ONNX Runtime divides the float output by) is folded into B's scale and the
bias scale, so the float Gemm has ``alpha = 1`` as ``realize_qdq`` requires.
A node whose expansion needs a constant it lacks (the scales that form a bias
scale, say) is left as it is; its NumPy reference still runs it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from ..ir.graph import Graph, NameScope, Node, Value, constant
from ..ir.types import TensorType
from ..ops import MS_DOMAIN, get_op, op_key
from ..ops.qlinear_contrib import softmax_normalizes_one_axis
from .manager import register_pass

_DQ_ATTRS = {"axis": 1, "block_size": 0, "output_dtype": 0}
_Q_ATTRS = {"axis": 1, "block_size": 0, "output_dtype": 0, "saturate": 1, "precision": 0}


class _Expansion:
    """Builds the QDQ nodes replacing one QOperator node."""

    def __init__(self, node: Node, scope: NameScope):
        self.node = node
        self.scope = scope
        self.nodes: list[Node] = []

    def _name(self, suffix: str) -> str:
        return self.scope.fresh(f"{self.node.name}_{suffix}")

    def float_value(self, suffix: str, shape: tuple[int, ...]) -> Value:
        return Value(self._name(suffix), TensorType(tuple(shape), "float32"))

    def const(self, data: np.ndarray, suffix: str) -> Value:
        return constant(np.asarray(data), self._name(suffix))

    def emit(self, op: str, inputs: list[Value | None], outputs: list[Value], attrs: dict,
             suffix: str) -> None:
        attrs = get_op(op).normalize_attrs(attrs, self.node.name)
        self.nodes.append(Node(op, inputs, outputs, attrs, self._name(suffix)))

    def dequantize(self, x: Value, scale: Value, zero: Value | None, suffix: str,
                   axis: int = 1) -> Value:
        """DequantizeLinear of ``x`` (per-axis along ``axis`` when the scale is 1-D)."""
        out = self.float_value(suffix, x.type.shape)
        self.emit("DequantizeLinear", [x, scale] + ([zero] if zero is not None else []), [out],
                  {**_DQ_ATTRS, "axis": axis}, f"dq{suffix}")
        return out

    def quantize(self, y: Value, scale: Value, zero: Value | None, out: Value) -> None:
        """QuantizeLinear of ``y`` into the node's own output value ``out``.

        The zero point is always explicit, with the scale's shape, so the output
        type is ``out``'s (QuantizeLinear's default is uint8).
        """
        if zero is None:
            zero = self.const(np.zeros(scale.type.shape, out.type.dtype), "yz")
        elif zero.type.shape != scale.type.shape and zero.is_const:
            zero = self.const(zero.data.reshape(scale.type.shape), "yz")
        self.emit("QuantizeLinear", [y, scale, zero], [out], dict(_Q_ATTRS), "q")


def _input(node: Node, index: int) -> Value | None:
    return node.inputs[index] if index < len(node.inputs) else None


def _const(*values: Value | None) -> bool:
    return all(v is not None and v.is_const for v in values)


def _f32(data: np.ndarray) -> np.ndarray:
    """float64 arithmetic rounded once to float32 (as the QDQ quantizer's products)."""
    return np.asarray(data, np.float64).astype(np.float32)


# --------------------------------------------------------------------------- conv / matmul / gemm


def _qlinear_conv(e: _Expansion) -> bool:
    node = e.node
    x, sx, zx, w, sw, zw, sy = node.inputs[:7]
    zy, bias = _input(node, 7), _input(node, 8)
    if bias is not None and not _const(sx, sw):
        return False
    xf = e.dequantize(x, sx, zx, "x")
    wf = e.dequantize(w, sw, zw, "w", axis=0)
    inputs = [xf, wf]
    if bias is not None:
        scale = e.const(_f32(sx.data.astype(np.float64).reshape(-1)[0] * sw.data), "bscale")
        inputs.append(e.dequantize(bias, scale, None, "b", axis=0))
    yf = e.float_value("yf", node.outputs[0].type.shape)
    e.emit("Conv", inputs, [yf], dict(node.attrs), "float")
    e.quantize(yf, sy, zy, node.outputs[0])
    return True


def _qlinear_matmul(e: _Expansion) -> bool:
    node = e.node
    a, sa, za, b, sb, zb, sy, zy = node.inputs[:8]
    af = e.dequantize(a, sa, za, "a", axis=max(a.type.ndim - 2, 0))
    bf = e.dequantize(b, sb, zb, "b", axis=b.type.ndim - 1)
    yf = e.float_value("yf", node.outputs[0].type.shape)
    e.emit("MatMul", [af, bf], [yf], {}, "float")
    e.quantize(yf, sy, zy, node.outputs[0])
    return True


def _qgemm(e: _Expansion) -> bool:
    node = e.node
    a, sa, za, b, sb, zb = node.inputs[:6]
    c, sy, zy = _input(node, 6), _input(node, 7), _input(node, 8)
    attrs = node.attrs
    factor = float(attrs["alpha"])
    if sy is not None and zy is None:  # a float output divided by y_scale (as ONNX Runtime)
        if not sy.is_const:
            return False
        factor /= float(sy.data.reshape(-1)[0])
    fold = factor != 1.0
    if (fold and not sb.is_const) or (c is not None and not _const(sa, sb)):
        return False
    cols = node.outputs[0].type.shape[1]
    b_axis = 0 if attrs["transB"] else 1
    if fold:
        sb = e.const(_f32(sb.data.astype(np.float64) * factor), "bscale_alpha")
    af = e.dequantize(a, sa, za, "a")
    bf = e.dequantize(b, sb, zb, "b", axis=b_axis)
    inputs = [af, bf]
    if c is not None:
        bias_scale = _f32(sa.data.astype(np.float64).reshape(-1)[0] * sb.data)
        per_column = bias_scale.size > 1
        if not per_column:
            scale = e.const(bias_scale, "cscale")
            inputs.append(e.dequantize(c, scale, None, "c"))
        elif c.type.ndim >= 1 and c.type.shape[-1] == cols:
            scale = e.const(bias_scale.reshape(-1), "cscale")
            inputs.append(e.dequantize(c, scale, None, "c", axis=c.type.ndim - 1))
        elif c.is_const:  # a bias along rows meets per-column scales: dequantize it here
            real = np.broadcast_to(c.data.astype(np.float64), (1, cols)) if c.type.ndim < 2 \
                else c.data.astype(np.float64)
            inputs.append(e.const(_f32(real * bias_scale.reshape(1, -1)), "cf"))
        else:
            return False
    out = node.outputs[0]
    yf = out if zy is None else e.float_value("yf", out.type.shape)
    e.emit("Gemm", inputs, [yf], {"alpha": 1.0, "beta": 1.0, "transA": attrs["transA"],
                                  "transB": attrs["transB"]}, "float")
    if zy is not None:
        e.quantize(yf, sy, zy, out)
    return True


# --------------------------------------------------------------------------- elementwise / pooling


def _binary(float_op: str) -> Callable[[_Expansion], bool]:
    def expand(e: _Expansion) -> bool:
        node = e.node
        a, sa, za, b, sb, zb, sc = node.inputs[:7]
        zc = _input(node, 7)
        af = e.dequantize(a, sa, za, "a")
        bf = e.dequantize(b, sb, zb, "b")
        yf = e.float_value("yf", node.outputs[0].type.shape)
        e.emit(float_op, [af, bf], [yf], {}, "float")
        e.quantize(yf, sc, zc, node.outputs[0])
        return True

    return expand


def _unary(float_op: str, attrs: Callable[[dict], dict] = lambda a: {},
           channels_last: bool = False) -> Callable[[_Expansion], bool]:
    """X, X_scale, X_zp, Y_scale, Y_zp -> DQ -> float op (NCHW) -> Q."""

    def expand(e: _Expansion) -> bool:
        node = e.node
        x, sx = node.inputs[:2]
        zx, sy, zy = _input(node, 2), node.inputs[3], _input(node, 4)
        out = node.outputs[0]
        xf = e.dequantize(x, sx, zx, "x")
        last = channels_last and node.attrs.get("channels_last", 0)
        rank = x.type.ndim
        if last:  # the float ops take N x C x spatial...
            shape = x.type.shape
            first = e.float_value("nchw", (shape[0], shape[-1], *shape[1:-1]))
            e.emit("Transpose", [xf], [first], {"perm": [0, rank - 1, *range(1, rank - 1)]},
                   "to_nchw")
            xf = first
            o = out.type.shape
            yf = e.float_value("yf_nchw", (o[0], o[-1], *o[1:-1]))
        else:
            yf = e.float_value("yf", out.type.shape)
        e.emit(float_op, [xf], [yf], attrs(node.attrs), "float")
        if last:
            back = e.float_value("yf", out.type.shape)
            e.emit("Transpose", [yf], [back], {"perm": [0, *range(2, rank), 1]}, "to_nhwc")
            yf = back
        e.quantize(yf, sy, zy, out)
        return True

    return expand


def _pool_attrs(attrs: dict) -> dict:
    return {key: attrs[key] for key in ("auto_pad", "ceil_mode", "count_include_pad",
                                        "kernel_shape", "pads", "strides")}


def _qlinear_concat(e: _Expansion) -> bool:
    node = e.node
    sy, zy = node.inputs[:2]
    parts = []
    for k, i in enumerate(range(2, len(node.inputs), 3)):
        x, sx, zx = node.inputs[i:i + 3]
        parts.append(e.dequantize(x, sx, zx, f"x{k}"))
    yf = e.float_value("yf", node.outputs[0].type.shape)
    e.emit("Concat", parts, [yf], {"axis": node.attrs["axis"]}, "float")
    e.quantize(yf, sy, zy, node.outputs[0])
    return True


def _qlinear_softmax(e: _Expansion) -> bool:
    """DQ -> Softmax -> Q where the Softmax of the node's ``opset`` normalizes one axis
    (opset 13 on, or the last axis); an older one's softmax over several flattened
    dimensions stays the node (its NumPy reference)."""
    node = e.node
    ndim, axis = node.inputs[0].type.ndim, int(node.attrs["axis"])
    if not softmax_normalizes_one_axis(ndim, axis, int(node.attrs["opset"])):
        return False
    return _unary("Softmax", lambda attrs: {"axis": axis % max(ndim, 1)})(e)


#: QOperator op (IR name) -> its expansion (False: left as it is)
EXPANSIONS: dict[str, Callable[[_Expansion], bool]] = {
    "QLinearConv": _qlinear_conv,
    "QLinearMatMul": _qlinear_matmul,
    op_key("QGemm", MS_DOMAIN): _qgemm,
    op_key("QLinearAdd", MS_DOMAIN): _binary("Add"),
    op_key("QLinearMul", MS_DOMAIN): _binary("Mul"),
    op_key("QLinearGlobalAveragePool", MS_DOMAIN): _unary("GlobalAveragePool",
                                                          channels_last=True),
    op_key("QLinearAveragePool", MS_DOMAIN): _unary("AveragePool", _pool_attrs,
                                                    channels_last=True),
    op_key("QLinearConcat", MS_DOMAIN): _qlinear_concat,
    op_key("QLinearSigmoid", MS_DOMAIN): _unary("Sigmoid"),
    op_key("QLinearLeakyRelu", MS_DOMAIN): _unary("LeakyRelu",
                                                  lambda a: {"alpha": a["alpha"]}),
    op_key("QLinearSoftmax", MS_DOMAIN): _qlinear_softmax,
}


def expand_node(node: Node, scope: NameScope) -> list[Node] | None:
    """The QDQ nodes replacing QOperator ``node`` (its outputs kept), or None when
    ``node`` is no QOperator op or cannot be expanded."""
    expand = EXPANSIONS.get(node.op)
    if expand is None or node.body is not None:
        return None
    e = _Expansion(node, scope)
    return e.nodes if expand(e) else None


@register_pass("expand_qoperator")
def expand_qoperator(graph: Graph) -> Graph:
    """Rewrite every QOperator node (QLinearConv, QLinearMatMul and ONNX Runtime's
    com.microsoft quantized ops) as DequantizeLinear -> float op -> QuantizeLinear."""
    scope = NameScope.of(graph)
    nodes: list[Node] = []
    changed = False
    for node in graph.nodes:
        if node.body is not None:
            body = expand_qoperator(node.body)
            if body is not node.body:
                node, changed = replace(node, body=body), True
            nodes.append(node)
            continue
        parts = expand_node(node, scope)
        if parts is None:
            nodes.append(node)
        else:
            nodes.extend(parts)
            changed = True
    return graph.rebuild(nodes) if changed else graph
