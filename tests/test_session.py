"""heterocc.InferenceSession: ONNX Runtime's session interface, checked against it."""

import numpy as np
import onnx
import pytest

import heterocc
from heterocc.errors import InputError
from heterocc.models import tiny_cnn


def test_session_matches_onnx_runtime_names_types_and_outputs(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(), str(path))
    ours = heterocc.InferenceSession(str(path), target="llvm")
    theirs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for mine, other in [*zip(ours.get_inputs(), theirs.get_inputs()),
                        *zip(ours.get_outputs(), theirs.get_outputs())]:
        assert (mine.name, mine.shape, mine.type) == (other.name, other.shape, other.type)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    name = ours.get_inputs()[0].name
    out = ours.get_outputs()[0].name
    np.testing.assert_allclose(ours.run([out], {name: x})[0],
                               theirs.run([out], {name: x})[0], rtol=1e-4, atol=1e-6)
    assert len(ours.run(None, {name: x})) == len(theirs.get_outputs())
    with pytest.raises(InputError, match="unknown output.*nope"):
        ours.run(["nope"], {name: x})
    artifact = tmp_path / "art"
    ours.model.export(str(artifact))
    loaded = heterocc.InferenceSession(str(artifact))
    assert [o.name for o in loaded.get_outputs()] == [out]
    np.testing.assert_array_equal(loaded.run(None, {name: x})[0], ours.run(None, {name: x})[0])
    with pytest.raises(InputError, match="artifact"):
        heterocc.InferenceSession(str(artifact), target="vta,llvm")
