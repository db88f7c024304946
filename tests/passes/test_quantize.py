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
    # four layers and the residual addition, in integers
    assert counts["Requantize"] == 5 and "Conv" not in counts and "Gemm" not in counts
    assert "Cast" in counts and "DequantizeLinear" in counts
    # every quantized Relu folded into the clamp of the Requantize before it, the one
    # after the residual addition too
    assert counts.get("Relu", 0) == 0
    # the outputs no Relu folded into (the second block conv and the logits): the same
    # values as the float chains'
    late = [v.name for n in realized.nodes if n.op == "Requantize" and not n.attrs["absorbed"]
            for v in n.outputs]
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
    assert counts["ConvInteger"] == 3 and counts["MatMulInteger"] == 1
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
