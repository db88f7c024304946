"""A quantized model's matrix products by constant weights (a classifier's Gemm or MatMul,
a transformer's projections) in integers on ``llvm``: ``realize_qdq_linear`` realizes
them as MatMulInteger + Requantize, ``integer_products_as_convolutions``
(``targets/llvm/int8_matmul.py``) computes each as a 1x1 ConvInteger on the dot product
(of one row: channel lanes; of more: ``schedules/int8_rows.py``); bit-exact against the
integer reference, within a step of ONNX Runtime. Under ``realize_qdq_convolutions``
only the last product (its result only dequantized into the outputs) is realized; a
product whose result other ops read stays float."""

from __future__ import annotations

import numpy as np
import pytest


def _mlp(rows: int, transposed: bool):
    """``input [rows, 24]`` -> Gemm 24->40 -> Relu -> last product 40->10 (a Gemm with
    ``transB`` and a bias, or a MatMul) -> output."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(21)
    w1 = (rng.standard_normal((40, 24)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((10, 40)) * 0.3).astype(np.float32)
    inits = [numpy_helper.from_array(w1, "w1"),
             numpy_helper.from_array((rng.standard_normal(40) * 0.1).astype(np.float32), "b1"),
             numpy_helper.from_array(w2 if transposed else np.ascontiguousarray(w2.T), "w2")]
    nodes = [helper.make_node("Gemm", ["input", "w1", "b1"], ["hidden"], transB=1),
             helper.make_node("Relu", ["hidden"], ["act"])]
    if transposed:
        inits.append(numpy_helper.from_array((rng.standard_normal(10) * 0.1).astype(
            np.float32), "b2"))
        nodes.append(helper.make_node("Gemm", ["act", "w2", "b2"], ["logits"], transB=1))
    else:
        nodes.append(helper.make_node("MatMul", ["act", "w2"], ["logits"]))
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("input", TensorProto.FLOAT, (rows, 24))],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, (rows, 10))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("rows,transposed,target,integer_qdq", [
    (1, True, "llvm", "realize_qdq_linear"), (3, True, "llvm", "realize_qdq_linear"),
    (2, False, "llvm", "realize_qdq_linear"), (13, False, "llvm", "realize_qdq_linear"),
    (1, True, "llvm -mattr=-avx512f", "realize_qdq_linear"),
    (13, True, "llvm -mattr=-avx512f,-avxvnni", "realize_qdq_linear"),
    (3, True, "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1", "realize_qdq_linear"),
    (3, True, "llvm", "realize_qdq_convolutions"),
], ids=["gemm-1row", "gemm-3rows", "matmul-2rows", "matmul-13rows", "gemm-avx2",
        "gemm-13rows-avx2-no-vnni", "gemm-neon", "last-product-only"])
def test_the_products_run_in_integers_as_convolutions(tmp_path, rows, transposed, target,
                                                      integer_qdq):
    """On the host, AVX2 with and without AVX-VNNI (run here) and AArch64 (built: the
    products' kernels compiled for NEON's ``sdot``, none left to NumPy)."""
    oq = pytest.importorskip("onnxruntime.quantization")
    import onnx

    import heterocc
    from heterocc.runtime.interpreter import evaluate
    from heterocc.targets.llvm.cpu import parse_cpu
    from heterocc.targets.llvm.module import host
    from heterocc.targets.llvm.target import LLVMTarget
    from tests.passes.test_per_channel_axes import ort_reference, output_scale, steps_apart

    class Calibration(oq.CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"input": np.random.default_rng(30 + i).standard_normal(
                (rows, 24)).astype(np.float32)} for i in range(4)])

        def get_next(self):
            return next(self.feeds, None)

    onnx.save(_mlp(rows, transposed), str(tmp_path / "float.onnx"))
    oq.quantize_static(str(tmp_path / "float.onnx"), str(tmp_path / "qdq.onnx"),
                       Calibration(), quant_format=oq.QuantFormat.QDQ, per_channel=True,
                       activation_type=oq.QuantType.QUInt8, weight_type=oq.QuantType.QInt8)
    model = onnx.load(str(tmp_path / "qdq.onnx"))
    llvm = LLVMTarget(cpu=target, integer_qdq=integer_qdq)
    compiled = heterocc.compile(model, target=[llvm])
    ops = [n.op for _, n in compiled.graph.walk()]
    if integer_qdq == "realize_qdq_convolutions":
        # the hidden layer's result is read by the next product: it stays float
        assert ops.count("Gemm") == 1 and ops.count("ConvInteger") == 1
    else:
        assert ops.count("Gemm") == 0 and ops.count("ConvInteger") == 2
    assert "MatMulInteger" not in ops and "MatMul" not in ops
    assert not llvm.fallbacks
    cpu = parse_cpu(target)
    if cpu.arch != host().description.arch or not cpu.features <= host().description.features:
        return
    x = np.random.default_rng(7).standard_normal((rows, 24)).astype(np.float32)
    got = compiled.run([x])[0]
    np.testing.assert_array_equal(got, evaluate(compiled.graph, [x])[0])
    assert steps_apart(got, ort_reference(model, x), output_scale(model)) <= 1
    if rows > 1:  # an artifact packs the products' weights as the build did
        compiled.export(str(tmp_path / "artifact"))
        np.testing.assert_array_equal(heterocc.load(str(tmp_path / "artifact")).run([x])[0],
                                      got)


def test_only_a_product_chain_of_constant_int8_columns_becomes_a_convolution():
    """The pass rewrites MatMulInteger -> Add(column bias) -> Requantize of 2-D rows by a
    constant int8 weight, keeping the result's bits (the interpreter's, before and
    after); a product of two run-time operands is left as it is."""
    from heterocc.ir.graph import Graph, Node, Value, constant
    from heterocc.ir.types import TensorType
    from heterocc.ops import get_op
    from heterocc.runtime.interpreter import evaluate
    from heterocc.targets.llvm.int8_matmul import integer_products_as_convolutions

    rng = np.random.default_rng(3)
    rows = Value("rows", TensorType((4, 20), "uint8"))
    other = Value("other", TensorType((20, 6), "int8"))
    weight = constant(rng.integers(-128, 128, (20, 6)).astype(np.int8), "w")
    zero = constant(np.array(117, np.uint8), "zero")
    acc = Value("acc", TensorType((4, 6), "int32"))
    biased = Value("biased", TensorType((4, 6), "int32"))
    out = Value("out", TensorType((4, 6), "int8"))
    free = Value("free", TensorType((4, 6), "int32"))
    requantize = {"multiplier": [1 << 30] * 3 + [3 << 28] * 3, "shift": 9, "qmin": -128,
                  "qmax": 127, "axis": -1, "product_shift": 31}
    nodes = [Node("MatMulInteger", [rows, weight, zero], [acc], {}, "mm"),
             Node("Add", [acc, constant(rng.integers(-999, 999, 6).astype(np.int32), "b")],
                  [biased], {}, "bias"),
             Node("Requantize", [biased], [out], requantize, "rq"),
             Node("MatMulInteger", [rows, other, zero], [free], {}, "free_mm")]
    for node in nodes:
        node.attrs = get_op(node.op).normalize_attrs(node.attrs, node.name)
    graph = Graph([rows, other], [out, free], nodes, "g")
    rewritten = integer_products_as_convolutions(graph)
    ops = [n.op for n in rewritten.nodes]
    assert ops.count("ConvInteger") == 1 and ops.count("MatMulInteger") == 1
    inputs = [rng.integers(0, 256, (4, 20)).astype(np.uint8),
              rng.integers(-128, 128, (20, 6)).astype(np.int8)]
    for before, after in zip(evaluate(graph, inputs), evaluate(rewritten, inputs)):
        np.testing.assert_array_equal(before, after)
