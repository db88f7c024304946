"""The planned requantizing epilogue: shorter ALU chains with bit-identical results."""

import numpy as np
import pytest

from heterocc.accel_sim import HardwareConfig
from heterocc.accel_sim.isa import Alu
from heterocc.accel_sim.reference_programs import GemmTiling, Requantization
from heterocc.ops.qnn import precise_fixed_point_scale, requantize_int
from heterocc.targets.vta.epilogue import int8_accumulator_range, plan_epilogue
from heterocc.targets.vta.templates import gemm_program

CONFIG = HardwareConfig()


def _requantization(rng, w, multiplier_bits=(12, 14), shift=22, zero_point=3, limit=None):
    """Like the quantization pass: per-column multipliers below 1 output step per
    accumulator step, and the clamp limit where the output saturates."""
    n = w.shape[0]
    multiplier = rng.integers(1 << multiplier_bits[0], 1 << multiplier_bits[1], n)
    if limit is None:
        limit = np.ceil(130 * 2.0 ** shift / multiplier).astype(np.int64) + 1
    return Requantization(
        bias=rng.integers(-5000, 5000, n), limit=np.broadcast_to(limit, (n,)).astype(np.int64),
        multiplier=multiplier, rounding=np.full(n, 1 << (shift - 1)), shift=np.full(n, shift),
        zero_point=zero_point, qmin=-128, qmax=127)


def _precise_requantization(rng, w, zero_point=3, scale=(2e-5, 4e-4)):
    """As the quantization pass makes them now: 31-bit multipliers with a product shift
    (``precise_fixed_point_scale``), clamped where the output saturates."""
    n = w.shape[0]
    scales = rng.uniform(*scale, n)
    limit = np.ceil(260 / scales).astype(np.int64) + 1
    multiplier, product_shift, shift = precise_fixed_point_scale(scales, limit)
    shift = np.asarray(shift, np.int64)
    return Requantization(
        bias=rng.integers(-5000, 5000, n), limit=limit, multiplier=np.asarray(multiplier),
        rounding=1 << (shift - 1), shift=shift, zero_point=zero_point, qmin=-128, qmax=127,
        product_shift=product_shift)


def _reference(acc, rq):
    """requantize_int (the NumPy reference of Requantize) of int32 ``acc`` + bias."""
    return requantize_int((acc + rq.bias).astype(np.int32), rq.multiplier.tolist(),
                          rq.shift.tolist(), rq.zero_point, rq.qmin, rq.qmax,
                          rq.limit.tolist(), product_shift=rq.product_shift)


def _expected(a, w, rq):
    """The Requantize operator's int32 pipeline (the NumPy reference) after the bias add."""
    return _reference(a.astype(np.int64) @ w.astype(np.int64).T, rq)


def _run(program, a):
    program.write("A", a)
    program.run()
    return program.read("C")


def _extreme_inputs(w, rows, rng):
    """Rows of A that drive columns to their accumulator bounds, then random rows."""
    towards_high = np.where(w >= 0, 127, -128).astype(np.int8)
    towards_low = np.where(w >= 0, -128, 127).astype(np.int8)
    random = rng.integers(-128, 128, (rows, w.shape[1])).astype(np.int8)
    return np.concatenate([towards_high, towards_low, random])[:rows]


def test_accumulator_range_is_tight():
    w = np.array([[3, -2, 0], [-128, -128, 127]], np.int8)
    low, high = int8_accumulator_range(w)
    assert low.tolist() == [3 * -128 + -2 * 127, -128 * 127 * 2 + 127 * -128]
    assert high.tolist() == [3 * 127 + -2 * -128, -128 * -128 * 2 + 127 * 127]


_ALU = {"add": np.add, "mul": np.multiply, "shr": np.right_shift, "min": np.minimum,
        "max": np.maximum}


def _apply(steps, acc, columns):
    """The ALU's wrapping int32 semantics of the planned steps, on accumulators (rows x N)."""
    acc = acc.astype(np.int64)
    for step in steps:
        y = step.immediate if step.column is None else step.column[:columns]
        acc = _ALU[step.op](acc, y) >> step.product_shift
        acc = (acc + (1 << 31)) % (1 << 32) - (1 << 31)
    return acc


def _reachable_accumulators(w, rng):
    """Each column's extreme accumulators, their neighbours and random values in between."""
    low, high = int8_accumulator_range(w)
    picks = [low, low + 1, high - 1, high] + [rng.integers(low, high + 1) for _ in range(64)]
    return np.stack(picks)


@pytest.mark.parametrize("seed", range(40))
def test_plans_agree_with_the_requantize_operator_on_every_reachable_accumulator(seed):
    rng = np.random.default_rng(seed)
    n, k = 24, int(rng.integers(4, 300))
    w = rng.integers(-128, 128, (n, k)).astype(np.int8)
    if seed % 4 == 1:
        w //= 64  # small weights: outputs that never saturate
    bits = [(12, 14), (4, 8), (20, 24), (24, 31)][seed % 4 if seed % 8 < 4 else 0]
    limit = None if seed % 3 else np.int64(2 ** 31 - 1)
    rq = _requantization(rng, w, bits, shift=int(rng.integers(8, 24)),
                         zero_point=int(rng.integers(-20, 20)), limit=limit)
    acc = _reachable_accumulators(w, rng)
    expected = requantize_int((acc + rq.bias).astype(np.int32), rq.multiplier.tolist(),
                              rq.shift.tolist(), rq.zero_point, rq.qmin, rq.qmax,
                              rq.limit.tolist())
    np.testing.assert_array_equal(_apply(plan_epilogue(rq, w, 32), acc, n), expected)


def test_saturating_requantization_takes_five_passes():
    rng = np.random.default_rng(0)
    w = rng.integers(-128, 128, (32, 576)).astype(np.int8)
    steps = plan_epilogue(_requantization(rng, w), w, 32)
    assert [(s.op, s.immediate) for s in steps] == [
        ("max", None), ("min", None), ("mul", None), ("add", None), ("shr", 22)]


def test_clamps_that_are_never_reached_are_dropped():
    rng = np.random.default_rng(1)
    w = rng.integers(-2, 2, (32, 16)).astype(np.int8)
    steps = plan_epilogue(_requantization(rng, w), w, 32)
    assert [s.op for s in steps] == ["mul", "add", "shr"]


def test_products_that_overflow_keep_the_full_chain():
    rng = np.random.default_rng(2)
    w = rng.integers(-128, 128, (32, 576)).astype(np.int8)
    steps = plan_epilogue(_requantization(rng, w, (24, 30), limit=1 << 20), w, 32)
    assert [s.name for s in steps] == ["bias", "neg_limit", "limit", "multiplier", "rounding",
                                       "shift", "zero_point", "qmin", "qmax"]


def test_identities_vanish_and_uniform_constants_become_immediates():
    w = np.ones((20, 16), np.int8)  # accumulators in [-2048, 2032]
    zeros, ones = np.zeros(20, np.int64), np.ones(20, np.int64)
    rq = Requantization(zeros, ones * (1 << 30), ones * 77, zeros, ones * 8, 0, -128, 127)
    steps = plan_epilogue(rq, w, 32)  # 12 padding columns take column 0's constants
    # the offset (bias * 77 + rounding + zero point) is 0; (425 * 77) >> 8 == 127
    assert [(s.op, s.immediate) for s in steps] == [("max", -425), ("min", 425), ("mul", 77),
                                                    ("shr", 8)]


@pytest.mark.parametrize("seed", range(24))
def test_precise_plans_agree_with_the_requantize_operator(seed):
    """31-bit multipliers with a product shift: the planned chain (six passes, the bias
    before the shifted MUL) equals the reference on every reachable accumulator."""
    rng = np.random.default_rng(seed)
    n, k = 24, int(rng.integers(4, 300))
    w = rng.integers(-128, 128, (n, k)).astype(np.int8)
    if seed % 4 == 1:
        w //= 64
    rq = _precise_requantization(rng, w, zero_point=int(rng.integers(-128, 128)),
                                 scale=[(2e-5, 4e-4), (1e-3, 0.05), (1e-6, 1e-5)][seed % 3])
    acc = _reachable_accumulators(w, rng)
    steps = plan_epilogue(rq, w, 32)
    np.testing.assert_array_equal(_apply(steps, acc, n), _reference(acc, rq))
    assert [s.product_shift for s in steps if s.op == "mul"] == [rq.product_shift]


def test_precise_requantization_rounds_as_the_float_scale():
    """Against round(acc * scale) (the float form ORT computes): equal but at near-ties,
    where a 15-bit multiplier in an int32 product is steps away."""
    rng = np.random.default_rng(5)
    w = rng.integers(-128, 128, (16, 256)).astype(np.int8)
    rq = _precise_requantization(rng, w, zero_point=0)
    rq = Requantization(**{**rq.__dict__, "bias": np.zeros(16, np.int64)})
    scales = rq.multiplier / 2.0 ** (rq.product_shift + rq.shift)  # the scales it stands for
    acc = _reachable_accumulators(w, rng)
    exact = np.clip(np.floor(acc * scales + 0.5), -128, 127)
    near_tie = np.abs(np.abs(acc * scales) % 1 - 0.5) < 1e-4
    got = _apply(plan_epilogue(rq, w, 32), acc, 16)
    assert (got != exact)[~near_tie].sum() == 0


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", ["saturating", "unsaturated", "overflowing", "precise"])
def test_planned_epilogue_is_bit_exact_on_the_simulator(case, threads):
    rng = np.random.default_rng(len(case))
    rows, k, n = 12, 96, 48
    w = rng.integers(-128, 128, (n, k)).astype(np.int8)
    if case == "unsaturated":
        w //= 64
    rq = _requantization(rng, w, (24, 30), limit=1 << 20) if case == "overflowing" \
        else _precise_requantization(rng, w) if case == "precise" \
        else _requantization(rng, w)
    a = _extreme_inputs(w, rows, rng)
    program = gemm_program(CONFIG, rows, w, GemmTiling(3, 1, 3), threads, rq)
    np.testing.assert_array_equal(_run(program, a), _expected(a, w, rq))
    alu = [i for i in program.instructions if isinstance(i, Alu)]
    tasks = (rows // 3) * (n // CONFIG.block_out)
    assert len(alu) == tasks * {"saturating": 5, "unsaturated": 3, "overflowing": 9,
                                "precise": 6}[case]
