"""ONNX attributes to plain Python values."""

from __future__ import annotations

from typing import Any

from onnx import AttributeProto, numpy_helper

from ..errors import UnsupportedOpError


def attribute_value(attr: AttributeProto, node_name: str = "", op_type: str = "") -> Any:
    """The Python value of one attribute: int, float, str, lists of those, or an array."""
    kind = attr.type
    if kind == AttributeProto.INT:
        return int(attr.i)
    if kind == AttributeProto.FLOAT:
        return float(attr.f)
    if kind == AttributeProto.STRING:
        return attr.s.decode("utf-8", errors="replace")
    if kind == AttributeProto.INTS:
        return [int(v) for v in attr.ints]
    if kind == AttributeProto.FLOATS:
        return [float(v) for v in attr.floats]
    if kind == AttributeProto.STRINGS:
        return [s.decode("utf-8", errors="replace") for s in attr.strings]
    if kind == AttributeProto.TENSOR:
        return numpy_helper.to_array(attr.t)
    if kind == AttributeProto.TENSORS:
        return [numpy_helper.to_array(t) for t in attr.tensors]
    # Sub-graph attributes (If/Loop/Scan bodies) have no lowering yet.
    raise UnsupportedOpError({f"{op_type} (with a sub-graph attribute {attr.name!r})": [node_name]})


def node_attributes(node) -> dict[str, Any]:
    """Every attribute of an ONNX NodeProto as a name -> value dict."""
    return {a.name: attribute_value(a, node.name, node.op_type) for a in node.attribute}
