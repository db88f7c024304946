"""The requantizing epilogue as the shortest exact chain of ALU steps.

A ``Requantization`` of an accumulator ``acc`` (with ``x = clamp(acc + bias,
-limit, limit)``) is ``clamp(((x * multiplier + rounding) >> shift) + zero_point,
qmin, qmax)`` in wrapping int32: nine ALU passes over every output tile. The
weights are known at compile time and the inputs are int8, so each column's
accumulator lies in a known range, and on that range the same results come from

    c = clamp(acc, low, high)
    out = (c * multiplier + (bias * multiplier + rounding + (zero_point << shift))) >> shift

where ``[low + bias, high + bias]`` is the range of ``x`` whose output is not
saturated, widened to the reachable range where the output never saturates:

- inside it the reference's output clamp does nothing, and ``x`` never reaches
  ``+-limit``;
- outside it the reference saturates to exactly ``qmin``/``qmax``, which
  ``f(low + bias)``/``f(high + bias)`` must equal (they do when the scale is below
  one output step per accumulator step; otherwise the plan keeps the full chain);
- ``(c + bias) * m + r`` equals ``c * m + (bias * m + r)`` in wrapping arithmetic,
  and the true value fits int32 on the unsaturated range (checked, with the
  reference's own intermediate values), so the single shift is exact, and
  ``(y >> s) + z == (y + (z << s)) >> s`` for an arithmetic shift.

That is five passes (max, min, mul, add, shift); a clamp bound that the reachable
accumulators never cross is dropped, as are steps that do nothing (adding 0,
multiplying by 1, shifting by 0), and a constant that is the same in every column
and fits the ALU's 16-bit immediate becomes an immediate, which frees its
accumulator tiles. When a check fails, the plan is the full chain (with the same
simplifications). Columns past the real output channels (padding up to
``block_out``) are discarded, so they take column 0's constants, which keeps
uniform constants uniform.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from heterocc.accel_sim.reference_programs import Requantization

#: the ALU's signed immediate range
_IMMEDIATE = (-(1 << 15), (1 << 15) - 1)

#: (op, operand) pairs that leave the accumulator unchanged
_IDENTITIES = {("add", 0), ("mul", 1), ("shr", 0)}


@dataclass(frozen=True)
class EpilogueStep:
    """One ALU pass: ``acc = op(acc, operand)``, the operand one value per output column
    (``column``, kept in the accumulator buffer) or an immediate."""

    name: str
    op: str  # "add", "mul", "shr", "min" or "max"
    column: np.ndarray | None = None
    immediate: int | None = None
    #: a "mul" by a column: how far its exact product shifts right (the MUL's imm)
    product_shift: int = 0


def int8_accumulator_range(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(lowest, highest) value per row of ``w`` (N x K int8) that ``a @ w.T`` can take
    for any int8 vector ``a``."""
    # summed in int64 without an int64 copy of the weights (placement plans the epilogue
    # of every candidate to bound its cycles: ResNet-18's 11 MB of weights)
    w = np.asarray(w)
    positive = np.maximum(w, 0).sum(axis=1, dtype=np.int64)
    negative = np.minimum(w, 0).sum(axis=1, dtype=np.int64)
    return -128 * positive + 127 * negative, 127 * positive - 128 * negative


def _wrap(values: np.ndarray, bits: int) -> np.ndarray:
    half = 1 << (bits - 1)
    return (np.asarray(values, np.int64) + half) % (1 << bits) - half


def _pad(values, columns: int) -> np.ndarray:
    values = np.asarray(values, np.int64).reshape(-1)
    return np.concatenate([values, np.full(columns - len(values), values[0], np.int64)])


def _step(name: str, op: str, values: np.ndarray, product_shift: int = 0
          ) -> EpilogueStep | None:
    """The step with operand ``values``: an immediate when uniform and small, None when
    it does nothing. A product shift needs the operand in a column (the MUL's immediate
    field holds the shift)."""
    if product_shift:
        return EpilogueStep(name, op, column=values, product_shift=product_shift)
    first = int(values[0])
    if (values == first).all():
        if (op, first) in _IDENTITIES:
            return None
        if _IMMEDIATE[0] <= first <= _IMMEDIATE[1]:
            return EpilogueStep(name, op, immediate=first)
    return EpilogueStep(name, op, column=values)


def _full_chain(rq: Requantization) -> list[tuple]:
    limit = np.asarray(rq.limit, np.int64)
    return [("bias", "add", rq.bias), ("neg_limit", "max", -limit), ("limit", "min", limit),
            ("multiplier", "mul", rq.multiplier, rq.product_shift),
            ("rounding", "add", rq.rounding),
            ("shift", "shr", rq.shift), ("zero_point", "add", np.array([rq.zero_point])),
            ("qmin", "max", np.array([rq.qmin])), ("qmax", "min", np.array([rq.qmax]))]


def _short_chain(rq: Requantization, low: np.ndarray, high: np.ndarray,
                 acc_bits: int) -> list[tuple] | None:
    """The five-pass chain (see the module docstring) for accumulators in ``[low, high]``
    per column, or None when one of its conditions does not hold. With a product shift
    the bias cannot fold into the offset (the shifted product floors), so it is added
    first: six passes."""
    int_min, int_max = -(1 << (acc_bits - 1)), (1 << (acc_bits - 1)) - 1
    bias, limit, m, r, s = (np.asarray(v, np.int64).reshape(-1) for v in (
        rq.bias, rq.limit, rq.multiplier, rq.rounding, rq.shift))
    z = int(rq.zero_point)
    k = int(rq.product_shift)

    def fits(*values):
        return all(((v >= int_min) & (v <= int_max)).all() for v in values)

    if not (fits(low, high, low + bias, high + bias, m) and (m > 0).all()
            and ((s >= 0) & (s < acc_bits - 1)).all() and 0 <= k < 2 * acc_bits):
        return None
    x_low, x_high = np.clip(low + bias, -limit, limit), np.clip(high + bias, -limit, limit)
    # every intermediate of the reference and of the short chain, at both ends of the
    # reachable x (all are monotone in x); |x * m| < 2**62, exact in int64
    ends = [(x * m) >> k for x in (x_low, x_high)]
    ends += [p + r for p in ends[:2]] + [((p + r) >> s) + z for p in ends[:2]]
    ends += [p + r + (z << s) for p in ends[:2]]
    if not fits(*ends):
        return None

    def f(x):
        return ((((x * m) >> k) + r) >> s) + z

    # the widest unsaturated x: f(x) <= qmax  <=>  (x * m) >> k <= B  with
    # B = ((qmax - z + 1) << s) - r - 1  <=>  x * m <= ((B + 1) << k) - 1; and
    # f(x) >= qmin  <=>  (x * m) >> k >= C = ((qmin - z) << s) - r  <=>  x * m >= C << k
    above = ((rq.qmax - z + 1) << s) - r  # B + 1
    floor = ((rq.qmin - z) << s) - r  # C
    top = np.minimum(x_high, ((above << k) - 1) // m)
    bottom = np.maximum(x_low, -((-(floor << k)) // m))
    saturates_exactly = ((top == x_high) | (f(top) == rq.qmax)) & \
        ((bottom == x_low) | (f(bottom) == rq.qmin))
    if not (saturates_exactly & (bottom <= top)).all():
        return None
    chain = []
    if (bottom - bias > low).any():
        chain.append(("low", "max", bottom - bias))
    if (top - bias < high).any():
        chain.append(("high", "min", top - bias))
    if k:
        return chain + [("bias", "add", bias), ("multiplier", "mul", m, k),
                        ("offset", "add", r + (z << s)), ("shift", "shr", s)]
    offset = _wrap(bias * m + r + (z << s), acc_bits)
    return chain + [("multiplier", "mul", m), ("offset", "add", offset), ("shift", "shr", s)]


def plan_epilogue(requantization: Requantization, w: np.ndarray, columns: int,
                  acc_bits: int = 32) -> list[EpilogueStep]:
    """The ALU steps computing ``requantization`` of ``A @ w.T`` for every int8 ``A``,
    over ``columns`` output columns (``w``'s rows, then padding)."""
    n = len(np.asarray(requantization.multiplier).reshape(-1))
    low, high = int8_accumulator_range(w[:n])
    chain = _short_chain(requantization, low, high, acc_bits) or _full_chain(requantization)
    steps = [_step(name, op, _pad(values, columns), *rest) for name, op, values, *rest in chain]
    return [s for s in steps if s is not None]


def column_steps(steps: list[EpilogueStep]) -> list[EpilogueStep]:
    """The steps whose operand is a per-column constant (resident on chip)."""
    return [s for s in steps if s.column is not None]
