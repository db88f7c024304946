"""The expand_qoperator pass (core/passes/qoperator.py): ONNX Runtime's QOperator format
rewritten as QDQ, and QOperator models quantized by onnxruntime compiled end to end."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import heterocc
from heterocc.errors import UnsupportedOpError
from heterocc.frontend import from_onnx
from heterocc.ir.graph import Graph, Value
from heterocc.ops import MS_DOMAIN
from heterocc.passes import PassManager
from heterocc.passes.qoperator import expand_qoperator
from heterocc.runtime.interpreter import evaluate

F32 = np.float32


def qop_model(nodes, inputs, output, out_shape, initializers, out_type=TensorProto.UINT8,
              opset=18):
    """A model of QOperator nodes; ``inputs`` are (name, numpy array) graph inputs."""
    graph = helper.make_graph(
        nodes, "qop",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in inputs],
        [helper.make_tensor_value_info(output, out_type, out_shape)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid(MS_DOMAIN, 1)])
    model.ir_version = 9
    return model


def lsb_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a.astype(np.int64) - b.astype(np.int64))


def expand_and_compare(model, feeds, exact=False):
    """Evaluate the imported graph on the references before and after the pass; the
    expanded graph must hold no QOperator op and agree within 1 LSB (or exactly)."""
    graph = from_onnx(model)
    expanded = PassManager(["expand_qoperator", "infer_types"], check=True).run(graph)
    assert not any(n.op.startswith("com.microsoft.") or n.op.startswith("QLinear")
                   for n in expanded.nodes)
    before = evaluate(graph, feeds)[0]
    after = evaluate(expanded, feeds)[0]
    assert before.dtype == after.dtype and before.shape == after.shape
    if before.dtype.kind == "f":
        np.testing.assert_allclose(before, after, rtol=1e-5, atol=1e-5)
    else:
        diff = lsb_difference(before, after)
        assert diff.max() <= (0 if exact else 1)
    return expanded


def ints(rng, shape, dtype):
    info = np.iinfo(dtype)
    return rng.integers(info.min, int(info.max) + 1, shape).astype(dtype)


def params(rng, dtype, prefix, low=0.01, high=0.1):
    return {f"{prefix}_s": F32(rng.uniform(low, high)), f"{prefix}_z": ints(rng, (), dtype)}


DTYPES = [np.uint8, np.int8]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_binary_ops_expand_to_dq_float_op_q(dtype, op):
    rng = np.random.default_rng(0)
    a, b = ints(rng, (2, 4, 5, 5), dtype), ints(rng, (1, 4, 1, 1), dtype)
    init = {**params(rng, dtype, "a"), **params(rng, dtype, "b"), **params(rng, dtype, "c")}
    node = helper.make_node(op, ["a", "a_s", "a_z", "b", "b_s", "b_z", "c_s", "c_z"], ["y"],
                            domain=MS_DOMAIN)
    graph = expand_and_compare(qop_model([node], [("a", a), ("b", b)], "y", [2, 4, 5, 5], init,
                                         helper.np_dtype_to_tensor_dtype(np.dtype(dtype))),
                               [a, b])
    assert [n.op for n in graph.nodes] == ["DequantizeLinear", "DequantizeLinear",
                                           op[len("QLinear"):], "QuantizeLinear"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_pools_concat_and_activations_expand(dtype):
    rng = np.random.default_rng(1)
    x = ints(rng, (1, 4, 6, 6), dtype)
    init = {**params(rng, dtype, "x"), **params(rng, dtype, "p"), **params(rng, dtype, "s"),
            **params(rng, dtype, "l"), **params(rng, dtype, "c"), **params(rng, dtype, "g")}
    nodes = [
        helper.make_node("QLinearAveragePool", ["x", "x_s", "x_z", "p_s", "p_z"], ["p"],
                         domain=MS_DOMAIN, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("QLinearSigmoid", ["p", "p_s", "p_z", "s_s", "s_z"], ["s"],
                         domain=MS_DOMAIN),
        helper.make_node("QLinearLeakyRelu", ["x", "x_s", "x_z", "l_s", "l_z"], ["l"],
                         domain=MS_DOMAIN, alpha=0.2),
        helper.make_node("QLinearConcat", ["c_s", "c_z", "s", "s_s", "s_z", "l", "l_s", "l_z"],
                         ["c"], domain=MS_DOMAIN, axis=1),
        helper.make_node("QLinearGlobalAveragePool", ["c", "c_s", "c_z", "g_s", "g_z"], ["y"],
                         domain=MS_DOMAIN)]
    model = qop_model(nodes, [("x", x)], "y", [1, 8, 1, 1], init,
                      helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
    graph = expand_and_compare(model, [x])
    counts = graph.op_counts()
    assert counts["DequantizeLinear"] == counts["QuantizeLinear"] + 1 == 6
    for op in ("AveragePool", "Sigmoid", "LeakyRelu", "Concat", "GlobalAveragePool"):
        assert counts[op] == 1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis,opset,expanded", [(-1, 13, True), (1, 13, True),
                                                 (-1, 11, True), (1, 11, False)],
                         ids=["last", "middle", "old-opset-last", "old-opset-flattened"])
def test_qlinear_softmax_expands_where_it_normalizes_one_axis(dtype, axis, opset, expanded):
    """Attention's QLinearSoftmax becomes DQ -> Softmax -> Q where its ``opset``'s softmax
    normalizes one axis; before opset 13 over a middle axis (the dimensions from it on
    flattened into one) it stays the node, run on its reference; compiled on llvm,
    within 1 LSB of the reference either way."""
    rng = np.random.default_rng(4)
    x = ints(rng, (2, 3, 16), dtype)
    init = {**params(rng, dtype, "x", 0.02, 0.3), "y_s": F32(1 / 256),
            "y_z": np.array(np.iinfo(dtype).min, dtype)}
    node = helper.make_node("QLinearSoftmax", ["x", "x_s", "x_z", "y_s", "y_z"], ["y"],
                            domain=MS_DOMAIN, axis=axis, opset=opset)
    model = qop_model([node], [("x", x)], "y", [2, 3, 16], init,
                      helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
    graph = from_onnx(model)
    reference = evaluate(graph, [x])[0]
    if expanded:
        assert "Softmax" in expand_and_compare(model, [x]).op_counts()
    else:
        after = PassManager(["expand_qoperator", "infer_types"], check=True).run(graph)
        assert [n.op for n in after.nodes] == ["com.microsoft.QLinearSoftmax"]
    got = heterocc.compile(model, target="llvm").run([x])[0]
    assert lsb_difference(got, reference).max() <= 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_channels_last_pools_transpose_around_the_float_op(dtype):
    rng = np.random.default_rng(2)
    x = ints(rng, (1, 6, 5, 3), dtype)
    init = {**params(rng, dtype, "x"), **params(rng, dtype, "p"), **params(rng, dtype, "g")}
    nodes = [helper.make_node("QLinearAveragePool", ["x", "x_s", "x_z", "p_s", "p_z"], ["p"],
                              domain=MS_DOMAIN, kernel_shape=[2, 2], channels_last=1),
             helper.make_node("QLinearGlobalAveragePool", ["p", "p_s", "p_z", "g_s", "g_z"],
                              ["y"], domain=MS_DOMAIN, channels_last=1)]
    model = qop_model(nodes, [("x", x)], "y", [1, 1, 1, 3], init,
                      helper.np_dtype_to_tensor_dtype(np.dtype(dtype)))
    graph = expand_and_compare(model, [x])
    assert graph.op_counts()["Transpose"] == 4
    assert graph.outputs[0].type.shape == (1, 1, 1, 3)


def _conv_model(rng, dtype, per_channel, bias=True):
    x = ints(rng, (1, 3, 6, 6), dtype)
    w = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    w_s = np.asarray(rng.uniform(0.001, 0.01, 4 if per_channel else None), F32)
    init = {**params(rng, dtype, "x"), "w": w, "w_s": w_s,
            "w_z": np.zeros(w_s.shape, np.int8), **params(rng, dtype, "y", 0.01, 0.05),
            "b": rng.integers(-3000, 3000, 4).astype(np.int32)}
    names = ["x", "x_s", "x_z", "w", "w_s", "w_z", "y_s", "y_z"] + (["b"] if bias else [])
    node = helper.make_node("QLinearConv", names, ["y"], pads=[1, 1, 1, 1])
    return qop_model([node], [("x", x)], "y", [1, 4, 6, 6], init,
                     helper.np_dtype_to_tensor_dtype(np.dtype(dtype))), x, init


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("per_channel", [True, False])
def test_qlinear_conv_keeps_per_channel_scales_and_the_int32_bias(dtype, per_channel):
    rng = np.random.default_rng(3)
    model, x, init = _conv_model(rng, dtype, per_channel)
    graph = expand_and_compare(model, [x])
    dq_w, dq_b = [n for n in graph.nodes if n.op == "DequantizeLinear"][1:]
    assert dq_w.attrs["axis"] == 0 and dq_b.inputs[0].type.dtype == "int32"
    np.testing.assert_array_equal(dq_w.inputs[1].data, init["w_s"])
    expected = (np.float64(init["x_s"]) * init["w_s"]).astype(F32)
    np.testing.assert_array_equal(dq_b.inputs[1].data, expected)


def _qgemm_model(rng, dtype, alpha=1.0, trans_b=1, per_channel=True, bias=True,
                 quantized_output=True):
    a = ints(rng, (3, 12), dtype)
    b = rng.integers(-64, 64, (5, 12) if trans_b else (12, 5)).astype(np.int8)
    b_s = np.asarray(rng.uniform(0.002, 0.02, 5 if per_channel else None), F32)
    init = {**params(rng, dtype, "a"), "b": b, "b_s": b_s, "b_z": np.zeros(b_s.shape, np.int8),
            "c": rng.integers(-3000, 3000, 5).astype(np.int32),
            **params(rng, dtype, "y", 0.02, 0.1)}
    names = ["a", "a_s", "a_z", "b", "b_s", "b_z", "c" if bias else ""]
    if quantized_output:
        names += ["y_s", "y_z"]
    node = helper.make_node("QGemm", names, ["y"], domain=MS_DOMAIN, alpha=alpha,
                            transB=trans_b)
    out = helper.np_dtype_to_tensor_dtype(np.dtype(dtype)) if quantized_output \
        else TensorProto.FLOAT
    return qop_model([node], [("a", a)], "y", [3, 5], init, out), a


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("alpha,trans_b,per_channel,bias,quantized_output", [
    (1.0, 1, True, True, True), (0.5, 1, True, True, True), (2.0, 0, False, True, True),
    (1.0, 0, True, False, True), (1.5, 1, True, True, False)])
def test_qgemm_expands_with_alpha_folded_into_the_weight_scale(dtype, alpha, trans_b,
                                                               per_channel, bias,
                                                               quantized_output):
    rng = np.random.default_rng(4)
    model, a = _qgemm_model(rng, dtype, alpha, trans_b, per_channel, bias, quantized_output)
    graph = expand_and_compare(model, [a])
    (gemm,) = [n for n in graph.nodes if n.op == "Gemm"]
    assert gemm.attrs["alpha"] == 1.0 and gemm.attrs["transB"] == trans_b
    dq_b = next(n for n in graph.nodes if n.outputs[0] is gemm.inputs[1])
    assert dq_b.attrs["axis"] == (0 if trans_b else 1)
    assert (graph.nodes[-1].op == "QuantizeLinear") == quantized_output


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_realize_qdq_turns_expanded_convs_and_gemms_into_integer_ops(dtype, alpha):
    rng = np.random.default_rng(5)
    conv, x, _ = _conv_model(rng, dtype, per_channel=True)
    gemm, a = _qgemm_model(rng, dtype, alpha=alpha)
    passes = ["expand_qoperator", "infer_types", "realize_qdq", "fold_constants", "dce"]
    for model, feed in ((conv, x), (gemm, a)):
        graph = from_onnx(model)
        realized = PassManager(passes, check=True).run(graph)
        counts = realized.op_counts()
        integer = "ConvInteger" if model is conv else "MatMulInteger"
        assert counts == {integer: 1, "Add": 1, "Requantize": 1}, counts
        diff = lsb_difference(evaluate(graph, [feed])[0], evaluate(realized, [feed])[0])
        assert diff.max() <= 1


def test_a_node_without_constant_scales_for_its_bias_stays():
    """The bias scale x_scale * w_scale needs both constant; with x_scale a graph input the
    node is left to its reference."""
    model, _, _ = _conv_model(np.random.default_rng(6), np.uint8, per_channel=False)
    graph = from_onnx(model)
    (node,) = graph.nodes
    x_scale = Value("x_scale_in", node.inputs[1].type)
    node = replace(node, inputs=[node.inputs[0], x_scale, *node.inputs[2:]])
    graph = Graph([*graph.inputs, x_scale], graph.outputs, [node], graph.name)
    assert expand_qoperator(graph) is graph


def test_unknown_domains_and_contrib_ops_are_reported_together():
    nodes = [helper.make_node("QLinearReduceMean", ["x"], ["a"], domain=MS_DOMAIN, name="sm"),
             helper.make_node("Fancy", ["a"], ["b"], domain="org.example", name="f"),
             helper.make_node("FancyOpA", ["b"], ["y"], name="g")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.UINT8, [2])], [helper.make_tensor_value_info("y", TensorProto.UINT8,
                                                                      None)])
    model = helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 18), helper.make_opsetid(MS_DOMAIN, 1),
        helper.make_opsetid("org.example", 1)])
    with pytest.raises(UnsupportedOpError) as info:
        heterocc.compile(model, check=False)
    assert info.value.missing == {"com.microsoft.QLinearReduceMean": ["sm"],
                                  "org.example.Fancy": ["f"], "FancyOpA": ["g"]}


def test_contrib_op_imports_with_registry_types_despite_onnx_shape_inference():
    """ONNX's shape inference knows no com.microsoft op: the IR's types come from the
    registry, and the checker accepts the domain's opset import."""
    rng = np.random.default_rng(7)
    a = ints(rng, (2, 3), np.int8)
    init = {**params(rng, np.int8, "a"), **params(rng, np.int8, "c")}
    node = helper.make_node("QLinearSigmoid", ["a", "a_s", "a_z", "c_s", "c_z"], ["s"],
                            domain=MS_DOMAIN)
    relu = helper.make_node("Relu", ["s"], ["y"])
    model = qop_model([node, relu], [("a", a)], "y", [2, 3], init, TensorProto.INT8,
                      opset=13)
    onnx.checker.check_model(model)
    graph = from_onnx(model)
    assert [n.op for n in graph.nodes] == ["com.microsoft.QLinearSigmoid", "Relu"]
    assert str(graph.outputs[0].type) == "int8[2, 3]"


# --------------------------------------------------------------------------- end to end


def small_cnn(seed: int = 0, size: int = 16) -> onnx.ModelProto:
    """Conv -> Relu -> Conv + residual Add -> LeakyRelu -> Conv -> x * Sigmoid(x) ->
    Concat -> AveragePool -> GlobalAveragePool -> Flatten -> Gemm (transB), float32;
    quantized to QOperator it uses every op of the format."""
    rng = np.random.default_rng(seed)

    def w(*shape, s=0.3):
        return (rng.standard_normal(shape) * s).astype(F32)

    init = {"w1": w(8, 3, 3, 3), "b1": w(8, s=0.1), "w2": w(8, 8, 3, 3, s=0.15),
            "b2": w(8, s=0.1), "w3": w(4, 8, 1, 1), "b3": w(4, s=0.1), "wf": w(10, 12),
            "bf": w(10, s=0.1)}
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["a"]),
        helper.make_node("LeakyRelu", ["a"], ["l"], alpha=0.1),
        helper.make_node("Conv", ["l", "w3", "b3"], ["c3"]),
        helper.make_node("Sigmoid", ["c3"], ["s"]),
        helper.make_node("Mul", ["c3", "s"], ["m"]),
        helper.make_node("Concat", ["l", "m"], ["cat"], axis=1),
        helper.make_node("AveragePool", ["cat"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1)]
    graph = helper.make_graph(
        nodes, "small_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [numpy_helper.from_array(v, k) for k, v in init.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def quantize_qoperator(model, directory, activation: str, per_channel: bool,
                       reduce_range: bool = False, samples: int = 8) -> onnx.ModelProto:
    """``model`` quantized by onnxruntime's quantize_static to the QOperator format."""
    oq = pytest.importorskip("onnxruntime.quantization")
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    name = model.graph.input[0].name

    class Calibration(oq.CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{name: np.random.default_rng(i).standard_normal(shape)
                                  .astype(F32)} for i in range(samples)])

        def get_next(self):
            return next(self.batches, None)

    onnx.save(model, str(directory / "float.onnx"))
    oq.quantize_static(str(directory / "float.onnx"), str(directory / "qop.onnx"),
                       Calibration(), quant_format=oq.QuantFormat.QOperator,
                       activation_type=getattr(oq.QuantType, activation),
                       weight_type=oq.QuantType.QInt8, per_channel=per_channel,
                       reduce_range=reduce_range)
    return onnx.load(str(directory / "qop.onnx"))


def output_scale(model: onnx.ModelProto) -> float:
    """The scale of the DequantizeLinear that produces the model's (float) output."""
    (dq,) = [n for n in model.graph.node if n.output[0] == model.graph.output[0].name]
    init = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    return float(init[dq.input[1]])


def compare_with_onnxruntime(model, compiled, shape, runs=8, seed=100):
    """(largest difference in output steps, fraction of differing outputs) against
    ONNX Runtime on seeded random inputs."""
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    name = model.graph.input[0].name
    step = output_scale(model)
    worst, differ, total = 0, 0, 0
    for i in range(runs):
        x = np.random.default_rng(seed + i).standard_normal(shape).astype(F32)
        ours, theirs = compiled.run({name: x})[0], session.run(None, {name: x})[0]
        steps = np.rint(np.abs(ours - theirs) / step)
        worst, differ, total = max(worst, int(steps.max())), differ + int((steps > 0).sum()), \
            total + steps.size
    return worst, differ / total


@pytest.fixture(scope="module")
def float_cnn():
    return small_cnn()


@pytest.mark.parametrize("target", ["llvm", "reference"])
@pytest.mark.parametrize("per_channel", [True, False])
@pytest.mark.parametrize("activation", ["QUInt8", "QInt8"])
def test_onnxruntime_qoperator_model_matches_onnxruntime(float_cnn, tmp_path, target,
                                                          activation, per_channel):
    # uint8 activations with full-range int8 weights: ONNX Runtime's AVX2 kernels (without
    # VNNI) saturate sums of two u8 x s8 products in int16, so compare on 7-bit weights
    # (reduce_range, ONNX Runtime's advice for those machines); see the next test
    model = quantize_qoperator(float_cnn, tmp_path, activation, per_channel,
                               reduce_range=activation == "QUInt8")
    ops = {(n.domain, n.op_type) for n in model.graph.node}
    assert (MS_DOMAIN, "QGemm") in ops and (MS_DOMAIN, "QLinearAdd") in ops
    compiled = heterocc.compile(model, target=target)
    assert not any(n.op.startswith(("com.microsoft.", "QLinear")) for _, n in
                   compiled.graph.walk())
    worst, _ = compare_with_onnxruntime(model, compiled, (1, 3, 16, 16))
    assert worst <= 1


@pytest.mark.parametrize("per_channel", [True, False])
def test_full_range_uint8_model_matches_the_exact_integer_references(float_cnn, tmp_path,
                                                                      per_channel):
    """The QOperator graph evaluated on its own ops' references (exact int32
    accumulation) is what the expanded, compiled model computes."""
    model = quantize_qoperator(float_cnn, tmp_path, "QUInt8", per_channel)
    compiled = heterocc.compile(model, target="llvm")
    graph = from_onnx(model)
    step = output_scale(model)
    for i in range(4):
        x = np.random.default_rng(200 + i).standard_normal((1, 3, 16, 16)).astype(F32)
        steps = np.rint(np.abs(compiled.run({"x": x})[0] - evaluate(graph, [x])[0]) / step)
        assert steps.max() <= 1


@pytest.mark.slow
def test_quantized_resnet18_qoperator_agrees_with_onnxruntime_on_top1(tmp_path):
    from heterocc.models import resnet18

    model = quantize_qoperator(resnet18(size=64, classes=100), tmp_path, "QUInt8",
                               per_channel=True, reduce_range=True, samples=4)
    compiled = heterocc.compile(model, target="llvm")
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    name = model.graph.input[0].name
    for i in range(3):
        x = np.random.default_rng(i).standard_normal((1, 3, 64, 64)).astype(F32)
        ours, theirs = compiled.run({name: x})[0], session.run(None, {name: x})[0]
        # the CPU computes the convolutions in integers (ConvInteger on its dot
        # product, the accelerator's fixed-point Requantize): bit-exact with the integer
        # reference of its graph
        np.testing.assert_array_equal(ours, evaluate(compiled.graph, [x])[0])
        assert ours.argmax() == theirs.argmax()
        # counted in output steps (a float difference of exactly 3 steps can round to a
        # hair above 3 * scale): rounding differences from ONNX Runtime's integer
        # kernels (float requantization) and the fixed-point multipliers compound over
        # the 20 layers, as they do for the reference's (measured: 4)
        steps = np.rint(np.abs(ours - theirs) / output_scale(model))
        assert steps.max() <= 4
