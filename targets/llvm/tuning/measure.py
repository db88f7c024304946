"""The timing harness of a candidate: the cache flush and the rotation over copies."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

from heterocc.sdk import te
from heterocc.sdk.tuning import MeasureOptions

from ..cpu import CPUDescription, active_cpu
from ..module import build
from ..runtime import evict_from_caches, evicts_here, num_threads, pool_counters

# ------------------------------------------------------------------ measuring a candidate


#: how many times the L2 caches of all cores the cache flush reads: enough that what a
#: candidate touched is evicted from every core's L2 (its weights are evicted from
#: every level besides, see :func:`evicting`)
FLUSH_L2_MULTIPLE = 2
#: rows of the flush's buffer per core: the thread pool hands rows out in chunks, so
#: each core reads its share even while another is slowed
FLUSH_ROWS_PER_CORE = 8


@functools.lru_cache(maxsize=4)
def cache_flusher(cpu: CPUDescription) -> Callable[[], None]:
    """A call that evicts what the last kernel touched from the caches of the cores of
    ``cpu`` (see :attr:`~heterocc.tuning.measure.MeasureOptions.cache`): a sum of
    rows of a buffer :data:`FLUSH_L2_MULTIPLE` times the L2 caches of all its cores,
    run in parallel on the same thread pool as the kernels, so that every core running
    a kernel's iterations reads its part of the buffer."""
    lanes = cpu.vector_lanes("float32")
    rows = cpu.num_cores * FLUSH_ROWS_PER_CORE
    depth = max(1, math.ceil(FLUSH_L2_MULTIPLE * cpu.l2 * cpu.num_cores / (rows * lanes * 4)))
    data = te.placeholder((rows, depth, lanes), "float32", name="flushed")
    k = te.reduce_axis((0, depth), name="k")
    sums = te.compute((rows, lanes), lambda i, v: te.sum(data[i, k, v], axis=k), name="sums")
    schedule = te.create_schedule(sums)
    row, lane = schedule[sums].op.axis
    schedule[sums].reorder(row, k, lane)
    schedule[sums].parallel(row)
    schedule[sums].vectorize(lane)
    function = build(te.lower(schedule, [data, sums], name="cache_flush"), cpu=cpu)["cache_flush"]
    buffer = np.ones((rows, depth, lanes), np.float32)
    out = np.zeros((rows, lanes), np.float32)
    return functools.partial(function, buffer, out)


def pool_watch() -> Callable[[], bool]:
    """A watch over one timing sample (``time_calls``' ``watch``): the sample ran
    degraded when, of the parallel loops it handed to the thread pool, fewer than half
    had a worker running iterations on another CPU than the caller's. Such a sample
    timed the code at one thread's speed because of where the threads were, not what
    the code does: a worker woke too late for loops of tens of microseconds, or the
    operating system held it on the caller's core (a guest kernel packing threads onto
    few virtual CPUs did so in 16 of 40 timings of a search's finalists on a 2-core
    virtual machine, before the runtime's workers kept off the caller's CPU)."""
    if num_threads() < 2:
        return lambda: False
    loops_before, spread_before = pool_counters()

    def degraded() -> bool:
        loops, spread = pool_counters()
        return 2 * (spread - spread_before) < loops - loops_before

    return degraded


def _flush_of(options: MeasureOptions, constants: Sequence[np.ndarray] = ()
              ) -> Callable[[], None] | None:
    """The cache flush run before each timed call, where ``options`` ask for one: the
    kernel's ``constants`` (its weights) evicted from every cache level
    (:func:`evicting`), then the cores' L2 caches flushed (:func:`cache_flusher`)."""
    if options.cache != "flush":
        return None
    flush = cache_flusher(active_cpu())
    evict = evicting(constants)
    if evict is None:
        return flush

    def evict_and_flush() -> None:
        evict()
        flush()
    return evict_and_flush


def evicting(constants: Sequence[np.ndarray]) -> Callable[[], None] | None:
    """A call that evicts ``constants`` from every level of the caches (None where there
    are none, or where this CPU cannot: then only the L2 flush runs). A network's kernel
    finds its weights where a whole run of the other kernels left them, and a network
    streams more than a last-level cache holds, or shares it with others: ResNet-18's
    float weights are 46 MB, and where the flush left them in a 32 MB L3, the search
    from scratch took a Winograd F(4,3) convolution (four times the weights) for its
    256-channel 3x3 layers, timed at 0.50 ms against the hand schedule's 0.52; in the
    model it took 1.20 ms against 0.53 (Zen 4, two cores), as it does timed with this
    eviction (see ``docs/tuning.md``)."""
    if not constants or not evicts_here():
        return None
    kept = list(constants)
    return lambda: evict_from_caches(kept)


#: the most copies of a candidate's constants and outputs the ``rotate`` timing takes
#: turns over (a tiny kernel's operands in that many copies still fit the L2 caches,
#: where in a model the rest of the network evicts them)
MAX_ROTATION = 1024


def rotation_count(footprint: int, cpu: CPUDescription) -> int:
    """How many copies of ``footprint`` bytes (a kernel's constants and outputs) the
    ``rotate`` timing takes turns over: enough that the others' copies fill
    :data:`FLUSH_L2_MULTIPLE` times the L2 caches of all cores between two calls on
    one copy."""
    evicting = FLUSH_L2_MULTIPLE * cpu.l2 * cpu.num_cores
    return max(2, min(MAX_ROTATION, 1 + math.ceil(evicting / max(footprint, 1))))


def _rotating(make: Callable[[], Callable[[], object]], footprint: int
              ) -> Callable[[], object]:
    """One call that runs, in turn, each of :func:`rotation_count` calls ``make``
    returns (each on its own copies of the operands that rotate)."""
    calls = [make() for _ in range(rotation_count(footprint, active_cpu()))]
    turns = itertools.cycle(calls)
    return lambda: next(turns)()


