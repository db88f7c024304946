"""The accelerator's pattern table: integer convolutions and dense layers with
their bias and requantization, quantized element-wise additions and products and
integer max pools (what ``realize_qdq`` produces), lookup-table activations
(``lookup_tables``), channel concatenations (``integer_concats``) and channel gathers
(``channel_gathers``)."""

from __future__ import annotations

import functools
import math
import operator

from heterocc.accel_sim import HardwareConfig
from heterocc.ir.graph import Node
from heterocc.sdk import CompositePattern, is_constant, is_op, optional, wildcard

from .gather import unsupported as unsupported_gather
from .lookup import concat_unsupported, flatten_unsupported
from .lookup import unsupported as unsupported_lookup
from .pool import unsupported
from .residual import quantized_add, quantized_mul

# zero points: any (check_conv / check_dense decide, see _zero_points)
_ZERO_POINT = optional(wildcard())
_CONV = is_op("ConvInteger")(wildcard(), is_constant(), _ZERO_POINT, _ZERO_POINT)
_DENSE = is_op("MatMulInteger")(wildcard(), is_constant(), _ZERO_POINT, _ZERO_POINT)


_CAST = is_op("Cast")(wildcard())
_CENTERED = is_op("Sub")(_CAST, is_constant()) | _CAST
# a term scaled by a constant Mul, or by a Requantize with a product shift (31 bits)
_SCALED = is_op("Mul")(_CENTERED, is_constant()) | is_op("Requantize")(_CENTERED)
_SUM = is_op("Requantize")(is_op("Add")(_SCALED, _SCALED))
_PRODUCT = is_op("Requantize")(is_op("Mul")(_CENTERED, _CENTERED))
_POOL = is_op("MaxPool")(wildcard())
_TABLE = is_op("LookupTable")(wildcard(), is_constant())
#: Concat of up to _MAX_CONCAT tensors (a DenseNet block's last concatenation has 25):
#: one alternative per count, the longest first (a shorter one would leave inputs out)
_MAX_CONCAT = 40
_CONCAT = functools.reduce(operator.or_, [is_op("Concat")(*[wildcard()] * count)
                                          for count in range(_MAX_CONCAT, 1, -1)])
_FLATTEN = is_op("Flatten")(wildcard()) | is_op("Reshape")(wildcard(), is_constant())
_GATHER = functools.reduce(operator.or_, [is_op("ChannelGather")(*[wildcard()] * count)
                                          for count in range(_MAX_CONCAT, 0, -1)])


def _requantized(core):
    return is_op("Requantize")(is_op("Add")(core, is_constant()) | core)


def _zero_points(node: Node) -> str | None:
    """Why the core cannot absorb the integer op's zero points, or None. An input zero
    point that is one constant folds into the bias (``codegen._requantization``); a
    weight zero point would need the weights re-centered, which ``realize_qdq`` does
    whenever the centered weights fit int8."""
    x_zero = node.inputs[2] if len(node.inputs) > 2 else None
    if x_zero is not None and (not x_zero.is_const or x_zero.data.size != 1):
        return "the input zero point is not one constant (per-row or computed at run time)"
    w_zero = node.inputs[3] if len(node.inputs) > 3 else None
    if w_zero is not None and (not w_zero.is_const or w_zero.data.any()):
        if not w_zero.is_const:
            return "the weight zero point is computed at run time"
        centered = node.inputs[1].data.astype(int) - _channel_column(node, w_zero.data)
        return (f"the weights have zero point(s) {sorted(set(w_zero.data.ravel().tolist()))[:4]} "
                f"and their centered values span [{centered.min()}, {centered.max()}], beyond "
                "int8 (quantize the weights as int8, e.g. onnxruntime's weight_type=QInt8)")
    return None


def _channel_column(node: Node, zero_point):
    """A weight zero point shaped to broadcast over the weights' output channels."""
    if node.op == "ConvInteger":
        return zero_point.reshape((-1,) + (1,) * (node.inputs[1].type.ndim - 1))
    return zero_point.reshape(1, -1)


def _common(nodes: list[Node]) -> str | None:
    core, requant = nodes[0], nodes[-1]
    x, w = core.inputs[0], core.inputs[1]
    why = _zero_points(core)
    if why is not None:
        return why
    axis = requant.attrs.get("axis", 1) % max(requant.outputs[0].type.ndim, 1)
    channel_axis = 1 if core.op == "ConvInteger" else requant.outputs[0].type.ndim - 1
    if axis != channel_axis and any(isinstance(requant.attrs[k], list) and
                                    len(requant.attrs[k]) > 1
                                    for k in ("multiplier", "shift", "acc_limit")):
        return (f"the requantization is per channel along axis {axis}, not along the output "
                f"channels (axis {channel_axis})")
    if x.type.dtype != "int8" or w.type.dtype != "int8":
        return f"operands are {x.type.dtype} x {w.type.dtype}; the GEMM core takes int8 x int8"
    if requant.attrs["out_dtype"] != "int8":
        return f"output type {requant.attrs['out_dtype']} is not int8"
    return None


def check_conv(nodes: list[Node]) -> str | None:
    """Why the accelerator cannot take this convolution, or None."""
    conv = nodes[0]
    if conv.inputs[0].type.ndim != 4:
        return f"{conv.inputs[0].type.ndim - 2}-D convolution (only 2-D)"
    if any(d != 1 for d in conv.attrs.get("dilations") or [1, 1]):
        return f"dilated convolution (dilations={conv.attrs['dilations']})"
    return _common(nodes)


def check_dense(nodes: list[Node]) -> str | None:
    """Why the accelerator cannot take this dense layer, or None."""
    x, w = nodes[0].inputs[0].type, nodes[0].inputs[1].type
    if w.ndim != 2:
        return f"batched matmul ({w.ndim}-D weights; the core takes one (K, N) weight matrix)"
    if x.ndim < 2:
        return "a vector operand (the activations need rows: (..., M, K))"
    return _common(nodes)


def check_add(nodes: list[Node]) -> str | None:
    """Why the accelerator's ALU cannot take this quantized addition, or None."""
    found = quantized_add(nodes)
    if isinstance(found, str):
        return found
    a, b = (cast.inputs[0] for cast in found[1])
    return "both operands are one tensor" if a is b else None


def check_mul(nodes: list[Node]) -> str | None:
    """Why the accelerator's ALU cannot take this quantized product, or None."""
    found = quantized_mul(nodes)
    return found if isinstance(found, str) else None


def check_max_pool(nodes: list[Node]) -> str | None:
    """Why the accelerator's ALU cannot take this integer max pool, or None
    (``pool.max_pool_geometry`` checks the configuration's buffers when it compiles)."""
    return unsupported(nodes[0])


def check_lookup_table(nodes: list[Node]) -> str | None:
    """Why the accelerator's ALU cannot take this lookup-table activation, or None."""
    return unsupported_lookup(nodes[0])


def check_concat(nodes: list[Node], block: int = 16) -> str | None:
    """Why the accelerator cannot copy this concatenation in the blocked layout of
    ``block``-channel tiles, or None."""
    return concat_unsupported(nodes[0], block)


def check_channel_gather(nodes: list[Node], config: HardwareConfig | None = None
                         ) -> str | None:
    """Why the GEMM core cannot run this channel gather, or None."""
    return unsupported_gather(nodes[0], config or HardwareConfig())


def check_flatten(nodes: list[Node]) -> str | None:
    """Why the accelerator cannot hand this flattened pool to a dense layer, or None."""
    return flatten_unsupported(nodes[0])


def _rows(nodes: list[Node]) -> int:
    """The rows the GEMM core multiplies for a matched composite: a dense layer's
    activation rows (leading axes folded), a convolution's output pixels over the batch,
    an element-wise composite's or a pool's batch."""
    core, out = nodes[0], nodes[-1].outputs[0].type
    if core.op == "MatMulInteger":
        return math.prod(core.inputs[0].type.shape[:-1])
    if core.op == "ConvInteger":
        return math.prod(out.shape) // out.shape[1]
    return out.shape[0]


def _fits_batch(check, config: HardwareConfig):
    """``check`` that also refuses a composite whose rows (``_rows``) do not fill whole
    ``batch``-row tiles of ``config``: the CPU takes it, with that reason."""
    def checked(nodes: list[Node]) -> str | None:
        why = check(nodes)
        if why is not None or config.batch == 1:
            return why
        rows = _rows(nodes)
        if rows % config.batch:
            return (f"{rows} rows (batch x positions) do not fill whole {config.batch}-row "
                    f"tiles of the hardware's batch ({config.name})")
        return None
    return checked


def pattern_table(config: HardwareConfig | None = None) -> list[CompositePattern]:
    """The composites vta runs; with a ``config`` whose batch is above 1, each refuses
    what does not fill whole batch rows (``_fits_batch``) instead of failing at build."""
    table = [("conv2d_bias_requantize", _requantized(_CONV), check_conv),
             ("dense_bias_requantize", _requantized(_DENSE), check_dense),
             ("quantized_add", _SUM, check_add), ("quantized_mul", _PRODUCT, check_mul),
             ("max_pool", _POOL, check_max_pool),
             ("lookup_table", _TABLE, check_lookup_table),
             ("concat", _CONCAT, functools.partial(
                 check_concat, block=(config or HardwareConfig()).block_in)),
             ("channel_gather", _GATHER, functools.partial(check_channel_gather,
                                                           config=config)),
             ("flatten", _FLATTEN, check_flatten)]
    return [CompositePattern(name, pattern, check if config is None
                             else _fits_batch(check, config))
            for name, pattern, check in table]
