"""Pooling on the CPU: of an NCHW[x]c tensor (``schedule_pool_nchwc``), one vector per
output pixel over the channel block; of an NCHW tensor (``schedule_pool_nchw``: an
int8 model's pools, which stay in NCHW), rows of output pixels with the window's taps
outside them."""

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




def schedule_pool_nchw(schedule: te.Schedule, pool: te.Tensor, padded: te.Tensor | None,
                       cpu: CPUDescription) -> None:
    """Pooling of an NCHW tensor (``pool[n, c, y, x]`` reduced over a window of rows and
    columns): the padded input (``padded``, when the pool reads a padding stage) copied
    ahead, so the window reads need no guards; rows of output pixels in parallel, each
    row updated tap by tap over all its pixels, a loop LLVM vectorizes (a strided
    window's reads are interleaved loads)."""
    stage = schedule[pool]
    if len(stage.op.axis) != 4 or len(stage.op.reduce_axis) != 2:
        raise CompileError(f"schedule_pool_nchw: {pool.name!r} is not a 2-D NCHW pool")
    if padded is not None:
        pad_stage = schedule[padded]
        pad_stage.compute_root()
        n, c, *_ = pad_stage.op.axis
        pad_stage.parallel(pad_stage.fuse(n, c))
    n, c, y, x = stage.op.axis
    stage.reorder(n, c, y, *stage.op.reduce_axis, x)
    if int(np.prod(pool.shape)) >= PARALLEL_MIN_ELEMENTS:
        stage.parallel(stage.fuse(n, c, y))
