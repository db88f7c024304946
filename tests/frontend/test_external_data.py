"""Models whose tensors live in external data files load relative to the model's folder,
wherever the process runs; locations that leave that folder are refused by name."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import heterocc
from heterocc.errors import ModelLoadError
from heterocc.frontend import load_model


def _model() -> tuple[onnx.ModelProto, np.ndarray]:
    w = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])], "external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 64))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, 32))],
        [numpy_helper.from_array(w, "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model, w


def _save_external(model: onnx.ModelProto, path) -> None:
    onnx.save_model(model, str(path), save_as_external_data=True,
                    location=os.path.basename(path) + ".data", size_threshold=0)


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """A current directory that is not the model's."""
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.chdir(other)
    return other


def test_external_data_loads_by_absolute_and_relative_path_from_another_folder(
        tmp_path, elsewhere):
    model, w = _model()
    folder = tmp_path / "model"
    folder.mkdir()
    _save_external(model, folder / "X.onnx")
    assert (folder / "X.onnx.data").is_file()
    x = np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)
    for path in (str(folder / "X.onnx"), os.path.join("..", "model", "X.onnx")):
        compiled = heterocc.compile(path)
        np.testing.assert_allclose(compiled.run([x])[0], x @ w, rtol=1e-5, atol=1e-5)


def _with_location(tmp_path, location: str) -> str:
    """A model in tmp_path/model whose one tensor's external data is at ``location``
    (the data file written where that location points)."""
    model, _ = _model()
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    _save_external(model, folder / "X.onnx")
    proto = onnx.load(str(folder / "X.onnx"), load_external_data=False)
    tensor = proto.graph.initializer[0]
    for entry in tensor.external_data:
        if entry.key == "location":
            entry.value = location
    path = folder / "moved.onnx"
    path.write_bytes(proto.SerializeToString())
    return str(path)


@pytest.mark.parametrize("kind", ["absolute", "parent", "symlink"])
def test_locations_leaving_the_model_folder_are_refused(tmp_path, elsewhere, kind):
    outside = tmp_path / "outside.data"
    (tmp_path / "model").mkdir()
    os.replace(_data_file(tmp_path), outside)
    if kind == "absolute":
        location = str(outside)
    elif kind == "parent":
        location = "../outside.data"
    else:
        os.symlink(outside, tmp_path / "model" / "link.data")
        location = "link.data"
    path = _with_location(tmp_path, location)
    with pytest.raises(ModelLoadError, match="tensor 'W'.*(absolute|leaves the model's "
                                             "folder)"):
        heterocc.compile(path)


def _data_file(tmp_path) -> str:
    """A file holding the tensor's bytes, written outside any model folder."""
    model, _ = _model()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    _save_external(model, scratch / "X.onnx")
    return str(scratch / "X.onnx.data")


def test_a_missing_external_file_is_named(tmp_path, elsewhere):
    path = _with_location(tmp_path, "gone.data")
    with pytest.raises(ModelLoadError, match="tensor 'W'.*'gone.data'.*not a regular file"):
        load_model(path)


@pytest.mark.slow
def test_a_dynamo_export_with_external_data_compiles_from_another_folder(tmp_path, elsewhere):
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxscript")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(64, 64), torch.nn.Linear(64, 8)

        def forward(self, x):
            return self.b(torch.relu(self.a(x)))

    torch.manual_seed(0)
    net = Net().eval()
    x = torch.randn(2, 64)
    folder = tmp_path / "export"
    folder.mkdir()
    torch.onnx.export(net, (x,), str(folder / "net.onnx"), dynamo=True, external_data=True)
    assert (folder / "net.onnx.data").is_file()
    expected = net(x).detach().numpy()
    for path in (str(folder / "net.onnx"), os.path.join("..", "export", "net.onnx")):
        got = heterocc.compile(path).run([x.numpy()])[0]
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
