"""What the CPU's templates share: random inputs of a workload, and the CPU description's
facts for the auto search."""

from __future__ import annotations

import numpy as np

from heterocc.sdk.tuning import SearchHints

from ..cpu import CPUDescription, active_cpu


def _random_inputs(shapes: list[tuple[int, ...]], dtype: str,
                   rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.standard_normal(shape).astype(dtype) for shape in shapes]


def search_hints(dtype: str, cpu: CPUDescription | None = None) -> SearchHints:
    """``cpu``'s facts (default: the active CPU's) for the auto search over ``dtype``
    workloads."""
    cpu = cpu or active_cpu()
    return SearchHints(cpu.vector_lanes(dtype), cpu.vector_registers, cpu.num_cores)


