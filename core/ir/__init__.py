"""The Graph IR: tensor types, values, nodes, graphs, printer and checker."""

from .graph import FUNCTION_OP, Graph, NameScope, Node, Value, constant
from .types import DTYPES, TensorType, dtype_from_onnx, normalize_dtype

__all__ = ["DTYPES", "FUNCTION_OP", "Graph", "NameScope", "Node", "TensorType", "Value",
           "constant", "dtype_from_onnx", "normalize_dtype"]
