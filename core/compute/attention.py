"""Attention (opset 23+) and RotaryEmbedding.

Attention works in (batch, head, query, key) space whatever the input layout: 3-D
inputs are read through their heads, grouped-query heads read their shared key/value
head, and the cache, mask, causal and sliding-window rules become one additive bias
computed where each score is read. The softmax follows the reference's masked form:
a row that sees no key gives zeros, not NaN.
"""

from __future__ import annotations

import math

import numpy as np

from .. import te
from ..errors import CompileError
from ..ir.types import dtype_from_onnx
from .common import float_only
from .reduction import is_finite
from .registry import register_compute


def _heads_view(x: te.Tensor, heads: int):
    """An accessor ``(batch, head, position, feature) -> element`` of a 4-D tensor or of
    a 3-D (batch, position, heads * size) one."""
    if x.ndim == 4:
        return lambda b, h, s, d: x[b, h, s, d]
    size = x.shape[2] // heads
    return lambda b, h, s, d: x[b, s, h * size + d]


def _optional(inputs, index: int):
    return inputs[index] if len(inputs) > index else None


def _mask_bias(mask, scores_shape, index, dtype: str):
    """The additive bias ``attn_mask`` gives score ``index``: bool masks block (-inf)
    where False, float masks add; keys past a short last axis are blocked."""
    b, h, s, t = index
    aligned = (b, h, s, t)[4 - mask.ndim:]
    shape4 = scores_shape[4 - mask.ndim:]
    load_index = tuple(0 if dim == 1 and full != 1 else i
                       for i, dim, full in zip(aligned[:-1], mask.shape[:-1], shape4[:-1]))
    width = mask.shape[-1]
    column = t if width == scores_shape[3] else te.minimum(t, te.const(width - 1, "int64"))
    value = mask[(*load_index, column)]
    inside = t < width
    if mask.dtype == "bool":
        return te.logical_and(inside, value), te.const(0.0, dtype)
    return inside, te.cast(dtype, value)


@register_compute("Attention")
def attention(inputs, attrs, out_types):
    q, k, v = inputs[:3]
    mask = _optional(inputs, 3)
    past_key, past_value = _optional(inputs, 4), _optional(inputs, 5)
    nonpad = _optional(inputs, 6)
    if mask is not None and mask.ndim == 0:
        raise CompileError("Attention with a scalar attn_mask has no TE compute")
    dtype = q.dtype
    float_only(dtype, "Attention")
    softmax_dtype = (dtype_from_onnx(attrs["softmax_precision"])
                     if attrs["softmax_precision"] else dtype)
    float_only(softmax_dtype, "Attention softmax_precision")
    y_type = out_types[0]
    batch = q.shape[0]
    kv_heads = attrs["kv_num_heads"] if q.ndim == 3 else k.shape[1]
    q_heads = attrs["q_num_heads"] if q.ndim == 3 else q.shape[1]
    q_length = q.shape[1] if q.ndim == 3 else q.shape[2]
    kv_length = k.shape[1] if k.ndim == 3 else k.shape[2]
    past = 0 if past_key is None else past_key.shape[2]
    total = past + kv_length
    head_size = (q.shape[2] // q_heads) if q.ndim == 3 else q.shape[3]
    v_size = (v.shape[2] // kv_heads) if v.ndim == 3 else v.shape[3]
    group = q_heads // kv_heads

    q4, k4, v4 = _heads_view(q, q_heads), _heads_view(k, kv_heads), _heads_view(v, kv_heads)

    def cached(new, old, size, name):
        def body(b, h, t, d):
            if old is None:
                return new(b, h, t, d)
            return te.if_then_else(t < past, old[b, h, te.minimum(t, max(past - 1, 0)), d],
                                   new(b, h, t - past, d))

        return te.compute((batch, kv_heads, total, size), body, name=name, dtype=dtype,
                          attrs={"keep": True})

    keys = cached(k4, past_key, head_size, "present_key")
    values = cached(v4, past_value, v_size, "present_value")
    scale = attrs["scale"] if attrs["scale"] is not None else 1 / math.sqrt(head_size)
    root = te.const(float(np.sqrt(np.float64(scale)).astype(dtype)), dtype)
    scores_shape = (batch, q_heads, q_length, total)

    def raw_body(b, h, s, t):
        d = te.reduce_axis(head_size, "d")
        return te.sum((q4(b, h, s, d.var) * root) * (keys[b, h // group, t, d.var] * root),
                      axis=d)

    raw = te.compute(scores_shape, raw_body, name="attention_qk", dtype=dtype)
    softcap = float(attrs["softcap"])

    def capped(index):
        if softcap <= 0:
            return raw[index]
        cap = te.const(softcap, dtype)
        return cap * te.tanh(raw[index] / cap)

    def bias(index):
        b, _, s, t = index
        blocked = te.const(False, "bool")
        added = te.const(0.0, dtype)
        if mask is not None:
            allowed, added = _mask_bias(mask, scores_shape, index, dtype)
            blocked = te.equal(allowed, te.const(False, "bool"))
        if nonpad is not None and past == 0:
            offset = te.cast("int64", nonpad[b]) - q_length
        else:
            offset = te.const(past, "int64")
        lag = te.cast("int64", s) + offset - te.cast("int64", t)
        if attrs["is_causal"]:
            blocked = te.logical_or(blocked, lag < 0)
        if attrs["left_window_size"] >= 0:
            blocked = te.logical_or(blocked, lag > attrs["left_window_size"])
        if attrs["right_window_size"] >= 0:
            blocked = te.logical_or(blocked, -lag > attrs["right_window_size"])
        if nonpad is not None:
            blocked = te.logical_or(blocked, te.cast("int64", t) >= te.cast("int64", nonpad[b]))
        return te.if_then_else(blocked, te.const(-math.inf, dtype), added)

    biased = te.compute(scores_shape, lambda *i: capped(i) + bias(i), name="attention_biased",
                        dtype=dtype, attrs={"keep": True})

    def wide(index):
        return te.cast(softmax_dtype, biased[index])

    def peak_body(b, h, s):
        t = te.reduce_axis(total, "t")
        return te.max(wide((b, h, s, t.var)), axis=t)

    peak = te.compute(scores_shape[:3], peak_body, name="attention_peak", dtype=softmax_dtype)
    zero = te.const(0.0, softmax_dtype)
    exps = te.compute(scores_shape, lambda b, h, s, t: te.exp(wide((b, h, s, t)) - te.if_then_else(
        is_finite(peak[b, h, s]), peak[b, h, s], zero)), name="attention_exp",
        dtype=softmax_dtype, attrs={"keep": True})

    def total_body(b, h, s):
        t = te.reduce_axis(total, "t")
        return te.sum(exps[b, h, s, t.var], axis=t)

    sums = te.compute(scores_shape[:3], total_body, name="attention_sum", dtype=softmax_dtype)
    one = te.const(1.0, softmax_dtype)
    probabilities = te.compute(scores_shape, lambda b, h, s, t: te.cast(
        dtype, exps[b, h, s, t] / te.if_then_else(te.equal(sums[b, h, s], zero), one,
                                                  sums[b, h, s])),
        name="attention_probabilities", dtype=dtype, attrs={"keep": True})

    def y_body(b, h, s, e):
        t = te.reduce_axis(total, "t")
        return te.sum(probabilities[b, h, s, t.var] * values[b, h // group, t.var, e], axis=t)

    y4 = te.compute((batch, q_heads, q_length, v_size), y_body, name="attention_y", dtype=dtype)
    if q.ndim == 3:
        y = te.compute(y_type.shape, lambda b, s, f: y4[b, f // v_size, s, f % v_size],
                       name="attention_out", dtype=dtype)
    else:
        y = y4
    outputs = [y, keys, values]
    if len(out_types) > 3:
        mode = attrs["qk_matmul_output_mode"]
        debug = [raw, None, biased, probabilities][mode]
        if debug is None:
            debug = te.compute(scores_shape, lambda *i: capped(i), name="attention_capped",
                               dtype=dtype)
        outputs.append(debug)
    return outputs[:len(out_types)]


@register_compute("RotaryEmbedding")
def rotary_embedding(inputs, attrs, out_types):
    """Feature ``f < rotated`` of each head pairs with its partner (the next/previous
    one when interleaved, the one half a rotation away otherwise) and turns by the
    angle of its position: ``first' = cos first - sin second``,
    ``second' = sin first + cos second``."""
    x, cos_cache, sin_cache = inputs[:3]
    positions = _optional(inputs, 3)
    float_only(x.dtype, "RotaryEmbedding")
    if x.ndim == 4:
        head_size = x.shape[3]
    else:
        head_size = x.shape[2] // attrs["num_heads"]
    rotated = attrs["rotary_embedding_dim"] or head_size
    half = rotated // 2
    interleaved = bool(attrs["interleaved"])

    def body(*index):
        if x.ndim == 4:
            b, _, s, f = index
            feature_of = lambda g: (index[0], index[1], index[2], g)  # noqa: E731
        else:
            b, s, hidden = index
            f = hidden % head_size
            base = hidden - f
            feature_of = lambda g: (index[0], index[1], base + g)  # noqa: E731
        if interleaved:
            pair, is_first = f // 2, te.equal(f % 2, 0)
            partner = te.if_then_else(is_first, f + 1, f - 1)
        else:
            is_first = f < half
            pair = te.if_then_else(is_first, f, f - half)
            partner = te.if_then_else(is_first, f + half, f - half)
        # features past the rotated part keep their value; clamped, their (unused) cache
        # and partner reads stay inside the buffers
        pair = te.minimum(pair, half - 1)
        partner = te.minimum(partner, head_size - 1)
        if positions is None:
            cos, sin = cos_cache[b, s, pair], sin_cache[b, s, pair]
        else:
            position = te.cast("int64", positions[b, s])
            cos, sin = cos_cache[position, pair], sin_cache[position, pair]
        mine, other = x[feature_of(f)], x[feature_of(partner)]
        turned = te.if_then_else(is_first, cos * mine - sin * other, sin * other + cos * mine)
        return te.if_then_else(f < rotated, turned, mine)

    return [te.compute(out_types[0].shape, body, name="rotary_embedding", dtype=x.dtype)]

