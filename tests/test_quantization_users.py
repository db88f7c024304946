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
    compiled = heterocc.compile(model, target="vta,llvm")
    said = [w for w in compiled.warnings if "quant_pre_process" in w]
    assert said and "BatchNormalization" in said[0]
    assert "quant_pre_process" in compiled.placement_report.format()
    pre = heterocc.compile(_ort_quantized(tiny_cnn(), tmp_path, pre_process=True),
                           target="vta,llvm")
    assert not any("quant_pre_process" in w for w in pre.warnings)
