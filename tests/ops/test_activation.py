"""Activation functions (core/ops/activation.py) against onnx.reference, plus the
legacy-opset forms of PRelu and Clip and the error messages."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from single_node_oracle import check_inferred, compare_with_onnx, infer, infer_error, normal

from heterocc.errors import TypeInferenceError
from heterocc.ir.types import TensorType
from heterocc.ops import FusionKind, get_op


def values(shape, dtype="float32", low=-4.0, high=4.0, seed=0) -> np.ndarray:
    generator = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return generator.integers(int(low), int(high), shape, endpoint=True).astype(dtype)
    return generator.uniform(low, high, shape).astype(dtype)


def tolerance(dtype) -> dict:
    # ONNX's reference computes float16 in float16; ours in float32, then rounds
    return {"rtol": 5e-3, "atol": 5e-3} if np.dtype(dtype) == np.float16 else {}


UNARY_ACTIVATIONS = [
    ("Relu", {}), ("LeakyRelu", {}), ("LeakyRelu", {"alpha": 0.3}), ("Sigmoid", {}),
    ("HardSigmoid", {}), ("HardSigmoid", {"alpha": 0.4, "beta": 0.3}), ("HardSwish", {}),
    ("Tanh", {}), ("Softplus", {}), ("Softsign", {}), ("Elu", {}), ("Elu", {"alpha": 0.5}),
    ("Selu", {}), ("Selu", {"alpha": 2.0, "gamma": 3.0}), ("Celu", {}), ("Celu", {"alpha": 2.0}),
    ("ThresholdedRelu", {}), ("ThresholdedRelu", {"alpha": 0.5}), ("Gelu", {}),
    ("Gelu", {"approximate": "tanh"}), ("Mish", {}), ("Swish", {}), ("Swish", {"alpha": 0.5}),
    ("Shrink", {}), ("Shrink", {"bias": 1.5, "lambd": 1.0}),
]


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("op_type,attrs", UNARY_ACTIVATIONS)
def test_activation_matches_onnx(op_type, attrs, dtype):
    compare_with_onnx(op_type, [values((2, 3, 5), dtype)], attrs, **tolerance(dtype))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # raised by onnx.reference, not by us
@pytest.mark.parametrize("op_type", ["Sigmoid", "Softplus", "Mish", "Swish", "Elu", "Gelu"])
def test_activation_saturates_without_overflow(op_type):
    x = np.array([-1000.0, -80.0, 0.0, 80.0, 1000.0], np.float32)
    got = compare_with_onnx(op_type, [x])[0]
    assert np.isfinite(got).all()


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_relu_and_shrink_on_integers(dtype):
    x = values((4, 5), dtype, -10, 10)
    compare_with_onnx("Relu", [x])
    compare_with_onnx("Shrink", [x], {"bias": 1.0, "lambd": 2.0})


@pytest.mark.parametrize("x_shape,slope_shape", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)),
                                                 ((2, 3, 4), (3, 1)), ((2, 3, 4), ())])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_prelu_broadcasts_slope(x_shape, slope_shape, dtype):
    low = -3 if dtype == "int32" else -1
    compare_with_onnx("PRelu", [values(x_shape, dtype), values(slope_shape, dtype, low, 3, 1)],
                      **tolerance(dtype))


def test_prelu_per_channel_slope_of_old_models():
    x, slope = values((2, 3, 4, 5)), values((3,), low=0, high=1, seed=1)
    got = check_inferred("PRelu", [x, slope])[0]
    np.testing.assert_allclose(got, np.where(x >= 0, x, x * slope.reshape(3, 1, 1)))


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "uint8", "int64"])
@pytest.mark.parametrize("bounds", [(1, 3), (None, 3), (1, None), (None, None), (3, 1)])
def test_clip_with_optional_bounds(dtype, bounds):
    x = values((3, 4), dtype, 0, 5)
    inputs = [x] + [None if b is None else np.array(b, dtype) for b in bounds]
    while inputs[-1] is None and len(inputs) > 1:
        inputs.pop()
    compare_with_onnx("Clip", inputs)


def test_clip_takes_one_element_bounds():
    x = values((5,))
    got = check_inferred("Clip", [x, np.array([-1.0], np.float32), np.array([1.0], np.float32)])
    np.testing.assert_array_equal(got[0], np.clip(x, -1, 1))


def test_opset6_clip_bounds_are_attributes():
    x = values((3, 4))
    got = compare_with_onnx("Clip", [x], {"min": -1.0, "max": 0.5}, opset=6)[0]
    np.testing.assert_array_equal(got, np.clip(x, -1.0, 0.5))


def test_every_onnx_attribute_of_every_opset_is_declared():
    history = onnx.defs.get_all_schemas_with_history()
    for op_type, _ in UNARY_ACTIVATIONS + [("PRelu", {}), ("Clip", {})]:
        onnx_attrs = {a for s in history if s.name == op_type and s.domain == ""
                      for a in s.attributes}
        assert onnx_attrs <= set(get_op(op_type).attrs), op_type


def test_errors_name_the_problem_and_fix():
    assert "approximate='erf'" in infer_error("Gelu", [TensorType((3,), "float32")],
                                              {"approximate": "erf"})
    message = infer_error("Sigmoid", [TensorType((3,), "int32")])
    assert message.startswith("Sigmoid (node 'n0'): input 0 has dtype int32")
    assert "insert a Cast" in message
    message = infer_error("PRelu", [TensorType((2, 3, 4), "float32"),
                                    TensorType((5,), "float32")])
    assert "slope float32[5] must broadcast to X float32[2, 3, 4]" in message
    message = infer_error("Clip", [TensorType((3,), "float32"), TensorType((2,), "float32")])
    assert "input 1 must be a scalar, got float32[2]" in message
    message = infer_error("Clip", [TensorType((3,), "float32"), TensorType((), "float64")])
    assert "must share one dtype" in message


def test_fusion_kinds():
    for op_type, _ in UNARY_ACTIVATIONS:
        assert get_op(op_type).fusion_kind == FusionKind.ELEMWISE, op_type
    assert get_op("PRelu").fusion_kind == FusionKind.BROADCAST
    assert get_op("Clip").fusion_kind == FusionKind.BROADCAST


# ------------------------------------------------------------------------------- SwiGLU

@pytest.mark.parametrize("shape,dtype,alpha,tolerance", [
    ((2, 8), np.float32, 1.0, 1e-6),
    ((3, 4, 5), np.float32, 1.702, 1e-6),
    ((6,), np.float64, 0.5, 1e-12),
    ((4, 8), np.float16, 1.0, 2e-3),
])
def test_swiglu_matches_onnx(shape, dtype, alpha, tolerance):
    compare_with_onnx("SwiGLU", [normal(shape, dtype), normal(shape, dtype, seed=1)],
                      {"alpha": alpha}, rtol=tolerance, atol=tolerance)


def test_swiglu_rejects_broadcasting():
    with pytest.raises(TypeInferenceError, match="identical shapes"):
        infer("SwiGLU", [normal((2, 4)), normal((1, 4))])


def test_swiglu_rejects_mixed_dtypes():
    with pytest.raises(TypeInferenceError, match="B \\(input 1\\) has dtype float16"):
        infer("SwiGLU", [normal((2, 4)), normal((2, 4), np.float16)])
