"""DeformConv, CausalConvWithState and LinearAttention (core/compute/nn_dynamic.py)
against the NumPy references through the llvm target."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc import te
from heterocc.compute import compute_of
from heterocc.compute.recurrent import MAX_UNROLLED_STEPS
from heterocc.errors import CompileError
from heterocc.ir.types import TensorType
from heterocc.ops import get_op
from heterocc.ops.nn import conv_geometry
from tests.compute.test_elementwise import check, random_array


def _conv_out(x_shape, w_shape, attrs):
    plain = {k: v for k, v in attrs.items() if k not in ("offset_group",)}
    return conv_geometry(x_shape, w_shape, plain)[4]


@pytest.mark.parametrize("attrs,x_shape,w_shape", [
    ({}, (1, 2, 4, 4), (3, 2, 2, 2)),
    ({"pads": [1, 1, 1, 1], "strides": [2, 1], "offset_group": 2}, (2, 4, 5, 4), (2, 4, 3, 2)),
    ({"group": 2, "dilations": [1, 2]}, (1, 4, 5, 5), (4, 2, 2, 2)),
    ({"group": 2, "offset_group": 2, "pads": [0, 1, 1, 0]}, (1, 4, 4, 3), (2, 2, 2, 2)),
    ({"strides": [2], "pads": [1, 1]}, (1, 2, 7), (2, 2, 3)),
])
@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_deform_conv(attrs, x_shape, w_shape, with_mask, with_bias, rng):
    out = _conv_out(x_shape, w_shape, attrs)
    rank = len(out)
    taps = attrs.get("offset_group", 1) * int(np.prod(w_shape[2:]))
    x = random_array(rng, x_shape, "float32")
    w = random_array(rng, w_shape, "float32")
    # offsets of a few pixels move taps between pixels and past the borders
    offset = (rng.standard_normal((x_shape[0], taps * rank, *out)) * 1.5).astype(np.float32)
    bias = random_array(rng, (w_shape[0],), "float32") if with_bias else None
    mask = rng.random((x_shape[0], taps, *out)).astype(np.float32) if with_mask else None
    check("DeformConv", [x, w, offset, bias, mask], attrs, rtol=1e-5, atol=1e-4)


def test_deform_conv_float64_whole_pixel_offsets(rng):
    """Integer offsets land exactly on pixels (fraction 0) and past the image's edge."""
    x = random_array(rng, (1, 3, 4, 5), "float64")
    w = random_array(rng, (2, 3, 2, 2), "float64")
    offset = rng.integers(-3, 4, (1, 8, 3, 4)).astype(np.float64)
    check("DeformConv", [x, w, offset], {})


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
