"""Requantize from the exact product's high word (core/compute/qnn.py,
``_high_product_form``): where the total shift is 33..63 and no step can wrap, the llvm
target computes ``(high word + rounding + zero point) >> rest`` instead of the stepwise
pipeline, with the same bits as the int64 reference: exhaustively over an accumulator
range holding every rounding tie, at the clamp's edges and at random, for both rounding
forms (shift > 0 rounds half up, shift 0 floors), per tensor and per channel, on the
host's AVX-512 and on AVX2."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc.compute.qnn import _high_product_form
from heterocc.ir.graph import Graph, Node, Value
from heterocc.ir.types import TensorType
from heterocc.ops import get_op
from heterocc.targets.llvm.target import LLVMKernel, LLVMTarget

TARGETS = ["llvm", "llvm -mattr=-avx512f"]


def _accumulators(rng, limit: int) -> np.ndarray:
    """Every accumulator in [-2**16, 2**16) (each rounding tie of the shifts below), the
    clamp's edges and int32's, and random ones over int32, as (1, 1, N)."""
    edges = [v for e in (limit, 2 ** 31 - 1, 2 ** 30, 2 ** 20) for v in (e, e - 1, e + 1)]
    edges = np.clip(np.array(edges + [-v for v in edges] + [-2 ** 31]), -2 ** 31, 2 ** 31 - 1)
    values = np.concatenate([np.arange(-2 ** 16, 2 ** 16), edges,
                             rng.integers(-2 ** 31, 2 ** 31, 2 ** 14)])
    return values.astype(np.int32).reshape(1, 1, -1)


def _run(target: str, x: np.ndarray, attrs: dict) -> tuple[np.ndarray, np.ndarray]:
    attrs = get_op("Requantize").normalize_attrs(attrs)
    (expected,) = get_op("Requantize").run([x], attrs)
    v = Value("x", TensorType(x.shape, "int32"))
    y = Value("y", TensorType(x.shape, attrs["out_dtype"]))
    llvm = LLVMTarget(cpu=target)
    kernel = llvm.build(Node("function", [v], [y], name="f",
                             body=Graph([v], [y], [Node("Requantize", [v], [y], attrs)])))
    assert isinstance(kernel, LLVMKernel), llvm.fallbacks
    return kernel([x])[0], expected


#: (multiplier, product shift, shift, acc_limit, zero point): the least total shift (33)
#: at the largest multiplier and accumulator the form allows, shift 0 (a floor), zero
#: points at either side, totals up to 63
CASES = [(2 ** 31 - 1, 31, 2, 2 ** 30 - 1, 0), (2 ** 31 - 1, 31, 2, 2 ** 30 - 1, -128),
         (1_518_500_250, 33, 0, 2 ** 31 - 1, 0), (1_518_500_250, 33, 0, 2 ** 31 - 1, 5),
         (1_234_567_891, 30, 5, 2 ** 24, 127), (987_654_321, 40, 9, 2 ** 31 - 1, -3),
         (2 ** 30 + 1, 45, 18, 2 ** 31 - 1, 0),
         (2 ** 30 + 1, 45, 16, 2 ** 31 - 1, -1), (1_073_741_827, 36, 27, 2 ** 31 - 1, 0),
         (3, 50, 13, 2 ** 31 - 1, 0)]


@pytest.mark.parametrize("target", TARGETS, ids=["host", "avx2"])
@pytest.mark.parametrize("multiplier,product_shift,shift,limit,zero", CASES)
def test_the_high_word_gives_the_references_bits(target, multiplier, product_shift, shift,
                                                  limit, zero, rng):
    attrs = {"multiplier": multiplier, "shift": shift, "zero_point": zero,
             "qmin": -2 ** 31, "qmax": 2 ** 31 - 1, "out_dtype": "int32",  # every bit shows
             "acc_limit": limit, "product_shift": product_shift}
    assert _high_product_form(get_op("Requantize").normalize_attrs(attrs))
    x = _accumulators(rng, limit)
    got, expected = _run(target, x, attrs)
    np.testing.assert_array_equal(got, expected)
    clamped = np.clip(x.astype(object), -limit, limit)  # the int64 reference by hand
    total = product_shift + shift
    by_hand = (clamped * multiplier + ((1 << (total - 1)) if shift else 0)) // 2 ** total + zero
    np.testing.assert_array_equal(got, by_hand.astype(np.int64))


@pytest.mark.parametrize("target", TARGETS, ids=["host", "avx2"])
@pytest.mark.parametrize("out_dtype,qmin,qmax", [("uint8", 0, 255), ("int8", -128, 127)])
def test_per_channel_shifts_with_and_without_rounding(target, out_dtype, qmin, qmax, rng):
    """Channels of different shifts (some 0: a floor) and multipliers, as tables, with a
    ReLU6-like clamp: the same bits as the reference."""
    channels = 8
    shifts = [0, 3, 7, 0, 12, 1, 20, 5]
    attrs = {"multiplier": rng.integers(2 ** 29, 2 ** 31, channels).tolist(), "shift": shifts,
             "zero_point": qmin + 3, "qmin": qmin, "qmax": qmax, "out_dtype": out_dtype,
             "acc_limit": rng.integers(2 ** 20, 2 ** 28, channels).tolist(),
             "product_shift": 34}
    assert _high_product_form(get_op("Requantize").normalize_attrs(attrs))
    x = np.stack([_accumulators(rng, 2 ** 24)[0, 0]] * channels).reshape(1, channels, 1, -1)
    x = x + (rng.integers(-2 ** 20, 2 ** 20, x.shape) >> np.arange(channels).reshape(
        1, -1, 1, 1)).astype(np.int32)
    got, expected = _run(target, x.astype(np.int32), attrs)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("changes,why", [
    ({"product_shift": 0}, "the int32 product wraps: no exact product"),
    ({"product_shift": 30, "shift": 2}, "total shift 32: the low word's top bit rounds"),
    ({"acc_limit": 2 ** 31 - 1}, "the shifted product can leave int32 in the reference"),
    ({"zero_point": 2 ** 30}, "the zero point scaled by 2**(t-32) leaves int32"),
    ({"product_shift": 40, "shift": 31, "zero_point": 0}, "total shift 71: past int32's"),
    ({"multiplier": [2 ** 31 - 1, 3], "acc_limit": [2 ** 31 - 1, 5]},
     "one channel can wrap"),
])
def test_the_stepwise_form_stays_where_a_step_could_wrap(changes, why, rng):
    """Where the high word could give other bits (a step of either form could wrap, or
    the rounding reads the low word), the stepwise pipeline stays, bit-exact."""
    attrs = {"multiplier": 2 ** 31 - 1, "shift": 2, "zero_point": 0, "qmin": -2 ** 31,
             "qmax": 2 ** 31 - 1, "out_dtype": "int32", "acc_limit": 2 ** 30 - 1,
             "product_shift": 31, **changes}
    if isinstance(attrs["multiplier"], list):
        attrs["axis"] = 1
    attrs = get_op("Requantize").normalize_attrs(attrs)
    assert not _high_product_form(attrs), why
    channels = len(attrs["multiplier"]) if isinstance(attrs["multiplier"], list) else 1
    x = np.repeat(_accumulators(rng, 2 ** 30 - 1), channels, axis=1)
    got, expected = _run("llvm", x, attrs)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("target", TARGETS, ids=["host", "avx2"])
@pytest.mark.parametrize("out_dtype,zero,qmin,qmax", [
    ("uint8", 0, 0, 255), ("uint8", 0, 0, 153),  # ReLU6 at scale 6/153
    ("int8", -128, -128, 127), ("int8", 3, -128, 127)])
def test_the_clamp_to_the_limit_goes_where_the_output_saturates_there(
        target, out_dtype, zero, qmin, qmax, rng):
    """With the accumulator limit where the output saturates (as the quantizer sets it)
    and positive multipliers, the high-word form skips the clamp to +-acc_limit:
    accumulators over all of int32, beyond the limit included, give the same bits."""
    from heterocc.compute.qnn import _clamp_implied
    from heterocc.ops.qnn import precise_fixed_point_scale

    channels = 6
    scales = rng.uniform(2e-5, 3e-3, channels)
    reach = max(np.iinfo(out_dtype).max - zero, zero - np.iinfo(out_dtype).min) + 2
    limits = np.ceil(reach / scales).astype(np.int64) + 1  # the quantizer's rule
    multipliers, product_shift, shifts = precise_fixed_point_scale(scales, limits)
    attrs = get_op("Requantize").normalize_attrs({
        "multiplier": multipliers, "shift": shifts, "zero_point": zero, "qmin": qmin,
        "qmax": qmax, "out_dtype": out_dtype, "acc_limit": limits.tolist(),
        "product_shift": product_shift})
    assert _clamp_implied(attrs)
    x = np.concatenate([_accumulators(rng, int(limit))[0, 0, -2 ** 15:] for limit in limits])
    x = np.stack([x] * channels).reshape(1, channels, 1, -1)
    got, expected = _run(target, x, attrs)
    np.testing.assert_array_equal(got, expected)
    # a limit below saturation keeps the clamp (and the bits)
    attrs["acc_limit"] = (limits // 4).tolist()
    assert _high_product_form(attrs) and not _clamp_implied(attrs)
    got, expected = _run(target, x, attrs)
    np.testing.assert_array_equal(got, expected)
