"""A small helper for building ONNX CNNs in code with seeded random weights."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class OnnxBuilder:
    """Accumulates nodes and initializers; each layer method returns its output name."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._count: dict[str, int] = {}

    def _name(self, base: str) -> str:
        k = self._count.get(base, 0)
        self._count[base] = k + 1
        return f"{base}{k}"

    def param(self, name: str, data: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(data), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        name = self._name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1,
             bias: bool = False) -> str:
        fan_in = cin // groups * k * k
        w = self.rng.standard_normal((cout, cin // groups, k, k)).astype(np.float32)
        w *= np.float32((2.0 / fan_in) ** 0.5)
        name = self._name("conv")
        inputs = [x, self.param(f"{name}_w", w)]
        if bias:
            inputs.append(self.param(f"{name}_b", 0.1 * self.rng.standard_normal(cout)
                                     .astype(np.float32)))
        pad = k // 2
        self.nodes.append(helper.make_node("Conv", inputs, [name], name=name,
                                           kernel_shape=[k, k], strides=[stride, stride],
                                           pads=[pad] * 4, group=groups))
        return name

    def batchnorm(self, x: str, channels: int) -> str:
        name = self._name("bn")
        r = self.rng
        params = [self.param(f"{name}_gamma", (0.5 + r.random(channels)).astype(np.float32)),
                  self.param(f"{name}_beta", (0.1 * r.standard_normal(channels))
                             .astype(np.float32)),
                  self.param(f"{name}_mean", (0.1 * r.standard_normal(channels))
                             .astype(np.float32)),
                  self.param(f"{name}_var", (0.5 + r.random(channels)).astype(np.float32))]
        self.nodes.append(helper.make_node("BatchNormalization", [x, *params], [name],
                                           name=name, epsilon=1e-5))
        return name

    def dense(self, x: str, cin: int, cout: int) -> str:
        w = (self.rng.standard_normal((cout, cin)) * (1.0 / cin) ** 0.5).astype(np.float32)
        b = (0.01 * self.rng.standard_normal(cout)).astype(np.float32)
        name = self._name("fc")
        self.nodes.append(helper.make_node(
            "Gemm", [x, self.param(f"{name}_w", w), self.param(f"{name}_b", b)], [name],
            name=name, transB=1))
        return name

    def model(self, name: str, input_shape: tuple[int, ...], output: str,
              output_shape: tuple[int, ...], opset: int = 18) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(input_shape))],
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, list(output_shape))],
            self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                  producer_name="heterocc")
        model.ir_version = 9
        onnx.checker.check_model(model)
        return model
