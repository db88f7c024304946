"""``CompiledModel.fallbacks``: the functions that run on the NumPy references instead of
compiled code, with their targets' reasons, for the specialization compiled last."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import heterocc
from heterocc.errors import InputError
from heterocc.targets.llvm import LLVMTarget


def _model(dims, mode: str = "linear"):
    """Relu, then a 2x Resize of ``mode`` (cubic has no compute: it falls back)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [dims[0], 2, 8, 8])
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Resize", ["r", "", "scales"], ["y"], mode=mode)]
    graph = helper.make_graph(nodes, "g", [x], [y], [scales])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def test_a_fully_compiled_model_has_no_fallbacks():
    assert heterocc.compile(_model([1, 2, 4, 4]), target="llvm").fallbacks == {}


def test_a_function_without_compiled_code_is_listed_with_its_reason():
    compiled = heterocc.compile(_model([1, 2, 4, 4], mode="cubic"), target="llvm")
    fallbacks = compiled.fallbacks
    assert len(fallbacks) == 1
    ((name, reason),) = fallbacks.items()
    assert name in {n.name for n in compiled.graph.nodes} and "cubic" in reason
    x = np.random.default_rng(0).standard_normal((1, 2, 4, 4)).astype(np.float32)
    expected = heterocc.compile(_model([1, 2, 4, 4], mode="cubic"), target="reference")
    np.testing.assert_allclose(compiled.run([x])[0], expected.run([x])[0], rtol=1e-6)


def test_dynamic_shapes_have_fallbacks_once_run_and_each_specialization_its_own():
    target = LLVMTarget()  # one instance serves every specialization
    compiled = heterocc.compile(_model(["n", 2, 4, 4], mode="cubic"), target=[target])
    with pytest.raises(InputError, match="run it once"):
        compiled.fallbacks  # noqa: B018 -- the property raises
    compiled.run([np.zeros((1, 2, 4, 4), np.float32)])
    first = compiled.fallbacks
    compiled.run([np.zeros((3, 2, 4, 4), np.float32)])
    second = compiled.fallbacks
    assert len(first) == len(second) == 1
    assert set(target.fallbacks) == set(first) | set(second)
    assert set(second) <= {n.name for n in compiled.graph.nodes}
