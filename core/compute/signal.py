"""Signal processing: DFT and STFT as direct O(n^2) transforms, and the cosine-sum
windows.

Complex tensors are real ones with a trailing (real, imaginary) axis of 2 (1 for a
real signal). Transforms accumulate in float64 and round to the output dtype. The
axis, ``dft_length``, ``frame_step`` and ``frame_length`` operands are read in the
kernel (a constant one is folded into the code by the target), so one compute serves
whichever values they hold.
"""

from __future__ import annotations

import math

from .. import te
from ..errors import CompileError
from ..tir import expr as tx
from .common import F64, float_only, require_native
from .reduction import pick_by_axis, runtime_axis_names
from .registry import register_compute


def _scalar(t) -> tx.Expr:
    return te.cast("int64", t[(0,) * t.ndim])


def _angle(product, length) -> tx.Expr:
    """2 pi (product mod length) / length, the reduction keeping float64 exact."""
    turns = te.cast(F64, product % length) / te.cast(F64, length)
    return te.const(2 * math.pi, F64) * turns


def _component(x, index_of, part: int) -> tx.Expr:
    """Real (0) or imaginary (1) part of a complex-as-real tensor element (0 for the
    imaginary part of a real signal)."""
    if part == 1 and x.shape[-1] == 1:
        return te.const(0.0, F64)
    return te.cast(F64, x[(*index_of, part)])


def _rotated(re, im, angle, sign: int):
    """(re + i im) * e^(sign i angle) as (real, imaginary)."""
    c, s = te.cos(angle), te.sin(angle)
    if sign < 0:
        return re * c + im * s, im * c - re * s
    return re * c - im * s, im * c + re * s


@register_compute("DFT")
def dft(inputs, attrs, out_types):
    x = inputs[0]
    out = out_types[0]
    float_only(x.dtype, "DFT")
    length_operand = inputs[1] if len(inputs) > 1 else None
    axis_operand = inputs[2] if len(inputs) > 2 else None
    rank = x.ndim
    if axis_operand is not None:
        names = runtime_axis_names(axis_operand, rank)
    else:
        axis = (-2 if attrs["axis"] is None else attrs["axis"]) % rank
        names = [te.const(d == axis, "bool") for d in range(rank)]
    inverse, onesided = bool(attrs["inverse"]), bool(attrs["onesided"])
    size = pick_by_axis(names, [te.const(d, "int64") for d in x.shape])
    if length_operand is not None:
        length = _scalar(length_operand)
    elif inverse and onesided:
        length = 2 * (size - 1)
    else:
        length = size
    reach = max(x.shape[:-1])

    def source(index, t):
        return tuple(te.if_then_else(names[d], t, index[d]) for d in range(rank - 1))

    if inverse and onesided:
        def irfft_body(*index):
            k = te.reduce_axis(reach, "k")
            t = te.cast("int64", pick_by_axis(names, index))
            used = te.logical_and(k.var < size, k.var <= length // 2)
            at = source(index, k.var)
            re, _ = _rotated(_component(x, at, 0), _component(x, at, 1),
                             _angle(k.var * t, length), 1)
            edge = te.logical_or(te.equal(k.var, 0),
                                 te.equal(k.var * 2, length))
            weight = te.if_then_else(edge, te.const(1.0, F64), te.const(2.0, F64))
            return te.sum(te.if_then_else(used, weight * re, te.const(0.0, F64)), axis=k)

        total = te.compute(out.shape, irfft_body, name="irfft_sum", dtype=F64)
        return [te.compute(out.shape, lambda *i: te.cast(
            out.dtype, total[i] / te.cast(F64, length)), name="irfft", dtype=out.dtype)]

    sign = 1 if inverse else -1

    def dft_body(*index):
        t = te.reduce_axis(reach, "t")
        f = te.cast("int64", pick_by_axis(names, index))
        used = te.logical_and(t.var < size, t.var < length)
        at = source(index, t.var)
        re, im = _rotated(_component(x, at, 0), _component(x, at, 1),
                          _angle(f * t.var, length), sign)
        part = te.if_then_else(te.equal(index[-1], 0), re, im)
        return te.sum(te.if_then_else(used, part, te.const(0.0, F64)), axis=t)

    total = te.compute(out.shape, dft_body, name="dft_sum", dtype=F64)
    scale = (lambda v: v / te.cast(F64, length)) if inverse else (lambda v: v)
    return [te.compute(out.shape, lambda *i: te.cast(out.dtype, scale(total[i])), name="dft",
                       dtype=out.dtype)]


@register_compute("STFT")
def stft(inputs, attrs, out_types):
    """``out[b, f, k] = sum_t x[b, f * step + t] w[t] e^(-2 pi i k t / L)``."""
    signal, step_operand = inputs[:2]
    window = inputs[2] if len(inputs) > 2 else None
    length_operand = inputs[3] if len(inputs) > 3 else None
    out = out_types[0]
    float_only(signal.dtype, "STFT")
    if window is not None:
        reach, length = window.shape[0], te.const(window.shape[0], "int64")
    elif length_operand is not None:
        reach, length = signal.shape[1], _scalar(length_operand)
    else:
        reach, length = signal.shape[1], te.const(signal.shape[1], "int64")
    step = _scalar(step_operand)

    def body(b, frame, k, part):
        t = te.reduce_axis(reach, "t")
        at = (b, frame * step + t.var)
        weight = te.const(1.0, F64) if window is None else te.cast(F64, window[t.var])
        re, im = _rotated(_component(signal, at, 0) * weight,
                          _component(signal, at, 1) * weight,
                          _angle(te.cast("int64", k) * t.var, length), -1)
        value = te.if_then_else(te.equal(part, 0), re, im)
        return te.sum(te.if_then_else(t.var < length, value, te.const(0.0, F64)), axis=t)

    total = te.compute(out.shape, body, name="stft_sum", dtype=F64)
    return [te.compute(out.shape, lambda *i: te.cast(out.dtype, total[i]), name="stft",
                       dtype=out.dtype)]


def _window_compute(op: str, coefficients: tuple[float, ...]):
    """w[n] = sum_k (-1)^k a_k cos(2 pi k n / N), N = size (periodic) or size - 1."""

    def compute(inputs, attrs, out_types):
        out = out_types[0]
        require_native([out.dtype], op)
        if out.dtype == "bool":
            raise CompileError(f"{op} as bool has no TE compute")
        (size,) = out.shape
        period = size if attrs["periodic"] else size - 1

        def body(n):
            if period == 0:
                value = te.const(float(sum(coefficients)), F64)
            else:
                value = te.const(0.0, F64)
                for k, a in enumerate(coefficients):
                    angle = _angle(te.cast("int64", n) * k, te.const(period, "int64"))
                    value = value + te.const((-1) ** k * a, F64) * te.cos(angle)
            return te.cast(out.dtype, value)

        return [te.compute(out.shape, body, name=op.lower(), dtype=out.dtype)]

    return compute


# the same coefficients as the references (heterocc.ops.signal)
_WINDOWS = {"BlackmanWindow": (0.42, 0.5, 0.08), "HammingWindow": (25 / 46, 21 / 46),
            "HannWindow": (0.5, 0.5)}

for _op, _coefficients in _WINDOWS.items():
    register_compute(_op)(_window_compute(_op, _coefficients))

