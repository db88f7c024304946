"""benchmarks/zoo.py without torch: matching heterocc's functions to ONNX Runtime's
kernels by op, both profiles of a small model, and the skip when torch is missing."""

from __future__ import annotations

import sys
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import onnx
import pytest
from onnx import helper

import heterocc
from heterocc.targets.llvm.cpu import parse_cpu
from heterocc.targets.llvm.module import machines
from tests.conftest import make_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import int8_bound  # noqa: E402  (benchmarks/, put on the path above)
import int8_tile_loads  # noqa: E402
import zoo  # noqa: E402
import zoo_functions  # noqa: E402


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


def test_a_quantized_product_counts_as_a_matmul_not_a_convolution():
    """A quantized MatMul of 13 rows, which llvm computes as a 1x1 ConvInteger of
    one-pixel images, is timed under ``MatMul`` (ONNX Runtime's QGemm's op), not
    ``Conv``."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["dq"]),
             helper.make_node("DequantizeLinear", ["w", "ws"], ["dw"]),
             helper.make_node("MatMul", ["dq", "dw"], ["m"]),
             helper.make_node("QuantizeLinear", ["m", "s2", "z"], ["y"])]
    model = make_model(nodes, [("x", "float32", [13, 24])], [("y", "uint8", None)],
                       {"w": rng.integers(-127, 128, (24, 32)).astype(np.int8),
                        "ws": np.float32(0.02), "s": np.float32(0.05), "z": np.uint8(128),
                        "s2": np.float32(0.1)})
    compiled = heterocc.compile(model, target="llvm")
    assert len(zoo.product_functions(compiled)) == 1
    ours, _ = zoo.heterocc_profile(compiled, {"x": rng.standard_normal((13, 24)).astype(
        np.float32)}, runs=2)
    assert "MatMul" in ours and "Conv" not in ours


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


def test_the_int8_bound_counts_the_dot_products_multiply_accumulates():
    rng = np.random.default_rng(0)

    def weight(name, *shape):
        return onnx.numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),  # 3 -> 8, 3x3
        helper.make_node("Conv", ["c1", "w2"], ["c2"], group=8, pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c2", "w3"], ["c3"], group=2),  # 4 per group -> 6, 1x1
        helper.make_node("GlobalAveragePool", ["c3"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["flat"]),
        helper.make_node("Gemm", ["flat", "w4"], ["y"], transB=1),  # 6 -> 10
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 5, 5])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 10])],
        [weight("w1", 8, 3, 3, 3), weight("w2", 8, 1, 3, 3), weight("w3", 6, 4, 1, 1),
         weight("w4", 10, 6)])
    path = Path(__file__).resolve().parent / ".int8_bound_model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    try:
        dense, depthwise, tiles = int8_bound.model_macs(str(path))
        # a CPU with tiles: none of these convolutions fills them
        assert int8_bound.model_macs(str(path), parse_cpu("llvm -mcpu=sapphirerapids")) \
            == (dense, depthwise, 0)
    finally:
        path.unlink()
    # the stem's 3 channels cost a group of 4; the grouped 1x1 its 4 per group; the
    # product's 6 inputs two groups of 4
    assert dense == 8 * 25 * 9 * 4 + 6 * 25 * 4 + 10 * 8
    assert depthwise == 8 * 25 * 9
    assert tiles == 0


def test_the_int8_bound_counts_the_tiles_multiply_accumulates_apart():
    """On a CPU with matrix tiles, a convolution they take (96 -> 32 3x3) counts its
    channels rounded up to a block of 64 at the tiles' peak; the product stays on the
    dot product's."""
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Flatten", ["c1"], ["flat"]),
             helper.make_node("Gemm", ["flat", "w2"], ["y"], transB=1)]
    weights = [onnx.numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32),
                                            name)
               for name, shape in (("w1", (32, 96, 3, 3)), ("w2", (10, 32 * 16)))]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT,
                                                   [1, 96, 4, 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 10])], weights)
    path = Path(__file__).resolve().parent / ".int8_bound_tiles.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    try:
        on_tiles = int8_bound.model_macs(str(path), parse_cpu("llvm -mcpu=sapphirerapids"))
        on_vnni = int8_bound.model_macs(str(path), parse_cpu("llvm -mcpu=znver4"))
    finally:
        path.unlink()
    assert on_tiles == (10 * 512, 0, 32 * 16 * 9 * 128)
    assert on_vnni == (32 * 16 * 9 * 96 + 10 * 512, 0, 0)


def test_the_int8_bound_tile_loop_is_four_tile_products_an_iteration():
    module = llvm.parse_assembly(int8_bound.tile_peak_ir())
    module.verify()
    description = parse_cpu("llvm -mcpu=sapphirerapids")
    assembly = machines(description).export_machine.emit_assembly(module)
    assert assembly.count("tdpbsud") == 4 and "ldtilecfg" in assembly
    assert "tilerelease" in assembly


def test_the_int8_bound_loop_is_the_targets_dot_product_on_each_cpu():
    for spec, instruction in (("llvm -mcpu=znver4", "vpdpbusd"),
                              ("llvm -mcpu=haswell", "vpmaddubsw"),
                              ("llvm -mtriple=aarch64-linux-gnu -mattr=+dotprod", "sdot")):
        description = parse_cpu(spec)
        lanes = description.vector_bytes // 4
        module = llvm.parse_assembly(int8_bound.dot_peak_ir(description, lanes, 8))
        module.verify()
        assembly = machines(description).export_machine.emit_assembly(module)
        # one per chain and iteration (none hoisted out of the loop or shared)
        assert assembly.count(instruction) >= 8, spec


def test_the_tile_loop_loads_each_weight_once_for_its_vectors():
    """benchmarks/int8_tile_loads.py's loop is a register tile as the kernels emit it:
    a one-vector tile's broadcast weights sit in its dot products' memory operands, a
    tile of three vectors broadcasts each weight into a register once for all three;
    every dot product stays in the loop."""
    description = parse_cpu("llvm -mcpu=znver5")

    def assembly(vectors, channels):
        ir_text = int8_tile_loads.tile_ir(description, vectors, channels, "tile")
        module = llvm.parse_assembly(ir_text)
        module.verify()
        return machines(description).export_machine.emit_assembly(module)

    one = assembly(1, 16)
    assert one.count("vpdpbusd") >= 16 and one.count("{1to16}") >= 16
    three = assembly(3, 8)
    assert three.count("vpdpbusd") >= 24 and three.count("vpbroadcastd") == 8


def test_an_unknown_zoo_name_is_an_error_not_another_model(tmp_path):
    # a mistyped name once benchmarked GPT-2 under it
    with pytest.raises(ValueError, match="'resnet_18'.*resnet18"):
        zoo.export("resnet_18", str(tmp_path / "m.onnx"))


def test_the_scaling_report_ranks_functions_by_their_loss_against_a_perfect_speedup(capsys):
    # one thread's file against two threads' run: a loss is the time here minus half there
    one = {"threads": 1, "load": 0.5,
           "heterocc": [{"ms": 0.2, "node": "a", "ops": "Conv"},
                        {"ms": 0.1, "node": "b", "ops": "Conv"}],
           "onnxruntime": [{"ms": 0.4, "node": "x", "op": "QLinearConv"}]}
    zoo_functions.print_scaling(one, 2, [(0.1, "a", "Conv"), (0.08, "b", "Conv")],
                                [(0.2, "x", "QLinearConv"), (0.01, "new", "Add")])
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("heterocc: 0.300 -> 0.180 ms, speedup 1.67, loss 30 us")
    assert lines[2].split()[:2] == ["30.0", "us"] and " b " in lines[2]  # 0.08 - 0.1 / 2
    assert lines[3].split()[:2] == ["0.0", "us"] and " a " in lines[3]  # perfect
    # ONNX Runtime's kernel missing from the other file is left out, and said so
    assert lines[4].startswith("onnxruntime: 0.400 -> 0.200 ms, speedup 2.00, loss 0 us "
                               "(1 of 2 functions matched)")


def test_a_zoo_row_says_how_far_apart_the_cpus_were_around_its_timing():
    row = zoo.Row("resnet18", "int8", ms=(1.0, 0.9), ort_ms=(2.0, 1.8), apart=(100, 410))
    assert "cores 100 / 410 ns apart before / after" in row.line()
    assert "ns apart" not in zoo.Row("resnet18", "int8", ms=(1.0, 0.9),
                                     ort_ms=(2.0, 1.8)).line()
    assert "cores ? / 410 ns apart" in zoo.Row("m", "int8", ms=(1.0, 1.0), ort_ms=(1.0, 1.0),
                                               apart=(None, 410)).line()


def test_the_core_round_trip_is_a_cache_lines_trip_between_the_first_two_cpus():
    import os

    from machine import core_round_trip_ns  # benchmarks/, beside zoo

    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    trip = core_round_trip_ns(2000)
    if len(cpus) < 2:
        assert trip is None  # one CPU: no distance to tell
    else:
        assert isinstance(trip, int) and 0 < trip < 1_000_000


def test_between_kernels_flushes_three_times_the_largest_cache(tmp_path, monkeypatch):
    """``between_kernels.py --flush`` sweeps a buffer three times the largest cache Linux
    describes (sizes as sysfs writes them), 64 MB where none is described, or the size
    asked for."""
    import between_kernels  # benchmarks/, beside zoo

    files = []
    for index, size in enumerate(("48K", "1024K", "32768K", "2M")):
        path = tmp_path / f"index{index}"
        path.write_text(size + "\n")
        files.append(str(path))
    monkeypatch.setattr(between_kernels.glob, "glob", lambda pattern: files)
    assert between_kernels.flush_bytes(0) == 3 * 32 << 20
    assert between_kernels.flush_bytes(5) == 5 << 20
    monkeypatch.setattr(between_kernels.glob, "glob", lambda pattern: [])
    assert between_kernels.flush_bytes(0) == 64 << 20
