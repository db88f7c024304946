"""Reductions, arg-reductions, the softmax family, scans (CumSum, CumProd), TopK,
Einsum, Trilu, Det and the classification losses.

The softmax family follows opset >= 13 semantics (normalize along one axis). Older
opsets flattened the input to 2-D around ``axis`` (default 1); the op registry does
not see a model's opset, so models older than 13 must be converted first (the
frontend's version converter does that).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import InputError, TypeInferenceError
from ..ir.types import FLOAT_DTYPES, INT_DTYPES, TensorType
from .common import normalize_axes, normalize_axis
from .registry import REQUIRED, FusionKind, InferContext, register_op


@dataclass(frozen=True)
class ReferenceSite:
    """Stands in for an InferContext where a reference kernel validates a run-time value
    (a data-dependent axis), so the shared axis helpers report errors the same way."""

    op: str

    def error(self, message: str) -> TypeInferenceError:
        return TypeInferenceError(f"{self.op}: {message}")


#: float dtypes these ops compute with; bfloat16 has no NumPy kernels and widens to float32
COMPUTE_FLOAT_DTYPES = (*FLOAT_DTYPES, "bfloat16")
#: dtypes with arithmetic here (the IR's other narrow formats are storage and casts only)
ARITHMETIC_DTYPES = (*COMPUTE_FLOAT_DTYPES, *INT_DTYPES)
_HALF_FLOATS = ("float16", "bfloat16")


def accumulator_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype sums and products are accumulated in: 16-bit floats widen to float32
    (their rounding error would otherwise grow with the reduced size), integers to 64
    bits (wrapping back on the final cast matches fixed-width arithmetic)."""
    dtype = np.dtype(dtype)
    if dtype.name in _HALF_FLOATS:
        return np.dtype(np.float32)
    if dtype.kind == "i":
        return np.dtype(np.int64)
    if dtype.kind in "ub":
        return np.dtype(np.uint64)
    return dtype


def float_compute_dtype(dtype: np.dtype) -> np.dtype:
    """The float dtype transcendental math (exp, log, sqrt) runs in for ``dtype``."""
    dtype = np.dtype(dtype)
    if dtype in (np.float32, np.float64):
        return dtype
    return np.dtype(np.float32 if dtype.name in _HALF_FLOATS else np.float64)


def computable(x: np.ndarray) -> np.ndarray:
    """``x`` in a dtype NumPy computes with: bfloat16 widens (exactly) to float32."""
    return x.astype(np.float32) if x.dtype.name == "bfloat16" else x


def as_dtype(value, dtype: np.dtype) -> np.ndarray:
    """``value`` as an array of ``dtype``; NaN or infinite floats cast to an integer
    dtype are undefined in ONNX, so they are cast without warnings."""
    with np.errstate(invalid="ignore", over="ignore"):
        return np.asarray(value).astype(dtype, copy=False)


def reduced_shape(shape: tuple[int, ...], axes, keepdims: bool) -> tuple[int, ...]:
    """``shape`` after reducing ``axes`` (kept as 1 or dropped)."""
    axes = set(axes)
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def require_float(ctx: InferContext, index: int, role: str) -> TensorType:
    """The type of input ``index`` (called ``role`` in messages), which must be float."""
    t = ctx.type(index)
    if t.dtype not in COMPUTE_FLOAT_DTYPES:
        raise ctx.error(f"{role} (input {index}) must be a float tensor "
                        f"({', '.join(COMPUTE_FLOAT_DTYPES)}), got {t.dtype}")
    return t


def require_numeric(ctx: InferContext, index: int, role: str,
                    allow_bool: bool = False) -> TensorType:
    """The type of input ``index``, which must be a dtype with arithmetic (or bool)."""
    t = ctx.type(index)
    if t.dtype not in ARITHMETIC_DTYPES and not (allow_bool and t.dtype == "bool"):
        raise ctx.error(f"{role} (input {index}) must be numeric "
                        f"({', '.join(ARITHMETIC_DTYPES)}), got {t.dtype}; Cast it first")
    return t


# ---------------------------------------------------------------------------
# Reduce*
# ---------------------------------------------------------------------------

_REDUCE_ATTRS = {"keepdims": 1, "noop_with_empty_axes": 0, "axes": None}


def reduce_axes(site, ndim: int, axes_input, axes_attr, noop_with_empty_axes) -> tuple[int, ...]:
    """The axes a Reduce* node reduces, normalized and sorted.

    Axes come from the ``axes`` input (opset >= 13/18) or the ``axes`` attribute (older
    opsets). No axes means every axis, or none at all with ``noop_with_empty_axes``
    (each output element then reduces the single input element at its position, so
    ReduceSumSquare gives x*x and ReduceL1 gives |x|, as in ONNX's reference).
    """
    if axes_input is not None and axes_attr is not None:
        raise site.error("axes given both as input 1 and as attribute; give only one")
    raw = axes_input if axes_input is not None else axes_attr
    axes = [] if raw is None else [int(a) for a in np.asarray(raw).reshape(-1)]
    if not axes:
        return () if noop_with_empty_axes else tuple(range(ndim))
    if ndim == 0:
        if any(a not in (0, -1) for a in axes):
            raise site.error(f"axes {axes} are out of range for a rank-0 input")
        return ()
    return tuple(sorted(normalize_axes(site, axes, ndim)))


def _infer_reduce(ctx: InferContext):
    x = require_numeric(ctx, 0, "data", allow_bool=ctx.op in ("ReduceMax", "ReduceMin"))
    axes_input = ctx.value(1) if ctx.has(1) else None
    if axes_input is not None and ctx.type(1).dtype != "int64":
        raise ctx.error(f"axes (input 1) must be int64, got {ctx.type(1).dtype}")
    axes = reduce_axes(ctx, x.ndim, axes_input, ctx.attrs["axes"],
                       ctx.attrs["noop_with_empty_axes"])
    return [TensorType(reduced_shape(x.shape, axes, bool(ctx.attrs["keepdims"])), x.dtype)]


def _sum(x, axes, keepdims):
    return np.sum(x, axis=axes, keepdims=keepdims, dtype=accumulator_dtype(x.dtype))


def _mean(x, axes, keepdims):
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    total = np.sum(x, axis=axes, keepdims=keepdims, dtype=np.float64
                   if x.dtype.kind in "iub" else accumulator_dtype(x.dtype))
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / np.asarray(count, total.dtype)
    # integer means truncate toward zero, like an integer division
    return np.trunc(mean) if x.dtype.kind in "iu" else mean


def _extreme(x, axes, keepdims, largest: bool):
    if x.dtype == np.bool_:
        initial = not largest
    elif x.dtype.kind == "f":
        initial = -np.inf if largest else np.inf
    else:
        info = np.iinfo(x.dtype)
        initial = info.min if largest else info.max
    reduce = np.max if largest else np.min
    return reduce(x, axis=axes, keepdims=keepdims, initial=initial)


def _prod(x, axes, keepdims):
    return np.prod(x, axis=axes, keepdims=keepdims, dtype=accumulator_dtype(x.dtype))


def _l1(x, axes, keepdims):
    return _sum(np.abs(x), axes, keepdims)


def _sum_square(x, axes, keepdims):
    wide = x.astype(accumulator_dtype(x.dtype), copy=False)
    return np.sum(wide * wide, axis=axes, keepdims=keepdims)


def _l2(x, axes, keepdims):
    wide = x.astype(float_compute_dtype(x.dtype), copy=False)
    return np.sqrt(np.sum(wide * wide, axis=axes, keepdims=keepdims))


def _log_sum(x, axes, keepdims):
    wide = x.astype(float_compute_dtype(x.dtype), copy=False)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(np.sum(wide, axis=axes, keepdims=keepdims))


def _log_sum_exp(x, axes, keepdims):
    wide = x.astype(float_compute_dtype(x.dtype), copy=False)
    peak = np.max(wide, axis=axes, keepdims=True, initial=-np.inf)
    # an all -inf (or empty) slice has no finite peak to shift by
    shift = np.where(np.isfinite(peak), peak, 0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        total = np.sum(np.exp(wide - shift), axis=axes, keepdims=True)
        out = np.log(total) + shift
    return out if keepdims else np.squeeze(out, axis=axes)


_REDUCERS: dict[str, tuple[Callable, str]] = {
    "ReduceSum": (_sum, "sum"),
    "ReduceMean": (_mean, "arithmetic mean (NaN over an empty set)"),
    "ReduceMax": (lambda x, a, k: _extreme(x, a, k, True), "maximum (-inf over an empty set)"),
    "ReduceMin": (lambda x, a, k: _extreme(x, a, k, False), "minimum (+inf over an empty set)"),
    "ReduceProd": (_prod, "product (1 over an empty set)"),
    "ReduceL1": (_l1, "sum of absolute values"),
    "ReduceL2": (_l2, "Euclidean norm"),
    "ReduceLogSum": (_log_sum, "log of the sum (-inf over an empty set)"),
    "ReduceLogSumExp": (_log_sum_exp, "log of the sum of exponentials, computed stably"),
    "ReduceSumSquare": (_sum_square, "sum of squares"),
}


def _make_reduce_reference(name: str, kernel: Callable, what: str) -> Callable:
    def reference(data, axes_input=None, *, keepdims, noop_with_empty_axes, axes):
        chosen = reduce_axes(ReferenceSite(name), data.ndim, axes_input, axes,
                             noop_with_empty_axes)
        return as_dtype(kernel(computable(data), chosen, bool(keepdims)), data.dtype)

    reference.__name__ = name.lower()
    reference.__doc__ = (f"ONNX {name}: the {what} over ``axes`` (input 1, or the pre-opset-18 "
                         "attribute); keepdims and noop_with_empty_axes as in the spec.")
    return reference


def _register_reductions() -> None:
    for name, (kernel, what) in _REDUCERS.items():
        register_op(name, infer=_infer_reduce, fusion=FusionKind.REDUCTION, attrs=_REDUCE_ATTRS,
                    shape_operands=(1,))(_make_reduce_reference(name, kernel, what))


_register_reductions()


# ---------------------------------------------------------------------------
# ArgMax, ArgMin
# ---------------------------------------------------------------------------

_ARG_ATTRS = {"axis": 0, "keepdims": 1, "select_last_index": 0}


def _infer_arg(ctx: InferContext):
    x = require_numeric(ctx, 0, "data")
    if x.ndim == 0:
        raise ctx.error("input must have rank >= 1")
    axis = normalize_axis(ctx, ctx.attrs["axis"], x.ndim)
    if x.shape[axis] == 0:
        raise ctx.error(f"axis {axis} has size 0: no element to select")
    return [TensorType(reduced_shape(x.shape, [axis], bool(ctx.attrs["keepdims"])), "int64")]


def arg_extreme(x: np.ndarray, axis: int, keepdims: bool, select_last_index: bool,
                largest: bool) -> np.ndarray:
    """Index of the first (or last) maximum/minimum along ``axis``, as int64."""
    pick = np.argmax if largest else np.argmin
    x = computable(x)
    if select_last_index:
        flipped = pick(np.flip(x, axis=axis), axis=axis, keepdims=keepdims)
        index = x.shape[axis] - 1 - flipped
    else:
        index = pick(x, axis=axis, keepdims=keepdims)
    return np.asarray(index, dtype=np.int64)


@register_op("ArgMax", infer=_infer_arg, fusion=FusionKind.REDUCTION, attrs=_ARG_ATTRS)
def argmax(data, *, axis, keepdims, select_last_index):
    """ONNX ArgMax: int64 index of the maximum along ``axis`` (ties: first, or last)."""
    axis = normalize_axis(ReferenceSite("ArgMax"), axis, data.ndim)
    return arg_extreme(data, axis, bool(keepdims), bool(select_last_index), largest=True)


@register_op("ArgMin", infer=_infer_arg, fusion=FusionKind.REDUCTION, attrs=_ARG_ATTRS)
def argmin(data, *, axis, keepdims, select_last_index):
    """ONNX ArgMin: int64 index of the minimum along ``axis`` (ties: first, or last)."""
    axis = normalize_axis(ReferenceSite("ArgMin"), axis, data.ndim)
    return arg_extreme(data, axis, bool(keepdims), bool(select_last_index), largest=False)


# ---------------------------------------------------------------------------
# Softmax, LogSoftmax, Hardmax
# ---------------------------------------------------------------------------


def _infer_softmax(ctx: InferContext):
    x = require_float(ctx, 0, "input")
    normalize_axis(ctx, ctx.attrs["axis"], x.ndim)
    return [x]


def max_shifted(x: np.ndarray, axis: int) -> np.ndarray:
    """``x`` minus its maximum along ``axis`` (so exp cannot overflow), in the float
    compute dtype of ``x``; slices without a finite maximum are left unshifted."""
    wide = x.astype(float_compute_dtype(x.dtype), copy=False)
    peak = np.max(wide, axis=axis, keepdims=True, initial=-np.inf)
    return wide - np.where(np.isfinite(peak), peak, 0)


def log_softmax_values(x: np.ndarray, axis: int) -> np.ndarray:
    """log(softmax(x)) along ``axis``, in the float compute dtype of ``x``."""
    shifted = max_shifted(x, axis)
    with np.errstate(divide="ignore"):
        return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


@register_op("Softmax", infer=_infer_softmax, fusion=FusionKind.REDUCTION, attrs={"axis": -1})
def softmax(x, *, axis):
    """ONNX Softmax (opset >= 13): exp(x) / sum(exp(x)) along ``axis``, max-shifted."""
    axis = normalize_axis(ReferenceSite("Softmax"), axis, x.ndim)
    exps = np.exp(max_shifted(x, axis))
    with np.errstate(invalid="ignore"):
        return as_dtype(exps / np.sum(exps, axis=axis, keepdims=True), x.dtype)


@register_op("LogSoftmax", infer=_infer_softmax, fusion=FusionKind.REDUCTION,
             attrs={"axis": -1})
def log_softmax(x, *, axis):
    """ONNX LogSoftmax (opset >= 13): x - max - log(sum(exp(x - max))) along ``axis``."""
    axis = normalize_axis(ReferenceSite("LogSoftmax"), axis, x.ndim)
    return as_dtype(log_softmax_values(x, axis), x.dtype)


@register_op("Hardmax", infer=_infer_softmax, fusion=FusionKind.REDUCTION, attrs={"axis": -1})
def hardmax(x, *, axis):
    """ONNX Hardmax (opset >= 13): 1 at the first maximum along ``axis``, 0 elsewhere."""
    axis = normalize_axis(ReferenceSite("Hardmax"), axis, x.ndim)
    out = np.zeros_like(x)
    if x.size:
        winner = np.argmax(computable(x), axis=axis, keepdims=True)
        np.put_along_axis(out, winner, 1, axis=axis)
    return out


# ---------------------------------------------------------------------------
# CumSum, CumProd
# ---------------------------------------------------------------------------

_SCAN_ATTRS = {"exclusive": 0, "reverse": 0}


def _scan_axis(site, axis_value, ndim: int) -> int:
    axis = np.asarray(axis_value)
    if axis.size != 1 or axis.ndim > 1:
        raise site.error(f"axis (input 1) must be a scalar, got shape {axis.shape}")
    return normalize_axis(site, int(axis.reshape(())), ndim)


def _infer_scan(ctx: InferContext):
    x = require_numeric(ctx, 0, "x")
    if x.ndim == 0:
        raise ctx.error("x must have rank >= 1")
    axis_type = ctx.type(1)
    if axis_type.dtype not in ("int32", "int64") or axis_type.size != 1:
        raise ctx.error(f"axis (input 1) must be an int32/int64 scalar, got {axis_type}")
    if ctx.values[1] is not None:
        _scan_axis(ctx, ctx.values[1], x.ndim)
    return [x]


def cumulative(x: np.ndarray, axis_value, exclusive: bool, reverse: bool,
               op: str, combine: Callable, identity: int) -> np.ndarray:
    """Inclusive/exclusive, forward/reverse scan of ``x`` along an axis with the ufunc
    accumulator ``combine`` (np.cumsum / np.cumprod) whose identity is ``identity``."""
    axis = _scan_axis(ReferenceSite(op), axis_value, x.ndim)
    data = np.flip(computable(x), axis=axis) if reverse else computable(x)
    if exclusive and data.shape[axis]:
        lead = np.full_like(np.take(data, [0], axis=axis), identity)
        data = np.concatenate([lead, np.take(data, range(data.shape[axis] - 1), axis=axis)],
                              axis=axis)
    out = combine(data, axis=axis, dtype=accumulator_dtype(x.dtype))
    if reverse:
        out = np.flip(out, axis=axis)
    return as_dtype(out, x.dtype)


@register_op("CumSum", infer=_infer_scan, fusion=FusionKind.OPAQUE, attrs=_SCAN_ATTRS)
def cumsum(x, axis, *, exclusive, reverse):
    """ONNX CumSum: running sum along the axis given as input 1."""
    return cumulative(x, axis, bool(exclusive), bool(reverse), "CumSum", np.cumsum, 0)


@register_op("CumProd", infer=_infer_scan, fusion=FusionKind.OPAQUE, attrs=_SCAN_ATTRS)
def cumprod(x, axis, *, exclusive, reverse):
    """ONNX CumProd: running product along the axis given as input 1."""
    return cumulative(x, axis, bool(exclusive), bool(reverse), "CumProd", np.cumprod, 1)


# ---------------------------------------------------------------------------
# TopK
# ---------------------------------------------------------------------------


def _topk_count(site, k_input, k_attr) -> int:
    if k_input is None:
        if k_attr is None:
            raise site.error("k is missing: give input 1 (opset >= 10) or the k attribute")
        return int(k_attr)
    k = np.asarray(k_input)
    if k.size != 1:
        raise site.error(f"K (input 1) must hold one value, got shape {k.shape}")
    return int(k.reshape(()))


def _infer_topk(ctx: InferContext):
    x = require_numeric(ctx, 0, "X")
    if x.ndim == 0:
        raise ctx.error("X must have rank >= 1")
    axis = normalize_axis(ctx, ctx.attrs["axis"], x.ndim)
    k = _topk_count(ctx, ctx.value(1) if ctx.has(1) else None, ctx.attrs["k"])
    if not 0 <= k <= x.shape[axis]:
        raise ctx.error(f"k={k} must lie in [0, {x.shape[axis]}] (size of axis {axis})")
    shape = x.shape[:axis] + (k,) + x.shape[axis + 1:]
    return [TensorType(shape, x.dtype), TensorType(shape, "int64")]


@register_op("TopK", infer=_infer_topk, fusion=FusionKind.OPAQUE,
             attrs={"axis": -1, "largest": 1, "sorted": 1, "k": None}, shape_operands=(1,))
def topk(x, k_input=None, *, axis, largest, sorted, k):  # noqa: A002  (ONNX's name)
    """ONNX TopK: the k largest (or smallest) values along ``axis`` and their int64
    indices, always sorted; equal values keep the lower index first."""
    site = ReferenceSite("TopK")
    count = _topk_count(site, k_input, k)
    axis = normalize_axis(site, axis, x.ndim)
    keys = computable(x)
    if largest:
        # a stable ascending sort of the reversed axis, read backwards, is descending
        # with ties in original (ascending-index) order
        order = np.argsort(np.flip(keys, axis=axis), axis=axis, kind="stable")
        order = x.shape[axis] - 1 - np.flip(order, axis=axis)
    else:
        order = np.argsort(keys, axis=axis, kind="stable")
    indices = np.take(order, range(count), axis=axis).astype(np.int64)
    return np.take_along_axis(x, indices, axis=axis), indices


# ---------------------------------------------------------------------------
# Einsum
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class EinsumPlan:
    """A parsed einsum equation: the normalized equation for np.einsum and the output shape."""

    equation: str
    output_shape: tuple[int, ...]


def plan_einsum(site, equation: str, shapes: list[tuple[int, ...]]) -> EinsumPlan:
    """Parse ``equation`` against the operand ``shapes``: check labels and sizes, and
    work out the output shape (explicit ``->`` form or the implicit sorted one)."""
    text = equation.replace(" ", "")
    lhs, arrow, rhs = text.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise site.error(f"equation {equation!r} has {len(terms)} operand term(s) but "
                         f"{len(shapes)} input(s) were given")
    sizes: dict[str, int] = {}
    counts: dict[str, int] = {}
    ellipsis_shapes = []
    for index, (term, shape) in enumerate(zip(terms, shapes)):
        labels = term.replace("...", "")
        if labels and not (labels.isascii() and labels.isalpha()):
            raise site.error(f"term {term!r} of {equation!r} has characters other than "
                             "letters and '...'")
        if term.count("...") > 1:
            raise site.error(f"term {term!r} has more than one ellipsis")
        spare = len(shape) - len(labels)
        if spare < 0 or (spare and "..." not in term):
            raise site.error(f"term {term!r} does not match input {index} of rank {len(shape)}")
        if "..." in term:
            start = term.index("...")
            ellipsis_shapes.append(shape[start:start + spare])
            label_dims = shape[:start] + shape[start + spare:]
        else:
            label_dims = shape
        for label, size in zip(labels, label_dims):
            if sizes.setdefault(label, size) != size:
                raise site.error(f"label {label!r} has size {sizes[label]} and {size} in "
                                 f"{equation!r}")
            counts[label] = counts.get(label, 0) + 1
    try:
        broadcast = tuple(np.broadcast_shapes(*ellipsis_shapes)) if ellipsis_shapes else ()
    except ValueError:
        raise site.error(f"ellipsis dims {ellipsis_shapes} do not broadcast") from None
    if not arrow:
        rhs = ("..." if ellipsis_shapes else "") + "".join(
            sorted(label for label, n in counts.items() if n == 1))
    out_labels = rhs.replace("...", "")
    if len(set(out_labels)) != len(out_labels) or rhs.count("...") > 1:
        raise site.error(f"output term {rhs!r} repeats a label or an ellipsis")
    unknown = [label for label in out_labels if label not in sizes]
    if unknown:
        raise site.error(f"output labels {unknown} do not appear in any input term")
    if "..." in rhs and not ellipsis_shapes:
        raise site.error(f"output term {rhs!r} has an ellipsis no input has")
    if broadcast and "..." not in rhs:
        raise site.error(f"output term {rhs!r} drops the ellipsis dims {broadcast}; keep "
                         "'...' in the output")
    if "..." in rhs:
        before, after = rhs.split("...")
        shape = (tuple(sizes[label] for label in before) + broadcast
                 + tuple(sizes[label] for label in after))
    else:
        shape = tuple(sizes[label] for label in rhs)
    return EinsumPlan(f"{lhs}->{rhs}", shape)


def _infer_einsum(ctx: InferContext):
    if not ctx.types or any(t is None for t in ctx.types):
        raise ctx.error("needs at least one input and no omitted inputs")
    for index in range(len(ctx.types)):
        require_numeric(ctx, index, "input")
    dtypes = {t.dtype for t in ctx.types}
    if len(dtypes) != 1:
        raise ctx.error(f"inputs must share one dtype, got {sorted(dtypes)}")
    plan = plan_einsum(ctx, ctx.attrs["equation"], [t.shape for t in ctx.types])
    return [TensorType(plan.output_shape, ctx.types[0].dtype)]


@register_op("Einsum", infer=_infer_einsum, fusion=FusionKind.OUT_FUSABLE,
             attrs={"equation": REQUIRED})
def einsum(*inputs, equation):
    """ONNX Einsum: np.einsum of the inputs, accumulated wide and cast back."""
    plan = plan_einsum(ReferenceSite("Einsum"), equation, [x.shape for x in inputs])
    acc = accumulator_dtype(inputs[0].dtype)
    wide = [x.astype(acc, copy=False) for x in inputs]
    # contraction-order search only pays off from three operands on
    return as_dtype(np.einsum(plan.equation, *wide, optimize=len(inputs) > 2),
                    inputs[0].dtype)


# ---------------------------------------------------------------------------
# Trilu, Det
# ---------------------------------------------------------------------------


def _infer_trilu(ctx: InferContext):
    x = ctx.type(0)
    if x.dtype == "object":
        raise ctx.error("string tensors are not supported")
    if x.ndim < 2:
        raise ctx.error(f"input must have rank >= 2, got {x}")
    if ctx.has(1):
        k = ctx.type(1)
        if k.dtype != "int64" or k.size != 1:
            raise ctx.error(f"k (input 1) must be an int64 scalar, got {k}")
    return [x]


@register_op("Trilu", infer=_infer_trilu, fusion=FusionKind.INJECTIVE, attrs={"upper": 1})
def trilu(x, k=None, *, upper):
    """ONNX Trilu: keep the upper (or lower) triangle of the last two dims from diagonal k."""
    offset = 0 if k is None else int(np.asarray(k).reshape(()))
    return np.triu(x, offset) if upper else np.tril(x, offset)


def _infer_det(ctx: InferContext):
    x = require_float(ctx, 0, "X")
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ctx.error(f"X must be [..., M, M] (square in its last two dims), got {x}")
    return [TensorType(x.shape[:-2], x.dtype)]


@register_op("Det", infer=_infer_det, fusion=FusionKind.OPAQUE)
def det(x):
    """ONNX Det: determinant of each square matrix in the last two dims."""
    return as_dtype(np.linalg.det(x.astype(float_compute_dtype(x.dtype), copy=False)), x.dtype)


# ---------------------------------------------------------------------------
# NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss
# ---------------------------------------------------------------------------

_LOSS_ATTRS = {"reduction": "mean", "ignore_index": None}


def _infer_loss(ctx: InferContext, first_role: str) -> list[TensorType]:
    scores = require_float(ctx, 0, first_role)
    target = ctx.type(1)
    if scores.ndim < 2:
        raise ctx.error(f"{first_role} must be [N, C, d1, ...], got {scores}")
    if target.dtype not in ("int32", "int64"):
        raise ctx.error(f"target/labels must be int32 or int64, got {target.dtype}")
    expected = (scores.shape[0],) + scores.shape[2:]
    if target.shape != expected:
        raise ctx.error(f"target/labels shape {target.shape} must be {expected} for "
                        f"{first_role} {scores}")
    if ctx.has(2) and ctx.type(2).shape != (scores.shape[1],):
        raise ctx.error(f"weight shape {ctx.type(2).shape} must be ({scores.shape[1]},)")
    reduction = ctx.attrs["reduction"]
    if reduction not in ("none", "sum", "mean"):
        raise ctx.error(f"reduction {reduction!r} must be 'none', 'sum' or 'mean'")
    loss_shape = target.shape if reduction == "none" else ()
    return [TensorType(loss_shape, scores.dtype)]


def negative_log_likelihood(log_prob: np.ndarray, target: np.ndarray, weight, reduction: str,
                            ignore_index) -> np.ndarray:
    """-log_prob[n, target[n, ...], ...] weighted by ``weight[target]`` (0 where target is
    ``ignore_index``), then summed, averaged over the total weight, or kept per element."""
    acc = accumulator_dtype(log_prob.dtype)
    ignored = np.zeros(target.shape, bool) if ignore_index is None else target == ignore_index
    # ignored targets may hold any value (e.g. -100); point them at class 0 to gather safely
    safe_target = np.where(ignored, 0, target).astype(np.int64)
    if np.any((safe_target < 0) | (safe_target >= log_prob.shape[1])):
        raise InputError(f"target values must lie in [0, {log_prob.shape[1]}) or "
                                 f"equal ignore_index={ignore_index}")
    picked = np.take_along_axis(log_prob.astype(acc, copy=False),
                                np.expand_dims(safe_target, 1), axis=1).squeeze(1)
    weights = np.ones(target.shape, acc) if weight is None else weight.astype(acc)[safe_target]
    weights = np.where(ignored, 0, weights).astype(acc)
    loss = -picked * weights
    if reduction == "sum":
        loss = np.sum(loss)
    elif reduction == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            loss = np.sum(loss) / np.sum(weights)
    return as_dtype(loss, log_prob.dtype)


@register_op("NegativeLogLikelihoodLoss", infer=lambda ctx: _infer_loss(ctx, "input"),
             fusion=FusionKind.REDUCTION, attrs=_LOSS_ATTRS)
def negative_log_likelihood_loss(x, target, weight=None, *, reduction, ignore_index):
    """ONNX NegativeLogLikelihoodLoss over [N, C, d...] log-probabilities."""
    return negative_log_likelihood(x, target, weight, reduction, ignore_index)


def _infer_softmax_cross_entropy(ctx: InferContext):
    loss = _infer_loss(ctx, "scores")
    return loss + [ctx.type(0)]


@register_op("SoftmaxCrossEntropyLoss", infer=_infer_softmax_cross_entropy,
             fusion=FusionKind.REDUCTION, attrs=_LOSS_ATTRS)
def softmax_cross_entropy_loss(scores, labels, weights=None, *, reduction, ignore_index):
    """ONNX SoftmaxCrossEntropyLoss: NLL of LogSoftmax(scores, axis=1); returns
    (loss, log_prob)."""
    log_prob = log_softmax_values(scores, axis=1)
    loss = negative_log_likelihood(log_prob, labels, weights, reduction, ignore_index)
    return loss, as_dtype(log_prob, scores.dtype)


__all__ = ["ARITHMETIC_DTYPES", "COMPUTE_FLOAT_DTYPES", "EinsumPlan", "ReferenceSite",
           "accumulator_dtype", "arg_extreme", "as_dtype", "computable", "cumulative",
           "float_compute_dtype", "log_softmax_values", "max_shifted", "negative_log_likelihood",
           "plan_einsum", "reduce_axes", "reduced_shape", "require_float", "require_numeric"]
