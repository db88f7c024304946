"""Quantization as users meet it: a model from onnxruntime's quantize_static without
quant_pre_process (BatchNorm between Q/DQ pairs) is reported with what to do."""

import numpy as np
import pytest

import heterocc
from heterocc.models import tiny_cnn


def _ort_quantized(model, tmp_path, pre_process: bool):
    oq = pytest.importorskip("onnxruntime.quantization")
    import onnx

    path = tmp_path / "float.onnx"
    onnx.save(model, str(path))
    if pre_process:
        oq.quant_pre_process(str(path), str(tmp_path / "pre.onnx"), skip_symbolic_shape=True)
        path = tmp_path / "pre.onnx"

    class Samples(oq.CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.left = iter([{"input": rng.standard_normal((1, 3, 32, 32), np.float32)}
                              for _ in range(2)])

        def get_next(self):
            return next(self.left, None)

    out = tmp_path / "q.onnx"
    oq.quantize_static(str(path), str(out), Samples(), quant_format=oq.QuantFormat.QDQ,
                       activation_type=oq.QuantType.QInt8, per_channel=True)
    return onnx.load(str(out))


def test_batchnorm_between_qdq_pairs_names_quant_pre_process(tmp_path):
    model = _ort_quantized(tiny_cnn(), tmp_path, pre_process=False)
    assert any(n.op_type == "BatchNormalization" for n in model.graph.node)
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy")
    said = [w for w in compiled.warnings if "quant_pre_process" in w]
    assert said and "BatchNormalization" in said[0]
    assert "quant_pre_process" in compiled.placement_report.format()
    pre = heterocc.compile(_ort_quantized(tiny_cnn(), tmp_path, pre_process=True),
                           target="vta,llvm")
    assert not any("quant_pre_process" in w for w in pre.warnings)


def _samples(count=3, seed=0):
    rng = np.random.default_rng(seed)
    return [{"input": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}
            for _ in range(count)]


def test_builtin_quantizer_puts_residual_additions_on_the_accelerator_bit_exactly():
    from heterocc.quantization import QuantizationOptions

    model, calibration = tiny_cnn(), _samples()
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy",
                                calibration=calibration)
    adds = [p for p in compiled.placement_report.placements if p.op == "Add"
            and "quantized_add" in p.composite]
    assert adds and all(p.target == "vta" for p in adds)
    off = heterocc.compile(model, target="vta,llvm", placement="greedy", calibration=calibration,
                           quantization=QuantizationOptions(residual_adds=False))
    assert not any("quantized_add" in p.composite for p in off.placement_report.placements)
    # the same integer graph all on the CPU (the float softmax after it is the same code)
    cpu = heterocc.compile(model, target="llvm", calibration=calibration)
    x = _samples(1, seed=9)[0]
    np.testing.assert_array_equal(compiled.run(x)[0], cpu.run(x)[0])


@pytest.mark.parametrize("options", [
    dict(per_channel=True), dict(symmetric=False), dict(method="percentile", percentile=99.9),
    dict(per_channel=True, symmetric=False, exclude=("Gemm",))])
def test_quantizer_options_written_as_qdq_run_in_onnxruntime_like_ours(options):
    ort = pytest.importorskip("onnxruntime")
    import onnx

    from heterocc.quantization import QuantizationOptions, quantize_model

    opts = QuantizationOptions(**options)
    model, calibration = tiny_cnn(), _samples()
    written = quantize_model(model, calibration, opts)
    onnx.checker.check_model(written)
    nodes = written.graph.node
    weights = [n for n in nodes if n.op_type == "DequantizeLinear" and n.input[0].endswith(
        "_int8")]
    assert weights
    if opts.per_channel:
        init = {t.name: t for t in written.graph.initializer}
        assert any(len(init[w.input[1]].dims) == 1 for w in weights if w.input[1] in init)
    zeros = [onnx.numpy_helper.to_array(t) for t in written.graph.initializer
             if t.name.endswith("_zero") and t.data_type == onnx.TensorProto.INT8]
    assert any(z.any() for z in zeros) == (not opts.symmetric)
    if "Gemm" in opts.exclude:
        gemm = next(n for n in nodes if n.op_type == "Gemm")
        assert not any(i.endswith("_dq") for i in gemm.input[1:2])
    session = ort.InferenceSession(written.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    ours = heterocc.compile(model, calibration=calibration, quantization=opts)
    for x in _samples(3, seed=40):
        theirs = session.run(None, x)[0]
        assert np.abs(theirs - ours.run(x)[0]).max() < 0.1


def test_a_skip_from_an_unquantized_op_read_by_a_layer_and_an_addition():
    """ResNet's first block: the max pool's output feeds a convolution and, as the skip,
    the addition; the addition's own Q/DQ pair must not reroute the convolution's input
    (the compile pipeline checks every pass's graph, order included)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.2,
                                "w")
    nodes = [helper.make_node("MaxPool", ["input"], ["p"], kernel_shape=[2, 2],
                              strides=[2, 2]),
             helper.make_node("Conv", ["p", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Add", ["r", "p"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    graph = helper.make_graph(
        nodes, "skip", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                      [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    samples = [{"input": rng.standard_normal((1, 4, 8, 8)).astype(np.float32)}
               for _ in range(2)]
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy", calibration=samples)
    assert any("quantized_add" in p.composite for p in compiled.placement_report.placements)
    cpu = heterocc.compile(model, target="llvm", calibration=samples)
    np.testing.assert_array_equal(compiled.run(samples[0])[0], cpu.run(samples[0])[0])
    exact = heterocc.compile(model, target="llvm").run(samples[0])[0]
    assert np.abs(compiled.run(samples[0])[0] - exact).max() < 0.1 * np.abs(exact).max()
