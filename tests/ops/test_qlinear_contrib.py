"""ONNX Runtime's com.microsoft quantized ops (core/ops/qlinear_contrib.py) against ONNX
Runtime's CPU kernels on one-node models, int8 and uint8.

The references reproduce ONNX Runtime's float32 arithmetic, so the integer results are
compared exactly. Three documented exceptions allow 1 LSB: QLinearAdd, whose reference is
ONNX Runtime's AVX2+FMA kernel (other builds round near ties differently),
QLinearSigmoid, where ONNX Runtime tabulates an approximate logistic function, and
QLinearSoftmax, where it sums a fixed-point table of exponentials.
"""

from __future__ import annotations

import platform
from functools import partial

import numpy as np
import pytest
from onnx import helper, numpy_helper
from single_node_oracle import infer_types, integers

from heterocc.errors import TypeInferenceError
from heterocc.ir.types import TensorType
from heterocc.ops import MS_DOMAIN, get_op, has_op, infer_node_types, op_key

ort = pytest.importorskip("onnxruntime")

BYTE_TYPES = [np.uint8, np.int8]


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


#: QLinearAdd's reference is ONNX Runtime's AVX2 + FMA kernel
AVX2_FMA = platform.machine() in ("x86_64", "AMD64") and {"avx2", "fma"} <= _cpu_flags()


def ort_outputs(op_type: str, inputs, attrs=None, out_dtype=None, feeds=(0,)):
    """ONNX Runtime (CPU, no graph optimizations) on a one-node com.microsoft model;
    inputs at ``feeds`` are graph inputs, the others initializers (as in quantized
    models, whose scales and zero points are constants)."""
    names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
    graph_inputs, initializers, feed = [], [], {}
    for i, (name, x) in enumerate(zip(names, inputs)):
        if x is None:
            continue
        if i in feeds:
            graph_inputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape))
            feed[name] = x
        else:
            initializers.append(numpy_helper.from_array(x, name))
    node = helper.make_node(op_type, names, ["y"], domain=MS_DOMAIN, **(attrs or {}))
    out = helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(
        np.dtype(out_dtype or inputs[0].dtype)), None)
    model = helper.make_model(helper.make_graph([node], "single", graph_inputs, [out],
                                                initializers),
                              opset_imports=[helper.make_opsetid("", 18),
                                             helper.make_opsetid(MS_DOMAIN, 1)])
    model.ir_version = 9
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feed)[0]


def reference(op_type: str, inputs, attrs=None) -> np.ndarray:
    """The registered op's output, checked against its own type inference."""
    op = get_op(op_type, MS_DOMAIN)
    full = op.normalize_attrs(dict(attrs or {}))
    (inferred,) = infer_node_types(op, [TensorType.of(x) if x is not None else None
                                        for x in inputs], list(inputs), full, 1)
    (y,) = op.run(list(inputs), full)
    assert TensorType.of(y) == inferred
    return y


def check(op_type, inputs, attrs=None, out_dtype=None, feeds=(0,), lsb=0):
    """Reference vs ONNX Runtime: equal, or within ``lsb`` steps of the output type."""
    got = reference(op_type, inputs, attrs)
    expected = ort_outputs(op_type, inputs, attrs, out_dtype, feeds)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if got.dtype.kind == "f":
        np.testing.assert_array_equal(got, expected)
        return got
    diff = np.abs(got.astype(np.int64) - expected.astype(np.int64))
    assert diff.max(initial=0) <= lsb, f"{op_type}: {int((diff > 0).sum())} of {diff.size} " \
        f"differ, by up to {diff.max()} LSB"
    return got


def scale(rng, low=0.005, high=0.1):
    return np.array(rng.uniform(low, high), np.float32)


def zero_point(rng, dtype):
    return np.array(integers((), dtype, rng))


# --------------------------------------------------------------------------- registry


def test_contrib_ops_are_registered_under_their_domain():
    for name in ("QGemm", "QLinearAdd", "QLinearMul", "QLinearGlobalAveragePool",
                 "QLinearAveragePool", "QLinearConcat", "QLinearSigmoid", "QLinearLeakyRelu",
                 "QLinearSoftmax"):
        assert has_op(name, MS_DOMAIN) and not has_op(name)
        op = get_op(name, MS_DOMAIN)
        assert op.name == op_key(name, MS_DOMAIN) == f"com.microsoft.{name}"
        assert op.domain == MS_DOMAIN and op.op_type == name
        assert get_op(op.name) is op  # the IR name finds it too
    assert get_op("Conv", "ai.onnx") is get_op("Conv") and get_op("Conv").domain == ""


def test_a_domain_keeps_same_named_ops_apart():
    from heterocc.ops import FusionKind, register_op
    from heterocc.ops.registry import _REGISTRY

    key = op_key("Relu", "org.example")
    try:
        register_op("Relu", infer=lambda ctx: [ctx.type(0)], fusion=FusionKind.ELEMWISE,
                    domain="org.example")(lambda x: -x)
        assert get_op("Relu", "org.example") is not get_op("Relu")
        with pytest.raises(ValueError, match="registered twice"):
            register_op("Relu", infer=lambda ctx: [ctx.type(0)],
                        fusion=FusionKind.ELEMWISE, domain="org.example")(lambda x: x)
    finally:
        _REGISTRY.pop(key, None)


# --------------------------------------------------------------------------- QLinearAdd / Mul


BROADCASTS = [((2, 3, 5, 7), (2, 3, 5, 7)), ((2, 3, 5, 7), (1, 3, 1, 1)),
              ((1, 3, 1, 1), (2, 3, 5, 7)), ((2, 3, 5, 7), ()), ((2, 3, 5, 7), (7,)),
              ((4, 1), (4, 33))]


@pytest.mark.parametrize("dtype", BYTE_TYPES)
@pytest.mark.parametrize("shapes", BROADCASTS)
@pytest.mark.parametrize("ties", [False, True])
def test_qlinear_add_matches_onnxruntime(dtype, shapes, ties):
    rng = np.random.default_rng(len(shapes[1]) + 7 * ties)
    for _ in range(6):
        c_scale = scale(rng)
        # scales in ratio 2 and 4 to C's put many sums exactly on a rounding tie
        a_scale = np.float32(c_scale / 2) if ties else scale(rng)
        b_scale = np.float32(c_scale / 4) if ties else scale(rng)
        inputs = [integers(shapes[0], dtype, rng), np.array(a_scale), zero_point(rng, dtype),
                  integers(shapes[1], dtype, rng), np.array(b_scale), zero_point(rng, dtype),
                  c_scale, zero_point(rng, dtype)]
        check("QLinearAdd", inputs, feeds=(0, 3), lsb=0 if AVX2_FMA else 1)


@pytest.mark.parametrize("dtype", BYTE_TYPES)
@pytest.mark.parametrize("shapes", BROADCASTS)
def test_qlinear_mul_matches_onnxruntime(dtype, shapes):
    rng = np.random.default_rng(len(shapes[0]))
    for _ in range(6):
        inputs = [integers(shapes[0], dtype, rng), scale(rng, 0.05, 0.2), zero_point(rng, dtype),
                  integers(shapes[1], dtype, rng), scale(rng, 0.05, 0.2), zero_point(rng, dtype),
                  scale(rng, 0.1, 0.5), zero_point(rng, dtype)]
        check("QLinearMul", inputs, feeds=(0, 3))


def test_qlinear_add_without_zero_points_is_int8_with_zero_offsets():
    rng = np.random.default_rng(3)
    a, b = integers((3, 8), np.int8, rng), integers((3, 8), np.int8, rng)
    s = np.array(0.05, np.float32)
    got = reference("QLinearAdd", [a, s, None, b, s, None, np.array(0.1, np.float32)])
    zeros = [np.array(0, np.int8)] * 3
    np.testing.assert_array_equal(got, reference("QLinearAdd", [
        a, s, zeros[0], b, s, zeros[1], np.array(0.1, np.float32), zeros[2]]))


# --------------------------------------------------------------------------- pooling


@pytest.mark.parametrize("dtype", BYTE_TYPES)
@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_global_average_pool_matches_onnxruntime(dtype, channels_last):
    rng = np.random.default_rng(channels_last)
    for shape in ((2, 6, 7, 5), (1, 16, 1, 1), (1, 3, 50), (1, 4, 3, 3, 3)):
        inputs = [integers(shape, dtype, rng), scale(rng), zero_point(rng, dtype),
                  scale(rng, 0.001, 0.05), zero_point(rng, dtype)]
        check("QLinearGlobalAveragePool", inputs, {"channels_last": channels_last})


POOLS = [{"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]},
         {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
         {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},
         {"kernel_shape": [3, 2], "auto_pad": "SAME_UPPER"},
         {"kernel_shape": [3, 3], "pads": [1, 0, 1, 2], "channels_last": 1}]


@pytest.mark.parametrize("dtype", BYTE_TYPES)
@pytest.mark.parametrize("attrs", POOLS, ids=lambda a: "-".join(sorted(a)))
def test_qlinear_average_pool_matches_onnxruntime(dtype, attrs):
    rng = np.random.default_rng(len(attrs))
    for _ in range(3):
        inputs = [integers((2, 4, 9, 7), dtype, rng), scale(rng), zero_point(rng, dtype),
                  scale(rng), zero_point(rng, dtype)]
        check("QLinearAveragePool", inputs, attrs)


# --------------------------------------------------------------------------- QLinearConcat


@pytest.mark.parametrize("dtype", BYTE_TYPES)
@pytest.mark.parametrize("axis", [1, -1])
def test_qlinear_concat_matches_onnxruntime(dtype, axis):
    rng = np.random.default_rng(axis + 5)
    y_scale, y_zero = scale(rng), zero_point(rng, dtype)
    shapes = [(2, 3, 4), (2, 5, 4), (2, 1, 4)] if axis == 1 else [(2, 3, 4), (2, 3, 1)]
    inputs, feeds = [y_scale, y_zero], []
    for k, shape in enumerate(shapes):
        feeds.append(len(inputs))
        # the second input shares Y's parameters: ONNX Runtime copies it
        params = [y_scale, y_zero] if k == 1 else [scale(rng), zero_point(rng, dtype)]
        inputs += [integers(shape, dtype, rng), *params]
    check("QLinearConcat", inputs, {"axis": axis}, out_dtype=dtype, feeds=tuple(feeds))


# --------------------------------------------------------------------------- lookup tables


@pytest.mark.parametrize("dtype", BYTE_TYPES)
def test_qlinear_sigmoid_matches_onnxruntime(dtype):
    rng = np.random.default_rng(11)
    x = np.arange(np.iinfo(dtype).min, int(np.iinfo(dtype).max) + 1).astype(dtype)
    for _ in range(10):  # every input value, so every entry of ONNX Runtime's table
        inputs = [x, scale(rng, 0.01, 0.1), zero_point(rng, dtype), scale(rng, 0.002, 0.01),
                  zero_point(rng, dtype)]
        check("QLinearSigmoid", inputs, lsb=1)


@pytest.mark.parametrize("dtype", BYTE_TYPES)
@pytest.mark.parametrize("axis,opset", [(-1, 13), (1, 13), (1, 12), (-1, 11)])
def test_qlinear_softmax_matches_onnxruntime(dtype, axis, opset):
    """Within 1 LSB (ONNX Runtime sums a fixed-point table of exponentials), exact at
    the 1/256 output scale the quantizer gives a softmax; before opset 13 the
    dimensions from ``axis`` on are normalized as one."""
    rng = np.random.default_rng(13)
    info = np.iinfo(dtype)
    attrs = {"axis": axis, "opset": opset}
    for y_scale in (np.array(1 / 256, np.float32), scale(rng, 0.001, 0.01)):
        x = integers((2, 5, 24), dtype, rng)
        y_zero = np.array(info.min, dtype)
        inputs = [x, scale(rng, 0.01, 0.3), zero_point(rng, dtype), y_scale, y_zero]
        check("QLinearSoftmax", inputs, attrs, lsb=0 if y_scale == np.float32(1 / 256) else 1)


@pytest.mark.parametrize("dtype", BYTE_TYPES)
@pytest.mark.parametrize("alpha", [None, 0.1, 0.3])
def test_qlinear_leaky_relu_matches_onnxruntime(dtype, alpha):
    rng = np.random.default_rng(12)
    x = np.arange(np.iinfo(dtype).min, int(np.iinfo(dtype).max) + 1).astype(dtype)
    attrs = {} if alpha is None else {"alpha": alpha}
    for _ in range(10):
        inputs = [x, scale(rng, 0.01, 0.1), zero_point(rng, dtype), scale(rng, 0.002, 0.05),
                  zero_point(rng, dtype)]
        check("QLinearLeakyRelu", inputs, attrs)


# --------------------------------------------------------------------------- QGemm


def qgemm_inputs(rng, dtype, trans_a, trans_b, per_column, bias, quantized_output,
                 weight_bits=7, shape=(5, 33, 7)):
    m, k, n = shape
    # 7-bit weights, as ONNX Runtime's reduce_range: its AVX2 u8 x s8 kernel saturates
    # pairs of products in int16 with full-range weights (see the test below)
    half = 1 << (weight_bits - 1)
    b = rng.integers(-half, half, (n, k) if trans_b else (k, n)).astype(np.int8)
    b_scale = (rng.uniform(0.001, 0.01, n).astype(np.float32) if per_column
               else scale(rng, 0.001, 0.01))
    b_zero = np.zeros(n, np.int8) if per_column else np.array(0, np.int8)
    inputs = [integers((k, m) if trans_a else (m, k), dtype, rng), scale(rng, 0.01, 0.05),
              zero_point(rng, dtype), b, b_scale, b_zero,
              rng.integers(-5000, 5000, bias).astype(np.int32) if bias else None]
    if quantized_output:
        inputs += [scale(rng, 0.01, 0.1), zero_point(rng, dtype)]
    return inputs


@pytest.mark.parametrize("dtype", BYTE_TYPES)
@pytest.mark.parametrize("trans_a,trans_b,alpha,bias,quantized_output,per_column", [
    (0, 1, 1.0, (7,), True, True), (0, 0, 1.0, (7,), True, False),
    (1, 0, 0.5, None, True, True), (0, 1, 2.0, (7,), False, True),
    (0, 1, 1.0, (1, 7), True, False), (0, 0, 1.0, (5, 7), True, True),
    (0, 1, 1.0, (5, 1), False, False), (1, 1, 0.25, (), True, True)])
def test_qgemm_matches_onnxruntime(dtype, trans_a, trans_b, alpha, bias, quantized_output,
                                   per_column):
    rng = np.random.default_rng(21)
    for _ in range(3):
        inputs = qgemm_inputs(rng, dtype, trans_a, trans_b, per_column, bias,
                              quantized_output)
        check("QGemm", inputs, {"alpha": alpha, "transA": trans_a, "transB": trans_b},
              out_dtype=dtype if quantized_output else np.float32)


def test_qgemm_reference_is_exact_integer_arithmetic_with_full_range_weights():
    """With full-range int8 weights ONNX Runtime's AVX2 kernel (no VNNI) may saturate
    pair sums of u8 x s8 products; the reference keeps the exact int32 accumulator."""
    rng = np.random.default_rng(5)
    inputs = qgemm_inputs(rng, np.uint8, 0, 1, True, (7,), False, weight_bits=8)
    a, sa, za, b, sb, zb, c = inputs
    exact = (a.astype(np.int64) - za) @ (b.astype(np.int64) - zb[:, None]).T + c
    expected = exact.astype(np.float32) * (np.float32(sa) * sb).astype(np.float32)
    np.testing.assert_array_equal(reference("QGemm", inputs, {"transB": 1}), expected)


# --------------------------------------------------------------------------- type errors


#: type inference of this file's ops (the com.microsoft domain)
infer = partial(infer_types, domain=MS_DOMAIN)


def t(shape, dtype):
    return TensorType(tuple(shape), dtype)


def test_type_inference_rejects_mixed_or_unquantized_types():
    f, u8, i8 = t((), "float32"), t((), "uint8"), t((), "int8")
    with pytest.raises(TypeInferenceError, match="one dtype"):
        infer("QLinearAdd", [t((2,), "uint8"), f, u8, t((2,), "int8"), f, i8, f, u8])
    with pytest.raises(TypeInferenceError, match="dtype"):
        infer("QLinearSigmoid", [t((2,), "float32"), f, None, f, None])
    with pytest.raises(TypeInferenceError, match="must have one element"):
        infer("QLinearMul", [t((2,), "uint8"), t((2,), "float32"), u8, t((2,), "uint8"), f,
                             u8, f, u8])
    with pytest.raises(TypeInferenceError, match="needs y_scale"):
        infer("QGemm", [t((2, 3), "uint8"), f, u8, t((3, 4), "int8"), f, i8, None, None, u8])
    with pytest.raises(TypeInferenceError, match="broadcast"):
        infer("QGemm", [t((2, 3), "uint8"), f, u8, t((3, 4), "int8"), f, i8, t((3,), "int32")])
    with pytest.raises(TypeInferenceError, match="tuple|per input"):
        infer("QLinearConcat", [f, u8, t((2,), "uint8"), f], {"axis": 0})


def test_type_inference_gives_each_output_type():
    f, u8, i8 = t((), "float32"), t((), "uint8"), t((), "int8")
    assert infer("QGemm", [t((2, 3), "uint8"), f, u8, t((4, 3), "int8"), t((4,), "float32"),
                           t((4,), "int8"), t((4,), "int32")], {"transB": 1}) == \
        [t((2, 4), "float32")]
    assert infer("QGemm", [t((2, 3), "int8"), f, i8, t((3, 4), "int8"), f, i8, None, f, i8]) \
        == [t((2, 4), "int8")]
    assert infer("QLinearGlobalAveragePool", [t((1, 5, 5, 8), "uint8"), f, u8, f, u8],
                 {"channels_last": 1}) == [t((1, 1, 1, 8), "uint8")]
    assert infer("QLinearAveragePool", [t((1, 8, 9, 9), "int8"), f, i8, f, i8],
                 {"kernel_shape": [3, 3], "strides": [2, 2]}) == [t((1, 8, 4, 4), "int8")]
    assert infer("QLinearConcat", [f, u8, t((1, 2), "uint8"), f, u8, t((1, 3), "uint8"), f,
                                   u8], {"axis": 1}) == [t((1, 5), "uint8")]
