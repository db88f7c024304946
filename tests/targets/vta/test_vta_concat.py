"""Channel concatenations on the accelerator: ``integer_concats`` makes a quantized
Concat integer (inputs quantized otherwise than the output requantized through lookup
tables), and the composite ``concat`` copies each input's channel blocks after the
previous input's in the blocked layout (``lookup.copy_program``); models built with
onnx.helper and quantized by ``quantize_static``."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import heterocc
from heterocc.accel_sim import HardwareConfig, check_stream, run_stream
from heterocc.accel_sim.program import read_tensor
from heterocc.runtime.interpreter import evaluate
from heterocc.targets.vta.blocking import from_blocked, to_blocked
from heterocc.targets.vta.lookup import chunk_tiles, copy_program

pytest.importorskip("onnxruntime.quantization")

from tests.targets.vta.ort_models import (  # noqa: E402
    onnxruntime_session,
    output_scale,
    quantize,
)

SHAPE = (1, 8, 8, 8)


def branches(channels_a: int, channels_b: int) -> onnx.ModelProto:
    """conv+relu, then a 1x1 and a 3x3 branch concatenated along the channels (as a
    SqueezeNet fire module or an Inception block), then a 1x1 conv."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def weights(name, out, cin, k):
        return numpy_helper.from_array((rng.standard_normal((out, cin, k, k)) * 0.3)
                                       .astype(np.float32), name)

    inits = [weights("w0", 16, 8, 3), weights("wa", channels_a, 16, 1),
             weights("wb", channels_b, 16, 3), weights("w1", 16, channels_a + channels_b, 1)]
    nodes = [helper.make_node("Conv", ["input", "w0"], ["c0"], pads=[1] * 4),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "wa"], ["a"]),
             helper.make_node("Conv", ["r0", "wb"], ["b"], pads=[1] * 4),
             helper.make_node("Concat", ["a", "b"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "w1"], ["c1"])]
    graph = helper.make_graph(
        nodes, "branches", [helper.make_tensor_value_info("input", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info("c1", TensorProto.FLOAT, [1, 16, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("channels", [(16, 32), (16, 8)])
@pytest.mark.parametrize("activations", ["QInt8", "QUInt8"])
def test_concat_runs_on_the_accelerator_in_one_region(tmp_path, channels, activations):
    model = quantize(branches(*channels), tmp_path, "QDQ", activations)
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy")
    report = compiled.placement_report
    assert report.mac_share("vta") == 1.0
    assert report.accelerator_regions() == 1 and report.round_trips == 0, report.format()
    assert [p.target for p in report.placements if p.op == "Concat"] == ["vta"]
    session = onnxruntime_session(model, optimized=False)
    scale = output_scale(model)
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32)
        ours = compiled.run([x])[0]
        np.testing.assert_array_equal(ours, evaluate(compiled.graph, [x])[0])
        assert np.abs(ours - session.run(None, {"input": x})[0]).max() <= 2 * scale + 1e-6


def test_a_concat_whose_first_input_splits_a_tile_stays_on_the_cpu(tmp_path):
    model = quantize(branches(8, 16), tmp_path, "QDQ", "QInt8")
    report = heterocc.compile(model, target="vta,llvm", placement="greedy").placement_report
    (concat,) = [p for p in report.placements if p.op == "Concat"]
    assert concat.target == "llvm" and "whole 16-channel tiles" in concat.reason


@pytest.mark.parametrize("preset", ["1x8x8", "1x16x16"])
def test_copy_program_concatenates_blocked_tensors(preset):
    config = HardwareConfig.preset(preset)
    block = config.block_in
    rng = np.random.default_rng(2)
    # a first input that takes several chunks, a small one and a partial last block
    height = max(1, int(2.5 * chunk_tiles(config)) // 4)
    shapes = [(1, 2 * block, height, 4), (1, block, height, 4), (1, block // 2 + 1, height, 4)]
    xs = [rng.integers(-128, 128, shape).astype(np.int8) for shape in shapes]
    sources = tuple(-(-s[1] // block) * s[2] * s[3] for s in shapes)
    program = copy_program(config, sources)
    check_stream(program.instructions, config, dram_bytes=program.dram.size)
    dram = program.dram.copy()
    for index, x in enumerate(xs):
        program.write(f"X{index}", to_blocked(x, config), dram)
    run_stream(program.instructions, config, dram)
    expected = np.concatenate(xs, axis=1)
    got = from_blocked(read_tensor(config, program.tensors["Y"], dram), expected.shape, config)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("relu", [False, True])
def test_a_normalization_after_a_concat_joins_the_region(tmp_path, relu):
    """A DenseNet layer: concatenation, batch normalization (no convolution before it
    absorbs it), ReLU, convolution. The normalization becomes a depthwise 1x1 convolution
    (``integer_average_pools``), so the block is one region, bit-exact."""
    from onnx import helper, numpy_helper

    model = branches(16, 16)
    graph = model.graph
    rng = np.random.default_rng(4)
    stats = {"g": rng.uniform(-1.5, 1.5, 32), "b": rng.standard_normal(32) * 0.3,
             "m": rng.standard_normal(32) * 0.2, "v": rng.uniform(0.5, 2, 32)}
    graph.initializer.extend(numpy_helper.from_array(v.astype(np.float32), f"bn_{k}")
                             for k, v in stats.items())
    last = graph.node[-1]
    norm = [helper.make_node("BatchNormalization", ["cat"] + [f"bn_{k}" for k in "gbmv"],
                             ["n"])]
    if relu:
        norm.append(helper.make_node("Relu", ["n"], ["nr"]))
    last.input[0] = norm[-1].output[0]
    graph.node.insert(len(graph.node) - 1, norm[0])
    if relu:
        graph.node.insert(len(graph.node) - 1, norm[1])
    quantized = quantize(model, tmp_path, "QDQ", "QInt8")
    compiled = heterocc.compile(quantized, target="vta,llvm", placement="greedy")
    report = compiled.placement_report
    assert report.accelerator_regions() == 1 and report.round_trips == 0, report.format()
    assert not any(p.op == "BatchNormalization" for p in report.placements)
    session = onnxruntime_session(quantized, optimized=False)
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32)
        ours = compiled.run([x])[0]
        np.testing.assert_array_equal(ours, evaluate(compiled.graph, [x])[0])
        theirs = session.run(None, {"input": x})[0]
        assert np.abs(ours - theirs).max() <= 3 * output_scale(quantized) + 1e-6


def test_a_normalization_on_the_accelerator_rounds_as_the_qdq_model():
    """``Q(BatchNormalization(DQ(x)))`` with statistics set from data: the depthwise 1x1
    form's bias is rounded on a grid finer than an output step (``AFFINE_WEIGHT``), so
    at most a rare near-tie output is one step from ONNX Runtime's float arithmetic (with
    weights +-1, one output in six was)."""
    from onnx import TensorProto, helper, numpy_helper

    channels, shape = 32, (1, 32, 16, 16)
    rng = np.random.default_rng(7)
    stats = {"g": rng.uniform(0.2, 2.5, channels) * rng.choice([-1, 1], channels),
             "b": rng.standard_normal(channels), "m": rng.standard_normal(channels) * 0.5,
             "v": rng.uniform(0.3, 3.0, channels)}
    x_scale, y_scale = 4.0 / 127, 9.0 / 127
    inits = [numpy_helper.from_array(v.astype(np.float32), f"bn_{k}") for k, v in stats.items()]
    inits += [numpy_helper.from_array(np.array(s, np.float32), n)
              for n, s in (("sx", x_scale), ("sy", y_scale))]
    inits += [numpy_helper.from_array(np.array(0, np.int8), n) for n in ("zx", "zy")]
    nodes = [helper.make_node("QuantizeLinear", ["input", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"]),
             helper.make_node("BatchNormalization", ["xd"] + [f"bn_{k}" for k in "gbmv"],
                              ["n"]),
             helper.make_node("QuantizeLinear", ["n", "sy", "zy"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["output"])]
    graph = helper.make_graph(
        nodes, "qdq_norm", [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy")
    assert not any(p.op == "BatchNormalization" and p.target != "vta"
                   for p in compiled.placement_report.placements)
    session = onnxruntime_session(model, optimized=False)
    off = total = 0
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        ours = compiled.run([x])[0]
        np.testing.assert_array_equal(ours, evaluate(compiled.graph, [x])[0])
        steps = np.rint(np.abs(ours - session.run(None, {"input": x})[0]) / y_scale)
        assert steps.max() <= 1
        off, total = off + int((steps > 0).sum()), total + steps.size
    assert off <= total // 500, f"{off} of {total} outputs one step from ORT"
