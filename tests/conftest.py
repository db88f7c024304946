"""Shared fixtures: small ONNX models built with onnx.helper."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

_ONNX_TYPES = {"float32": TensorProto.FLOAT, "int64": TensorProto.INT64,
               "int32": TensorProto.INT32, "int8": TensorProto.INT8, "bool": TensorProto.BOOL,
               "uint8": TensorProto.UINT8, "float16": TensorProto.FLOAT16}


def make_model(nodes, inputs, outputs, initializers=None, opset=18) -> onnx.ModelProto:
    """A model from nodes; ``inputs``/``outputs`` are (name, dtype, shape) triples
    (shape None for outputs: inferred), ``initializers`` a name -> array dict."""
    def vi(name, dtype, shape):
        return helper.make_tensor_value_info(name, _ONNX_TYPES[dtype], shape)

    graph = helper.make_graph(
        nodes, "test", [vi(*i) for i in inputs], [vi(*o) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (initializers or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    if any(o[2] is None for o in outputs):  # let ONNX fill in the output shapes
        model = onnx.shape_inference.infer_shapes(model)
    return model


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A fresh NumPy generator for each test, seeded with its module's ``RNG_SEED``
    (0 where the module sets none): every test draws the same data whatever runs before."""
    return np.random.default_rng(getattr(request.module, "RNG_SEED", 0))


def quantize_with_onnxruntime(model: onnx.ModelProto, input_shape, directory) -> onnx.ModelProto:
    """``model`` quantized to int8 QDQ by onnxruntime's quantize_static (symmetric,
    calibrated on a few seeded random inputs)."""
    from onnxruntime import quantization as oq

    class Calibration(oq.CalibrationDataReader):
        def __init__(self):
            name = model.graph.input[0].name
            self.batches = iter([{name: np.random.default_rng(i).standard_normal(input_shape)
                                  .astype(np.float32)} for i in range(4)])

        def get_next(self):
            return next(self.batches, None)

    onnx.save(model, str(directory / "float.onnx"))
    oq.quantize_static(str(directory / "float.onnx"), str(directory / "qdq.onnx"),
                       Calibration(), quant_format=oq.QuantFormat.QDQ,
                       activation_type=oq.QuantType.QInt8, weight_type=oq.QuantType.QInt8,
                       extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
    return onnx.load(str(directory / "qdq.onnx"))


@pytest.fixture(scope="session")
def qdq_tiny_cnn(tmp_path_factory):
    """The bundled tiny CNN (convolutions with bias), quantized to QDQ by onnxruntime."""
    pytest.importorskip("onnxruntime.quantization")
    from heterocc.models import tiny_cnn

    return quantize_with_onnxruntime(tiny_cnn(batchnorm=False), (1, 3, 32, 32),
                                     tmp_path_factory.mktemp("qdq"))


def conv_model(rng, channels, size, filters, kernel, stride=1, group=1, pad=None, dilation=1,
                epilogue=(), width=None):
    """A model of one float32 Conv (random weights and bias from ``rng``) and its epilogue
    ops, in order: "relu", "clip", "residual" (adds a second graph input of the output's
    shape), "scale" (a per-channel Mul)."""
    width = size if width is None else width
    pad = (kernel // 2) * dilation if pad is None else pad
    pads = list(pad) if isinstance(pad, list | tuple) else [pad] * 4
    initializers = [
        numpy_helper.from_array(rng.standard_normal(
            (filters, channels // group, kernel, kernel), dtype=np.float32) * 0.3, "w"),
        numpy_helper.from_array(rng.standard_normal(filters, dtype=np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["t0"], pads=pads, strides=[stride] * 2,
                              group=group, dilations=[dilation] * 2)]
    out_h = (size + pads[0] + pads[2] - dilation * (kernel - 1) - 1) // stride + 1
    out_w = (width + pads[1] + pads[3] - dilation * (kernel - 1) - 1) // stride + 1
    out_shape = [1, filters, out_h, out_w]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, width])]
    for k, op in enumerate(epilogue, start=1):
        src, dst = f"t{k - 1}", f"t{k}"
        if op == "relu":
            nodes.append(helper.make_node("Relu", [src], [dst]))
        elif op == "clip":
            initializers += [numpy_helper.from_array(np.float32(0.0), "lo"),
                             numpy_helper.from_array(np.float32(6.0), "hi")]
            nodes.append(helper.make_node("Clip", [src, "lo", "hi"], [dst]))
        elif op == "residual":
            inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, out_shape))
            nodes.append(helper.make_node("Add", [src, "r"], [dst]))
        elif op == "scale":
            initializers.append(numpy_helper.from_array(
                rng.standard_normal((filters, 1, 1), dtype=np.float32), "s"))
            nodes.append(helper.make_node("Mul", [src, "s"], [dst]))
        else:
            raise ValueError(op)
    graph = helper.make_graph(
        nodes, "conv", inputs,
        [helper.make_tensor_value_info(f"t{len(epilogue)}", TensorProto.FLOAT, out_shape)],
        initializer=initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="session", autouse=True)
def _cost_cache(tmp_path_factory):
    """The placement's estimate cache of the test session: its own folder (placement by
    cost is the default for vta,llvm; figures measured here stay out of the user's cache
    and are shared by the session's tests)."""
    import os

    before = os.environ.get("HETEROCC_CACHE_DIR")
    os.environ["HETEROCC_CACHE_DIR"] = str(tmp_path_factory.mktemp("heterocc-cache"))
    yield
    if before is None:
        os.environ.pop("HETEROCC_CACHE_DIR", None)
    else:
        os.environ["HETEROCC_CACHE_DIR"] = before
