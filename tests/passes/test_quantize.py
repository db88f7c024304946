import numpy as np
import pytest

from heterocc.frontend import from_onnx
from heterocc.ir.graph import Graph
from heterocc.models import tiny_cnn
from heterocc.ops.qnn import fixed_point_scale, requantize_int
from heterocc.passes import PassManager
from heterocc.runtime.interpreter import evaluate


@pytest.mark.parametrize("scale", [1e-4, 0.0123, 0.5, 0.99, 3.7])
def test_fixed_point_scale_is_accurate_and_cannot_overflow(scale):
    bound = 40000
    m, s = fixed_point_scale(scale, bound)
    assert 1 <= m < 2 ** 15 and bound * m + (1 << max(s - 1, 0)) < 2 ** 31
    assert abs(m / 2 ** s - scale) <= scale * 2 ** -7


def test_requantize_rounds_half_up_and_clamps():
    acc = np.array([-300, -3, -2, -1, 0, 1, 2, 3, 300], np.int32)
    # multiplier 1, shift 1: x / 2 rounded half up; then + zero point 1; clamp [-5, 100]
    out = requantize_int(acc, 1, 1, 1, -5, 100)
    assert out.tolist() == [-5, 0, 0, 1, 1, 2, 2, 3, 100]


def _with_outputs(graph: Graph, names):
    values = {v.name: v for n in graph.nodes for v in n.outputs}
    return Graph(graph.inputs, [values[n] for n in names], graph.nodes, graph.name)


def test_qdq_chains_become_integer_ops(qdq_tiny_cnn):
    qdq_model = qdq_tiny_cnn
    graph = from_onnx(qdq_model)
    realized = PassManager(["realize_qdq", "fold_constants", "dce"], check=True).run(graph)
    counts = realized.op_counts()
    assert counts["ConvInteger"] == 3 and counts["MatMulInteger"] == 1
    # four layers and the residual addition, in integers (the addition's two terms
    # scale by Requantize nodes with a product shift, its sum by one more)
    assert counts["Requantize"] == 7 and "Conv" not in counts and "Gemm" not in counts
    assert "Cast" in counts and "DequantizeLinear" in counts
    # every quantized Relu folded into the clamp of the Requantize before it, the one
    # after the residual addition too
    assert counts.get("Relu", 0) == 0
    # the outputs no Relu folded into (the second block conv and the logits): the same
    # values as the float chains'
    late = [v.name for n in realized.nodes if n.op == "Requantize" and not n.attrs["absorbed"]
            and n.attrs["out_dtype"] != "int32" for v in n.outputs]
    assert len(late) == 2
    rng = np.random.default_rng(7)
    differ = total = 0
    for _ in range(3):
        x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
        want = evaluate(_with_outputs(graph, late), [x])
        got = evaluate(_with_outputs(realized, late), [x])
        for a, b in zip(want, got):
            assert a.dtype == b.dtype == np.int8
            # fixed-point requantization is within 2 LSB of float requantization
            assert np.abs(a.astype(int) - b.astype(int)).max() <= 2
            differ += int(np.sum(a != b))
            total += a.size
    assert differ / total < 0.1


def test_realized_model_matches_onnxruntime_top1(qdq_tiny_cnn):
    qdq_model = qdq_tiny_cnn
    import onnxruntime as ort

    graph = from_onnx(qdq_model)
    realized = PassManager(["realize_qdq", "fold_constants", "dce"]).run(graph)
    sess = ort.InferenceSession(qdq_model.SerializeToString(),
                                providers=["CPUExecutionProvider"])
    agree = 0
    for seed in range(10):
        x = np.random.default_rng(100 + seed).standard_normal((1, 3, 32, 32)).astype(np.float32)
        ref = sess.run(None, {"input": x})[0]
        ours = evaluate(realized, [x])[0]
        assert np.abs(ref - ours).max() < 0.05
        agree += int(ref.argmax() == ours.argmax())
    assert agree >= 9


def test_built_in_post_training_quantization_keeps_top1():
    import heterocc

    model = tiny_cnn()
    rng = np.random.default_rng(0)
    calibration = [{"input": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}
                   for _ in range(4)]
    quantized = heterocc.compile(model, calibration=calibration)
    counts = quantized.graph.op_counts()
    # 3 convolutions and the classifier's MatMulInteger, which the llvm target computes
    # as a 1x1 ConvInteger (integer_products_as_convolutions)
    assert counts["ConvInteger"] == 4 and "MatMulInteger" not in counts
    assert "quantize" in [r.name for r in quantized.pass_records]
    reference = heterocc.compile(model)
    agree = 0
    for seed in range(10):
        x = np.random.default_rng(50 + seed).standard_normal((1, 3, 32, 32)).astype(np.float32)
        a, b = reference.run([x])[0], quantized.run([x])[0]
        assert np.abs(a - b).max() < 0.1
        agree += int(a.argmax() == b.argmax())
    assert agree >= 9


def test_requantize_clamps_accumulators_before_multiplying():
    acc = np.array([-10 ** 9, -1000, 1000, 10 ** 9], np.int32)
    # without the limit, 1e9 * 4096 would wrap int32; with it the output saturates
    out = requantize_int(acc, 4096, 16, 0, -128, 127, acc_limit=5000)
    assert out.tolist() == [-128, -62, 63, 127]


def test_quantized_model_written_as_qdq_onnx_runs_in_onnxruntime_like_ours():
    """quantize_model writes what compile(calibration=...) compiles: ONNX Runtime runs
    the written QDQ model, and its top-1 agrees with heterocc's int8 run."""
    import onnx
    import onnxruntime as ort

    import heterocc
    from heterocc.quantization import quantize_model

    model = tiny_cnn()
    rng = np.random.default_rng(0)
    calibration = [{"input": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}
                   for _ in range(4)]
    written = quantize_model(model, calibration)
    onnx.checker.check_model(written)
    ops = [n.op_type for n in written.graph.node]
    assert ops.count("QuantizeLinear") >= 4 and ops.count("DequantizeLinear") >= 8
    assert "BatchNormalization" not in ops  # folded before quantizing, as compile does
    session = ort.InferenceSession(written.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    ours = heterocc.compile(model, calibration=calibration)
    reloaded = heterocc.compile(written)  # and heterocc reads back what it wrote
    agree = 0
    for seed in range(10):
        x = np.random.default_rng(50 + seed).standard_normal((1, 3, 32, 32)).astype(np.float32)
        theirs = session.run(None, {"input": x})[0]
        mine = ours.run([x])[0]
        assert np.abs(theirs - mine).max() < 0.1
        np.testing.assert_allclose(reloaded.run([x])[0], theirs, atol=1e-5)
        agree += int(theirs.argmax() == mine.argmax())
    assert agree >= 9


def test_graph_to_onnx_names_every_op_that_is_not_onnx():
    from heterocc.errors import CompileError
    from heterocc.frontend.to_onnx import graph_to_onnx

    model = tiny_cnn()
    integer = PassManager(["infer_types"]).run(from_onnx(model))
    assert graph_to_onnx(integer).graph.node  # a float graph of ONNX ops round-trips
    fused = heterocc_compile_graph(model)
    with pytest.raises(CompileError, match=r"not ONNX ops: .*\(function\)"):
        graph_to_onnx(fused)


def heterocc_compile_graph(model):
    import heterocc

    return heterocc.compile(model, target="reference").graph


def test_samples_load_from_a_stacked_npz_or_a_directory(tmp_path):
    from heterocc.errors import InputError
    from heterocc.runtime.inputs import load_samples

    x = np.arange(24, dtype=np.float32).reshape(3, 2, 4)
    np.savez(tmp_path / "stacked.npz", input=x)
    samples = load_samples(str(tmp_path / "stacked.npz"))
    assert len(samples) == 3 and np.array_equal(samples[1]["input"], x[1])
    (tmp_path / "dir").mkdir()
    for i in range(2):
        np.savez(tmp_path / "dir" / f"s{i}.npz", input=x[i])
    assert [s["input"].shape for s in load_samples(str(tmp_path / "dir"))] == [(2, 4)] * 2
    np.savez(tmp_path / "ragged.npz", a=x, b=x[:2])
    with pytest.raises(InputError, match="same number of samples"):
        load_samples(str(tmp_path / "ragged.npz"))


def test_a_matmul_bias_add_is_quantized_with_its_layer_and_offloaded():
    """MatMul + Add(constant) (a Linear layer as torch exports it) quantizes as one layer
    with an int32 bias, so a target that takes a bias input takes the Add too."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    import heterocc

    rng = np.random.default_rng(4)
    inits = {"w1": rng.standard_normal((32, 48)).astype(np.float32) * 0.2,
             "b1": rng.standard_normal(48).astype(np.float32),
             "w2": rng.standard_normal((48, 16)).astype(np.float32) * 0.2,
             "b2": rng.standard_normal(16).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"], name="fc1"),
             helper.make_node("Add", ["m1", "b1"], ["a1"], name="fc1_bias"),
             helper.make_node("Relu", ["a1"], ["r1"], name="relu"),
             helper.make_node("MatMul", ["r1", "w2"], ["m2"], name="fc2"),
             helper.make_node("Add", ["m2", "b2"], ["y"], name="fc2_bias")]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    samples = [{"x": rng.standard_normal((4, 32)).astype(np.float32)} for _ in range(4)]
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy", calibration=samples)
    placed = {p.node: p.target for p in compiled.placement_report.placements}
    assert placed["fc1_bias_add"] == placed["fc2_bias_add"] == "vta", placed
    assert all(target == "vta" for node, target in placed.items()
               if node.startswith(("fc", "relu"))), placed
    x = rng.standard_normal((4, 32)).astype(np.float32)
    reference = heterocc.compile(model, target="llvm").run([x])[0]
    got = compiled.run([x])[0]
    assert np.abs(got - reference).max() < 0.1 * np.abs(reference).max()


def test_a_conv_whose_accumulators_leave_no_multiplier_keeps_its_float_chain():
    """A bias of 2**30 accumulator steps (tiny weight scales, as random-weight exports
    produce) does not fail the compile: where no int32 requantization multiplier fits,
    the chain stays in QDQ form."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    x_scale, w_scale = 0.05, 1e-6
    inits = [
        numpy_helper.from_array(np.array(x_scale, np.float32), "xs"),
        numpy_helper.from_array(np.array(0, np.int8), "xz"),
        numpy_helper.from_array(rng.integers(-127, 128, (4, 3, 1, 1)).astype(np.int8), "wq"),
        numpy_helper.from_array(np.array([w_scale] * 4, np.float32), "ws"),
        numpy_helper.from_array(np.array([1 << 30, 5, -5, 0], np.int32), "bq"),
        numpy_helper.from_array(np.array([x_scale * w_scale] * 4, np.float32), "bs"),
        numpy_helper.from_array(np.array(0.5, np.float32), "ys"),
        numpy_helper.from_array(np.array(0, np.int8), "yz")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws"], ["wd"], axis=0),
             helper.make_node("DequantizeLinear", ["bq", "bs"], ["bd"], axis=0),
             helper.make_node("Conv", ["xd", "wd", "bd"], ["c"]),
             helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    graph = helper.make_graph(
        nodes, "big_bias", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    before = PassManager(["infer_types"]).run(from_onnx(model))
    after = PassManager(["realize_qdq", "infer_types"]).run(before)
    x = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)
    # realized (as an integer chain) or kept (in QDQ form), within one output step
    assert np.abs(evaluate(after, [x])[0] - evaluate(before, [x])[0]).max() <= 0.5 + 1e-6
