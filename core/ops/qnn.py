"""heterocc's own integer ops for quantized inference (not ONNX ops).

``Requantize`` turns int32 accumulators into int8/uint8 with integer arithmetic
only, exactly as an accelerator's ALU does it (multiply, add a rounding
constant, shift right, add the zero point, clamp), so that the NumPy reference
of a quantized function is bit-exact with the hardware.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.types import TensorType
from .registry import REQUIRED, FusionKind, InferContext, register_op

#: widest multiplier an accelerator ALU immediate holds (signed 16 bits)
MAX_MULTIPLIER_BITS = 15


def fixed_point_scale(scale: float, max_abs_input: int,
                      max_bits: int = MAX_MULTIPLIER_BITS) -> tuple[int, int]:
    """``(multiplier, shift)`` with ``multiplier / 2**shift ~= scale``.

    The multiplier keeps at most ``max_bits`` bits and small enough that
    ``max_abs_input * multiplier + 2**(shift-1)`` fits in int32, so the
    integer pipeline never wraps for inputs within ``max_abs_input``.
    """
    if not scale > 0 or not math.isfinite(scale):
        raise ValueError(f"requantization scale must be positive and finite, got {scale}")
    limit = min((1 << max_bits) - 1, (2 ** 31 - 1) // (2 * max(max_abs_input, 1)))
    if limit < 1:
        raise ValueError(f"inputs up to {max_abs_input} leave no room for a multiplier")
    shift = 0
    while shift < 31 and scale * (1 << (shift + 1)) <= limit:
        shift += 1
    multiplier = max(1, min(limit, round(scale * (1 << shift))))
    return multiplier, shift


#: the widest multiplier of a requantization with a product shift: an int32 operand
PRECISE_MULTIPLIER_BITS = 31

#: headroom of the int32 value after the product shift: the output range (at most 2**9
#: steps from zero point to the far end, clamps included) shifted left by the shift
_SHIFTED_OUTPUT_BITS = 30


def precise_fixed_point_scale(scales, max_abs_inputs) -> tuple[list[int], int, list[int]]:
    """``(multipliers, product_shift, shifts)`` with ``multiplier / 2**(product_shift +
    shift) ~= scale`` per channel, for ``Requantize`` with a ``product_shift``.

    ``(a * multiplier) >> product_shift`` is an exact 64-bit product shifted back into
    int32 (an accelerator ALU does it as one MUL with a shifted product), so the
    multiplier keeps up to 31 bits whatever the accumulator's range: each ``shift`` is
    the largest that keeps ``max_abs_input * scale * 2**shift`` (the shifted output,
    rounding included) within 2**30, and the one ``product_shift`` (shared by every
    channel: a hardware instruction shifts a whole tile alike) the largest that keeps
    every multiplier below 2**31. The result differs from ``round(a * scale)`` only
    where ``a * scale`` lies within about ``2**-shift`` of a rounding boundary.
    """
    scales = np.asarray(scales, np.float64).reshape(-1)
    limits = np.maximum(np.broadcast_to(np.asarray(max_abs_inputs), scales.shape)
                        .astype(np.int64), 1)
    bad = ~((scales > 0) & np.isfinite(scales))
    if bad.any():
        raise ValueError("requantization scale must be positive and finite, got "
                         f"{scales[bad][0]}")
    # Per channel (a network has tens of thousands: array arithmetic, no Python loop):
    # the largest shift in [0, 31] with (limit * scale + 1) * 2**shift <= 2**30. Scaling
    # by a power of two is exact, so that is x <= 2**(30 - shift) for x = limit * scale
    # + 1 >= 1, read off x's binary exponent (x = m * 2**e, 0.5 <= m < 1).
    mantissas, exponents = np.frexp(limits * scales + 1)
    shifts = np.clip(np.where(mantissas == 0.5, 31, 30) - exponents, 0, 31).astype(np.int64)
    # the product shift each channel's multiplier could take (shifted_multiplier's,
    # monotone in ceiling / (scale * 2**shift)): the smallest is that of the smallest
    ceiling = (1 << PRECISE_MULTIPLIER_BITS) - 1
    headroom = ceiling / (scales * np.ldexp(1.0, shifts))
    product_shift = min(62, max(0, math.floor(math.log2(float(headroom.min())))))
    # round() and np.rint both round half to even; the scaling by 2**k is exact
    multipliers = np.clip(np.rint(np.ldexp(scales, shifts + product_shift)), 1, ceiling)
    return multipliers.astype(np.int64).tolist(), product_shift, shifts.tolist()


def _multiplier(scale: float, total_shift: int) -> int:
    return max(1, min((1 << PRECISE_MULTIPLIER_BITS) - 1, round(scale * 2.0 ** total_shift)))


def shifted_multiplier(scale: float, shift: int) -> tuple[int, int]:
    """``(multiplier, product_shift)`` with ``multiplier / 2**(product_shift + shift) ~=
    scale``: the largest product shift (at most 62, inside an int64) that keeps the
    multiplier below 2**31, so that ``(a * multiplier) >> product_shift ~= a * scale *
    2**shift`` with a multiplier of up to 31 bits. A product shift of 0 means the
    multiplier could not take more bits than ``round(scale * 2**shift)``."""
    if not scale > 0 or not math.isfinite(scale):
        raise ValueError(f"requantization scale must be positive and finite, got {scale}")
    ceiling = (1 << PRECISE_MULTIPLIER_BITS) - 1
    product_shift = min(62, max(0, math.floor(math.log2(ceiling / (scale * 2.0 ** shift)))))
    return _multiplier(scale, shift + product_shift), product_shift


def zero_point_bias(weights: np.ndarray, zero_point) -> np.ndarray:
    """The bias that lets a symmetric integer core ignore an input zero point.

    ``sum((a - zero_point) * w) == sum(a * w) - zero_point * sum(w)`` over each output
    channel's reduction, so adding ``-zero_point * sum(w)`` (int64, one per row of
    ``weights``: output channels first, the reduced axes after) to a product of the
    stored activations gives the product of the centered ones. A padded position must
    then hold ``zero_point`` (it contributes ``(zero_point - zero_point) * w == 0``).
    """
    w = np.asarray(weights).reshape(np.shape(weights)[0], -1)
    return -np.int64(zero_point) * w.sum(axis=1, dtype=np.int64)


def _wrap32(values: np.ndarray) -> np.ndarray:
    return values.astype(np.int64).astype(np.int32)


def channel_shape(ndim: int, axis: int) -> tuple[int, ...]:
    """The shape that broadcasts one value per channel along ``axis`` (in [0, ndim)) of a
    rank-``ndim`` tensor: -1 there, 1 elsewhere."""
    return tuple(-1 if d == axis else 1 for d in range(ndim))


def _per_channel(value, ndim: int, axis: int) -> np.ndarray:
    v = np.asarray(value, np.int64)
    return v.reshape(channel_shape(ndim, axis)) if v.ndim == 1 else v


def requantize_int(acc: np.ndarray, multiplier, shift, zero_point: int, qmin: int,
                   qmax: int, acc_limit=2 ** 31 - 1, axis: int = 1,
                   product_shift: int = 0) -> np.ndarray:
    """The integer pipeline in int32 with wrap-around, step by step as the ALU runs it:
    clamp to +-acc_limit, multiply (the exact product shifted right by
    ``product_shift``, then wrapped), add the rounding constant, shift, add the zero
    point, clamp to [qmin, qmax]. Per-channel ``multiplier``, ``shift`` and
    ``acc_limit`` (lists) apply along ``axis`` (negative: from the end)."""
    acc = acc.astype(np.int32)
    axis = axis % max(acc.ndim, 1)
    m = _per_channel(multiplier, acc.ndim, axis)
    s = _per_channel(shift, acc.ndim, axis)
    limit = _per_channel(acc_limit, acc.ndim, axis)
    acc = np.clip(acc.astype(np.int64), -limit, limit)
    if product_shift:
        # int32 accumulator times int32 multiplier: exact in int64
        y = _wrap32(np.right_shift(acc * _wrap32(m).astype(np.int64), int(product_shift)))
    else:
        y = _wrap32(acc * m)
    rounding = np.where(s > 0, np.left_shift(np.int64(1), np.maximum(s - 1, 0)), 0)
    y = _wrap32(y.astype(np.int64) + rounding)
    y = np.right_shift(y, s.astype(np.int32)).astype(np.int32)
    y = _wrap32(y.astype(np.int64) + zero_point)
    return np.clip(y, qmin, qmax)


def _infer_requantize(ctx: InferContext):
    x = ctx.type(0)
    if x.dtype != "int32":
        raise ctx.error(f"input is {x.dtype}; Requantize takes int32 accumulators")
    out = ctx.attrs["out_dtype"]
    if out not in ("int8", "uint8", "int16", "int32"):
        raise ctx.error(f"out_dtype {out!r} is not an integer type Requantize produces")
    info = np.iinfo(out)
    if not info.min <= ctx.attrs["qmin"] <= ctx.attrs["qmax"] <= info.max:
        raise ctx.error(f"clamp range [{ctx.attrs['qmin']}, {ctx.attrs['qmax']}] does not fit "
                        f"{out}")
    product_shift = ctx.attrs["product_shift"]
    if not isinstance(product_shift, int) or not 0 <= product_shift <= 62:
        raise ctx.error(f"product_shift {product_shift!r} is not one int in [0, 62] (it is "
                        "the same for every channel)")
    per_channel = [k for k in ("multiplier", "shift", "acc_limit")
                   if isinstance(ctx.attrs[k], list)]
    if per_channel:
        axis = ctx.attrs["axis"]
        if not -x.ndim <= axis < x.ndim:
            raise ctx.error(f"per-channel {per_channel[0]} along axis {axis} of a rank-{x.ndim} "
                            "accumulator: the axis is out of range")
        channels = x.shape[axis]
        for key in per_channel:
            if len(ctx.attrs[key]) not in (1, channels):
                raise ctx.error(
                    f"per-channel {key} has {len(ctx.attrs[key])} entries, but axis {axis} of "
                    f"the accumulator {list(x.shape)} has {channels} channels: the "
                    "requantization is placed on the wrong axis")
    return [TensorType(x.shape, out)]


def requantize_axis(node_attrs: dict, ndim: int) -> int:
    """The axis in [0, ndim) a Requantize's per-channel values apply along."""
    return int(node_attrs.get("axis", 1)) % max(ndim, 1)


@register_op("Requantize", infer=_infer_requantize, fusion=FusionKind.ELEMWISE,
             attrs={"multiplier": REQUIRED, "shift": REQUIRED, "zero_point": 0,
                    "qmin": REQUIRED, "qmax": REQUIRED, "out_dtype": "int8",
                    "acc_limit": 2 ** 31 - 1, "axis": 1, "absorbed": [],
                    "product_shift": 0})
def requantize(x, *, multiplier, shift, zero_point, qmin, qmax, out_dtype, acc_limit,
               axis, absorbed, product_shift):
    """int32 -> ``out_dtype``: with ``a = clip(x, -acc_limit, acc_limit)`` and
    ``p = int32((a * multiplier) >> product_shift)``,
    ``clip(((p + 2**(shift-1)) >> shift) + zero_point, qmin, qmax)``.

    With ``product_shift`` 0 (the default) ``p`` is the int32 product with wrap-around.
    With ``product_shift`` > 0 the product is exact (int32 times int32, in 64 bits)
    and shifted right (floor) before it returns to int32: the multiplier then keeps up
    to 31 bits (``precise_fixed_point_scale``), so the result is ``round(a * scale)``
    but at near-ties, where a multiplier held in the int32 product itself keeps only
    ``31 - log2(acc_limit)`` bits. ``product_shift`` is one int for every channel.

    ``multiplier``, ``shift`` and ``acc_limit`` are ints, or lists (one per channel along
    ``axis``: 1 for a convolution's NCHW output, the last for a matrix product's).
    Accumulators beyond ``acc_limit`` saturate the output anyway; clamping them first
    keeps the product inside int32, which lets the multiplier keep more bits.

    ``absorbed`` names the activations (``"Op:node"``) whose clamp ``qmin``/``qmax``
    applies, so that placement reports still show where they ran; it changes nothing.
    """
    return requantize_int(x, multiplier, shift, zero_point, qmin, qmax,
                          acc_limit, axis, product_shift).astype(out_dtype)
