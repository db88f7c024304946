"""Attention and RotaryEmbedding (core/ops/sequence_models.py) against onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto
from onnxruntime_oracle import onnxruntime_outputs
from single_node_oracle import check_inferred, compare_with_onnx, infer, normal

from heterocc.errors import TypeInferenceError


def qkv(batch=2, q_heads=4, kv_heads=4, q_len=3, kv_len=5, head=8, v_head=8, three_d=False,
        dtype=np.float32):
    if three_d:
        return (normal((batch, q_len, q_heads * head), dtype, 1),
                normal((batch, kv_len, kv_heads * head), dtype, 2),
                normal((batch, kv_len, kv_heads * v_head), dtype, 3))
    return (normal((batch, q_heads, q_len, head), dtype, 1),
            normal((batch, kv_heads, kv_len, head), dtype, 2),
            normal((batch, kv_heads, kv_len, v_head), dtype, 3))


# --------------------------------------------------------------------------- Attention


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
@pytest.mark.parametrize("attrs", [{}, {"is_causal": 1}, {"scale": 0.3}, {"softcap": 2.0}])
def test_attention_4d_all_outputs_match_onnx(attrs, mode):
    q, k, v = qkv(v_head=6)
    # ONNX's reference returns the softcapped scores in mode 0; the spec asks for the raw
    # QK product there, checked in the next test
    outputs = 3 if attrs.get("softcap") and mode == 0 else 4
    compare_with_onnx("Attention", [q, k, v], {**attrs, "qk_matmul_output_mode": mode},
                      num_outputs=outputs, rtol=1e-4, atol=1e-5)


def test_attention_mode0_output_is_the_raw_product_before_softcap():
    q, k, v = qkv()
    raw = check_inferred("Attention", [q, k, v], {"softcap": 2.0}, num_outputs=4)[3]
    expected = q.astype(np.float64) @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    np.testing.assert_allclose(raw, expected, rtol=1e-5, atol=1e-5)
    capped = check_inferred("Attention", [q, k, v], {"softcap": 2.0,
                                                     "qk_matmul_output_mode": 1},
                            num_outputs=4)[3]
    np.testing.assert_allclose(capped, 2.0 * np.tanh(expected / 2.0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mask_shape,mask_dtype", [
    ((3, 5), np.float32), ((2, 1, 3, 5), bool), ((4, 3, 5), bool), ((3, 4), bool),
    ((1, 4, 3, 3), np.float32),
])
@pytest.mark.parametrize("causal", [0, 1])
def test_attention_masks_match_onnx(mask_shape, mask_dtype, causal):
    q, k, v = qkv()
    rng = np.random.default_rng(7)
    mask = rng.random(mask_shape) > 0.3 if mask_dtype is bool else \
        normal(mask_shape, seed=8)
    compare_with_onnx("Attention", [q, k, v, mask], {"is_causal": causal},
                      num_outputs=4, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("q_heads,kv_heads", [(4, 4), (6, 2), (3, 1)])
def test_attention_3d_with_gqa_matches_onnx(q_heads, kv_heads):
    q, k, v = qkv(q_heads=q_heads, kv_heads=kv_heads, three_d=True, v_head=4)
    compare_with_onnx("Attention", [q, k, v],
                      {"q_num_heads": q_heads, "kv_num_heads": kv_heads, "is_causal": 1},
                      num_outputs=4, rtol=1e-4, atol=1e-5)


def test_attention_with_past_cache_matches_onnx():
    q, k, v = qkv(q_len=2, kv_len=2, kv_heads=2)
    past_key, past_value = normal((2, 2, 4, 8), seed=5), normal((2, 2, 4, 8), seed=6)
    mask = np.random.default_rng(3).random((2, 6)) > 0.2
    outputs = compare_with_onnx("Attention", [q, k, v, mask, past_key, past_value],
                                {"is_causal": 1}, num_outputs=4, rtol=1e-4, atol=1e-5)
    assert outputs[1].shape == (2, 2, 6, 8)


def test_attention_nonpad_kv_seqlen_and_windows_match_onnx():
    q, k, v = qkv(q_len=2, kv_len=6)
    lengths = np.array([4, 6], np.int64)
    compare_with_onnx("Attention", [q, k, v, None, None, None, lengths], {"is_causal": 1},
                      num_outputs=1, rtol=1e-4, atol=1e-5)
    compare_with_onnx("Attention", [q, k, v], {"left_window_size": 1, "right_window_size": 2},
                      num_outputs=1, rtol=1e-4, atol=1e-5)


def test_attention_softmax_precision_and_float16():
    q, k, v = qkv(dtype=np.float16)
    compare_with_onnx("Attention", [q, k, v], {"softmax_precision": TensorProto.FLOAT},
                      num_outputs=1, rtol=2e-3, atol=2e-3)


def test_attention_fully_masked_rows_are_zero():
    q, k, v = qkv()
    mask = np.ones((3, 5), bool)
    mask[1] = False
    y, _, _, probabilities = compare_with_onnx(
        "Attention", [q, k, v, mask], {"qk_matmul_output_mode": 3}, num_outputs=4,
        rtol=1e-4, atol=1e-5)
    assert not np.isnan(y).any()
    np.testing.assert_array_equal(y[:, :, 1], 0)
    np.testing.assert_array_equal(probabilities[:, :, 1], 0)


def test_attention_errors_name_the_problem():
    q, k, v = qkv(three_d=True)
    with pytest.raises(TypeInferenceError, match="3-D inputs need a positive q_num_heads"):
        infer("Attention", [q, k, v])
    q, k, v = qkv(q_heads=3, kv_heads=2)
    with pytest.raises(TypeInferenceError, match="not a multiple of 2 key/value heads"):
        infer("Attention", [q, k, v])
    q, k, v = qkv()
    with pytest.raises(TypeInferenceError, match="past_key and past_value must be given"):
        infer("Attention", [q, k, v, None, normal((2, 4, 1, 8))])
    with pytest.raises(TypeInferenceError, match="does not broadcast to the scores"):
        infer("Attention", [q, k, v, np.ones((3, 3, 5), bool)])


# --------------------------------------------------------------------------- RotaryEmbedding


def caches(positions, half, seed=9):
    angles = np.random.default_rng(seed).random((positions, half)) * 3
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rotary_dim", [0, 4])
def test_rotary_embedding_4d_with_positions_matches_onnx(interleaved, rotary_dim):
    x = normal((2, 3, 5, 8))
    cos, sin = caches(10, (rotary_dim or 8) // 2)
    positions = np.random.default_rng(1).integers(0, 10, (2, 5)).astype(np.int64)
    compare_with_onnx("RotaryEmbedding", [x, cos, sin, positions],
                      {"interleaved": interleaved, "rotary_embedding_dim": rotary_dim},
                      rtol=1e-5, atol=1e-6)


def test_rotary_embedding_3d_without_positions_matches_onnx():
    x = normal((2, 5, 12))
    angles = np.random.default_rng(2).random((2, 5, 3)) * 3
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    compare_with_onnx("RotaryEmbedding", [x, cos, sin], {"num_heads": 2, "interleaved": 1},
                      rtol=1e-5, atol=1e-6)


def test_rotary_embedding_preserves_pair_norms():
    x = normal((1, 1, 4, 6))
    cos, sin = caches(4, 3)
    (y,) = check_inferred("RotaryEmbedding", [x, cos, sin, np.arange(4)[None].astype(np.int64)])
    pairs_in = x[..., :3] ** 2 + x[..., 3:] ** 2
    pairs_out = y[..., :3] ** 2 + y[..., 3:] ** 2
    np.testing.assert_allclose(pairs_in, pairs_out, rtol=1e-5)


def test_rotary_embedding_errors_name_the_problem():
    cos, sin = caches(4, 3)
    with pytest.raises(TypeInferenceError, match="needs a num_heads attribute"):
        infer("RotaryEmbedding", [normal((1, 4, 6)), cos, sin])
    with pytest.raises(TypeInferenceError, match=r"cos_cache .* must have shape \(4, 2\)"):
        infer("RotaryEmbedding", [normal((1, 1, 4, 4)), cos, sin,
                                  np.zeros((1, 4), np.int64)])


# --------------------------------------------------------------------------- RNN, GRU, LSTM
# onnx.reference ignores sequence_lens, clip and custom activations: ONNX Runtime checks those

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def recurrent_inputs(op_type, *, seq=4, batch=3, features=5, hidden=6, dirs=1, layout=0,
                     full=True):
    """X, W, R, B, sequence_lens, initial_h[, initial_c, P] for ``op_type``."""
    gates = GATES[op_type] * hidden
    x_shape = (seq, batch, features) if layout == 0 else (batch, seq, features)
    state = (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)
    inputs = [normal(x_shape, seed=1), normal((dirs, gates, features), seed=2) * 0.5,
              normal((dirs, gates, hidden), seed=3) * 0.5]
    if not full:
        return inputs
    inputs += [normal((dirs, 2 * gates), seed=4) * 0.5, None, normal(state, seed=5)]
    if op_type == "LSTM":
        inputs += [normal(state, seed=6), normal((dirs, 3 * hidden), seed=7) * 0.5]
    return inputs


def state_count(op_type):
    return 3 if op_type == "LSTM" else 2


@pytest.mark.parametrize("op_type", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("full", [False, True])
def test_recurrent_matches_onnx(op_type, direction, full):
    dirs = 2 if direction == "bidirectional" else 1
    inputs = recurrent_inputs(op_type, dirs=dirs, full=full)
    compare_with_onnx(op_type, inputs, {"hidden_size": 6, "direction": direction},
                      num_outputs=state_count(op_type), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op_type", ["RNN", "GRU", "LSTM"])
def test_recurrent_batch_first_layout_matches_onnx(op_type):
    inputs = recurrent_inputs(op_type, layout=1, dirs=2)
    compare_with_onnx(op_type, inputs, {"hidden_size": 6, "layout": 1,
                                        "direction": "bidirectional"},
                      num_outputs=state_count(op_type), rtol=1e-4, atol=1e-5)


def test_gru_linear_before_reset_matches_onnx():
    compare_with_onnx("GRU", recurrent_inputs("GRU"), {"hidden_size": 6,
                                                       "linear_before_reset": 1},
                      num_outputs=2, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op_type", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_recurrent_sequence_lens_and_clip_match_onnxruntime(op_type, direction):
    dirs = 2 if direction == "bidirectional" else 1
    inputs = recurrent_inputs(op_type, dirs=dirs)
    inputs[4] = np.array([4, 2, 3], np.int32)
    attrs = {"hidden_size": 6, "direction": direction, "clip": 0.7}
    got = check_inferred(op_type, inputs, attrs, num_outputs=state_count(op_type))
    expected = onnxruntime_outputs(op_type, inputs, attrs, [np.float32] * state_count(op_type))
    for mine, theirs in zip(got, expected):
        np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op_type,activations,alpha,beta", [
    ("RNN", ["LeakyRelu"], [0.2], None),
    ("GRU", ["HardSigmoid", "ScaledTanh"], [0.3, 0.9], [0.4, 1.1]),
    ("LSTM", ["Sigmoid", "Affine", "Tanh"], [0.5], [0.1]),
])
def test_recurrent_custom_activations_match_onnxruntime(op_type, activations, alpha, beta):
    inputs = recurrent_inputs(op_type)
    attrs = {"hidden_size": 6, "activations": activations, "activation_alpha": alpha}
    if beta:
        attrs["activation_beta"] = beta
    got = check_inferred(op_type, inputs, attrs, num_outputs=state_count(op_type))
    expected = onnxruntime_outputs(op_type, inputs, attrs, [np.float32] * state_count(op_type))
    for mine, theirs in zip(got, expected):
        np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-5)


def test_lstm_input_forget_couples_gates():
    inputs = recurrent_inputs("LSTM")
    attrs = {"hidden_size": 6, "input_forget": 1}
    got = check_inferred("LSTM", inputs, attrs, num_outputs=3)
    expected = onnxruntime_outputs("LSTM", inputs, attrs, [np.float32] * 3)
    for mine, theirs in zip(got, expected):
        np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-5)


def test_recurrent_errors_name_the_problem():
    x, w, r = recurrent_inputs("GRU", full=False)
    with pytest.raises(TypeInferenceError, match="W .* and R .* must have shapes"):
        infer("GRU", [x, w, r], {"direction": "bidirectional"}, num_outputs=2)
    with pytest.raises(TypeInferenceError, match="activations .* must list 2 of"):
        infer("GRU", [x, w, r], {"activations": ["Sigmoid", "Gelu"]}, num_outputs=2)
    with pytest.raises(TypeInferenceError, match=r"sequence_lens .* must have shape \(3,\)"):
        infer("GRU", [x, w, r, None, np.ones(2, np.int32)], num_outputs=2)


def test_recurrent_accepts_output_sequence_of_opset1():
    inputs = recurrent_inputs("LSTM")
    plain = check_inferred("LSTM", inputs, {"hidden_size": 6}, num_outputs=3)
    legacy = check_inferred("LSTM", inputs, {"hidden_size": 6, "output_sequence": 1},
                            num_outputs=3)
    for a, b in zip(plain, legacy):
        np.testing.assert_array_equal(a, b)


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
