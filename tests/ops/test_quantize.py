"""Quantization ops (core/ops/quantize.py) against onnx.reference, with exact integer checks."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto
from single_node_oracle import check_inferred, compare_with_onnx, infer, integers, normal, rng

from heterocc.errors import TypeInferenceError
from heterocc.ops import FusionKind, get_op

# --------------------------------------------------------------------------- QuantizeLinear


@pytest.mark.parametrize("zero_dtype", [np.uint8, np.int8, np.uint16, np.int16])
def test_quantize_per_tensor_matches_onnx(zero_dtype):
    x = normal((3, 4, 5)) * 40
    zero = np.array(3, zero_dtype)
    compare_with_onnx("QuantizeLinear", [x, np.array(0.25, np.float32), zero])


def test_quantize_rounds_half_to_even_and_saturates():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 300.0, -300.0, 127.5], np.float32)
    (y,) = compare_with_onnx("QuantizeLinear", [x, np.array(1, np.float32), np.array(0, np.int8)])
    np.testing.assert_array_equal(y, [0, 2, 2, 0, -2, 127, -128, 127])


def test_quantize_per_axis_and_blocked_match_onnx():
    x = normal((2, 6, 5)) * 10
    scale = (rng(1).random(6) + 0.1).astype(np.float32)
    zero = integers((6,), np.int8, seed=2)
    compare_with_onnx("QuantizeLinear", [x, scale, zero], {"axis": 1})
    blocked_scale = (rng(3).random((2, 6, 2)) + 0.1).astype(np.float32)
    blocked_zero = integers((2, 6, 2), np.uint8, seed=4)
    compare_with_onnx("QuantizeLinear", [x, blocked_scale, blocked_zero],
                      {"axis": -1, "block_size": 3})


def test_quantize_output_dtype_without_zero_point_and_default_uint8():
    x = normal((4, 3)) * 100
    (y,) = compare_with_onnx("QuantizeLinear", [x, np.array(0.5, np.float32)],
                             {"output_dtype": TensorProto.INT16})
    assert y.dtype == np.int16
    (y,) = compare_with_onnx("QuantizeLinear", [x, np.array(0.5, np.float32)])
    assert y.dtype == np.uint8


def test_quantize_float16_input():
    x = normal((8,), np.float16) * 20
    compare_with_onnx("QuantizeLinear", [x, np.array(0.3, np.float16), np.array(5, np.uint8)])


def test_quantize_errors_name_the_problem():
    x = normal((2, 6))
    with pytest.raises(TypeInferenceError, match=r"must be a scalar or have shape \(6,\)"):
        infer("QuantizeLinear", [x, np.ones(4, np.float32)])
    with pytest.raises(TypeInferenceError, match="output_dtype int16 differs"):
        infer("QuantizeLinear", [x, np.ones((), np.float32), np.zeros((), np.int8)],
              {"output_dtype": TensorProto.INT16})
    with pytest.raises(TypeInferenceError, match="output_dtype has dtype float8_e4m3fn"):
        infer("QuantizeLinear", [x, np.ones((), np.float32)], {"output_dtype": 17})
    with pytest.raises(TypeInferenceError, match="precision has dtype bfloat16"):
        infer("QuantizeLinear", [x, np.ones((), np.float32)], {"precision": 16})
    with pytest.raises(TypeInferenceError, match="blocked quantization"):
        infer("QuantizeLinear", [x, np.ones((2, 4), np.float32)], {"block_size": 2})


# --------------------------------------------------------------------------- DequantizeLinear


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16, np.int32])
def test_dequantize_per_tensor_matches_onnx(dtype):
    x = integers((3, 5), dtype)
    zero = None if dtype == np.int32 else np.array(7, dtype)
    compare_with_onnx("DequantizeLinear", [x, np.array(0.125, np.float32), zero])


def test_dequantize_per_axis_blocked_and_output_dtype():
    x = integers((4, 6), np.int8)
    scale = (rng(1).random(4) + 0.1).astype(np.float32)
    compare_with_onnx("DequantizeLinear", [x, scale, integers((4,), np.int8, 2)], {"axis": 0})
    blocked = (rng(3).random((4, 3)) + 0.1).astype(np.float32)
    compare_with_onnx("DequantizeLinear", [x, blocked, integers((4, 3), np.int8, 4)],
                      {"axis": 1, "block_size": 2})
    (y,) = compare_with_onnx("DequantizeLinear", [x, np.array(0.5, np.float32)],
                             {"output_dtype": TensorProto.FLOAT16})
    assert y.dtype == np.float16


def test_dequantize_of_quantize_is_within_half_a_step():
    x = normal((50,)) * 3
    scale, zero = np.array(0.05, np.float32), np.array(0, np.int8)
    (q,) = check_inferred("QuantizeLinear", [x, scale, zero])
    (back,) = check_inferred("DequantizeLinear", [q, scale, zero])
    inside = np.abs(x) < 127 * 0.05
    assert np.all(np.abs(back - x)[inside] <= 0.025 + 1e-6)


def test_dequantize_rejects_mismatched_zero_point():
    with pytest.raises(TypeInferenceError, match="x_zero_point .* must have x's dtype int8"):
        infer("DequantizeLinear", [integers((3,), np.int8), np.ones((), np.float32),
                                   np.zeros((), np.uint8)])


# --------------------------------------------------------------------------- DynamicQuantizeLinear


@pytest.mark.parametrize("values", [
    normal((3, 4)), np.abs(normal((5,))) + 1, -np.abs(normal((2, 3))) - 1,
    np.zeros((4,), np.float32),
])
def test_dynamic_quantize_matches_onnx(values):
    y, scale, zero = compare_with_onnx("DynamicQuantizeLinear", [values.astype(np.float32)],
                                       num_outputs=3)
    assert (y.dtype, scale.dtype, zero.dtype) == (np.uint8, np.float32, np.uint8)


def test_dynamic_quantize_is_opaque_and_float32_only():
    assert get_op("DynamicQuantizeLinear").fusion_kind is FusionKind.OPAQUE
    with pytest.raises(TypeInferenceError, match="x has dtype float16"):
        infer("DynamicQuantizeLinear", [normal((3,), np.float16)], num_outputs=3)


# --------------------------------------------------------------------------- integer matmul / conv


@pytest.mark.parametrize("a_dtype,b_dtype", [(np.uint8, np.uint8), (np.int8, np.int8),
                                             (np.uint8, np.int8)])
def test_matmul_integer_matches_onnx(a_dtype, b_dtype):
    a, b = integers((2, 3, 4), a_dtype), integers((4, 5), b_dtype, 1)
    compare_with_onnx("MatMulInteger", [a, b, np.array(12, a_dtype), integers((5,), b_dtype, 2)])
    compare_with_onnx("MatMulInteger", [a, b])


def test_matmul_integer_per_row_zero_point_of_a():
    a, b = integers((3, 4), np.uint8), integers((4, 2), np.uint8, 1)
    zero = np.array([1, 2, 3], np.uint8)
    (y,) = check_inferred("MatMulInteger", [a, b, zero])
    expected = (a.astype(np.int64) - zero[:, None]) @ b.astype(np.int64)
    np.testing.assert_array_equal(y, expected)


def test_matmul_integer_accumulates_in_int32():
    a = np.full((1, 512), 255, np.uint8)
    b = np.full((512, 1), 255, np.uint8)
    (y,) = check_inferred("MatMulInteger", [a, b])
    assert y.dtype == np.int32 and y[0, 0] == 255 * 255 * 512


@pytest.mark.parametrize("dtype,scale_dtype", [(np.uint8, np.float32), (np.int8, np.float32),
                                               (np.uint8, np.float16)])
def test_qlinear_matmul_matches_onnx(dtype, scale_dtype):
    a, b = integers((2, 3, 4), dtype), integers((4, 5), dtype, 1)

    def scalar(value, kind):
        return np.array(value, kind)

    compare_with_onnx("QLinearMatMul", [
        a, scalar(0.05, scale_dtype), scalar(3, dtype), b, scalar(0.02, scale_dtype),
        scalar(1, dtype), scalar(0.3, scale_dtype), scalar(10, dtype)])


def test_qlinear_matmul_per_column_scale():
    a, b = integers((3, 4), np.int8), integers((4, 5), np.int8, 1)
    b_scale = (rng(2).random(5) * 0.05 + 0.01).astype(np.float32)
    compare_with_onnx("QLinearMatMul", [
        a, np.array(0.05, np.float32), np.array(0, np.int8), b, b_scale,
        np.zeros(5, np.int8), np.array(0.2, np.float32), np.array(-3, np.int8)])


CONV_CASES = [({}, (1, 3, 5, 5), (4, 3, 3, 3)),
              ({"pads": [1, 1, 1, 1], "strides": [2, 2]}, (2, 2, 6, 5), (3, 2, 3, 2)),
              ({"group": 2, "dilations": [2, 1]}, (1, 4, 6, 6), (4, 2, 2, 2)),
              ({"auto_pad": "SAME_UPPER"}, (1, 2, 7), (2, 2, 3))]


@pytest.mark.parametrize("attrs,x_shape,w_shape", CONV_CASES)
def test_conv_integer_matches_onnx(attrs, x_shape, w_shape):
    x, w = integers(x_shape, np.uint8), integers(w_shape, np.uint8, 1)
    compare_with_onnx("ConvInteger", [x, w, np.array(100, np.uint8), np.array(3, np.uint8)],
                      attrs)


# ONNX's reference expands per-channel scales for 2-D convs only; 1-D is checked below
@pytest.mark.parametrize("attrs,x_shape,w_shape", [c for c in CONV_CASES if len(c[1]) == 4])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_conv_matches_onnx(attrs, x_shape, w_shape, dtype):
    x, w = integers(x_shape, dtype), integers(w_shape, np.int8, 1)
    channels = w_shape[0]
    w_scale = (rng(2).random(channels) * 0.01 + 0.001).astype(np.float32)
    bias = rng(3).integers(-1000, 1000, channels).astype(np.int32)
    compare_with_onnx("QLinearConv", [
        x, np.array(0.02, np.float32), np.array(5, dtype), w, w_scale,
        np.zeros(channels, np.int8), np.array(0.1, np.float32), np.array(-2, dtype)
        if dtype == np.int8 else np.array(128, dtype), bias], attrs)


def test_qlinear_conv_1d_matches_float_reference():
    x, w = integers((1, 2, 7), np.uint8), integers((2, 2, 3), np.int8, 1)
    x_scale, w_scale, y_scale = np.float32(0.02), np.float32(0.01), np.float32(0.05)
    (y,) = check_inferred("QLinearConv", [
        x, np.array(x_scale), np.array(7, np.uint8), w, np.array(w_scale), np.array(0, np.int8),
        np.array(y_scale), np.array(100, np.uint8)], {"pads": [1, 1]})
    acc = check_inferred("ConvInteger", [x, w, np.array(7, np.uint8)], {"pads": [1, 1]})[0]
    multiplier = np.float32(x_scale * w_scale / y_scale)
    expected = np.clip(np.rint(acc * np.float64(multiplier)) + 100, 0, 255)
    np.testing.assert_array_equal(y, expected.astype(np.uint8))


def test_quantized_conv_and_matmul_are_out_fusable():
    for op_type in ("QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger"):
        assert get_op(op_type).fusion_kind is FusionKind.OUT_FUSABLE


def test_integer_op_errors_name_the_problem():
    with pytest.raises(TypeInferenceError, match="A has dtype float32"):
        infer("MatMulInteger", [normal((2, 3)), integers((3, 2), np.uint8)])
    with pytest.raises(TypeInferenceError, match=r"w_zero_point .* shape \(4,\)"):
        infer("ConvInteger", [integers((1, 3, 5, 5), np.uint8), integers((4, 3, 3, 3), np.uint8),
                              None, np.zeros(3, np.uint8)])
    with pytest.raises(TypeInferenceError, match="bias B .* must be int32"):
        infer("QLinearConv", [
            integers((1, 1, 3, 3), np.uint8), np.ones((), np.float32), np.zeros((), np.uint8),
            integers((1, 1, 2, 2), np.uint8), np.ones((), np.float32), np.zeros((), np.uint8),
            np.ones((), np.float32), np.zeros((), np.uint8), np.zeros(1, np.int64)])
