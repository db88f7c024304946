"""TE compute of ``LayoutTransform`` (NCHW <-> NCHW[x]c)."""

from __future__ import annotations

from .. import te
from ..ops.layout import layout_block
from .common import require_native
from .registry import register_compute


@register_compute("LayoutTransform")
def layout_transform(inputs, attrs, out_types):
    """Each output element read from its channel's place in the source layout."""
    (x,) = inputs
    out = out_types[0]
    require_native([x.dtype], "LayoutTransform")
    src, dst = layout_block(attrs["src_layout"]), layout_block(attrs["dst_layout"])

    def read(n, channel, y, xx):
        if not src:
            return x[n, channel, y, xx]
        return x[n, channel // src, y, xx, channel % src]

    if dst:
        def body(n, outer, y, xx, inner):
            return read(n, outer * dst + inner, y, xx)
    else:
        body = read
    # Tagged so the CPU target runs it row by row: a flat vectorized loop would need
    # vector division to recover the channel of each lane.
    return [te.compute(out.shape, body, name="layout_transform", dtype=out.dtype,
                       attrs={"schedule": "layout_transform"})]
