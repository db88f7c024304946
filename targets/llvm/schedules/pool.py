"""Pooling of an NCHW[x]c tensor (``schedule_pool_nchwc``): one vector per output pixel
over the channel block."""

from __future__ import annotations

import numpy as np

from heterocc.sdk import CompileError, te

from ..cpu import CPUDescription
from .common import PARALLEL_MIN_ELEMENTS


def schedule_pool_nchwc(schedule: te.Schedule, pool: te.Tensor,
                        cpu: CPUDescription) -> None:
    """Pooling of an NCHW[x]c tensor (``pool[n, c, y, x, b]`` reduced over a window of
    rows and columns): rows of output pixels in parallel, each pixel one vector over the
    channel block, reduced over its window with one vector max/add per tap."""
    stage = schedule[pool]
    if len(stage.op.axis) != 5 or len(stage.op.reduce_axis) != 3:
        raise CompileError(f"schedule_pool_nchwc: {pool.name!r} is not a blocked 2-D pool")
    n, c, y, x, block = stage.op.axis
    stage.reorder(n, c, y, x, *stage.op.reduce_axis, block)
    stage.vectorize(block)
    if int(np.prod(pool.shape)) >= PARALLEL_MIN_ELEMENTS:
        stage.parallel(stage.fuse(n, c, y))


