"""The CPU's rewrite of a function's ``ConvInteger`` computes before scheduling: dense
ones onto the 8-bit dot product (:mod:`.int8_conv`), depthwise ones onto int32
multiply-adds over packed rows (:mod:`.int8_depthwise`)."""

from __future__ import annotations

import numpy as np

from heterocc.sdk import CompileError, te

from ..cpu import CPUDescription
from .int8_conv import grouped_on_the_dot_product, int8_conv
from .int8_depthwise import int8_depthwise_conv
from .int8_rows import int8_rows_conv, row_tiles
from .matmul import reachable_computes


def int8_conv_operands(tensor: te.Tensor) -> dict | None:
    """The operands of a ``ConvInteger`` compute (its ``conv_integer`` attribute) when
    the CPU's integer kernels compute it: 8-bit data with a per-tensor zero point, int8
    weights with none, 2-D, dense (group 1), grouped by whole groups of four input
    channels (:func:`.int8_conv.grouped_on_the_dot_product`) or depthwise (group =
    channels = filters, ``depthwise`` set in the result); else None."""
    op = tensor.op
    described = op.attrs.get("conv_integer") if isinstance(op, te.ComputeOp) else None
    if described is None:
        return None
    x, w, x_zero = described["x"], described["w"], described["x_zero"]
    group = int(described["attrs"].get("group", 1))
    if (described["w_zero"] is not None or w.dtype != "int8" or x.ndim != 4 or w.ndim != 4
            or x.dtype not in ("int8", "uint8")
            or (x_zero is not None and int(np.prod(x_zero.shape)) != 1)):
        return None
    depthwise = group == x.shape[1] == w.shape[0] and w.shape[1] == 1 and group > 1
    if not depthwise and not grouped_on_the_dot_product(w.shape, group):
        return None
    return {**described, "depthwise": depthwise}


def use_int8_conv(tensor: te.Tensor, cpu: CPUDescription,
                  packed_weight: te.Tensor | None = None) -> None:
    """Make ``tensor`` (a ``ConvInteger`` compute :func:`int8_conv_operands` accepts)
    compute its sums by :func:`.int8_conv.int8_conv`, a product of rows by
    :func:`.int8_rows.int8_rows_conv` or, depthwise,
    :func:`.int8_depthwise.int8_depthwise_conv` (``packed_weight``: its weight packed at
    build time, by ``pack_int8_weight_array`` or ``pack_weight_lanes_array``)
    on ``cpu``."""
    described = int8_conv_operands(tensor)
    if described is None:
        raise CompileError(f"use_int8_conv: {tensor.name!r} is no ConvInteger the CPU's "
                           "integer kernels compute")
    operands = (described["x"], described["w"], described["x_zero"], described["attrs"],
                cpu, tensor.op.name)
    rows = None if described["depthwise"] else row_tiles(
        described["x"].shape, described["w"].shape, described["attrs"], cpu)
    if described["depthwise"]:
        new = int8_depthwise_conv(*operands, packed_weight)
    elif rows is not None:  # a product of rows: M one-pixel images
        new = int8_rows_conv(described["x"], described["w"], described["x_zero"], cpu,
                             tensor.op.name, packed_weight, rows)
    else:
        new = int8_conv(*operands, packed_weight)
    tensor.op = new.op


def use_int8_convs(outputs, cpu: CPUDescription) -> None:
    """:func:`use_int8_conv` on every ``ConvInteger`` compute that computing ``outputs``
    reads and the CPU's integer kernels compute."""
    for tensor in reachable_computes(outputs):
        if int8_conv_operands(tensor) is not None:
            use_int8_conv(tensor, cpu)
