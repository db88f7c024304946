"""benchmarks/zoo.py without torch: matching heterocc's functions to ONNX Runtime's
kernels by op, both profiles of a small model, and the skip when torch is missing."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from onnx import helper

import heterocc
from tests.conftest import make_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import zoo  # noqa: E402  (benchmarks/, put on the path above)


def test_ops_of_both_engines_compare_by_base_op():
    assert [zoo.base_op(op) for op in ("ConvNCHWc", "FusedConv", "QLinearConv",
                                       "MatMulInteger", "QLinearMatMul", "Conv", "NhwcMaxPool",
                                       "GlobalAveragePool", "QGemm", "MatMulIntegerToFloat",
                                       "QuantizeLinear", "Gemm", "ReorderInput",
                                       "ReorderOutput")] == \
        ["Conv", "Conv", "Conv", "MatMul", "MatMul", "Conv", "MaxPool", "AveragePool", "MatMul",
         "MatMul", "QuantizeLinear", "MatMul", "LayoutTransform", "LayoutTransform"]
    assert zoo.anchor_op("LayoutTransform+ConvNCHWc+Relu") == "Conv"
    assert zoo.anchor_op("DequantizeLinear+MatMul+Add") == "MatMul"
    assert zoo.anchor_op("Relu+MaxPool") == "MaxPool"
    assert zoo.anchor_op("Add+Relu") == "Add"
    assert zoo.anchor_op("Transpose+MatMul x2+Add") == "MatMul"  # a repeated op's count
    # a quantized function's (de)quantizations are its edges, not what it computes
    assert zoo.anchor_op("DequantizeLinear+Concat+Mul+Add+Relu+QuantizeLinear") == "Concat"
    assert zoo.anchor_op("DequantizeLinear+QuantizeLinear") == "DequantizeLinear"


def test_the_worst_op_is_the_one_furthest_over_onnxruntimes_time():
    assert zoo.worst_op({"Conv": 5.0, "MaxPool": 1.0}, {"Conv": 4.5, "MaxPool": 0.2}) == \
        "MaxPool 1.00 vs 0.20"
    assert zoo.worst_op({"Slice": 0.4}, {"Conv": 1.0}) == "Slice 0.40 vs 0.00"
    assert zoo.worst_op({"Conv": 1.0, "Reshape": 0.0}, {"Conv": 2.0, "Reshape": 0.0}) == \
        "none: every op within ORT's time"
    # over ORT's time by less than the two decimals print: "Reshape 0.00 vs 0.00" said nothing
    assert zoo.worst_op({"Conv": 1.0, "Reshape": 0.004}, {"Conv": 2.0, "Reshape": 0.001}) == \
        "none: every op within ORT's time"


def test_a_batchnorm_that_onnxruntime_runs_as_a_convolution_counts_as_batchnorm():
    name = "/features/denseblock1/denselayer1/norm1/BatchNormalization_output_0_bn_nchwc"
    assert zoo.ort_kernel_op("Conv", name + "_kernel_time") == "BatchNormalization"
    assert zoo.ort_kernel_op("Conv", "/features/conv0/Conv_output_0_nchwc") == "Conv"
    assert zoo.ort_kernel_op("FusedConv", "/layer1/conv1/Conv") == "Conv"
    assert zoo.ort_kernel_op("Concat", "/features/denseblock1/Concat") == "Concat"


def test_profiles_of_a_small_model(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2],
                              ceil_mode=1)]
    model = make_model(nodes, [("x", "float32", [1, 3, 9, 9])], [("y", "float32", None)],
                       {"w": w})
    path = str(tmp_path / "m.onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    feed = {"x": rng.standard_normal((1, 3, 9, 9)).astype(np.float32)}
    ours, (ops, target, share) = zoo.heterocc_profile(heterocc.compile(path, target="llvm"),
                                                      feed, runs=2)
    theirs = zoo.ort_profile(path, 1, feed, 2, str(tmp_path))
    assert {"Conv", "MaxPool"} <= set(ours) and "Conv" in theirs
    assert all(ms > 0 for ms in [*ours.values(), *theirs.values()])
    assert target == "llvm" and 0 < share <= 1 and ops


def test_a_model_whose_libraries_are_missing_is_skipped(monkeypatch, capsys):
    monkeypatch.setattr(zoo, "_missing", lambda *modules: "torch" if "torch" in modules
                        else None)
    monkeypatch.setenv("HETEROCC_NUM_THREADS", "2")  # main sets it where it is unset
    monkeypatch.setattr(sys, "argv", ["zoo.py", "--models", "squeezenet1_1", "bert_layer"])
    assert zoo.main() == 0
    out = capsys.readouterr().out
    assert out.count("skipped: torch is not installed") == 2 and "2 skipped, 0 failed" in out


def test_a_quantized_model_compares_bit_for_bit_with_the_integer_reference(tmp_path):
    """``--reference``: an int8 model's output against heterocc's NumPy evaluation of the
    compiled graph: equal, and a changed output is reported with its difference."""
    from onnx import TensorProto

    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["dq"]),
             helper.make_node("DequantizeLinear", ["w", "ws"], ["dw"]),
             helper.make_node("Conv", ["dq", "dw"], ["c"]),
             helper.make_node("QuantizeLinear", ["c", "s2", "z"], ["y"])]
    model = make_model(nodes, [("x", "float32", [1, 3, 8, 8])], [("y", "uint8", None)],
                       {"w": w, "ws": np.float32(0.02), "s": np.float32(0.05),
                        "z": np.uint8(128), "s2": np.float32(0.1)})
    assert model.graph.output[0].type.tensor_type.elem_type == TensorProto.UINT8
    compiled = heterocc.compile(model, target="llvm")
    feed = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    out = compiled.run(feed)[0]
    assert zoo.against_reference(compiled, feed, out) == "bit-exact"
    changed = out.copy()
    changed.flat[0] ^= 1
    assert zoo.against_reference(compiled, feed, changed) == "max|diff| 1"
