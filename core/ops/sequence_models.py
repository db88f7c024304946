"""Sequence-model ops: scaled dot-product Attention (opset 23+), RotaryEmbedding, the
recurrent RNN, GRU and LSTM, and the stateful CausalConvWithState (depthwise causal conv)
and LinearAttention (recurrent linear attention with linear/gated/delta/gated-delta
updates)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..ir.types import FLOAT_DTYPES, TensorType, dtype_from_onnx
from .activation import sigmoid_of
from .common import broadcasts_to, dtype_attribute, require_dtype, require_shape, typed_input
from .nn import conv_nd
from .registry import REQUIRED, FusionKind, InferContext, register_op

# --------------------------------------------------------------------------- Attention

_QK_RAW, _QK_SOFTCAPPED, _QK_BIASED, _QK_PROBABILITIES = range(4)


@dataclass(frozen=True)
class AttentionShapes:
    """Sizes of one Attention node, after 3-D inputs are split into heads."""

    batch: int
    q_heads: int
    kv_heads: int
    q_length: int
    kv_length: int
    past_length: int
    head_size: int
    v_head_size: int

    @property
    def total_length(self) -> int:
        return self.past_length + self.kv_length


def _head_count(ctx: InferContext, name: str, hidden: int) -> int:
    heads = ctx.attrs[name]
    if not heads or heads <= 0:
        raise ctx.error(f"3-D inputs need a positive {name} attribute (got {heads})")
    if hidden % heads:
        raise ctx.error(f"hidden size {hidden} does not split into {name}={heads} heads")
    return heads


def _attention_shapes(ctx: InferContext) -> AttentionShapes:
    q, k, v = ctx.type(0), ctx.type(1), ctx.type(2)
    if q.ndim not in (3, 4) or k.ndim != q.ndim or v.ndim != q.ndim:
        raise ctx.error(f"Q {q}, K {k} and V {v} must all be 3-D or all be 4-D")
    if q.ndim == 3:
        q_heads = _head_count(ctx, "q_num_heads", q.shape[2])
        kv_heads = _head_count(ctx, "kv_num_heads", k.shape[2])
        if v.shape[2] % kv_heads:
            raise ctx.error(f"V hidden size {v.shape[2]} does not split into "
                            f"kv_num_heads={kv_heads} heads")
        sizes = (q.shape[2] // q_heads, k.shape[2] // kv_heads, v.shape[2] // kv_heads)
        lengths = (q.shape[1], k.shape[1], v.shape[1])
    else:
        q_heads, kv_heads = q.shape[1], k.shape[1]
        if v.shape[1] != kv_heads:
            raise ctx.error(f"K {k} and V {v} must have the same number of heads")
        sizes = (q.shape[3], k.shape[3], v.shape[3])
        lengths = (q.shape[2], k.shape[2], v.shape[2])
    if not q.shape[0] == k.shape[0] == v.shape[0]:
        raise ctx.error(f"Q {q}, K {k} and V {v} must have the same batch size")
    if sizes[0] != sizes[1]:
        raise ctx.error(f"Q head size {sizes[0]} differs from K head size {sizes[1]}")
    if lengths[1] != lengths[2]:
        raise ctx.error(f"K {k} and V {v} must have the same sequence length")
    if q_heads % kv_heads:
        raise ctx.error(f"{q_heads} query heads are not a multiple of {kv_heads} key/value "
                        "heads (grouped-query attention needs a whole group per kv head)")
    past = 0
    if ctx.has(4) != ctx.has(5):
        raise ctx.error("past_key and past_value must be given together")
    if ctx.has(4):
        if ctx.has(6):
            raise ctx.error("nonpad_kv_seqlen cannot be combined with past_key/past_value")
        past_key, past_value = ctx.type(4), ctx.type(5)
        past = past_key.shape[2] if past_key.ndim == 4 else -1
        expected_key = (q.shape[0], kv_heads, past, sizes[1])
        expected_value = (q.shape[0], kv_heads, past, sizes[2])
        if past_key.shape != expected_key or past_value.shape != expected_value:
            raise ctx.error(f"past_key {past_key} and past_value {past_value} must have "
                            f"shapes {expected_key} and {expected_value}")
    return AttentionShapes(q.shape[0], q_heads, kv_heads, lengths[0], lengths[1], past,
                           sizes[0], sizes[2])


def _infer_attention(ctx: InferContext):
    q = ctx.type(0)
    require_dtype(ctx, "Q", q.dtype, FLOAT_DTYPES)
    for index, name in ((1, "K"), (2, "V"), (4, "past_key"), (5, "past_value")):
        if ctx.has(index) and ctx.type(index).dtype != q.dtype:
            raise ctx.error(f"{name} {ctx.type(index)} must have Q's dtype {q.dtype}")
    shapes = _attention_shapes(ctx)
    scores = (shapes.batch, shapes.q_heads, shapes.q_length, shapes.total_length)
    if ctx.has(3):
        mask = ctx.type(3)
        if mask.dtype not in ("bool", q.dtype):
            raise ctx.error(f"attn_mask {mask} must be bool or {q.dtype}")
        if mask.ndim and mask.shape[-1] > shapes.total_length:
            raise ctx.error(f"attn_mask {mask} is longer than the {shapes.total_length} keys")
        padded = mask.shape[:-1] + (shapes.total_length,) if mask.ndim else mask.shape
        if not broadcasts_to(padded, scores):
            raise ctx.error(f"attn_mask {mask} does not broadcast to the scores {scores}")
    if ctx.has(6) and ctx.type(6).shape != (shapes.batch,):
        raise ctx.error(f"nonpad_kv_seqlen {ctx.type(6)} must have shape ({shapes.batch},)")
    dtype_attribute(ctx, "softmax_precision", FLOAT_DTYPES)
    if ctx.attrs["qk_matmul_output_mode"] not in range(4):
        raise ctx.error(f"qk_matmul_output_mode {ctx.attrs['qk_matmul_output_mode']} must be "
                        "0, 1, 2 or 3")
    for side in ("left_window_size", "right_window_size"):
        if ctx.attrs[side] < -1:
            raise ctx.error(f"{side} {ctx.attrs[side]} must be -1 (unbounded) or >= 0")
    if q.ndim == 3:
        y = (shapes.batch, shapes.q_length, shapes.q_heads * shapes.v_head_size)
    else:
        y = (shapes.batch, shapes.q_heads, shapes.q_length, shapes.v_head_size)
    cache = (shapes.batch, shapes.kv_heads, shapes.total_length)
    return [TensorType(y, q.dtype), TensorType(cache + (shapes.head_size,), q.dtype),
            TensorType(cache + (shapes.v_head_size,), q.dtype), TensorType(scores, q.dtype)]


def _split_heads(x: np.ndarray, heads: int) -> np.ndarray:
    """(batch, length, heads * size) -> (batch, heads, length, size)."""
    batch, length, hidden = x.shape
    return x.reshape(batch, length, heads, hidden // heads).transpose(0, 2, 1, 3)


def _blocked(allowed: np.ndarray, dtype) -> np.ndarray:
    """Additive bias: 0 where ``allowed``, -inf elsewhere."""
    return np.where(allowed, dtype.type(0), dtype.type(-np.inf))


def _query_offsets(past_length: int, nonpad_kv_seqlen, q_length: int):
    """Keys that precede each query block: (batch, 1, 1, 1) per sample, or a scalar."""
    if nonpad_kv_seqlen is not None and past_length == 0:
        return (nonpad_kv_seqlen.astype(np.int64) - q_length).reshape(-1, 1, 1, 1)
    return past_length


def attention_bias(dtype, q_length: int, total_length: int, attn_mask=None,
                   nonpad_kv_seqlen=None, *, past_length: int = 0, is_causal: int = 0,
                   left_window_size: int = -1, right_window_size: int = -1) -> np.ndarray:
    """The additive score bias of Attention, broadcastable to (batch, heads, q, keys).

    It composes the mask (bool: -inf where False; float: added; a short last
    axis counts as masked beyond its end), the bottom-right-aligned causal
    frontier, the sliding window and the padding given by nonpad_kv_seqlen.
    """
    dtype = np.dtype(dtype)
    bias = np.zeros((q_length, total_length), dtype)
    if attn_mask is not None:
        missing = total_length - attn_mask.shape[-1]
        fill = False if attn_mask.dtype == np.bool_ else -np.inf
        mask = np.pad(attn_mask, [(0, 0)] * (attn_mask.ndim - 1) + [(0, missing)],
                      constant_values=fill)
        bias = bias + (_blocked(mask, dtype) if mask.dtype == np.bool_ else mask)
    offsets = _query_offsets(past_length, nonpad_kv_seqlen, q_length)
    # how far each key lies behind its query's absolute position
    lag = np.arange(q_length)[:, None] + offsets - np.arange(total_length)[None, :]
    if is_causal:
        bias = bias + _blocked(lag >= 0, dtype)
    if left_window_size >= 0:
        bias = bias + _blocked(lag <= left_window_size, dtype)
    if right_window_size >= 0:
        bias = bias + _blocked(-lag <= right_window_size, dtype)
    if nonpad_kv_seqlen is not None:
        valid = np.arange(total_length) < nonpad_kv_seqlen.reshape(-1, 1, 1, 1)
        bias = bias + _blocked(valid, dtype)
    return bias


def masked_softmax(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis; a row of only -inf gives zeros instead of NaN."""
    peak = scores.max(axis=-1, keepdims=True)
    peak = np.where(np.isneginf(peak), scores.dtype.type(0), peak)
    weights = np.exp(scores - peak)
    total = weights.sum(axis=-1, keepdims=True)
    return weights / np.where(total == 0, scores.dtype.type(1), total)


_ATTENTION_ATTRS = {"is_causal": 0, "kv_num_heads": None, "left_window_size": -1,
                    "q_num_heads": None, "qk_matmul_output_mode": 0,
                    "right_window_size": -1, "scale": None, "softcap": 0.0,
                    "softmax_precision": None}


@register_op("Attention", infer=_infer_attention, fusion=FusionKind.OPAQUE,
             attrs=_ATTENTION_ATTRS)
def attention(q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None,
              *, is_causal, kv_num_heads, left_window_size, q_num_heads,
              qk_matmul_output_mode, right_window_size, scale, softcap, softmax_precision):
    """ONNX Attention (opset 23+): MHA / GQA / MQA with masks, causal and sliding windows,
    a KV cache (past/present), softcap and the optional QK debug output.

    Returns (Y, present_key, present_value, qk_matmul_output).
    """
    dtype = q.dtype
    three_d = q.ndim == 3
    if three_d:
        q, k, v = _split_heads(q, q_num_heads), _split_heads(k, kv_num_heads), \
            _split_heads(v, kv_num_heads)
    present_key = k if past_key is None else np.concatenate([past_key, k], axis=2)
    present_value = v if past_value is None else np.concatenate([past_value, v], axis=2)
    q_length, total_length = q.shape[2], present_key.shape[2]
    bias = attention_bias(dtype, q_length, total_length, attn_mask, nonpad_kv_seqlen,
                          past_length=0 if past_key is None else past_key.shape[2],
                          is_causal=is_causal, left_window_size=left_window_size,
                          right_window_size=right_window_size)
    group = q.shape[1] // present_key.shape[1]
    keys = np.repeat(present_key, group, axis=1)
    values = np.repeat(present_value, group, axis=1)
    # Q and K are each scaled by sqrt(scale) so the product cannot overflow first
    root = dtype.type(np.sqrt(scale if scale is not None else 1 / np.sqrt(q.shape[-1])))
    raw = np.matmul(q * root, np.swapaxes(keys * root, -1, -2))
    capped = softcap * np.tanh(raw / dtype.type(softcap)) if softcap > 0 else raw
    biased = capped + bias
    if softmax_precision:
        biased_for_softmax = biased.astype(dtype_from_onnx(softmax_precision))
    else:
        biased_for_softmax = biased
    probabilities = masked_softmax(biased_for_softmax)
    # a query that may see no key at all attends to nothing
    blind = np.isneginf(bias.max(axis=-1, keepdims=True))
    probabilities = np.where(blind, probabilities.dtype.type(0), probabilities).astype(dtype)
    y = np.matmul(probabilities, values)
    if three_d:
        y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], q_length, -1)
    debug = (raw, capped, biased, probabilities)[qk_matmul_output_mode]
    debug = np.broadcast_to(debug, (*q.shape[:2], q_length, total_length)).astype(dtype)
    return y.astype(dtype, copy=False), present_key, present_value, debug


# --------------------------------------------------------------------------- RotaryEmbedding


def _infer_rotary(ctx: InferContext):
    x, cos, sin = ctx.type(0), ctx.type(1), ctx.type(2)
    require_dtype(ctx, "X", x.dtype, FLOAT_DTYPES)
    if cos.dtype != x.dtype or sin.dtype != x.dtype:
        raise ctx.error(f"cos_cache {cos} and sin_cache {sin} must have X's dtype {x.dtype}")
    if x.ndim == 4:
        batch, _, length, head_size = x.shape
    elif x.ndim == 3:
        heads = ctx.attrs["num_heads"]
        if not heads or x.shape[2] % heads:
            raise ctx.error(f"3-D X {x} needs a num_heads attribute dividing its hidden size "
                            f"(got {heads})")
        batch, length, head_size = x.shape[0], x.shape[1], x.shape[2] // heads
    else:
        raise ctx.error(f"X {x} must be 3-D (batch, seq, hidden) or 4-D (batch, heads, seq, "
                        "head_size)")
    rotated = ctx.attrs["rotary_embedding_dim"] or head_size
    if rotated % 2 or rotated > head_size:
        raise ctx.error(f"rotary_embedding_dim {rotated} must be even and at most the head "
                        f"size {head_size}")
    if ctx.has(3):
        positions = ctx.type(3)
        if positions.shape != (batch, length):
            raise ctx.error(f"position_ids {positions} must have shape ({batch}, {length})")
        expected = cos.shape[:1] + (rotated // 2,)
    else:
        expected = (batch, length, rotated // 2)
    if cos.shape != expected or sin.shape != expected:
        raise ctx.error(f"cos_cache {cos} and sin_cache {sin} must have shape {expected}")
    return [x]


@register_op("RotaryEmbedding", infer=_infer_rotary, fusion=FusionKind.OPAQUE,
             attrs={"interleaved": 0, "num_heads": None, "rotary_embedding_dim": 0})
def rotary_embedding(x, cos_cache, sin_cache, position_ids=None, *, interleaved, num_heads,
                     rotary_embedding_dim):
    """ONNX RotaryEmbedding: rotate (half-split or interleaved) pairs of each head's first
    rotary_embedding_dim features by per-position angles."""
    # work on (batch, seq, heads, head_size)
    heads_first = x.ndim == 4
    work = x.transpose(0, 2, 1, 3) if heads_first else x.reshape(*x.shape[:2], num_heads, -1)
    rotated = rotary_embedding_dim or work.shape[-1]
    if position_ids is not None:
        cos_cache, sin_cache = cos_cache[position_ids], sin_cache[position_ids]
    cos, sin = cos_cache[:, :, None, :], sin_cache[:, :, None, :]
    part = work[..., :rotated]
    if interleaved:
        first, second = part[..., 0::2], part[..., 1::2]
    else:
        first, second = part[..., :rotated // 2], part[..., rotated // 2:]
    real = cos * first - sin * second
    imaginary = sin * first + cos * second
    if interleaved:
        turned = np.stack([real, imaginary], axis=-1).reshape(part.shape)
    else:
        turned = np.concatenate([real, imaginary], axis=-1)
    out = np.concatenate([turned, work[..., rotated:]], axis=-1).astype(x.dtype, copy=False)
    return out.transpose(0, 2, 1, 3) if heads_first else out.reshape(x.shape)


# --------------------------------------------------------------------------- RNN, GRU, LSTM


@dataclass(frozen=True)
class _Activation:
    """An ONNX recurrent activation: fn(x, alpha, beta) and its default alpha/beta."""

    fn: Callable[[np.ndarray, float, float], np.ndarray]
    alpha: float | None = None
    beta: float | None = None


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # overflow-free logistic


_RECURRENT_ACTIVATIONS = {
    "relu": _Activation(lambda x, a, b: np.maximum(x, 0.0)),
    "tanh": _Activation(lambda x, a, b: np.tanh(x)),
    "sigmoid": _Activation(lambda x, a, b: _sigmoid(x)),
    "affine": _Activation(lambda x, a, b: a * x + b, 1.0, 0.0),
    "leakyrelu": _Activation(lambda x, a, b: np.where(x >= 0, x, a * x), 0.01),
    "thresholdedrelu": _Activation(lambda x, a, b: np.where(x > a, x, 0.0), 1.0),
    "scaledtanh": _Activation(lambda x, a, b: a * np.tanh(b * x), 1.0, 1.0),
    "hardsigmoid": _Activation(lambda x, a, b: np.clip(a * x + b, 0.0, 1.0), 0.2, 0.5),
    "elu": _Activation(lambda x, a, b: np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0))),
                       1.0),
    "softsign": _Activation(lambda x, a, b: x / (1 + np.abs(x))),
    "softplus": _Activation(lambda x, a, b: np.logaddexp(0.0, x)),
}


@dataclass(frozen=True)
class RecurrentKind:
    """What distinguishes RNN, GRU and LSTM: gate count and default activations."""

    gates: int
    activations: tuple[str, ...]
    states: int  # 1: hidden; 2: hidden and cell


#: the recurrent ops by name
RECURRENT_KINDS = {"RNN": RecurrentKind(1, ("Tanh",), 1),
                   "GRU": RecurrentKind(3, ("Sigmoid", "Tanh"), 1),
                   "LSTM": RecurrentKind(4, ("Sigmoid", "Tanh", "Tanh"), 2)}


def _directions(direction: str) -> int:
    return 2 if direction == "bidirectional" else 1


def recurrent_activation_names(kind: RecurrentKind, attrs) -> list[str]:
    """The lower-case activation names of a recurrent op, per direction (its
    ``activations`` attribute, or the kind's defaults)."""
    names = attrs["activations"] or list(kind.activations) * _directions(attrs["direction"])
    return [name.lower() for name in names]


def _infer_recurrent(ctx: InferContext):
    kind = RECURRENT_KINDS[ctx.op]
    x, w, r = ctx.type(0), ctx.type(1), ctx.type(2)
    require_dtype(ctx, "X", x.dtype, FLOAT_DTYPES)
    direction = ctx.attrs["direction"]
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ctx.error(f"direction {direction!r} must be forward, reverse or bidirectional")
    dirs = _directions(direction)
    if x.ndim != 3:
        raise ctx.error(f"X {x} must be 3-D")
    length, batch = x.shape[:2] if ctx.attrs["layout"] == 0 else x.shape[1::-1]
    hidden = ctx.attrs["hidden_size"] or r.shape[-1]
    gates = kind.gates * hidden
    if w.shape != (dirs, gates, x.shape[2]) or r.shape != (dirs, gates, hidden):
        raise ctx.error(f"W {w} and R {r} must have shapes {(dirs, gates, x.shape[2])} and "
                        f"{(dirs, gates, hidden)} (direction {direction}, hidden_size {hidden})")
    state = (dirs, batch, hidden) if ctx.attrs["layout"] == 0 else (batch, dirs, hidden)
    expected = {3: (dirs, 2 * gates), 4: (batch,), 5: state, 6: state, 7: (dirs, 3 * hidden)}
    names = {3: "B", 4: "sequence_lens", 5: "initial_h", 6: "initial_c", 7: "P"}
    for index, shape in expected.items():
        if index < len(ctx.types) and ctx.has(index) and ctx.type(index).shape != shape:
            raise ctx.error(f"{names[index]} {ctx.type(index)} must have shape {shape}")
    activations = recurrent_activation_names(kind, ctx.attrs)
    unknown = [a for a in activations if a not in _RECURRENT_ACTIVATIONS]
    if unknown or len(activations) != len(kind.activations) * dirs:
        raise ctx.error(f"activations {ctx.attrs['activations']} must list "
                        f"{len(kind.activations) * dirs} of "
                        f"{', '.join(sorted(_RECURRENT_ACTIVATIONS))}")
    y = (length, dirs, batch, hidden) if ctx.attrs["layout"] == 0 else \
        (batch, length, dirs, hidden)
    return [TensorType(y, x.dtype)] + [TensorType(state, x.dtype)] * kind.states


def activation_parameters(names: list[str], alphas, betas) -> list[tuple[str, float | None,
                                                                        float | None]]:
    """``(name, alpha, beta)`` per activation: alpha/beta taken in order from the attribute
    lists by the activations that take them (defaults when the lists run out), ``None``
    for those that take none."""
    alphas, betas = list(alphas or []), list(betas or [])
    bound = []
    for name in names:
        spec = _RECURRENT_ACTIVATIONS[name]
        alpha = (alphas.pop(0) if alphas else spec.alpha) if spec.alpha is not None else None
        beta = (betas.pop(0) if betas else spec.beta) if spec.beta is not None else None
        bound.append((name, alpha, beta))
    return bound


def _bound_activations(names: list[str], alphas, betas) -> list[Callable]:
    """The activations as functions of x, their alpha/beta bound."""
    return [lambda x, fn=_RECURRENT_ACTIVATIONS[name].fn, a=alpha, b=beta: fn(x, a, b)
            for name, alpha, beta in activation_parameters(names, alphas, betas)]


@dataclass(frozen=True)
class _CellWeights:
    """One direction's recurrent weights, biases and activations."""

    r: np.ndarray  # gates*hidden x hidden
    r_bias: np.ndarray
    peepholes: np.ndarray | None
    activations: list[Callable]
    clip: float | None
    linear_before_reset: int = 0
    input_forget: int = 0

    def clipped(self, value: np.ndarray) -> np.ndarray:
        return value if self.clip is None else np.clip(value, -self.clip, self.clip)


def _rnn_cell(xw, h, c, cell: _CellWeights):
    return cell.activations[0](cell.clipped(xw + h @ cell.r.T + cell.r_bias)), c


def _gru_cell(xw, h, c, cell: _CellWeights):
    f, g = cell.activations
    x_z, x_r, x_h = np.split(xw, 3, axis=-1)
    r_z, r_r, r_h = np.split(cell.r, 3, axis=0)
    b_z, b_r, b_h = np.split(cell.r_bias, 3)
    update = f(cell.clipped(x_z + h @ r_z.T + b_z))
    reset = f(cell.clipped(x_r + h @ r_r.T + b_r))
    if cell.linear_before_reset:
        candidate = g(cell.clipped(x_h + reset * (h @ r_h.T + b_h)))
    else:
        candidate = g(cell.clipped(x_h + (reset * h) @ r_h.T + b_h))
    return (1 - update) * candidate + update * h, c


def _lstm_cell(xw, h, c, cell: _CellWeights):
    f, g, act_h = cell.activations
    pre = xw + h @ cell.r.T + cell.r_bias
    pre_i, pre_o, pre_f, pre_c = np.split(pre, 4, axis=-1)
    p_i, p_o, p_f = np.split(cell.peepholes, 3) if cell.peepholes is not None else (0, 0, 0)
    input_gate = f(cell.clipped(pre_i + p_i * c))
    if cell.input_forget:
        forget_gate = 1 - input_gate
    else:
        forget_gate = f(cell.clipped(pre_f + p_f * c))
    c_new = forget_gate * c + input_gate * g(cell.clipped(pre_c))
    output_gate = f(cell.clipped(pre_o + p_o * c_new))
    return output_gate * act_h(c_new), c_new


_CELLS = {"RNN": _rnn_cell, "GRU": _gru_cell, "LSTM": _lstm_cell}


def run_recurrent(op: str, x, w, r, b=None, sequence_lens=None, initial_h=None,
                  initial_c=None, p=None, *, activation_alpha=None, activation_beta=None,
                  activations=None, clip=None, direction="forward", hidden_size=None,
                  layout=0, linear_before_reset=0, input_forget=0, output_sequence=0):
    """Run RNN / GRU / LSTM ``op`` over a batch of sequences (in float64).

    Steps past a sample's sequence length leave its state unchanged and output
    zeros; the reverse direction runs each sample from its own last step.
    Returns (Y, Y_h) or, for LSTM, (Y, Y_h, Y_c) in the op's layout.
    """
    kind = RECURRENT_KINDS[op]
    dtype = x.dtype
    if layout:
        x = x.swapaxes(0, 1)
        initial_h = None if initial_h is None else initial_h.swapaxes(0, 1)
        initial_c = None if initial_c is None else initial_c.swapaxes(0, 1)
    length, batch = x.shape[:2]
    dirs, hidden = w.shape[0], r.shape[-1]
    lengths = np.full(batch, length) if sequence_lens is None else sequence_lens.astype(np.int64)
    names = recurrent_activation_names(kind, {"activations": activations, "direction": direction})
    functions = _bound_activations(names, activation_alpha, activation_beta)
    per_direction = len(kind.activations)
    samples = np.arange(batch)
    y = np.zeros((length, dirs, batch, hidden))
    finals_h, finals_c = [], []
    for d in range(dirs):
        gates = w.shape[1]
        biases = np.zeros(2 * gates) if b is None else b[d].astype(np.float64)
        cell = _CellWeights(r[d].astype(np.float64), biases[gates:],
                            None if p is None else p[d].astype(np.float64),
                            functions[d * per_direction:(d + 1) * per_direction], clip,
                            linear_before_reset, input_forget)
        projected = x.astype(np.float64) @ w[d].astype(np.float64).T + biases[:gates]
        h = np.zeros((batch, hidden)) if initial_h is None else initial_h[d].astype(np.float64)
        c = np.zeros((batch, hidden)) if initial_c is None else initial_c[d].astype(np.float64)
        backwards = direction == "reverse" or d == 1
        for t in range(length):
            active = t < lengths
            steps = np.maximum(lengths - 1 - t, 0) if backwards else np.full(batch, t)
            h_new, c_new = _CELLS[op](projected[steps, samples], h, c, cell)
            h = np.where(active[:, None], h_new, h)
            c = np.where(active[:, None], c_new, c)
            y[steps[active], d, samples[active]] = h[active]
        finals_h.append(h)
        finals_c.append(c)
    y_h, y_c = np.stack(finals_h), np.stack(finals_c)
    if layout:
        y, y_h, y_c = y.transpose(2, 0, 1, 3), y_h.swapaxes(0, 1), y_c.swapaxes(0, 1)
    outputs = (y.astype(dtype), y_h.astype(dtype), y_c.astype(dtype))
    return outputs[:1 + kind.states]


# output_sequence (opset 1 only) chose whether Y is produced; Y is always computed here
_RECURRENT_ATTRS = {"activation_alpha": None, "activation_beta": None, "activations": None,
                    "clip": None, "direction": "forward", "hidden_size": None, "layout": 0,
                    "output_sequence": 0}


@register_op("RNN", infer=_infer_recurrent, fusion=FusionKind.OPAQUE, attrs=_RECURRENT_ATTRS)
def rnn(x, w, r, b=None, sequence_lens=None, initial_h=None, **attrs):
    """ONNX RNN: H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb); outputs (Y, Y_h)."""
    return run_recurrent("RNN", x, w, r, b, sequence_lens, initial_h, **attrs)


@register_op("GRU", infer=_infer_recurrent, fusion=FusionKind.OPAQUE,
             attrs={**_RECURRENT_ATTRS, "linear_before_reset": 0})
def gru(x, w, r, b=None, sequence_lens=None, initial_h=None, **attrs):
    """ONNX GRU (gates z, r, h; linear_before_reset); outputs (Y, Y_h)."""
    return run_recurrent("GRU", x, w, r, b, sequence_lens, initial_h, **attrs)


@register_op("LSTM", infer=_infer_recurrent, fusion=FusionKind.OPAQUE,
             attrs={**_RECURRENT_ATTRS, "input_forget": 0})
def lstm(x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None, **attrs):
    """ONNX LSTM (gates i, o, f, c; peepholes P; input_forget); outputs (Y, Y_h, Y_c)."""
    return run_recurrent("LSTM", x, w, r, b, sequence_lens, initial_h, initial_c, p, **attrs)


# ------------------------------------------------------- CausalConvWithState, LinearAttention

#: the formats of the stateful recurrent ops (CausalConvWithState, LinearAttention)
_NARROW_FLOATS = ("float16", "float32", "bfloat16")


def _accumulator(dtype: np.dtype) -> np.dtype:
    """float32 for the 16-bit formats (ONNX's references accumulate there too)."""
    return np.dtype(np.float32) if dtype.itemsize < 4 else dtype


# ------------------------------------------------------------------ CausalConvWithState

_CONV_ACTIVATIONS = ("none", "silu", "swish")


def _infer_causal_conv(ctx: InferContext):
    x = typed_input(ctx, 0, "input", _NARROW_FLOATS)
    if x.ndim != 3:
        raise ctx.error(f"input {x} must have rank 3 (batch, channels, length)")
    batch, channels, _ = x.shape
    weight = typed_input(ctx, 1, "weight", (x.dtype,))
    if weight.ndim != 3 or weight.shape[:2] != (channels, 1) or weight.shape[2] < 1:
        raise ctx.error(f"weight {weight} must have shape ({channels}, 1, k) with k >= 1")
    state_shape = (batch, channels, weight.shape[2] - 1)
    if ctx.has(2):
        typed_input(ctx, 2, "bias", (x.dtype,))
        require_shape(ctx, 2, "bias", (channels,))
    if ctx.has(3):
        typed_input(ctx, 3, "past_state", (x.dtype,))
        require_shape(ctx, 3, "past_state", state_shape)
    if ctx.attrs["activation"] not in _CONV_ACTIVATIONS:
        raise ctx.error(f"activation {ctx.attrs['activation']!r} is not one of "
                        f"{', '.join(_CONV_ACTIVATIONS)}")
    return [x, TensorType(state_shape, x.dtype)]


@register_op("CausalConvWithState", infer=_infer_causal_conv, fusion=FusionKind.OPAQUE,
             attrs={"activation": "none"})
def causal_conv_with_state(x, weight, bias=None, past_state=None, *, activation):
    """Depthwise causal 1-D convolution over [past_state, x]; returns the output (optionally
    SiLU-activated) and the last k - 1 positions as the next state."""
    batch, channels, _ = x.shape
    carried = weight.shape[2] - 1
    if past_state is None:
        past_state = np.zeros((batch, channels, carried), x.dtype)
    padded = np.concatenate([past_state, x], axis=2)
    acc = _accumulator(x.dtype)
    y = conv_nd(padded, weight, bias, group=channels, acc_dtype=acc).astype(x.dtype)
    if activation != "none":  # silu and swish are one function
        wide = y.astype(np.float32)
        y = (wide * sigmoid_of(wide)).astype(x.dtype)
    return y, padded[:, :, padded.shape[2] - carried:]


# ---------------------------------------------------------------------- LinearAttention

_UPDATE_RULES = ("linear", "gated", "delta", "gated_delta")


def _gated(rule: str) -> bool:
    return rule in ("gated", "gated_delta")


def _delta(rule: str) -> bool:
    return rule in ("delta", "gated_delta")


def _infer_linear_attention(ctx: InferContext):
    rule, q_heads, kv_heads = (ctx.attrs["update_rule"], ctx.attrs["q_num_heads"],
                               ctx.attrs["kv_num_heads"])
    if rule not in _UPDATE_RULES:
        raise ctx.error(f"update_rule {rule!r} is not one of {', '.join(_UPDATE_RULES)}")
    if q_heads < 1 or kv_heads < 1 or q_heads % kv_heads:
        raise ctx.error(f"q_num_heads ({q_heads}) must be a positive multiple of kv_num_heads "
                        f"({kv_heads})")
    query = typed_input(ctx, 0, "query", _NARROW_FLOATS)
    for index, name in ((1, "key"), (2, "value")):
        typed_input(ctx, index, name, (query.dtype,))
    if any(ctx.type(i).ndim != 3 or ctx.type(i).shape[:2] != query.shape[:2] for i in range(3)):
        raise ctx.error(f"query {query}, key {ctx.type(1)} and value {ctx.type(2)} must all be "
                        "(batch, time, heads * head_size) with one batch and time")
    batch, time, q_width = query.shape
    key_width, value_width = ctx.type(1).shape[2], ctx.type(2).shape[2]
    if q_width % q_heads or key_width != kv_heads * (q_width // q_heads) \
            or value_width % kv_heads:
        raise ctx.error(f"query width {q_width}, key width {key_width} and value width "
                        f"{value_width} do not split into {q_heads} query and {kv_heads} "
                        "key/value heads sharing one key size")
    key_size, value_size = q_width // q_heads, value_width // kv_heads
    state = TensorType((batch, kv_heads, key_size, value_size), query.dtype)
    if ctx.has(3):
        state = TensorType(state.shape, typed_input(ctx, 3, "past_state", _NARROW_FLOATS).dtype)
        require_shape(ctx, 3, "past_state", state.shape)
    gate_widths = (kv_heads * key_size, kv_heads)
    for index, name, needed, widths in ((4, "decay", _gated(rule), gate_widths),
                                        (5, "beta", _delta(rule), (kv_heads, 1))):
        if ctx.has(index) != needed:
            raise ctx.error(f"update_rule {rule!r} {'needs' if needed else 'takes no'} "
                            f"{name} (input {index})")
        if needed:
            given = typed_input(ctx, index, name, (query.dtype,))
            if given.shape not in [(batch, time, w) for w in widths]:
                raise ctx.error(f"{name} {given} must be (batch, time, w) with w in "
                                f"{sorted(set(widths))}")
    return [TensorType((batch, time, q_heads * value_size), query.dtype), state]


def _heads(x: np.ndarray, heads: int) -> np.ndarray:
    """(batch, time, heads * size) -> float32 (batch, heads, time, size)."""
    batch, time, width = x.shape
    return x.astype(np.float32).reshape(batch, time, heads, width // heads).transpose(0, 2, 1, 3)


@register_op("LinearAttention", infer=_infer_linear_attention, fusion=FusionKind.OPAQUE,
             attrs={"chunk_size": 64, "kv_num_heads": REQUIRED, "q_num_heads": REQUIRED,
                    "scale": 0.0, "update_rule": "gated_delta"})
def linear_attention(query, key, value, past_state=None, decay=None, beta=None, *,
                     chunk_size, kv_num_heads, q_num_heads, scale, update_rule):
    """Recurrent linear attention, one token at a time in float32 (``chunk_size`` only tunes
    chunked kernels and leaves results unchanged). Returns the output and the new state."""
    batch, time, _ = query.shape
    group = q_num_heads // kv_num_heads
    keys, values = _heads(key, kv_num_heads), _heads(value, kv_num_heads)
    key_size, value_size = keys.shape[-1], values.shape[-1]
    # query head h reads the state of key/value head h // group
    queries = _heads(query, q_num_heads).reshape(batch, kv_num_heads, group, time, key_size)
    if past_state is None:
        state = np.zeros((batch, kv_num_heads, key_size, value_size), np.float32)
    else:
        state = past_state.astype(np.float32)
    decays = None if decay is None else _heads(decay, kv_num_heads)  # (b, h, t, key_size or 1)
    rates = None if beta is None else _heads(beta, beta.shape[2])  # (b, h or 1, t, 1)
    scale = scale or 1.0 / np.sqrt(key_size)
    outputs = np.empty((batch, kv_num_heads, group, time, value_size), np.float32)
    for t in range(time):
        if decays is not None:
            state = state * np.exp(decays[:, :, t])[..., None]
        written = values[:, :, t]
        if rates is not None:
            recalled = np.einsum("bhkv,bhk->bhv", state, keys[:, :, t])
            written = rates[:, :, t] * (written - recalled)
        state = state + keys[:, :, t, :, None] * written[:, :, None, :]
        outputs[:, :, :, t] = scale * np.einsum("bhgk,bhkv->bhgv", queries[:, :, :, t], state)
    output = outputs.reshape(batch, q_num_heads, time, value_size).transpose(0, 2, 1, 3)
    state_dtype = query.dtype if past_state is None else past_state.dtype
    return (output.reshape(batch, time, -1).astype(query.dtype), state.astype(state_dtype))
