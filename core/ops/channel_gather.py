"""``ChannelGather``: output channels picked from the channels of several tensors.

The ``channel_gathers`` pass writes a cluster of pure data-movement ops between
4-D tensors (a channel shuffle's Reshape-Transpose-Reshape, the Slices that split its
result, the Concat before it) as one such op per tensor leaving the cluster: each
output channel is one input channel, found by running the cluster's own ops on the
positions of the inputs' elements, so it is exact by construction.
"""

from __future__ import annotations

import numpy as np

from ..ir.types import TensorType
from .registry import FusionKind, InferContext, register_op


def _infer_channel_gather(ctx: InferContext):
    count = len(ctx.types)
    if count == 0:
        raise ctx.error("no inputs")
    first = ctx.type(0)
    if first.ndim < 2:
        raise ctx.error(f"input 0 is {first.ndim}-D; channels are axis 1 of an (N, C, ...) "
                        "tensor")
    total = 0
    for i in range(count):
        t = ctx.type(i)
        if t.dtype != first.dtype or t.ndim != first.ndim or \
                t.shape[:1] + t.shape[2:] != first.shape[:1] + first.shape[2:]:
            raise ctx.error(f"input {i} is {t.dtype}{list(t.shape)}; every input must be "
                            f"{first.dtype} and match input 0 {list(first.shape)} on all "
                            "axes but the channels (axis 1)")
        total += t.shape[1]
    channels = ctx.attrs["channels"]
    bad = [c for c in channels if not 0 <= c < total]
    if not channels or bad:
        raise ctx.error(f"channels {bad[:4] if bad else []} out of range: each must index "
                        f"the {total} channels of the inputs taken one after the other")
    return [TensorType((first.shape[0], len(channels), *first.shape[2:]), first.dtype)]


@register_op("ChannelGather", infer=_infer_channel_gather, fusion=FusionKind.INJECTIVE,
             attrs={"channels": [], "absorbed": []})
def channel_gather(*inputs, channels, absorbed):
    """Output channel ``k`` is channel ``channels[k]`` of the inputs concatenated along
    axis 1 (``Gather(Concat(x0, x1, ...), channels, axis=1)`` without the Concat).

    ``absorbed`` names the data-movement ops (``"Op:node"``) the gather stands for, so
    that placement reports still show where they ran; it changes nothing."""
    return np.take(np.concatenate([np.asarray(x) for x in inputs], axis=1),
                   np.asarray(channels, np.int64), axis=1)
