"""Shape manipulation and data movement."""

from __future__ import annotations

import numpy as np

from .. import te
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
