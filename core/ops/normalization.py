"""Normalization ops: BatchNormalization, LayerNormalization, InstanceNormalization,
GroupNormalization, LpNormalization, MeanVarianceNormalization, RMSNormalization, LRN.

Statistics are computed in float32 at least (float16 inputs widen; ``stash_type``
picks the precision where the op has it) and results are cast back to the input dtype.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..ir.types import FLOAT_DTYPES, TensorType, dtype_from_onnx
from .common import normalize_axes, normalize_axis
from .reduction import ReferenceSite, as_dtype, float_compute_dtype, require_float
from .registry import REQUIRED, FusionKind, InferContext, register_op

_EPSILON = 1e-5


def _require_shape(ctx: InferContext, index: int, role: str,
                   allowed: Sequence[tuple[int, ...]]) -> TensorType:
    t = require_float(ctx, index, role)
    if t.shape not in allowed:
        raise ctx.error(f"{role} (input {index}) has shape {t.shape}; expected "
                        f"{' or '.join(str(s) for s in dict.fromkeys(allowed))}")
    return t


def _require_broadcastable_to(ctx: InferContext, index: int, role: str,
                              target: tuple[int, ...]) -> None:
    """Input ``index`` must broadcast one-way to ``target`` (the normalized dims)."""
    t = require_float(ctx, index, role)
    try:
        if np.broadcast_shapes(t.shape, target) == target:
            return
    except ValueError:
        pass
    raise ctx.error(f"{role} (input {index}) of shape {t.shape} does not broadcast to the "
                    f"normalized dims {target}")


def stash_dtype(site, stash_type: int) -> np.dtype:
    """The float dtype that ``stash_type`` (an ONNX element type) names."""
    name = dtype_from_onnx(stash_type)
    if name not in FLOAT_DTYPES:
        raise site.error(f"stash_type {stash_type} ({name}) must name a float type")
    return np.dtype(name)


def _stats_dtype(x_dtype: np.dtype, stash: np.dtype) -> np.dtype:
    """Compute in the wider of ``stash`` and the input's own compute dtype."""
    return np.promote_types(stash, float_compute_dtype(x_dtype))


def standardize(x: np.ndarray, axes: tuple[int, ...], epsilon: float):
    """(x - mean) / sqrt(var + epsilon) over ``axes``, with the mean and 1/std kept dims."""
    mean = np.mean(x, axis=axes, keepdims=True)
    centered = x - mean
    inv_std = 1.0 / np.sqrt(np.mean(centered * centered, axis=axes, keepdims=True) + epsilon)
    return centered * inv_std, mean, inv_std


def channel_view(param: np.ndarray, ndim: int) -> np.ndarray:
    """A per-channel parameter (C,) shaped to broadcast against [N, C, d...]; a parameter
    with the full [C, d...] shape (BatchNormalization with spatial=0) keeps its dims."""
    if param.ndim == 1:
        return param.reshape((1, -1) + (1,) * (ndim - 2))
    return param.reshape((1,) + param.shape)


# ---------------------------------------------------------------------------
# BatchNormalization
# ---------------------------------------------------------------------------

_BN_ATTRS = {"epsilon": _EPSILON, "momentum": 0.9, "training_mode": 0,
             # forms of opsets < 9: spatial=0 means per-activation statistics; is_test
             # and consumed_inputs (< 7) are accepted, but only training_mode selects
             # training, since inference is what old exported models are used for
             "spatial": 1, "is_test": 0, "consumed_inputs": None}


def _infer_batch_norm(ctx: InferContext):
    x = require_float(ctx, 0, "X")
    if x.ndim < 2:
        raise ctx.error(f"X must be [N, C, d...], got {x}")
    allowed = [(x.shape[1],)] + ([x.shape[1:]] if not ctx.attrs["spatial"] else [])
    for index, role in enumerate(("scale", "B", "input_mean", "input_var"), start=1):
        _require_shape(ctx, index, role, allowed)
    if ctx.attrs["training_mode"] and not ctx.attrs["spatial"]:
        raise ctx.error("training_mode=1 needs per-channel statistics (spatial=1)")
    if ctx.num_outputs > 1 and not ctx.attrs["training_mode"]:
        raise ctx.error(f"{ctx.num_outputs} outputs need training_mode=1 (running_mean and "
                        "running_var exist only in training mode)")
    return [x, ctx.type(3), ctx.type(4)]


@register_op("BatchNormalization", infer=_infer_batch_norm, fusion=FusionKind.REDUCTION,
             attrs=_BN_ATTRS)
def batch_normalization(x, scale, bias, input_mean, input_var, *, epsilon, momentum,
                        training_mode, spatial, is_test, consumed_inputs):
    """ONNX BatchNormalization. Inference: normalize with input_mean/input_var. Training
    mode: normalize with the batch statistics and also return running_mean/running_var
    (input * momentum + batch * (1 - momentum), population variance)."""
    compute = float_compute_dtype(x.dtype)
    wide = x.astype(compute, copy=False)
    views = [channel_view(p.astype(compute, copy=False), x.ndim)
             for p in (scale, bias, input_mean, input_var)]
    scale_v, bias_v, mean_v, var_v = views
    if not training_mode:
        y = (wide - mean_v) / np.sqrt(var_v + epsilon) * scale_v + bias_v
        return as_dtype(y, x.dtype)
    axes = tuple(i for i in range(x.ndim) if i != 1)
    normalized, batch_mean, _ = standardize(wide, axes, epsilon)
    batch_var = np.mean(np.square(wide - batch_mean), axis=axes)
    y = normalized * scale_v + bias_v
    running_mean = input_mean * momentum + batch_mean.reshape(-1) * (1 - momentum)
    running_var = input_var * momentum + batch_var * (1 - momentum)
    return (as_dtype(y, x.dtype), as_dtype(running_mean, input_mean.dtype),
            as_dtype(running_var, input_var.dtype))


# ---------------------------------------------------------------------------
# LayerNormalization, RMSNormalization
# ---------------------------------------------------------------------------

_TRAILING_NORM_ATTRS = {"axis": -1, "epsilon": _EPSILON, "stash_type": 1}


def _infer_trailing_norm(ctx: InferContext, affine_inputs: Sequence[str]) -> list[TensorType]:
    """Shared checks of the norms over dims [axis, rank): X, then scale/bias inputs."""
    x = require_float(ctx, 0, "X")
    axis = normalize_axis(ctx, ctx.attrs["axis"], x.ndim)
    stash = stash_dtype(ctx, ctx.attrs["stash_type"])
    for index, role in enumerate(affine_inputs, start=1):
        if index == 1 or ctx.has(index):
            _require_broadcastable_to(ctx, index, role, x.shape[axis:])
    stats = TensorType(x.shape[:axis] + (1,) * (x.ndim - axis), stash.name)
    return [x, stats, stats]


@register_op("LayerNormalization", infer=lambda ctx: _infer_trailing_norm(ctx, ("Scale", "B")),
             fusion=FusionKind.REDUCTION, attrs=_TRAILING_NORM_ATTRS)
def layer_normalization(x, scale, bias=None, *, axis, epsilon, stash_type):
    """ONNX LayerNormalization over dims [axis, rank): returns (Y, Mean, InvStdDev), the
    statistics in the ``stash_type`` dtype with the normalized dims kept as 1."""
    site = ReferenceSite("LayerNormalization")
    axis = normalize_axis(site, axis, x.ndim)
    stash = stash_dtype(site, stash_type)
    compute = _stats_dtype(x.dtype, stash)
    normalized, mean, inv_std = standardize(x.astype(compute), tuple(range(axis, x.ndim)),
                                            epsilon)
    y = normalized * scale.astype(compute)
    if bias is not None:
        y = y + bias.astype(compute)
    return as_dtype(y, x.dtype), as_dtype(mean, stash), as_dtype(inv_std, stash)


@register_op("RMSNormalization", infer=lambda ctx: _infer_trailing_norm(ctx, ("scale",))[:1],
             fusion=FusionKind.REDUCTION, attrs=_TRAILING_NORM_ATTRS)
def rms_normalization(x, scale, *, axis, epsilon, stash_type):
    """ONNX RMSNormalization: x / sqrt(mean(x^2 over dims [axis, rank)) + epsilon) * scale."""
    site = ReferenceSite("RMSNormalization")
    axis = normalize_axis(site, axis, x.ndim)
    wide = x.astype(_stats_dtype(x.dtype, stash_dtype(site, stash_type)))
    mean_square = np.mean(wide * wide, axis=tuple(range(axis, x.ndim)), keepdims=True)
    return as_dtype(wide / np.sqrt(mean_square + epsilon) * scale.astype(wide.dtype), x.dtype)


# ---------------------------------------------------------------------------
# InstanceNormalization, GroupNormalization
# ---------------------------------------------------------------------------


def _infer_instance_norm(ctx: InferContext):
    x = require_float(ctx, 0, "input")
    if x.ndim < 3:
        raise ctx.error(f"input must be [N, C, d1, ...] with at least one spatial dim, got {x}")
    for index, role in ((1, "scale"), (2, "B")):
        _require_shape(ctx, index, role, [(x.shape[1],)])
    return [x]


@register_op("InstanceNormalization", infer=_infer_instance_norm, fusion=FusionKind.REDUCTION,
             attrs={"epsilon": _EPSILON})
def instance_normalization(x, scale, bias, *, epsilon):
    """ONNX InstanceNormalization: normalize each (n, c) over its spatial dims."""
    compute = float_compute_dtype(x.dtype)
    normalized, _, _ = standardize(x.astype(compute), tuple(range(2, x.ndim)), epsilon)
    y = normalized * channel_view(scale.astype(compute), x.ndim) \
        + channel_view(bias.astype(compute), x.ndim)
    return as_dtype(y, x.dtype)


def _infer_group_norm(ctx: InferContext):
    x = require_float(ctx, 0, "X")
    groups = ctx.attrs["num_groups"]
    if x.ndim < 2:
        raise ctx.error(f"X must be [N, C, d...], got {x}")
    if groups <= 0 or x.shape[1] % groups:
        raise ctx.error(f"num_groups={groups} must be positive and divide the "
                        f"{x.shape[1]} channels")
    stash_dtype(ctx, ctx.attrs["stash_type"])
    # opset 18 gave scale/bias per group, opset 21 per channel: accept both
    for index, role in ((1, "scale"), (2, "bias")):
        _require_shape(ctx, index, role, [(x.shape[1],), (groups,)])
    return [x]


@register_op("GroupNormalization", infer=_infer_group_norm, fusion=FusionKind.REDUCTION,
             attrs={"num_groups": REQUIRED, "epsilon": _EPSILON, "stash_type": 1})
def group_normalization(x, scale, bias, *, num_groups, epsilon, stash_type):
    """ONNX GroupNormalization: normalize each group of C/num_groups channels (with their
    spatial dims) per sample, then apply a per-channel (or, opset 18, per-group) affine."""
    compute = _stats_dtype(x.dtype, stash_dtype(ReferenceSite("GroupNormalization"),
                                                stash_type))
    batch, channels = x.shape[:2]
    grouped = x.astype(compute).reshape(batch, num_groups, -1)
    normalized, _, _ = standardize(grouped, (2,), epsilon)
    normalized = normalized.reshape(x.shape)
    if scale.shape[0] != channels:
        scale, bias = (np.repeat(p, channels // num_groups) for p in (scale, bias))
    y = normalized * channel_view(scale.astype(compute), x.ndim) \
        + channel_view(bias.astype(compute), x.ndim)
    return as_dtype(y, x.dtype)


# ---------------------------------------------------------------------------
# LpNormalization, MeanVarianceNormalization, LRN
# ---------------------------------------------------------------------------


def _infer_lp_norm(ctx: InferContext):
    x = require_float(ctx, 0, "input")
    normalize_axis(ctx, ctx.attrs["axis"], x.ndim)
    if ctx.attrs["p"] not in (1, 2):
        raise ctx.error(f"p={ctx.attrs['p']} is not supported; ONNX allows p=1 or p=2")
    return [x]


@register_op("LpNormalization", infer=_infer_lp_norm, fusion=FusionKind.REDUCTION,
             attrs={"axis": -1, "p": 2})
def lp_normalization(x, *, axis, p):
    """ONNX LpNormalization: x / ||x||_p along ``axis`` (0 where the norm is 0)."""
    axis = normalize_axis(ReferenceSite("LpNormalization"), axis, x.ndim)
    wide = x.astype(float_compute_dtype(x.dtype))
    magnitude = np.abs(wide)
    norm = np.sum(magnitude, axis=axis, keepdims=True) if p == 1 else \
        np.sqrt(np.sum(magnitude * magnitude, axis=axis, keepdims=True))
    with np.errstate(invalid="ignore", divide="ignore"):
        return as_dtype(np.where(norm == 0, 0, wide / norm), x.dtype)


def _infer_mvn(ctx: InferContext):
    x = require_float(ctx, 0, "X")
    normalize_axes(ctx, ctx.attrs["axes"], x.ndim)
    return [x]


@register_op("MeanVarianceNormalization", infer=_infer_mvn, fusion=FusionKind.REDUCTION,
             attrs={"axes": [0, 2, 3]})
def mean_variance_normalization(x, *, axes):
    """ONNX MeanVarianceNormalization: (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9)."""
    axes = tuple(normalize_axes(ReferenceSite("MeanVarianceNormalization"), axes, x.ndim))
    wide = x.astype(float_compute_dtype(x.dtype))
    mean = np.mean(wide, axis=axes, keepdims=True)
    variance = np.mean(wide * wide, axis=axes, keepdims=True) - mean * mean
    # the spec's function body adds 1e-9 to the standard deviation, not to the variance
    return as_dtype((wide - mean) / (np.sqrt(np.maximum(variance, 0)) + 1e-9), x.dtype)


def _infer_lrn(ctx: InferContext):
    x = require_float(ctx, 0, "X")
    if x.ndim < 3:
        raise ctx.error(f"X must be [N, C, d1, ...], got {x}")
    if ctx.attrs["size"] < 1:
        raise ctx.error(f"size={ctx.attrs['size']} must be >= 1")
    return [x]


@register_op("LRN", infer=_infer_lrn, fusion=FusionKind.REDUCTION,
             attrs={"size": REQUIRED, "alpha": 0.0001, "beta": 0.75, "bias": 1.0})
def local_response_normalization(x, *, size, alpha, beta, bias):
    """ONNX LRN: x / (bias + alpha / size * sum of x^2 over a window of ``size`` channels
    [c - floor((size-1)/2), c + ceil((size-1)/2)]) ** beta."""
    wide = x.astype(float_compute_dtype(x.dtype))
    padding = [(0, 0)] * x.ndim
    padding[1] = ((size - 1) // 2, size // 2)
    squares = np.pad(wide * wide, padding)
    window = np.lib.stride_tricks.sliding_window_view(squares, size, axis=1).sum(axis=-1)
    return as_dtype(wide / (bias + alpha / size * window) ** beta, x.dtype)


__all__ = ["channel_view", "standardize", "stash_dtype"]
