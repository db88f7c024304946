"""heterocc's own integer ops (``heterocc.ops.qnn``): Requantize, the int32 accumulator
scaled and rounded to int8/uint8 by a per-tensor or per-channel multiplier. Its int32
pipeline wraps step by step as the accelerator's ALU does, bit-exact with the reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import te
from ..errors import CompileError
from ..ops.qnn import requantize_axis
from .registry import register_compute
from .value_range import value_range


@register_compute("Requantize")
def requantize(inputs, attrs, out_types):
    """``clip(((clip(x, +-acc_limit) * multiplier + 2**(shift-1)) >> shift) + zero_point,
    qmin, qmax)`` in int32 with wrap-around after every step, per tensor or per channel
    (along ``axis``); with a ``product_shift`` the product is taken in int64 and shifted
    right by it before it wraps to int32. Where no step can wrap and the total shift is
    33..63, the same bits come from the product's high word (:func:`_high_product_form`),
    and where the output saturates at the accumulator limit anyway, without the clamp
    to it (:func:`_clamp_implied`). Where the computes producing ``x`` bound it (a
    residual addition's term, an int8 operand less its zero point), the product shift's
    step takes int32 products only (:func:`_split_product_form`)."""
    x = inputs[0]
    error = _range_error(attrs)
    if error:
        raise CompileError(error)
    product_shift = int(attrs.get("product_shift", 0))
    out = out_types[0].dtype
    forms = _forms(attrs)
    constants = {name: _per_channel_constant(values, name)
                 for name, values in forms.values.items()}
    multiplier, shift, rounding = (constants[f"requantize_{k}"]
                                   for k in ("multiplier", "shift", "rounding"))
    low, high = constants["requantize_low"], constants["requantize_high"]
    high_word, clamp_implied = forms.high_word, forms.clamp_implied
    split = None if high_word else _split_product_form(attrs, _magnitude(value_range(x)))
    zero_point = te.const(0 if high_word else _wrap_int32(int(attrs["zero_point"])), "int32")
    qmin, qmax = te.const(int(attrs["qmin"]), "int32"), te.const(int(attrs["qmax"]), "int32")
    axis = requantize_axis(attrs, x.ndim)
    channels = x.shape[axis] if x.ndim else 1
    for key in ("multiplier", "shift", "acc_limit"):
        # a table read at the wrong axis would index past its end or reuse its first
        # entries without a word: refuse it (type inference says the same)
        if isinstance(attrs[key], list) and len(attrs[key]) not in (1, channels):
            raise CompileError(f"Requantize per-channel {key} has {len(attrs[key])} entries "
                               f"for the {channels} channels of axis {axis} of "
                               f"{list(x.shape)}")

    def body(*index):
        channel = index[axis] if x.ndim else 0
        acc = x[index] if clamp_implied else \
            te.minimum(te.maximum(x[index], low(channel)), high(channel))
        # the high-word form keeps the product's bits [32, 64); the rest of the shift, its
        # rounding and the zero point follow in int32 (see _high_product_form)
        product_bits = 32 if high_word else product_shift
        if split is not None:
            # x*m >> k as x*(m >> k) + (x*(m mod 2**k) >> k): int32 products only (see
            # _split_product_form)
            quotient, remainder = (te.const(v, "int32") for v in split)
            y = acc * quotient + ((acc * remainder) >> te.const(product_shift, "int32"))
        elif product_bits:
            wide = te.cast("int64", acc) * te.cast("int64", multiplier(channel))
            y = te.cast("int32", wide >> te.const(product_bits, "int64"))
        else:
            y = acc * multiplier(channel)
        y = y + rounding(channel)
        y = y >> shift(channel)
        if not high_word:
            y = y + zero_point
        return te.cast(out, te.minimum(te.maximum(y, qmin), qmax))

    return [te.compute(tuple(out_types[0].shape), body, name="requantize", dtype=out)]


def _magnitude(bounds: tuple[int, int] | None) -> int | None:
    """The largest ``|v|`` of an inclusive range (None for None)."""
    return None if bounds is None else max(-bounds[0], bounds[1])


def _wrap_int32(value: int) -> int:
    """``value`` wrapped to int32 (two's complement), as NumPy's int64 -> int32 cast."""
    return (value + 2 ** 31) % 2 ** 32 - 2 ** 31


#: the per-channel attributes, read from tables where their values differ by channel
_PER_CHANNEL = ("multiplier", "shift", "acc_limit")


def _range_error(attrs) -> str | None:
    """Why Requantize with ``attrs`` has no TE compute, or None."""
    product_shift = int(attrs.get("product_shift", 0))
    if not 0 <= product_shift <= 62:
        return f"Requantize product_shift {product_shift} outside [0, 62] has no TE compute"
    shifts = attrs["shift"] if isinstance(attrs["shift"], list) else [attrs["shift"]]
    if any(not 0 <= int(s) <= 31 for s in shifts):
        return f"Requantize shift {attrs['shift']} outside [0, 31] has no TE compute"
    limits = attrs["acc_limit"] if isinstance(attrs["acc_limit"], list) else \
        [attrs["acc_limit"]]
    if any(int(limit) < 0 for limit in limits):
        return f"Requantize acc_limit {attrs['acc_limit']} must be >= 0"
    return None


def _channel_list(attrs, key: str, channels: int) -> list[int]:
    value = attrs[key]
    return [int(v) for v in value] * (channels if len(value) == 1 else 1) \
        if isinstance(value, list) else [int(value)] * channels


def _high_product_form(attrs) -> bool:
    """Whether Requantize's product shift ``k`` and shift ``s`` (total ``t = k + s >= 33``
    on every channel) can be computed from the exact product's high word ``h`` (bits
    ``[32, 64)``, one multiply-high) as ``(h + 2**(t-33) + zero_point * 2**(t-32)) >>
    (t - 32)`` in int32, with the same bits as the reference.

    Without wrap-around the reference is ``floor((a*m + r) / 2**t) + zero_point`` with
    ``r = 2**(t-1)`` (0 where ``s`` is 0): the floor of a floor by a power of two is one
    floor, and an integer added before a floor moves out of it. ``r`` is a multiple of
    2**32, so the product's low word (below 1 once divided) drops out of the floor. So
    the form holds where no step of either form wraps, which the clamped accumulator's
    bound ``|a| <= acc_limit`` decides per channel."""
    channels = _channel_values(attrs)
    if channels is None:
        return False
    k, zero = int(attrs["product_shift"]), _wrap_int32(int(attrs["zero_point"]))
    for m, s, limit in channels:
        t = k + s
        if not 33 <= t <= 63:  # the rest of the shift, t - 32, within int32's
            return False
        bound = limit * abs(m)  # |a * m|
        rounding = 1 << (s - 1) if s else 0
        # the reference: the shifted product, its rounding, the zero point
        if (bound >> k) + 1 + rounding >= 2 ** 31 or (bound >> t) + 1 + abs(zero) >= 2 ** 31:
            return False
        if not _high_word_fits(m, s, limit, k, zero):
            return False
    return True


def _split_product_form(attrs, bound: int | None) -> tuple[int, int] | None:
    """``(q, r)`` with ``m = q * 2**k + r`` (``0 <= r < 2**k``) for the multiplier ``m``
    and product shift ``k``, where the accumulator's ``bound`` (``|a| <= bound``, from
    the computes that produce it: :func:`~.value_range.value_range`) proves the
    reference's 64-bit step ``(a * m) >> k`` equal to ``a * q + ((a * r) >> k)`` in int32
    with wrap-around; None where it does not (no bound, no product shift, or the values
    differ by channel: a shared kernel reads those from tables it must not depend on).

    ``a * m / 2**k = a * q + a * r / 2**k`` and ``a * q`` is an integer, so it moves out
    of the floor; ``a * r`` must be exact (``|a| * r < 2**31``), the rest may wrap: the
    reference wraps its result to int32 too, and a sum and product modulo 2**32 are the
    sum and product of the operands modulo 2**32. A residual addition's terms (an int8
    operand less its zero point, ``|a| <= 255``, product shift ~10, shift 0) take it:
    two 32-bit products (the second one a 16-bit ``vpmaddwd`` where ``r < 2**15``) in
    place of 64-bit ones and their interleaving."""
    channels = _channel_values(attrs)
    if channels is None or bound is None or any(
            _is_table(attrs[key]) for key in ("multiplier", "acc_limit")):
        return None
    k = int(attrs["product_shift"])
    m, _, limit = channels[0]
    q, r = m >> k, m & ((1 << k) - 1)
    # an int32 shift by k (then r < 2**31 too: an int32 constant), a * r exact
    if k > 31 or min(bound, limit) * r >= 2 ** 31:
        return None
    return _wrap_int32(q), r


def _channel_values(attrs) -> list[tuple[int, int, int]] | None:
    """``(multiplier, shift, acc_limit)`` of every channel (the multiplier wrapped to
    int32, the limit at most 2**31), or None without a product shift or a TE compute."""
    if int(attrs.get("product_shift", 0)) == 0 or _range_error(attrs):
        return None
    lists = [attrs[k] for k in _PER_CHANNEL if isinstance(attrs[k], list)]
    channels = max((len(v) for v in lists), default=1)
    if any(len(v) not in (1, channels) for v in lists):
        return None
    return [(_wrap_int32(m), s, min(limit, 2 ** 31)) for m, s, limit in zip(
        *(_channel_list(attrs, key, channels) for key in ("multiplier", "shift", "acc_limit")))]


def _high_word_fits(m: int, s: int, limit: int, k: int, zero: int) -> bool:
    """Whether the high-word form's int32 steps stay in int32 for ``|a| <= limit``."""
    t = k + s
    high_rounding = 1 << (t - 33) if s else 0
    return (limit * abs(m) >> 32) + 1 + high_rounding + abs(zero) * (1 << (t - 32)) < 2 ** 31


def _clamp_implied(attrs, high_word: bool | None = None) -> bool:
    """Whether the high-word form may skip the clamp to +-acc_limit: every multiplier is
    positive (the result grows with the accumulator), the form stays in int32 for every
    int32 accumulator, and the output at +-acc_limit already reaches qmax/qmin, so an
    accumulator beyond the limit gives qmax/qmin either way. ``high_word``:
    :func:`_high_product_form` of ``attrs`` where the caller has it."""
    if not (_high_product_form(attrs) if high_word is None else high_word):
        return False
    k, zero = int(attrs["product_shift"]), _wrap_int32(int(attrs["zero_point"]))
    qmin, qmax = int(attrs["qmin"]), int(attrs["qmax"])
    for m, s, limit in _channel_values(attrs):
        t, rounding = k + s, (1 << (k + s - 1)) if s else 0
        if m <= 0 or not _high_word_fits(m, s, 2 ** 31, k, zero):
            return False
        if ((limit * m + rounding) >> t) + zero < qmax or \
                ((-limit * m + rounding) >> t) + zero > qmin:
            return False
    return True


def _per_channel_values(attrs, high_word: bool | None = None
                        ) -> dict[str, int | list[int]]:
    """The int32 constants of the pipeline by table name: an int, or one per channel.
    In the high-word form (:func:`_high_product_form`) the shift is what remains after
    the high word's 32 bits and the rounding takes the zero point in (``high_word``: as
    in :func:`_clamp_implied`)."""
    int32_min, int32_max = -2 ** 31, 2 ** 31 - 1
    shift, limit = attrs["shift"], attrs["acc_limit"]
    high_word_values = {}
    if _high_product_form(attrs) if high_word is None else high_word:
        rest = int(attrs["product_shift"]) - 32
        zero = _wrap_int32(int(attrs["zero_point"]))
        high_word_values = {
            "requantize_shift": _per_channel(shift, lambda s: s + rest),
            "requantize_rounding": _per_channel(
                shift, lambda s: ((1 << (s + rest - 1)) if s else 0) + (zero << (s + rest))),
        }
    return {
        # NumPy multiplies in int64 and wraps to int32; multiplying int32 operands that
        # were wrapped first gives the same bits
        "requantize_multiplier": _per_channel(attrs["multiplier"], _wrap_int32),
        "requantize_shift": _per_channel(shift, int),
        "requantize_rounding": _per_channel(
            shift, lambda s: _wrap_int32(1 << (s - 1)) if s else 0),
        # the clamp to +-acc_limit, with bounds beyond int32 (which clamp nothing) tightened
        "requantize_low": _per_channel(limit, lambda v: max(-v, int32_min)),
        "requantize_high": _per_channel(limit, lambda v: min(v, int32_max)),
        **high_word_values,
    }


@dataclass(frozen=True)
class _Forms:
    """What :func:`_forms` finds for one set of Requantize attributes."""

    high_word: bool
    clamp_implied: bool
    #: :func:`_per_channel_values` (read only: shared by every caller)
    values: dict
    #: what of the attributes the code depends on (:func:`_code_key`)
    code_key: tuple


#: :func:`_forms` by attributes (a network's requantizations repeat: one entry each)
_FORMS: dict[str, _Forms] = {}
_FORMS_KEPT = 4096


def _forms(attrs) -> _Forms:
    """The forms, constants and code key of Requantize with ``attrs``, decided once per
    distinct attributes (the one memo of them): each decision walks every channel in
    Python (a network's ~250 decisions took ~0.7 of its ~10 CPU-s compile), and the
    compute and the structure key of every function (more than once each) ask for
    them. Attributes the compute refuses get their code key only."""
    # ints, strings and lists of them: equal reprs are equal values (a list's repr
    # costs a fraction of walking it in Python)
    key = repr(sorted(attrs.items()))
    found = _FORMS.get(key)
    if found is None:
        if len(_FORMS) >= _FORMS_KEPT:
            _FORMS.clear()
        if _range_error(attrs):
            refused = ("refused", tuple(sorted((k, _hashable(v)) for k, v in attrs.items())))
            found = _FORMS[key] = _Forms(False, False, {}, refused)
            return found
        high_word = _high_product_form(attrs)
        clamp_implied = _clamp_implied(attrs, high_word)
        values = _per_channel_values(attrs, high_word)
        found = _FORMS[key] = _Forms(high_word, clamp_implied, values,
                                     _forms_code_key(attrs, high_word, clamp_implied, values))
    return found


def _is_table(values) -> bool:
    return isinstance(values, list) and len(set(values)) > 1


def _hashable(value):
    return tuple(_hashable(v) for v in value) if isinstance(value, list | tuple) else value


def _code_key(attrs) -> tuple:
    """What of Requantize's attributes its code depends on: the values of its
    per-channel constants where they are immediates, only the length of a table (its
    contents are the kernel's arguments), and every other attribute; all of them where
    the compute refuses the values (lengths too: the compute checks them against the
    channels). Remembered with the forms (:func:`_forms`)."""
    return _forms(attrs).code_key


def _forms_code_key(attrs, high_word: bool, clamp_implied: bool, values: dict) -> tuple:
    """:func:`_code_key` of accepted ``attrs`` whose forms and constants are these."""
    others = tuple(sorted((k, _hashable(v)) for k, v in attrs.items()
                          if k not in _PER_CHANNEL))
    constants = tuple((name, ("table", len(v)) if _is_table(v) else
                       ("list", len(v), v[0]) if isinstance(v, list) else v)
                      for name, v in values.items())
    return others, constants, high_word, clamp_implied


requantize.code_key = _code_key


def _per_channel_constant(values, name: str):
    """``lambda channel: the int32 constant of values for channel``: ``values`` is an int,
    or a list (one per channel) read from a constant table (one load, a vector load where
    channels are vectorized); a list of one value throughout is an immediate."""
    if _is_table(values):
        table = te.constant_tensor(np.array(values, np.int32), name)
        return lambda channel: table[channel]
    value = te.const(values[0] if isinstance(values, list) else values, "int32")
    return lambda channel: value


def _per_channel(value, transform):
    """``transform`` applied to an int attribute, or to each entry of a per-channel list."""
    return [transform(int(v)) for v in value] if isinstance(value, list) else \
        transform(int(value))
