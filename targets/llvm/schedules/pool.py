"""Pooling on the CPU: of an NCHW[x]c tensor (``schedule_pool_nchwc``), one vector per
output pixel over the channel block; of an NCHW tensor (``schedule_pool_nchw``: an
int8 model's pools, which stay in NCHW), rows of output pixels with the window's taps
outside them, a task per plane where it has enough planes."""

from __future__ import annotations

import numpy as np

from heterocc.sdk import CompileError, te

from ..cpu import CPUDescription
from .common import PARALLEL_MIN_ELEMENTS, TASKS_PER_CORE, schedule_rows, vector_lanes
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




#: the most bytes of a padded plane :func:`schedule_pool_nchw` copies inside a task, as
#: a fraction of a core's L2: the copy is read back from the cache by the task's rows
PLANE_L2_SHARE = 0.5


def pool_planes(pool: te.Tensor, padded: te.Tensor | None, cpu: CPUDescription) -> bool:
    """Whether :func:`schedule_pool_nchw` runs ``pool`` a task per plane (image and
    channel), the padded copy of the plane made inside the task: where the pool reads a
    padding stage, its planes give every core :data:`.common.TASKS_PER_CORE` tasks or
    more, and one padded plane fits :data:`PLANE_L2_SHARE` of the L2."""
    if padded is None or len(padded.shape) != 4:
        return False
    n, channels = (int(d) for d in pool.shape[:2])
    plane = int(padded.shape[2]) * int(padded.shape[3]) * np.dtype(padded.dtype).itemsize
    return (n * channels >= TASKS_PER_CORE * cpu.num_cores
            and plane <= PLANE_L2_SHARE * cpu.l2)


def schedule_pool_nchw(schedule: te.Schedule, pool: te.Tensor, padded: te.Tensor | None,
                       cpu: CPUDescription) -> None:
    """Pooling of an NCHW tensor (``pool[n, c, y, x]`` reduced over a window of rows and
    columns): the padded input (``padded``, when the pool reads a padding stage) copied
    row by row, each row a vector loop, so the window reads need no guards; each row of
    output pixels updated tap by tap over all its pixels: one vector per tap where a
    strided window's bytes load as one masked load and a shuffle (AVX-512BW), else a
    loop left to LLVM.

    In parallel: a task per plane where :func:`pool_planes` says so, which copies its
    plane and pools it while the copy is in the cache, in one parallel loop; else rows
    of output pixels, the copy made ahead of them in a loop of its own. ResNet-18 int8's
    max pool (64 planes of 112x112) is the copy of 0.8 MB written and read back and a
    second hand-off to the threads in the latter; whole int8 models by planes, against
    rows (two threads, AVX-512 VNNI, alternating runs in one process): ResNet-18
    0.994-0.995x the time, ResNet-50 0.990x, GoogLeNet (13 max pools) 0.956x."""
    stage = schedule[pool]
    if len(stage.op.axis) != 4 or len(stage.op.reduce_axis) != 2:
        raise CompileError(f"schedule_pool_nchw: {pool.name!r} is not a 2-D NCHW pool")
    n, c, y, x = stage.op.axis
    planes = pool_planes(pool, padded, cpu)
    if padded is not None and not planes:
        schedule[padded].compute_root()
        # row by row, each row a vector loop (its reads inside the image one run)
        schedule_rows(schedule, padded, cpu, serial_axes=1)
    stage.reorder(n, c, y, *stage.op.reduce_axis, x)
    if masked_byte_loads(cpu):
        # a row of pixels one vector per tap: a strided window's reads load as one wide
        # masked load and a shuffle (LLVM leaves such a loop of bytes scalar)
        lanes = vector_lanes(pool.dtype, cpu)
        if int(x.extent) > lanes:
            _, x = stage.split(x, lanes)
        stage.vectorize(x)
    if planes:
        plane = stage.fuse(n, c)
        stage.parallel(plane)
        schedule[padded].compute_at(stage, plane)
        schedule_rows(schedule, padded, cpu, serial_axes=3)  # serial: inside the task
        return
    if int(np.prod(pool.shape)) >= PARALLEL_MIN_ELEMENTS:
        stage.parallel(stage.fuse(n, c, y))
