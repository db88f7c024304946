"""How long a function takes on the CPU, by measurement.

A function is put through what the CPU would do with it (the target's graph passes,
its layout, then fusion), each fused function built by the target itself (so its
kernels are shared with the final build, one per structure) and timed on random inputs
in this process: one warm-up call, then calls until :data:`MIN_SAMPLES` samples and
:data:`MIN_SECONDS` of calls, at most :data:`MAX_SAMPLES`; the figure is the fastest
sample (the least disturbed by other work on the machine). A function whose first call
takes longer than :data:`LONG_CALL_SECONDS` is timed by that call alone (compile time
matters, and so long a call hardly differs from the next).

Figures are kept on disk (:class:`heterocc.sdk.CostCache`) by the CPU description and
the function's workload key, so a second compile of a model measures nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from heterocc.ir.graph import Node
from heterocc.sdk import CostCache, CostEstimate, workload_key
from heterocc.sdk.graph import DEFAULT_PIPELINE, PassManager, target_graph_passes
from heterocc.sdk.runtime import GraphExecutor

#: samples wanted after the warm-up call, and the least time spent taking them
MIN_SAMPLES = 3
MIN_SECONDS = 0.02
MAX_SAMPLES = 1000
#: a first call this long is the only sample: repeats would cost compile time and differ
#: from it by less than the estimate needs
LONG_CALL_SECONDS = 0.05


def random_arguments(values, seed: int = 0) -> list[np.ndarray]:
    """Inputs of the values' types: integers over their dtype's range (int8 over all
    256 values), floats standard normal."""
    rng = np.random.default_rng(seed)
    args = []
    for value in values:
        dtype = np.dtype(value.type.dtype)
        shape = value.type.shape
        if dtype.kind in "iu":
            info = np.iinfo(dtype)
            args.append(rng.integers(max(info.min, -128), min(info.max, 127) + 1, shape,
                                     dtype=dtype))
        elif dtype.kind == "b":
            args.append(rng.integers(0, 2, shape).astype(bool))
        else:
            args.append(rng.standard_normal(shape).astype(dtype))
    return args


def time_call(call, args, min_samples: int = MIN_SAMPLES, min_seconds: float = MIN_SECONDS,
              max_samples: int = MAX_SAMPLES) -> list[float]:
    """Seconds per call of ``call(args)`` after one warm-up call (see the module)."""
    start = time.perf_counter()
    call(args)
    warm_up = time.perf_counter() - start
    if warm_up > LONG_CALL_SECONDS:
        # what a first call does besides the kernel (its output arrays, the check of its
        # arguments) is negligible next to this much work: the call is the sample
        return [warm_up]
    samples: list[float] = []
    wanted = min_samples
    while len(samples) < max_samples and (len(samples) < wanted
                                          or sum(samples) < min_seconds):
        start = time.perf_counter()
        call(args)
        samples.append(time.perf_counter() - start)
    return samples


def cpu_program(target, function: Node):
    """``function``'s body as the CPU runs it: the target's graph passes and fusion
    applied, every fused function built by ``target``; a callable on the body's inputs."""
    fuse_at = DEFAULT_PIPELINE.index("fuse_ops")
    graph = PassManager([*target_graph_passes(target),
                         *DEFAULT_PIPELINE[fuse_at:]]).run(function.body)
    before = set(target.fallbacks)
    kernels = {n.name: target.build(n) for n in graph.nodes if n.body is not None}
    for name in set(target.fallbacks) - before:  # names of this scratch graph only
        del target.fallbacks[name]
    executor = GraphExecutor(graph, kernels, {name: target.name for name in kernels})
    return executor.execute, graph


@dataclass
class CpuCostModel:
    """The ``estimate`` hook of an :class:`~heterocc.targets.llvm.LLVMTarget`."""

    target: object
    cache: CostCache = field(default_factory=CostCache)

    @property
    def key(self) -> str:
        """What the cached figures depend on besides the workload: the CPU description
        (as a target string) and the cost model's version."""
        return f"llvm2/{self.target.tuning_key}"

    def estimate(self, function: Node) -> CostEstimate:
        """The function's time on this CPU: from the cache, or measured now."""
        workload = workload_key(function)
        cached = self.cache.get(self.key, workload)
        if cached is not None:
            return CostEstimate(cached["seconds"], source="measured (cached)",
                                detail={"samples": cached["samples"]})
        seconds, samples = self.measure(function)
        self.cache.put(self.key, workload, {"seconds": seconds, "samples": samples})
        return CostEstimate(seconds, source="measured", detail={"samples": samples})

    def measure(self, function: Node) -> tuple[float, int]:
        """The fastest of the timed calls of ``function`` on the CPU, and their number."""
        run, graph = cpu_program(self.target, function)
        samples = time_call(run, random_arguments(graph.inputs))
        return min(samples), len(samples)
