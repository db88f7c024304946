"""Normalizations: BatchNormalization (inference), LayerNormalization, RMSNormalization,
InstanceNormalization, GroupNormalization, LpNormalization, MeanVarianceNormalization
and LRN.

Statistics are reductions (:func:`reduction.reduce_stage`) in the op's compute dtype,
in the same order of operations as the NumPy references; per-slice factors (a
reciprocal standard deviation, a norm) are kept as small stages of their own so that
the elementwise output stage does not recompute a square root per element.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .. import te
from ..errors import CompileError
from ..ops.common import normalize_axes, normalize_axis
from ..ops.normalization import stash_dtype
from ..ops.reduction import ReferenceSite
from ..tir import expr as tx
from .common import broadcast_load, require_native
from .reduction import kept_stage, reduce_stage, require_nonempty, stat_at
from .registry import register_compute

#: MeanVarianceNormalization adds this to the standard deviation (as its ONNX function does)
MVN_EPSILON = 1e-9


def _float_input(op: str, x: te.Tensor, *params: te.Tensor | None) -> None:
    dtypes = [x.dtype] + [p.dtype for p in params if p is not None]
    if any(not tx.is_float(d) for d in dtypes):
        raise CompileError(f"{op} on {', '.join(dtypes)} has no TE compute (float only)")
    require_native(dtypes, op)
    require_nonempty(x.shape, op)


def _compute_dtype(op: str, x: te.Tensor, stash_type: int) -> str:
    """The dtype statistics run in: the (float32/float64) input's, or a wider stash_type."""
    return np.promote_types(x.dtype, stash_dtype(ReferenceSite(op), stash_type)).name


def _count(x: te.Tensor, axes: Sequence[int]) -> int:
    return int(np.prod([x.shape[a] for a in axes]))


def standardized(x: te.Tensor, axes: Sequence[int], epsilon: float, dtype: str,
                 name: str) -> Callable[[tuple], tx.Expr]:
    """(x - mean) * 1/sqrt(var + epsilon) over ``axes`` in ``dtype``, as a function of the
    index: a mean pass, a variance pass over the centered values, then the product."""
    n = te.const(_count(x, axes), dtype)
    total = reduce_stage(x, axes, "sum", lambda i: te.cast(dtype, x[i]), name + "_sum", dtype)
    mean = kept_stage(total, lambda v: v / n, name + "_mean", dtype)

    def centered(index):
        return te.cast(dtype, x[index]) - stat_at(mean, index, axes)

    def squared(index):
        value = centered(index)
        return value * value

    spread = reduce_stage(x, axes, "sum", squared, name + "_var", dtype)
    one = te.const(1.0, dtype)
    inv_std = kept_stage(spread, lambda v: one / te.sqrt(v / n + te.const(epsilon, dtype)),
                    name + "_inv_std", dtype)
    return lambda index: centered(index) * stat_at(inv_std, index, axes)


def _affine(value: tx.Expr, scale: tx.Expr | None, bias: tx.Expr | None, dtype: str):
    if scale is not None:
        value = value * te.cast(dtype, scale)
    if bias is not None:
        value = value + te.cast(dtype, bias)
    return value


@register_compute("BatchNormalization")
def batch_normalization(inputs, attrs, out_types):
    x, scale, bias, mean, var = inputs[:5]
    if attrs["training_mode"] or len(out_types) > 1:
        raise CompileError("BatchNormalization in training mode has no TE compute "
                           "(inference only)")
    _float_input("BatchNormalization", x, scale, bias, mean, var)
    dtype = x.dtype
    denominator = kept_stage(var, lambda v: te.sqrt(te.cast(dtype, v) + te.const(
        attrs["epsilon"], dtype)), "batchnorm_std", dtype)

    def param(t, index):
        # per channel (C,), or per activation [C, d...] in the spatial=0 form
        return t[index[1]] if t.ndim == 1 else t[tuple(index[1:])]

    def body(*i):
        centered = x[i] - te.cast(dtype, param(mean, i))
        return _affine(centered / param(denominator, i), param(scale, i), param(bias, i),
                       dtype)

    return [te.compute(x.shape, body, name="batchnorm", dtype=dtype)]


def _trailing_axes(op: str, x: te.Tensor, attrs) -> list[int]:
    return list(range(normalize_axis(ReferenceSite(op), attrs["axis"], x.ndim), x.ndim))


@register_compute("LayerNormalization")
def layer_normalization(inputs, attrs, out_types):
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    if len(out_types) > 1:
        raise CompileError("LayerNormalization with its Mean/InvStdDev outputs has no TE "
                           "compute (Y only)")
    _float_input("LayerNormalization", x, scale, bias)
    dtype = _compute_dtype("LayerNormalization", x, attrs["stash_type"])
    normalized = standardized(x, _trailing_axes("LayerNormalization", x, attrs),
                              attrs["epsilon"], dtype, "layernorm")

    def body(*i):
        return _affine(normalized(i), broadcast_load(scale, x.shape, i),
                       None if bias is None else broadcast_load(bias, x.shape, i), dtype)

    return [te.compute(x.shape, body, name="layernorm", dtype=x.dtype)]


@register_compute("RMSNormalization")
def rms_normalization(inputs, attrs, out_types):
    x, scale = inputs[0], inputs[1]
    _float_input("RMSNormalization", x, scale)
    dtype = _compute_dtype("RMSNormalization", x, attrs["stash_type"])
    axes = _trailing_axes("RMSNormalization", x, attrs)
    n = te.const(_count(x, axes), dtype)

    def squared(index):
        value = te.cast(dtype, x[index])
        return value * value

    total = reduce_stage(x, axes, "sum", squared, "rmsnorm_sum", dtype)
    root = kept_stage(total, lambda v: te.sqrt(v / n + te.const(attrs["epsilon"], dtype)),
                 "rmsnorm_rms", dtype)
    return [te.compute(x.shape, lambda *i: _affine(
        te.cast(dtype, x[i]) / stat_at(root, i, axes), broadcast_load(scale, x.shape, i),
        None, dtype), name="rmsnorm", dtype=x.dtype)]


@register_compute("InstanceNormalization")
def instance_normalization(inputs, attrs, out_types):
    x, scale, bias = inputs[:3]
    _float_input("InstanceNormalization", x, scale, bias)
    normalized = standardized(x, list(range(2, x.ndim)), attrs["epsilon"], x.dtype,
                              "instancenorm")
    return [te.compute(x.shape, lambda *i: _affine(normalized(i), scale[i[1]], bias[i[1]],
                                                   x.dtype), name="instancenorm",
                       dtype=x.dtype)]


@register_compute("GroupNormalization")
def group_normalization(inputs, attrs, out_types):
    x, scale, bias = inputs[:3]
    _float_input("GroupNormalization", x, scale, bias)
    dtype = _compute_dtype("GroupNormalization", x, attrs["stash_type"])
    groups = attrs["num_groups"]
    channels = x.shape[1]
    per_group = channels // groups
    # [N, G, C/G, d...]: each group's channels and spatial dims are its trailing axes
    grouped = te.compute((x.shape[0], groups, per_group, *x.shape[2:]),
                         lambda n, g, c, *d: x[(n, g * per_group + c, *d)],
                         name="groupnorm_view", dtype=x.dtype)
    normalized = standardized(grouped, list(range(2, grouped.ndim)), attrs["epsilon"], dtype,
                              "groupnorm")

    def param(t, channel):
        # opset 18 gave scale and bias per group, opset 21 per channel
        return t[channel] if t.shape[0] == channels else t[channel // per_group]

    def body(n, c, *d):
        value = normalized((n, c // per_group, c % per_group, *d))
        return _affine(value, param(scale, c), param(bias, c), dtype)

    return [te.compute(x.shape, body, name="groupnorm", dtype=x.dtype)]


@register_compute("LpNormalization")
def lp_normalization(inputs, attrs, out_types):
    x = inputs[0]
    _float_input("LpNormalization", x)
    if attrs["p"] not in (1, 2):
        raise CompileError(f"LpNormalization with p={attrs['p']} has no TE compute (1 or 2)")
    axis = normalize_axis(ReferenceSite("LpNormalization"), attrs["axis"], x.ndim)

    def summand(index):
        value = x[index]
        return te.fabs(value) if attrs["p"] == 1 else value * value

    total = reduce_stage(x, [axis], "sum", summand, "lpnorm_sum", x.dtype)
    norm = total if attrs["p"] == 1 else kept_stage(total, te.sqrt, "lpnorm_norm", x.dtype)
    zero = te.const(0, x.dtype)

    def body(*i):
        divisor = stat_at(norm, i, [axis])
        return te.if_then_else(te.equal(divisor, zero), zero, x[i] / divisor)

    return [te.compute(x.shape, body, name="lpnorm", dtype=x.dtype)]


@register_compute("MeanVarianceNormalization")
def mean_variance_normalization(inputs, attrs, out_types):
    x = inputs[0]
    _float_input("MeanVarianceNormalization", x)
    axes = sorted(normalize_axes(ReferenceSite("MeanVarianceNormalization"), attrs["axes"],
                                 x.ndim))
    dtype = x.dtype
    n = te.const(_count(x, axes), dtype)
    total = reduce_stage(x, axes, "sum", lambda i: x[i], "mvn_sum", dtype)
    squares = reduce_stage(x, axes, "sum", lambda i: x[i] * x[i], "mvn_sum_sq", dtype)
    mean = kept_stage(total, lambda v: v / n, "mvn_mean", dtype)

    def deviation(*i):
        variance = squares[i] / n - mean[i] * mean[i]
        return te.sqrt(te.maximum(variance, te.const(0, dtype))) + te.const(MVN_EPSILON, dtype)

    spread = te.compute(total.shape, deviation, name="mvn_std", dtype=dtype,
                        attrs={"keep": True})
    return [te.compute(x.shape, lambda *i: (x[i] - stat_at(mean, i, axes))
                       / stat_at(spread, i, axes), name="mvn", dtype=dtype)]


@register_compute("LRN")
def local_response_normalization(inputs, attrs, out_types):
    x = inputs[0]
    _float_input("LRN", x)
    size = attrs["size"]
    before = (size - 1) // 2
    channels = x.shape[1]
    dtype = x.dtype
    zero = te.const(0, dtype)

    def window(*i):
        k = te.reduce_axis(size, "k")
        channel = i[1] - before + k
        inside = te.logical_and(channel >= 0, channel < channels)
        # if_then_else reads only the side it selects: the padding channels are never read
        value = te.if_then_else(inside, x[(i[0], channel, *i[2:])], zero)
        return te.sum(value * value, axis=k)

    squares = te.compute(x.shape, window, name="lrn_window", dtype=dtype)
    scale = te.const(attrs["alpha"] / size, dtype)
    offset, power = te.const(attrs["bias"], dtype), te.const(attrs["beta"], dtype)
    return [te.compute(x.shape, lambda *i: x[i] / te.power(offset + scale * squares[i], power),
                       name="lrn", dtype=dtype)]
