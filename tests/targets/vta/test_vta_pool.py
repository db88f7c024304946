"""Integer max pooling on the accelerator's ALU (targets/vta/pool.py): the program
against the graph's reference pool over window shapes, partial chunks and both
slots; the pattern's refusals; and a quantized stem (convolution, ReLU, MaxPool) as
ORT's quantize_static writes it, in one accelerator region, bit-exact."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import heterocc
from heterocc.accel_sim import HardwareConfig, check_stream, run_stream
from heterocc.accel_sim.program import read_tensor
from heterocc.ir.graph import Node, Value
from heterocc.ir.types import TensorType
from heterocc.ops import get_op
from heterocc.runtime.interpreter import evaluate
from heterocc.targets.vta.blocking import from_blocked, to_blocked
from heterocc.targets.vta.patterns import check_max_pool
from heterocc.targets.vta.pool import chunk_shape, max_pool_geometry, pool_program


def _pool(shape, dtype="int8", outputs=1, **attrs) -> Node:
    """An integer MaxPool node reading "x" of ``shape`` (output types are not read)."""
    attrs = get_op("MaxPool").normalize_attrs(attrs, "pool")
    ys = [Value(f"y{i}", TensorType(shape, dtype)) for i in range(outputs)]
    return Node("MaxPool", [Value("x", TensorType(shape, dtype))], ys, attrs, "pool")


def _reference(x: np.ndarray, attrs: dict) -> np.ndarray:
    op = get_op("MaxPool")
    return op.run([x], op.normalize_attrs(attrs, "pool"))[0]


@pytest.mark.parametrize("preset", ["1x8x8", "1x16x16"])
@pytest.mark.parametrize("shape, attrs", [
    ((1, 64, 28, 28), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),  # stem
    ((1, 20, 9, 11), dict(kernel_shape=[2, 2], strides=[2, 2])),  # odd sizes, partial block
    ((1, 16, 7, 7), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),  # stride 1
    ((1, 8, 10, 10), dict(kernel_shape=[3, 2], strides=[2, 3], pads=[0, 1, 1, 0],
                          ceil_mode=1)),  # asymmetric window, pads and ceil_mode
    ((1, 16, 6, 200), dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),  # wide
])
def test_pool_program_matches_the_reference_pool(preset, shape, attrs):
    config = HardwareConfig.preset(preset)
    pool = _pool(shape, **attrs)
    geometry = max_pool_geometry(pool, config)
    assert not isinstance(geometry, str), geometry
    program = pool_program(config, geometry)
    check_stream(program.instructions, config, dram_bytes=program.dram.size)
    x = np.random.default_rng(sum(shape)).integers(-128, 128, shape).astype(np.int8)
    dram = program.dram.copy()
    program.write("X", to_blocked(x, config), dram)
    run_stream(program.instructions, config, dram)
    want = _reference(x, attrs)
    got = from_blocked(read_tensor(config, program.tensors["Y"], dram), want.shape, config)
    np.testing.assert_array_equal(got, want)


def test_chunks_split_a_row_that_does_not_fit():
    """A row of windows wider than half the input buffer is pooled in parts of a row."""
    config = HardwareConfig.preset("1x8x8")
    pool = _pool((1, 8, 5, 3000), kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    geometry = max_pool_geometry(pool, config)
    rows, cols = chunk_shape(config, geometry)
    assert rows == 1 and cols < geometry.out_width
    program = pool_program(config, geometry)
    x = np.random.default_rng(3).integers(-128, 128, (1, 8, 5, 3000)).astype(np.int8)
    dram = program.dram.copy()
    program.write("X", to_blocked(x, config), dram)
    run_stream(program.instructions, config, dram)
    want = _reference(x, dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
    got = from_blocked(read_tensor(config, program.tensors["Y"], dram), want.shape, config)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("pool, reason", [
    (_pool((1, 16, 8, 8), "uint8", kernel_shape=[2, 2]), "uint8"),
    (_pool((1, 16, 8, 8), kernel_shape=[3, 3], dilations=[2, 2]), "dilated"),
    (_pool((1, 16, 8, 8), outputs=2, kernel_shape=[2, 2]), "indices"),
    (_pool((1, 16, 8), kernel_shape=[2]), "1-D"),
    (_pool((1, 16, 8, 8), kernel_shape=[2, 2], pads=[2, 2, 2, 2]), "whole window"),
])
def test_check_refuses_what_the_alu_cannot_pool(pool, reason):
    assert reason in check_max_pool([pool])


def _stem(ceil_mode: int = 0) -> onnx.ModelProto:
    """ResNet's stem at a small size: a 7x7 stride-2 convolution of 3 channels, ReLU,
    MaxPool 3x3 stride 2 pad 1, then a 3x3 convolution and a residual addition."""
    rng = np.random.default_rng(4)

    def weights(name, shape):
        return onnx.numpy_helper.from_array((rng.standard_normal(shape) * 0.3)
                                            .astype(np.float32), name)

    inits = [weights("w1", (16, 3, 7, 7)), weights("b1", (16,)), weights("w2", (16, 16, 3, 3)),
             weights("b2", (16,))]
    nodes = [helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], pads=[3] * 4,
                              strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1] * 4, ceil_mode=ceil_mode),
             helper.make_node("Conv", ["p", "w2", "b2"], ["c2"], pads=[1] * 4),
             helper.make_node("Add", ["c2", "p"], ["sum"]),
             helper.make_node("Relu", ["sum"], ["out"])]
    graph = helper.make_graph(
        nodes, "stem", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                      (1, 3, 32, 32))],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize("activations", ["QInt8", "QUInt8"])
def test_quantized_stem_is_one_accelerator_region(tmp_path, activations):
    """The stem's MaxPool (``DQ -> MaxPool -> Q``, one scale and zero point) becomes an
    int8 pool on the ALU, so the stem convolution, the pool and the block after it
    form one accelerator region; bit-exact against the graph's reference, and within
    the requantizations' rounding of ONNX Runtime run as written (three requantizations
    deep: the pool itself is exact)."""
    pytest.importorskip("onnxruntime.quantization")
    from tests.targets.vta.ort_models import inputs, onnxruntime_session, output_scale, quantize

    model = quantize(_stem(), tmp_path, "QDQ", activations)
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy", strict=True)
    report = compiled.placement_report
    pools = [p for p in report.placements if p.op == "MaxPool"]
    assert [(p.target, p.composite) for p in pools] == [("vta", "max_pool")]
    regions = [n for n in compiled.graph.nodes if n.attrs.get("target") == "vta"]
    assert len(regions) == 1
    assert sorted(c.attrs["composite"] for c in regions[0].body.nodes) == [
        "conv2d_bias_requantize"] * 2 + ["max_pool", "quantized_add"]
    session = onnxruntime_session(model, optimized=False)
    for x in inputs(3, (1, 3, 32, 32)):
        ours = compiled.run([x])[0]
        np.testing.assert_array_equal(ours, evaluate(compiled.graph, [x])[0])
        theirs = session.run(None, {"input": x})[0]
        assert np.abs(ours - theirs).max() <= 3 * output_scale(model) + 1e-6


def _qdq_pool(dtype, zero_point, out_shape, outputs=("out",), **attrs) -> onnx.ModelProto:
    """``Q -> DQ -> MaxPool -> Q -> DQ`` of a (1, 16, 16, 16) input, one scale and zero
    point throughout, as ORT's quantizer writes a pool; ``outputs`` may add the float
    pool's result "p"."""
    quantization = [onnx.numpy_helper.from_array(np.array(0.05, np.float32), "scale"),
                    helper.make_tensor("zero", dtype, (), [zero_point])]
    nodes = [helper.make_node("QuantizeLinear", ["input", "scale", "zero"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["dq"]),
             helper.make_node("MaxPool", ["dq"], ["p"], **attrs),
             helper.make_node("QuantizeLinear", ["p", "scale", "zero"], ["pq"]),
             helper.make_node("DequantizeLinear", ["pq", "scale", "zero"], ["out"])]
    graph = helper.make_graph(
        nodes, "pool", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                      (1, 16, 16, 16))],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, out_shape) for name in outputs],
        quantization)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _agrees_with_onnxruntime(model, compiled, seed: int) -> None:
    from tests.targets.vta.ort_models import onnxruntime_session

    session = onnxruntime_session(model, optimized=False)
    x = np.random.default_rng(seed).standard_normal((1, 16, 16, 16)).astype(np.float32) * 4
    for ours, theirs in zip(compiled.run([x]), session.run(None, {"input": x}), strict=True):
        np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("dtype, zero_point", [(TensorProto.INT8, -7),
                                               (TensorProto.UINT8, 120)])
@pytest.mark.parametrize("ceil_mode", [0, 1])
@pytest.mark.parametrize("float_output", [False, True])
def test_integer_pool_equals_the_quantized_float_pool(dtype, zero_point, ceil_mode,
                                                      float_output):
    """``realize_qdq``'s integer MaxPool, run on the ALU, gives exactly what ``DQ ->
    MaxPool -> Q`` (one scale and zero point, as ORT's quantizer writes it) gives in
    ONNX Runtime. ``float_output``: the float pool's result is a graph output too, so
    it stays (with its DequantizeLinear) beside the integer one."""
    model = _qdq_pool(dtype, zero_point, (1, 16, 8, 8 + ceil_mode),
                      ("out", "p") if float_output else ("out",), kernel_shape=[3, 3],
                      strides=[2, 2], pads=[1] * 4, ceil_mode=ceil_mode)
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy")
    placed = {p.op: p.target for p in compiled.placement_report.placements}
    # (uint8 too: ``uint8_to_int8`` shifts the pool's input and output by -128)
    assert placed["MaxPool"] == "vta", compiled.placement_report.format()
    _agrees_with_onnxruntime(model, compiled, ceil_mode)


def test_a_refused_integer_pool_runs_on_the_cpu():
    """A dilated pool stays on the CPU, named in the report, and is still exact."""
    model = _qdq_pool(TensorProto.INT8, -7, (1, 16, 12, 12), kernel_shape=[3, 3],
                      dilations=[2, 2])
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy")
    (pool,) = [p for p in compiled.placement_report.placements if p.op == "MaxPool"]
    assert pool.target == "llvm" and "dilated pooling" in pool.reason
    _agrees_with_onnxruntime(model, compiled, 0)
