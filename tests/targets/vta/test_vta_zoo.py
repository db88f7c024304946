"""MobileNetV3-Small (hardswish, squeeze-excite's hardsigmoid and average pools) on
``vta,llvm``: its activations run as lookup tables and its pools as depthwise
convolutions on the accelerator, bit-exact against the integer reference, top-1 as
ONNX Runtime (``benchmarks/vta_zoo.py`` measures the other networks)."""

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
import vta_zoo  # noqa: E402  (benchmarks/, put on the path above)

from tests.targets.vta.ort_models import onnxruntime_session  # noqa: E402


@pytest.mark.slow
def test_mobilenet_v3_small_activations_and_pools_run_on_the_accelerator():
    with tempfile.TemporaryDirectory() as d:
        model = vta_zoo.torchvision_qdq("mobilenet_v3_small", 32, d)
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy")
    report = compiled.placement_report
    assert report.mac_share("vta") == 1.0
    tables = [p for p in report.placements if p.op == "LookupTable"]
    # the classifier's hardswish (on a 2-D tensor) too
    assert len(tables) > 10 and all(p.target == "vta" for p in tables), report.format()
    assert not any(p.op in ("HardSigmoid", "HardSwish", "GlobalAveragePool") and
                   p.target != "vta" and "folded" not in p.reason
                   for p in report.placements), report.format()
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    ours = compiled.run([x])[0]
    np.testing.assert_array_equal(ours, evaluate(compiled.graph, [x])[0])
    expected = onnxruntime_session(model, optimized=False).run(None, {"input": x})[0]
    assert ours.argmax() == expected.argmax()


def test_calibrated_batch_norm_statistics_keep_the_weights_and_spread_the_logits():
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v3_small(weights=None).eval()
    weights = {k: v.clone() for k, v in model.state_dict().items()
               if not k.endswith(("running_mean", "running_var", "num_batches_tracked"))}
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        before = model(x)
    vta_zoo.calibrate_batch_norms(model, 32)
    assert not model.training
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in weights.items())
    norm = next(m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d))
    assert not torch.allclose(norm.running_var, torch.ones_like(norm.running_var))
    with torch.no_grad():
        after = model(x)
    # the statistics normalize what reaches the classifier: its logits spread wider
    assert float(after.std()) > 2 * float(before.std())
