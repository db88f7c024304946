"""Requantize (core/compute/qnn.py): bit-exact with its NumPy reference through the llvm
target, wrapping as the accelerator's ALU does."""

from __future__ import annotations

import numpy as np
import pytest

from tests.compute.test_elementwise import assert_same, check, random_array, run_compiled


@pytest.mark.parametrize("out_dtype,qmin,qmax", [
    ("int8", -128, 127), ("uint8", 0, 255), ("int8", 0, 127), ("int16", -32768, 32767),
    ("int32", -2 ** 31, 2 ** 31 - 1)])
def test_requantize_per_tensor_wraps_like_the_alu(out_dtype, qmin, qmax, rng):
    x = random_array(rng, (2, 3, 4, 5), "int32")
    x.reshape(-1)[:4] = [-2 ** 31, 2 ** 31 - 1, 0, -1]
    x.reshape(-1)[4:60] //= 2 ** 16  # a share of realistic accumulators
    nodes = [("Requantize", {"multiplier": multiplier, "shift": shift, "zero_point": -7,
                             "qmin": qmin, "qmax": qmax, "out_dtype": out_dtype,
                             "acc_limit": acc_limit})
             for multiplier, shift, acc_limit in [
                 (1, 0, 2 ** 31 - 1), (19077, 22, 2 ** 31 - 1),
                 (1 << 20, 31, 2 ** 31 - 1),  # the product wraps
                 (-3000, 9, 2 ** 40), (25000, 16, 50000), (7, 1, 0)]]
    got, expected = run_compiled(nodes, [x])
    assert_same(got, expected)


def test_requantize_per_channel(rng):
    channels = 7
    x = random_array(rng, (2, channels, 3, 3), "int32", -2 ** 20, 2 ** 20)
    attrs = {"multiplier": rng.integers(1, 2 ** 15, channels).tolist(),
             "shift": rng.integers(0, 32, channels).tolist(), "zero_point": 5,
             "qmin": -100, "qmax": 120, "out_dtype": "int8",
             "acc_limit": rng.integers(1000, 2 ** 31 - 1, channels).tolist()}
    check("Requantize", [x], attrs)
    got, expected = run_compiled([("Requantize", {**attrs, "acc_limit": 2 ** 31 - 1})], [x])
    assert_same(got, expected)


@pytest.mark.parametrize("shape,axis", [((6, 7), 1), ((1, 6, 7), 2), ((1, 6, 7), -1),
                                        ((2, 3, 4, 7), 3), ((2, 7, 3, 3), 1)])
def test_requantize_per_channel_along_its_axis(rng, shape, axis):
    """A matrix product's channels are its last axis, whatever its rank."""
    channels = shape[axis]
    x = random_array(rng, shape, "int32", -2 ** 15, 2 ** 15)  # products fit int32
    attrs = {"multiplier": rng.integers(1, 2 ** 15, channels).tolist(),
             "shift": rng.integers(10, 24, channels).tolist(), "zero_point": -3,
             "qmin": -128, "qmax": 127, "out_dtype": "int8", "acc_limit": 2 ** 31 - 1,
             "axis": axis}
    got, expected = run_compiled([("Requantize", attrs)], [x])
    assert_same(got, expected)
    multiplier = np.asarray(attrs["multiplier"], np.int64).reshape(
        [-1 if d == axis % len(shape) else 1 for d in range(len(shape))])
    by_hand = (x.astype(np.int64) * multiplier  # one channel's multiplier along the axis
               + (1 << (np.asarray(attrs["shift"]).reshape(multiplier.shape) - 1))) \
        >> np.asarray(attrs["shift"]).reshape(multiplier.shape)
    np.testing.assert_array_equal(expected[0], np.clip(by_hand - 3, -128, 127).astype(np.int8))


def test_requantize_shift_out_of_range_falls_back():
    from heterocc.ir.graph import Graph, Node, Value
    from heterocc.ir.types import TensorType
    from heterocc.targets.llvm.target import LLVMTarget

    x, y = Value("x", TensorType((4,), "int32")), Value("y", TensorType((4,), "int8"))
    attrs = {"multiplier": 3, "shift": 40, "zero_point": 0, "qmin": -128, "qmax": 127,
             "out_dtype": "int8", "acc_limit": 2 ** 31 - 1}
    target = LLVMTarget()
    target.build(Node("function", [x], [y], name="f",
                      body=Graph([x], [y], [Node("Requantize", [x], [y], attrs)])))
    assert "shift" in target.fallbacks["f"]


@pytest.mark.parametrize("axis", [1, -1])
def test_requantize_product_shift_is_exact_in_64_bits(rng, axis):
    """A 31-bit multiplier with a product shift: the int64 product shifted back into
    int32, bit-exact between the TE compute and the reference, and equal to
    round(acc * scale) but at exact ties."""
    from heterocc.ops.qnn import precise_fixed_point_scale

    shape = (2, 5, 3, 6)
    channels = shape[axis]
    scales = rng.uniform(2e-5, 3e-3, channels)
    limits = np.ceil(260 / scales).astype(np.int64)
    multipliers, product_shift, shifts = precise_fixed_point_scale(scales, limits)
    assert product_shift > 0 and max(multipliers) >= 1 << 29
    x = random_array(rng, shape, "int32", -2 ** 22, 2 ** 22)
    x.reshape(-1)[:2] = [-2 ** 31, 2 ** 31 - 1]  # clamped to +-acc_limit first
    attrs = {"multiplier": multipliers, "shift": shifts, "zero_point": 3, "qmin": -128,
             "qmax": 127, "out_dtype": "int8", "acc_limit": limits.tolist(), "axis": axis,
             "product_shift": product_shift}
    got, expected = run_compiled([("Requantize", attrs)], [x])
    assert_same(got, expected)
    along = [-1 if d == axis % len(shape) else 1 for d in range(len(shape))]
    clipped = np.clip(x, -limits.reshape(along), limits.reshape(along))
    exact = np.clip(np.floor(clipped * scales.reshape(along) + 0.5) + 3, -128, 127)
    near_tie = np.abs(np.abs(clipped * scales.reshape(along)) % 1 - 0.5) < 1e-5
    assert (expected[0] != exact)[~near_tie].sum() == 0


def _precise_scale_by_definition(scales, limits):
    """``precise_fixed_point_scale`` channel by channel, as its docstring defines it:
    each shift the largest in [0, 31] keeping (limit * scale + 1) * 2**shift <= 2**30,
    the product shift the smallest that ``shifted_multiplier`` allows any channel."""
    from heterocc.ops.qnn import PRECISE_MULTIPLIER_BITS, shifted_multiplier

    shifts = []
    for scale, limit in zip(scales, limits):
        shift = 0
        while shift < 31 and (max(int(limit), 1) * scale + 1) * 2.0 ** (shift + 1) <= 2 ** 30:
            shift += 1
        shifts.append(shift)
    product_shift = min(shifted_multiplier(s, k)[1] for s, k in zip(scales, shifts))
    ceiling = (1 << PRECISE_MULTIPLIER_BITS) - 1
    return ([max(1, min(ceiling, round(s * 2.0 ** (k + product_shift))))
             for s, k in zip(scales, shifts)], product_shift, shifts)


def test_precise_fixed_point_scale_matches_its_definition_channel_by_channel(rng):
    """The per-channel shifts and multipliers, computed on arrays (a network has tens of
    thousands of channels), equal the channel-by-channel definition, including scales
    and limits at powers of two (where the shift's bound is met exactly)."""
    from heterocc.ops.qnn import precise_fixed_point_scale

    for trial in range(300):
        count = int(rng.integers(1, 20))
        scales = np.exp(rng.uniform(np.log(1e-9), np.log(1e3), count))
        limits = rng.integers(1, 2 ** 31 - 1, count)
        if trial % 3 == 0:
            scales = np.ldexp(rng.choice([1.0, 0.75, 0.5], count), rng.integers(-30, 5, count))
            limits = np.left_shift(1, rng.integers(0, 30, count)) - rng.integers(0, 2, count)
        got = precise_fixed_point_scale(scales, limits)
        assert got == _precise_scale_by_definition(scales.tolist(), limits.tolist())
        assert all(type(v) is int for v in got[0] + got[2]) and type(got[1]) is int
    assert precise_fixed_point_scale(0.01, 100) == ([1374389535], 8, [29])
    with pytest.raises(ValueError, match="positive and finite, got nan"):
        precise_fixed_point_scale([0.5, np.nan], [3, 3])


def test_requantize_functions_differing_only_in_tables_share_one_kernel_with_their_own(rng):
    """A per-channel multiplier, shift or accumulator limit whose values differ by channel
    reaches the kernel as a table: functions differing only there compile once, each
    kernel called with its own tables (bit-exact); an immediate (one value throughout),
    another zero point or values the compute refuses give a kernel of their own."""
    from heterocc.ir.graph import Graph, Node, Value
    from heterocc.ir.types import TensorType
    from heterocc.ops import get_op
    from heterocc.targets.llvm.target import LLVMKernel, LLVMTarget

    channels = 6
    x = random_array(rng, (1, channels, 4, 4), "int32", -2 ** 20, 2 ** 20)

    def per_channel(low, high):
        return rng.integers(low, high, channels).tolist()

    def attrs(**changes):
        return {"multiplier": per_channel(1, 2 ** 15), "shift": per_channel(8, 24),
                "zero_point": 3, "qmin": -128, "qmax": 127, "out_dtype": "int8",
                "acc_limit": per_channel(2 ** 18, 2 ** 21), **changes}

    cases = [attrs(), attrs(), attrs(), attrs(shift=[12] * channels), attrs(zero_point=-4),
             attrs(shift=[40] + [12] * (channels - 1))]
    target = LLVMTarget()
    for k, case in enumerate(cases):
        case = get_op("Requantize").normalize_attrs(case)
        v, y = Value("x", TensorType(x.shape, "int32")), Value("y", TensorType(x.shape, "int8"))
        function = Node("function", [v], [y], name=f"f{k}",
                        body=Graph([v], [y], [Node("Requantize", [v], [y], case)]))
        kernel = target.build(function)
        if k == len(cases) - 1:
            assert "shift" in target.fallbacks[f"f{k}"]
            continue
        assert isinstance(kernel, LLVMKernel), target.fallbacks
        (expected,) = get_op("Requantize").run([x], case)
        assert_same(kernel([x]), [expected])
    assert target.distinct_kernels == 3  # the tables; shifts as immediates; zero point -4
