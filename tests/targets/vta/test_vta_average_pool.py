"""Average pooling on the accelerator: ``realize_qdq`` writes a quantized
GlobalAveragePool, spatial ReduceMean or AveragePool as a depthwise ConvInteger with
all-ones weights and one Requantize (the window's division joins the requantization),
which runs on the GEMM core with the convolutions around it; models built with
onnx.helper and quantized by ``quantize_static``."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import heterocc
from heterocc.runtime.interpreter import evaluate

pytest.importorskip("onnxruntime.quantization")

from tests.targets.vta.ort_models import (  # noqa: E402
    onnxruntime_session,
    output_scale,
    quantize,
)

SHAPE = (1, 8, 8, 8)
POOLS = {
    "global": (("GlobalAveragePool", {}), [1, 16, 1, 1]),
    "mean": (("ReduceMean", {"axes": [2, 3], "keepdims": 1}), [1, 16, 1, 1]),
    "window": (("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]}), [1, 16, 4, 4]),
    "padded": (("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                                "count_include_pad": 1}), [1, 16, 8, 8]),
}


def conv_pool(kind: str, then_conv: bool) -> onnx.ModelProto:
    """conv (8 -> 16 channels, 8x8), the pool, and optionally a 1x1 conv."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    (op, attrs), shape = POOLS[kind]
    inits = [numpy_helper.from_array((rng.standard_normal((16, c, k, k)) * 0.3)
                                     .astype(np.float32), f"w{i}")
             for i, (c, k) in enumerate(((8, 3), (16, 1)))]
    nodes = [helper.make_node("Conv", ["input", "w0"], ["c0"], pads=[1] * 4),
             helper.make_node(op, ["c0"], ["pool"], **attrs)]
    out = "pool"
    if then_conv:
        nodes.append(helper.make_node("Conv", ["pool", "w1"], ["c1"]))
        out = "c1"
    graph = helper.make_graph(
        nodes, "conv_pool", [helper.make_tensor_value_info("input", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, shape)],
        inits if then_conv else inits[:1])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


# (ONNX Runtime quantizes a ReduceMean only where a quantized op reads it)
@pytest.mark.parametrize("kind", ["global", "window", "padded"])
@pytest.mark.parametrize("activations", ["QInt8", "QUInt8"])
def test_average_pool_runs_on_the_accelerator_within_one_step(tmp_path, kind, activations):
    model = quantize(conv_pool(kind, then_conv=False), tmp_path, "QDQ", activations)
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy")
    report = compiled.placement_report
    assert report.mac_share("vta") == 1.0, report.format()
    op = POOLS[kind][0][0]
    pools = [p for p in report.placements if p.node.startswith(op)]
    assert {p.op for p in pools} == {"ConvInteger", "Requantize"}
    assert all(p.target == "vta" for p in pools)
    assert not any(p.op in ("GlobalAveragePool", "ReduceMean", "AveragePool")
                   for p in report.placements), report.format()
    session = onnxruntime_session(model, optimized=False)
    scale = output_scale(model)
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32) * 2
        ours = compiled.run([x])[0]
        np.testing.assert_array_equal(ours, evaluate(compiled.graph, [x])[0])
        theirs = session.run(None, {"input": x})[0]
        # the convolution's requantization and the pool's may each round one step
        # differently from ONNX Runtime's float arithmetic (docs/vta.md)
        assert np.abs(ours - theirs).max() <= 2 * scale + 1e-6


@pytest.mark.parametrize("kind", ["global", "mean", "window"])
def test_a_pool_between_convolutions_keeps_one_region(tmp_path, kind):
    model = quantize(conv_pool(kind, then_conv=True), tmp_path, "QDQ", "QInt8")
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy")
    report = compiled.placement_report
    assert report.accelerator_regions() == 1 and report.round_trips == 0, report.format()
    assert report.mac_share("vta") == 1.0, report.format()
    x = np.random.default_rng(7).standard_normal(SHAPE).astype(np.float32)
    np.testing.assert_array_equal(compiled.run([x])[0], evaluate(compiled.graph, [x])[0])


def test_padding_left_out_of_the_count_stays_a_float_pool(tmp_path):
    """count_include_pad=0 divides edge windows by fewer elements: no single requantization
    computes it, so the pool keeps its QDQ form."""
    from onnx import helper

    model = conv_pool("padded", then_conv=False)
    pool = next(n for n in model.graph.node if n.op_type == "AveragePool")
    pool.attribute.remove(next(a for a in pool.attribute if a.name == "count_include_pad"))
    pool.attribute.append(helper.make_attribute("count_include_pad", 0))
    compiled = heterocc.compile(quantize(model, tmp_path, "QDQ", "QInt8"), target="vta,llvm",
                                placement="greedy")
    assert any(p.op == "AveragePool" and p.target == "llvm"
               for p in compiled.placement_report.placements)


def test_a_mean_without_keepdims_before_a_classifier_runs_on_the_accelerator(tmp_path):
    """ShuffleNet's head: ReduceMean over the spatial axes without keepdims, then a dense
    layer. The mean is the depthwise all-ones convolution and a Reshape to (N, C), all in
    one region with the convolution before and the dense layer after."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array((rng.standard_normal((16, 8, 3, 3)) * 0.3)
                                     .astype(np.float32), "w0"),
             numpy_helper.from_array((rng.standard_normal((10, 16)) * 0.3)
                                     .astype(np.float32), "fc"),
             numpy_helper.from_array(np.array([2, 3], np.int64), "axes")]
    nodes = [helper.make_node("Conv", ["input", "w0"], ["c0"], pads=[1] * 4),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("ReduceMean", ["r0", "axes"], ["mean"], keepdims=0),
             helper.make_node("Gemm", ["mean", "fc"], ["logits"], transB=1)]
    graph = helper.make_graph(
        nodes, "mean_head", [helper.make_tensor_value_info("input", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    model = quantize(model, tmp_path, "QDQ", "QInt8")
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy")
    report = compiled.placement_report
    assert not any(p.op == "ReduceMean" for p in report.placements), report.format()
    # the Reshape too (the composite flatten): the classifier joins the region
    assert all(p.target == "vta" for p in report.placements
               if p.op in ("ConvInteger", "MatMulInteger", "Reshape")), report.format()
    assert report.accelerator_regions() == 1 and report.round_trips == 0, report.format()
    session = onnxruntime_session(model, optimized=False)
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32)
        ours = compiled.run([x])[0]
        np.testing.assert_array_equal(ours, evaluate(compiled.graph, [x])[0])
        assert np.abs(ours - session.run(None, {"input": x})[0]).max() <= \
            3 * output_scale(model) + 1e-6
