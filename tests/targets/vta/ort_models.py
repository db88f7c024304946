"""Small models built with onnx.helper and quantized by onnxruntime's quantize_static,
shared by the accelerator's tests."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime import quantization as oq

INPUT = (1, 3, 16, 16)


def _conv(rng, name, x, cin, cout, kernel, stride=1, relu=True):
    w = numpy_helper.from_array((rng.standard_normal((cout, cin, kernel, kernel)) * 0.4)
                                .astype(np.float32), f"{name}_w")
    b = numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32) * 0.2,
                                f"{name}_b")
    nodes = [helper.make_node("Conv", [x, w.name, b.name], [f"{name}_y"],
                              pads=[kernel // 2] * 4, strides=[stride] * 2)]
    out = f"{name}_y"
    if relu:
        nodes.append(helper.make_node("Relu", [out], [f"{name}_r"], name=f"{name}_relu"))
        out = f"{name}_r"
    return nodes, [w, b], out


def small_cnn(seed: int = 0) -> onnx.ModelProto:
    """conv+relu, strided conv+relu, a residual block (3x3 and 1x1 branches added),
    global average pool and a dense layer: every layer kind of a ResNet."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    x = "input"
    for name, cin, cout, k, s in (("c1", 3, 16, 3, 1), ("c2", 16, 32, 3, 2)):
        n, i, x = _conv(rng, name, x, cin, cout, k, s)
        nodes += n
        inits += i
    n1, i1, a = _conv(rng, "c3", x, 32, 32, 3, relu=False)
    n2, i2, b = _conv(rng, "c4", x, 32, 32, 1, relu=False)
    nodes += n1 + n2 + [helper.make_node("Add", [a, b], ["sum"]),
                        helper.make_node("Relu", ["sum"], ["act"]),
                        helper.make_node("GlobalAveragePool", ["act"], ["pool"]),
                        helper.make_node("Flatten", ["pool"], ["flat"]),
                        helper.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"],
                                         transB=1)]
    inits += i1 + i2 + [
        numpy_helper.from_array((rng.standard_normal((10, 32)) * 0.3).astype(np.float32),
                                "fc_w"),
        numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "fc_b")]
    graph = helper.make_graph(
        nodes, "small_cnn", [helper.make_tensor_value_info("input", TensorProto.FLOAT, INPUT)],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def single_conv(seed: int, stride: int, kernel: int = 3, channels: int = 3, filters: int = 24,
                size: int = 16) -> onnx.ModelProto:
    """One padded convolution with bias and no activation: its int8 output is one
    requantization, so ONNX Runtime and the accelerator may differ by rounding alone."""
    rng = np.random.default_rng(seed)
    nodes, inits, out = _conv(rng, "c", "input", channels, filters, kernel, stride, relu=False)
    shape = (1, channels, size, size)
    graph = helper.make_graph(
        nodes, "conv", [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return onnx.shape_inference.infer_shapes(model)


class _Calibration(oq.CalibrationDataReader):
    def __init__(self, shape, count: int = 6):
        self.batches = iter([{"input": np.random.default_rng(50 + i).standard_normal(shape)
                              .astype(np.float32) * (1 + i % 3)} for i in range(count)])

    def get_next(self):
        return next(self.batches, None)


def quantize(model, directory, fmt="QDQ", activations="QInt8", weights="QInt8",
             per_channel=True, reduce_range=False, **extra_options) -> onnx.ModelProto:
    """``model`` through ``quantize_static`` with ORT's default (asymmetric) activations."""
    src, dst = directory / "float.onnx", directory / f"{fmt}_{activations}_{weights}.onnx"
    onnx.save(model, str(src))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    oq.quantize_static(str(src), str(dst), _Calibration(tuple(d.dim_value for d in dims)),
                       quant_format=getattr(oq.QuantFormat, fmt),
                       activation_type=getattr(oq.QuantType, activations),
                       weight_type=getattr(oq.QuantType, weights), per_channel=per_channel,
                       reduce_range=reduce_range, extra_options=extra_options)
    return onnx.load(str(dst))


def inputs(count: int, shape=INPUT):
    return [np.random.default_rng(900 + i).standard_normal(shape).astype(np.float32)
            for i in range(count)]


def onnxruntime_session(model, optimized: bool = True):
    """An ONNX Runtime session; ``optimized=False`` runs a QDQ model as written
    (dequantize, float op, quantize) instead of through ORT's fused int8 kernels, which
    on x86 CPUs without VNNI add u8 x s8 products in saturating int16 pairs and so can
    be several steps off when the weights use all 8 bits (docs/vta.md)."""
    options = ort.SessionOptions()
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def output_scale(model) -> float:
    """The scale of the graph output: its DequantizeLinear's, or a QGemm's with a float
    output (the scale of its accumulator, A's times B's)."""
    init = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    out = model.graph.output[0].name
    node = next(n for n in model.graph.node if out in n.output)
    if node.op_type == "DequantizeLinear":
        return float(init[node.input[1]])
    return float(np.max(init[node.input[1]] * init[node.input[4]]))


def residual_sum(shape=(1, 32, 8, 8), relu: bool = True) -> onnx.ModelProto:
    """``relu(a + b)`` of two graph inputs "a" and "b": quantized, the addition is the only
    requantization (the inputs are quantized on the host)."""
    nodes = [helper.make_node("Add", ["a", "b"], ["sum"])]
    if relu:
        nodes.append(helper.make_node("Relu", ["sum"], ["out"]))
    graph = helper.make_graph(
        nodes, "residual_sum",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name in "ab"],
        [helper.make_tensor_value_info("out" if relu else "sum", TensorProto.FLOAT, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


class _PairCalibration(oq.CalibrationDataReader):
    def __init__(self, shape, count: int = 6):
        rng = np.random.default_rng(70)
        self.batches = iter([{"a": rng.standard_normal(shape).astype(np.float32) * 2,
                              "b": rng.standard_normal(shape).astype(np.float32) * 0.7}
                             for _ in range(count)])

    def get_next(self):
        return next(self.batches, None)


def quantize_pair(model, directory, activations="QInt8") -> onnx.ModelProto:
    """A two-input model ("a", "b") through ``quantize_static``, QDQ, ORT's defaults."""
    src, dst = directory / "pair.onnx", directory / f"pair_{activations}.onnx"
    onnx.save(model, str(src))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    oq.quantize_static(str(src), str(dst), _PairCalibration(tuple(d.dim_value for d in dims)),
                       quant_format=oq.QuantFormat.QDQ,
                       activation_type=getattr(oq.QuantType, activations))
    return onnx.load(str(dst))
