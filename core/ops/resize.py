"""Resize and its predecessor Upsample.

Every interpolation mode of Resize is separable, so the reference resamples one
axis at a time: nearest gathers one input index per output position; linear and
cubic multiply by an (output x input) weight matrix built from the 1-D kernel
(stretched by 1/scale when antialiasing a downscale).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..ir.types import TensorType
from .registry import FusionKind, InferContext, register_op
from .tensor import ErrorFactory, checked_axes, runtime_error

_COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                     "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_MODES = ("nearest", "linear", "cubic")
_ASPECT_POLICIES = ("stretch", "not_larger", "not_smaller")


@dataclass(frozen=True)
class AxisResample:
    """How one axis is resampled: sizes, the scale the coordinates use, and the ROI."""

    in_size: int
    out_size: int
    scale: float
    roi_start: float = 0.0
    roi_end: float = 1.0


def _given(array) -> bool:
    """Whether an optional Resize operand is present (an empty tensor means absent)."""
    return array is not None and np.size(array) > 0


def _resolve_axes(error: ErrorFactory, axes, rank: int) -> list[int]:
    if axes is None:
        return list(range(rank))
    return checked_axes(error, axes, rank)


def _round_half_up(value: float) -> int:
    return int(np.floor(value + 0.5))


def resample_plan(error: ErrorFactory, shape: tuple[int, ...], roi, scales, sizes,
                  axes, policy: str) -> dict[int, AxisResample]:
    """Per resized axis, its :class:`AxisResample` (shared by infer and the reference)."""
    resized = _resolve_axes(error, axes, len(shape))
    if _given(scales) == _given(sizes):
        raise error("exactly one of scales (input 2) and sizes (input 3) must be given")
    if policy not in _ASPECT_POLICIES:
        raise error(f"keep_aspect_ratio_policy {policy!r} must be one of "
                    f"{', '.join(_ASPECT_POLICIES)}")
    given = np.asarray(scales if _given(scales) else sizes).reshape(-1)
    if given.size != len(resized):
        raise error(f"{'scales' if _given(scales) else 'sizes'} {given.tolist()} must have "
                    f"{len(resized)} entries (one per resized axis)")
    in_sizes = [shape[a] for a in resized]
    if _given(scales):
        factors = [float(s) for s in given]
        if any(s <= 0 for s in factors):
            raise error(f"scales {factors} must be positive")
        out_sizes = [int(np.floor(n * s)) for n, s in zip(in_sizes, factors)]
    else:
        targets = [int(s) for s in given]
        if any(s < 0 for s in targets):
            raise error(f"sizes {targets} must be non-negative")
        if any(n == 0 for n in in_sizes):
            raise error(f"cannot resize an empty axis of shape {shape} to sizes {targets}")
        factors = [t / n for t, n in zip(targets, in_sizes)]
        if policy != "stretch":
            common = min(factors) if policy == "not_larger" else max(factors)
            factors = [common] * len(factors)
            targets = [_round_half_up(common * n) for n in in_sizes]
        out_sizes = targets
    roi_values = np.asarray(roi, np.float64).reshape(-1) if _given(roi) else None
    if roi_values is not None and roi_values.size != 2 * len(resized):
        raise error(f"roi {roi_values.tolist()} must have {2 * len(resized)} entries "
                    "(starts, then ends)")
    plan = {}
    for k, axis in enumerate(resized):
        start, end = (0.0, 1.0) if roi_values is None else (
            float(roi_values[k]), float(roi_values[k + len(resized)]))
        plan[axis] = AxisResample(in_sizes[k], out_sizes[k], factors[k], start, end)
    return plan


def _check_modes(error: ErrorFactory, attrs: dict) -> None:
    choices = {"mode": _MODES, "coordinate_transformation_mode": _COORDINATE_MODES,
               "nearest_mode": _NEAREST_MODES}
    for name, allowed in choices.items():
        if attrs[name] not in allowed:
            raise error(f"{name} {attrs[name]!r} must be one of {', '.join(allowed)}")
    if attrs["antialias"] and attrs["mode"] == "nearest":
        raise error("antialias applies to linear and cubic modes only, not nearest")


def source_coordinates(axis: AxisResample, mode: str) -> np.ndarray:
    """For each output position, its (fractional) coordinate in the input."""
    out = np.arange(axis.out_size, dtype=np.float64)
    scale, n_in, n_out = axis.scale, axis.in_size, axis.out_size
    # The corner-aligned modes divide by the output width before flooring (as the ONNX
    # conformance data does), which differs from out_size when scales are given.
    width = scale * n_in
    if mode == "half_pixel":
        return (out + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adjustment = n_out / (scale * n_in)
        offset = n_in / 2 * (1 - adjustment)
        return offset + (out + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (out + 0.5) / scale - 0.5 if n_out > 1 else np.zeros_like(out)
    if mode == "align_corners":
        return out * (n_in - 1) / (width - 1) if n_out > 1 else np.zeros_like(out)
    if mode == "asymmetric":
        return out / scale
    if mode == "tf_half_pixel_for_nn":
        return (out + 0.5) / scale
    span = (axis.roi_end - axis.roi_start) * (n_in - 1)
    if n_out > 1:
        return axis.roi_start * (n_in - 1) + out * span / (width - 1)
    return np.full_like(out, 0.5 * (axis.roi_start + axis.roi_end) * (n_in - 1))


def nearest_indices(coords: np.ndarray, in_size: int, nearest_mode: str) -> np.ndarray:
    """Input index picked by nearest-neighbour rounding, clamped to the input."""
    rounding = {"round_prefer_floor": lambda x: np.ceil(x - 0.5),
                "round_prefer_ceil": lambda x: np.floor(x + 0.5),
                "floor": np.floor, "ceil": np.ceil}[nearest_mode]
    return np.clip(rounding(coords), 0, in_size - 1).astype(np.intp)


def _linear_kernel(distance: np.ndarray, cubic_a: float) -> np.ndarray:
    return np.clip(1 - np.abs(distance), 0, None)


def _cubic_kernel(distance: np.ndarray, a: float) -> np.ndarray:
    d = np.abs(distance)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


#: per mode: the 1-D kernel and its support radius (in input pixels, before antialiasing).
_KERNELS: dict[str, tuple[Callable[[np.ndarray, float], np.ndarray], int]] = {
    "linear": (_linear_kernel, 1),
    "cubic": (_cubic_kernel, 2),
}


def interpolation_weights(coords: np.ndarray, axis: AxisResample, mode: str, cubic_a: float,
                          antialias: bool, exclude_outside: bool) -> np.ndarray:
    """The (out_size x in_size) matrix of a linear or cubic resampling of one axis.

    Taps outside the input are folded onto the edge pixel, or dropped with the rest
    renormalized when ``exclude_outside``; weights always sum to one.
    """
    kernel, radius = _KERNELS[mode]
    stretch = min(axis.scale, 1.0) if antialias else 1.0
    reach = int(np.ceil(radius / stretch))
    base = np.floor(coords).astype(np.int64)[:, None]
    taps = base + np.arange(-reach + 1, reach + 1)[None, :]
    weights = kernel((taps - coords[:, None]) * stretch, cubic_a)
    inside = (taps >= 0) & (taps < axis.in_size)
    if exclude_outside:
        weights = np.where(inside, weights, 0.0)
    totals = weights.sum(axis=1, keepdims=True)
    weights = weights / np.where(totals == 0, 1.0, totals)
    matrix = np.zeros((axis.out_size, axis.in_size))
    rows = np.broadcast_to(np.arange(axis.out_size)[:, None], taps.shape)
    np.add.at(matrix, (rows, np.clip(taps, 0, axis.in_size - 1)), weights)
    return matrix


def _cast_back(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Float results to the input dtype; integers round and saturate."""
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        values = np.clip(np.rint(values), info.min, info.max)
    return values.astype(dtype)


def resample(x: np.ndarray, plan: dict[int, AxisResample], *, mode: str,
             coordinate_transformation_mode: str, nearest_mode: str = "round_prefer_floor",
             cubic_coeff_a: float = -0.75, antialias: bool = False,
             exclude_outside: bool = False, extrapolation_value: float = 0.0) -> np.ndarray:
    """Resize ``x`` axis by axis following ``plan``."""
    result = x if mode == "nearest" else x.astype(np.float64)
    outside_any = np.zeros((1,) * x.ndim, dtype=bool)
    for axis, spec in plan.items():
        coords = source_coordinates(spec, coordinate_transformation_mode)
        if spec.out_size == spec.in_size and np.array_equal(coords, np.arange(spec.in_size)):
            continue  # every kernel is one-hot at integer coordinates: nothing to do
        if mode == "nearest":
            result = np.take(result, nearest_indices(coords, spec.in_size, nearest_mode),
                             axis=axis)
        else:
            weights = interpolation_weights(coords, spec, mode, cubic_coeff_a, antialias,
                                            exclude_outside)
            result = np.moveaxis(np.tensordot(weights, result, axes=([1], [axis])), 0, axis)
        if coordinate_transformation_mode == "tf_crop_and_resize":
            outside = (coords < 0) | (coords > spec.in_size - 1)
            shape = [1] * x.ndim
            shape[axis] = spec.out_size
            outside_any = outside_any | outside.reshape(shape)
    if outside_any.any():
        result = np.where(outside_any, extrapolation_value, result)
    return _cast_back(result, x.dtype)


_RESIZE_ATTRS = {"antialias": 0, "axes": None, "coordinate_transformation_mode": "half_pixel",
                 "cubic_coeff_a": -0.75, "exclude_outside": 0, "extrapolation_value": 0.0,
                 "keep_aspect_ratio_policy": "stretch", "mode": "nearest",
                 "nearest_mode": "round_prefer_floor"}


def _operand(ctx: InferContext, i: int):
    """Input ``i``'s constant value, or None when omitted or empty."""
    if not ctx.has(i) or ctx.type(i).size == 0:
        return None
    return ctx.value(i)


def _output_shape(shape: tuple[int, ...], plan: dict[int, AxisResample]) -> tuple[int, ...]:
    return tuple(plan[a].out_size if a in plan else d for a, d in enumerate(shape))


def _infer_resize(ctx: InferContext):
    x = ctx.type(0)
    _check_modes(ctx.error, ctx.attrs)
    if ctx.has(2) and ctx.type(2).size and ctx.type(2).dtype not in ("float32", "float16",
                                                                        "float64"):
        raise ctx.error(f"scales must be floating point, got {ctx.type(2)}")
    plan = resample_plan(ctx.error, x.shape, None, _operand(ctx, 2), _operand(ctx, 3),
                         ctx.attrs["axes"], ctx.attrs["keep_aspect_ratio_policy"])
    return [TensorType(_output_shape(x.shape, plan), x.dtype)]


@register_op("Resize", infer=_infer_resize, fusion=FusionKind.INJECTIVE,
             attrs=_RESIZE_ATTRS, shape_operands=(2, 3))
def resize(x, roi=None, scales=None, sizes=None, *, antialias, axes,
           coordinate_transformation_mode, cubic_coeff_a, exclude_outside, extrapolation_value,
           keep_aspect_ratio_policy, mode, nearest_mode):
    """ONNX Resize (opset 11-19): nearest, linear and cubic, every coordinate mode."""
    error = runtime_error("Resize")
    _check_modes(error, {"mode": mode, "antialias": antialias, "nearest_mode": nearest_mode,
                         "coordinate_transformation_mode": coordinate_transformation_mode})
    plan = resample_plan(error, x.shape, roi, scales, sizes, axes, keep_aspect_ratio_policy)
    return resample(x, plan, mode=mode, nearest_mode=nearest_mode,
                    coordinate_transformation_mode=coordinate_transformation_mode,
                    cubic_coeff_a=cubic_coeff_a, antialias=bool(antialias),
                    exclude_outside=bool(exclude_outside),
                    extrapolation_value=extrapolation_value)


# --- Upsample (opsets 1-9; deprecated in 10) ------------------------------------------------


def _upsample_scales(error: ErrorFactory, rank: int, scales_input, attrs: dict) -> list[float]:
    if attrs["scales"] is not None:
        scales = [float(s) for s in attrs["scales"]]
    elif attrs["height_scale"] is not None or attrs["width_scale"] is not None:
        scales = [1.0] * (rank - 2) + [float(attrs["height_scale"] or 1.0),
                                       float(attrs["width_scale"] or 1.0)]
    elif scales_input is not None:
        scales = [float(s) for s in np.asarray(scales_input).reshape(-1)]
    else:
        raise error("needs scales (input 1, or the attribute before opset 9)")
    if len(scales) != rank or any(s < 1 for s in scales):
        raise error(f"scales {scales} must be {rank} factors >= 1 (one per axis)")
    return scales


def _upsample_mode(error: ErrorFactory, mode: str) -> str:
    # Opset 1 called bilinear interpolation "bilinear".
    modes = {"nearest": "nearest", "linear": "linear", "bilinear": "linear"}
    if mode not in modes:
        raise error(f"mode {mode!r} must be nearest or linear")
    return modes[mode]


def _upsample_plan(shape, scales) -> dict[int, AxisResample]:
    return {a: AxisResample(d, int(np.floor(d * s)), s) for a, (d, s) in
            enumerate(zip(shape, scales))}


def _infer_upsample(ctx: InferContext):
    x = ctx.type(0)
    _upsample_mode(ctx.error, ctx.attrs["mode"])
    needs_input = ctx.attrs["scales"] is None and ctx.attrs["height_scale"] is None \
        and ctx.attrs["width_scale"] is None
    scales = _upsample_scales(ctx.error, x.ndim, ctx.value(1) if needs_input else None,
                              ctx.attrs)
    return [TensorType(_output_shape(x.shape, _upsample_plan(x.shape, scales)),
                       x.dtype)]


@register_op("Upsample", infer=_infer_upsample, fusion=FusionKind.INJECTIVE,
             attrs={"mode": "nearest", "scales": None, "height_scale": None,
                    "width_scale": None}, shape_operands=(1,))
def upsample(x, scales_input=None, *, mode, scales, height_scale, width_scale):
    """ONNX Upsample: asymmetric coordinates, nearest (floor) or linear interpolation."""
    error = runtime_error("Upsample")
    attrs = {"scales": scales, "height_scale": height_scale, "width_scale": width_scale}
    factors = _upsample_scales(error, x.ndim, scales_input, attrs)
    return resample(x, _upsample_plan(x.shape, factors),
                    mode=_upsample_mode(error, mode), nearest_mode="floor",
                    coordinate_transformation_mode="asymmetric")
