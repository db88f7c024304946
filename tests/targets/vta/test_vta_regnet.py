"""RegNetY-400MF (torchvision, random weights; grouped convolutions of group width 8)
quantized by ONNX Runtime (quant_pre_process, quantize_static QDQ per-channel) on
``vta,llvm``: every convolution on the accelerator, bit-exact against the integer
reference, top-1 as ONNX Runtime. The model comes from ``benchmarks/vta_regnet.py``."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

import heterocc
from heterocc.runtime.interpreter import evaluate

pytest.importorskip("torchvision")
pytest.importorskip("onnxruntime.quantization")

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import vta_regnet  # noqa: E402  (benchmarks/, put on the path above)

from tests.targets.vta.ort_models import onnxruntime_session  # noqa: E402


@pytest.mark.slow
def test_regnet_y_400mf_convolutions_all_run_on_the_accelerator():
    with tempfile.TemporaryDirectory() as d:
        model = vta_regnet.regnet_qdq(32, d)
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy")
    report = compiled.placement_report
    convs = [p for p in report.placements if p.op == "ConvInteger"]
    assert any(p.macs for p in convs) and all(p.target == "vta" for p in convs), \
        report.format()
    assert report.mac_share("vta") == 1.0
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    ours = compiled.run([x])[0]
    np.testing.assert_array_equal(ours, evaluate(compiled.graph, [x])[0])
    expected = onnxruntime_session(model, optimized=False).run(None, {"input": x})[0]
    assert ours.argmax() == expected.argmax()
