"""Shape manipulation and data movement."""

from __future__ import annotations

import numpy as np

from .. import te
from ..errors import CompileError
from ..ops.tensor import crop_pad_widths
from .common import broadcast_load, require_native
from .registry import register_compute


def _unravel(flat, shape):
    """Multi-index of row-major ``flat`` in ``shape`` (TE expressions)."""
    index = []
    for d in reversed(shape):
        index.append(flat % d if d != 1 else 0)
        flat = flat // d
    return tuple(reversed(index))


@register_compute("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def reshape(inputs, attrs, out_types):
    x = inputs[0]
    out = tuple(out_types[0].shape)
    strides = [int(np.prod(out[k + 1:])) for k in range(len(out))]

    def body(*index):
        flat = 0
        for i, s in zip(index, strides):
            flat = flat + i * s if s != 1 else flat + i
        return x[_unravel(flat, x.shape)] if x.ndim else x[()]

    return [te.compute(out, body, name="reshape", dtype=x.dtype)]


@register_compute("Transpose")
def transpose(inputs, attrs, out_types):
    x = inputs[0]
    perm = attrs.get("perm") or list(range(x.ndim))[::-1]
    inverse = np.argsort(perm)
    return [te.compute(out_types[0].shape, lambda *i: x[tuple(i[k] for k in inverse)],
                       name="transpose", dtype=x.dtype)]


@register_compute("Concat")
def concat(inputs, attrs, out_types):
    given = [t for t in inputs if t is not None]
    axis = attrs["axis"] % len(out_types[0].shape)
    offsets = np.cumsum([0] + [t.shape[axis] for t in given])

    def body(*index):
        i = index[axis]
        value = None
        for t, start in zip(given, offsets[:-1]):
            # if_then_else reads only the side it selects: no index clamping needed
            load = t[tuple(i - int(start) if k == axis else index[k]
                           for k in range(len(index)))]
            value = load if value is None else te.if_then_else(i >= int(start), load, value)
        return value

    return [te.compute(out_types[0].shape, body, name="concat", dtype=out_types[0].dtype)]


# --- helpers shared with indexing.py and resize.py --------------------------------------------
#
# Shape-like operands (Slice's starts, Pad's pads, Resize's scales...) reach a compute as
# placeholders: their contents are bound when the kernel runs, not when it is built. Where
# the output type does not already pin a value down, the kernel reads it from its buffer
# (loop-invariant loads, which LLVM hoists out of the loops since buffers are noalias).


def load_first(t):
    """Element 0 of a one-element tensor (a scalar operand given as shape () or (1,))."""
    return t[(0,) * t.ndim]


def clamp_index(index, dim: int):
    """``index`` forced into [0, dim): a load through it can never leave the buffer."""
    if dim == 0:
        raise CompileError("a load from an empty axis has no TE compute (nothing to read)")
    return te.minimum(te.maximum(index, te.const(0, "int64")), te.const(dim - 1, "int64"))


def wrap_index(index, dim: int):
    """A possibly negative (counting from the end) index into an axis of size ``dim``,
    clamped into range: an out-of-range index reads the nearest edge element."""
    index = te.cast("int64", index)
    return clamp_index(te.if_then_else(index < 0, index + dim, index), dim)


def operand_entries(inputs, index: int, attr_value=None) -> list | None:
    """The entries of a 1-D shape-like operand as int64 expressions: constants when the
    (older opset) attribute gives them, loads when input ``index`` does; None if absent."""
    if attr_value is not None:
        return [te.const(int(v), "int64") for v in np.asarray(attr_value).reshape(-1)]
    t = inputs[index] if index < len(inputs) else None
    if t is None or int(np.prod(t.shape)) == 0:
        return None
    if t.ndim != 1:
        raise CompileError(f"shape-like operand {t.name} must be 1-D, got shape {t.shape}")
    return [te.cast("int64", t[k]) for k in range(t.shape[0])]


def per_axis(entries: list, axes: list | None, rank: int, default: int) -> list:
    """For each of ``rank`` axes, the entry that ``axes`` assigns to it (entry k belongs
    to axis k when ``axes`` is None), or ``default`` for an axis no entry names."""
    if axes is None:
        return [entries[d] if d < len(entries) else te.const(default, "int64")
                for d in range(rank)]
    values = []
    for d in range(rank):
        value = te.const(default, "int64")
        for entry, axis in zip(entries, axes):
            # negative axes count from the end; selects fold away for constant axes
            names_d = te.logical_or(te.equal(axis, d), te.equal(axis, d - rank))
            value = te.if_then_else(names_d, entry, value)
        values.append(value)
    return values


# --- Split, Slice -----------------------------------------------------------------------------


@register_compute("Split")
def split(inputs, attrs, out_types):
    """One output per chunk; chunk sizes are the outputs' extents along the axis."""
    x = inputs[0]
    axis = attrs["axis"] % x.ndim
    outputs, offset = [], 0
    for k, out in enumerate(out_types):
        start = offset

        def body(*index, start=start):
            return x[tuple(i + start if d == axis else i for d, i in enumerate(index))]

        outputs.append(te.compute(out.shape, body, name=f"split{k}", dtype=x.dtype))
        offset += out.shape[axis]
    return outputs


def _slice_start(start, step, dim: int):
    """First input index of a Slice along an axis of size ``dim``, clamped as ONNX says
    (towards [0, dim] for a positive step, [0, dim - 1] for a negative one)."""
    start = te.if_then_else(start < 0, start + dim, start)
    upper = te.if_then_else(step > 0, te.const(dim, "int64"), te.const(dim - 1, "int64"))
    return te.minimum(te.maximum(start, te.const(0, "int64")), upper)


@register_compute("Slice")
def slice_(inputs, attrs, out_types):
    """``out[i] = x[start + i * step]`` per axis; the output extents come from type
    inference, so the ends are never needed."""
    x = inputs[0]
    out_shape = tuple(out_types[0].shape)
    starts = operand_entries(inputs, 1, attrs["starts"])
    if starts is None:
        raise CompileError("Slice needs starts (input 1)")
    axes = operand_entries(inputs, 3, attrs["axes"])
    steps = operand_entries(inputs, 4, attrs["steps"]) or [te.const(1, "int64")] * len(starts)
    start_of = per_axis(starts, axes, x.ndim, 0)
    step_of = per_axis(steps, axes, x.ndim, 1)
    first = [_slice_start(s, t, d) for s, t, d in zip(start_of, step_of, x.shape)]

    def body(*index):
        return x[tuple(clamp_index(f + i * t, d) if d else i
                       for f, i, t, d in zip(first, index, step_of, x.shape))]

    return [te.compute(out_shape, body, name="slice", dtype=x.dtype)]


# --- Expand, Tile, DepthToSpace, SpaceToDepth ----------------------------------------------------


@register_compute("Expand")
def expand(inputs, attrs, out_types):
    x = inputs[0]
    shape = tuple(out_types[0].shape)
    return [te.compute(shape, lambda *i: broadcast_load(x, shape, i), name="expand",
                       dtype=x.dtype)]


@register_compute("Tile")
def tile(inputs, attrs, out_types):
    x = inputs[0]
    return [te.compute(out_types[0].shape,
                       lambda *index: x[tuple(i % d if d != 1 else 0
                                              for i, d in zip(index, x.shape))],
                       name="tile", dtype=x.dtype)]


@register_compute("DepthToSpace")
def depth_to_space(inputs, attrs, out_types):
    x = inputs[0]
    b = attrs["blocksize"]
    channels = out_types[0].shape[1]

    def body(n, c, y, xx):
        by, bx = y % b, xx % b
        if attrs["mode"] == "DCR":
            source = (by * b + bx) * channels + c
        else:
            source = (c * b + by) * b + bx
        return x[n, source, y // b, xx // b]

    return [te.compute(out_types[0].shape, body, name="depth_to_space", dtype=x.dtype)]


@register_compute("SpaceToDepth")
def space_to_depth(inputs, attrs, out_types):
    x = inputs[0]
    b = attrs["blocksize"]
    channels = x.shape[1]

    def body(n, c, y, xx):
        if attrs["mode"] == "DCR":
            by, bx, source = c // (b * channels), (c // channels) % b, c % channels
        else:
            by, bx, source = (c // b) % b, c % b, c // (b * b)
        return x[n, source, y * b + by, xx * b + bx]

    return [te.compute(out_types[0].shape, body, name="space_to_depth", dtype=x.dtype)]


# --- Pad ----------------------------------------------------------------------------------------


def clamp_to(index, size):
    """``index`` forced into [0, size) for a ``size`` known only at run time."""
    return te.minimum(te.maximum(index, te.const(0, "int64")), size - 1)


def _pad_source(o, before, after, dim: int, mode: str):
    """Input index that output index ``o`` of a reflect/edge/wrap Pad reads.

    Negative pads crop first (as the reference does): the padded rows mirror, repeat or
    wrap the ``kept`` rows that remain, which start at ``crop`` in the input."""
    zero = te.const(0, "int64")
    crop = te.maximum(-before, zero)
    kept = te.minimum(before, zero) + te.minimum(after, zero) + dim
    r = o - te.maximum(before, zero)  # position within the kept rows
    if mode == "reflect":
        # one reflection at each end suffices (reflect pads are shorter than the axis):
        # last - |last - |r|| is r inside, -r before the start, 2 * last - r after the end
        last = kept - 1
        distance = last - te.maximum(r, -r)
        r = last - te.maximum(distance, -distance)
    elif mode == "wrap":
        r = r % te.maximum(kept, te.const(1, "int64"))
    return clamp_index(crop + clamp_to(r, kept), dim)


def _pad_value(fill, attrs, dtype: str):
    """The constant a Pad fills with: input 2 when given (and not empty), else the
    (older opset) ``value`` attribute."""
    if fill is not None and int(np.prod(fill.shape)) > 0:
        return te.cast(dtype, load_first(fill))
    return te.const(attrs["value"], dtype)


@register_compute("Pad")
def pad(inputs, attrs, out_types):
    x = inputs[0]
    mode = attrs["mode"]
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise CompileError(f"Pad mode {mode!r} has no TE compute")
    if x.ndim == 0 or (0 in x.shape and mode != "constant"):
        raise CompileError(f"Pad of a {x.dtype}{list(x.shape)} tensor in mode {mode!r} has "
                           "no TE compute")
    given = attrs["pads"] if attrs["pads"] is not None else attrs["paddings"]
    pads = operand_entries(inputs, 1, given)
    if pads is None:
        raise CompileError("Pad needs pads (input 1)")
    axes = operand_entries(inputs, 3)
    count = len(pads) // 2
    before = per_axis(pads[:count], axes, x.ndim, 0)
    after = per_axis(pads[count:], axes, x.ndim, 0)
    fill = _pad_value(inputs[2] if len(inputs) > 2 else None, attrs, x.dtype)

    if mode == "constant":
        return [_constant_pad(x, before, fill, out_types[0].shape, "pad")]

    def mirrored_body(*index):
        return x[tuple(_pad_source(o, b, a, d, mode)
                       for o, b, a, d in zip(index, before, after, x.shape))]

    return [te.compute(out_types[0].shape, mirrored_body, name="pad", dtype=x.dtype)]


def _constant_pad(x, before, fill, shape, name: str):
    """``x`` shifted by ``before`` per axis into ``shape``, ``fill`` around it (negative
    ``before`` crops)."""

    def body(*index):
        inside, source = None, []
        for o, b, d in zip(index, before, x.shape):
            i = o - b
            cond = te.logical_and(i >= 0, i < d)
            inside = cond if inside is None else te.logical_and(inside, cond)
            source.append(i)
        # if_then_else only loads the side it selects: the shifted index stays unread
        # wherever it falls outside the input
        return te.if_then_else(inside, x[tuple(source)], fill)

    return te.compute(shape, body, name=name, dtype=x.dtype)


@register_compute("CenterCropPad")
def center_crop_pad(inputs, attrs, out_types):
    """The output extents are the requested sizes, so the crop or pad of every axis is
    known statically."""
    x = inputs[0]
    shape = tuple(out_types[0].shape)
    if x.ndim == 0:
        raise CompileError("CenterCropPad of a scalar has no TE compute")
    widths = crop_pad_widths(lambda message: CompileError(f"CenterCropPad: {message}"),
                              x.shape, list(shape), None)
    before = [te.const(b, "int64") for b, _ in widths]
    return [_constant_pad(x, before, te.const(0, x.dtype), shape, "center_crop_pad")]


# --- ConstantOfShape, Range, EyeLike -------------------------------------------------------------


@register_compute("ConstantOfShape")
def constant_of_shape(inputs, attrs, out_types):
    out = out_types[0]
    require_native([out.dtype], "ConstantOfShape")
    value = attrs["value"]
    fill = 0 if value is None else np.asarray(value).reshape(-1)[0].item()
    return [te.compute(out.shape, lambda *i: te.const(fill, out.dtype),
                       name="constant_of_shape", dtype=out.dtype)]


@register_compute("Range")
def range_(inputs, attrs, out_types):
    start, _, delta = inputs[:3]
    out = out_types[0]
    require_native([out.dtype], "Range")
    return [te.compute(out.shape,
                       lambda i: load_first(start) + te.cast(out.dtype, i) * load_first(delta),
                       name="range", dtype=out.dtype)]


@register_compute("EyeLike")
def eye_like(inputs, attrs, out_types):
    out = out_types[0]
    require_native([out.dtype], "EyeLike")
    k = attrs["k"]
    return [te.compute(out.shape, lambda i, j: te.if_then_else(
        te.equal(j - i, k), te.const(1, out.dtype), te.const(0, out.dtype)),
        name="eye_like", dtype=out.dtype)]
