"""The TE compute of ``LookupTable``: one gather from the 256-entry table per element."""

from __future__ import annotations

from .. import te
from ..ops.lookup import TABLE_OFFSET
from .registry import register_compute


@register_compute("LookupTable")
def lookup_table(inputs, attrs, out_types):
    x, table = inputs[:2]
    offset = te.const(TABLE_OFFSET, "int32")
    return [te.compute(out_types[0].shape,
                       lambda *i: table[te.cast("int32", x[i]) + offset],
                       name="lookup_table", dtype="int8")]
