"""Ops whose reads depend on data or on carried state: DeformConv (taps moved by learned
offsets, sampled bilinearly), CausalConvWithState (a depthwise causal convolution over
the carried state and the input) and LinearAttention (a recurrent state, unrolled over
time like RNN/GRU/LSTM)."""

from __future__ import annotations

import itertools

import numpy as np

from .. import te
from ..errors import CompileError
from ..ops.nn import conv_geometry
from .activation import sigmoid
from .common import float_only
from .recurrent import MAX_UNROLLED_STEPS
from .registry import register_compute
from .sampling import F64, _axis_taps

F32 = "float32"


def _optional(inputs, index: int):
    return inputs[index] if len(inputs) > index else None


# --------------------------------------------------------------------------- DeformConv

def _flat_tap(taps, kernel) -> te.Tensor:
    """Row-major flat index of the kernel tap ``taps`` (one index per spatial axis)."""
    flat = taps[0]
    for tap, size in zip(taps[1:], kernel[1:]):
        flat = flat * size + tap
    return flat


@register_compute("DeformConv")
def deform_conv(inputs, attrs, out_types):
    """Per (image, offset group, tap, output point): bilinear taps of the moved sample
    position (zeros outside, as GridSample's), computed once; the sampled columns, times
    the mask, feed a grouped convolution reduction in float64 like the reference."""
    x, w, offset = inputs[:3]
    b, mask = _optional(inputs, 3), _optional(inputs, 4)
    out = out_types[0]
    float_only(x.dtype, "DeformConv")
    geometry = {k: attrs[k] for k in ("dilations", "kernel_shape", "pads", "strides")}
    kernel, strides, dilations, pads, out_spatial = conv_geometry(x.shape, w.shape, geometry)
    rank = len(kernel)
    batch, channels = x.shape[:2]
    spatial = x.shape[2:]
    offset_groups = attrs["offset_group"]
    per_offset_group = channels // offset_groups
    taps_per_group = int(np.prod(kernel))
    table_shape = (batch, offset_groups, *kernel, *out_spatial)

    def position(axis: int, n, g, taps, where):
        """Pixel coordinate along ``axis`` sampled by tap ``taps`` at output ``where``."""
        tap = g * taps_per_group + _flat_tap(taps, kernel)
        moved = te.cast(F64, offset[(n, tap * rank + axis, *where)])
        base = where[axis] * strides[axis] - pads[axis] + taps[axis] * dilations[axis]
        return te.cast(F64, base) + moved

    def taps_of(axis: int, index):
        n, g, *rest = index
        taps, where = rest[:rank], rest[rank:]
        return _axis_taps(position(axis, n, g, taps, where), spatial[axis], "linear", "zeros",
                          True)

    zero_index = tuple(te.const(0, "int64") for _ in table_shape)
    tables = [[tuple(te.compute(
        table_shape, lambda *i, axis=axis, k=k, part=part: taps_of(axis, i)[k][part],
        name=f"deform_conv_tap{axis}_{k}_{part}", dtype=dtype, attrs={"keep": True})
        for part, dtype in ((0, "int64"), (1, F64)))
        for k in range(len(taps_of(axis, zero_index)))] for axis in range(rank)]

    def column_body(n, c, *rest):
        g = c // per_offset_group
        point = (n, g, *rest)
        value = te.const(0.0, F64)
        for corner in itertools.product(*tables):
            weight = corner[0][1][point]
            for _, more in corner[1:]:
                weight = weight * more[point]
            value = value + weight * te.cast(F64, x[(n, c, *[i[point] for i, _ in corner])])
        if mask is not None:
            taps = rest[:rank]
            value = value * te.cast(F64, mask[(n, g * taps_per_group + _flat_tap(taps, kernel),
                                               *rest[rank:])])
        return value

    columns = te.compute((batch, channels, *kernel, *out_spatial), column_body,
                         name="deform_conv_columns", dtype=F64, attrs={"keep": True})
    in_per_group, out_per_group = channels // attrs["group"], w.shape[0] // attrs["group"]

    def conv_body(n, m, *where):
        rc = te.reduce_axis(in_per_group, "rc")
        taps = [te.reduce_axis(k, f"rk{d}") for d, k in enumerate(kernel)]
        channel = (m // out_per_group) * in_per_group + rc.var
        tap_vars = [t.var for t in taps]
        return te.sum(columns[(n, channel, *tap_vars, *where)]
                      * te.cast(F64, w[(m, rc.var, *tap_vars)]), axis=[rc, *taps])

    total = te.compute(out.shape, conv_body, name="deform_conv_sum", dtype=F64)

    def finish(n, m, *where):
        value = total[(n, m, *where)]
        if b is not None:
            value = value + te.cast(F64, b[m])
        return te.cast(out.dtype, value)

    return [te.compute(out.shape, finish, name="deform_conv", dtype=out.dtype)]


# ------------------------------------------------------------------ CausalConvWithState

@register_compute("CausalConvWithState")
def causal_conv_with_state(inputs, attrs, out_types):
    """``y[n, c, t] = sum_k padded[n, c, t + k] * w[c, 0, k] (+ b[c])`` over ``padded =
    [past_state, x]`` along time; the new state is the last k - 1 positions of padded."""
    x, w = inputs[:2]
    b, past = _optional(inputs, 2), _optional(inputs, 3)
    float_only(x.dtype, "CausalConvWithState")
    length = x.shape[2]
    carried = w.shape[2] - 1

    def padded(n, c, j):
        """Position ``j`` of [past_state, x] (zeros for an omitted state)."""
        if carried == 0:  # also the empty state's body, which is never run
            return x[n, c, te.minimum(j, te.const(length - 1, "int64"))]
        state = te.const(0.0, x.dtype) if past is None else past[n, c, te.minimum(
            j, te.const(carried - 1, "int64"))]
        return te.if_then_else(j < carried, state, x[n, c, te.maximum(
            j - carried, te.const(0, "int64"))])

    def conv_body(n, c, t):
        k = te.reduce_axis(w.shape[2], "k")
        return te.sum(padded(n, c, t + k.var) * w[c, 0, k.var], axis=k)

    total = te.compute(x.shape, conv_body, name="causal_conv_sum", dtype=x.dtype)

    def finish(n, c, t):
        value = total[n, c, t]
        if b is not None:
            value = value + b[c]
        return value * sigmoid(value) if attrs["activation"] != "none" else value

    outputs = [te.compute(x.shape, finish, name="causal_conv", dtype=x.dtype)]
    if len(out_types) > 1:
        outputs.append(te.compute(out_types[1].shape, lambda n, c, j: padded(n, c, j + length),
                                  name="causal_conv_state", dtype=x.dtype))
    return outputs


# ---------------------------------------------------------------------- LinearAttention

class _LinearAttentionSteps:
    """The state after each unrolled step (``states[t + 1]`` after reading token t) of
    every key/value head, and each step's output, in float32 as the reference."""

    def __init__(self, inputs, attrs):
        query, key, value = inputs[:3]
        past, decay, beta = (_optional(inputs, i) for i in (3, 4, 5))
        self.batch, self.time, q_width = query.shape
        self.kv_heads, self.q_heads = attrs["kv_num_heads"], attrs["q_num_heads"]
        self.group = self.q_heads // self.kv_heads
        self.key_size = q_width // self.q_heads
        self.value_size = value.shape[2] // self.kv_heads
        self.scale = attrs["scale"] or 1.0 / np.sqrt(self.key_size)
        self.query, self.key, self.value = query, key, value
        self.decay, self.beta = decay, beta
        state_shape = (self.batch, self.kv_heads, self.key_size, self.value_size)
        self.states = [te.compute(
            state_shape, lambda n, h, k, v: (te.const(0.0, F32) if past is None
                                             else te.cast(F32, past[n, h, k, v])),
            name="linear_attention_s0", dtype=F32, attrs={"keep": True})]
        self.outputs = []
        for t in range(self.time):
            self._step(t)

    def _f32(self, tensor, *index):
        return te.cast(F32, tensor[index])

    def _step(self, t: int):
        state, ks = self.states[-1], self.key_size
        decay, beta = self.decay, self.beta
        if decay is not None:
            per_key = decay.shape[2] != self.kv_heads

            def decayed_body(n, h, k, v):
                gate = self._f32(decay, n, t, h * ks + k if per_key else h)
                return state[n, h, k, v] * te.exp(gate)

            state = te.compute(state.shape, decayed_body, name=f"linear_attention_d{t}",
                               dtype=F32, attrs={"keep": True})
        def key_at(n, h, k):
            return self._f32(self.key, n, t, h * ks + k)

        def value_at(n, h, v):
            return self._f32(self.value, n, t, h * self.value_size + v)

        written = value_at
        if beta is not None:
            decayed = state

            def recalled_body(n, h, v):
                k = te.reduce_axis(ks, "k")
                return te.sum(decayed[n, h, k.var, v] * key_at(n, h, k.var), axis=k)

            recalled = te.compute((self.batch, self.kv_heads, self.value_size), recalled_body,
                                  name=f"linear_attention_r{t}", dtype=F32)
            per_head = beta.shape[2] != 1

            def written(n, h, v):
                rate = self._f32(beta, n, t, h if per_head else 0)
                return rate * (value_at(n, h, v) - recalled[n, h, v])

        previous = state
        state = te.compute(previous.shape, lambda n, h, k, v: previous[n, h, k, v]
                           + key_at(n, h, k) * written(n, h, v),
                           name=f"linear_attention_s{t + 1}", dtype=F32, attrs={"keep": True})
        self.states.append(state)

        def output_body(n, hq, v):
            k = te.reduce_axis(ks, "k")
            return te.sum(self._f32(self.query, n, t, hq * ks + k.var)
                          * state[n, hq // self.group, k.var, v], axis=k)

        self.outputs.append(te.compute((self.batch, self.q_heads, self.value_size),
                                       output_body, name=f"linear_attention_o{t}", dtype=F32))


@register_compute("LinearAttention")
def linear_attention(inputs, attrs, out_types):
    """Unrolled over time: per token an optional decay of the state, an optional delta
    correction (the state's recall of the key, subtracted from the value and scaled by
    beta), the rank-one update, and every query head's read of its key/value head."""
    query = inputs[0]
    float_only(query.dtype, "LinearAttention")
    past = _optional(inputs, 3)
    if past is not None:
        float_only(past.dtype, "LinearAttention")
    time = query.shape[1]
    if time > MAX_UNROLLED_STEPS or time == 0:
        raise CompileError(f"LinearAttention over {time} steps has no TE compute (1 to "
                           f"{MAX_UNROLLED_STEPS} are unrolled)")
    steps = _LinearAttentionSteps(inputs, attrs)
    out, state_type = out_types[:2]
    scale = te.const(float(steps.scale), F32)

    def output_body(n, t, j):
        hq, v = j // steps.value_size, j % steps.value_size
        value = steps.outputs[-1][n, hq, v]
        for step in range(steps.time - 2, -1, -1):
            value = te.if_then_else(te.equal(t, step), steps.outputs[step][n, hq, v], value)
        return te.cast(out.dtype, scale * value)

    final = steps.states[-1]
    return [te.compute(out.shape, output_body, name="linear_attention", dtype=out.dtype),
            te.compute(state_type.shape, lambda *i: te.cast(state_type.dtype, final[i]),
                       name="linear_attention_state", dtype=state_type.dtype)][:len(out_types)]
