"""Sequence-model ops (core/compute/sequence_models.py) against the NumPy references
through the llvm target: RNN, GRU and LSTM unrolled over the sequence, Attention,
RotaryEmbedding, CausalConvWithState and LinearAttention."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc import te
from heterocc.compute import compute_of
from heterocc.compute.sequence_models import MAX_UNROLLED_STEPS
from heterocc.errors import CompileError
from heterocc.ir.types import TensorType
from heterocc.ops import get_op
from tests.compute.test_elementwise import check, random_array

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _operands(rng, op, direction, layout, lengths, initial, hidden=3, batch=2, steps=4,
              features=5):
    dirs = 2 if direction == "bidirectional" else 1
    gates = GATES[op] * hidden
    x_shape = (steps, batch, features) if layout == 0 else (batch, steps, features)
    state = (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)
    operands = [random_array(rng, x_shape, "float32", high=1.0),
                random_array(rng, (dirs, gates, features), "float32", high=0.5),
                random_array(rng, (dirs, gates, hidden), "float32", high=0.5),
                random_array(rng, (dirs, 2 * gates), "float32", high=0.5),
                np.array(lengths, np.int32) if lengths is not None else None,
                random_array(rng, state, "float32") if initial else None]
    if op == "LSTM":
        operands += [random_array(rng, state, "float32") if initial else None,
                     random_array(rng, (dirs, 3 * hidden), "float32", high=0.5)]
    return operands


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout,lengths,initial", [(0, None, False), (1, [4, 2], True),
                                                    (0, [0, 3], True)])
def test_recurrent(op, direction, layout, lengths, initial, rng):
    attrs = {"direction": direction, "layout": layout, "hidden_size": 3}
    check(op, _operands(rng, op, direction, layout, lengths, initial), attrs,
          rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op,attrs", [
    ("RNN", {"activations": ["Relu"], "clip": 0.5}),
    ("RNN", {"activations": ["ScaledTanh"], "activation_alpha": [0.7],
             "activation_beta": [1.5]}),
    ("GRU", {"linear_before_reset": 1, "activations": ["HardSigmoid", "Softsign"]}),
    ("LSTM", {"input_forget": 1, "activations": ["Sigmoid", "Elu", "Softplus"]}),
    ("LSTM", {"activations": ["Affine", "LeakyRelu", "ThresholdedRelu"],
              "activation_alpha": [0.5, 0.1, 0.2], "activation_beta": [0.1]}),
])
def test_recurrent_activations_and_variants(op, attrs, rng):
    check(op, _operands(rng, op, "forward", 0, None, True), {**attrs, "hidden_size": 3},
          rtol=1e-5, atol=1e-5)


def _qkv(rng, three_d, batch=2, q_heads=4, kv_heads=2, q_length=3, kv_length=5, size=8,
         v_size=6):
    if three_d:
        shapes = [(batch, q_length, q_heads * size), (batch, kv_length, kv_heads * size),
                  (batch, kv_length, kv_heads * v_size)]
    else:
        shapes = [(batch, q_heads, q_length, size), (batch, kv_heads, kv_length, size),
                  (batch, kv_heads, kv_length, v_size)]
    return [random_array(rng, shape, "float32", high=1.0) for shape in shapes]


@pytest.mark.parametrize("three_d", [False, True])
@pytest.mark.parametrize("attrs", [
    {}, {"is_causal": 1}, {"scale": 0.3, "softcap": 2.0},
    {"left_window_size": 1, "right_window_size": 0}, {"softmax_precision": 11},
])
def test_attention_forms(three_d, attrs, rng):
    if three_d:
        attrs = {**attrs, "q_num_heads": 4, "kv_num_heads": 2}
    check("Attention", _qkv(rng, three_d), attrs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mask_shape,bool_mask", [((3, 5), True), ((2, 1, 3, 4), False),
                                                  ((5,), True), ((1, 4, 1, 5), False)])
def test_attention_masks(mask_shape, bool_mask, rng):
    q, k, v = _qkv(rng, False)
    mask = rng.random(mask_shape) < 0.7 if bool_mask else \
        random_array(rng, mask_shape, "float32", high=1.0)
    check("Attention", [q, k, v, mask], {"is_causal": 1}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_attention_with_cache_gives_every_output(mode, rng):
    q, k, v = _qkv(rng, False, q_length=2, kv_length=2)
    past_key = random_array(rng, (2, 2, 4, 8), "float32", high=1.0)
    past_value = random_array(rng, (2, 2, 4, 6), "float32", high=1.0)
    mask = rng.random((2, 6)) < 0.8
    check("Attention", [q, k, v, mask, past_key, past_value],
          {"qk_matmul_output_mode": mode, "softcap": 3.0, "is_causal": 1},
          rtol=1e-5, atol=1e-5)


def test_attention_with_padded_keys(rng):
    q, k, v = _qkv(rng, False)
    nonpad = np.array([5, 2], np.int64)
    check("Attention", [q, k, v, None, None, None, nonpad], {"is_causal": 1},
          rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rotated", [0, 4])
@pytest.mark.parametrize("positions", [False, True])
@pytest.mark.parametrize("three_d", [False, True])
def test_rotary_embedding(interleaved, rotated, positions, three_d, rng):
    batch, heads, length, size = 2, 3, 5, 8
    shape = (batch, length, heads * size) if three_d else (batch, heads, length, size)
    x = random_array(rng, shape, "float32")
    half = (rotated or size) // 2
    cache_shape = (7, half) if positions else (batch, length, half)
    angles = rng.random(cache_shape) * 6
    ids = rng.integers(0, 7, (batch, length)).astype(np.int64) if positions else None
    attrs = {"interleaved": interleaved, "rotary_embedding_dim": rotated}
    if three_d:
        attrs["num_heads"] = heads
    check("RotaryEmbedding", [x, np.cos(angles).astype(np.float32),
                              np.sin(angles).astype(np.float32), ids], attrs,
          rtol=1e-5, atol=1e-5)


CAUSAL_CASES = [
    ((2, 4, 8), 4, False, False, {}),
    ((2, 4, 8), 3, True, False, {}),
    ((2, 4, 8), 4, True, True, {}),
    ((1, 3, 1), 4, True, True, {"activation": "silu"}),
    ((2, 2, 2), 5, False, False, {"activation": "swish"}),
    ((2, 3, 5), 2, False, True, {"activation": "silu"}),
    ((2, 4, 6), 1, True, False, {}),  # a one-tap kernel carries an empty state
    ((2, 4, 6), 1, False, True, {"activation": "silu"}),
]


@pytest.mark.parametrize("x_shape,k,bias,past,attrs", CAUSAL_CASES)
def test_causal_conv_with_state(x_shape, k, bias, past, attrs, rng):
    batch, channels, _ = x_shape
    inputs = [random_array(rng, x_shape, "float32"),
              random_array(rng, (channels, 1, k), "float32"),
              random_array(rng, (channels,), "float32") if bias else None,
              random_array(rng, (batch, channels, k - 1), "float32") if past else None]
    check("CausalConvWithState", inputs, attrs, rtol=1e-5, atol=1e-4)


def _attention_inputs(rng, rule, batch=2, time=3, q_heads=4, kv_heads=2, key_size=4,
                      value_size=3, past=False, per_head_decay=False, scalar_beta=False):
    keys = rng.standard_normal((batch, time, kv_heads, key_size))
    keys /= np.linalg.norm(keys, axis=-1, keepdims=True)  # keeps the delta rule stable
    gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    decay_width = kv_heads if per_head_decay else kv_heads * key_size
    inputs = [rng.standard_normal((batch, time, q_heads * key_size)),
              keys.reshape(batch, time, -1),
              rng.standard_normal((batch, time, kv_heads * value_size)),
              rng.standard_normal((batch, kv_heads, key_size, value_size)) if past else None,
              -np.abs(rng.standard_normal((batch, time, decay_width))) if gated else None,
              rng.random((batch, time, 1 if scalar_beta else kv_heads)) if delta else None]
    return [None if a is None else a.astype(np.float32) for a in inputs]


@pytest.mark.parametrize("rule,options,attrs", [
    ("linear", {}, {}),
    ("linear", {"past": True, "q_heads": 2}, {"scale": 0.3}),
    ("gated", {}, {}),
    ("gated", {"per_head_decay": True, "past": True}, {}),
    ("delta", {"scalar_beta": True}, {}),
    ("delta", {"past": True, "time": 1}, {}),
    ("gated_delta", {}, {"chunk_size": 2}),
    ("gated_delta", {"past": True, "per_head_decay": True, "kv_heads": 1}, {}),
])
def test_linear_attention(rule, options, attrs, rng):
    inputs = _attention_inputs(rng, rule, **options)
    attrs = {"update_rule": rule, "q_num_heads": options.get("q_heads", 4),
             "kv_num_heads": options.get("kv_heads", 2), **attrs}
    check("LinearAttention", inputs, attrs, rtol=1e-5, atol=1e-5)


def test_linear_attention_over_too_many_steps_is_refused():
    time = MAX_UNROLLED_STEPS + 1
    shape = (1, time, 4)
    inputs = [te.placeholder(shape, "float32", name) for name in ("q", "k", "v")]
    op = get_op("LinearAttention")
    attrs = op.normalize_attrs({"update_rule": "linear", "q_num_heads": 1, "kv_num_heads": 1})
    with pytest.raises(CompileError, match="steps"):
        compute_of("LinearAttention")(inputs, attrs, [TensorType(shape, "float32"),
                                                      TensorType((1, 1, 4, 4), "float32")])
