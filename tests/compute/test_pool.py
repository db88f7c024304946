"""MaxPool and AveragePool through the llvm target with ceil_mode, dilations, padding and
count_include_pad (torchvision's SqueezeNet and GoogLeNet pool with ceil_mode): compiled
(no NumPy fallback), against the NumPy reference and ONNX Runtime, on the host's ISA and
on AVX2 code; and a SqueezeNet-like graph whose pools are all compiled."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import helper

import heterocc
from tests.compute.test_elementwise import random_array
from tests.conftest import make_model

ISAS = pytest.mark.parametrize("target", ["llvm", "llvm -mattr=-avx512f"],
                               ids=["host", "avx2"])

CASES = [
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},  # SqueezeNet's
    {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},  # GoogLeNet's
    {"kernel_shape": [3, 3], "strides": [3, 3], "ceil_mode": 1, "pads": [1, 0, 1, 0]},
    {"kernel_shape": [3, 2], "strides": [2, 1], "dilations": [2, 2]},
    {"kernel_shape": [2, 3], "strides": [2, 2], "dilations": [1, 2], "ceil_mode": 1,
     "pads": [0, 1, 1, 1]},
    {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]},
]


def _ort(model, x):
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _llvm_fallbacks(compiled) -> dict:
    return next(iter(compiled._cache.values())).targets["llvm"].fallbacks


def _check_pool(op, attrs, shape, target, rng, opset=18):
    x = random_array(rng, shape, "float32")
    model = make_model([helper.make_node(op, ["x"], ["y"], **attrs)],
                       [("x", "float32", list(shape))], [("y", "float32", None)], opset=opset)
    compiled = heterocc.compile(model, target=target)
    got = compiled.run([x])[0]
    assert not _llvm_fallbacks(compiled)
    definition = heterocc.ops.get_op(op)
    expected = definition.run([x], definition.normalize_attrs(attrs))[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, _ort(model, x), rtol=1e-5, atol=1e-5)


@ISAS
@pytest.mark.parametrize("attrs", CASES)
def test_max_pool_compiles_with_ceil_mode_and_dilations(attrs, target, rng):
    _check_pool("MaxPool", attrs, (1, 3, 9, 8), target, rng)


@ISAS
@pytest.mark.parametrize("attrs", CASES)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool_compiles_with_ceil_mode_and_dilations(attrs, count_include_pad, target,
                                                           rng):
    # AveragePool takes dilations from opset 19
    _check_pool("AveragePool", {**attrs, "count_include_pad": count_include_pad},
                (1, 3, 9, 8), target, rng, opset=19)


@ISAS
def test_squeezenet_like_graph_has_no_fallback(target, rng):
    """conv -> relu -> MaxPool(3, 2, ceil_mode) -> fire-like 1x1 and 3x3 convs concatenated
    -> MaxPool(ceil_mode) -> AveragePool: every function compiled, outputs as ORT's."""
    w1 = random_array(rng, (16, 3, 3, 3), "float32", high=0.3)
    w2 = random_array(rng, (8, 16, 1, 1), "float32", high=0.3)
    w3 = random_array(rng, (8, 16, 3, 3), "float32", high=0.3)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2],
                         ceil_mode=1),
        helper.make_node("Conv", ["p1", "w2"], ["e1"]),
        helper.make_node("Conv", ["p1", "w3"], ["e3"], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["e1", "e3"], ["cat"], axis=1),
        helper.make_node("Relu", ["cat"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p2"], kernel_shape=[3, 3], strides=[2, 2],
                         ceil_mode=1),
        helper.make_node("AveragePool", ["p2"], ["y"], kernel_shape=[2, 2], strides=[2, 2],
                         ceil_mode=1),
    ]
    model = make_model(nodes, [("x", "float32", [1, 3, 45, 45])], [("y", "float32", None)],
                       {"w1": w1, "w2": w2, "w3": w3})
    x = random_array(rng, (1, 3, 45, 45), "float32", high=1.0)
    compiled = heterocc.compile(model, target=target)
    got = compiled.run([x])[0]
    assert not _llvm_fallbacks(compiled)
    np.testing.assert_allclose(got, _ort(model, x), rtol=1e-4, atol=1e-4)
    # the ceil_mode pool after the first convolution reads its blocked (NCHW[x]c) output
    pools = [n for f in compiled.graph.nodes if f.body is not None for n in f.body.nodes
             if n.op == "MaxPool"]
    assert any(len(n.attrs["kernel_shape"]) == 3 for n in pools)
