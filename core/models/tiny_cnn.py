"""A small residual CNN (conv, batch norm, relu, residual add, pooling, dense)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def tiny_cnn(batch: int = 1, channels: int = 16, size: int = 32, classes: int = 10,
             seed: int = 0, batchnorm: bool = True) -> onnx.ModelProto:
    """An ONNX model: stem conv-bn-relu, one residual block, global pool, Gemm.

    ``batchnorm=False`` gives convolutions with a bias instead (as after BN
    folding), the form post-training quantizers expect.
    """
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []

    def param(name: str, *shape: int, scale: float = 1.0, positive: bool = False):
        data = rng.standard_normal(shape).astype(np.float32) * scale
        if positive:
            data = np.abs(data) + 0.5
        inits.append(numpy_helper.from_array(data, name))
        return name

    def conv_bn(x: str, out: str, cin: int, cout: int, relu: bool) -> list[onnx.NodeProto]:
        w = param(f"{out}_w", cout, cin, 3, 3, scale=(2.0 / (9 * cin)) ** 0.5)
        if not batchnorm:
            b = param(f"{out}_b", cout, scale=0.1)
            conv_out = f"{out}_conv" if relu else out
            nodes = [helper.make_node("Conv", [x, w, b], [conv_out], pads=[1, 1, 1, 1],
                                      name=f"{out}_conv")]
            if relu:
                nodes.append(helper.make_node("Relu", [conv_out], [out], name=f"{out}_relu"))
            return nodes
        bn = [param(f"{out}_gamma", cout, positive=True), param(f"{out}_beta", cout, scale=0.1),
              param(f"{out}_mean", cout, scale=0.1), param(f"{out}_var", cout, positive=True)]
        nodes = [helper.make_node("Conv", [x, w], [f"{out}_conv"], pads=[1, 1, 1, 1],
                                  name=f"{out}_conv"),
                 helper.make_node("BatchNormalization", [f"{out}_conv", *bn],
                                  [f"{out}_bn" if relu else out], epsilon=1e-5, name=f"{out}_bn")]
        if relu:
            nodes.append(helper.make_node("Relu", [f"{out}_bn"], [out], name=f"{out}_relu"))
        return nodes

    nodes = conv_bn("input", "stem", 3, channels, relu=True)
    nodes += conv_bn("stem", "block_a", channels, channels, relu=True)
    nodes += conv_bn("block_a", "block_b", channels, channels, relu=False)
    nodes += [
        helper.make_node("Add", ["block_b", "stem"], ["residual"], name="residual_add"),
        helper.make_node("Relu", ["residual"], ["block_out"], name="block_relu"),
        helper.make_node("MaxPool", ["block_out"], ["pooled"], kernel_shape=[2, 2],
                         strides=[2, 2], name="pool"),
        helper.make_node("GlobalAveragePool", ["pooled"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["features"], axis=1, name="flatten"),
        helper.make_node("Gemm", ["features", param("fc_w", classes, channels, scale=0.3),
                                  param("fc_b", classes, scale=0.1)],
                         ["logits"], transB=1, name="fc"),
        helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1, name="softmax"),
    ]
    graph = helper.make_graph(
        nodes, "tiny_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [batch, classes])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                              producer_name="heterocc")
    model.ir_version = 9
    onnx.checker.check_model(model)
    return model
