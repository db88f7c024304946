"""``CudaTarget`` end to end without a GPU: registered as "cuda", a model compiled with
it runs its fused functions as GPU kernels in CPU emulation and matches the reference
interpreter; options are checked."""

from __future__ import annotations

import numpy as np
import pytest

import heterocc
from heterocc.errors import TargetError
from heterocc.models.tiny_cnn import tiny_cnn
from heterocc.targets import get_target
from heterocc.targets.cuda import CudaTarget, find_nvcc, gpu_available


def test_registered_as_cuda():
    target = get_target("cuda", run_on="emulator")
    assert isinstance(target, CudaTarget) and target.name == "cuda"


def test_tiny_cnn_through_emulated_kernels_matches_reference():
    model = tiny_cnn(size=16)
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    target = CudaTarget(run_on="emulator", nvcc="never")
    got = heterocc.compile(model, target=[target]).run([x])
    want = heterocc.compile(model, target="reference").run([x])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-3, atol=1e-4)
    assert target.modules and not target.fallbacks
    module = next(iter(target.modules.values()))
    assert "__global__" in module.source and module.compiled is None


@pytest.mark.parametrize("options, message", [
    ({"run_on": "tpu"}, "run_on='tpu'"),
    ({"nvcc": "sometimes"}, "nvcc='sometimes'"),
])
def test_bad_options_are_named(options, message):
    with pytest.raises(TargetError, match=message):
        CudaTarget(**options)


@pytest.mark.skipif(gpu_available(), reason="checks the error given where there is no GPU")
def test_gpu_required_without_gpu_is_an_error():
    model = tiny_cnn(size=8)
    with pytest.raises(TargetError, match="sees no GPU"):
        heterocc.compile(model, target=[CudaTarget(run_on="gpu")])


def _conv_relu_pool():
    from onnx import TensorProto, helper, numpy_helper

    weight = np.random.default_rng(2).standard_normal((4, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("GlobalAveragePool", ["r"], ["y"])],
        "conv_relu_pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 1])],
        [numpy_helper.from_array(weight, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_launch_plan_round_trips_through_json():
    from heterocc.errors import ArtifactError
    from heterocc.targets.cuda import LaunchPlan, launch_plan, lower_for_gpu

    from . import kernels

    case = kernels.dense_relu()
    plan = launch_plan(lower_for_gpu(case.outputs, case.inputs, "dense"))
    again = LaunchPlan.from_json(plan.to_json())
    assert again.launches == plan.launches and again.written == plan.written == {3}
    assert [(b.name, b.shape, b.dtype) for b in again.buffers] == \
        [(b.name, b.shape, b.dtype) for b in plan.buffers]
    broken = plan.to_json()
    broken["launches"][0]["args"] = [0, 9]
    with pytest.raises(ArtifactError, match="outside its"):
        LaunchPlan.from_json(broken)


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed")
def test_artifact_carries_ptx_cubins_and_launches(tmp_path):
    import json

    model = _conv_relu_pool()
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    target = CudaTarget(run_on="emulator", archs=("sm_90",))
    compiled = heterocc.compile(model, target=[target])
    expected = compiled.run([x])
    compiled.export(str(tmp_path / "model"))
    kernels_dir = tmp_path / "model" / "kernels" / "cuda"
    launches = json.loads((kernels_dir / "launches.json").read_text())
    assert set(launches) == set(target.modules)
    for entry in launches.values():
        assert (kernels_dir / entry["files"]["ptx"]).read_text().startswith("//")
        assert (kernels_dir / entry["files"]["sm_90"]).stat().st_size > 0
    loaded = heterocc.load(str(tmp_path / "model"))
    np.testing.assert_allclose(loaded.run([x])[0], expected[0], rtol=1e-5, atol=1e-6)
