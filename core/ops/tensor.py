"""Shape manipulation and data movement (injective ops), shape-producing ops, and
BitCast (an element's bits reinterpreted as another type of the same width).

Several ops take a shape-like operand either as an input (current opsets) or as
an attribute (older opsets: Slice < 10, Pad < 11, Split < 13, Squeeze and
Unsqueeze < 13). Their references name those inputs ``*_input`` so that the
attribute of the same ONNX name can be passed as a keyword.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..errors import InputError
from ..ir.types import DTYPES, EXTENDED_DTYPES, TensorType, dtype_from_onnx, np_dtype
from .common import broadcast_shapes, normalize_axis, typed_input
from .registry import REQUIRED, FusionKind, InferContext, register_op

ErrorFactory = Callable[[str], Exception]


def int_list(values) -> list[int]:
    """A shape-like operand (array, list or scalar) as a flat list of Python ints."""
    return [int(v) for v in np.asarray(values).reshape(-1)]


def runtime_error(op: str) -> ErrorFactory:
    """An error factory for references, which see run-time values but no InferContext."""
    return lambda message: InputError(f"{op}: {message}")


def operand_or_attr(ctx: InferContext, index: int, attr: str) -> list[int] | None:
    """A shape-like operand given as input ``index`` or (older opsets) attribute ``attr``."""
    if ctx.attrs.get(attr) is not None:
        return int_list(ctx.attrs[attr])
    if ctx.has(index):
        return int_list(ctx.value(index))
    return None


def _first_given(*candidates):
    return next((c for c in candidates if c is not None), None)


def checked_axes(error: ErrorFactory, axes: Sequence[int], rank: int,
                 what: str = "axes") -> list[int]:
    """``axes`` in [0, rank), accepting negatives; an error if out of range or repeated."""
    axes = [int(a) for a in axes]
    if any(not -rank <= a < rank for a in axes) or len({a % rank for a in axes}) != len(axes):
        raise error(f"{what} {axes} must be distinct and in [-{rank}, {rank - 1}]")
    return [a % rank for a in axes]


# --- Reshape, Flatten, Transpose ------------------------------------------------------------


def _reshape_target(error: ErrorFactory, in_shape, shape, allowzero) -> tuple[int, ...]:
    shape = int_list(shape)
    if allowzero and 0 in shape and -1 in shape:
        raise error(f"shape {shape} has both 0 and -1, which allowzero=1 forbids")
    out = []
    for i, d in enumerate(shape):
        if d < -1:
            raise error(f"shape {shape} has the invalid entry {d}")
        if d == 0 and not allowzero:
            if i >= len(in_shape):
                raise error(f"shape {shape}: 0 at position {i} copies no input dim "
                            f"(input rank {len(in_shape)})")
            out.append(in_shape[i])
        else:
            out.append(d)
    total = int(np.prod(in_shape, dtype=np.int64))
    if out.count(-1) > 1:
        raise error(f"shape {shape} has more than one -1")
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        if known == 0 or total % known:
            raise error(f"cannot reshape {tuple(in_shape)} to {shape}")
        out[out.index(-1)] = total // known
    if int(np.prod(out, dtype=np.int64)) != total:
        raise error(f"cannot reshape {tuple(in_shape)} ({total} elements) to {shape}")
    return tuple(out)


def _infer_reshape(ctx: InferContext):
    x = ctx.type(0)
    shape = _reshape_target(ctx.error, x.shape, ctx.value(1), ctx.attrs["allowzero"])
    return [TensorType(shape, x.dtype)]


@register_op("Reshape", infer=_infer_reshape, fusion=FusionKind.INJECTIVE,
             attrs={"allowzero": 0}, shape_operands=(1,))
def reshape(x, shape, *, allowzero):
    """ONNX Reshape: 0 copies the input dim (unless allowzero), -1 is inferred."""
    return x.reshape(_reshape_target(runtime_error("Reshape"), x.shape, shape, allowzero))


def _flatten_shape(error: ErrorFactory, shape: tuple[int, ...], axis: int) -> tuple[int, int]:
    rank = len(shape)
    if not -rank <= axis <= rank:
        raise error(f"axis {axis} is out of range [-{rank}, {rank}] for rank {rank}")
    axis += rank if axis < 0 else 0
    return (int(np.prod(shape[:axis], dtype=np.int64)),
            int(np.prod(shape[axis:], dtype=np.int64)))


def _infer_flatten(ctx: InferContext):
    x = ctx.type(0)
    return [TensorType(_flatten_shape(ctx.error, x.shape, ctx.attrs["axis"]), x.dtype)]


@register_op("Flatten", infer=_infer_flatten, fusion=FusionKind.INJECTIVE, attrs={"axis": 1})
def flatten(x, *, axis):
    """ONNX Flatten: dims before ``axis`` become rows, the rest columns."""
    return x.reshape(_flatten_shape(runtime_error("Flatten"), x.shape, axis))


def _transpose_perm(error: ErrorFactory, rank: int, perm) -> list[int]:
    if perm is None:
        return list(range(rank))[::-1]
    perm = int_list(perm)
    if sorted(perm) != list(range(rank)):
        raise error(f"perm {perm} is not a permutation of the {rank} axes")
    return perm


def _infer_transpose(ctx: InferContext):
    x = ctx.type(0)
    perm = _transpose_perm(ctx.error, x.ndim, ctx.attrs["perm"])
    return [TensorType(tuple(x.shape[p] for p in perm), x.dtype)]


@register_op("Transpose", infer=_infer_transpose, fusion=FusionKind.INJECTIVE,
             attrs={"perm": None})
def transpose(x, *, perm):
    """ONNX Transpose (reverses the axes when ``perm`` is not given)."""
    return np.transpose(x, _transpose_perm(runtime_error("Transpose"), x.ndim, perm))


# --- Concat, Split ----------------------------------------------------------------------------


def _infer_concat(ctx: InferContext):
    types = [ctx.type(i) for i in range(len(ctx.types))]
    if not types:
        raise ctx.error("needs at least one input")
    first = types[0]
    axis = normalize_axis(ctx, ctx.attrs["axis"], first.ndim)
    total = 0
    for i, t in enumerate(types):
        if t.dtype != first.dtype:
            raise ctx.error(f"input {i} is {t.dtype} but input 0 is {first.dtype}")
        others = t.shape[:axis] + t.shape[axis + 1:]
        if t.ndim != first.ndim or others != first.shape[:axis] + first.shape[axis + 1:]:
            raise ctx.error(f"input {i} of shape {t.shape} does not match input 0 of shape "
                            f"{first.shape} outside axis {axis}")
        total += t.shape[axis]
    shape = list(first.shape)
    shape[axis] = total
    return [TensorType(tuple(shape), first.dtype)]


@register_op("Concat", infer=_infer_concat, fusion=FusionKind.INJECTIVE,
             attrs={"axis": REQUIRED})
def concat(*inputs, axis):
    """ONNX Concat along ``axis``."""
    return np.concatenate(inputs, axis=axis)


def _split_sizes(error: ErrorFactory, dim: int, sizes: list[int] | None,
                 num_outputs: int | None) -> list[int]:
    if sizes is not None:
        if any(s < 0 for s in sizes) or sum(sizes) != dim:
            raise error(f"split sizes {sizes} must be non-negative and sum to the "
                        f"split dim {dim}")
        return sizes
    if num_outputs is None:
        raise error("needs split sizes (input 1 or attribute 'split') or the "
                    "'num_outputs' attribute")
    if num_outputs < 1:
        raise error(f"num_outputs {num_outputs} must be at least 1")
    chunk = -(-dim // num_outputs)
    last = dim - chunk * (num_outputs - 1)
    if last < 0:
        raise error(f"dim {dim} cannot be split into {num_outputs} chunks of {chunk} "
                    f"(the last one would be empty)")
    return [chunk] * (num_outputs - 1) + [last]


def _infer_split(ctx: InferContext):
    x = ctx.type(0)
    axis = normalize_axis(ctx, ctx.attrs["axis"], x.ndim)
    sizes = operand_or_attr(ctx, 1, "split")
    num_outputs = _first_given(ctx.attrs["num_outputs"], None if sizes else ctx.num_outputs)
    sizes = _split_sizes(ctx.error, x.shape[axis], sizes, num_outputs)
    if len(sizes) != ctx.num_outputs:
        raise ctx.error(f"{len(sizes)} split sizes {sizes} but the node has "
                        f"{ctx.num_outputs} outputs")
    return [TensorType(x.shape[:axis] + (s,) + x.shape[axis + 1:], x.dtype) for s in sizes]


@register_op("Split", infer=_infer_split, fusion=FusionKind.INJECTIVE,
             attrs={"axis": 0, "num_outputs": None, "split": None}, shape_operands=(1,))
def split(x, split_input=None, *, axis, num_outputs, split):
    """ONNX Split: by sizes (input or, before opset 13, attribute) or into num_outputs chunks.

    Equal splits of opset < 18 models need ``num_outputs``, which the frontend fills in
    from the node's output count.
    """
    sizes = _first_given(split, None if split_input is None else int_list(split_input))
    sizes = _split_sizes(runtime_error("Split"), x.shape[axis], sizes, num_outputs)
    return tuple(np.split(x, np.cumsum(sizes)[:-1], axis=axis))


# --- Slice --------------------------------------------------------------------------------


def _slice_plan(error: ErrorFactory, shape: tuple[int, ...], starts: list[int],
                ends: list[int], axes: list[int] | None,
                steps: list[int] | None) -> tuple[tuple[slice, ...], tuple[int, ...]]:
    """NumPy index and output shape of an ONNX Slice, clamping as the spec says."""
    rank = len(shape)
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise error(f"starts {starts}, ends {ends}, axes {axes} and steps {steps} "
                    "must have the same length")
    index = [slice(None)] * rank
    out = list(shape)
    for start, end, axis, step in zip(starts, ends, checked_axes(error, axes, rank), steps):
        if step == 0:
            raise error(f"step 0 on axis {axis}")
        dim = shape[axis]
        start += dim if start < 0 else 0
        end += dim if end < 0 else 0
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        length = len(range(start, end, step)) if dim else 0
        out[axis] = length
        # NumPy would read a stop of -1 as "the last element", so "before 0" is None.
        index[axis] = slice(start, end if end >= 0 else None, step) if length else slice(0, 0)
    return tuple(index), tuple(out)


def _slice_operands(ctx: InferContext) -> list[list[int] | None]:
    return [operand_or_attr(ctx, 1, "starts"), operand_or_attr(ctx, 2, "ends"),
            operand_or_attr(ctx, 3, "axes"), operand_or_attr(ctx, 4, "steps")]


def _infer_slice(ctx: InferContext):
    x = ctx.type(0)
    starts, ends, axes, steps = _slice_operands(ctx)
    if starts is None or ends is None:
        raise ctx.error("needs starts and ends (inputs 1 and 2)")
    _, shape = _slice_plan(ctx.error, x.shape, starts, ends, axes, steps)
    return [TensorType(shape, x.dtype)]


def _optional_ints(values) -> list[int] | None:
    return None if values is None else int_list(values)


@register_op("Slice", infer=_infer_slice, fusion=FusionKind.INJECTIVE,
             attrs={"starts": None, "ends": None, "axes": None, "steps": None},
             shape_operands=(1, 2, 3, 4))
def slice_(x, starts_input=None, ends_input=None, axes_input=None, steps_input=None, *,
           starts, ends, axes, steps):
    """ONNX Slice with negative steps and clamping; opset-1 attributes are accepted too."""
    index, _ = _slice_plan(
        runtime_error("Slice"), x.shape,
        _optional_ints(_first_given(starts, starts_input)),
        _optional_ints(_first_given(ends, ends_input)),
        _optional_ints(_first_given(axes, axes_input)),
        _optional_ints(_first_given(steps, steps_input)))
    return x[index]


# --- Squeeze, Unsqueeze, Expand, Tile -----------------------------------------------------------


def _squeeze_shape(error: ErrorFactory, shape: tuple[int, ...],
                   axes: list[int] | None) -> tuple[int, ...]:
    rank = len(shape)
    if axes is None:
        return tuple(d for d in shape if d != 1)
    axes = checked_axes(error, axes, rank)
    for a in axes:
        if shape[a] != 1:
            raise error(f"cannot squeeze axis {a} of size {shape[a]} (shape {shape})")
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _infer_squeeze(ctx: InferContext):
    x = ctx.type(0)
    return [TensorType(_squeeze_shape(ctx.error, x.shape, operand_or_attr(ctx, 1, "axes")),
                       x.dtype)]


@register_op("Squeeze", infer=_infer_squeeze, fusion=FusionKind.INJECTIVE,
             attrs={"axes": None}, shape_operands=(1,))
def squeeze(x, axes_input=None, *, axes):
    """ONNX Squeeze (every size-1 axis when no axes are given)."""
    axes = _optional_ints(_first_given(axes, axes_input))
    return x.reshape(_squeeze_shape(runtime_error("Squeeze"), x.shape, axes))


def _unsqueeze_shape(error: ErrorFactory, shape: tuple[int, ...],
                     axes: list[int]) -> tuple[int, ...]:
    rank = len(shape) + len(axes)
    inserted = set(checked_axes(error, axes, rank, f"axes (of the rank-{rank} output)"))
    rest = iter(shape)
    return tuple(1 if i in inserted else next(rest) for i in range(rank))


def _infer_unsqueeze(ctx: InferContext):
    x = ctx.type(0)
    axes = operand_or_attr(ctx, 1, "axes")
    if axes is None:
        raise ctx.error("needs axes (input 1, or the attribute before opset 13)")
    return [TensorType(_unsqueeze_shape(ctx.error, x.shape, axes), x.dtype)]


@register_op("Unsqueeze", infer=_infer_unsqueeze, fusion=FusionKind.INJECTIVE,
             attrs={"axes": None}, shape_operands=(1,))
def unsqueeze(x, axes_input=None, *, axes):
    """ONNX Unsqueeze: insert size-1 axes at the given output positions."""
    axes = _optional_ints(_first_given(axes, axes_input))
    return x.reshape(_unsqueeze_shape(runtime_error("Unsqueeze"), x.shape, axes))


def _infer_expand(ctx: InferContext):
    x = ctx.type(0)
    shape = broadcast_shapes(ctx, [x.shape, tuple(int_list(ctx.value(1)))])
    return [TensorType(shape, x.dtype)]


@register_op("Expand", infer=_infer_expand, fusion=FusionKind.INJECTIVE, shape_operands=(1,))
def expand(x, shape):
    """ONNX Expand: bidirectional broadcast of ``x`` with ``shape``."""
    try:
        out_shape = np.broadcast_shapes(x.shape, tuple(int_list(shape)))
    except ValueError:
        raise InputError(f"Expand: input shape {x.shape} does not broadcast with "
                         f"{int_list(shape)}") from None
    return np.broadcast_to(x, out_shape).copy()


def _tile_repeats(error: ErrorFactory, rank: int, repeats) -> list[int]:
    repeats = int_list(repeats)
    if len(repeats) != rank or any(r < 0 for r in repeats):
        raise error(f"repeats {repeats} must be {rank} non-negative counts (one per axis)")
    return repeats


def _infer_tile(ctx: InferContext):
    x = ctx.type(0)
    repeats = _tile_repeats(ctx.error, x.ndim, ctx.value(1))
    return [TensorType(tuple(d * r for d, r in zip(x.shape, repeats)), x.dtype)]


@register_op("Tile", infer=_infer_tile, fusion=FusionKind.INJECTIVE, shape_operands=(1,))
def tile(x, repeats):
    """ONNX Tile: repeat ``x`` ``repeats[i]`` times along axis i."""
    return np.tile(x, _tile_repeats(runtime_error("Tile"), x.ndim, repeats))


# --- Pad, CenterCropPad --------------------------------------------------------------------

_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


def _full_pads(error: ErrorFactory, rank: int, pads: list[int],
               axes: list[int] | None) -> list[tuple[int, int]]:
    """(before, after) for every axis, from ONNX pads over ``axes`` (all axes if None)."""
    axes = list(range(rank)) if axes is None else checked_axes(error, axes, rank)
    if len(pads) != 2 * len(axes):
        raise error(f"pads {pads} must have 2 x {len(axes)} entries (begins, then ends)")
    out = [(0, 0)] * rank
    for k, axis in enumerate(axes):
        out[axis] = (pads[k], pads[k + len(axes)])
    return out


def _padded_shape(error: ErrorFactory, shape: tuple[int, ...], widths, mode: str):
    if mode not in _PAD_MODES:
        raise error(f"mode {mode!r} is not one of {', '.join(_PAD_MODES)}")
    out = []
    for axis, (dim, (before, after)) in enumerate(zip(shape, widths)):
        kept = dim + min(before, 0) + min(after, 0)
        if kept < 0:
            raise error(f"pads ({before}, {after}) crop more than the {dim} entries of "
                        f"axis {axis}")
        grows = max(before, after) > 0
        if mode != "constant" and grows and kept == 0:
            raise error(f"mode {mode!r} cannot pad axis {axis}, which is empty")
        if mode == "reflect" and max(before, after) >= kept:
            raise error(f"reflect pads ({before}, {after}) on axis {axis} must be smaller "
                        f"than its {kept} entries")
        out.append(dim + before + after)
    return tuple(out)


def _pad_widths(ctx: InferContext) -> list[tuple[int, int]]:
    rank = ctx.type(0).ndim
    pads = _first_given(ctx.attrs["pads"], ctx.attrs["paddings"])
    if pads is None:
        pads = ctx.value(1)
    axes = int_list(ctx.value(3)) if ctx.has(3) else None
    return _full_pads(ctx.error, rank, int_list(pads), axes)


def _infer_pad(ctx: InferContext):
    x = ctx.type(0)
    shape = _padded_shape(ctx.error, x.shape, _pad_widths(ctx), ctx.attrs["mode"])
    return [TensorType(shape, x.dtype)]


def pad_array(x: np.ndarray, widths: Sequence[tuple[int, int]], mode: str = "constant",
              value=0) -> np.ndarray:
    """Pad ``x`` by (before, after) per axis; negative widths crop first."""
    crop = tuple(slice(max(-b, 0), x.shape[i] - max(-a, 0)) for i, (b, a) in enumerate(widths))
    x = x[crop]
    grow = [(max(b, 0), max(a, 0)) for b, a in widths]
    if mode == "constant":
        return np.pad(x, grow, mode="constant", constant_values=np.asarray(value, x.dtype))
    return np.pad(x, grow, mode=_PAD_MODES[mode])


@register_op("Pad", infer=_infer_pad, fusion=FusionKind.INJECTIVE,
             attrs={"mode": "constant", "pads": None, "paddings": None, "value": 0.0},
             shape_operands=(1, 3))
def pad(x, pads_input=None, constant_value=None, axes_input=None, *, mode, pads, paddings,
        value):
    """ONNX Pad (constant, reflect, edge, wrap; negative pads crop), opset 1/2 forms too."""
    error = runtime_error("Pad")
    given = _first_given(pads, paddings, pads_input)
    if given is None:
        raise error("needs pads (input 1)")
    widths = _full_pads(error, x.ndim, int_list(given), _optional_ints(axes_input))
    _padded_shape(error, x.shape, widths, mode)
    if constant_value is not None and np.size(constant_value):
        value = np.asarray(constant_value).reshape(-1)[0]
    return pad_array(x, widths, mode, value)


def crop_pad_widths(error: ErrorFactory, shape: tuple[int, ...], target: list[int],
                     axes: list[int] | None) -> list[tuple[int, int]]:
    """CenterCropPad's (before, after) widths per axis: positive pads, negative crops."""
    rank = len(shape)
    axes = list(range(rank)) if axes is None else checked_axes(error, axes, rank)
    if len(target) != len(axes):
        raise error(f"shape {target} must have one entry per axis {axes}")
    widths = [(0, 0)] * rank
    for size, axis in zip(target, axes):
        if size < 0:
            raise error(f"target size {size} on axis {axis} is negative")
        dim = shape[axis]
        # Cropping keeps the window's start rounded down; padding puts the odd pixel last.
        before = -((dim - size) // 2) if size < dim else (size - dim) // 2
        widths[axis] = (before, size - dim - before)
    return widths


def _infer_center_crop_pad(ctx: InferContext):
    x = ctx.type(0)
    widths = crop_pad_widths(ctx.error, x.shape, int_list(ctx.value(1)), ctx.attrs["axes"])
    return [TensorType(tuple(d + b + a for d, (b, a) in zip(x.shape, widths)), x.dtype)]


@register_op("CenterCropPad", infer=_infer_center_crop_pad, fusion=FusionKind.INJECTIVE,
             attrs={"axes": None}, shape_operands=(1,))
def center_crop_pad(x, shape, *, axes):
    """ONNX CenterCropPad: centered crop or zero pad of the given axes to ``shape``."""
    widths = crop_pad_widths(runtime_error("CenterCropPad"), x.shape, int_list(shape),
                              _optional_ints(axes))
    return pad_array(x, widths)


# --- Shape, Size, ConstantOfShape, Range, EyeLike ---------------------------------------------


def _infer_shape(ctx: InferContext):
    x = ctx.type(0)
    return [TensorType((len(x.shape[ctx.attrs["start"]:ctx.attrs["end"]]),), "int64")]


@register_op("Shape", infer=_infer_shape, fusion=FusionKind.INJECTIVE,
             attrs={"start": 0, "end": None})
def shape(x, *, start, end):
    """ONNX Shape: the (sliced, clamped) shape of ``x`` as int64."""
    return np.array(x.shape[start:end], dtype=np.int64)


@register_op("Size", infer=lambda ctx: [TensorType((), "int64")], fusion=FusionKind.INJECTIVE)
def size(x):
    """ONNX Size: the element count of ``x`` as an int64 scalar."""
    return np.array(x.size, dtype=np.int64)


def _fill_value(value) -> np.ndarray:
    if value is None:
        return np.zeros((), np.float32)
    value = np.asarray(value)
    if value.size != 1:
        raise InputError(f"ConstantOfShape: value must hold one element, got shape {value.shape}")
    return value.reshape(())


def _constant_shape(error: ErrorFactory, shape) -> tuple[int, ...]:
    dims = int_list(shape)
    if np.ndim(shape) != 1 or any(d < 0 for d in dims):
        raise error(f"shape {dims} must be a 1-D tensor of non-negative dims")
    return tuple(dims)


def _infer_constant_of_shape(ctx: InferContext):
    dtype = _fill_value(ctx.attrs["value"]).dtype
    return [TensorType(_constant_shape(ctx.error, ctx.value(0)), dtype.name)]


@register_op("ConstantOfShape", infer=_infer_constant_of_shape, fusion=FusionKind.INJECTIVE,
             attrs={"value": None}, shape_operands=(0,))
def constant_of_shape(shape, *, value):
    """ONNX ConstantOfShape: a tensor of ``shape`` filled with ``value`` (float32 0 default)."""
    fill = _fill_value(value)
    return np.full(_constant_shape(runtime_error("ConstantOfShape"), shape), fill, fill.dtype)


def _range_length(error: ErrorFactory, start, limit, delta) -> int:
    start, limit, delta = (np.asarray(v).reshape(-1)[0] for v in (start, limit, delta))
    if delta == 0:
        raise error("delta must not be 0")
    if np.issubdtype(np.asarray(start).dtype, np.integer):
        start, limit, delta = int(start), int(limit), int(delta)
        return max(-((start - limit) // delta), 0)
    return max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)


def _infer_range(ctx: InferContext):
    types = [ctx.type(i) for i in range(3)]
    if any(t.size != 1 for t in types) or len({t.dtype for t in types}) != 1:
        raise ctx.error(f"start, limit and delta must be scalars of one dtype, got "
                        f"{', '.join(map(str, types))}")
    if types[0].dtype == "float16" and dtype_from_onnx(ctx.attrs["stash_type"]) not in \
            ("float16", "float32", "float64"):
        raise ctx.error(f"stash_type {ctx.attrs['stash_type']} must name a float type")
    values = [ctx.value(i) for i in range(3)]
    return [TensorType((_range_length(ctx.error, *values),), types[0].dtype)]


@register_op("Range", infer=_infer_range, fusion=FusionKind.INJECTIVE,
             attrs={"stash_type": 1}, shape_operands=(0, 1, 2))
def range_(start, limit, delta, *, stash_type):
    """ONNX Range: start + i * delta for i in [0, ceil((limit - start) / delta))."""
    count = _range_length(runtime_error("Range"), start, limit, delta)
    dtype = np.asarray(start).dtype
    compute = np.dtype(dtype_from_onnx(stash_type)) if dtype == np.float16 else dtype
    first, step = (np.asarray(v).reshape(-1)[0].astype(compute) for v in (start, delta))
    return (first + np.arange(count, dtype=compute) * step).astype(dtype)


def _eye_like_dtype(onnx_dtype: int | None, input_dtype: str) -> str:
    return input_dtype if onnx_dtype is None else dtype_from_onnx(onnx_dtype)


def _infer_eye_like(ctx: InferContext):
    x = ctx.type(0)
    if x.ndim != 2:
        raise ctx.error(f"input must be 2-D, got {x}")
    return [TensorType(x.shape, _eye_like_dtype(ctx.attrs["dtype"], x.dtype))]


@register_op("EyeLike", infer=_infer_eye_like, fusion=FusionKind.INJECTIVE,
             attrs={"dtype": None, "k": 0})
def eye_like(x, *, dtype, k):
    """ONNX EyeLike: ones on diagonal ``k`` of a matrix shaped like ``x``."""
    return np.eye(x.shape[0], x.shape[1], k, dtype=_eye_like_dtype(dtype, x.dtype.name))


# --- DepthToSpace, SpaceToDepth ----------------------------------------------------------------


def _check_block_mode(error: ErrorFactory, shape, blocksize: int, mode: str) -> None:
    if len(shape) != 4:
        raise error(f"input must be 4-D (N, C, H, W), got shape {shape}")
    if blocksize < 1:
        raise error(f"blocksize {blocksize} must be positive")
    if mode not in ("DCR", "CRD"):
        raise error(f"mode {mode!r} must be 'DCR' or 'CRD'")


def _depth_to_space_shape(error: ErrorFactory, shape, blocksize: int, mode: str):
    _check_block_mode(error, shape, blocksize, mode)
    n, c, h, w = shape
    if c % (blocksize * blocksize):
        raise error(f"{c} channels are not divisible by blocksize^2 = {blocksize ** 2}")
    return (n, c // blocksize ** 2, h * blocksize, w * blocksize)


def _space_to_depth_shape(error: ErrorFactory, shape, blocksize: int, mode: str):
    _check_block_mode(error, shape, blocksize, mode)
    n, c, h, w = shape
    if h % blocksize or w % blocksize:
        raise error(f"spatial dims {h}x{w} are not divisible by blocksize {blocksize}")
    return (n, c * blocksize ** 2, h // blocksize, w // blocksize)


def _block_infer(shape_fn):
    def infer(ctx: InferContext):
        x = ctx.type(0)
        return [TensorType(shape_fn(ctx.error, x.shape, ctx.attrs["blocksize"],
                                    ctx.attrs["mode"]), x.dtype)]

    return infer


@register_op("DepthToSpace", infer=_block_infer(_depth_to_space_shape),
             fusion=FusionKind.INJECTIVE, attrs={"blocksize": REQUIRED, "mode": "DCR"})
def depth_to_space(x, *, blocksize, mode):
    """ONNX DepthToSpace: channel blocks to spatial blocks (DCR: depth-column-row order)."""
    out = _depth_to_space_shape(runtime_error("DepthToSpace"), x.shape, blocksize, mode)
    n, c, h, w = x.shape
    b = blocksize
    if mode == "DCR":
        blocks = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        blocks = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return blocks.reshape(out)


@register_op("SpaceToDepth", infer=_block_infer(_space_to_depth_shape),
             fusion=FusionKind.INJECTIVE, attrs={"blocksize": REQUIRED, "mode": "DCR"})
def space_to_depth(x, *, blocksize, mode):
    """ONNX SpaceToDepth: the inverse of DepthToSpace in the same mode."""
    out = _space_to_depth_shape(runtime_error("SpaceToDepth"), x.shape, blocksize, mode)
    n, c, h, w = x.shape
    b = blocksize
    blocks = x.reshape(n, c, h // b, b, w // b, b)
    order = (0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4)
    return blocks.transpose(order).reshape(out)


# --- BitCast ----------------------------------------------------------------------------------

#: storage formats narrower than a byte (ml_dtypes keeps one value in the low bits of a byte)
_SUB_BYTE_BITS = {"int4": 4, "uint4": 4, "float4_e2m1fn": 4, "int2": 2, "uint2": 2}


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
