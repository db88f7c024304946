"""Attention and RotaryEmbedding (core/compute/attention.py) against the NumPy
references through the llvm target."""

from __future__ import annotations

import numpy as np
import pytest

from tests.compute.test_elementwise import check, random_array


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
