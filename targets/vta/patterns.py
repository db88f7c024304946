"""The accelerator's pattern table: integer convolutions and dense layers with
their bias and requantization (what ``realize_qdq`` produces)."""

from __future__ import annotations

from heterocc.ir.graph import Node
from heterocc.patterns import CompositePattern, is_constant, is_op, wildcard

_CONV = is_op("ConvInteger")(wildcard(), is_constant())
_DENSE = is_op("MatMulInteger")(wildcard(), is_constant())


def _requantized(core):
    return is_op("Requantize")(is_op("Add")(core, is_constant()) | core)


def _zero_points_are_zero(node: Node) -> str | None:
    for k, v in enumerate(node.inputs[2:4], start=2):
        if v is not None and (not v.is_const or v.data.any()):
            return f"input {k} is a non-zero zero point (the accelerator is symmetric int8)"
    return None


def _common(nodes: list[Node]) -> str | None:
    core, requant = nodes[0], nodes[-1]
    x, w = core.inputs[0], core.inputs[1]
    if x.type.dtype != "int8" or w.type.dtype != "int8":
        return f"operands are {x.type.dtype} x {w.type.dtype}; the GEMM core takes int8 x int8"
    if requant.attrs["out_dtype"] != "int8":
        return f"output type {requant.attrs['out_dtype']} is not int8"
    return _zero_points_are_zero(core)


def check_conv(nodes: list[Node]) -> str | None:
    """Why the accelerator cannot take this convolution, or None."""
    conv = nodes[0]
    if conv.inputs[0].type.ndim != 4:
        return f"{conv.inputs[0].type.ndim - 2}-D convolution (only 2-D)"
    if conv.attrs.get("group", 1) != 1:
        return f"grouped convolution (group={conv.attrs['group']})"
    if any(d != 1 for d in conv.attrs.get("dilations") or [1, 1]):
        return f"dilated convolution (dilations={conv.attrs['dilations']})"
    return _common(nodes)


def check_dense(nodes: list[Node]) -> str | None:
    """Why the accelerator cannot take this dense layer, or None."""
    if nodes[0].inputs[0].type.ndim != 2 or nodes[0].inputs[1].type.ndim != 2:
        return "batched matmul (only 2-D operands)"
    return _common(nodes)


def pattern_table() -> list[CompositePattern]:
    return [CompositePattern("conv2d_bias_requantize", _requantized(_CONV), check_conv),
            CompositePattern("dense_bias_requantize", _requantized(_DENSE), check_dense)]
