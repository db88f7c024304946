"""Shared building blocks for op definitions: type-inference helpers."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import TypeInferenceError
from ..ir.types import TensorType, dtype_from_onnx
from .registry import InferContext


def broadcast_shapes(ctx: InferContext, shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    """NumPy broadcasting of ``shapes``, or a TypeInferenceError naming them."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ctx.error(f"shapes {', '.join(map(str, shapes))} do not broadcast") from None


def same_as(i: int = 0):
    """Infer: one output with the type of input ``i``."""

    def infer(ctx: InferContext):
        return [ctx.type(i)]

    return infer


def broadcast(dtype: str | None = None):
    """Infer: one output, the broadcast of every given input; dtype of input 0 unless fixed."""

    def infer(ctx: InferContext):
        given = [t for t in ctx.types if t is not None]
        shape = broadcast_shapes(ctx, [t.shape for t in given])
        return [TensorType(shape, dtype or given[0].dtype)]

    return infer


def normalize_axis(ctx: InferContext, axis: int, ndim: int) -> int:
    """``axis`` in [0, ndim), accepting negatives; an error if out of range."""
    if not -ndim <= axis < max(ndim, 1):
        raise ctx.error(f"axis {axis} is out of range for rank {ndim}")
    return axis % max(ndim, 1)


def normalize_axes(ctx: InferContext, axes: Sequence[int], ndim: int) -> list[int]:
    out = [normalize_axis(ctx, int(a), ndim) for a in axes]
    if len(set(out)) != len(out):
        raise ctx.error(f"repeated axis in {list(axes)}")
    return out


def broadcasts_to(shape: Sequence[int], target: Sequence[int]) -> bool:
    """Whether ``shape`` broadcasts unidirectionally to ``target`` (target unchanged)."""
    if len(shape) > len(target):
        return False
    return all(dim in (1, full) for dim, full in zip(tuple(shape)[::-1], tuple(target)[::-1]))


def require_dtype(ctx: InferContext, name: str, dtype: str, allowed: Sequence[str]) -> None:
    """A TypeInferenceError unless tensor ``name``'s ``dtype`` is one of ``allowed``."""
    if dtype not in allowed:
        raise ctx.error(f"{name} has dtype {dtype}; supported: {', '.join(allowed)}")


def dtype_attribute(ctx: InferContext, name: str, allowed: Sequence[str]) -> str | None:
    """The IR dtype named by ONNX element-type attribute ``name`` (None when 0 / unset),
    or a TypeInferenceError naming the attribute when it is not one of ``allowed``."""
    code = ctx.attrs.get(name)
    if not code:
        return None
    try:
        dtype = dtype_from_onnx(code)
    except TypeInferenceError:
        raise ctx.error(f"{name}={code} names a type the IR does not have; supported: "
                        f"{', '.join(allowed)}") from None
    require_dtype(ctx, name, dtype, allowed)
    return dtype


def typed_input(ctx: InferContext, index: int, name: str,
                allowed: Sequence[str]) -> TensorType:
    """The type of input ``index`` (``name`` in messages), or a TypeInferenceError when
    its dtype is not in ``allowed``."""
    tensor_type = ctx.type(index)
    require_dtype(ctx, f"{name} (input {index})", tensor_type.dtype, allowed)
    return tensor_type


def require_shape(ctx: InferContext, index: int, name: str, expected: Sequence[int]) -> None:
    """A TypeInferenceError unless input ``index`` (``name`` in messages) has shape
    ``expected``."""
    if ctx.type(index).shape != tuple(expected):
        raise ctx.error(f"{name} (input {index}) has shape {ctx.type(index).shape}, "
                        f"expected {tuple(expected)}")
