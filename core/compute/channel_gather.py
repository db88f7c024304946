"""The TE compute of ``ChannelGather``: per output channel, a load from the input that
holds its source channel (the source index read from a constant table)."""

from __future__ import annotations

import numpy as np

from .. import te
from .registry import register_compute


@register_compute("ChannelGather")
def channel_gather(inputs, attrs, out_types):
    channels = np.asarray(attrs["channels"], np.int64)
    table = te.constant_tensor(channels, "channel_gather_sources", "int64")
    offsets = np.cumsum([0] + [x.shape[1] for x in inputs])

    def body(n, c, *rest):
        source = table[c]
        value = None
        for x, start in zip(inputs, offsets[:-1]):
            # if_then_else reads only the side it selects: no index clamping needed
            load = x[(n, source - int(start), *rest)]
            value = load if value is None else te.if_then_else(source >= int(start), load,
                                                               value)
        return value

    return [te.compute(out_types[0].shape, body, name="channel_gather",
                       dtype=out_types[0].dtype)]
