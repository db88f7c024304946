"""Pooling on the CPU: of an NCHW[x]c tensor (``schedule_pool_nchwc``), one vector per
output pixel over the channel block; of an NCHW tensor (``schedule_pool_nchw``: an
int8 model's pools, which stay in NCHW), rows of output pixels with the window's taps
outside them."""

from __future__ import annotations

import numpy as np

from heterocc.sdk import CompileError, te

from ..cpu import CPUDescription
from .common import PARALLEL_MIN_ELEMENTS, schedule_rows, vector_lanes
from .int8_conv import masked_byte_loads


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
    ahead row by row, each row a vector loop, so the window reads need no guards; rows of
    output pixels in parallel, each row updated tap by tap over all its pixels: one
    vector per tap where a strided window's bytes load as one masked load and a shuffle
    (AVX-512BW), else a loop left to LLVM."""
    stage = schedule[pool]
    if len(stage.op.axis) != 4 or len(stage.op.reduce_axis) != 2:
        raise CompileError(f"schedule_pool_nchw: {pool.name!r} is not a 2-D NCHW pool")
    if padded is not None:
        schedule[padded].compute_root()
        # row by row, each row a vector loop (its reads inside the image one run)
        schedule_rows(schedule, padded, cpu, serial_axes=1)
    n, c, y, x = stage.op.axis
    stage.reorder(n, c, y, *stage.op.reduce_axis, x)
    if masked_byte_loads(cpu):
        # a row of pixels one vector per tap: a strided window's reads load as one wide
        # masked load and a shuffle (LLVM leaves such a loop of bytes scalar)
        lanes = vector_lanes(pool.dtype, cpu)
        if int(x.extent) > lanes:
            _, x = stage.split(x, lanes)
        stage.vectorize(x)
    if int(np.prod(pool.shape)) >= PARALLEL_MIN_ELEMENTS:
        stage.parallel(stage.fuse(n, c, y))
