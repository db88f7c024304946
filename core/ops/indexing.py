"""Index-driven data movement: Gather*, Scatter*, OneHot, ReverseSequence, and
TensorScatter (a KV-cache update at per-batch write indices).

Indices may be negative (counting from the end); an index out of range is an
error naming the op and the index, checked at type inference when the indices
are constant and always at run time.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..ir.types import INT_DTYPES, TensorType
from .common import normalize_axis, require_shape, typed_input
from .registry import FusionKind, InferContext, register_op
from .tensor import ErrorFactory, runtime_error

#: NumPy ufuncs applying a Scatter* ``reduction`` at repeated indices.
_SCATTER_REDUCTIONS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def normalize_indices(error: ErrorFactory, indices: np.ndarray, dim: int,
                      what: str) -> np.ndarray:
    """``indices`` into an axis of size ``dim`` as non-negative int64; an error if out of range."""
    indices = np.asarray(indices).astype(np.int64, copy=False)
    bad = (indices < -dim) | (indices >= dim)
    if bad.any():
        first = int(indices[bad].reshape(-1)[0])
        raise error(f"{what} index {first} is out of range [-{dim}, {dim - 1}]")
    return np.where(indices < 0, indices + dim, indices)


def _check_index_dtype(ctx: InferContext, i: int) -> TensorType:
    t = ctx.type(i)
    if t.dtype not in ("int32", "int64"):
        raise ctx.error(f"indices must be int32 or int64, got {t.dtype}")
    return t


def _constant(ctx: InferContext, i: int) -> np.ndarray | None:
    return ctx.values[i] if ctx.has(i) else None


# --- Gather -------------------------------------------------------------------------------


def _infer_gather(ctx: InferContext):
    data, indices = ctx.type(0), _check_index_dtype(ctx, 1)
    if data.ndim == 0:
        raise ctx.error("data must have rank >= 1")
    axis = normalize_axis(ctx, ctx.attrs["axis"], data.ndim)
    if _constant(ctx, 1) is not None:
        normalize_indices(ctx.error, ctx.values[1], data.shape[axis], f"axis-{axis}")
    shape = data.shape[:axis] + indices.shape + data.shape[axis + 1:]
    return [TensorType(shape, data.dtype)]


@register_op("Gather", infer=_infer_gather, fusion=FusionKind.INJECTIVE, attrs={"axis": 0})
def gather(data, indices, *, axis):
    """ONNX Gather: take entries of ``data`` along ``axis``."""
    axis %= data.ndim
    indices = normalize_indices(runtime_error("Gather"), indices, data.shape[axis],
                                f"axis-{axis}")
    return np.take(data, indices, axis=axis)


def _element_index(indices: np.ndarray, axis: int) -> tuple[np.ndarray, ...]:
    """An index tuple addressing, for every position of ``indices``, the element it names."""
    grid = list(np.ogrid[tuple(slice(0, d) for d in indices.shape)])
    grid[axis] = indices
    return tuple(grid)


def _check_elementwise_indices(ctx: InferContext, data: TensorType, indices: TensorType,
                               axis: int) -> None:
    if indices.ndim != data.ndim:
        raise ctx.error(f"indices {indices} must have the rank of data {data}")
    for i, (d, n) in enumerate(zip(data.shape, indices.shape)):
        if i != axis and n > d:
            raise ctx.error(f"indices {indices} exceed data {data} on axis {i}")
    if _constant(ctx, 1) is not None:
        normalize_indices(ctx.error, ctx.values[1], data.shape[axis], f"axis-{axis}")


def _infer_gather_elements(ctx: InferContext):
    data, indices = ctx.type(0), _check_index_dtype(ctx, 1)
    axis = normalize_axis(ctx, ctx.attrs["axis"], data.ndim)
    _check_elementwise_indices(ctx, data, indices, axis)
    return [TensorType(indices.shape, data.dtype)]


@register_op("GatherElements", infer=_infer_gather_elements, fusion=FusionKind.INJECTIVE,
             attrs={"axis": 0})
def gather_elements(data, indices, *, axis):
    """ONNX GatherElements: out[i][j][k] = data[i][indices[i][j][k]][k] (for axis 1)."""
    axis %= data.ndim
    indices = normalize_indices(runtime_error("GatherElements"), indices, data.shape[axis],
                                f"axis-{axis}")
    return data[_element_index(indices, axis)]


def _gather_nd_shape(error: ErrorFactory, data_shape, indices_shape, batch_dims: int):
    """Output shape of GatherND, checking its rank and batch constraints."""
    rank, q = len(data_shape), len(indices_shape)
    if q < 1 or not 0 <= batch_dims < min(rank, q):
        raise error(f"batch_dims {batch_dims} must be below the ranks of data ({rank}) and "
                    f"indices ({q})")
    if tuple(data_shape[:batch_dims]) != tuple(indices_shape[:batch_dims]):
        raise error(f"the first {batch_dims} dims of data {tuple(data_shape)} and indices "
                    f"{tuple(indices_shape)} must match")
    depth = indices_shape[-1]
    if not 1 <= depth <= rank - batch_dims:
        raise error(f"the last dim of indices ({depth}) must be in [1, {rank - batch_dims}]")
    return tuple(indices_shape[:-1]) + tuple(data_shape[batch_dims + depth:])


def _nd_index(error: ErrorFactory, data_shape, indices: np.ndarray, batch_dims: int):
    """Flattened batch number and per-axis index arrays of GatherND / ScatterND."""
    depth = indices.shape[-1]
    batches = int(np.prod(data_shape[:batch_dims], dtype=np.int64))
    per_batch = indices.reshape(batches, -1, depth)
    columns = [normalize_indices(error, per_batch[..., k], data_shape[batch_dims + k],
                                 f"axis-{batch_dims + k}") for k in range(depth)]
    batch = np.arange(batches)[:, None]
    return (batch, *columns)


def _infer_gather_nd(ctx: InferContext):
    data, indices = ctx.type(0), _check_index_dtype(ctx, 1)
    batch_dims = ctx.attrs["batch_dims"]
    shape = _gather_nd_shape(ctx.error, data.shape, indices.shape, batch_dims)
    if _constant(ctx, 1) is not None:
        _nd_index(ctx.error, data.shape, ctx.values[1], batch_dims)
    return [TensorType(shape, data.dtype)]


@register_op("GatherND", infer=_infer_gather_nd, fusion=FusionKind.INJECTIVE,
             attrs={"batch_dims": 0})
def gather_nd(data, indices, *, batch_dims):
    """ONNX GatherND: slices of ``data`` addressed by the last dim of ``indices``."""
    error = runtime_error("GatherND")
    shape = _gather_nd_shape(error, data.shape, indices.shape, batch_dims)
    batched = data.reshape((-1,) + data.shape[batch_dims:])
    return batched[_nd_index(error, data.shape, indices, batch_dims)].reshape(shape)


# --- Scatter ------------------------------------------------------------------------------


def _check_reduction(error: ErrorFactory, reduction: str) -> None:
    if reduction != "none" and reduction not in _SCATTER_REDUCTIONS:
        raise error(f"reduction {reduction!r} must be one of none, "
                    f"{', '.join(_SCATTER_REDUCTIONS)}")


def _scatter_into(op: str, out: np.ndarray, index, updates: np.ndarray,
                  reduction: str) -> np.ndarray:
    _check_reduction(runtime_error(op), reduction)
    if reduction == "none":
        out[index] = updates
    else:
        _SCATTER_REDUCTIONS[reduction].at(out, index, updates)
    return out


def _infer_scatter_elements(ctx: InferContext):
    data, indices = ctx.type(0), _check_index_dtype(ctx, 1)
    updates = ctx.type(2)
    _check_reduction(ctx.error, ctx.attrs.get("reduction", "none"))
    axis = normalize_axis(ctx, ctx.attrs["axis"], data.ndim)
    if updates.shape != indices.shape or updates.dtype != data.dtype:
        raise ctx.error(f"updates {updates} must have the shape of indices {indices} and the "
                        f"dtype of data {data}")
    _check_elementwise_indices(ctx, data, indices, axis)
    return [data]


def _scatter_elements(op: str, data, indices, updates, axis: int, reduction: str):
    axis %= data.ndim
    indices = normalize_indices(runtime_error(op), indices, data.shape[axis], f"axis-{axis}")
    return _scatter_into(op, data.copy(), _element_index(indices, axis), updates, reduction)


@register_op("ScatterElements", infer=_infer_scatter_elements, fusion=FusionKind.OPAQUE,
             attrs={"axis": 0, "reduction": "none"})
def scatter_elements(data, indices, updates, *, axis, reduction):
    """ONNX ScatterElements: a copy of ``data`` with ``updates`` written (or reduced) in."""
    return _scatter_elements("ScatterElements", data, indices, updates, axis, reduction)


@register_op("Scatter", infer=_infer_scatter_elements, fusion=FusionKind.OPAQUE,
             attrs={"axis": 0})
def scatter(data, indices, updates, *, axis):
    """ONNX Scatter (deprecated since opset 11): ScatterElements without reduction."""
    return _scatter_elements("Scatter", data, indices, updates, axis, "none")


def _infer_scatter_nd(ctx: InferContext):
    data, indices = ctx.type(0), _check_index_dtype(ctx, 1)
    updates = ctx.type(2)
    _check_reduction(ctx.error, ctx.attrs.get("reduction", "none"))
    depth = indices.shape[-1] if indices.ndim else 0
    if not 1 <= depth <= data.ndim:
        raise ctx.error(f"the last dim of indices {indices} must be in [1, {data.ndim}]")
    expected = indices.shape[:-1] + data.shape[depth:]
    if updates.shape != expected or updates.dtype != data.dtype:
        raise ctx.error(f"updates {updates} must be {data.dtype}{list(expected)}")
    if _constant(ctx, 1) is not None:
        _nd_index(ctx.error, (1,) + data.shape, ctx.values[1][None], 1)
    return [data]


@register_op("ScatterND", infer=_infer_scatter_nd, fusion=FusionKind.OPAQUE,
             attrs={"reduction": "none"})
def scatter_nd(data, indices, updates, *, reduction):
    """ONNX ScatterND: write (or reduce) ``updates`` at the slices ``indices`` address."""
    # One leading batch of size 1 lets GatherND's index builder serve here too.
    index = _nd_index(runtime_error("ScatterND"), (1,) + data.shape, indices[None], 1)
    depth = indices.shape[-1]
    out = data.copy()[None]
    flat_updates = updates.reshape((1, -1) + data.shape[depth:])
    return _scatter_into("ScatterND", out, index, flat_updates, reduction)[0]


# --- OneHot, ReverseSequence ----------------------------------------------------------------


def _one_hot_depth(error: ErrorFactory, depth) -> int:
    depth = np.asarray(depth)
    if depth.size != 1:
        raise error(f"depth must be a scalar, got shape {depth.shape}")
    value = int(depth.reshape(-1)[0])
    if value < 1:
        raise error(f"depth {value} must be positive")
    return value


def _one_hot_axis(error: ErrorFactory, axis: int, rank: int) -> int:
    if not -rank - 1 <= axis <= rank:
        raise error(f"axis {axis} is out of range [{-rank - 1}, {rank}] for indices of "
                    f"rank {rank}")
    return axis + rank + 1 if axis < 0 else axis


def _infer_one_hot(ctx: InferContext):
    indices, values = ctx.type(0), ctx.type(2)
    if values.shape != (2,):
        raise ctx.error(f"values must be [off_value, on_value] (shape (2,)), got {values}")
    axis = _one_hot_axis(ctx.error, ctx.attrs["axis"], indices.ndim)
    depth = _one_hot_depth(ctx.error, ctx.value(1))
    return [TensorType(indices.shape[:axis] + (depth,) + indices.shape[axis:], values.dtype)]


@register_op("OneHot", infer=_infer_one_hot, fusion=FusionKind.OPAQUE, attrs={"axis": -1},
             shape_operands=(1,))
def one_hot(indices, depth, values, *, axis):
    """ONNX OneHot: indices in [-depth, depth) select on_value; others give all off_value."""
    error = runtime_error("OneHot")
    depth = _one_hot_depth(error, depth)
    axis = _one_hot_axis(error, axis, indices.ndim)
    # Fractional indices are truncated toward zero, as a cast to an integer would.
    positions = np.trunc(indices).astype(np.int64)
    positions = np.where(positions < 0, positions + depth, positions)
    classes = np.arange(depth).reshape((depth,) + (1,) * (indices.ndim - axis))
    hot = np.expand_dims(positions, axis) == classes
    return np.where(hot, values[1], values[0]).astype(values.dtype)


def _infer_reverse_sequence(ctx: InferContext):
    x, lens = ctx.type(0), ctx.type(1)
    if x.ndim < 2:
        raise ctx.error(f"input must have rank >= 2, got {x}")
    batch_axis, time_axis = ctx.attrs["batch_axis"], ctx.attrs["time_axis"]
    if {batch_axis, time_axis} != {0, 1}:
        raise ctx.error(f"batch_axis {batch_axis} and time_axis {time_axis} must be 0 and 1 "
                        "in some order")
    if lens.dtype not in INT_DTYPES or lens.shape != (x.shape[batch_axis],):
        raise ctx.error(f"sequence_lens {lens} must be integers of shape "
                        f"({x.shape[batch_axis]},)")
    if ctx.values[1] is not None:
        _check_sequence_lens(ctx.error, ctx.values[1], x.shape[time_axis])
    return [x]


def _check_sequence_lens(error: ErrorFactory, lens: np.ndarray, steps: int) -> None:
    bad = (lens < 0) | (lens > steps)
    if bad.any():
        raise error(f"sequence length {int(lens[bad][0])} is out of range [0, {steps}]")


@register_op("ReverseSequence", infer=_infer_reverse_sequence, fusion=FusionKind.OPAQUE,
             attrs={"batch_axis": 1, "time_axis": 0})
def reverse_sequence(x, sequence_lens, *, batch_axis, time_axis):
    """ONNX ReverseSequence: reverse the first sequence_lens[b] time steps of each batch b."""
    steps = x.shape[time_axis]
    _check_sequence_lens(runtime_error("ReverseSequence"), sequence_lens, steps)
    time = np.arange(steps)[:, None]
    lens = sequence_lens.astype(np.int64)[None, :]
    source = np.where(time < lens, lens - 1 - time, time)  # (time, batch)
    if batch_axis == 0:
        source = source.T
    source = source.reshape(source.shape + (1,) * (x.ndim - 2))
    return np.take_along_axis(x, source, axis=time_axis)


# --- TensorScatter (KV-cache update) ---------------------------------------------------------

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
