"""An int8 model's channel concatenation on the CPU (DenseNet's, GoogLeNet's):
``integer_concats`` concatenates the int8 tensors, each part requantized to the output's
parameters, and drops the float glue it replaced; the result equals the integer
reference bit for bit."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import heterocc
from heterocc.runtime.interpreter import evaluate

#: channels of the concatenated parts (the last one quantized as the output)
PARTS = (16, 8, 24)


def _qdq_concat_norm(size: int = 6):
    """``Q(Relu(BN(DQ(Q(Concat(DQ(q_i)))))))`` of int8 inputs ``q_i``: DenseNet's
    concatenation and the normalization of the next layer, each part with a scale of its
    own but the last."""
    inputs = [helper.make_tensor_value_info(f"q{i}", TensorProto.INT8, [1, c, size, size])
              for i, c in enumerate(PARTS)]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    channels = sum(PARTS)
    rng = np.random.default_rng(3)
    inits = [helper.make_tensor("s_out", TensorProto.FLOAT, [], [0.07]),
             helper.make_tensor("z_out", TensorProto.INT8, [], [-8]),
             helper.make_tensor("s_y", TensorProto.FLOAT, [], [0.05]),
             helper.make_tensor("z_y", TensorProto.INT8, [], [-128])]
    nodes, dequantized = [], []
    for i in range(len(PARTS)):
        last = i == len(PARTS) - 1
        scale, zero = ("s_out", "z_out") if last else (f"s{i}", f"z{i}")
        if not last:
            inits += [helper.make_tensor(scale, TensorProto.FLOAT, [], [0.03 + 0.02 * i]),
                      helper.make_tensor(zero, TensorProto.INT8, [], [-20 + 10 * i])]
        nodes.append(helper.make_node("DequantizeLinear", [f"q{i}", scale, zero], [f"d{i}"]))
        dequantized.append(f"d{i}")
    for name, values in (("gamma", rng.uniform(0.5, 1.5, channels)),
                         ("beta", rng.uniform(-0.5, 0.5, channels)),
                         ("mean", rng.uniform(-0.2, 0.2, channels)),
                         ("var", rng.uniform(0.5, 2.0, channels))):
        inits.append(helper.make_tensor(name, TensorProto.FLOAT, [channels],
                                        values.astype(np.float32)))
    nodes += [helper.make_node("Concat", dequantized, ["cat"], axis=1),
              helper.make_node("QuantizeLinear", ["cat", "s_out", "z_out"], ["qcat"]),
              helper.make_node("DequantizeLinear", ["qcat", "s_out", "z_out"], ["dcat"]),
              helper.make_node("BatchNormalization", ["dcat", "gamma", "beta", "mean", "var"],
                               ["norm"]),
              helper.make_node("Relu", ["norm"], ["relu"]),
              helper.make_node("QuantizeLinear", ["relu", "s_y", "z_y"], ["qy"]),
              helper.make_node("DequantizeLinear", ["qy", "s_y", "z_y"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "concat", inputs, [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return onnx.shape_inference.infer_shapes(model)


def _inputs(size: int = 6) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.integers(-128, 128, (1, c, size, size)).astype(np.int8) for c in PARTS]


def test_the_float_glue_of_an_integer_concat_leaves_no_function_behind():
    """The parts' dequantizations that the float concatenation read go with it: left in
    the graph, each became a function with no output, compiled and called for nothing."""
    compiled = heterocc.compile(_qdq_concat_norm())
    functions = [n for n in compiled.graph.nodes if n.body is not None]
    assert all(n.outputs for n in functions)
    concats = [n for n in functions if any(m.op == "Concat" for m in n.body.nodes)]
    assert len(concats) == 1
    # the parts with a scale of their own requantized on the way in by a byte table (the
    # last one taken as it is), the normalization's result quantized
    ops = [m.op for m in concats[0].body.nodes]
    assert ops.count("LookupTable") == len(PARTS) - 1 and ops.count("QuantizeLinear") == 1


@pytest.mark.parametrize("target", ["llvm", "llvm -mattr=-avx512f",
                                    "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"],
                         ids=["host", "avx2", "neon"])
@pytest.mark.parametrize("size", [6, 14], ids=["6x6", "14x14"])
def test_an_int8_concat_and_the_normalization_after_it_are_exact(target, size):
    """The concatenation's function (the parts' requantizations, the concatenation, the
    next layer's normalization and quantization) equals the integer reference's bits
    (the host's code; the NEON code is built)."""
    compiled = heterocc.compile(_qdq_concat_norm(size), target=target)
    assert not compiled.fallbacks
    if "aarch64" in target:
        return
    xs = _inputs(size)
    np.testing.assert_array_equal(compiled.run(xs)[0], evaluate(compiled.graph, xs)[0])
