"""benchmarks/int8_vs_ort_layers.py on a small residual network quantized by ONNX
Runtime as the zoo quantizes (QDQ, uint8 activations, per-channel weights): every quantized
tensor of both engines is compared, and where they differ given the same inputs, it is by
a step at a rounding near tie."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from heterocc.models import resnet18

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
pytest.importorskip("onnxruntime.quantization")
import int8_vs_ort_layers as layers  # noqa: E402  (benchmarks/, put on the path above)
from ort_quantize import quantize_qdq  # noqa: E402


@pytest.mark.slow
def test_layers_differ_from_onnxruntime_only_at_rounding_ties(tmp_path):
    float_path, int8_path = str(tmp_path / "float.onnx"), str(tmp_path / "int8.onnx")
    onnx.save(resnet18(size=32, classes=10), float_path)
    rng = np.random.default_rng(3)
    feeds = [{"input": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}
             for _ in range(4)]
    quantize_qdq(float_path, int8_path, feeds)
    comparison = layers.compare_with_onnxruntime(int8_path, feeds[0])

    assert comparison.bit_exact
    # every convolution's output (with its residual addition, where it has one) compared
    assert len(comparison.rows) >= 17
    assert any("Add+Requantize+Cast" in row.ops for row in comparison.rows)
    elements = sum(row.elements for row in comparison.rows)
    assert sum(row.isolated_differing for row in comparison.rows) <= elements * 1e-3
    for row in comparison.rows:
        assert row.isolated_max <= 2  # one step per rounding; a residual block rounds twice
        if row.isolated_differing:
            value = float(row.before_rounding.split("=")[1])
            assert abs(abs(value - np.floor(value)) - 0.5) < 1e-4, row.line()
    assert comparison.ort_output.shape == comparison.compiled_output.shape


def test_uint8_tensors_compare_with_our_int8_form_in_onnxruntime_steps():
    theirs = np.array([0, 127, 128, 255], dtype=np.uint8)
    ours = layers.as_ours(theirs, np.int8)
    assert ours.tolist() == [-128, -1, 0, 127]
    assert np.array_equal(layers.steps(ours), layers.steps(theirs))
