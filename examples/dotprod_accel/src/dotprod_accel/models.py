"""Small int8 ONNX models for the dot-product array: the tutorial's ``mlp_int8.onnx``
and the tests' models.

    python -m dotprod_accel.models mlp_int8.onnx     # writes the tutorial's model
"""

from __future__ import annotations

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def two_layer_mlp(rows: int = 4, features: int = 20, hidden: int = 10, outputs: int = 6,
                  wide_classes: int = 5, seed: int = 0) -> onnx.ModelProto:
    """int8 x -> dense+bias -> (CPU: ReLU, rescale, QuantizeLinear) -> dense ->
    (CPU: QuantizeLinear) -> a dense layer with full-range weights.

    The first two dense layers have small weights (the array takes them); the last
    one's accumulators could exceed int16, so it must stay on the CPU.
    """
    rng = np.random.default_rng(seed)
    constants = {
        "w1": rng.integers(-3, 4, (features, hidden)).astype(np.int8),
        "b1": rng.integers(-500, 500, (hidden,)).astype(np.int32),
        "w2": rng.integers(-4, 5, (hidden, outputs)).astype(np.int8),
        "w3": rng.integers(-128, 128, (outputs, wide_classes)).astype(np.int8),
        "scale": np.array(0.05, np.float32),
        "one": np.array(1.0, np.float32),
        "zero": np.array(0, np.int8),
    }
    nodes = [
        helper.make_node("MatMulInteger", ["x", "w1"], ["m1"]),
        helper.make_node("Add", ["m1", "b1"], ["a1"]),
        helper.make_node("Cast", ["a1"], ["f1"], to=TensorProto.FLOAT),
        helper.make_node("Relu", ["f1"], ["r1"]),
        helper.make_node("Mul", ["r1", "scale"], ["s1"]),
        helper.make_node("QuantizeLinear", ["s1", "one", "zero"], ["q1"]),
        helper.make_node("MatMulInteger", ["q1", "w2"], ["m2"]),
        helper.make_node("Cast", ["m2"], ["f2"], to=TensorProto.FLOAT),
        helper.make_node("QuantizeLinear", ["f2", "one", "zero"], ["q2"]),
        helper.make_node("MatMulInteger", ["q2", "w3"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "two_layer_mlp",
        [helper.make_tensor_value_info("x", TensorProto.INT8, [rows, features])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [rows, wide_classes])],
        [numpy_helper.from_array(v, k) for k, v in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    onnx.checker.check_model(model)
    return model


def dense_model(weights: np.ndarray, bias: np.ndarray | None, rows: int) -> onnx.ModelProto:
    """One int8 dense layer (with an optional int32 bias) as a model."""
    nodes = [helper.make_node("MatMulInteger", ["x", "w"], ["y" if bias is None else "m"])]
    constants = {"w": weights}
    if bias is not None:
        nodes.append(helper.make_node("Add", ["m", "b"], ["y"]))
        constants["b"] = bias
    graph = helper.make_graph(
        nodes, "dense",
        [helper.make_tensor_value_info("x", TensorProto.INT8, [rows, weights.shape[0]])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [rows, weights.shape[1]])],
        [numpy_helper.from_array(v, k) for k, v in constants.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def main(argv: list[str] | None = None) -> int:
    """Write :func:`two_layer_mlp` to the path given (default ``mlp_int8.onnx``)."""
    args = sys.argv[1:] if argv is None else argv
    path = args[0] if args else "mlp_int8.onnx"
    onnx.save(two_layer_mlp(), path)
    print(f"wrote {path}: int8 [4, 20] -> dense -> ReLU -> dense -> dense (int32 [4, 5])")
    return 0


if __name__ == "__main__":
    sys.exit(main())
