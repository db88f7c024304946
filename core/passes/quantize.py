"""Realize quantized (QDQ) convolutions and dense layers as integer arithmetic.

A QDQ model expresses ``y_q = Q(act(conv(DQ(x_q), DQ(w_q), bias)))``. This
pass rewrites each such chain (QOperator models' QLinearConv, QLinearMatMul and
QGemm arrive in this form, expanded by ``expand_qoperator``) into::

    acc = ConvInteger(x_q, w_q)            # or MatMulInteger: int8 x int8 -> int32
    acc = Add(acc, bias_int32)             # bias / (x_scale * w_scale), rounded
    y_q = Requantize(acc; multiplier, shift, zero_point, clamp)

where the clamp absorbs a Relu/Clip activation, and the requantization scale
``x_scale * w_scale / y_scale`` becomes a fixed-point multiplier and shift
(``heterocc.ops.qnn``) that an accelerator's ALU applies exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..ir.graph import Graph, NameScope, Node, Value, constant
from ..ir.types import TensorType
from ..ops import get_op
from ..ops.lookup import TABLE_ENTRIES, TABLE_OFFSET
from ..ops.qnn import precise_fixed_point_scale, shifted_multiplier
from ..patterns import is_constant, is_op, match, optional, wildcard
from .lookup_tables import tabulable_chains
from .manager import register_pass
from .rewrite import substitute

_DQ_X = is_op("DequantizeLinear")(wildcard(), is_constant(), optional(is_constant()))
_DQ_W = is_op("DequantizeLinear")(is_constant(), is_constant(), optional(is_constant()))
_BIAS = _DQ_W | is_constant()
_CONV = is_op("Conv")(_DQ_X, _DQ_W, optional(_BIAS))
_MATMUL = is_op("MatMul")(_DQ_X, _DQ_W)
_GEMM = is_op("Gemm").where(lambda a: a.get("transA", 0) == 0 and a.get("alpha", 1.0) == 1.0
                            and a.get("beta", 1.0) == 1.0)(_DQ_X, _DQ_W, optional(_BIAS))
_LINEAR = _CONV | _GEMM | _MATMUL | is_op("Add")(_MATMUL, _BIAS)
_SUM = is_op("Add")(_DQ_X, _DQ_X)
ADD_PATTERN = is_op("QuantizeLinear")(is_op("Relu")(_SUM) | _SUM, is_constant(),
                                      optional(is_constant()))
MUL_PATTERN = is_op("QuantizeLinear")(is_op("Mul")(_DQ_X, _DQ_X), is_constant(),
                                      optional(is_constant()))
#: the integer addition's common shift (at most; less where the terms would leave
#: int32): each term's floor is off by less than 2**-22 of an output step, below the
#: float32 rounding of ONNX Runtime's own float addition
ADD_SHIFT = 22
_ACT = is_op("Relu")(_LINEAR) | is_op("Clip")(_LINEAR, optional(is_constant()),
                                               optional(is_constant())) | _LINEAR
QDQ_PATTERN = is_op("QuantizeLinear")(_ACT, is_constant(), optional(is_constant()))
_AVERAGE = is_op("GlobalAveragePool")(_DQ_X) | is_op("AveragePool")(_DQ_X) | \
    is_op("ReduceMean")(_DQ_X, optional(is_constant()))
AVERAGE_PATTERN = is_op("QuantizeLinear")(_AVERAGE, is_constant(), optional(is_constant()))
_NORM = is_op("BatchNormalization")(_DQ_X, is_constant(), is_constant(), is_constant(),
                                    is_constant()) | \
    is_op("Add")(is_op("Mul")(_DQ_X, is_constant()), is_constant())
AFFINE_PATTERN = is_op("QuantizeLinear")(is_op("Relu")(_NORM) | _NORM, is_constant(),
                                         optional(is_constant()))


@dataclass
class _Chain:
    """The parts of one matched QDQ chain."""

    x_q: Value
    x_scale: float
    x_zero: int
    w_q: np.ndarray  # as the integer op wants it: OIHW, or (K, N) for matmul
    w_scale: np.ndarray  # per output channel
    w_zero: np.ndarray | None
    bias: np.ndarray | None  # float, per output channel
    linear: Node
    y_scale: float
    y_zero: int
    y_dtype: str
    clip: tuple[float, float]  # activation bounds in real units
    absorbed: list[str]  # "Op:node" of the activation the clamp applies


def _scalar(v: Value | None, default=0):
    if v is None:
        return default
    data = np.asarray(v.data)
    if data.size != 1:
        raise ValueError("not per-tensor")
    return data.reshape(()).item()


def _dq_parts(node: Node):
    """(integer data, scale array, zero point array|None, axis) of a DequantizeLinear."""
    zero = node.inputs[2].data if len(node.inputs) > 2 and node.inputs[2] is not None else None
    return node.inputs[0], node.inputs[1].data, zero, node.attrs.get("axis", 1)


def _chain(nodes: list[Node]) -> _Chain | None:
    by_op = {n.op: n for n in nodes}
    q = nodes[-1]
    linear = by_op.get("Conv") or by_op.get("Gemm") or by_op.get("MatMul")
    if linear is None or linear.attrs.get("block_size", 0):
        return None
    dq_x = next(n for n in nodes if n.op == "DequantizeLinear" and n.outputs[0] is
                linear.inputs[0])
    dq_w = next(n for n in nodes if n.op == "DequantizeLinear" and n.outputs[0] is
                linear.inputs[1])
    x_q, sx, zx, _ = _dq_parts(dq_x)
    w_v, sw, zw, w_axis = _dq_parts(dq_w)
    if x_q.type.dtype not in ("int8", "uint8") or w_v.type.dtype not in ("int8", "uint8"):
        return None
    try:
        x_scale, x_zero = float(_scalar(dq_x.inputs[1])), int(_scalar(
            dq_x.inputs[2] if len(dq_x.inputs) > 2 else None))
        y_scale = float(_scalar(q.inputs[1]))
        y_zero = int(_scalar(q.inputs[2] if len(q.inputs) > 2 else None))
    except ValueError:
        return None
    w = w_v.data
    if w.ndim != 2 and linear.op != "Conv":
        return None
    # the weight's output-channel axis as the model stores it: OIHW, (N, K) for a Gemm
    # with transB, else (K, N)
    transposed = linear.op == "Gemm" and linear.attrs.get("transB", 0)
    channel_axis = 0 if linear.op == "Conv" or transposed else 1
    if transposed:
        w = w.T  # MatMulInteger wants (K, N)
    n_out = w.shape[0] if linear.op == "Conv" else w.shape[1]
    per_channel = np.asarray(sw).size > 1 or (zw is not None and np.asarray(zw).size > 1)
    if per_channel and (w_axis % w_v.type.ndim != channel_axis
                        or np.asarray(sw).size not in (1, n_out)):
        return None  # scales along the reduction: not a per-output-channel requantization
    sw = np.broadcast_to(np.asarray(sw, np.float64).reshape(-1), (n_out,))
    w_zero = None if zw is None or not np.any(zw) else np.broadcast_to(
        np.asarray(zw).reshape(-1), (n_out,))
    bias = _bias(nodes, linear, n_out)
    if bias is False:
        return None
    clip = (-np.inf, np.inf)
    if "Relu" in by_op:
        clip = (0.0, np.inf)
    elif "Clip" in by_op:
        c = by_op["Clip"]
        lo = _scalar(c.inputs[1], -np.inf) if len(c.inputs) > 1 else -np.inf
        hi = _scalar(c.inputs[2], np.inf) if len(c.inputs) > 2 else np.inf
        clip = (float(lo), float(hi))
    absorbed = [f"{n.op}:{n.name}" for n in nodes if n.op in ("Relu", "Clip")]
    return _Chain(x_q, x_scale, x_zero, w, sw, w_zero, bias, linear, y_scale, y_zero,
                  q.outputs[0].type.dtype, clip, absorbed)


def _average_window(pool: Node) -> dict | None:
    """The depthwise convolution attributes (kernel, strides, pads) of an average over
    windows of a 4-D tensor, or None where no all-ones convolution computes it: a
    ReduceMean over other axes, padding left out of the count, a window cut short by
    ceil_mode. (A ReduceMean without keepdims is the convolution and a Reshape.)"""
    x = pool.inputs[0].type
    if x.ndim != 4:
        return None
    if pool.op in ("GlobalAveragePool", "ReduceMean"):
        if pool.op == "ReduceMean":
            axes = pool.attrs.get("axes")
            if len(pool.inputs) > 1 and pool.inputs[1] is not None:
                axes = pool.inputs[1].data.tolist()
            if sorted(a % 4 for a in axes or ()) != [2, 3]:
                return None
        return {"kernel_shape": list(x.shape[2:]), "strides": [1, 1], "pads": [0] * 4}
    if pool.attrs.get("auto_pad", "NOTSET") not in ("NOTSET", "") or \
            any(d != 1 for d in pool.attrs.get("dilations") or [1, 1]):
        return None
    kernel = list(pool.attrs["kernel_shape"])
    strides = list(pool.attrs.get("strides") or [1, 1])
    pads = list(pool.attrs.get("pads") or [0] * 4)
    if any(pads) and not pool.attrs.get("count_include_pad", 0):
        return None
    floor = [(x.shape[2 + i] + pads[i] + pads[i + 2] - kernel[i]) // strides[i] + 1
             for i in range(2)]
    if list(pool.outputs[0].type.shape[2:]) != floor:
        return None
    return {"kernel_shape": kernel, "strides": strides, "pads": pads}


def _per_tensor_params(dq: Node, q: Node) -> tuple[float, int, float, int] | None:
    """``(x_scale, x_zero, y_scale, y_zero)`` of a DequantizeLinear ``dq`` and a
    QuantizeLinear ``q`` quantized per tensor, or None when either is per channel."""
    try:
        return (float(_scalar(dq.inputs[1])),
                int(_scalar(dq.inputs[2] if len(dq.inputs) > 2 else None)),
                float(_scalar(q.inputs[1])),
                int(_scalar(q.inputs[2] if len(q.inputs) > 2 else None)))
    except ValueError:
        return None


def _average_chain(nodes: list[Node]) -> _Chain | None:
    """``Q(average(DQ(x)))`` as the chain of a depthwise convolution with all-ones
    weights of scale ``1 / window``: the sum over each window is exact in int32, and the
    division by the window joins the requantization (rounded as every Requantize)."""
    dq, pool, q = nodes[0], nodes[1], nodes[-1]
    window = _average_window(pool)
    if window is None or dq.inputs[0].type.dtype not in ("int8", "uint8"):
        return None
    params = _per_tensor_params(dq, q)
    if params is None:
        return None
    x_scale, x_zero, y_scale, y_zero = params
    channels = dq.inputs[0].type.shape[1]
    kh, kw = window["kernel_shape"]
    conv = Node("Conv", list(pool.inputs[:1]), list(pool.outputs[:1]),
                {**window, "group": channels, "dilations": [1, 1]}, pool.name)
    return _Chain(dq.inputs[0], x_scale, x_zero, np.ones((channels, 1, kh, kw), np.int8),
                  np.full(channels, 1.0 / (kh * kw)), None, None, conv, y_scale, y_zero,
                  q.outputs[0].type.dtype, (-np.inf, np.inf), [])


def _read_only_within(nodes, members, users, returned: set) -> bool:
    """Whether every output of ``nodes`` is read by ``members`` alone (no other node
    reads it and the graph does not return it): a matched chain's intermediate values,
    which a rewrite of the chain may drop."""
    return not any(v in returned or any(u not in members for u in users.get(v, ()))
                   for n in nodes for v in n.outputs)


def _with_replacements(graph: Graph, replaced: dict[Node, list[Node]],
                       dropped: set[Node]) -> Graph:
    """``graph`` with each node of ``replaced`` replaced by its list of nodes in place and
    the nodes of ``dropped`` left out (the graph itself where nothing is replaced)."""
    if not replaced:
        return graph
    nodes = [part for node in graph.nodes if node not in dropped
             for part in replaced.get(node, [node])]
    return substitute(graph, {}, nodes)


@register_pass("integer_average_pools")
def integer_average_pools(graph: Graph) -> Graph:
    """Quantized average pools ``Q(GlobalAveragePool | AveragePool | ReduceMean(DQ(x)))``
    (over the spatial axes) as a depthwise ConvInteger with all-ones weights and a
    Requantize (``_average_chain``), and quantized batch normalizations a convolution
    did not absorb as a depthwise 1x1 one (``_affine_chain``), where nothing else reads
    the float result: the integer form an accelerator's GEMM core runs with the
    convolutions around it."""
    scope = NameScope.of(graph)
    producers = graph.producers()
    users = graph.consumers()
    returned = set(graph.outputs)
    replaced: dict[Node, list[Node]] = {}
    dropped: set[Node] = set()
    for node in graph.nodes:
        m = match(AVERAGE_PATTERN, node.outputs[0], producers) \
            if node.op == "QuantizeLinear" else None
        chain = m and _average_chain(m.nodes)
        if not chain and node.op == "QuantizeLinear":
            m = match(AFFINE_PATTERN, node.outputs[0], producers)
            chain = m and _affine_chain(m.nodes)
        inner = [n for n in m.nodes if n is not node and n.op != "DequantizeLinear"] \
            if chain else []
        if not inner or not _read_only_within(inner, m.nodes, users, returned):
            continue
        out = node.outputs[0]
        pooled = out if out.type.ndim == 4 else Value(  # a ReduceMean without keepdims
            scope.fresh(f"{out.name}_4d"), TensorType((*out.type.shape[:2], 1, 1),
                                                     out.type.dtype))
        new = _rewrite(chain, pooled, scope)
        if pooled is not out:
            new.append(Node("Reshape", [pooled, constant(np.array(out.type.shape, np.int64),
                                                         scope.fresh(f"{out.name}_shape"))],
                            [out], {}, scope.fresh(f"{node.name}_reshape")))
        for part in new:
            part.attrs = get_op(part.op).normalize_attrs(part.attrs, part.name)
        replaced[node] = new
        dropped.update(inner)
    return _with_replacements(graph, replaced, dropped)


_GLOBAL_AVERAGE = is_op("QuantizeLinear")(
    is_op("GlobalAveragePool")(_DQ_X) | is_op("AveragePool")(_DQ_X), is_constant(),
    optional(is_constant()))


@register_pass("integer_global_average_pools")
def integer_global_average_pools(graph: Graph) -> Graph:
    """Quantized global average pools ``Q(GlobalAveragePool(DQ(x)))`` of an 8-bit NCHW
    ``x`` (per-tensor quantization) in ONNX Runtime's form of them (its
    ``QLinearGlobalAveragePool``, which it fuses such a chain into)::

        sum = ConvInteger(x, ones, x_zero)      (depthwise over the whole image: exact)
        y   = QuantizeLinear(float32(sum) * scale, 1, y_zero)      (half to even)

    with ``scale = x_scale / (y_scale * N)`` (N pixels) in float32, as ONNX Runtime
    computes it: the same bits as its kernel, where the integer form of
    ``integer_average_pools`` (a depthwise convolution and ``Requantize``) rounds once
    more than it does. The convolution before the pool then writes 8-bit values, not
    dequantized floats four times their size, and the pool reads those. Where nothing
    else reads the pool's float result; a dequantization of ``x`` that others read too
    (a squeeze-excite's input, which its gate multiplies) stays for them.

    Average pools over windows (``Q(AveragePool(DQ(x)))``, every window counted whole:
    :func:`_average_window`, N the window's size) take the same form: the sum of a
    window in integers is exact, so no order of a float sum (a vectorized one's
    against the reference's) moves an output step, as a float pool between DQ and Q
    did (DenseNet-121's transitions)."""
    scope = NameScope.of(graph)
    producers = graph.producers()
    users = graph.consumers()
    returned = set(graph.outputs)
    replaced: dict[Node, list[Node]] = {}
    dropped: set[Node] = set()
    for node in graph.nodes:
        m = match(_GLOBAL_AVERAGE, node.outputs[0], producers) \
            if node.op == "QuantizeLinear" else None
        if m is None:
            continue
        dq, pool = m.nodes[0], m.nodes[1]
        x, out = dq.inputs[0], node.outputs[0]
        params = _per_tensor_params(dq, node)
        if params is None or x.type.ndim != 4 or x.type.dtype not in ("int8", "uint8") \
                or out.type.dtype not in ("int8", "uint8") or params[0] <= 0 or params[2] <= 0:
            continue
        if not _read_only_within((pool,), m.nodes, users, returned):
            continue
        # a DequantizeLinear that others read too (a squeeze-excite's: its gate's
        # product reads the same floats) stays for them; the pool reads the 8-bit x
        shared = not _read_only_within((dq,), m.nodes, users, returned)
        window = _average_window(pool)
        if window is None:
            continue
        x_scale, x_zero, y_scale, y_zero = params
        pixels = int(np.prod(window["kernel_shape"]))
        name = pool.name or "average_pool"
        channels = x.type.shape[1]
        shape = pool.outputs[0].type.shape
        centered, real, scaled = (
            Value(scope.fresh(f"{name}_{part}"), TensorType(shape, dtype))
            for part, dtype in (("sum", "int32"), ("real", "float32"), ("scaled", "float32")))
        scale = np.float32(x_scale) / (np.float32(y_scale) * np.float32(pixels))
        # the sum of x - x_zero over each window: a depthwise integer convolution by
        # ones (an anchor: the convolution before it keeps its 8-bit result, which a
        # plain Cast would join as its epilogue); padding is x_zero, which adds 0
        window = {**window, "dilations": [1, 1], "group": channels}
        replaced[node] = [
            Node("ConvInteger", [x, constant(np.ones((channels, 1, *window["kernel_shape"]),
                                                     np.int8), scope.fresh(f"{name}_ones")),
                                 constant(np.array(x_zero, x.type.dtype),
                                          scope.fresh(f"{name}_xz"))],
                 [centered], window, scope.fresh(f"{name}_sum")),
            Node("Cast", [centered], [real], {"to": 1}, scope.fresh(f"{name}_real")),
            Node("Mul", [real, constant(np.array(scale, np.float32),
                                        scope.fresh(f"{name}_scale"))],
                 [scaled], {}, scope.fresh(f"{name}_scaled"))]
        rounded_zero = y_zero
        if pool.op == "AveragePool":
            # ONNX Runtime's QLinearAveragePool adds the zero point in float32 before it
            # rounds (nearbyintf(y / y_scale + y_zero)): so here, which leaves one value
            # in ~800 a step from its result where the zero point after rounding left one
            # in ~50 (a 2x2 pool of uint8, zero point 125)
            shifted = Value(scope.fresh(f"{name}_shifted"), scaled.type)
            replaced[node].append(Node(
                "Add", [scaled, constant(np.array(y_zero, np.float32),
                                         scope.fresh(f"{name}_zero_real"))],
                [shifted], {}, scope.fresh(f"{name}_shift")))
            scaled, rounded_zero = shifted, 0
        replaced[node].append(
            Node("QuantizeLinear", [scaled, constant(np.array(1.0, np.float32),
                                                     scope.fresh(f"{name}_unit")),
                                    constant(np.array(rounded_zero, out.type.dtype),
                                             scope.fresh(f"{name}_zero"))],
                 [out], {}, scope.fresh(f"{name}_quantize")))
        dropped.update((pool,) if shared else (dq, pool))
    for new in replaced.values():
        for part in new:
            part.attrs = get_op(part.op).normalize_attrs(part.attrs, part.name)
    return _with_replacements(graph, replaced, dropped)


#: the magnitude of an affine chain's weights. Why not 1: the shift becomes an integer
#: bias in units of the accumulator's scale (input scale x weight scale), and with a
#: weight of 1 that unit is about one output step (a normalization's slope maps the input
#: range onto the output's), so rounding the bias moved up to half a step and about one
#: output in six of a DenseNet normalization (statistics set from data) landed one step
#: from the QDQ model's float result. A weight of 127 makes the unit 127 times finer; the
#: accumulator stays far inside int32 (255 * 127 plus the bias).
AFFINE_WEIGHT = 127


def _affine_chain(nodes: list[Node]) -> _Chain | None:
    """``Q(Relu?(BatchNormalization(DQ(x))))`` or ``Q(Relu?(DQ(x) * a + b))`` (inference,
    per-tensor quantization, per-channel constants: a normalization no convolution
    before it absorbed, after a concatenation) as the chain
    of a depthwise 1x1 convolution with weights +-``AFFINE_WEIGHT`` of scale
    ``|gamma / sqrt(var + eps)| / AFFINE_WEIGHT`` and the normalization's shift as its
    bias: one requantization per channel."""
    dq, q = nodes[0], nodes[-1]
    norm = next(n for n in nodes if n.op in ("BatchNormalization", "Add"))
    if dq.inputs[0].type.dtype not in ("int8", "uint8") or dq.inputs[0].type.ndim != 4 or \
            norm.attrs.get("training_mode", 0):
        return None
    params = _per_tensor_params(dq, q)
    if params is None:
        return None
    x_scale, x_zero, y_scale, y_zero = params
    channels = dq.inputs[0].type.shape[1]
    if norm.op == "BatchNormalization":
        gamma, beta, mean, var = (v.data.astype(np.float64).reshape(-1)
                                  for v in norm.inputs[1:])
        slope = gamma / np.sqrt(var + norm.attrs.get("epsilon", 1e-5))
        shift = beta - mean * slope
    else:  # x * slope + shift, the constants one per channel (C, 1, 1) or one in all
        mul = next(n for n in nodes if n.op == "Mul")
        if any(v.data.ndim > 1 and v.data.shape[-2:] != (1, 1)
               for v in (mul.inputs[1], norm.inputs[1])):
            return None
        slope, shift = (v.data.astype(np.float64).reshape(-1)
                        for v in (mul.inputs[1], norm.inputs[1]))
    if any(a.size not in (1, channels) for a in (slope, shift)):
        return None
    slope, shift = np.broadcast_to(slope, (channels,)), np.broadcast_to(shift, (channels,))
    weights = (np.sign(slope) * AFFINE_WEIGHT).astype(np.int8).reshape(channels, 1, 1, 1)
    conv = Node("Conv", list(norm.inputs[:1]), list(norm.outputs[:1]), {
        "kernel_shape": [1, 1], "strides": [1, 1], "pads": [0] * 4, "group": channels,
        "dilations": [1, 1]}, norm.name)
    clip = (0.0, np.inf) if any(n.op == "Relu" for n in nodes) else (-np.inf, np.inf)
    absorbed = [f"{n.op}:{n.name}" for n in nodes if n.op == "Relu"]
    return _Chain(dq.inputs[0], x_scale, x_zero, weights,
                  np.where(slope != 0, np.abs(slope), 1.0) / AFFINE_WEIGHT, None,
                  np.array(shift), conv,
                  y_scale, y_zero, q.outputs[0].type.dtype, clip, absorbed)


def _requantization_table(dq: Node, q: Node) -> np.ndarray:
    """``Q(DQ(v))`` of the 256 int8 values ``v`` in ``LookupTable``'s order, computed by
    the two ops' NumPy references (the integer reference's bits)."""
    values = np.arange(-TABLE_OFFSET, TABLE_ENTRIES - TABLE_OFFSET, dtype=np.int8)
    real = get_op("DequantizeLinear").run(
        [values, *(v.data if v is not None else None for v in dq.inputs[1:])], dq.attrs)[0]
    return get_op("QuantizeLinear").run(
        [real, *(v.data if v is not None else None for v in q.inputs[1:])], q.attrs)[0]


@register_pass("integer_concats")
def integer_concats(graph: Graph) -> Graph:
    """``Q(Concat(DQ(x1), DQ(x2), ...))`` (per-tensor quantization, int8) as ``Concat``
    of the integer tensors: an input quantized as the output is taken as it is, any
    other through ``LookupTable(xi)``, its 256 entries ``Q(DQ(v))`` with the output's
    parameters (one requantization per element, computed by the ops' references).
    Exact: each output element is the output's quantization of one input element.
    Where nothing else reads the float concatenation. The dequantizations the
    concatenation read go with it where nothing else reads them."""
    scope = NameScope.of(graph)
    producers = graph.producers()
    users = graph.consumers()
    returned = set(graph.outputs)
    replaced: dict[Node, list[Node]] = {}
    dropped: set[Node] = set()
    for node in graph.nodes:
        concat = producers.get(node.inputs[0]) if node.op == "QuantizeLinear" else None
        if concat is None or concat.op != "Concat" or node.outputs[0].type.dtype != "int8" \
                or concat.outputs[0] in returned or len(users.get(concat.outputs[0], ())) != 1:
            continue
        dqs = [producers.get(v) for v in concat.inputs]
        try:
            _scalar(node.inputs[1]), _scalar(node.inputs[2] if len(node.inputs) > 2 else None)
            usable = all(dq is not None and dq.op == "DequantizeLinear"
                         and not dq.inputs[0].is_const and dq.inputs[0].type.dtype == "int8"
                         and _scalar(dq.inputs[1]) > 0 for dq in dqs)
        except ValueError:
            usable = False
        if not usable:
            continue
        parts, new = [], []
        for dq in dqs:
            if _same_quantization(dq, node):
                parts.append(dq.inputs[0])
                continue
            part = Value(scope.fresh(f"{dq.inputs[0].name}_requantized"),
                         TensorType(dq.inputs[0].type.shape, "int8"))
            # the requantization Q(DQ(v)) of each of the 256 int8 values, by the ops'
            # own references: a table (exact by construction), which a CPU with a byte
            # permute reads in registers
            name = scope.fresh(f"{node.name}_part")
            new.append(Node("LookupTable", [dq.inputs[0], constant(
                _requantization_table(dq, node), scope.fresh(f"{name}_entries"))], [part],
                {"absorbed": []}, name))
            parts.append(part)
        new.append(Node("Concat", parts, [node.outputs[0]], dict(concat.attrs),
                        scope.fresh(f"{concat.name}_int")))
        replaced[node] = new
        dropped.add(concat)
        # the float glue once nothing else reads it (its dequantizations, replaced by
        # the parts' own): left in, each would become a function with no output, a
        # kernel compiled and called on every run for nothing
        for dq in dqs:
            if all(v not in returned and all(u in dropped for u in users.get(v, ()))
                   for v in dq.outputs):
                dropped.add(dq)
    return _with_replacements(graph, replaced, dropped)


def _bias(nodes: list[Node], linear: Node, n_out: int):
    """The float bias per output channel, None if absent, False if unusable."""
    source = None
    if linear.op in ("Conv", "Gemm") and len(linear.inputs) > 2:
        source = linear.inputs[2]
    add = next((n for n in nodes if n.op == "Add"), None)
    if add is not None:
        source = add.inputs[1]
    if source is None:
        return None
    producer = next((n for n in nodes if source in n.outputs), None)
    if producer is not None:  # DequantizeLinear of an int32 bias
        data, scale, zero, _ = _dq_parts(producer)
        real = (data.data.astype(np.float64) - (0 if zero is None else zero)) * scale
    else:
        real = source.data.astype(np.float64)
    if real.size not in (1, n_out):
        return False
    return np.broadcast_to(real.reshape(-1), (n_out,))


def _rewrite(c: _Chain, q_out: Value, scope: NameScope) -> list[Node]:
    """ConvInteger/MatMulInteger -> Add(bias) -> Requantize, producing ``q_out``."""
    name = c.linear.name
    n_out = c.w_scale.shape[0]
    w_centered = c.w_q.astype(np.int64)
    if c.w_zero is not None:
        shape = (-1,) + (1,) * (w_centered.ndim - 1) if c.linear.op == "Conv" else (1, -1)
        w_centered = w_centered - c.w_zero.reshape(shape)
        if w_centered.min() >= -128 and w_centered.max() <= 127:
            # weights are constants: centered once here, they need no zero point (exact)
            c = replace(c, w_q=w_centered.astype(np.int8), w_zero=None)
    reduce_axes = tuple(range(1, w_centered.ndim)) if c.linear.op == "Conv" else (0,)
    x_range = max(abs(-128 - c.x_zero), abs(255 - c.x_zero)) if c.x_q.type.dtype == "uint8" \
        else max(abs(-128 - c.x_zero), abs(127 - c.x_zero))
    acc_scale = c.x_scale * c.w_scale
    bias_int = np.zeros(n_out, np.int64) if c.bias is None else np.round(c.bias / acc_scale)
    bound = np.abs(w_centered).sum(axis=reduce_axes) * x_range + np.abs(bias_int)
    info = np.iinfo(c.y_dtype)
    # beyond this accumulator value the output saturates: clamping there first
    # keeps acc * multiplier inside int32 for a multiplier with more bits
    reach = max(info.max - c.y_zero, c.y_zero - info.min) + 2
    scales = acc_scale / c.y_scale
    limits = np.minimum(bound, np.ceil(reach / scales) + 1).astype(np.int64)
    limits = np.minimum(limits, 2 ** 31 - 1)
    # a 31-bit multiplier on a 64-bit product: round(acc * scale) but at near-ties
    multipliers, product_shift, shifts = precise_fixed_point_scale(scales, limits)
    pairs = list(zip(multipliers, shifts))
    lo = max(info.min, c.y_zero + np.ceil(c.clip[0] / c.y_scale)) if np.isfinite(c.clip[0]) \
        else info.min
    hi = min(info.max, c.y_zero + np.floor(c.clip[1] / c.y_scale)) if np.isfinite(c.clip[1]) \
        else info.max
    zero_inputs = []
    if c.x_zero or c.w_zero is not None:
        zero_inputs = [constant(np.array(c.x_zero, c.x_q.type.dtype), scope.fresh(f"{name}_xz"))]
        if c.w_zero is not None:
            zero_inputs.append(constant(np.asarray(c.w_zero, c.w_q.dtype),
                                        scope.fresh(f"{name}_wz")))
    weight = constant(np.ascontiguousarray(c.w_q), scope.fresh(f"{name}_wq"))
    out_shape = q_out.type.shape
    acc = Value(scope.fresh(f"{name}_acc"), TensorType(out_shape, "int32"))
    if c.linear.op == "Conv":
        attrs = {k: v for k, v in c.linear.attrs.items()}
        integer = Node("ConvInteger", [c.x_q, weight, *zero_inputs], [acc], attrs,
                       scope.fresh(f"{name}_int"))
        bias_shape = (1, n_out) + (1,) * (len(out_shape) - 2)
    else:
        integer = Node("MatMulInteger", [c.x_q, weight, *zero_inputs], [acc], {},
                       scope.fresh(f"{name}_int"))
        bias_shape = (n_out,)
    nodes = [integer]
    if c.bias is not None:
        biased = Value(scope.fresh(f"{name}_biased"), acc.type)
        b = constant(bias_int.astype(np.int32).reshape(bias_shape), scope.fresh(f"{name}_bias"))
        nodes.append(Node("Add", [acc, b], [biased], {}, scope.fresh(f"{name}_bias_add")))
        acc = biased
    same = len(set(pairs)) == 1 and len(set(limits.tolist())) == 1
    # the output channels: axis 1 of a convolution's NCHW output, the last axis of a
    # matrix product's (..., M, N), whatever its rank
    axis = 1 if c.linear.op == "Conv" else len(out_shape) - 1
    nodes.append(Node("Requantize", [acc], [q_out], {
        "multiplier": multipliers[0] if same else multipliers,
        "shift": shifts[0] if same else shifts, "zero_point": c.y_zero,
        "qmin": int(lo), "qmax": int(hi), "out_dtype": c.y_dtype,
        "acc_limit": int(limits[0]) if same else [int(v) for v in limits],
        "axis": axis, "absorbed": c.absorbed, "product_shift": product_shift},
        scope.fresh(f"{name}_requantize")))
    return nodes


def _rewrite_add(nodes: list[Node], q_out: Value, scope: NameScope) -> list[Node] | None:
    """A quantized addition ``Q(DQ(a) + DQ(b))`` (optionally through a Relu) in integers::

        ta  = Requantize(int32(a) - za; multiplier Ma, product shift ka, shift 0, int32)
            = ((int32(a) - za) * Ma) >> ka                       (the same for tb)
        acc = ta + tb
        y   = Requantize(acc; multiplier 1, shift s, zero point zy, clamp)
            = clamp(((acc + 2**(s-1)) >> s) + zy, qmin, qmax)

    with ``Ma / 2**(ka + s) ~= sa / sy`` and ``Mb / 2**(kb + s) ~= sb / sy`` (one shift
    ``s``, at most ``ADD_SHIFT``, and 31-bit multipliers on 64-bit products), so that an
    accelerator's ALU computes it exactly. Each term is floored once, 2**-s of a step,
    so it differs from the float form (``round_half_even((sa*(a-za) + sb*(b-zb)) / sy)
    + zy``) only where the float value lies within ~2**-(s-1) steps of a rounding
    boundary (ties round up here). A
    ratio too large for a product shift keeps ``Mul(int32(a) - za, Ma)``. None when the
    parts are not per-tensor int8/uint8."""
    q = nodes[-1]
    add = next(n for n in nodes if n.op == "Add")
    relu = next((n for n in nodes if n.op == "Relu"), None)
    found = _elementwise_parts(nodes, add, q, q_out)
    if found is None:
        return None
    parts, y_scale, y_zero = found
    y_dtype = q_out.type.dtype
    if any(v.type.shape != q_out.type.shape for v, _, _ in parts):
        return None  # broadcasting additions stay in float
    ratios = [scale / y_scale for _, scale, _ in parts]
    if not all(r > 0 and np.isfinite(r) for r in ratios):
        return None
    shift = ADD_SHIFT
    # both terms, centered int8 (|a - za| <= 255), and the rounding stay inside int32
    while shift > 0 and (255 * sum(ratios) + 1) * 2.0 ** shift >= 2 ** 30:
        shift -= 1
    scaled = [shifted_multiplier(r, shift) for r in ratios]
    name = add.name
    i32 = TensorType(q_out.type.shape, "int32")
    out, terms = [], []
    for index, ((v, _, zero), (multiplier, product_shift)) in enumerate(zip(parts, scaled)):
        wide = _centered_int32(v, zero, f"{name}_{index}", scope, out)
        term = Value(scope.fresh(f"{name}_scaled{index}"), i32)
        if product_shift:
            out.append(Node("Requantize", [wide], [term], {
                "multiplier": multiplier, "shift": 0, "product_shift": product_shift,
                "qmin": -2 ** 31, "qmax": 2 ** 31 - 1, "out_dtype": "int32"},
                scope.fresh(f"{name}_scale{index}")))
        else:  # a ratio of 2**(30 - s) or more: the plain product has every bit
            multiplier = round(ratios[index] * 2 ** shift)
            out.append(Node("Mul", [wide, constant(np.array(multiplier, np.int32),
                                                   scope.fresh(f"{name}_m{index}"))],
                            [term], {}, scope.fresh(f"{name}_scale{index}")))
        terms.append(term)
    acc = Value(scope.fresh(f"{name}_acc"), i32)
    out.append(Node("Add", terms, [acc], {}, scope.fresh(f"{name}_int")))
    info = np.iinfo(y_dtype)
    out.append(Node("Requantize", [acc], [q_out], {
        "multiplier": 1, "shift": shift, "zero_point": y_zero,
        "qmin": max(int(info.min), y_zero) if relu is not None else int(info.min),
        "qmax": int(info.max), "out_dtype": y_dtype,
        "absorbed": [f"Relu:{relu.name}"] if relu is not None else []},
        scope.fresh(f"{name}_requantize")))
    return out


def _elementwise_parts(nodes: list[Node], op: Node, q: Node, q_out: Value):
    """([(int8/uint8 value, scale, zero point)] of ``op``'s two dequantized operands,
    the output scale, the output zero point), all per tensor; None otherwise."""
    dqs = [next(n for n in nodes if n.op == "DequantizeLinear" and n.outputs[0] is v)
           for v in op.inputs]
    try:
        parts = [(dq.inputs[0], float(_scalar(dq.inputs[1])),
                  int(_scalar(dq.inputs[2] if len(dq.inputs) > 2 else None))) for dq in dqs]
        y_scale = float(_scalar(q.inputs[1]))
        y_zero = int(_scalar(q.inputs[2] if len(q.inputs) > 2 else None))
    except ValueError:
        return None
    if any(v.type.dtype not in ("int8", "uint8") for v, _, _ in parts) or \
            q_out.type.dtype not in ("int8", "uint8"):
        return None
    return parts, y_scale, y_zero


def _centered_int32(v: Value, zero: int, name: str, scope: NameScope, out: list[Node]
                    ) -> Value:
    """``int32(v) - zero`` (nodes appended to ``out``), the Sub kept for a uint8 ``v`` even
    at zero point 0 (``uint8_to_int8`` shifts uint8 zero points)."""
    wide = Value(scope.fresh(f"{name}_in"), TensorType(v.type.shape, "int32"))
    out.append(Node("Cast", [v], [wide], {"to": 6}, scope.fresh(f"{name}_cast")))
    if not zero and v.type.dtype != "uint8":
        return wide
    centered = Value(scope.fresh(f"{name}_centered"), wide.type)
    out.append(Node("Sub", [wide, constant(np.array(zero, np.int32), scope.fresh(f"{name}_z"))],
                    [centered], {}, scope.fresh(f"{name}_center")))
    return centered


#: the integer product's shift (at most): its floor is off by less than 2**-22 steps
MUL_SHIFT = 22


def _rewrite_mul(nodes: list[Node], q_out: Value, scope: NameScope) -> list[Node] | None:
    """A quantized product ``Q(DQ(a) * DQ(b))`` (``b`` may broadcast: a squeeze-excite
    channel scale, or ``x * sigmoid(x)``) in integers::

        acc = (int32(a) - za) * (int32(b) - zb)                    (|acc| <= 255 * 255)
        y   = Requantize(acc; multiplier M, product shift k, shift s, zero point zy)

    with ``M / 2**(k + s) ~= sa * sb / sy`` (31-bit ``M``, ``s`` at most ``MUL_SHIFT``), so
    that it is ``round(acc * sa * sb / sy) + zy`` but where that lies within ~2**-s steps
    of a rounding boundary (ties round up). The operands swap when only the second has
    the output's shape. None when the parts are not per-tensor int8/uint8, neither
    operand has the output's shape, or the scale is too large for a product shift."""
    q = nodes[-1]
    mul = next(n for n in nodes if n.op == "Mul")
    found = _elementwise_parts(nodes, mul, q, q_out)
    if found is None:
        return None
    parts, y_scale, y_zero = found
    if parts[0][0].type.shape != q_out.type.shape:
        parts = parts[::-1]  # the product commutes: the broadcasting operand second
    if parts[0][0].type.shape != q_out.type.shape:
        return None
    scale = parts[0][1] * parts[1][1] / y_scale
    if not (scale > 0 and np.isfinite(scale)):
        return None
    shift = MUL_SHIFT
    while shift > 0 and (255 * 255 * scale + 1) * 2.0 ** shift >= 2 ** 30:
        shift -= 1
    multiplier, product_shift = shifted_multiplier(scale, shift)
    if not product_shift:
        return None
    out: list[Node] = []
    name = mul.name
    centered = [_centered_int32(v, zero, f"{name}_{index}", scope, out)
                for index, (v, _, zero) in enumerate(parts)]
    acc = Value(scope.fresh(f"{name}_acc"), TensorType(q_out.type.shape, "int32"))
    out.append(Node("Mul", centered, [acc], {}, scope.fresh(f"{name}_int")))
    info = np.iinfo(q_out.type.dtype)
    out.append(Node("Requantize", [acc], [q_out], {
        "multiplier": multiplier, "shift": shift, "product_shift": product_shift,
        "zero_point": y_zero, "qmin": int(info.min), "qmax": int(info.max),
        "out_dtype": q_out.type.dtype}, scope.fresh(f"{name}_requantize")))
    return out


@register_pass("realize_qdq")
def realize_qdq(graph: Graph) -> Graph:
    """Rewrite quantized conv / dense chains (QDQ form; run ``expand_qoperator`` first
    for QOperator models) into ConvInteger / MatMulInteger + bias Add + Requantize,
    quantized element-wise additions and products into integer ones (``_rewrite_add``,
    ``_rewrite_mul``) and quantized max pools into integer ones (``_integer_max_pool``)."""
    return _realize(graph, ("Conv", "Gemm", "MatMul"), elementwise_products=True)


@register_pass("realize_qdq_convolutions")
def realize_qdq_convolutions(graph: Graph) -> Graph:
    """:func:`realize_qdq` for convolutions (with the additions and max pools between
    them) only: quantized matrix products (MatMul, Gemm) and element-wise products keep
    their float form. For a target whose integer products would move a model further
    from the float requantization than it may (a transformer's requantizations carry
    through Softmax, GELU and LayerNorm). A product whose quantized result is only
    dequantized into the graph's outputs (a classifier's last layer) is the exception:
    no later requantization carries its rounding on, and as an integer product it
    reads its int8 weight rather than one dequantized to four times the bytes."""
    return _realize(graph, ("Conv",), elementwise_products=False, final_products=True)


@register_pass("realize_qdq_linear")
def realize_qdq_linear(graph: Graph) -> Graph:
    """:func:`realize_qdq` for the linear layers: convolutions and the matrix products
    by a constant weight (MatMul, Gemm), with the additions and max pools between
    them; element-wise products (a squeeze-excite's channel scale) and products of two
    activations (attention's) keep their float form. Its requantizations are
    ``round(acc * scale)`` but at near-ties (31-bit multipliers on 64-bit products), as
    ONNX Runtime's own integer kernels' float ones are: a quantized encoder layer
    (projections, Softmax, GELU, LayerNorm) comes out no further from ONNX Runtime
    than its float form (``tests/passes/test_per_channel_axes.py``)."""
    return _realize(graph, ("Conv", "Gemm", "MatMul"), elementwise_products=False)


@register_pass("realize_qdq_before_tables")
def realize_qdq_before_tables(graph: Graph) -> Graph:
    """:func:`realize_qdq` for a pipeline that runs ``lookup_tables`` after it (an
    accelerator's): the quantized element-wise functions of one tensor that will become
    one table (``tabulable_chains``: GELU with its ``x * 0.5``, ``x * sigmoid(x)``)
    stay whole; products of two tensors (a squeeze-excite's channel scale) become
    integer products as in :func:`realize_qdq`."""
    return _realize(graph, ("Conv", "Gemm", "MatMul"), elementwise_products=True,
                    keep_tables=True)


def _realize(graph: Graph, linear_ops: tuple[str, ...], elementwise_products: bool,
             keep_tables: bool = False, final_products: bool = False) -> Graph:
    """:func:`realize_qdq` for the chains whose linear op is one of ``linear_ops`` (and
    quantized element-wise products where ``elementwise_products``), leaving the chains
    of future lookup tables as they are where ``keep_tables``; with ``final_products``,
    also the matrix products whose quantized result only :func:`_dequantized_to_outputs`."""
    scope = NameScope.of(graph)
    graph = _drop_roundtrips(graph)
    tabulable = tabulable_chains(graph) if keep_tables else set()
    producers = graph.producers()
    users = graph.consumers()
    returned = set(graph.outputs)
    replaced: dict[Node, list[Node]] = {}
    dropped: set[Node] = set()
    for node in reversed(graph.nodes):
        if node.op != "QuantizeLinear" or node in dropped or node in tabulable:
            continue
        m = rewrite = None
        patterns = [(QDQ_PATTERN, None), (ADD_PATTERN, _rewrite_add)]
        if elementwise_products:
            patterns.append((MUL_PATTERN, _rewrite_mul))
        for pattern, candidate in patterns:
            m = match(pattern, node.outputs[0], producers)
            if m is not None:
                rewrite = candidate
                break
        if m is None:
            continue
        inner = [n for n in m.nodes if n is not node and n.op != "DequantizeLinear"]
        if not _read_only_within(inner, m.nodes, users, returned):
            continue  # a float intermediate is read elsewhere: keep the float chain
        if rewrite is not None:
            new = rewrite(m.nodes, node.outputs[0], scope)
        else:
            chain = _chain(m.nodes)
            wanted = chain is not None and (chain.linear.op in linear_ops or (
                final_products and _dequantized_to_outputs(node, users, returned)))
            try:
                new = _rewrite(chain, node.outputs[0], scope) if wanted else None
            except ValueError:
                # no int32 requantization of this accumulator range (a bias hundreds of
                # millions of accumulator steps large): the chain stays as it was
                new = None
        if new is None:
            continue
        for part in new:
            part.attrs = get_op(part.op).normalize_attrs(part.attrs, part.name)
        replaced[node] = new
        dropped.update(inner)
    nodes = []
    for node in graph.nodes:
        if node in dropped:
            continue
        nodes.extend(replaced.get(node, [node]))
    return _integer_max_pool(_absorb_quantized_relu(substitute(graph, {}, nodes)))


def _dequantized_to_outputs(q: Node, users, returned: set) -> bool:
    """Whether ``q``'s result is read only by DequantizeLinear nodes whose results are
    graph outputs read by nothing else."""
    readers = users.get(q.outputs[0], ())
    return q.outputs[0] not in returned and bool(readers) and all(
        r.op == "DequantizeLinear" and r.outputs[0] in returned
        and not users.get(r.outputs[0]) for r in readers)


def _same_quantization(dq: Node, q: Node) -> bool:
    """Whether ``q`` quantizes exactly as ``dq`` dequantized (scale, zero point, dtype)."""
    try:
        return (_scalar(dq.inputs[1]) == _scalar(q.inputs[1])
                and _scalar(dq.inputs[2] if len(dq.inputs) > 2 else None)
                == _scalar(q.inputs[2] if len(q.inputs) > 2 else None)
                and dq.inputs[0].type.dtype == q.outputs[0].type.dtype)
    except ValueError:
        return False


#: ops that only move (or repeat) the elements of their first input, the others saying
#: where (a reshape, a transpose, a slice, a gather): between a DequantizeLinear and a
#: QuantizeLinear of the same quantization they move the integers as well as the reals
_MOVING_OPS = frozenset({"Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze",
                         "Identity", "Slice", "Gather", "Expand", "Tile", "DepthToSpace",
                         "SpaceToDepth"})


def _moved_roundtrip(q: Node, producers) -> tuple[Node, list[Node]] | None:
    """``(dq, moves)`` where ``q`` quantizes ``moves`` (element-moving ops, innermost
    first, perhaps none) of DequantizeLinear ``dq`` of the same quantization, else None."""
    moves: list[Node] = []
    source = producers.get(q.inputs[0])
    while source is not None and source.op in _MOVING_OPS and len(source.outputs) == 1:
        moves.append(source)
        source = producers.get(source.inputs[0])
    if source is None or source.op != "DequantizeLinear" or not all(
            v is None or v.is_const for v in (*source.inputs[1:], *q.inputs[1:])) or \
            not _same_quantization(source, q) or not _roundtrip_exact(source):
        return None
    return source, moves[::-1]


def _roundtrip_exact(dq: Node) -> bool:
    """Whether quantizing ``dq``'s reals again (same scale and zero point) gives back its
    integers: an integer type of ``b`` bits, a real type of ``p`` significant bits with
    ``b + 2 < p`` (the product's and the quotient's roundings move ``n`` by at most
    ``2**b * 2**(1 - p) < 1/2``), and a scale whose products with those integers stay
    normal and finite."""
    integer, real = dq.inputs[0].type.dtype, dq.outputs[0].type.dtype
    if integer not in ("int8", "uint8", "int16", "uint16") or \
            real not in ("float16", "float32", "float64"):
        return False
    bits, info = np.iinfo(integer).bits, np.finfo(real)
    scale = abs(float(_scalar(dq.inputs[1])))
    return bits + 2 < info.nmant + 1 and \
        float(info.tiny) * 2.0 ** bits <= scale <= float(info.max) / 2.0 ** bits


def _drop_roundtrips(graph: Graph) -> Graph:
    """``Q(DQ(x))`` with the same scale, zero point and type is ``x``: for an integer
    ``n = x - z`` of at most 16 bits, ``n * s`` rounded to float, divided by ``s`` and
    rounded again is within ``|n| 2**-23`` of ``n``, which rounds back to ``n``. Ops that
    only move elements between them (ONNX Runtime's quantizer puts a Q/DQ pair on each
    side of a Reshape, a Transpose or a Slice) then move the integers:
    ``Q(Reshape(DQ(x)))`` is ``Reshape(x)``, which moves a byte per element where it
    moved floats between two conversions."""
    scope = NameScope.of(graph)
    producers = graph.producers()
    mapping: dict[Value, Value] = {}
    moved: dict[Node, list[Node]] = {}  # the QuantizeLinear -> the integer moves
    for node in graph.nodes:
        if node.op != "QuantizeLinear":
            continue
        found = _moved_roundtrip(node, producers)
        if found is None:
            continue
        dq, moves = found
        value, replacements = dq.inputs[0], []
        for move in moves:
            out = Value(scope.fresh(f"{move.outputs[0].name}_int"),
                        TensorType(move.outputs[0].type.shape, value.type.dtype))
            replacements.append(Node(move.op, [value, *move.inputs[1:]], [out],
                                     dict(move.attrs), scope.fresh(f"{move.name}_int")))
            value = out
        mapping[node.outputs[0]] = value
        moved[node] = replacements
    if not mapping:
        return graph
    nodes = []
    for node in graph.nodes:
        nodes.extend(moved.get(node, [node]))
    return substitute(graph, mapping, nodes)


_QRELU = is_op("QuantizeLinear")(is_op("Relu")(_DQ_X), is_constant(), optional(is_constant()))


def _absorb_quantized_relu(graph: Graph) -> Graph:
    """``Q(Relu(DQ(x)))`` with one scale and zero point is ``max(x, zero_point)``:
    fold it into the clamp of the Requantize producing ``x`` when it can."""
    producers = graph.producers()
    users = graph.consumers()
    mapping: dict[Value, Value] = {}
    dropped: set[Node] = set()
    clamps: dict[Node, int] = {}
    for node in graph.nodes:
        if node.op != "QuantizeLinear":
            continue
        m = match(_QRELU, node.outputs[0], producers)
        if m is None:
            continue
        dq, relu = m.nodes[0], m.nodes[1]
        x = dq.inputs[0]
        source = producers.get(x)
        if not _same_quantization(dq, node) or source is None or \
                source.op != "Requantize" or len(users.get(x, ())) != 1 or \
                len(users.get(relu.outputs[0], ())) != 1:
            continue
        clamps[source] = (max(source.attrs["qmin"], int(_scalar(
            dq.inputs[2] if len(dq.inputs) > 2 else None))), f"Relu:{relu.name}")
        mapping[node.outputs[0]] = x
        dropped.update((dq, relu, node))
    if not clamps:
        return graph
    nodes = [replace(n, attrs={**n.attrs, "qmin": clamps[n][0],
                               "absorbed": [*n.attrs["absorbed"], clamps[n][1]]})
             if n in clamps else n for n in graph.nodes if n not in dropped]
    return substitute(graph, mapping, nodes)


_QPOOL = is_op("QuantizeLinear")(is_op("MaxPool")(_DQ_X), is_constant(), optional(is_constant()))


def _integer_max_pool(graph: Graph) -> Graph:
    """``Q(MaxPool(DQ(x)))`` with one scale (positive) and zero point is ``MaxPool(x)``
    on the integers: dequantizing is increasing, so it commutes with the max, and the
    integer pool's padding (the type's minimum) never exceeds a window's real element,
    as the float pool's -inf does not (a window of padding alone quantizes to that
    minimum either way). Only where the pool's indices output is unused."""
    scope = NameScope.of(graph)
    producers = graph.producers()
    users = graph.consumers()
    returned = set(graph.outputs)
    mapping: dict[Value, Value] = {}
    pools: dict[Node, Node] = {}  # the QuantizeLinear -> the integer pool replacing it
    dropped: set[Node] = set()
    for node in graph.nodes:
        if node.op != "QuantizeLinear":
            continue
        m = match(_QPOOL, node.outputs[0], producers)
        if m is None:
            continue
        dq, pool = m.nodes[0], m.nodes[1]
        try:
            positive = _scalar(dq.inputs[1]) > 0
        except ValueError:
            continue
        if not positive or not _same_quantization(dq, node) or any(
                v in returned or users.get(v) for v in pool.outputs[1:]):
            continue
        x = dq.inputs[0]
        y = Value(scope.fresh(f"{pool.outputs[0].name}_int"), node.outputs[0].type)
        pools[node] = Node("MaxPool", [x], [y], dict(pool.attrs), scope.fresh(f"{pool.name}_int"))
        mapping[node.outputs[0]] = y
        dropped.add(node)
        for inner in (pool, dq):  # the float pool, then its input once nothing reads it
            if all(v not in returned and all(u in dropped for u in users.get(v, ()))
                   for v in inner.outputs):
                dropped.add(inner)
    if not pools:
        return graph
    nodes = []
    for node in graph.nodes:
        if node in pools:
            nodes.append(pools[node])
        elif node not in dropped:
            nodes.append(node)
    return substitute(graph, mapping, nodes)
