"""Elementwise stages of an NCHW[x]c tensor that choose by channel block: a channel
concatenation of blocked tensors (and the activations fused after it) picks its source
by the channel-block index, so the stage runs one channel block per outer iteration, in
parallel, with the block's pixels and lanes as one inner vectorized loop. The choice is
then invariant in the inner loop (LLVM hoists it out), and every vector reads one
source's contiguous pixels, where a flat loop decides the source again for every
vector."""

from __future__ import annotations

import numpy as np

from heterocc.sdk import te

from ..cpu import CPUDescription
from .common import PARALLEL_MIN_ELEMENTS, schedule_injective, vector_lanes


def schedule_channel_blocks(schedule: te.Schedule, tensor: te.Tensor,
                            cpu: CPUDescription) -> None:
    """Run 5-D ``tensor`` (``[n, c // b, h, w, b]``) with its batch and channel-block
    axes fused into the outer loop (in parallel when the tensor is large) and the rest
    fused into one vectorized inner loop; with fewer channel blocks than ``cpu`` has
    cores, the flat schedule (:func:`schedule_injective`) keeps every core busy
    instead."""
    stage = schedule[tensor]
    batch, blocks, *inner = stage.op.axis
    outer_extent = int(tensor.shape[0]) * int(tensor.shape[1])
    if outer_extent < cpu.num_cores:
        schedule_injective(schedule, tensor, cpu)
        return
    outer = stage.fuse(batch, blocks)
    flat = stage.fuse(*inner)
    lanes = min(vector_lanes(tensor.dtype, cpu), int(np.prod(tensor.shape[2:])))
    _, vector = stage.split(flat, factor=lanes)
    stage.vectorize(vector)
    if int(np.prod(tensor.shape)) >= PARALLEL_MIN_ELEMENTS:
        stage.parallel(outer)
