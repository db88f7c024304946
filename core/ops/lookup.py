"""``LookupTable``: an int8 tensor mapped element by element through a 256-entry table.

The ``lookup_tables`` pass writes a quantized element-wise function (a Sigmoid, a
HardSwish, ``x * sigmoid(x)``, ... between a DequantizeLinear and a QuantizeLinear)
as this op, its table computed by the graph's own operators on all 256 inputs.
"""

from __future__ import annotations

import numpy as np

from ..ir.types import TensorType
from .registry import FusionKind, InferContext, register_op

#: entries of a table: one per int8 value, entry k for the value k - 128
TABLE_ENTRIES = 256
TABLE_OFFSET = 128


def _infer_lookup_table(ctx: InferContext):
    x, table = ctx.type(0), ctx.type(1)
    if x.dtype != "int8":
        raise ctx.error(f"input is {x.dtype}; LookupTable indexes its table with int8 values")
    if table.dtype != "int8" or tuple(table.shape) != (TABLE_ENTRIES,):
        raise ctx.error(f"the table is {table.dtype}{list(table.shape)}; it must be "
                        f"int8[{TABLE_ENTRIES}] (one entry per int8 value)")
    return [TensorType(x.shape, "int8")]


@register_op("LookupTable", infer=_infer_lookup_table, fusion=FusionKind.ELEMWISE,
             attrs={"absorbed": []})
def lookup_table(x, table, *, absorbed):
    """int8 -> int8: ``table[x + 128]`` (entry ``k`` is the result for the value
    ``k - 128``).

    ``absorbed`` names the ops (``"Op:node"``) the table computes, so that placement
    reports still show where they ran; it changes nothing.
    """
    return np.asarray(table, np.int8)[np.asarray(x, np.int64) + TABLE_OFFSET]
