"""Reductions: Reduce*, ArgMax/ArgMin, the softmax family, CumSum and CumProd, and the
other ops of ``heterocc.ops.reduction``: Einsum, Det, TopK, Trilu and the losses.

Every reduction is built from :func:`reduce_stage`, a compute whose body is one
``te.sum`` / ``te.max`` / ``te.min`` over the reduced axes (so the LLVM target gives it
the reduction schedule), followed by elementwise stages that finish the value.

Float max/min reductions combine with ``maxnum``/``minnum``, which skip NaN, while
NumPy (the oracle) propagates it; the max/min family therefore also reduces a NaN
flag and lets it win, so results match the reference on NaN inputs too.

Einsum is one sum of products over the labels the output drops. Det of small matrices
is the Leibniz formula (a sum over the permutations of the rows), in float64 as the
reference computes, rounded to the input dtype. TopK does not sort: each element's rank
is the count of elements ordered before it, and output slot r gathers the element of
rank r (O(n^2) per slice).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

from .. import te
from ..errors import CompileError
from ..ops import get_op
from ..ops.common import normalize_axes, normalize_axis
from ..ops.reduction import ReferenceSite, accumulator_dtype, plan_einsum, reduced_shape
from ..tir import expr as tx
from .common import float_only, require_native
from .registry import register_compute
from .tensor import load_first

#: A function of an input index (a tuple of index expressions) giving one value.
IndexedValue = Callable[[tuple], tx.Expr]

#: elements multiplied by one stage of ReduceProd's product tree
PRODUCT_CHUNK = 16


# ----------------------------------------------------------------------------- shared helpers


def require_nonempty(shape: Sequence[int], op: str) -> None:
    """Empty tensors run on the NumPy reference."""
    if any(d == 0 for d in shape):
        raise CompileError(f"{op} on an empty tensor {list(shape)} has no TE compute; it "
                           "runs on the NumPy reference")


def float_compute_dtype(dtype: str) -> str:
    """The float dtype transcendental math runs in for ``dtype`` (as the references do:
    float32/float64 stay, integers widen to float64)."""
    return dtype if tx.is_float(dtype) else "float64"


def reduce_stage(x: te.Tensor, axes: Sequence[int], combiner: str, source: IndexedValue,
                 name: str, dtype: str, keepdims: bool = True) -> te.Tensor:
    """``combiner`` ("sum", "max" or "min") of ``source(index)`` over ``axes`` of ``x``'s
    index space, in ``dtype``; reduced axes are kept as 1 or dropped. With no axes each
    output element reduces the single element at its own position."""
    axes = sorted(set(axes))
    shape = reduced_shape(x.shape, axes, keepdims)
    if not axes:
        return te.compute(shape, lambda *i: source(tuple(i)), name=name, dtype=dtype)
    reduce = {"sum": te.sum, "max": te.max, "min": te.min}[combiner]

    def body(*out_index):
        rvars = {a: te.reduce_axis(x.shape[a], f"r{a}") for a in axes}
        kept = iter(out_index)
        index = []
        for a in range(x.ndim):
            if a in rvars:
                if keepdims:
                    next(kept)
                index.append(rvars[a])
            else:
                index.append(next(kept))
        return reduce(source(tuple(index)), axis=[rvars[a] for a in axes])

    return te.compute(shape, body, name=name, dtype=dtype)


def stat_at(stat: te.Tensor, index: Sequence, axes: Sequence[int]) -> tx.Expr:
    """A kept-dims statistic ``stat`` read at input ``index`` (its reduced axes at 0)."""
    return stat[tuple(0 if a in axes else i for a, i in enumerate(index))]


def expand_index(out_index: Sequence, axes: Sequence[int], ndim: int,
                 keepdims: bool) -> tuple:
    """The kept-dims index of an output element of a reduction over ``axes``."""
    if keepdims:
        return tuple(out_index)
    kept = iter(out_index)
    return tuple(0 if a in axes else next(kept) for a in range(ndim))


def is_nan(value: tx.Expr) -> tx.Expr:
    return te.not_equal(value, value)


def is_finite(value: tx.Expr) -> tx.Expr:
    return te.fabs(value) < te.const(math.inf, value.dtype)


def kept_stage(stat: te.Tensor, fn: Callable[[tx.Expr], tx.Expr], name: str,
               dtype: str | None = None) -> te.Tensor:
    """``fn`` of each element of a (small, per-slice) ``stat``, computed once into a buffer
    of its own rather than inlined into every element that reads it."""
    return te.compute(stat.shape, lambda *i: fn(stat[i]), name=name,
                      dtype=dtype or stat.dtype, attrs={"keep": True})


def finite_shift(peak: te.Tensor, name: str) -> te.Tensor:
    """What each slice is shifted by before ``exp``: its maximum ``peak`` where finite,
    else 0 (as the references do)."""
    zero = te.const(0, peak.dtype)
    return kept_stage(peak, lambda top: te.if_then_else(is_finite(top), top, zero), name)


def nan_flag(x: te.Tensor, axes: Sequence[int], name: str, keepdims: bool = True) -> te.Tensor:
    """1 (uint8) where the reduced slice of float ``x`` holds a NaN, else 0."""
    one, zero = te.const(1, "uint8"), te.const(0, "uint8")
    return reduce_stage(x, axes, "max", lambda i: te.if_then_else(is_nan(x[i]), one, zero),
                        name, "uint8", keepdims)


def extreme(x: te.Tensor, axes: Sequence[int], largest: bool, name: str,
            keepdims: bool = True) -> te.Tensor:
    """The maximum (or minimum) of ``x`` over ``axes``, NaN where the slice has one
    (as np.max/np.min); bool reduces as any/all."""
    combiner = "max" if largest else "min"
    if x.dtype == "bool":
        small = reduce_stage(x, axes, combiner, lambda i: te.cast("uint8", x[i]), name,
                             "uint8", keepdims)
        return te.compute(small.shape, lambda *i: te.cast("bool", small[i]), name=name + "_bool")
    peak = reduce_stage(x, axes, combiner, lambda i: x[i], name, x.dtype, keepdims)
    if not tx.is_float(x.dtype) or not axes:
        return peak
    flag = nan_flag(x, axes, name + "_nan", keepdims)
    nan = te.const(math.nan, x.dtype)
    return te.compute(peak.shape, lambda *i: te.if_then_else(
        flag[i] > te.const(0, "uint8"), nan, peak[i]), name=name + "_out", dtype=x.dtype)


def arg_extreme(x: te.Tensor, axis: int, largest: bool, last: bool, name: str) -> te.Tensor:
    """Kept-dims int64 index of the first (or ``last``) maximum/minimum of ``x`` along
    ``axis``; a NaN counts as the extreme, as in np.argmax/np.argmin.

    Two passes: the extreme (NaN skipped), then one index search in which a NaN's index
    is offset by the axis size so that it wins over every index reaching the extreme."""
    combiner = "max" if largest else "min"
    peak = reduce_stage(x, [axis], combiner, lambda i: x[i], name + "_peak", x.dtype)
    size = te.const(x.shape[axis], "int64")
    missing = te.const(-1, "int64") if last else size + size

    def candidate(index):
        # the loads stay in conditions: a select whose sides load becomes a branch
        position = te.cast("int64", index[axis])
        hit = te.equal(x[index], stat_at(peak, index, [axis]))
        if not tx.is_float(x.dtype):
            return te.if_then_else(hit, position, missing)
        nan = is_nan(x[index])
        offset = size * te.cast("int64", nan)
        chosen = te.if_then_else(te.logical_or(hit, nan), position, missing)
        return chosen + offset if last else chosen - offset

    found = reduce_stage(x, [axis], "max" if last else "min", candidate, name + "_search",
                         "int64")
    # an offset (NaN) index lies outside [0, size): bring it back
    return te.compute(found.shape, lambda *i: te.if_then_else(
        found[i] >= size if last else found[i] < te.const(0, "int64"),
        found[i] - size if last else found[i] + size, found[i]), name=name, dtype="int64")


# ----------------------------------------------------------------------------- Reduce*


def _axes_from_shapes(op: str, in_shape: tuple[int, ...], out_shape: tuple[int, ...],
                      count: int, keepdims: bool) -> tuple[int, ...]:
    """The axes a Reduce* node reduces, told from its input and output shapes.

    The axes come from a constant input whose contents computes do not see; the shapes
    fix them up to axes of size 1, and reducing a size-1 axis or not gives the same
    values. Shapes that leave a choice between larger axes raise CompileError."""
    ndim = len(in_shape)
    if keepdims:
        return tuple(a for a in range(ndim) if out_shape[a] == 1 and in_shape[a] != 1)
    dropped = ndim - len(out_shape)
    if dropped != count:
        raise CompileError(f"{op}: {count} axes cannot give {list(out_shape)} from "
                           f"{list(in_shape)} (duplicate axes?)")
    fits = {tuple(a for a in combo if in_shape[a] != 1)
            for combo in itertools.combinations(range(ndim), dropped)
            if reduced_shape(in_shape, combo, False) == tuple(out_shape)}
    if len(fits) != 1:
        raise CompileError(f"{op} with keepdims=0: the axes input cannot be told from the "
                           f"shapes {list(in_shape)} -> {list(out_shape)}; the node runs on "
                           "the NumPy reference")
    (nontrivial,) = fits
    trivial = [a for a in range(ndim) if in_shape[a] == 1]
    # size-1 axes: drop exactly as many as the output lost beyond the nontrivial ones
    needed = dropped - len(nontrivial)
    return tuple(sorted((*nontrivial, *trivial[:needed])))


def _reduced_axes(op: str, inputs, attrs, out_shape) -> tuple[int, ...]:
    x = inputs[0]
    axes_input = inputs[1] if len(inputs) > 1 else None
    if axes_input is not None and attrs.get("axes") is not None:
        raise CompileError(f"{op}: axes given both as input 1 and as attribute")
    if attrs.get("axes") is not None:
        listed = [int(a) for a in attrs["axes"]]
    elif axes_input is None or int(np.prod(axes_input.shape)) == 0:
        listed = []
    else:
        count = int(np.prod(axes_input.shape))
        return _axes_from_shapes(op, x.shape, tuple(out_shape), count, bool(attrs["keepdims"]))
    if not listed:
        return () if attrs["noop_with_empty_axes"] else tuple(range(x.ndim))
    if x.ndim == 0:
        return ()
    return tuple(sorted(normalize_axes(ReferenceSite(op), listed, x.ndim)))


def _plain_reduce(combiner: str, element: Callable[[tx.Expr], tx.Expr], wide_dtype=None,
                  finish=None):
    """A Reduce* built as ``finish(combiner of element(x), count)``, with ``x`` widened to
    ``wide_dtype(dtype)`` (default: the input dtype) before ``element``."""

    def build(x, axes, keepdims, out_dtype, name):
        acc = wide_dtype(x.dtype) if wide_dtype else x.dtype
        total = reduce_stage(x, axes, combiner, lambda i: element(te.cast(acc, x[i])), name,
                             acc, keepdims)
        if finish is None and acc == out_dtype:
            return total
        count = int(np.prod([x.shape[a] for a in axes]))
        done = finish or (lambda v, n: v)
        return te.compute(total.shape, lambda *i: te.cast(out_dtype, done(total[i], count)),
                          name=name + "_out")

    return build


def _identity(v):
    return v


def _absolute(v):
    if tx.is_float(v.dtype):
        return te.fabs(v)
    return te.if_then_else(v < te.const(0, v.dtype), -v, v)


def _square(v):
    return v * v


def _mean(x, axes, keepdims, out_dtype, name):
    if x.dtype in ("int64", "uint64"):
        raise CompileError("ReduceMean on 64-bit integers has no TE compute (their float64 "
                           "sum rounds in an order-dependent way)")
    # integer means are float64 quotients truncated toward zero, as the reference does
    return _plain_reduce("sum", _identity, float_compute_dtype,
                         lambda v, n: v / te.const(n, v.dtype))(x, axes, keepdims, out_dtype,
                                                                name)


def _extreme_reduce(largest: bool):
    def build(x, axes, keepdims, out_dtype, name):
        return extreme(x, axes, largest, name, keepdims)

    return build


def _product(x, axes, keepdims, out_dtype, name):
    """No product combiner exists: multiply ``PRODUCT_CHUNK`` elements per stage, in a
    tree of stages over the flattened reduced axes. Integer products wrap, which is
    associative, so they match the reference exactly."""
    out_shape = reduced_shape(x.shape, axes, keepdims)
    extents = [x.shape[a] for a in axes]
    size = int(np.prod(extents))

    def unflatten(flat):
        parts = []
        for extent in reversed(extents):
            parts.append(flat % extent if extent != 1 else 0)
            flat = flat // extent
        return dict(zip(axes, reversed(parts)))

    def read_input(out_index, flat):
        picked = unflatten(flat)
        full = expand_index(out_index, axes, x.ndim, keepdims)
        return x[tuple(picked.get(a, i) for a, i in enumerate(full))]

    read = read_input
    level = 0
    one = te.const(1, x.dtype)
    while True:
        chunk = min(PRODUCT_CHUNK, size)
        groups = -(-size // chunk)

        def body(*index, read=read, count=size, chunk=chunk):
            out_index, group = index[:-1], index[-1]
            value = None
            for k in range(chunk):
                flat = group * chunk + k
                # a partial last chunk multiplies by one past the end, never reading it
                term = te.if_then_else(flat < count, read(out_index, flat), one) \
                    if count % chunk else read(out_index, flat)
                value = term if value is None else value * term
            return value

        stage = te.compute((*out_shape, groups), body, name=f"{name}_l{level}", dtype=x.dtype,
                           attrs={"keep": True})
        if groups == 1:
            return te.compute(out_shape, lambda *i, stage=stage: stage[(*i, 0)], name=name,
                              dtype=out_dtype)
        read = _reader_of(stage)
        size, level = groups, level + 1


def _reader_of(stage: te.Tensor) -> Callable[[tuple, tx.Expr], tx.Expr]:
    """Reads element ``flat`` of the last axis of a product-tree ``stage``."""
    return lambda out_index, flat: stage[(*out_index, flat)]


def _log_sum(x, axes, keepdims, out_dtype, name):
    return _plain_reduce("sum", _identity, float_compute_dtype,
                         lambda v, n: te.log(v))(x, axes, keepdims, out_dtype, name)


def _l2(x, axes, keepdims, out_dtype, name):
    return _plain_reduce("sum", _square, float_compute_dtype,
                         lambda v, n: te.sqrt(v))(x, axes, keepdims, out_dtype, name)


def _log_sum_exp(x, axes, keepdims, out_dtype, name):
    wide = float_compute_dtype(x.dtype)
    peak = reduce_stage(x, axes, "max", lambda i: te.cast(wide, x[i]), name + "_peak", wide)
    shift = finite_shift(peak, name + "_shift")

    def shift_at(index):
        return stat_at(shift, index, axes)

    total = reduce_stage(x, axes, "sum", lambda i: te.exp(te.cast(wide, x[i]) - shift_at(i)),
                         name + "_sum", wide)
    ndim = x.ndim
    return te.compute(reduced_shape(x.shape, axes, keepdims), lambda *o: te.cast(
        out_dtype, te.log(total[expand_index(o, axes, ndim, keepdims)])
        + shift_at(expand_index(o, axes, ndim, keepdims))), name=name)


_REDUCE_BUILDERS = {
    "ReduceSum": _plain_reduce("sum", _identity),
    "ReduceMean": _mean,
    "ReduceMax": _extreme_reduce(True),
    "ReduceMin": _extreme_reduce(False),
    "ReduceProd": _product,
    "ReduceL1": _plain_reduce("sum", _absolute),
    "ReduceL2": _l2,
    "ReduceLogSum": _log_sum,
    "ReduceLogSumExp": _log_sum_exp,
    "ReduceSumSquare": _plain_reduce("sum", _square),
}


def _empty_reduction(op: str, x: te.Tensor, axes, keepdims: bool, out) -> te.Tensor:
    """A reduction over no elements is a constant: the value the reference gives it."""
    require_nonempty(out.shape, op)
    definition = get_op(op)
    attrs = {**definition.normalize_attrs({}), "axes": list(axes), "keepdims": int(keepdims)}
    value = definition.run([np.zeros(x.shape, x.dtype), None], attrs)[0].reshape(-1)[0]
    return te.compute(out.shape, lambda *i: te.const(value.item(), out.dtype),
                      name=op.lower() + "_empty", dtype=out.dtype)


def _reduce_compute(op: str):
    build = _REDUCE_BUILDERS[op]

    def compute(inputs, attrs, out_types):
        x = inputs[0]
        out = out_types[0]
        require_native([x.dtype, out.dtype], op)
        axes = _reduced_axes(op, inputs, attrs, out.shape)
        keepdims = bool(attrs["keepdims"])
        if x.ndim == 0:
            keepdims = True
        if any(d == 0 for d in x.shape):
            return [_empty_reduction(op, x, axes, keepdims, out)]
        result = build(x, axes, keepdims, out.dtype, op.lower())
        if result.shape != tuple(out.shape):
            raise CompileError(f"{op}: axes {list(axes)} give {list(result.shape)}, type "
                               f"inference says {list(out.shape)}")
        return [result]

    return compute


for _op in _REDUCE_BUILDERS:
    register_compute(_op)(_reduce_compute(_op))


# ----------------------------------------------------------------------------- ArgMax/ArgMin


def _arg_compute(op: str, largest: bool):
    def compute(inputs, attrs, out_types):
        x = inputs[0]
        require_native([x.dtype], op)
        require_nonempty(x.shape, op)
        axis = normalize_axis(ReferenceSite(op), attrs["axis"], x.ndim)
        index = arg_extreme(x, axis, largest, bool(attrs["select_last_index"]), op.lower())
        if attrs["keepdims"]:
            return [index]
        return [te.compute(out_types[0].shape, lambda *o: index[
            expand_index(o, [axis], x.ndim, False)], name=op.lower() + "_squeeze")]

    return compute


register_compute("ArgMax")(_arg_compute("ArgMax", True))
register_compute("ArgMin")(_arg_compute("ArgMin", False))


# ----------------------------------------------------------------------------- softmax family


def _softmax_input(op: str, inputs, attrs) -> tuple[te.Tensor, int]:
    x = inputs[0]
    if not tx.is_float(x.dtype):
        raise CompileError(f"{op} on {x.dtype} has no TE compute (float32/float64 only)")
    require_native([x.dtype], op)
    require_nonempty(x.shape, op)
    return x, normalize_axis(ReferenceSite(op), attrs["axis"], x.ndim)


def _peak_and_shift(x: te.Tensor, axis: int, name: str) -> tuple[te.Tensor, te.Tensor]:
    peak = reduce_stage(x, [axis], "max", lambda i: x[i], name + "_max", x.dtype)
    return peak, finite_shift(peak, name + "_shift")


@register_compute("Softmax")
def softmax(inputs, attrs, out_types):
    x, axis = _softmax_input("Softmax", inputs, attrs)
    _, shift = _peak_and_shift(x, axis, "softmax")
    # computed once and read twice: exp is the costly part
    exps = te.compute(x.shape, lambda *i: te.exp(x[i] - stat_at(shift, i, [axis])),
                      name="softmax_exp", dtype=x.dtype, attrs={"keep": True})
    total = reduce_stage(x, [axis], "sum", lambda i: exps[i], "softmax_sum", x.dtype)
    return [te.compute(x.shape, lambda *i: exps[i] / stat_at(total, i, [axis]),
                       name="softmax", dtype=x.dtype)]


@register_compute("LogSoftmax")
def log_softmax(inputs, attrs, out_types):
    x, axis = _softmax_input("LogSoftmax", inputs, attrs)
    peak, shift = _peak_and_shift(x, axis, "log_softmax")
    total = reduce_stage(x, [axis], "sum", lambda i: te.exp(x[i] - stat_at(shift, i, [axis])),
                         "log_softmax_sum", x.dtype)
    log_total = kept_stage(total, te.log, "log_softmax_log")

    def body(*i):
        top = stat_at(peak, i, [axis])
        # Selecting between x - top and x (not subtracting the selected shift) keeps the
        # difference rounded on its own: float math may be reassociated, and
        # x - top - log(sum) regrouped as x - (top + log(sum)) loses the small result
        # when x is large.
        shifted = te.if_then_else(is_finite(top), x[i] - top, x[i])
        return shifted - stat_at(log_total, i, [axis])

    return [te.compute(x.shape, body, name="log_softmax", dtype=x.dtype)]


@register_compute("Hardmax")
def hardmax(inputs, attrs, out_types):
    x, axis = _softmax_input("Hardmax", inputs, attrs)
    winner = arg_extreme(x, axis, True, False, "hardmax_index")
    one, zero = te.const(1, x.dtype), te.const(0, x.dtype)
    return [te.compute(x.shape, lambda *i: te.if_then_else(
        te.equal(te.cast("int64", i[axis]), stat_at(winner, i, [axis])), one, zero),
        name="hardmax", dtype=x.dtype)]


# ----------------------------------------------------------------------------- CumSum, CumProd


def runtime_axis_names(axis_operand: te.Tensor, ndim: int) -> list[tx.Expr]:
    """Per axis d of a rank-``ndim`` input, whether the scalar ``axis_operand`` (read in
    the kernel; negative counts from the end) names it. A constant axis is folded into
    the code by the target, and these conditions with it."""
    axis = te.cast("int64", axis_operand[(0,) * axis_operand.ndim])
    axis = te.if_then_else(axis < 0, axis + ndim, axis)
    return [te.equal(axis, te.const(d, "int64")) for d in range(ndim)]


def pick_by_axis(names: Sequence[tx.Expr], values: Sequence) -> tx.Expr:
    """The value of the axis that ``names`` selects."""
    value = values[-1]
    for name, candidate in zip(names[:-1], values[:-1]):
        value = te.if_then_else(name, candidate, value)
    return value


def scan_stages(x: te.Tensor, names: Sequence[tx.Expr], combine: Callable, identity,
                exclusive: bool, reverse: bool, name: str) -> te.Tensor:
    """A running ``combine`` of ``x`` along the axis that ``names`` selects, as a
    Hillis-Steele scan: stage j combines each element with the one 2**j before it, so
    ceil(log2(n)) elementwise stages give every prefix (O(N log n) work, any axis).
    ``combine`` must be associative (integer wrap-around and float sums/products are,
    up to float rounding)."""
    ndim = x.ndim
    direction = 1 if reverse else -1
    extent = pick_by_axis(names, [te.const(d, "int64") for d in x.shape])

    def position(index) -> tx.Expr:
        return pick_by_axis(names, index)

    def neighbour(index, offset: int) -> tuple:
        return tuple(te.if_then_else(names[d], index[d] + direction * offset, index[d])
                     if ndim > 1 else index[d] + direction * offset for d in range(ndim))

    def reaches(index, offset: int) -> tx.Expr:
        if reverse:
            return position(index) + offset < extent
        return position(index) >= offset

    fill = te.const(identity, x.dtype)
    if exclusive:
        first = te.compute(x.shape, lambda *i: te.if_then_else(reaches(i, 1), x[neighbour(i, 1)],
                                                               fill),
                           name=name + "_shift", dtype=x.dtype, attrs={"keep": True})
    else:
        first = x
    stage, offset = first, 1
    longest = max(x.shape)
    while offset < longest:
        last = offset * 2 >= longest

        def body(*i, stage=stage, offset=offset):
            combined = combine(stage[i], stage[neighbour(i, offset)])
            return te.if_then_else(reaches(i, offset), combined, stage[i])

        stage = te.compute(x.shape, body, name=f"{name}_{offset}", dtype=x.dtype,
                           attrs={} if last else {"keep": True})
        offset *= 2
    if isinstance(stage.op, te.PlaceholderOp):  # a one-element axis everywhere: a copy
        return te.compute(x.shape, lambda *i: x[i], name=name, dtype=x.dtype)
    return stage


def _scan_compute(op: str, combine: Callable, identity: int):
    def compute(inputs, attrs, out_types):
        x, axis = inputs[:2]
        require_native([x.dtype], op)
        if x.dtype == "bool":
            raise CompileError(f"{op} on bool has no TE compute")
        require_nonempty(x.shape, op)
        names = runtime_axis_names(axis, x.ndim) if x.ndim > 1 else [te.const(True, "bool")]
        return [scan_stages(x, names, combine, identity, bool(attrs["exclusive"]),
                            bool(attrs["reverse"]), op.lower())]

    return compute


register_compute("CumSum")(_scan_compute("CumSum", lambda a, b: a + b, 0))
register_compute("CumProd")(_scan_compute("CumProd", lambda a, b: a * b, 1))


# -------------------------------------------------------------------------------------- Einsum

def _spelled_out(term: str, rank: int, ellipsis_labels: str) -> str:
    """``term`` with its ellipsis replaced by the trailing ``ellipsis_labels`` it covers
    (an operand's ellipsis is right-aligned with the broadcast ellipsis dims)."""
    if "..." not in term:
        return term
    spare = rank - len(term.replace("...", ""))
    covered = ellipsis_labels[len(ellipsis_labels) - spare:] if spare else ""
    return term.replace("...", covered)


def labelled_terms(equation: str, shapes) -> tuple[list[str], str, dict[str, int]]:
    """The equation's operand terms and output term with one letter per axis (ellipses
    spelled out in letters the equation does not use) and each label's extent (the
    broadcast one for ellipsis dims)."""
    lhs, rhs = equation.split("->")
    terms = lhs.split(",")
    unused = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
              if c not in equation]
    widest = max((len(s) - len(t.replace("...", "")) for t, s in zip(terms, shapes)
                  if "..." in t), default=0)
    ellipsis_labels = "".join(unused[:widest])
    spelled = [_spelled_out(t, len(s), ellipsis_labels) for t, s in zip(terms, shapes)]
    sizes: dict[str, int] = {}
    for term, shape in zip(spelled, shapes):
        for label, size in zip(term, shape):
            sizes[label] = max(sizes.get(label, 1), size)
    return spelled, _spelled_out(rhs, len(ellipsis_labels) + len(rhs.replace("...", "")),
                                 ellipsis_labels), sizes


@register_compute("Einsum")
def einsum(inputs, attrs, out_types):
    """``out[o] = sum over the dropped labels of prod_k input_k[labels of k]``, in the
    reference's accumulator dtype; a size-1 operand axis under a wider label (ellipsis
    broadcasting) is read at 0."""
    out = out_types[0]
    require_native([t.dtype for t in inputs] + [out.dtype], "Einsum")
    shapes = [tuple(t.shape) for t in inputs]
    plan = plan_einsum(ReferenceSite("Einsum"), attrs["equation"], shapes)
    terms, output, sizes = labelled_terms(plan.equation, shapes)
    acc = np.dtype(accumulator_dtype(out.dtype)).name
    dropped = sorted({label for term in terms for label in term} - set(output))

    def product(at: dict):
        value = None
        for t, term in zip(inputs, terms):
            index = tuple(0 if size == 1 and sizes[label] != 1 else at[label]
                          for label, size in zip(term, t.shape))
            factor = te.cast(acc, t[index])
            value = factor if value is None else value * factor
        return value

    def body(*index):
        at = dict(zip(output, index))
        if not dropped:
            return product(at)
        axes = [te.reduce_axis(sizes[label], f"r_{label}") for label in dropped]
        at.update({label: axis.var for label, axis in zip(dropped, axes)})
        return te.sum(product(at), axis=axes)

    if any(sizes[label] == 0 for label in dropped):
        total = te.compute(out.shape, lambda *i: te.const(0, acc), name="einsum", dtype=acc)
    else:
        total = te.compute(out.shape, body, name="einsum", dtype=acc)
    if acc == out.dtype:
        return [total]
    return [te.compute(out.shape, lambda *i: te.cast(out.dtype, total[i]), name="einsum_cast",
                       dtype=out.dtype)]


# ----------------------------------------------------------------------------------------- Det

#: the largest matrix whose n! permutation terms are expanded
MAX_LEIBNIZ_SIZE = 4


def _parity(permutation: tuple[int, ...]) -> int:
    inversions = sum(1 for i, j in itertools.combinations(range(len(permutation)), 2)
                     if permutation[i] > permutation[j])
    return -1 if inversions % 2 else 1


@register_compute("Det")
def det(inputs, attrs, out_types):
    x = inputs[0]
    float_only(x.dtype, "Det")
    n = x.shape[-1]
    if n > MAX_LEIBNIZ_SIZE:
        raise CompileError(f"Det of {n} x {n} matrices has no TE compute (at most "
                           f"{MAX_LEIBNIZ_SIZE} x {MAX_LEIBNIZ_SIZE})")

    def body(*batch):
        total = te.const(0.0, "float64")
        for permutation in itertools.permutations(range(n)):
            term = te.const(float(_parity(permutation)), "float64")
            for row, column in enumerate(permutation):
                term = term * te.cast("float64", x[(*batch, row, column)])
            total = total + term
        return te.cast(x.dtype, total)

    return [te.compute(out_types[0].shape, body, name="det", dtype=x.dtype)]


# -------------------------------------------------------------------------------------- losses

def _class_of(target: te.Tensor, index: tuple, classes: int, ignore_index) -> tuple:
    """The class that target element ``index`` picks (clamped into range, so a gather
    through it never leaves the buffer) and whether it is ignored."""
    label = te.cast("int64", target[index])
    ignored = te.const(False, "bool") if ignore_index is None else te.equal(
        label, te.const(int(ignore_index), "int64"))
    safe = te.if_then_else(ignored, te.const(0, "int64"), label)
    safe = te.minimum(te.maximum(safe, te.const(0, "int64")), te.const(classes - 1, "int64"))
    return safe, ignored


def negative_log_likelihood(log_prob: te.Tensor, target: te.Tensor, weight, reduction: str,
                            ignore_index, dtype: str) -> te.Tensor:
    """-log_prob[n, target[n, ...], ...] weighted by ``weight[target]`` (0 where the
    target is ``ignore_index``), kept per element, summed, or averaged over the weights."""
    if not tx.is_float(dtype) or dtype == "float16":
        raise CompileError(f"NegativeLogLikelihoodLoss on {dtype} has no TE compute")
    classes = log_prob.shape[1]
    zero, one = te.const(0, dtype), te.const(1, dtype)

    def weight_at(index):
        safe, ignored = _class_of(target, index, classes, ignore_index)
        given = one if weight is None else te.cast(dtype, weight[safe])
        return te.if_then_else(ignored, zero, given)

    def loss_at(index):
        safe, _ = _class_of(target, index, classes, ignore_index)
        picked = log_prob[(index[0], safe, *index[1:])]
        return -picked * weight_at(index)

    if reduction == "none":
        return te.compute(target.shape, lambda *i: loss_at(i), name="nll", dtype=dtype)
    axes = list(range(target.ndim))
    total = reduce_stage(target, axes, "sum", loss_at, "nll_sum", dtype, keepdims=False)
    if reduction == "sum":
        return total
    weights = reduce_stage(target, axes, "sum", weight_at, "nll_weight", dtype, keepdims=False)
    return te.compute((), lambda: total[()] / weights[()], name="nll_mean", dtype=dtype)


@register_compute("NegativeLogLikelihoodLoss")
def negative_log_likelihood_loss(inputs, attrs, out_types):
    log_prob, target = inputs[:2]
    weight = inputs[2] if len(inputs) > 2 else None
    return [negative_log_likelihood(log_prob, target, weight, attrs["reduction"],
                                    attrs["ignore_index"], out_types[0].dtype)]


@register_compute("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(inputs, attrs, out_types):
    """NLL of LogSoftmax(scores, axis=1); the log-probabilities are the second output."""
    scores, labels = inputs[:2]
    weights = inputs[2] if len(inputs) > 2 else None
    (log_prob,) = log_softmax([scores], {"axis": 1}, out_types[1:])
    loss = negative_log_likelihood(log_prob, labels, weights, attrs["reduction"],
                                   attrs["ignore_index"], out_types[0].dtype)
    return [loss, log_prob][:len(out_types)]


# ---------------------------------------------------------------------------------------- TopK

#: most comparisons (slice length squared, times slices) the ranking may cost
TOPK_MAX_WORK = 1 << 26


def _ahead(a, b, largest: bool) -> tx.Expr:
    """Whether value ``a`` sorts strictly before ``b``: NaN counts as the largest value
    (as in the reference's stable argsort)."""
    if not tx.is_float(a.dtype):
        return a > b if largest else a < b
    # equal(v, v): v is not NaN
    if largest:
        return te.logical_or(a > b, te.logical_and(is_nan(a), te.equal(b, b)))
    return te.logical_or(a < b, te.logical_and(is_nan(b), te.equal(a, a)))


def _tied(a, b) -> tx.Expr:
    if not tx.is_float(a.dtype):
        return te.equal(a, b)
    return te.logical_or(te.equal(a, b), te.logical_and(is_nan(a), is_nan(b)))


@register_compute("TopK")
def topk(inputs, attrs, out_types):
    x = inputs[0]
    require_native([x.dtype], "TopK")
    require_nonempty(x.shape, "TopK")
    axis = normalize_axis(ReferenceSite("TopK"), attrs["axis"], x.ndim)
    n = x.shape[axis]
    if n * int(np.prod(x.shape)) > TOPK_MAX_WORK:
        raise CompileError(f"TopK over {list(x.shape)} along axis {axis} is too large for its "
                           "quadratic TE compute")
    largest = bool(attrs["largest"])
    values_type, _ = out_types
    if 0 in values_type.shape:
        raise CompileError("TopK with k=0 has no TE compute (an empty output)")

    def at(index, position):
        return tuple(position if d == axis else i for d, i in enumerate(index))

    def rank_body(*index):
        m = te.reduce_axis(n, "m")
        mine, other = x[index], x[at(index, m.var)]
        before = te.logical_or(_ahead(other, mine, largest),
                               te.logical_and(_tied(other, mine), m.var < index[axis]))
        return te.sum(te.cast("int64", before), axis=m)

    rank = te.compute(x.shape, rank_body, name="topk_rank", dtype="int64")

    def index_body(*out_index):
        j = te.reduce_axis(n, "j")
        chosen = te.equal(rank[at(out_index, j.var)], te.cast("int64", out_index[axis]))
        return te.sum(te.if_then_else(chosen, te.cast("int64", j.var), te.const(0, "int64")),
                      axis=j)

    indices = te.compute(values_type.shape, index_body, name="topk_indices", dtype="int64")
    values = te.compute(values_type.shape, lambda *i: x[at(i, indices[i])], name="topk_values",
                        dtype=x.dtype)
    return [values, indices]


# --------------------------------------------------------------------------------------- Trilu

@register_compute("Trilu")
def trilu(inputs, attrs, out_types):
    x = inputs[0]
    k = inputs[1] if len(inputs) > 1 else None
    offset = te.const(0, "int64") if k is None else te.cast("int64", load_first(k))
    zero = te.const(0, x.dtype)

    def body(*index):
        diagonal = index[-1] - index[-2]  # column minus row
        keep = diagonal >= offset if attrs["upper"] else diagonal <= offset
        return te.if_then_else(keep, x[index], zero)

    return [te.compute(out_types[0].shape, body, name="trilu", dtype=x.dtype)]
