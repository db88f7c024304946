"""BitCast, SwiGLU, TensorScatter, CausalConvWithState and LinearAttention
(core/ops/misc.py) against onnx.reference."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto
from single_node_oracle import check_inferred, compare_with_onnx

from heterocc.errors import InputError, TypeInferenceError
from heterocc.ir.types import TensorType
from heterocc.ops import get_op, infer_node_types


def normal(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def infer(op_type, inputs, attrs=None, num_outputs=1):
    op = get_op(op_type)
    types = [TensorType.of(x) if x is not None else None for x in inputs]
    return infer_node_types(op, types, list(inputs), op.normalize_attrs(dict(attrs or {})),
                            num_outputs)


# ------------------------------------------------------------------------------ BitCast

@pytest.mark.parametrize("source,to", [
    (np.float32, TensorProto.INT32),
    (np.int32, TensorProto.FLOAT),
    (np.uint16, TensorProto.FLOAT16),
    (np.float64, TensorProto.UINT64),
    (np.int8, TensorProto.UINT8),
    (np.int16, TensorProto.BFLOAT16),
])
def test_bitcast_matches_onnx(source, to):
    raw = np.random.default_rng(0).integers(0, 256, 12 * np.dtype(source).itemsize, np.uint8)
    compare_with_onnx("BitCast", [raw.view(source).reshape(3, 4)], {"to": to})


def test_bitcast_bool_to_uint8_matches_onnx():
    compare_with_onnx("BitCast", [np.array([True, False, True])], {"to": TensorProto.UINT8})


def test_bitcast_keeps_sub_byte_bit_patterns():
    x = np.array([15, 8, 7, 0], dtype=ml_dtypes.uint4)
    out = check_inferred("BitCast", [x], {"to": TensorProto.INT4})[0]
    assert out.dtype == ml_dtypes.int4
    np.testing.assert_array_equal(out.astype(np.int8), [-1, -8, 7, 0])


def test_bitcast_rejects_different_widths():
    with pytest.raises(TypeInferenceError, match=r"float32 \(32 bits\) as int16 \(16 bits\)"):
        infer("BitCast", [np.zeros(3, np.float32)], {"to": TensorProto.INT16})


def test_bitcast_rejects_strings():
    with pytest.raises(TypeInferenceError, match="no fixed bit width"):
        infer("BitCast", [np.zeros(3, np.float64)], {"to": TensorProto.STRING})


def test_bitcast_requires_to():
    with pytest.raises(TypeInferenceError, match="'to' is required"):
        infer("BitCast", [np.zeros(3, np.float32)])


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


# ------------------------------------------------------------------------ TensorScatter

@pytest.mark.parametrize("cache_shape,update_shape,indices,attrs", [
    ((2, 3, 6, 4), (2, 3, 2, 4), [1, 4], {}),
    ((2, 3, 6, 4), (2, 3, 3, 4), [4, 5], {"mode": "circular"}),
    ((3, 5, 2), (3, 2, 2), [0, 3, 1], {"axis": 1}),
    ((2, 4, 5, 3), (2, 2, 5, 3), [2, 0], {"axis": -3}),
    ((2, 4, 7), (2, 4, 7), [0, 0], {"axis": 2}),
    ((2, 6, 3), (2, 2, 3), None, {"axis": 1}),
])
def test_tensor_scatter_matches_onnx(cache_shape, update_shape, indices, attrs):
    write_indices = None if indices is None else np.array(indices, np.int64)
    compare_with_onnx("TensorScatter",
                      [normal(cache_shape), normal(update_shape, seed=1), write_indices], attrs)


def test_tensor_scatter_of_strings_matches_onnx():
    cache = np.array([["a", "b", "c"], ["d", "e", "f"]], dtype=object)
    update = np.array([["x"], ["y"]], dtype=object)
    out = compare_with_onnx("TensorScatter", [cache, update, np.array([2, 0], np.int64)],
                            {"axis": 1})[0]
    assert out.tolist() == [["a", "b", "x"], ["y", "e", "f"]]


def test_tensor_scatter_linear_mode_refuses_to_run_past_the_cache():
    op = get_op("TensorScatter")
    inputs = [normal((2, 4, 3)), normal((2, 2, 3)), np.array([1, 3], np.int64)]
    with pytest.raises(InputError, match="mode='circular'"):
        op.run(inputs, op.normalize_attrs({"axis": 1}))


@pytest.mark.parametrize("cache_shape,update_shape,attrs,message", [
    ((2, 4, 3), (2, 2, 3), {"axis": 0}, "batch axis"),
    ((2, 4, 3), (2, 5, 3), {"axis": 1}, "may not be longer"),
    ((2, 4, 3), (2, 2, 2), {"axis": 1}, "must match past_cache"),
    ((2, 4, 3), (2, 2, 3), {"axis": 1, "mode": "ring"}, "mode 'ring'"),
    ((2, 4, 3), (2, 2, 3), {"axis": 3}, "axis 3 is out of range"),
])
def test_tensor_scatter_rejects_bad_operands(cache_shape, update_shape, attrs, message):
    with pytest.raises(TypeInferenceError, match=message):
        infer("TensorScatter", [normal(cache_shape), normal(update_shape)], attrs)


def test_tensor_scatter_checks_write_indices_shape():
    with pytest.raises(TypeInferenceError, match="write_indices"):
        infer("TensorScatter", [normal((2, 4, 3)), normal((2, 2, 3)), np.zeros(3, np.int64)])


# ------------------------------------------------------------------ CausalConvWithState

@pytest.mark.parametrize("x_shape,k,bias,past,attrs,dtype", [
    ((2, 4, 8), 4, False, False, {}, np.float32),
    ((2, 4, 8), 3, True, False, {}, np.float32),
    ((2, 4, 8), 4, True, True, {}, np.float32),
    ((1, 3, 1), 4, True, True, {"activation": "silu"}, np.float32),
    ((2, 2, 2), 5, False, False, {"activation": "swish"}, np.float32),
    ((2, 4, 6), 1, False, False, {}, np.float32),
    ((2, 4, 8), 4, False, True, {"activation": "silu"}, np.float16),
])
def test_causal_conv_with_state_matches_onnx(x_shape, k, bias, past, attrs, dtype):
    batch, channels, _ = x_shape
    inputs = [normal(x_shape, dtype), normal((channels, 1, k), dtype, seed=1),
              normal((channels,), dtype, seed=2) if bias else None,
              normal((batch, channels, k - 1), dtype, seed=3) if past else None]
    tolerance = 1e-5 if dtype == np.float32 else 3e-3
    compare_with_onnx("CausalConvWithState", inputs, attrs, num_outputs=2, rtol=tolerance,
                      atol=tolerance)


def test_causal_conv_decodes_token_by_token_like_a_prefill():
    x, w, b = normal((1, 3, 6)), normal((3, 1, 3), seed=1), normal((3,), seed=2)
    whole, final_state = check_inferred("CausalConvWithState", [x, w, b], num_outputs=2)
    state = None
    for t in range(6):
        step, state = check_inferred("CausalConvWithState", [x[:, :, t:t + 1], w, b, state],
                                     num_outputs=2)
        np.testing.assert_allclose(step[:, :, 0], whole[:, :, t], rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(state, final_state)


@pytest.mark.parametrize("inputs,attrs,message", [
    ([normal((2, 4, 8)), normal((4, 2, 3))], {}, r"must have shape \(4, 1, k\)"),
    ([normal((2, 4, 8)), normal((4, 1, 3)), None, normal((2, 4, 3))], {},
     r"past_state \(input 3\) has shape \(2, 4, 3\), expected \(2, 4, 2\)"),
    ([normal((2, 4, 8)), normal((4, 1, 3))], {"activation": "relu"}, "activation 'relu'"),
    ([normal((4, 8)), normal((4, 1, 3))], {}, "must have rank 3"),
    ([normal((2, 4, 8), np.float64), normal((4, 1, 3), np.float64)], {}, "has dtype float64"),
])
def test_causal_conv_rejects_bad_operands(inputs, attrs, message):
    with pytest.raises(TypeInferenceError, match=message):
        infer("CausalConvWithState", inputs, attrs, num_outputs=2)


# ---------------------------------------------------------------------- LinearAttention

def attention_inputs(rule, batch=2, time=3, q_heads=4, kv_heads=2, key_size=4, value_size=3,
                     past=False, per_head_decay=False, scalar_beta=False, dtype=np.float32):
    keys = normal((batch, time, kv_heads * key_size), seed=1)
    keys /= np.linalg.norm(keys.reshape(batch, time, kv_heads, key_size), axis=-1)\
        .repeat(key_size, axis=-1)
    decay_width = kv_heads if per_head_decay else kv_heads * key_size
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    inputs = [normal((batch, time, q_heads * key_size)), keys,
              normal((batch, time, kv_heads * value_size), seed=2),
              normal((batch, kv_heads, key_size, value_size), seed=3) if past else None,
              -np.abs(normal((batch, time, decay_width), seed=4)) if gated else None,
              1 / (1 + np.exp(-normal((batch, time, 1 if scalar_beta else kv_heads), seed=5)))
              if delta else None]
    return [None if x is None else x.astype(dtype) for x in inputs]


@pytest.mark.parametrize("rule,options", [
    ("linear", {}),
    ("linear", {"past": True, "q_heads": 2}),
    ("gated", {}),
    ("gated", {"per_head_decay": True, "past": True}),
    ("delta", {"scalar_beta": True}),
    ("gated_delta", {}),
    ("gated_delta", {"past": True, "per_head_decay": True, "kv_heads": 1}),
    ("gated_delta", {"time": 1, "past": True, "value_size": 5}),
])
def test_linear_attention_matches_onnx(rule, options):
    inputs = attention_inputs(rule, **options)
    attrs = {"update_rule": rule, "q_num_heads": options.get("q_heads", 4),
             "kv_num_heads": options.get("kv_heads", 2)}
    compare_with_onnx("LinearAttention", inputs, attrs, num_outputs=2, rtol=1e-5, atol=1e-5)


def test_linear_attention_explicit_scale_and_fp16_match_onnx():
    inputs = attention_inputs("gated_delta", dtype=np.float16)
    attrs = {"q_num_heads": 4, "kv_num_heads": 2, "scale": 0.3}
    compare_with_onnx("LinearAttention", inputs, attrs, num_outputs=2, rtol=3e-3, atol=3e-3)


def test_linear_attention_state_carries_across_calls():
    inputs = attention_inputs("gated_delta", time=4)
    attrs = {"q_num_heads": 4, "kv_num_heads": 2}
    whole, final = check_inferred("LinearAttention", inputs, attrs, num_outputs=2)
    halves = [[x if x is None else x[:, part] for x in inputs] for part in
              (slice(0, 2), slice(2, 4))]
    first, state = check_inferred("LinearAttention", halves[0], attrs, num_outputs=2)
    halves[1][3] = state
    second, state = check_inferred("LinearAttention", halves[1], attrs, num_outputs=2)
    np.testing.assert_allclose(np.concatenate([first, second], axis=1), whole, atol=1e-5)
    np.testing.assert_allclose(state, final, atol=1e-5)


@pytest.mark.parametrize("rule,drop,attrs,message", [
    ("gated", 4, {}, "update_rule 'gated' needs decay"),
    ("delta", 5, {}, "update_rule 'delta' needs beta"),
    ("linear", None, {"q_num_heads": 3}, "positive multiple"),
    ("linear", None, {"update_rule": "softmax"}, "update_rule 'softmax'"),
])
def test_linear_attention_rejects_bad_operands(rule, drop, attrs, message):
    inputs = attention_inputs(rule)
    if drop is not None:
        inputs[drop] = None
    attrs = {"update_rule": rule, "q_num_heads": 4, "kv_num_heads": 2, **attrs}
    with pytest.raises(TypeInferenceError, match=message):
        infer("LinearAttention", inputs, attrs, num_outputs=2)


def test_linear_attention_rejects_a_stray_beta():
    inputs = attention_inputs("gated_delta")
    inputs[4] = None
    with pytest.raises(TypeInferenceError, match="'linear' takes no beta"):
        infer("LinearAttention", inputs, {"update_rule": "linear", "q_num_heads": 4,
                                          "kv_num_heads": 2}, num_outputs=2)


def test_linear_attention_rejects_mismatched_key_width():
    inputs = attention_inputs("linear")
    inputs[1] = normal((2, 3, 10))
    with pytest.raises(TypeInferenceError, match="key width 10"):
        infer("LinearAttention", inputs, {"update_rule": "linear", "q_num_heads": 4,
                                          "kv_num_heads": 2}, num_outputs=2)
