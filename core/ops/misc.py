"""Recent ONNX ops without a better home: BitCast, SwiGLU, TensorScatter (KV-cache
update), CausalConvWithState (stateful depthwise causal conv) and LinearAttention
(recurrent linear attention with linear/gated/delta/gated-delta updates).
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..ir.types import DTYPES, EXTENDED_DTYPES, FLOAT_DTYPES, TensorType, dtype_from_onnx, np_dtype
from .activation import sigmoid_of, swish
from .common import normalize_axis, require_shape, typed_input
from .nn import conv_nd
from .registry import REQUIRED, FusionKind, InferContext, register_op

#: float formats these ops take (ONNX's T of SwiGLU)
_FLOATS = FLOAT_DTYPES + ("bfloat16",)
#: the formats of the recurrent ops (CausalConvWithState, LinearAttention)
_NARROW_FLOATS = ("float16", "float32", "bfloat16")
#: storage formats narrower than a byte (ml_dtypes keeps one value in the low bits of a byte)
_SUB_BYTE_BITS = {"int4": 4, "uint4": 4, "float4_e2m1fn": 4, "int2": 2, "uint2": 2}


def _accumulator(dtype: np.dtype) -> np.dtype:
    """float32 for the 16-bit formats (ONNX's references accumulate there too)."""
    return np.dtype(np.float32) if dtype.itemsize < 4 else dtype


# ------------------------------------------------------------------------------ BitCast

def bit_width(dtype: str) -> int:
    """Bits of one element of IR dtype ``dtype``."""
    return _SUB_BYTE_BITS.get(dtype, np_dtype(dtype).itemsize * 8)


def _infer_bitcast(ctx: InferContext):
    x = typed_input(ctx, 0, "input", DTYPES + EXTENDED_DTYPES)
    target = dtype_from_onnx(ctx.attrs["to"])
    if target not in DTYPES + EXTENDED_DTYPES:
        raise ctx.error(f"'to' = {ctx.attrs['to']} names {target}, which has no fixed bit "
                        "width; BitCast takes numeric and bool types only")
    if bit_width(x.dtype) != bit_width(target):
        raise ctx.error(f"cannot reinterpret {x.dtype} ({bit_width(x.dtype)} bits) as {target} "
                        f"({bit_width(target)} bits); 'to' must name a type of the same width")
    return [TensorType(x.shape, target)]


@register_op("BitCast", infer=_infer_bitcast, fusion=FusionKind.ELEMWISE, attrs={"to": REQUIRED})
def bitcast(x, *, to):
    """Reinterpret each element's bits as type ``to`` (same width; no value conversion)."""
    return x.view(np_dtype(dtype_from_onnx(to)))


# ------------------------------------------------------------------------------- SwiGLU

def _infer_swiglu(ctx: InferContext):
    gate = typed_input(ctx, 0, "A", _FLOATS)
    value = typed_input(ctx, 1, "B", (gate.dtype,))
    if gate.shape != value.shape:
        raise ctx.error(f"A {gate} and B {value} must have identical shapes (SwiGLU does not "
                        "broadcast); Expand or Split them to match")
    return [gate]


@register_op("SwiGLU", infer=_infer_swiglu, fusion=FusionKind.ELEMWISE, attrs={"alpha": 1.0})
def swiglu(gate, value, *, alpha):
    """Swish_alpha(A) * B, with Swish_alpha(a) = a * sigmoid(alpha * a)."""
    return (swish(gate, alpha=alpha) * value).astype(gate.dtype, copy=False)


# ------------------------------------------------------------------------ TensorScatter

_SCATTER_MODES = ("linear", "circular")


def _infer_tensor_scatter(ctx: InferContext):
    cache = ctx.type(0)
    update = typed_input(ctx, 1, "update", (cache.dtype,))
    if cache.ndim < 2 or update.ndim != cache.ndim:
        raise ctx.error(f"past_cache {cache} and update {update} must have one rank >= 2")
    axis = normalize_axis(ctx, ctx.attrs["axis"], cache.ndim)
    if axis == 0:
        raise ctx.error("axis is the batch axis 0; it must name the sequence axis (default -2)")
    if ctx.attrs["mode"] not in _SCATTER_MODES:
        raise ctx.error(f"mode {ctx.attrs['mode']!r} is not one of {', '.join(_SCATTER_MODES)}")
    mismatched = [i for i in range(cache.ndim) if i != axis and cache.shape[i] != update.shape[i]]
    if mismatched or update.shape[axis] > cache.shape[axis]:
        raise ctx.error(f"update {update} must match past_cache {cache} except along axis "
                        f"{axis}, where it may not be longer")
    if ctx.has(2):
        typed_input(ctx, 2, "write_indices", ("int64",))
        require_shape(ctx, 2, "write_indices", (cache.shape[0],))
    return [cache]


@register_op("TensorScatter", infer=_infer_tensor_scatter, fusion=FusionKind.OPAQUE,
             attrs={"mode": "linear", "axis": -2})
def tensor_scatter(past_cache, update, write_indices=None, *, mode, axis):
    """Write ``update`` into a copy of ``past_cache`` along the sequence ``axis``, starting
    at each batch entry's write index (wrapping around when mode is circular)."""
    axis %= past_cache.ndim
    capacity, length = past_cache.shape[axis], update.shape[axis]
    starts = (np.zeros(past_cache.shape[0], np.int64) if write_indices is None
              else write_indices.astype(np.int64))
    positions = starts[:, None] + np.arange(length)
    if mode == "circular":
        positions %= capacity
    elif length and (starts.min() < 0 or positions.max() >= capacity):
        raise InputError(f"TensorScatter: write_indices {starts.tolist()} + sequence length "
                         f"{length} run outside the cache of {capacity} positions; use "
                         "mode='circular' to wrap around")
    present = past_cache.copy()
    # views with the sequence axis right after the batch axis: present_seq writes through
    present_seq = np.moveaxis(present, axis, 1)
    update_seq = np.moveaxis(update, axis, 1)
    for batch, where in enumerate(positions):
        present_seq[batch, where] = update_seq[batch]
    return present


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
