"""Spatial sampling: AffineGrid, GridSample and RoiAlign.

Coordinates are worked out in float64 inside the kernel (grids and boxes are data),
following the references in ``heterocc.ops.nn``; each interpolation tap is a clamped
load weighted by zero where the reference reads padding.
"""

from __future__ import annotations

import itertools

from .. import te
from ..errors import CompileError
from .common import float_only
from .registry import register_compute

F64 = "float64"


def _c(value: float):
    return te.const(float(value), F64)


def _clip(value, low, high):
    return te.minimum(te.maximum(value, low), high)


@register_compute("AffineGrid")
def affine_grid(inputs, attrs, out_types):
    """``grid[n, p..., i] = theta[n, i, :] . (x, y[, z], 1)`` at the normalized position
    of each output point (x along the last spatial axis)."""
    theta = inputs[0]
    out = out_types[0]
    float_only(out.dtype, "AffineGrid")
    spatial = out.shape[1:-1]
    align = bool(attrs["align_corners"])

    def position(index, count: int):
        i = te.cast(F64, index)
        if align:
            return _c(-1.0) if count == 1 else _c(-1.0) + i * _c(2.0 / (count - 1))
        return (_c(2.0) * i + _c(1.0)) / _c(count) - _c(1.0)

    def body(n, *rest):
        *where, i = rest
        points = [position(where[len(spatial) - 1 - k], spatial[len(spatial) - 1 - k])
                  for k in range(len(spatial))] + [_c(1.0)]
        value = _c(0.0)
        for k, point in enumerate(points):
            value = value + point * te.cast(F64, theta[n, i, k])
        return te.cast(out.dtype, value)

    return [te.compute(out.shape, body, name="affine_grid", dtype=out.dtype)]


_GRID_MODES = {"linear": "linear", "bilinear": "linear", "nearest": "nearest",
               "cubic": "cubic", "bicubic": "cubic"}


def _reflect(coordinate, low: float, high: float):
    """Coordinates outside [low, high] folded back in, bouncing between the borders."""
    span = high - low
    if span <= 0:
        return _c(low)
    below, above = coordinate < _c(low), coordinate > _c(high)
    distance = te.if_then_else(below, _c(low) - coordinate,
                               te.if_then_else(above, coordinate - _c(high), _c(0.0)))
    bounces = te.floor(distance / _c(span))
    rest = distance - bounces * _c(span)
    even = te.equal(bounces - _c(2.0) * te.floor(bounces / _c(2.0)), _c(0.0))
    from_low = te.if_then_else(even, _c(low) + rest, _c(high) - rest)
    from_high = te.if_then_else(even, _c(high) - rest, _c(low) + rest)
    return te.if_then_else(below, from_low, te.if_then_else(above, from_high, coordinate))


def _cubic_weights(t):
    """Keys cubic convolution weights (a = -0.75) of the taps at -1, 0, 1, 2."""
    a = -0.75

    def near(d):
        return ((_c(a + 2) * d - _c(a + 3)) * d) * d + _c(1.0)

    def far(d):
        return ((_c(a) * d - _c(5 * a)) * d + _c(8 * a)) * d - _c(4 * a)

    one, two = _c(1.0), _c(2.0)
    return [far(t + one), near(t), near(one - t), far(two - t)]


def _source_coordinate(coordinate, size: int, mode: str, padding: str, align: bool):
    """The pixel coordinate normalized grid ``coordinate`` samples along an axis of
    ``size``, after rounding (nearest) and the padding mode's folding."""
    c, borders = _unnormalized(coordinate, size, align)
    if mode == "nearest":
        c = te.call_intrin("round", c)
    outside = te.logical_or(c < _c(borders[0]), c > _c(borders[1]))
    if padding == "border":
        return te.if_then_else(outside, _clip(c, _c(0.0), _c(size - 1)), c)
    if padding == "reflection":
        return te.if_then_else(outside, _reflect(c, *borders), c)
    return c


def _unnormalized(coordinate, size: int, align: bool):
    """Pixel coordinate of a normalized one, and the borders past which it pads."""
    if align:
        return (coordinate + _c(1.0)) / _c(2.0) * _c(size - 1), (0.0, size - 1.0)
    return ((coordinate + _c(1.0)) * _c(size) - _c(1.0)) / _c(2.0), (-0.5, size - 0.5)


def _axis_taps(c, size: int, mode: str, padding: str, align: bool):
    """(index, weight) taps interpolating one axis at pixel coordinate ``c``."""
    _, borders = _unnormalized(_c(0.0), size, align)
    if mode == "nearest":
        raw = [(te.cast("int64", c), _c(1.0))]
    else:
        base = te.floor(c)
        fraction = c - base
        start = te.cast("int64", base)
        if mode == "linear":
            raw = [(start, _c(1.0) - fraction), (start + 1, fraction)]
        else:
            raw = list(zip([start + k for k in (-1, 0, 1, 2)], _cubic_weights(fraction)))
    taps = []
    last = te.const(size - 1, "int64")
    for index, weight in raw:
        if padding == "zeros":
            inside = te.logical_and(index >= 0, index <= last)
            weight = te.if_then_else(inside, weight, _c(0.0))
        elif padding == "reflection":
            index = te.cast("int64", _reflect(te.cast(F64, index), *borders))
        taps.append((_clip(index, te.const(0, "int64"), last), weight))
    return taps


@register_compute("GridSample")
def grid_sample(inputs, attrs, out_types):
    """A sum over the corners of per-axis taps (1 nearest, 2 linear, 4 cubic)."""
    x, grid = inputs[:2]
    out = out_types[0]
    float_only(x.dtype, "GridSample")
    mode = _GRID_MODES[attrs["mode"]]
    spatial = x.shape[2:]
    rank = len(spatial)
    align = bool(attrs["align_corners"])
    padding = attrs["padding_mode"]

    def coordinate_body(*index):
        *where, axis = index
        value = _c(0.0)
        for a, size in enumerate(spatial):
            # grid's last axis lists (x, y[, z]): the last spatial axis first
            c = _source_coordinate(te.cast(F64, grid[(*where, rank - 1 - a)]), size, mode,
                                   padding, align)
            value = te.if_then_else(te.equal(axis, a), c, value)
        return value

    # the folded coordinates, and per axis and tap a table of its index and weight at
    # every output point, computed once: the folding and the corners read them often
    coordinates = te.compute(grid.shape, coordinate_body, name="grid_sample_coordinates",
                             dtype=F64, attrs={"keep": True})

    def taps_of(axis: int, where: tuple):
        return _axis_taps(coordinates[(*where, axis)], spatial[axis], mode, padding, align)

    tables = []
    for axis in range(rank):
        count = len(taps_of(axis, tuple(te.const(0, "int64") for _ in grid.shape[:-1])))
        tables.append([tuple(te.compute(
            grid.shape[:-1], lambda *w, axis=axis, k=k, part=part: taps_of(axis, w)[k][part],
            name=f"grid_sample_tap{axis}_{k}_{part}", dtype=dtype, attrs={"keep": True})
            for part, dtype in ((0, "int64"), (1, F64))) for k in range(count)])

    def body(n, channel, *where):
        point = (n, *where)
        value = _c(0.0)
        for corner in itertools.product(*tables):
            weight = corner[0][1][point]
            for _, w in corner[1:]:
                weight = weight * w[point]
            value = value + weight * te.cast(
                F64, x[(n, channel, *[index[point] for index, _ in corner])])
        return te.cast(out.dtype, value)

    return [te.compute(out.shape, body, name="grid_sample", dtype=out.dtype)]


def _roi_samples(start, length, bin_index, sample, bins: int, per_bin: int, size: int):
    """The bilinear taps of one RoiAlign sample along an axis: (low, high, low weight,
    high weight, valid), as the reference's ``_roi_axis_samples``."""
    step = length / _c(bins)
    offset = (te.cast(F64, sample) + _c(0.5)) * step / _c(per_bin)
    position = start + te.cast(F64, bin_index) * step + offset
    valid = te.logical_and(position >= _c(-1.0), position <= _c(size))
    position = te.maximum(position, _c(0.0))
    low = te.cast("int64", position)
    clamped = low >= size - 1
    low = te.if_then_else(clamped, te.const(size - 1, "int64"), low)
    high = te.if_then_else(clamped, te.const(size - 1, "int64"), low + 1)
    position = te.if_then_else(clamped, te.cast(F64, low), position)
    high_weight = position - te.cast(F64, low)
    return low, high, _c(1.0) - high_weight, high_weight, valid


@register_compute("RoiAlign")
def roi_align(inputs, attrs, out_types):
    """Average (or max of weighted corners) of a fixed ``sampling_ratio`` grid of
    bilinear samples per bin; an adaptive grid (ratio 0) depends on each box's size
    and runs on the NumPy reference."""
    x, rois, batch_indices = inputs[:3]
    out = out_types[0]
    float_only(x.dtype, "RoiAlign")
    ratio = attrs["sampling_ratio"]
    if ratio <= 0:
        raise CompileError("RoiAlign with an adaptive sampling grid (sampling_ratio 0) has "
                           "no TE compute")
    half_pixel = attrs["coordinate_transformation_mode"] == "half_pixel"
    height, width = x.shape[2:]
    bins_h, bins_w = attrs["output_height"], attrs["output_width"]
    scale = _c(attrs["spatial_scale"])
    shift = _c(0.5 if half_pixel else 0.0)
    average = attrs["mode"] == "avg"

    def box(r, k):
        return te.cast(F64, rois[r, k]) * scale - shift

    def extent(r, k):
        length = box(r, k + 2) - box(r, k)
        return length if half_pixel else te.maximum(length, _c(1.0))

    def axis_tables(k: int, bins: int, size: int, name: str):
        """Per (box, bin, sample) along the axis whose box corner is column ``k``: the
        five parts of its taps, computed once (every corner of every sample reads them)."""
        kinds = ("int64", "int64", F64, F64, "bool")
        return [te.compute((rois.shape[0], bins, ratio), lambda r, b, sample, part=part: (
            _roi_samples(box(r, k), extent(r, k), b, sample, bins, ratio, size)[part]),
            name=f"roi_align_{name}{part}", dtype=kind, attrs={"keep": True})
            for part, kind in enumerate(kinds)]

    rows, columns = axis_tables(1, bins_h, height, "y"), axis_tables(0, bins_w, width, "x")

    def body(r, channel, ph, pw):
        image = te.cast("int64", batch_indices[r])
        value = _c(0.0) if average else None
        for sy, sx in itertools.product(range(ratio), range(ratio)):
            y_low, y_high, wy_low, wy_high, y_ok = [t[r, ph, sy] for t in rows]
            x_low, x_high, wx_low, wx_high, x_ok = [t[r, pw, sx] for t in columns]
            ok = te.logical_and(y_ok, x_ok)
            for row, row_weight in ((y_low, wy_low), (y_high, wy_high)):
                for column, column_weight in ((x_low, wx_low), (x_high, wx_high)):
                    term = te.if_then_else(ok, row_weight * column_weight * te.cast(
                        F64, x[image, channel, row, column]), _c(0.0))
                    value = term if value is None else (
                        value + term if average else te.maximum(value, term))
        if average:
            value = value / _c(ratio * ratio)
        return te.cast(out.dtype, value)

    return [te.compute(out.shape, body, name="roi_align", dtype=out.dtype)]
