"""Sequence-model ops: RNN, GRU, LSTM, Attention, RotaryEmbedding, CausalConvWithState and
LinearAttention.

RNN, GRU and LSTM are unrolled over the sequence: per step a reduction (the recurrent
matrix product) and elementwise stages for the gates and the new state, in float64
as the reference computes. Steps past a sample's sequence length keep its state and
output zeros; the reverse direction starts each sample at its own last step.

Attention (opset 23+) works in (batch, head, query, key) space whatever the input
layout: 3-D inputs are read through their heads, grouped-query heads read their shared
key/value head, and the cache, mask, causal and sliding-window rules become one additive
bias computed where each score is read. The softmax follows the reference's masked form:
a row that sees no key gives zeros, not NaN.

CausalConvWithState is a depthwise causal convolution over the carried state and the
input; LinearAttention a recurrent state, unrolled over time like RNN/GRU/LSTM.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .. import te
from ..errors import CompileError
from ..ir.types import dtype_from_onnx
from ..ops.sequence_models import RECURRENT_KINDS, activation_parameters, recurrent_activation_names
from .activation import sigmoid
from .common import F64, f64, float_only, optional_input
from .reduction import is_finite
from .registry import register_compute

#: most time steps unrolled into one kernel
MAX_UNROLLED_STEPS = 64


def _sigmoid(x):
    return f64(0.5) * (f64(1.0) + te.tanh(f64(0.5) * x))


def _softplus(x):
    return te.maximum(x, f64(0.0)) + te.log(f64(1.0) + te.exp(-te.fabs(x)))


#: TE forms of the reference's recurrent activations (heterocc.ops.sequence_models)
_ACTIVATIONS: dict[str, Callable] = {
    "relu": lambda x, a, b: te.maximum(x, f64(0.0)),
    "tanh": lambda x, a, b: te.tanh(x),
    "sigmoid": lambda x, a, b: _sigmoid(x),
    "affine": lambda x, a, b: f64(a) * x + f64(b),
    "leakyrelu": lambda x, a, b: te.if_then_else(x >= f64(0.0), x, f64(a) * x),
    "thresholdedrelu": lambda x, a, b: te.if_then_else(x > f64(a), x, f64(0.0)),
    "scaledtanh": lambda x, a, b: f64(a) * te.tanh(f64(b) * x),
    "hardsigmoid": lambda x, a, b: te.minimum(te.maximum(f64(a) * x + f64(b), f64(0.0)), f64(1.0)),
    "elu": lambda x, a, b: te.if_then_else(x >= f64(0.0), x,
                                           f64(a) * (te.exp(te.minimum(x, f64(0.0))) - f64(1.0))),
    "softsign": lambda x, a, b: x / (f64(1.0) + te.fabs(x)),
    "softplus": lambda x, a, b: _softplus(x),
}


# ------------------------------------------------------------------------------ RNN, GRU, LSTM

def _bound(names: list[str], alphas, betas) -> list[Callable]:
    """Activations with alpha/beta bound as the reference binds them."""
    return [lambda x, fn=_ACTIVATIONS[name], a=alpha, b=beta: fn(x, a, b)
            for name, alpha, beta in activation_parameters(names, alphas, betas)]


class _Direction:
    """The unrolled steps of one direction ``d``: ``states[t]`` (and ``cells[t]``) hold
    each sample's state after iteration t."""

    def __init__(self, op: str, inputs, attrs, d: int, activations: list[Callable]):
        x, w, r = inputs[:3]
        self.op, self.d, self.activations = op, d, activations
        self.r = r
        b = optional_input(inputs, 3)
        lengths = optional_input(inputs, 4)
        self.layout = attrs["layout"]
        self.length, self.batch = (x.shape[:2] if self.layout == 0 else x.shape[1::-1])
        self.hidden = r.shape[-1]
        self.gates = w.shape[1]
        self.clip = attrs["clip"]
        self.backwards = attrs["direction"] == "reverse" or d == 1
        self.lengths = lengths
        gates, hidden = self.gates, self.hidden

        def x_at(t, n, i):
            return x[t, n, i] if self.layout == 0 else x[n, t, i]

        def projected_body(t, n, g):
            i = te.reduce_axis(x.shape[2], "i")
            return te.sum(te.cast(F64, x_at(t, n, i.var)) * te.cast(F64, w[d, g, i.var]), axis=i)

        product = te.compute((self.length, self.batch, gates), projected_body,
                             name=f"{op.lower()}_xw{d}", dtype=F64)
        self.projected = te.compute(
            product.shape, lambda t, n, g: product[t, n, g] + self.bias(b, g),
            name=f"{op.lower()}_x{d}", dtype=F64, attrs={"keep": True})
        self.recurrent_bias = (lambda g: self.bias(b, gates + g))
        self.peepholes = optional_input(inputs, 7)
        state_shape = (self.batch, hidden)
        self.states = [self._initial(optional_input(inputs, 5), state_shape, "h")]
        self.cells = [self._initial(optional_input(inputs, 6), state_shape, "c")]
        for t in range(self.length):
            self._step(t, attrs)

    def bias(self, b, g):
        return f64(0.0) if b is None else te.cast(F64, b[self.d, g])

    def _initial(self, given, shape, name: str):
        def body(n, k):
            if given is None:
                return f64(0.0)
            return te.cast(F64, given[self.d, n, k] if self.layout == 0 else given[n, self.d, k])

        return te.compute(shape, body, name=f"{self.op.lower()}_{name}0_{self.d}", dtype=F64,
                          attrs={"keep": True})

    def clipped(self, value):
        if self.clip is None:
            return value
        return te.minimum(te.maximum(value, f64(-self.clip)), f64(self.clip))

    def active(self, t: int, n):
        """Whether sample ``n`` runs iteration ``t``, and the time step it reads."""
        if self.lengths is None:
            step = self.length - 1 - t if self.backwards else t
            return te.const(True, "bool"), te.const(step, "int64")
        length = te.cast("int64", self.lengths[n])
        if not self.backwards:
            return te.const(t, "int64") < length, te.const(t, "int64")
        return te.const(t, "int64") < length, te.maximum(length - 1 - t, te.const(0, "int64"))

    def matmul(self, h, first_gate: int, count: int, name: str):
        """``h @ R[d, first_gate:first_gate + count].T`` plus the recurrent bias."""
        def body(n, g):
            j = te.reduce_axis(self.hidden, "j")
            return te.sum(h[n, j.var] * te.cast(F64, self.r[self.d, first_gate + g, j.var]),
                          axis=j)

        total = te.compute((self.batch, count), body, name=name, dtype=F64)
        return lambda n, g: total[n, g] + self.recurrent_bias(first_gate + g)

    def _step(self, t: int, attrs):
        h, c = self.states[-1], self.cells[-1]
        hidden, prefix = self.hidden, f"{self.op.lower()}_{self.d}_t{t}"

        def pre(n, g):
            _, step = self.active(t, n)
            return self.projected[step, n, g]

        def keep_state(new, old, name):
            return te.compute((self.batch, hidden), lambda n, k: te.if_then_else(
                self.active(t, n)[0], new(n, k), old[n, k]), name=name, dtype=F64,
                attrs={"keep": True})

        if self.op == "RNN":
            rh = self.matmul(h, 0, hidden, prefix + "_rh")
            (f,) = self.activations
            new_h = lambda n, k: f(self.clipped(pre(n, k) + rh(n, k)))  # noqa: E731
            self.states.append(keep_state(new_h, h, prefix + "_h"))
            self.cells.append(c)
            return
        if self.op == "GRU":
            f, g = self.activations
            rzr = self.matmul(h, 0, 2 * hidden, prefix + "_rzr")
            gates = te.compute((self.batch, 2 * hidden), lambda n, k: f(self.clipped(
                pre(n, k) + rzr(n, k))), name=prefix + "_zr", dtype=F64, attrs={"keep": True})
            if attrs["linear_before_reset"]:
                rh = self.matmul(h, 2 * hidden, hidden, prefix + "_rh")
                candidate_pre = lambda n, k: gates[n, hidden + k] * rh(n, k)  # noqa: E731
            else:
                reset_h = te.compute((self.batch, hidden), lambda n, k: gates[n, hidden + k]
                                     * h[n, k], name=prefix + "_reset_h", dtype=F64,
                                     attrs={"keep": True})
                candidate_pre = self.matmul(reset_h, 2 * hidden, hidden, prefix + "_rh")

            def new_h(n, k):
                candidate = g(self.clipped(pre(n, 2 * hidden + k) + candidate_pre(n, k)))
                update = gates[n, k]
                return (f64(1.0) - update) * candidate + update * h[n, k]

            self.states.append(keep_state(new_h, h, prefix + "_h"))
            self.cells.append(c)
            return
        f, g, act_h = self.activations
        rh = self.matmul(h, 0, 4 * hidden, prefix + "_rh")
        p = self.peepholes

        def peep(gate: int, n, k, cell):
            if p is None:
                return f64(0.0)
            return te.cast(F64, p[self.d, gate * hidden + k]) * cell[n, k]

        def gate_pre(gate: int, n, k):
            return pre(n, gate * hidden + k) + rh(n, gate * hidden + k)

        def new_c(n, k):
            i = f(self.clipped(gate_pre(0, n, k) + peep(0, n, k, c)))
            forget = (f64(1.0) - i) if attrs["input_forget"] else \
                f(self.clipped(gate_pre(2, n, k) + peep(2, n, k, c)))
            return forget * c[n, k] + i * g(self.clipped(gate_pre(3, n, k)))

        cell = keep_state(new_c, c, prefix + "_c")

        def new_h(n, k):
            o = f(self.clipped(gate_pre(1, n, k) + peep(1, n, k, cell)))
            return o * act_h(cell[n, k])

        self.states.append(keep_state(new_h, h, prefix + "_h"))
        self.cells.append(cell)

    def output_at(self, s, n, k):
        """Y at time step ``s``: the state after the iteration that read step ``s``, or
        0 past the sample's length."""
        if self.lengths is None:
            iteration = (self.length - 1 - s) if self.backwards else s
            inside = te.const(True, "bool")
        else:
            length = te.cast("int64", self.lengths[n])
            iteration = (length - 1 - s) if self.backwards else te.cast("int64", s)
            inside = te.cast("int64", s) < length
        value = f64(0.0)
        for t in range(self.length):
            value = te.if_then_else(te.equal(iteration, t), self.states[t + 1][n, k], value)
        return te.if_then_else(inside, value, f64(0.0))


def _recurrent_compute(op: str):
    kind = RECURRENT_KINDS[op]

    def compute(inputs, attrs, out_types):
        x = inputs[0]
        float_only(x.dtype, op)
        length = x.shape[0] if attrs["layout"] == 0 else x.shape[1]
        if length > MAX_UNROLLED_STEPS:
            raise CompileError(f"{op} over {length} steps has no TE compute (at most "
                               f"{MAX_UNROLLED_STEPS} are unrolled)")
        if length == 0:
            raise CompileError(f"{op} over an empty sequence has no TE compute")
        names = recurrent_activation_names(kind, attrs)
        functions = _bound(names, attrs["activation_alpha"], attrs["activation_beta"])
        per = len(kind.activations)
        dirs = inputs[1].shape[0]
        directions = [_Direction(op, inputs, attrs, d, functions[d * per:(d + 1) * per])
                      for d in range(dirs)]
        dtype = x.dtype
        layout = attrs["layout"]

        def y_body(*index):
            s, d, n, k = index if layout == 0 else (index[1], index[2], index[0], index[3])
            value = directions[-1].output_at(s, n, k)
            for direction in reversed(directions[:-1]):
                value = te.if_then_else(te.equal(d, direction.d), direction.output_at(s, n, k),
                                        value)
            return te.cast(dtype, value)

        def final(pick):
            def body(*index):
                d, n, k = index if layout == 0 else (index[1], index[0], index[2])
                value = pick(directions[-1])[n, k]
                for direction in reversed(directions[:-1]):
                    value = te.if_then_else(te.equal(d, direction.d), pick(direction)[n, k],
                                            value)
                return te.cast(dtype, value)

            return body

        outputs = [te.compute(out_types[0].shape, y_body, name=f"{op.lower()}_y", dtype=dtype),
                   te.compute(out_types[1].shape, final(lambda r: r.states[-1]),
                              name=f"{op.lower()}_y_h", dtype=dtype)]
        if kind.states == 2 and len(out_types) > 2:
            outputs.append(te.compute(out_types[2].shape, final(lambda r: r.cells[-1]),
                                      name=f"{op.lower()}_y_c", dtype=dtype))
        return outputs[:len(out_types)]

    return compute


for _op in RECURRENT_KINDS:
    register_compute(_op)(_recurrent_compute(_op))


# ------------------------------------------------------------------ Attention, RotaryEmbedding

def _heads_view(x: te.Tensor, heads: int):
    """An accessor ``(batch, head, position, feature) -> element`` of a 4-D tensor or of
    a 3-D (batch, position, heads * size) one."""
    if x.ndim == 4:
        return lambda b, h, s, d: x[b, h, s, d]
    size = x.shape[2] // heads
    return lambda b, h, s, d: x[b, s, h * size + d]


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
    mask = optional_input(inputs, 3)
    past_key, past_value = optional_input(inputs, 4), optional_input(inputs, 5)
    nonpad = optional_input(inputs, 6)
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
    positions = optional_input(inputs, 3)
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


# ------------------------------------------------------------------------- CausalConvWithState

F32 = "float32"


@register_compute("CausalConvWithState")
def causal_conv_with_state(inputs, attrs, out_types):
    """``y[n, c, t] = sum_k padded[n, c, t + k] * w[c, 0, k] (+ b[c])`` over ``padded =
    [past_state, x]`` along time; the new state is the last k - 1 positions of padded."""
    x, w = inputs[:2]
    b, past = optional_input(inputs, 2), optional_input(inputs, 3)
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


# ----------------------------------------------------------------------------- LinearAttention

class _LinearAttentionSteps:
    """The state after each unrolled step (``states[t + 1]`` after reading token t) of
    every key/value head, and each step's output, in float32 as the reference."""

    def __init__(self, inputs, attrs):
        query, key, value = inputs[:3]
        past, decay, beta = (optional_input(inputs, i) for i in (3, 4, 5))
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
    past = optional_input(inputs, 3)
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
