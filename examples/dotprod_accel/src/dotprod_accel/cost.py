"""How long a composite takes on the array, for placement by cost (the SDK's
``estimate`` hook): the cycles of its command list, counted without running it, plus
the staging of its buffers that every run does, at the config's clock; and the host
link's time for what a call copies in (its run-time inputs) and out (its results)."""

from __future__ import annotations

import math

import numpy as np

from heterocc.sdk import (
    CostEstimate,
    DeviceKernel,
    HostLink,
    accelerator_estimate,
    compile_composite,
)

from .isa import MEMORY_DTYPES, MachineConfig
from .simulator import count_cycles


def _nbytes(tensor) -> int:
    return math.prod(int(d) for d in tensor.shape) * np.dtype(tensor.dtype).itemsize


def kernel_cycles(kernel: DeviceKernel, config: MachineConfig) -> int:
    """The cycles one call of ``kernel`` takes on the array: its commands, and staging
    every buffer the host writes (weights included: the device stages them each run)."""
    places = [kernel.program.layout[b.tensor.name] for b in kernel.inputs]
    staged = sum(config.bus_cycles(p.size * np.dtype(MEMORY_DTYPES[p.bank]).itemsize)
                 for p in places)
    return count_cycles(kernel.program.words).cycles + staged


def estimate(target, function) -> CostEstimate | None:
    """A composite's time on ``target`` (a ``DotProdTarget``); None for anything else."""
    if "composite" not in function.attrs:
        return None
    kernel = compile_composite(target, function)
    config = target.config
    copied = [b.tensor for b in kernel.inputs if b.argument is not None] + \
        [r.tensor for r in kernel.outputs]
    return accelerator_estimate(kernel_cycles(kernel, config), config.clock_mhz,
                                HostLink(config.link_gbps, config.link_latency_us),
                                sum(_nbytes(t) for t in copied), len(copied))
