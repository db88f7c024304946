import json

import numpy as np
import pytest

import heterocc
from heterocc.errors import ArtifactError, InputError
from heterocc.ir.serialize import graph_from_json, graph_to_json
from heterocc.models import tiny_cnn
from heterocc.runtime.interpreter import evaluate


@pytest.fixture
def exported(tmp_path):
    compiled = heterocc.compile(tiny_cnn(), target="reference")
    path = tmp_path / "artifact"
    compiled.export(str(path))
    return compiled, path


def test_graph_json_round_trip_keeps_semantics():
    graph = heterocc.compile(tiny_cnn()).graph
    doc, params = graph_to_json(graph)
    again = graph_from_json(json.loads(json.dumps(doc)), params)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.testing.assert_array_equal(evaluate(graph, [x])[0], evaluate(again, [x])[0])
    assert str(again) == str(graph)


def test_exported_artifact_runs_the_same(exported):
    compiled, path = exported
    loaded = heterocc.load(str(path))
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.testing.assert_array_equal(loaded.run({"input": x})[0], compiled.run({"input": x})[0])
    assert sorted(p.name for p in path.iterdir()) == ["graph.json", "manifest.json",
                                                      "params.npz"]
    with pytest.raises(InputError, match="shape"):
        loaded.run({"input": np.zeros((1, 3, 8, 8), np.float32)})


def test_a_tampered_file_is_refused(exported):
    _, path = exported
    data = bytearray((path / "params.npz").read_bytes())
    data[-100] ^= 0xFF
    (path / "params.npz").write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="params.npz does not match its recorded hash"):
        heterocc.load(str(path))


def test_another_format_version_is_refused(exported):
    _, path = exported
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["format"] = 999
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="format 999 is not supported"):
        heterocc.load(str(path))


def test_a_missing_or_corrupt_manifest_is_refused(exported, tmp_path):
    _, path = exported
    with pytest.raises(ArtifactError, match="not a heterocc artifact"):
        heterocc.load(str(tmp_path / "nowhere"))
    (path / "manifest.json").write_text("{not json")
    with pytest.raises(ArtifactError, match="corrupt"):
        heterocc.load(str(path))


def test_manifest_cannot_point_outside_the_artifact(exported):
    _, path = exported
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"]["../../etc/passwd"] = "0" * 64
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="outside the artifact"):
        heterocc.load(str(path))


def test_dynamic_model_cannot_be_exported(tmp_path):
    from onnx import helper

    from tests.conftest import make_model

    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", "float32", ["N", 2])],
                       [("y", "float32", None)])
    with pytest.raises(InputError, match="shapes="):
        heterocc.compile(model).export(str(tmp_path / "a"))


def test_llvm_artifact_carries_a_shared_library(tmp_path):
    compiled = heterocc.compile(tiny_cnn(), target="llvm")
    assert compiled.fallbacks == {}
    path = tmp_path / "llvm_artifact"
    compiled.export(str(path))
    assert (path / "kernels" / "llvm" / "kernels.so").exists()
    loaded = heterocc.load(str(path))
    x = np.random.default_rng(2).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.testing.assert_array_equal(loaded.run([x])[0], compiled.run([x])[0])
    kinds = {type(k).__name__ for k in loaded.executor.kernels.values()}
    assert "LLVMKernel" in kinds
