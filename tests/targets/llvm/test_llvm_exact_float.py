"""Float steps that a QuantizeLinear rounds to integers (an int8 model's float glue: a
normalization after an int8 concatenation, DenseNet's) are compiled without fast-math
flags (``EXACT_FLOAT``), so a multiply and an add are not contracted into one fused
multiply-add that rounds once where the reference rounds twice; float models keep them."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import heterocc
from heterocc.runtime.interpreter import evaluate

SHAPE = (1, 256, 16, 16)


def _normalization(quantized: bool):
    """``Relu(x * gamma + beta)`` per channel, between DQ and Q where ``quantized``."""
    rng = np.random.default_rng(0)
    channel = (1, SHAPE[1], 1, 1)
    inits = [numpy_helper.from_array(rng.uniform(0.3, 3, channel).astype(np.float32), "g"),
             numpy_helper.from_array(rng.standard_normal(channel).astype(np.float32), "b")]
    nodes = [helper.make_node("Mul", ["d", "g"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"])]
    if quantized:
        inits += [helper.make_tensor("s", TensorProto.FLOAT, [], [0.0371]),
                  helper.make_tensor("z", TensorProto.UINT8, [], [117]),
                  helper.make_tensor("sy", TensorProto.FLOAT, [], [0.0229]),
                  helper.make_tensor("zy", TensorProto.UINT8, [], [0])]
        nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
                 helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]), *nodes,
                 helper.make_node("QuantizeLinear", ["r", "sy", "zy"], ["y"])]
        out = helper.make_tensor_value_info("y", TensorProto.UINT8, SHAPE)
    else:
        nodes[0].input[0] = "x"
        out = helper.make_tensor_value_info("r", TensorProto.FLOAT, SHAPE)
    model = helper.make_model(helper.make_graph(
        nodes, "norm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)], [out],
        inits), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return onnx.shape_inference.infer_shapes(model)


def _function_irs(compiled) -> list[str]:
    return [compiled.kernels[n.name].function.owner.ir for n in compiled.graph.nodes
            if n.body is not None]


@pytest.mark.parametrize("target", ["llvm", "llvm -mattr=-avx512f"], ids=["host", "avx2"])
def test_float_glue_rounded_to_integers_is_computed_as_written(target):
    compiled = heterocc.compile(_normalization(quantized=True), target=target)
    irs = _function_irs(compiled)
    assert irs and all(" contract " not in ir and " reassoc " not in ir for ir in irs)
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32) * 3
    np.testing.assert_array_equal(compiled.run([x])[0], evaluate(compiled.graph, [x])[0])


def test_a_float_model_keeps_its_fast_math_flags():
    irs = _function_irs(heterocc.compile(_normalization(quantized=False), target="llvm"))
    assert any(" contract " in ir for ir in irs)
