"""TE computes of the quantization ops (core/compute/quantize.py) against the NumPy
references, through the llvm target: bit-exact, and every case really compiled."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import heterocc
from tests.compute.test_elementwise import check, random_array
from tests.conftest import make_model

ONNX_FLOAT64 = TensorProto.DOUBLE


#: the seed of the ``rng`` fixture (tests/conftest.py) in this module
RNG_SEED = 5


def _scales(rng, shape, dtype="float32"):
    return (rng.random(shape) * 0.2 + 0.01).astype(dtype)


def _halfway_values(scale: float, count: int, dtype="float32"):
    """x with x / scale exactly k + 1/2: the round-half-to-even cases."""
    return ((np.arange(count) - count // 2 + 0.5) * scale).astype(dtype)


# ---------------------------------------------------------------- QuantizeLinear


@pytest.mark.parametrize("zero_dtype", ["uint8", "int8", "int16", "uint16", "int32", None])
def test_quantize_per_tensor_rounds_half_to_even_and_saturates(zero_dtype, rng):
    x = np.concatenate([_halfway_values(0.25, 40),
                        random_array(rng, (40,), "float32", high=60.0)]).reshape(8, 10)
    scale = np.array(0.25, np.float32)
    inputs = [x, scale]
    if zero_dtype is not None:
        info = np.iinfo(zero_dtype)
        inputs.append(np.array(min(max(3, info.min), info.max) if info.min == 0 else -3,
                               zero_dtype))
    check("QuantizeLinear", inputs)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_quantize_per_axis(axis, rng):
    x = random_array(rng, (3, 4, 5), "float32", high=3.0)
    size = x.shape[axis]
    scale = _scales(rng, (size,))
    zero = random_array(rng, (size,), "int8", -20, 20)
    check("QuantizeLinear", [x, scale, zero], {"axis": axis})


def test_quantize_blocked_and_with_precision(rng):
    x = random_array(rng, (2, 5, 3), "float32", high=3.0)
    scale = _scales(rng, (2, 3, 3))
    zero = random_array(rng, (2, 3, 3), "uint8", 100, 150)
    check("QuantizeLinear", [x, scale, zero], {"axis": 1, "block_size": 2})
    check("QuantizeLinear", [x, _scales(rng, ())], {"precision": ONNX_FLOAT64})


def test_quantize_integer_input_divides_in_float64(rng):
    x = random_array(rng, (4, 6), "int32", -5000, 5000)
    check("QuantizeLinear", [x, np.array(7, np.int32), np.array(-4, np.int8)])
    check("QuantizeLinear", [x, np.array(3.5, np.float32)], {"output_dtype": TensorProto.INT16})


@pytest.mark.parametrize("out_dtype,zero", [("int8", -7), ("uint8", 250), ("int16", -32000),
                                            ("uint16", 5)])
def test_quantize_float32_tail_is_the_float64_one(out_dtype, zero):
    """Narrow outputs add the zero point and clamp in float32: exact for every quotient,
    those near 2**24 (where float32 stops holding integers) and far past it included."""
    scale = np.float32(0.5)
    near = np.float32(2 ** 24) * np.array([-1, 1], np.float32)
    quotients = np.concatenate([np.arange(-70000, 70000, 13, dtype=np.float32),
                                near[:, None] + np.arange(-300, 300, dtype=np.float32),
                                [-3e38, 3e38, -2.0 ** 31, 2.0 ** 31]], axis=None)
    x = (quotients * scale + np.float32(0.25)).astype(np.float32)
    check("QuantizeLinear", [x, np.array(scale), np.array(zero, out_dtype)], rtol=0, atol=0)


# ---------------------------------------------------------------- DequantizeLinear


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "uint16", "int32"])
def test_dequantize_per_tensor_and_per_axis(dtype, rng):
    x = random_array(rng, (3, 4, 5), dtype)
    zero = random_array(rng, (), dtype)
    check("DequantizeLinear", [x, np.array(0.37, np.float32), zero], rtol=0, atol=0)
    check("DequantizeLinear", [x, _scales(rng, (4,)), random_array(rng, (4,), dtype)],
          {"axis": 1}, rtol=0, atol=0)
    check("DequantizeLinear", [x, _scales(rng, (5,), "float64")], {"axis": -1}, rtol=0, atol=0)


def test_dequantize_blocked_to_float64(rng):
    x = random_array(rng, (4, 7), "int8")
    scale = _scales(rng, (4, 3))
    zero = random_array(rng, (4, 3), "int8")
    check("DequantizeLinear", [x, scale, zero],
          {"axis": 1, "block_size": 3, "output_dtype": ONNX_FLOAT64}, rtol=0, atol=0)


# ---------------------------------------------------------------- integer products


@pytest.mark.parametrize("a_shape,b_shape,dtypes", [
    ((4, 5), (5, 3), ("uint8", "uint8")), ((2, 4, 5), (5, 3), ("int8", "uint8")),
    ((5,), (5, 3), ("uint8", "int8")), ((4, 5), (5,), ("int8", "int8")),
    ((2, 1, 4, 5), (3, 5, 2), ("uint8", "int8")), ((3, 40, 33), (3, 33, 17), ("int8", "uint8"))])
def test_matmul_integer(a_shape, b_shape, dtypes, rng):
    a = random_array(rng, a_shape, dtypes[0])
    b = random_array(rng, b_shape, dtypes[1])
    rows = a_shape[-2] if len(a_shape) > 1 else 1
    a_zero = random_array(rng, (rows,) if rows > 1 else (), dtypes[0])
    b_zero = random_array(rng, (b_shape[-1],) if len(b_shape) > 1 else (), dtypes[1])
    check("MatMulInteger", [a, b, a_zero, b_zero])


def test_matmul_integer_without_zero_points(rng):
    check("MatMulInteger", [random_array(rng, (6, 9), "int8"), random_array(rng, (9, 4), "int8")])


@pytest.mark.parametrize("attrs", [
    {}, {"pads": [1, 1, 1, 1]}, {"strides": [2, 2], "pads": [0, 1, 2, 1]},
    {"dilations": [2, 1], "auto_pad": "SAME_UPPER"}, {"group": 3}])
def test_conv_integer(attrs, rng):
    group = attrs.get("group", 1)
    x = random_array(rng, (2, 3, 9, 8), "uint8")
    w = random_array(rng, (6, 3 // group, 3, 3), "int8")
    x_zero = np.array(128, np.uint8)
    w_zero = random_array(rng, (6,), "int8", -5, 5)
    check("ConvInteger", [x, w, x_zero, w_zero], attrs)
    if not attrs:
        check("ConvInteger", [x, w], attrs)


def test_qlinear_matmul(rng):
    a = random_array(rng, (2, 6, 20), "uint8")
    b = random_array(rng, (20, 7), "int8")
    inputs = [a, np.array(0.02, np.float32), np.array(120, np.uint8),
              b, np.array(0.01, np.float32), np.array(3, np.int8),
              np.array(0.15, np.float32), np.array(-5, np.int8)]
    check("QLinearMatMul", inputs)
    # per-row A scales and per-column B scales, 2-D, uint8 output
    a2 = a[0]
    inputs = [a2, _scales(rng, (6,)), random_array(rng, (6,), "uint8"),
              b, _scales(rng, (7,)), random_array(rng, (7,), "int8"),
              np.array(0.7, np.float32), np.array(128, np.uint8)]
    check("QLinearMatMul", inputs)


@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv(per_channel, rng):
    x = random_array(rng, (1, 4, 7, 7), "uint8")
    w = random_array(rng, (5, 4, 3, 3), "int8")
    w_scale = _scales(rng, (5,)) if per_channel else np.array(0.01, np.float32)
    w_zero = np.zeros(5, np.int8) if per_channel else np.array(0, np.int8)
    bias = random_array(rng, (5,), "int32", -2000, 2000)
    inputs = [x, np.array(0.03, np.float32), np.array(110, np.uint8), w, w_scale, w_zero,
              np.array(0.2, np.float32), np.array(-3, np.int8), bias]
    check("QLinearConv", inputs, {"pads": [1, 1, 1, 1]})
    check("QLinearConv", inputs[:8], {"strides": [2, 2]})


# ---------------------------------------------------------------- Requantize


# ---------------------------------------------------------------- through the whole pipeline


def test_quantize_dequantize_round_trip_through_compile(rng):
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"])]
    model = make_model(nodes, [("x", "float32", [3, 8])], [("y", "float32", [3, 8])],
                       {"scale": np.array(0.05, np.float32), "zero": np.array(7, np.uint8)},
                       opset=21)
    x = random_array(rng, (3, 8), "float32", high=5.0)
    ours = heterocc.compile(model, target="llvm")
    reference = heterocc.compile(model, target="reference")
    np.testing.assert_array_equal(ours.run([x])[0], reference.run([x])[0])
    assert ours.fallbacks == {}


@pytest.mark.parametrize("values", [
    np.array([[0.0, 2.5, -1.25], [7.0, -3.5, 0.1]], np.float32),   # a range across zero
    np.array([1.0, 2.0, 255.0], np.float32),                       # positive only
    np.array([-4.0, -0.5], np.float32),                            # negative only
    np.zeros((2, 2), np.float32),                                  # no range at all
])
def test_dynamic_quantize_linear(values):
    check("DynamicQuantizeLinear", [values])
