"""Models as ONNX Runtime's quantizer writes them, on the accelerator: int8 or uint8
activations with zero points, per-channel or per-tensor weights, QDQ or QOperator.

Each model is built here with onnx.helper and quantized here by
``onnxruntime.quantization.quantize_static``; the checks are the share of
multiply-accumulates the accelerator takes, bit-exactness against the reference
integer semantics of the partitioned graph, and agreement with ONNX Runtime.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

import heterocc
from heterocc.runtime.interpreter import evaluate

pytest.importorskip("onnxruntime.quantization")

from tests.targets.vta.ort_models import (  # noqa: E402
    inputs,
    onnxruntime_session,
    output_scale,
    quantize,
    single_conv,
    small_cnn,
)

QDQ_CONFIGS = [("QDQ", "QInt8", True), ("QDQ", "QUInt8", True), ("QDQ", "QInt8", False),
               ("QDQ", "QUInt8", False)]


@pytest.mark.parametrize("fmt, activations, per_channel", QDQ_CONFIGS)
def test_quantized_cnn_runs_on_the_accelerator_bit_exactly(tmp_path, fmt, activations,
                                                            per_channel):
    model = quantize(small_cnn(), tmp_path, fmt, activations, per_channel=per_channel)
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy")
    report = compiled.placement_report
    assert report.mac_share("vta") >= 0.95, report.format()
    session = onnxruntime_session(model, optimized=False)
    scale = output_scale(model)
    for x in inputs(4):
        ours = compiled.run([x])[0]
        # the reference's integer semantics of the same partitioned graph, in NumPy
        (expected,) = evaluate(compiled.graph, [x])
        np.testing.assert_array_equal(ours, expected)
        theirs = session.run(None, {"input": x})[0]
        # five requantizations deep: each may round differently by one step (see
        # docs/vta.md), which the following layers carry on
        assert np.abs(ours - theirs).max() <= 4 * scale + 1e-6
        assert ours.argmax() == theirs.argmax()


@pytest.mark.parametrize("activations, per_channel", [("QUInt8", True), ("QInt8", False)])
def test_qoperator_model_runs_on_the_accelerator(tmp_path, activations, per_channel):
    """QLinearConv, QLinearAdd, QLinearGlobalAveragePool and QGemm, as ORT writes them;
    7-bit weights (``reduce_range``) keep ORT's own int8 kernels from saturating."""
    model = quantize(small_cnn(), tmp_path, "QOperator", activations, per_channel=per_channel,
                     reduce_range=True)
    assert {"QLinearConv", "QLinearAdd", "QGemm"} <= {n.op_type for n in model.graph.node}
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy")
    report = compiled.placement_report
    assert report.mac_share("vta") >= 0.95, report.format()
    session = onnxruntime_session(model)
    scale = output_scale(model)
    for x in inputs(4):
        ours = compiled.run([x])[0]
        np.testing.assert_array_equal(ours, evaluate(compiled.graph, [x])[0])
        theirs = session.run(None, {"input": x})[0]
        assert np.abs(ours - theirs).max() <= 4 * scale + 1e-6
        assert ours.argmax() == theirs.argmax()


def _steps_apart(a: np.ndarray, b: np.ndarray, scale: float) -> int:
    return int(np.abs(np.round((a - b) / scale)).max())


@pytest.mark.parametrize("activations", ["QInt8", "QUInt8"])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("per_channel", [True, False])
def test_one_requantization_is_within_one_step_ofonnxruntime_session(tmp_path, activations, stride,
                                                               per_channel):
    model = quantize(single_conv(stride, stride), tmp_path, "QDQ", activations,
                     per_channel=per_channel)
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy", strict=True)
    assert compiled.placement_report.mac_share("vta") == 1.0
    session = onnxruntime_session(model, optimized=False)
    scale = output_scale(model)
    for x in inputs(3):
        assert _steps_apart(compiled.run([x])[0], session.run(None, {"input": x})[0],
                            scale) <= 1


@pytest.mark.parametrize("activations", ["QInt8", "QUInt8"])
def test_onnxruntime_int8_kernels_agree_within_one_step_on_7_bit_weights(tmp_path,
                                                                          activations):
    """With ``reduce_range`` (7-bit weights, ORT's advice for CPUs without VNNI), ORT's
    own fused int8 kernels cannot saturate, and agree with the accelerator within one
    rounding step."""
    model = quantize(single_conv(5, 1), tmp_path, "QDQ", activations, reduce_range=True)
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy", strict=True)
    session = onnxruntime_session(model)
    scale = output_scale(model)
    for x in inputs(3):
        assert _steps_apart(compiled.run([x])[0], session.run(None, {"input": x})[0],
                            scale) <= 1


def test_padding_takes_the_input_zero_point(tmp_path):
    """A convolution whose input zero point is far from 0 (uint8 activations of a
    positive input): padded borders must read as real zeros."""
    model = quantize(single_conv(3, 1, kernel=5), tmp_path, "QDQ", "QUInt8")
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy", strict=True)
    x = np.abs(inputs(1)[0]) + 1.0  # all positive: the zero point sits at the range's end
    ours = compiled.run([x])[0]
    theirs = onnxruntime_session(model, optimized=False).run(None, {"input": x})[0]
    scale = output_scale(model)
    border = np.ones(ours.shape, bool)
    border[..., 2:-2, 2:-2] = False
    assert np.abs(ours - theirs)[border].max() <= scale + 1e-6


def test_uint8_weights_with_zero_points_are_recentered_or_refused_by_name(tmp_path):
    """uint8 weights: where ``w - zero_point`` fits int8 the weights are centered at
    compile time and run on the accelerator; elsewhere the report says why not."""
    model = quantize(small_cnn(1), tmp_path, "QDQ", "QUInt8", "QUInt8", per_channel=False)
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy")
    report = compiled.placement_report
    cores = [p for p in report.placements if p.op in ("ConvInteger", "MatMulInteger")]
    on_chip = [p for p in cores if p.target == "vta"]
    refused = [p for p in cores if p.target != "vta"]
    assert on_chip and refused  # this seed's layers have both kinds of zero point
    for p in refused:
        assert "centered values span" in p.reason and "beyond int8" in p.reason, p.reason
    x = inputs(1)[0]
    (expected,) = evaluate(compiled.graph, [x])
    np.testing.assert_array_equal(compiled.run([x])[0], expected)


def test_partition_json_counts_macs_per_target(tmp_path, capsys):
    from heterocc.cli import main

    model = quantize(small_cnn(), tmp_path, "QDQ", "QInt8")
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    assert main(["partition", str(path), "--target", "vta,llvm", "--json",
                 "--placement", "greedy"]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = report["nodes"]
    assert {"node", "op", "target", "macs", "reason"} <= set(rows[0])
    convs = [r for r in rows if r["op"] in ("ConvInteger", "MatMulInteger")]
    # five convolutions and dense layers, and the global average pool as a depthwise
    # all-ones convolution (integer_average_pools)
    assert len(convs) == 6 and all(r["target"] == "vta" and r["macs"] > 0 for r in convs)
    expected = 16 * 16 * 16 * 3 * 9 + 8 * 8 * 32 * 16 * 9 + 8 * 8 * 32 * 32 * (9 + 1) + 320 \
        + 32 * 8 * 8
    assert report["macs_by_target"]["vta"] == expected == report["total_macs"]
    # what the accelerator reports of each function, on the row of its first node
    for row in convs:
        assert row["cycles"] > 0 and 0 < row["utilization"] <= 1
        assert row["dram_read_bytes"] > 0 and row["dram_write_bytes"] > 0
        if row["op"] == "ConvInteger" and row["in_channels"] >= 16:  # direct: no im2col
            assert row["host_bytes"] <= 1.25 * (row["input_bytes"] + row["output_bytes"])
    assert 0 < report["utilization"] <= 1
    # the residual addition runs on the ALU, in the region of the convolutions around it
    adds = [r for r in rows if r["composite"] == "quantized_add"]
    assert adds and all(r["target"] == "vta" for r in adds)
    assert {r["region"] for r in adds + convs[:-1]} == {adds[0]["region"]}
    functions = [r for r in rows if "host_bytes" in r]
    assert report["host_bytes"] == sum(r["host_bytes"] for r in functions)


def test_folded_relus_still_show_where_they_ran(tmp_path):
    # symmetric activations keep the ReLUs in the QDQ graph; the integer rewrite folds
    # each into the clamp of the requantization before it
    model = quantize(small_cnn(), tmp_path, "QDQ", "QInt8", ActivationSymmetric=True)
    report = heterocc.compile(model, target="vta,llvm", placement="greedy").placement_report
    relus = {p.node: p for p in report.placements if p.op == "Relu"}
    assert {"c1_relu", "c2_relu"} <= set(relus)
    for name in ("c1_relu", "c2_relu"):
        assert relus[name].target == "vta" and "folded into the clamp" in relus[name].reason


def test_text_report_shows_the_mac_share(tmp_path):
    model = quantize(small_cnn(), tmp_path, "QDQ", "QInt8")
    text = heterocc.compile(model, target="vta,llvm", placement="greedy").placement_report.format()
    line = next(x for x in text.splitlines() if x.startswith("MACs per target:"))
    assert "vta: 1.1 M (100.0%)" in line
    assert "MAC-weighted utilization" in text.splitlines()[-1]


@pytest.mark.parametrize("activations", ["QInt8", "QUInt8"])
@pytest.mark.parametrize("relu", [True, False])
def test_quantized_addition_runs_on_the_alu_within_one_step(tmp_path, activations, relu):
    """``Q(DQ(a) + DQ(b))`` (and its Relu) as ORT's quantizer writes it: the integer
    addition (two 31-bit multipliers from accumulator tiles, their products shifted, and
    one shift) runs on the ALU, bit-exact against the graph's reference, and within one
    step of ONNX Runtime run as written (at near-ties only)."""
    from tests.targets.vta.ort_models import quantize_pair, residual_sum

    model = quantize_pair(residual_sum(relu=relu), tmp_path, activations)
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy", strict=True)
    report = compiled.placement_report
    on_chip = [p for p in report.placements if p.composite == "quantized_add"]
    assert {p.op for p in on_chip} >= {"Cast", "Add", "Requantize"}
    # the terms scale by Requantize (product shift) nodes: three Requantize in all
    assert sum(p.op == "Requantize" for p in on_chip) == 3
    assert all(p.target == "vta" for p in on_chip)
    # (ORT's quantizer drops a Relu whose output range starts at 0: the clamp is the
    # output zero point's range; any Relu it keeps folds into the addition's clamp)
    assert all(p.target == "vta" for p in report.placements if p.op == "Relu")
    session = onnxruntime_session(model, optimized=False)
    scale = output_scale(model)
    rng = np.random.default_rng(5)
    steps = []
    for _ in range(3):
        feeds = {"a": rng.standard_normal((1, 32, 8, 8)).astype(np.float32) * 2,
                 "b": rng.standard_normal((1, 32, 8, 8)).astype(np.float32) * 0.7}
        ours = compiled.run([feeds["a"], feeds["b"]])[0]
        np.testing.assert_array_equal(ours, evaluate(compiled.graph, [feeds["a"],
                                                                      feeds["b"]])[0])
        steps.append(_steps_apart(ours, session.run(None, feeds)[0], scale))
    assert max(steps) <= 1


def test_a_region_hands_tensors_over_in_the_blocked_layout(tmp_path):
    """The small CNN is one region; inside it the direct convolutions and the addition
    pass their tensors as blocked tiles, the pool's flatten hands the dense layer its
    matrix (no host layout conversion), and the region's results equal its reference."""
    from heterocc.targets.vta import VtaTarget

    model = quantize(small_cnn(), tmp_path, "QDQ", "QInt8")
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy")
    regions = [n for n in compiled.graph.nodes if n.attrs.get("target") == "vta"]
    region = max(regions, key=lambda n: len(n.body.nodes))
    # four convolutions, the global average pool (a depthwise all-ones convolution), the
    # addition, the flatten and the dense layer
    assert sorted(c.attrs["composite"] for c in region.body.nodes) == [
        "conv2d_bias_requantize"] * 5 + ["dense_bias_requantize", "flatten", "quantized_add"]
    record: dict = {}
    evaluate(compiled.graph, [inputs(1)[0]], record=record)
    args = [record[v] for v in region.inputs]
    run = VtaTarget().build(region)
    got = run(args)
    for ours, want in zip(got, evaluate(region.body, args)):
        np.testing.assert_array_equal(ours, want)
    # c2 -> c3, c2 -> c4, c3 -> sum, c4 -> sum, sum -> pool, pool -> flatten stay
    # blocked, flatten -> dense is the dense layer's matrix; the region's input and the
    # stem's output (an im2col GEMM's matrix) are converted
    assert run.region.handed_over == 7 and run.region.converted == 2
