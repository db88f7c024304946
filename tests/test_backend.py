import functools

import numpy as np
import pytest
from onnx import helper

import heterocc.backend as backend
from heterocc.errors import TargetError
from tests.conftest import make_model


@functools.cache
def _all_node_cases():
    from onnx.backend.test.case.node import collect_testcases

    return {c.name: c for c in collect_testcases(None)}


def _node_case(name):
    return _all_node_cases()[name]


def _model():
    nodes = [helper.make_node("MatMul", ["a", "b"], ["m"]),
             helper.make_node("Relu", ["m"], ["y"])]
    return make_model(nodes, [("a", "float32", [2, 3]), ("b", "float32", [3, 4])],
                      [("y", "float32", None)])


def test_prepare_and_run_positional(rng):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal((3, 4)).astype(np.float32)
    rep = backend.prepare(_model(), "CPU", target="reference")
    (y,) = rep.run([a, b])
    np.testing.assert_allclose(y, np.maximum(a @ b, 0), rtol=1e-6)


def test_run_model_with_named_inputs(rng):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.standard_normal((3, 4)).astype(np.float32)
    (y,) = backend.run_model(_model(), {"b": b, "a": a}, target="reference")
    np.testing.assert_allclose(y, np.maximum(a @ b, 0), rtol=1e-6)


def test_supports_device():
    assert backend.supports_device("CPU")
    assert not backend.supports_device("FPGA")


def test_unknown_target_is_named():
    with pytest.raises(TargetError, match="unknown target.*nosuch"):
        backend.prepare(_model(), "CPU", target="nosuch")


@pytest.mark.parametrize("op, name", [("Conv", "test_conv_with_strides_padding"),
                                      ("Gemm", "test_gemm_default_no_bias"),
                                      ("Reshape", "test_reshape_negative_dim"),
                                      ("Softmax", "test_softmax_axis_1"),
                                      ("Slice", "test_slice_neg_steps"),
                                      ("Gather", "test_gather_negative_indices")])
def test_onnx_node_cases_through_the_backend(op, name):
    case = _node_case(name)
    assert case.model.graph.node[0].op_type == op
    rep = backend.prepare(case.model, "CPU", target="reference")
    for inputs, expected in case.data_sets:
        outputs = rep.run(inputs)
        for out, ref in zip(outputs, expected):
            np.testing.assert_allclose(out, ref, rtol=case.rtol, atol=case.atol)
