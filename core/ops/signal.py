"""Signal-processing ops: DFT, STFT, the cosine-sum windows (Blackman, Hamming, Hann)
and MelWeightMatrix.

ONNX carries complex tensors as real ones with a trailing dimension of 2 (real,
imaginary); a real signal has a trailing dimension of 1. Results are cast back to the
input's dtype, so float16 and bfloat16 inputs keep theirs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from onnx import TensorProto

from ..errors import InputError
from ..ir.types import FLOAT_DTYPES, TensorType, dtype_from_onnx, np_dtype
from .common import dtype_attribute, typed_input
from .registry import FusionKind, InferContext, register_op

#: float formats the spectral ops take (ONNX's T1 of DFT/STFT)
SIGNAL_DTYPES = FLOAT_DTYPES + ("bfloat16",)
#: integer formats of size-like scalar operands (window size, dft_length, frame_step, ...)
SIZE_DTYPES = ("int32", "int64")
#: the numeric formats a window or mel matrix may be produced in (ONNX's T2/T3)
GENERATED_DTYPES = ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
                    "float16", "float32", "float64", "bfloat16")

Fail = Callable[[str], Exception]


def _runtime_error(op: str) -> Fail:
    """Error factory for checks the reference repeats at run time (operands not constant
    at compile time are only known then)."""
    return lambda message: InputError(f"{op}: {message}")


def _scalar_operand(ctx: InferContext, index: int, name: str,
                    allowed: tuple[str, ...] = SIZE_DTYPES) -> int:
    """The constant integer scalar of input ``index`` (ShapeOperandError if not constant)."""
    tensor_type = typed_input(ctx, index, name, allowed)
    if tensor_type.size != 1:
        raise ctx.error(f"{name} (input {index}) must be a scalar, got {tensor_type}")
    return int(np.asarray(ctx.value(index)).reshape(()))


def _scalar(value: np.ndarray | None) -> int | None:
    return None if value is None else int(np.asarray(value).reshape(()))


def _output_dtype(ctx: InferContext) -> str:
    dtype = dtype_attribute(ctx, "output_datatype", GENERATED_DTYPES)
    if dtype is None:
        raise ctx.error(f"output_datatype is 0; name one of {', '.join(GENERATED_DTYPES)}")
    return dtype


def _to_complex(x: np.ndarray) -> np.ndarray:
    """A [..., 1] (real) or [..., 2] (real, imaginary) tensor as a complex array [...].

    float64 transforms in complex128, the narrower formats in complex64: ONNX's test
    data carries single-precision rounding, which a wider transform would not reproduce.
    """
    real = np.float64 if x.dtype == np.float64 else np.float32
    wide = x.astype(real)
    if x.shape[-1] == 1:
        return wide[..., 0].astype(np.result_type(real, np.complex64))
    return wide[..., 0] + np.complex64(1j) * wide[..., 1]


def _from_complex(z: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return np.stack([z.real, z.imag], axis=-1).astype(dtype)


def _check_complex_layout(shape: tuple[int, ...], name: str, fail: Fail) -> None:
    if len(shape) < 2 or shape[-1] not in (1, 2):
        raise fail(f"{name} has shape {shape}, but its last dimension must be 1 (real) or "
                   "2 (real, imaginary) after at least one signal dimension")


# --------------------------------------------------------------------------------- DFT

@dataclass(frozen=True)
class DftPlan:
    """What one DFT computes: the transformed axis (of the complex view, rank r-1), the
    transform length, and the output shape."""

    axis: int
    length: int
    out_shape: tuple[int, ...]


def plan_dft(x_shape: tuple[int, ...], axis: int, dft_length: int | None, inverse: int,
             onesided: int, fail: Fail) -> DftPlan:
    """Check DFT's operands and work out its axis, length and output shape."""
    _check_complex_layout(x_shape, "the input", fail)
    rank = len(x_shape)
    if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
        raise fail(f"axis {axis} is out of range for rank {rank}: it must lie in "
                   f"[{-rank}, -2] or [0, {rank - 2}] (the last axis holds real/imaginary)")
    axis %= rank
    size = x_shape[axis]
    if inverse not in (0, 1) or onesided not in (0, 1):
        raise fail(f"inverse ({inverse}) and onesided ({onesided}) must each be 0 or 1")
    if dft_length is None:
        dft_length = 2 * (size - 1) if inverse and onesided else size
    if dft_length < 1:
        raise fail(f"dft_length is {dft_length}; it must be positive")
    out = list(x_shape)
    if inverse and onesided:  # IRFFT: one-sided spectrum in, full real signal out
        out[axis], out[-1] = dft_length, 1
    else:
        out[axis] = dft_length // 2 + 1 if onesided else dft_length
        out[-1] = 2
    return DftPlan(axis, dft_length, tuple(out))


def _dft_axis(axis_operand: int | None, axis_attr: int | None) -> int:
    """Opset 20 passes the axis as an input, opsets 17-19 as an attribute."""
    if axis_operand is not None:
        return axis_operand
    return -2 if axis_attr is None else int(axis_attr)


def _infer_dft(ctx: InferContext):
    x = typed_input(ctx, 0, "input", SIGNAL_DTYPES)
    dft_length = _scalar_operand(ctx, 1, "dft_length") if ctx.has(1) else None
    axis_operand = _scalar_operand(ctx, 2, "axis", ("int64",)) if ctx.has(2) else None
    plan = plan_dft(x.shape, _dft_axis(axis_operand, ctx.attrs["axis"]), dft_length,
                    ctx.attrs["inverse"], ctx.attrs["onesided"], ctx.error)
    return [TensorType(plan.out_shape, x.dtype)]


@register_op("DFT", infer=_infer_dft, fusion=FusionKind.OPAQUE,
             attrs={"inverse": 0, "onesided": 0, "axis": None}, shape_operands=(1, 2))
def dft(x, dft_length=None, axis_operand=None, *, inverse, onesided, axis):
    """Discrete Fourier transform along one axis: forward, inverse, RFFT and IRFFT."""
    plan = plan_dft(x.shape, _dft_axis(_scalar(axis_operand), axis), _scalar(dft_length),
                    inverse, onesided, _runtime_error("DFT"))
    signal = _to_complex(x)
    if inverse and onesided:
        return np.fft.irfft(signal, plan.length, axis=plan.axis)[..., np.newaxis].astype(x.dtype)
    if inverse:
        return _from_complex(np.fft.ifft(signal, plan.length, axis=plan.axis), x.dtype)
    spectrum = np.fft.fft(signal, plan.length, axis=plan.axis)
    if onesided:
        spectrum = np.take(spectrum, np.arange(plan.length // 2 + 1), axis=plan.axis)
    return _from_complex(spectrum, x.dtype)


# -------------------------------------------------------------------------------- STFT

@dataclass(frozen=True)
class StftPlan:
    frame_length: int
    frame_step: int
    frames: int
    bins: int


def plan_stft(signal_shape: tuple[int, ...], frame_step: int, frame_length: int | None,
              window_shape: tuple[int, ...] | None, onesided: int, fail: Fail) -> StftPlan:
    """Check STFT's operands and work out its framing."""
    if len(signal_shape) != 3:
        raise fail(f"signal must have rank 3 [batch, length, 1 or 2], got shape {signal_shape}")
    _check_complex_layout(signal_shape, "signal", fail)
    if window_shape is not None and len(window_shape) != 1:
        raise fail(f"window must be 1-D, got shape {window_shape}")
    if frame_length is None:
        frame_length = window_shape[0] if window_shape is not None else signal_shape[1]
    if window_shape is not None and window_shape[0] != frame_length:
        raise fail(f"window has length {window_shape[0]} but frame_length is {frame_length}; "
                   "they must be equal")
    if frame_step < 1:
        raise fail(f"frame_step is {frame_step}; it must be positive")
    if not 1 <= frame_length <= signal_shape[1]:
        raise fail(f"frame_length {frame_length} must lie in [1, {signal_shape[1]}] "
                   "(the signal length)")
    if onesided not in (0, 1):
        raise fail(f"onesided must be 0 or 1, got {onesided}")
    frames = (signal_shape[1] - frame_length) // frame_step + 1
    bins = frame_length // 2 + 1 if onesided else frame_length
    return StftPlan(frame_length, frame_step, frames, bins)


def _infer_stft(ctx: InferContext):
    signal = typed_input(ctx, 0, "signal", SIGNAL_DTYPES)
    window = typed_input(ctx, 2, "window", (signal.dtype,)).shape if ctx.has(2) else None
    frame_length = _scalar_operand(ctx, 3, "frame_length") if ctx.has(3) else None
    plan = plan_stft(signal.shape, _scalar_operand(ctx, 1, "frame_step"), frame_length, window,
                     ctx.attrs["onesided"], ctx.error)
    return [TensorType((signal.shape[0], plan.frames, plan.bins, 2), signal.dtype)]


@register_op("STFT", infer=_infer_stft, fusion=FusionKind.OPAQUE, attrs={"onesided": 1},
             shape_operands=(1, 3))
def stft(signal, frame_step, window=None, frame_length=None, *, onesided):
    """Short-time Fourier transform: a DFT of each (windowed) frame of the signal."""
    plan = plan_stft(signal.shape, _scalar(frame_step), _scalar(frame_length),
                     None if window is None else window.shape, onesided,
                     _runtime_error("STFT"))
    samples = _to_complex(signal)
    frames = np.lib.stride_tricks.sliding_window_view(samples, plan.frame_length, axis=1)
    frames = frames[:, ::plan.frame_step][:, :plan.frames]
    if window is not None:
        frames = frames * window.astype(frames.real.dtype)
    spectrum = np.fft.fft(frames, axis=-1)[..., :plan.bins]
    return _from_complex(spectrum, signal.dtype)


# ----------------------------------------------------------------------------- windows

_WINDOW_ATTRS = {"periodic": 1, "output_datatype": TensorProto.FLOAT}


def _infer_window(ctx: InferContext):
    size = _scalar_operand(ctx, 0, "size")
    if size < 0:
        raise ctx.error(f"size is {size}; a window length cannot be negative")
    if ctx.attrs["periodic"] not in (0, 1):
        raise ctx.error(f"periodic must be 0 or 1, got {ctx.attrs['periodic']}")
    return [TensorType((size,), _output_dtype(ctx))]


def cosine_sum_window(size: int, periodic: int, coefficients: tuple[float, ...],
                      dtype: np.dtype) -> np.ndarray:
    """w[n] = sum_k (-1)^k a_k cos(2 pi k n / N), N = size (periodic) or size - 1.

    A symmetric window of one sample is its centre value, sum_k a_k (N = 0 has no
    other meaningful reading).
    """
    period = size if periodic else size - 1
    if period == 0:
        return np.full((size,), sum(coefficients)).astype(dtype)
    phase = 2 * np.pi * np.arange(size, dtype=np.float64) / period
    window = np.zeros(size, dtype=np.float64)
    for k, a in enumerate(coefficients):
        window += (-1) ** k * a * np.cos(k * phase)
    return window.astype(dtype)


def _window_op(name: str, coefficients: tuple[float, ...]) -> None:
    def window(size, *, periodic, output_datatype):
        return cosine_sum_window(_scalar(size), periodic, coefficients,
                                 np_dtype(dtype_from_onnx(output_datatype)))

    window.__doc__ = f"{name}: cosine-sum window with coefficients {coefficients}."
    register_op(name, infer=_infer_window, fusion=FusionKind.OPAQUE, attrs=_WINDOW_ATTRS,
                shape_operands=(0,))(window)


_window_op("BlackmanWindow", (0.42, 0.5, 0.08))
# ONNX's Hamming uses the equiripple coefficients 25/46 and 21/46, not the rounded 0.54/0.46
_window_op("HammingWindow", (25 / 46, 21 / 46))
_window_op("HannWindow", (0.5, 0.5))


# --------------------------------------------------------------------- MelWeightMatrix

def _infer_mel_weight_matrix(ctx: InferContext):
    num_mel_bins = _scalar_operand(ctx, 0, "num_mel_bins")
    dft_length = _scalar_operand(ctx, 1, "dft_length")
    typed_input(ctx, 2, "sample_rate", SIZE_DTYPES)
    for index, name in ((3, "lower_edge_hertz"), (4, "upper_edge_hertz")):
        if typed_input(ctx, index, name, SIGNAL_DTYPES).size != 1:
            raise ctx.error(f"{name} (input {index}) must be a scalar, got {ctx.type(index)}")
    if num_mel_bins < 1 or dft_length < 1:
        raise ctx.error(f"num_mel_bins ({num_mel_bins}) and dft_length ({dft_length}) "
                        "must be positive")
    return [TensorType((dft_length // 2 + 1, num_mel_bins),
                       _output_dtype(ctx))]


def _mel_band_edges(num_mel_bins: int, dft_length: int, sample_rate: int,
                    lower_edge_hertz: np.ndarray, upper_edge_hertz: np.ndarray) -> np.ndarray:
    """Spectrogram bin of each band edge: num_mel_bins + 2 points evenly spaced in mel.

    The mel range is split into num_mel_bins + 2 steps (not + 1), so the top band ends
    below upper_edge_hertz; this is what ONNX's reference and test data compute.
    """
    low_mel = 2595 * np.log1p(lower_edge_hertz / 700) / np.log(10)
    high_mel = 2595 * np.log1p(upper_edge_hertz / 700) / np.log(10)
    points = np.arange(0, num_mel_bins + 2)
    mel = points * ((high_mel - low_mel) / points.shape[0]) + low_mel
    hertz = 700 * np.expm1(mel / 2595 * np.log(10))
    return (((dft_length + 1) * hertz) // sample_rate).astype(np.int64)


@register_op("MelWeightMatrix", infer=_infer_mel_weight_matrix, fusion=FusionKind.OPAQUE,
             attrs={"output_datatype": TensorProto.FLOAT}, shape_operands=(0, 1))
def mel_weight_matrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
                      upper_edge_hertz, *, output_datatype):
    """Triangular mel filterbank [dft_length // 2 + 1, num_mel_bins], peaks of 1."""
    bands, length, rate = _scalar(num_mel_bins), _scalar(dft_length), _scalar(sample_rate)
    if rate < 1:
        raise InputError(f"MelWeightMatrix: sample_rate is {rate}; it must be positive")
    num_bins = length // 2 + 1
    edges = _mel_band_edges(bands, length, rate, np.asarray(lower_edge_hertz).reshape(()),
                            np.asarray(upper_edge_hertz).reshape(()))
    if edges.min() < 0 or edges.max() >= num_bins:
        raise InputError(
            f"MelWeightMatrix: the band edges fall on spectrogram bins {edges.min()}.."
            f"{edges.max()}, outside [0, {num_bins - 1}]; keep 0 <= lower_edge_hertz < "
            f"upper_edge_hertz <= sample_rate / 2")
    weights = np.zeros((num_bins, bands), dtype=np.float64)
    for band in range(bands):
        low, centre, high = edges[band:band + 3]
        if centre > low:
            rise = np.arange(low, centre + 1)
            weights[rise, band] = (rise - low) / (centre - low)
        else:
            weights[centre, band] = 1.0
        if high > centre:
            fall = np.arange(centre, high)
            weights[fall, band] = (high - fall) / (high - centre)
    return weights.astype(np_dtype(dtype_from_onnx(output_datatype)))

