"""Index-driven data movement: Gather, GatherElements, GatherND, OneHot, ReverseSequence,
and the scatters ScatterElements, Scatter, ScatterND and TensorScatter.

Indices are tensors read at run time. The NumPy reference raises InputError for an
index out of range; a compiled kernel cannot raise, so it wraps negative indices (as
ONNX says) and then clamps every index into its axis: an out-of-range index reads the
nearest edge element instead of failing, and no load ever leaves its buffer.

A compute cannot write where an index points, so each scatter output element searches
the updates for the ones aimed at it: with no reduction it takes the last such update (as
NumPy's assignment with repeated indices does) or keeps ``data``; with one it combines
``data`` with all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .. import te
from ..errors import CompileError
from ..tir import expr as tx
from .common import require_native
from .registry import register_compute
from .tensor import clamp_index, wrap_index


@register_compute("Gather")
def gather(inputs, attrs, out_types):
    data, indices = inputs[:2]
    axis = attrs["axis"] % data.ndim
    q = indices.ndim

    def body(*index):
        picked = wrap_index(indices[index[axis:axis + q]], data.shape[axis])
        return data[index[:axis] + (picked,) + index[axis + q:]]

    return [te.compute(out_types[0].shape, body, name="gather", dtype=data.dtype)]


@register_compute("GatherElements")
def gather_elements(inputs, attrs, out_types):
    data, indices = inputs[:2]
    axis = attrs["axis"] % data.ndim

    def body(*index):
        picked = wrap_index(indices[index], data.shape[axis])
        return data[index[:axis] + (picked,) + index[axis + 1:]]

    return [te.compute(out_types[0].shape, body, name="gather_elements", dtype=data.dtype)]


@register_compute("GatherND")
def gather_nd(inputs, attrs, out_types):
    data, indices = inputs[:2]
    batch_dims = attrs["batch_dims"]
    depth = indices.shape[-1]
    prefix = indices.ndim - 1  # output axes that walk the index tuples

    def body(*index):
        # the leading batch axes of data and indices coincide, so index[:batch_dims]
        # addresses both
        picked = tuple(wrap_index(indices[index[:prefix] + (k,)], data.shape[batch_dims + k])
                       for k in range(depth))
        return data[index[:batch_dims] + picked + index[prefix:]]

    return [te.compute(out_types[0].shape, body, name="gather_nd", dtype=data.dtype)]


@register_compute("OneHot")
def one_hot(inputs, attrs, out_types):
    indices, _, values = inputs[:3]
    out = out_types[0]
    require_native([indices.dtype, out.dtype], "OneHot")
    axis = attrs["axis"] % out.ndim
    depth = out.shape[axis]

    def body(*index):
        # a cast to an integer truncates fractional indices, as the reference does
        position = te.cast("int64", indices[index[:axis] + index[axis + 1:]])
        position = te.if_then_else(position < 0, position + depth, position)
        return te.if_then_else(te.equal(position, index[axis]), values[1], values[0])

    return [te.compute(out.shape, body, name="one_hot", dtype=out.dtype)]


@register_compute("ReverseSequence")
def reverse_sequence(inputs, attrs, out_types):
    """Time step ``t < len[b]`` of batch ``b`` reads step ``len[b] - 1 - t``; later steps
    stay in place."""
    x, lengths = inputs[:2]
    batch_axis, time_axis = attrs["batch_axis"], attrs["time_axis"]
    steps = x.shape[time_axis]

    def body(*index):
        t = te.cast("int64", index[time_axis])
        length = te.cast("int64", lengths[index[batch_axis]])
        source = clamp_index(te.if_then_else(t < length, length - 1 - t, t), steps)
        return x[tuple(source if d == time_axis else i for d, i in enumerate(index))]

    return [te.compute(out_types[0].shape, body, name="reverse_sequence", dtype=x.dtype)]


# -------------------------------- scatters: ScatterElements, Scatter, ScatterND, TensorScatter

#: most updates a multiplying scatter unrolls (there is no product reduction)
MAX_UNROLLED_PRODUCT = 64


@dataclass(frozen=True)
class UpdateSearch:
    """Where the updates aimed at output element ``index`` are: ``extents`` of the
    positions searched, ``hits(index, position)`` whether the update at ``position`` is
    aimed there, ``value(index, position)`` that update."""

    extents: tuple[int, ...]
    hits: Callable[[tuple, tuple], tx.Expr]
    value: Callable[[tuple, tuple], tx.Expr]


def _flat(position: Sequence, extents: Sequence[int]) -> tx.Expr:
    flat = te.const(0, "int64")
    for p, extent in zip(position, extents):
        flat = flat * extent + te.cast("int64", p)
    return flat


def _unflat(flat, extents: Sequence[int]) -> tuple:
    index = []
    for extent in reversed(extents):
        index.append(flat % extent)
        flat = flat // extent
    return tuple(reversed(index))


def _lowest(dtype: str, largest: bool):
    """The identity of a max (``largest``) or min over ``dtype``."""
    if tx.is_float(dtype):
        return te.const(-np.inf if largest else np.inf, dtype)
    info = np.iinfo(dtype) if dtype != "bool" else None
    if info is None:
        return te.const(not largest, dtype)
    return te.const(int(info.min if largest else info.max), dtype)


def scatter_by_search(data: te.Tensor, search: UpdateSearch, reduction: str,
                      name: str) -> te.Tensor:
    """``data`` with the updates ``search`` finds written (``reduction`` "none") or
    combined in ("add", "mul", "max", "min")."""
    require_native([data.dtype], name)
    shape = data.shape
    if 0 in search.extents:
        return te.compute(shape, lambda *i: data[i], name=name, dtype=data.dtype)

    def positions():
        axes = [te.reduce_axis(e, f"u{k}") for k, e in enumerate(search.extents)]
        return axes, tuple(a.var for a in axes)

    if reduction == "none":
        def last_body(*index):
            axes, position = positions()
            return te.max(te.if_then_else(search.hits(index, position),
                                          _flat(position, search.extents),
                                          te.const(-1, "int64")), axis=axes)

        last = te.compute(shape, last_body, name=name + "_last", dtype="int64")
        return te.compute(shape, lambda *i: te.if_then_else(
            last[i] >= 0, search.value(i, _unflat(last[i], search.extents)), data[i]),
            name=name, dtype=data.dtype)
    if reduction == "mul":
        count = int(np.prod(search.extents))
        if count > MAX_UNROLLED_PRODUCT:
            raise CompileError(f"{name} with reduction 'mul' over {count} updates has no TE "
                               f"compute (at most {MAX_UNROLLED_PRODUCT})")

        def product_body(*index):
            value = data[index]
            for position in np.ndindex(*search.extents):
                at = tuple(te.const(p, "int64") for p in position)
                value = te.if_then_else(search.hits(index, at),
                                        value * search.value(index, at), value)
            return value

        return te.compute(shape, product_body, name=name, dtype=data.dtype)
    if reduction == "add":
        zero = te.const(0, data.dtype)

        def sum_body(*index):
            axes, position = positions()
            return te.sum(te.if_then_else(search.hits(index, position),
                                          search.value(index, position), zero), axis=axes)

        total = te.compute(shape, sum_body, name=name + "_sum", dtype=data.dtype)
        return te.compute(shape, lambda *i: data[i] + total[i], name=name, dtype=data.dtype)
    if reduction not in ("max", "min"):
        raise CompileError(f"{name} reduction {reduction!r} has no TE compute")
    largest = reduction == "max"
    combine, pick = (te.max, te.maximum) if largest else (te.min, te.minimum)
    fill = _lowest(data.dtype, largest)

    def extreme_body(*index):
        axes, position = positions()
        return combine(te.if_then_else(search.hits(index, position),
                                       search.value(index, position), fill), axis=axes)

    def count_body(*index):
        axes, position = positions()
        return te.sum(te.cast("int64", search.hits(index, position)), axis=axes)

    peak = te.compute(shape, extreme_body, name=name + "_peak", dtype=data.dtype)
    count = te.compute(shape, count_body, name=name + "_count", dtype="int64")
    return te.compute(shape, lambda *i: te.if_then_else(
        count[i] > 0, pick(data[i], peak[i]), data[i]), name=name, dtype=data.dtype)


def _scatter_elements(inputs, axis: int, reduction: str, name: str):
    data, indices, updates = inputs[:3]
    axis %= data.ndim
    extent = indices.shape[axis]

    def along(index, position):
        return tuple(position[0] if d == axis else i for d, i in enumerate(index))

    def hits(index, position):
        inside = te.const(True, "bool")
        for d, (i, size) in enumerate(zip(index, indices.shape)):
            if d != axis and size < data.shape[d]:
                inside = te.logical_and(inside, i < size)
        # the index is loaded only where the update exists
        target = te.if_then_else(inside, wrap_index(indices[along(index, position)],
                                                    data.shape[axis]), te.const(-1, "int64"))
        return te.equal(target, te.cast("int64", index[axis]))

    search = UpdateSearch((extent,), hits, lambda i, p: updates[along(i, p)])
    return [scatter_by_search(data, search, reduction, name)]


@register_compute("ScatterElements")
def scatter_elements(inputs, attrs, out_types):
    return _scatter_elements(inputs, attrs["axis"], attrs["reduction"], "scatter_elements")


@register_compute("Scatter")
def scatter(inputs, attrs, out_types):
    return _scatter_elements(inputs, attrs["axis"], "none", "scatter")


@register_compute("ScatterND")
def scatter_nd(inputs, attrs, out_types):
    """Update tuple ``p`` (the leading axes of ``indices``) addresses the slice
    ``data[indices[p]]``; an output element is hit when its leading ``depth`` indices
    equal that tuple."""
    data, indices, updates = inputs[:3]
    depth = indices.shape[-1]
    extents = tuple(indices.shape[:-1])

    def hits(index, position):
        matched = te.const(True, "bool")
        for k in range(depth):
            target = wrap_index(indices[(*position, k)], data.shape[k])
            matched = te.logical_and(matched, te.equal(target, te.cast("int64", index[k])))
        return matched

    search = UpdateSearch(extents, hits, lambda i, p: updates[(*p, *i[depth:])])
    return [scatter_by_search(data, search, attrs["reduction"], "scatter_nd")]


@register_compute("TensorScatter")
def tensor_scatter(inputs, attrs, out_types):
    """Cache position ``s`` of batch ``b`` takes update step ``s - start[b]`` (modulo the
    capacity when circular) when that step exists, else keeps the cache."""
    cache, update = inputs[:2]
    starts = inputs[2] if len(inputs) > 2 else None
    require_native([cache.dtype], "TensorScatter")
    axis = attrs["axis"] % cache.ndim
    capacity, length = cache.shape[axis], update.shape[axis]
    circular = attrs["mode"] == "circular"

    def body(*index):
        start = te.const(0, "int64") if starts is None else te.cast("int64", starts[index[0]])
        step = te.cast("int64", index[axis]) - start
        if circular:
            step = step % capacity
            step = te.if_then_else(step < 0, step + capacity, step)
        written = te.logical_and(step >= 0, step < length)
        source = tuple(step if d == axis else i for d, i in enumerate(index))
        return te.if_then_else(written, update[source], cache[index])

    if length == 0:
        return [te.compute(cache.shape, lambda *i: cache[i], name="tensor_scatter",
                           dtype=cache.dtype)]
    return [te.compute(cache.shape, body, name="tensor_scatter", dtype=cache.dtype)]
