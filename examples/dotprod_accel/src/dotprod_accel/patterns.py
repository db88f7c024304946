"""What the array accepts: int8 dense layers (MatMulInteger with constant weights,
optionally followed by a constant bias Add) whose int16 accumulators provably
cannot wrap, and whose operands fit the on-chip memories."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from heterocc.sdk import CompositePattern, Node, is_constant, is_op, optional, wildcard

from .codegen import round_up
from .isa import DEPTH, LANES, MachineConfig

INT16_MAX = np.iinfo(np.int16).max
INT16_MIN = np.iinfo(np.int16).min
INT8_MAX = np.iinfo(np.int8).max
INT8_MIN = np.iinfo(np.int8).min

# zero points: any; the check takes only absent or zero ones (_operand_reason)
_DENSE = is_op("MatMulInteger")(wildcard(), is_constant(), optional(wildcard()),
                                optional(wildcard()))
_DENSE_BIAS = is_op("Add")(_DENSE, is_constant())


def accumulator_range(weights: np.ndarray, bias: np.ndarray | None) -> tuple[int, int]:
    """Smallest and largest value any accumulator can hold, for any int8 input.

    Per output channel, the extreme sums take x = 127 or -128 by the sign of each
    weight; every partial sum (any subset of the products) lies between them, so
    checking the full sums, with and without the bias, covers every add the
    array does.
    """
    w = weights.astype(np.int64)
    high = np.where(w > 0, INT8_MAX * w, INT8_MIN * w).sum(axis=0)
    low = np.where(w > 0, INT8_MIN * w, INT8_MAX * w).sum(axis=0)
    b = np.zeros_like(high) if bias is None else np.broadcast_to(
        bias.astype(np.int64).reshape(-1), high.shape)
    return int(min(low.min(), (low + b).min(), 0)), int(max(high.max(), (high + b).max(), 0))


def _operand_reason(matmul: Node) -> str | None:
    x, w = matmul.inputs[0], matmul.inputs[1]
    if x.type.dtype != "int8" or w.type.dtype != "int8":
        return f"operands are {x.type.dtype} x {w.type.dtype}; the array multiplies int8 x int8"
    if x.type.ndim != 2 or w.type.ndim != 2:
        return "batched matmul (the array takes 2-D operands)"
    if not all(isinstance(d, int) for d in x.type.shape):
        return f"input shape {x.type.shape} is not static"
    for k, zero_point in enumerate(matmul.inputs[2:4], start=2):
        if zero_point is not None and (not zero_point.is_const or zero_point.data.any()):
            return f"input {k} is a non-zero zero point (the array is symmetric int8)"
    return None


def _bias_reason(add: Node, channels: int) -> str | None:
    bias = add.inputs[1].data
    if bias.dtype != np.int32 or bias.size not in (1, channels) or \
            (bias.ndim > 1 and bias.shape[-1] != bias.size):
        return f"bias of shape {bias.shape} ({bias.dtype}) is not one int32 per output channel"
    return None


def _capacity_reason(rows: int, depth: int, channels: int, has_bias: bool,
                     config: MachineConfig) -> str | None:
    depth, channels = round_up(depth, DEPTH), round_up(channels, LANES)
    needs = {"inp": (rows * depth, config.inp_depth),
             "wgt": (channels * depth, config.wgt_depth),
             "acc": (rows * channels * (2 if has_bias else 1) + channels * has_bias,
                     config.acc_depth)}
    for memory, (need, have) in needs.items():
        if need > have:
            return f"needs {need} elements of {memory}, which holds {have}"
    return None


def dense_checker(config: MachineConfig) -> Callable[[list[Node]], str | None]:
    """The check of the dense pattern rows for a machine of ``config``."""

    def check(nodes: list[Node]) -> str | None:
        matmul = nodes[0]
        reason = _operand_reason(matmul)
        add = nodes[1] if len(nodes) > 1 else None
        weights = matmul.inputs[1].data
        if reason is None and add is not None:
            reason = _bias_reason(add, weights.shape[1])
        if reason is not None:
            return reason
        low, high = accumulator_range(weights, None if add is None else add.inputs[1].data)
        if low < INT16_MIN or high > INT16_MAX:
            return (f"int16 accumulators could reach [{low}, {high}] and wrap; the array takes "
                    "layers whose per-channel sum of |weights| (plus bias) keeps them within "
                    f"[{INT16_MIN}, {INT16_MAX}]")
        rows, depth = matmul.inputs[0].type.shape
        return _capacity_reason(rows, depth, weights.shape[1], add is not None, config)

    return check


def pattern_table(config: MachineConfig) -> list[CompositePattern]:
    """The array's pattern rows, largest first."""
    check = dense_checker(config)
    return [CompositePattern("dense_bias", _DENSE_BIAS, check),
            CompositePattern("dense", _DENSE, check)]
