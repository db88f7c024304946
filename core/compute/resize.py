"""Resize and Upsample: separable resampling (nearest, linear, cubic) along each scaled
axis, with the coordinate transformations of ONNX Resize."""

from __future__ import annotations

import numpy as np

from .. import te
from ..errors import CompileError
from ..ops.resize import AxisResample, source_coordinates
from ..tir.expr import FloatImm
from .common import float_only, require_native
from .registry import register_compute
from .tensor import clamp_index

_RESIZE_COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                            "align_corners", "asymmetric", "tf_half_pixel_for_nn")


_NEAREST_ROUNDING = {
    "round_prefer_floor": lambda c: te.ceil(c - te.const(0.5, "float64")),
    "round_prefer_ceil": lambda c: te.floor(c + te.const(0.5, "float64")),
    "floor": te.floor,
    "ceil": te.ceil,
}


def _resize_scales(inputs, attrs, in_shape, out_shape) -> dict[int, object]:
    """Per resized axis, the float64 scale its coordinates use: from ``scales`` (read
    at run time) or from ``sizes`` over the input extent."""
    axes = attrs["axes"]
    resized = list(range(len(in_shape))) if axes is None else [a % len(in_shape) for a in axes]
    scales = inputs[2] if len(inputs) > 2 else None
    if scales is not None and int(np.prod(scales.shape)) > 0:
        return {a: te.cast("float64", scales[k]) for k, a in enumerate(resized)}
    if attrs["keep_aspect_ratio_policy"] == "stretch":
        # the output extent is the requested size, known statically
        return {a: te.const(out_shape[a] / in_shape[a], "float64") for a in resized}
    sizes = inputs[3]
    ratios = [te.cast("float64", sizes[k]) / te.const(float(in_shape[a]), "float64")
              for k, a in enumerate(resized)]
    pick = te.minimum if attrs["keep_aspect_ratio_policy"] == "not_larger" else te.maximum
    common = ratios[0]
    for ratio in ratios[1:]:
        common = pick(common, ratio)
    return dict.fromkeys(resized, common)


def _source_coordinate(o, scale, n_in: int, n_out: int, mode: str):
    """Fractional input coordinate of output index ``o`` (float64, as the reference)."""
    f64 = "float64"
    out = te.cast(f64, o)
    half = te.const(0.5, f64)
    if mode in ("pytorch_half_pixel", "align_corners") and n_out <= 1:
        return te.const(0.0, f64)
    if mode in ("half_pixel", "pytorch_half_pixel"):
        return (out + half) / scale - half
    if mode == "half_pixel_symmetric":
        adjustment = te.const(float(n_out), f64) / (scale * float(n_in))
        offset = te.const(n_in / 2, f64) * (te.const(1.0, f64) - adjustment)
        return offset + (out + half) / scale - half
    if mode == "align_corners":
        return out * float(n_in - 1) / (scale * float(n_in) - te.const(1.0, f64))
    if mode == "asymmetric":
        return out / scale
    return (out + half) / scale  # tf_half_pixel_for_nn


def _nearest(coordinate, n_in: int, nearest_mode: str):
    rounded = _NEAREST_ROUNDING[nearest_mode](coordinate)
    # clamped as a float, so the conversion to an integer cannot overflow
    inside = te.minimum(te.maximum(rounded, te.const(0.0, "float64")),
                        te.const(float(n_in - 1), "float64"))
    return te.cast("int64", inside)


def _linear_taps(coordinate, n_in: int, exclude_outside: bool):
    """The two (input index, weight) taps of a linear resample at ``coordinate``, the
    weights normalized to sum to one as the reference does.

    Taps outside the input fold onto the edge pixel, or are dropped when
    ``exclude_outside`` (no tap left gives weight 0, as in the reference)."""
    f64 = "float64"
    below = te.floor(coordinate)
    fraction = coordinate - below
    base = te.cast("int64", te.minimum(te.maximum(below, te.const(-1.0, f64)),
                                       te.const(float(n_in), f64)))
    indices, weights = [], []
    for step, weight in ((0, te.const(1.0, f64) - fraction), (1, fraction)):
        if exclude_outside:
            # tested on the unclamped float tap: a far-away tap must not land inside
            tap = below + te.const(float(step), f64)
            inside = te.logical_and(tap >= te.const(0.0, f64),
                                    tap <= te.const(float(n_in - 1), f64))
            weight = te.if_then_else(inside, weight, te.const(0.0, f64))
        indices.append(clamp_index(base + step, n_in))
        weights.append(weight)
    total = weights[0] + weights[1]
    total = te.if_then_else(te.equal(total, te.const(0.0, f64)), te.const(1.0, f64), total)
    return list(zip(indices, [w / total for w in weights]))


def _is_identity(scale, n_in: int, n_out: int, mode: str) -> bool:
    """Whether resampling an axis is statically known to copy it (as the reference
    skips such an axis): a one-element axis, or a constant scale whose coordinates are
    exactly the output positions."""
    if n_in == n_out == 1:
        return True
    if n_in != n_out or not isinstance(scale, FloatImm):
        return False
    spec = AxisResample(n_in, n_out, scale.value)
    return bool(np.array_equal(source_coordinates(spec, mode), np.arange(n_in)))


def _axis_table(n_out: int, entry, dtype: str, name: str):
    """A per-output-position table of one resized axis, materialized once (``keep``), so
    that the coordinate arithmetic is not repeated for every element of the output."""
    return te.compute((n_out,), entry, name=name, dtype=dtype, attrs={"keep": True})


def _linear_stage(source, axis: int, taps, dtype: str, keep: bool):
    """``source`` linearly resampled along ``axis`` through the tables ``taps`` (one
    separable pass, as the reference makes them)."""
    n_out = taps[0][0].shape[0]
    shape = source.shape[:axis] + (n_out,) + source.shape[axis + 1:]

    def body(*index):
        o = index[axis]
        value = None
        for tap_index, tap_weight in taps:
            term = tap_weight[o] * te.cast(
                "float64", source[index[:axis] + (tap_index[o],) + index[axis + 1:]])
            value = term if value is None else value + term
        return value

    return te.compute(shape, body, name=f"resize_axis{axis}", dtype=dtype,
                      attrs={"keep": True} if keep else {})


def _linear_tables(a: int, n_in: int, n_out: int, coordinate, exclude_outside: bool):
    """Per tap of axis ``a``: its table of input indices and its table of weights."""
    def table(k: int, part: int, dtype: str, what: str):
        return _axis_table(n_out, lambda o: _linear_taps(coordinate(a, o), n_in,
                                                         exclude_outside)[k][part],
                           dtype, f"resize_tap{k}_{what}{a}")

    return [(table(k, 0, "int64", "index"), table(k, 1, "float64", "weight"))
            for k in range(2)]


def _resample(x, scales: dict, out_shape, mode: str, coordinates: str, nearest_mode: str,
              exclude_outside: bool):
    """``x`` resized to ``out_shape``: nearest or linear, the given coordinate mode, one
    scale expression per resized axis (shared by Resize and Upsample)."""
    require_native([x.dtype], "Resize")
    if mode == "linear":
        float_only(x.dtype, "Resize (linear)")
    resampled = {a: s for a, s in scales.items()
                 if not _is_identity(s, x.shape[a], out_shape[a], coordinates)}

    def coordinate(a, o):
        return _source_coordinate(o, resampled[a], x.shape[a], out_shape[a], coordinates)

    if mode == "linear" and resampled:
        stage, last = x, max(resampled)
        for a in sorted(resampled):
            taps = _linear_tables(a, x.shape[a], out_shape[a], coordinate, exclude_outside)
            stage = _linear_stage(stage, a, taps, x.dtype if a == last else "float64",
                                  keep=a != last)
        return stage

    tables = {a: _axis_table(out_shape[a], lambda o, a=a: _nearest(
        coordinate(a, o), x.shape[a], nearest_mode), "int64", f"resize_index{a}")
        for a in resampled}
    return te.compute(out_shape, lambda *index: x[tuple(
        tables[a][o] if a in tables else o for a, o in enumerate(index))],
        name="resize", dtype=x.dtype)


@register_compute("Resize")
def resize(inputs, attrs, out_types):
    x = inputs[0]
    out_shape = tuple(out_types[0].shape)
    mode, coordinates = attrs["mode"], attrs["coordinate_transformation_mode"]
    if mode not in ("nearest", "linear") or attrs["antialias"]:
        raise CompileError(f"Resize mode {mode!r}{' with antialias' * bool(attrs['antialias'])}"
                           " has no TE compute (nearest and linear only)")
    if coordinates not in _RESIZE_COORDINATE_MODES:
        raise CompileError(f"Resize coordinate_transformation_mode {coordinates!r} has no TE "
                           "compute")
    scales = _resize_scales(inputs, attrs, x.shape, out_shape)
    return [_resample(x, scales, out_shape, mode, coordinates, attrs["nearest_mode"],
                      bool(attrs["exclude_outside"]))]


@register_compute("Upsample")
def upsample(inputs, attrs, out_types):
    """Resize's ancestor: asymmetric coordinates, nearest rounding down, or linear."""
    x = inputs[0]
    if attrs["scales"] is not None:
        scales = [te.const(float(s), "float64") for s in attrs["scales"]]
    elif attrs["height_scale"] is not None or attrs["width_scale"] is not None:
        spatial = [attrs["height_scale"] or 1.0, attrs["width_scale"] or 1.0]
        scales = [te.const(float(s), "float64") for s in [1.0] * (x.ndim - 2) + spatial]
    else:
        scales = [te.cast("float64", inputs[1][k]) for k in range(x.ndim)]
    mode = "linear" if attrs["mode"] in ("linear", "bilinear") else attrs["mode"]
    if mode not in ("nearest", "linear"):
        raise CompileError(f"Upsample mode {attrs['mode']!r} has no TE compute")
    return [_resample(x, dict(enumerate(scales)), tuple(out_types[0].shape), mode,
                      "asymmetric", "floor", exclude_outside=False)]
