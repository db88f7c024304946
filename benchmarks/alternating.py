"""Same-run comparison timing shared by the benchmark scripts beside it."""

from __future__ import annotations

import functools
import statistics
import time

import numpy as np

#: pause when switching between the measured libraries: OpenBLAS's (and ONNX Runtime's)
#: worker threads busy-wait for a while after each call and would otherwise steal cores
#: from the next measurement.
SWITCH_PAUSE_S = 0.5


def alternating_samples(runs, repeat: int, block: int = 5,
                        pause_s: float = SWITCH_PAUSE_S,
                        clock=time.perf_counter) -> list[list[float]]:
    """Seconds of every timed run of each callable, measured in alternating blocks of
    ``block`` runs (so a change in machine load affects all alike), pausing ``pause_s``
    at every switch; each block starts with an untimed run. ``clock``: wall time by
    default; ``time.process_time`` counts the CPU seconds of this process (every
    thread's), which do not grow while other processes hold the cores."""
    times: list[list[float]] = [[] for _ in runs]
    while len(times[0]) < repeat:
        for run, samples in zip(runs, times):
            time.sleep(pause_s)
            run()
            for _ in range(block):
                start = clock()
                run()
                samples.append(clock() - start)
    return times


def alternating_medians(runs, repeat: int, block: int = 5,
                        pause_s: float = SWITCH_PAUSE_S) -> list[float]:
    """Median seconds of each callable, measured by :func:`alternating_samples`."""
    return [statistics.median(samples)
            for samples in alternating_samples(runs, repeat, block, pause_s)]


def same_bits_medians(kernels, arguments, outputs, repeat: int,
                      block: int) -> list[float] | None:
    """Median CPU seconds of each kernel called on ``arguments`` and its own array of
    ``outputs`` (the variants of one kernel a benchmark compares), in alternating blocks
    on this process's CPU clock; None when their outputs differ (a variant that is
    faster but wrong is no result)."""
    runs = [functools.partial(kernel, *arguments, out) for kernel, out in zip(kernels, outputs)]
    samples = alternating_samples(runs, repeat, block, pause_s=0.0, clock=time.process_time)
    if not all(np.array_equal(outputs[0], out) for out in outputs[1:]):
        return None
    return [statistics.median(times) for times in samples]
