"""How long a function takes on the CPU, by measurement.

A function is put through what the CPU would do with it (the target's graph passes, its
layout, then fusion), each fused function built by the target itself (so its kernels are
shared with the final build, one per structure) and called the way the runtime calls it
(the graph executor, its buffers) on random inputs in this process: warm-up calls
(:data:`WARM_UP_SECONDS`: caches and buffers warm), then calls until :data:`MIN_SAMPLES`
samples and :data:`MIN_SECONDS` of calls, at most :data:`MAX_SAMPLES`; the figure is the
fastest sample (``heterocc.sdk.tuning.fastest``: other processes only ever slow a call,
in bursts, so the fastest is the one least disturbed; on a shared machine at a load of 8
to 12 the median of such runs was 2.8x off a second measurement, where the fastest
agrees). A function whose first call takes longer than :data:`LONG_CALL_SECONDS` is
timed by :data:`LONG_SAMPLES` calls (compile time matters, and so long a call varies
little).

Asked by a placement, which first says the whole graph (:meth:`CpuCostModel.within`), a
function is timed as its share of the kernels the whole graph fuses into
(:class:`FusedContext`): the kernels the build compiles where the placement keeps the
part on the CPU, and what they take there, timed as the model calls them
(:func:`time_in_chains`: in graph order, one call of each kernel per round; hot, many
calls of one kernel in a row, a kernel took 30% less than one call between the others,
and ``benchmarks/placement.py`` measures the compiled model's kernels in chains too).
A call's time there is the CPU seconds of the threads it runs on over their number:
the time it takes with its cores to itself, which another process on one of the two
cores does not double (its wall time, the old figure, moved some 35% between
compiles a minute apart on a quiet machine).
Every such chain has fixed reference calls after its kernels in every round
(:func:`time_chain`: the caches flushed, a fixed reference kernel, :mod:`.reference_kernel`,
the same kernel again with its caches warm, the vector peak loop; every other round
where they would cost more than a tenth of a round), and its figures are normalised by
the machine's speed in the chain, the median of the three calls' times over their
baselines (their times in the first chain timed against the cost cache): a shared
machine ran whole chains up to 1.8x slower for seconds at a time, which put every
figure of a compile off by one factor against a check a minute later; the reference
calls slow with them, so the figures stay in the unit of the first chain. Why three:
one of them once ran 2.3x slower alone (the kernels 1.2x) for the whole first chain,
and every later figure came out 1.9x off.
Asked about a function alone, the function is fused and timed alone, with the same
reference calls (on the wall clock, as the program is timed), in the same unit.

Where a tuning log is applied (``heterocc.compile(..., tuning_log=...)``, the log
``heterocc tune`` writes), a fused kernel the log measured (a function task's record of
the schedule compile will use under that log, :func:`.tuning.logged_seconds`) is
neither compiled nor timed: its time is the log's (:func:`logged_time`).

Figures are kept on disk (:class:`heterocc.sdk.CostCache`) by the CPU description, the
applied tuning log's records (:func:`log_key`) and the function's workload key, so a
second compile of a model measures nothing.

Measuring costs compile time (the function's kernels are compiled to be timed), so the
placement first asks :meth:`CpuCostModel.lower_bound`: the least time the function
could take here, its multiply-accumulates at the peak of this CPU's vector units
(:mod:`.peak`: a multiply-add loop on registers timed for a few milliseconds once per
CPU, scaled to the element type and the cores; raised by any function measured faster,
which none should be). Where the accelerator is faster even than that, the function is
not measured for the placement.
"""

from __future__ import annotations

import hashlib
import math
import os
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from heterocc.ir.graph import Graph, NameScope, Node
from heterocc.sdk import CostCache, CostEstimate, workload_key
from heterocc.sdk.cost import random_arguments
from heterocc.sdk.graph import (
    DEFAULT_PIPELINE,
    PassManager,
    multiply_accumulates,
    outline,
    target_graph_passes,
)
from heterocc.sdk.runtime import GraphExecutor
from heterocc.sdk.te_target import structure_key
from heterocc.sdk.tuning import current, fastest, records_for

from .peak import PEAK_ITERATIONS, multiply_accumulate_peak, multiply_add_rate, peak_kernel
from .reference_kernel import has_parallel_loop, reference_kernel
from .runtime import num_threads
from .schedules.winograd_conv import winograd_applies, winograd_multiply_accumulates
from .tuning import cache_flusher, logged_seconds

#: samples wanted after the warm-up call, and the least time spent taking them
MIN_SAMPLES = 5
MIN_SECONDS = 0.02
MAX_SAMPLES = 200
#: the warm-up: calls until this long (at least one). A kernel compiled just before is
#: slower for its first few calls than a single warm-up call shows: timed against the
#: same kernel timed for 0.2 s, 11 and 15 of ResNet-18's 19 kernels of 0.1 ms or more
#: were within 25% after one warm-up call, 17 and 16 after 10 ms (load 16-18)
WARM_UP_SECONDS = 0.01
#: after a warm-up call this long, :data:`LONG_SAMPLES` samples: more would cost compile
#: time and move the median less than the estimate needs
LONG_CALL_SECONDS = 0.05
LONG_SAMPLES = 2


def time_call(call, args, min_samples: int = MIN_SAMPLES, min_seconds: float = MIN_SECONDS,
              max_samples: int = MAX_SAMPLES) -> list[float]:
    """Seconds per call of ``call(args)`` after the warm-up (see the module)."""
    start = time.perf_counter()
    call(args)
    first = time.perf_counter() - start
    if first > LONG_CALL_SECONDS:
        min_samples, min_seconds = min(min_samples, LONG_SAMPLES), 0.0
    while time.perf_counter() - start < WARM_UP_SECONDS:
        call(args)
    samples: list[float] = []
    while len(samples) < max_samples and (len(samples) < min_samples
                                          or sum(samples) < min_seconds):
        start = time.perf_counter()
        call(args)
        samples.append(time.perf_counter() - start)
    return samples


#: the source of a figure read from the applied tuning log, and of one measured here
LOGGED, MEASURED = "tuning log", "measured"


def logged_time(target, body: Graph) -> float | None:
    """Seconds per call of the function ``body`` as the applied tuning log measured it
    for ``target``'s CPU (:func:`.tuning.logged_seconds`); None outside a log, or where
    it holds no record of the schedule compile will use for ``body``."""
    log = current()
    if log is None:
        return None
    with records_for(target.tuning_key):
        return logged_seconds(body, log, getattr(target, "rules", "hand"))


def log_key(target) -> str:
    """A short key of the applied tuning log's records for ``target``'s CPU (empty
    outside a log): figures made under a log are cached apart from others."""
    log = current()
    if log is None:
        return ""
    known = _LOG_KEYS.get(id(log))
    if known is None or known[0] is not log:
        with records_for(target.tuning_key):
            records = [(key, [(r.config_index, r.costs) for r in log.records(key)])
                       for key in sorted(log.workload_keys)]
        digest = hashlib.sha1(repr(records).encode()).hexdigest()[:12]
        _LOG_KEYS.clear()  # one log per compile: keep the last
        known = _LOG_KEYS[id(log)] = (log, f"/log-{digest}")
    return known[1]


#: :func:`log_key` by id of the log (kept with it, so an id is not reused)
_LOG_KEYS: dict[int, tuple[object, str]] = {}


#: :func:`time_in_chains`: untimed rounds first (a kernel compiled just before is slower
#: for its first calls: its code and constants paged in), then timed rounds, at least
#: :data:`CHAIN_MIN_ROUNDS`, then more while the timed rounds took under
#: :data:`CHAIN_CPU_SECONDS` of this process's CPU time (its threads: the calls' and the
#: runtime pool's), at most :data:`CHAIN_MAX_ROUNDS`. Why that many: the fastest
#: of few rounds under load lies above the fastest of many: ResNet-18's kernels, 5
#: to 7 rounds in 0.1 s, were estimated 24% to 104% above the benchmark's 30 rounds at
#: a load of 10 to 12 (on the wall clock), MobileNetV2's, 12 rounds, 5% to 18% either
#: way. On the threads' CPU clock (and normalised by the reference kernel) fewer rounds
#: do: against the fastest of 6 chains of 40 rounds (load 15-18), the fastest of the
#: first 10 rounds of a chain was off by 1.5% (median) and 7.4% (90th percentile) for
#: ResNet-18's 26 kernels, 1.6% and 8.5% for MobileNetV2's 57 (of 40: 0.7% and 3.8%,
#: 1.2% and 5.7%), each round 14 and 7.5 ms of CPU time. Why a budget of CPU time
#: and not of the calls' wall time (0.25 s before): compile time is CPU time, and a
#: quiet machine, whose rounds are quickest, ran the most of them (ResNet-18: some 35
#: rounds, 0.58 of the placement's 0.89 CPU-s), a loaded one about 10
CHAIN_WARM_UP_ROUNDS = 2
CHAIN_MIN_ROUNDS = 10
CHAIN_MAX_ROUNDS = 40
CHAIN_CPU_SECONDS = 0.1


#: :func:`time_in_chains`: the most of a round's time the ``sparse`` calls (the
#: reference calls of :func:`time_chain`) may take; where they would take more, they
#: are called in every k-th round only, k the least that keeps them within it but no
#: more than leaves them :data:`MIN_SAMPLES` samples in the least rounds (2 with the
#: defaults). Why: they run in every chain, so they are compile time (AVX2 code: the
#: reference 1.3 to 2.1 ms a call, MobileNetV2's kernels 6.2 ms a round)
SPARSE_SHARE = 0.1


def sparse_every(warm: Mapping[str, float], sparse: Collection[str], min_rounds: int) -> int:
    """Every how many rounds the ``sparse`` calls are timed (:data:`SPARSE_SHARE`),
    by ``warm``, each call's time in the warm-up rounds."""
    spare = sum(seconds for name, seconds in warm.items() if name in sparse)
    rest = sum(seconds for name, seconds in warm.items() if name not in sparse)
    if not spare or spare <= SPARSE_SHARE * rest:
        return 1
    return max(1, min(math.ceil(spare / (SPARSE_SHARE * rest)) if rest else 1,
                      min_rounds // MIN_SAMPLES))


def kernel_threads(call) -> int | None:
    """How many threads a call of ``call`` runs on: the runtime's pool for a compiled
    kernel with a parallel loop, one for a kernel without; None where ``call`` is not a
    compiled kernel (its threads are not known). A call that says how many threads it
    runs on (a ``threads`` attribute: :class:`OneThreadCall`) is taken at its word, as
    is a kernel that says whether it has a parallel loop (``parallel``: the reference
    kernel, whose code may come from a cache without its loops)."""
    declared = getattr(call, "threads", None)
    if declared is not None:
        return declared
    parallel = getattr(call, "parallel", None)
    if isinstance(parallel, bool):
        return num_threads() if parallel else 1
    prim = getattr(call, "prim", None)
    body = getattr(prim, "body", None)
    if body is None:
        return None
    key = id(prim)
    if key not in _THREADS or _THREADS[key][0] is not prim:
        _THREADS[key] = (prim, num_threads() if has_parallel_loop(body) else 1)
    return _THREADS[key][1]


#: :func:`kernel_threads` by id of the kernel's PrimFunc (kept with it)
_THREADS: dict[int, tuple[object, int]] = {}


def pool_clocks() -> list[int] | None:
    """The CPU-time clocks of the threads a kernel's call runs on: this thread's and
    those of the runtime's pool (Linux's per-thread clocks of the process's threads that
    are not Python's: the pool's are C threads); None where the system has none."""
    try:
        tids = {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return None
    python = {t.native_id for t in threading.enumerate()} - {threading.get_native_id()}
    # Linux's clock id of a thread's CPU time: MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)
    clocks = [(~tid << 3) | 6 for tid in sorted(tids - python)]
    try:
        for clock in clocks:
            time.clock_gettime(clock)
    except OSError:
        return None
    return clocks


def _cpu_seconds(clocks: Sequence[int]) -> float:
    total = 0.0
    for clock in clocks:
        try:
            total += time.clock_gettime(clock)
        except OSError:  # a thread that ended
            pass
    return total


def time_in_chains(calls: Mapping[str, tuple], min_rounds: int = CHAIN_MIN_ROUNDS,
                   max_rounds: int = CHAIN_MAX_ROUNDS, seconds: float = CHAIN_CPU_SECONDS,
                   warm_up: int = CHAIN_WARM_UP_ROUNDS, clock: str = "cpu",
                   sparse: Collection[str] = ()) -> dict[str, tuple[float, int]]:
    """The fastest call and the number of timed calls of each of ``calls`` (name ->
    (callable, arguments), in graph order), timed the way a model calls its kernels:
    one call of each in turn, round after round (see the constants above), so that a
    kernel is timed with its caches as the kernels before it left them, never hot from
    calls of its own. Why the fastest: other processes only ever slow a call, in
    bursts; rounds spread each kernel's calls over the whole timing, so a burst
    stretches one sample of each kernel, not every sample of one. A call longer than
    :data:`LONG_CALL_SECONDS` is timed :data:`LONG_SAMPLES` times only (so long a
    call varies little, and compile time matters).

    What a call's time is (``clock``): ``"cpu"`` (the default), the time the call
    takes with the cores it runs on to itself: the CPU seconds of its threads
    (:func:`pool_clocks`) over their number (:func:`kernel_threads`), the calling
    thread's alone for a kernel without a parallel loop. A parallel kernel waits for
    its slowest thread, so where another process holds one of the two cores its wall
    time doubles (ResNet-18's kernels, fastest of 40 rounds: 5.7, 6.0 and 9.8 ms in
    three chains one after another at a load of 9) while its threads' CPU seconds do
    not (4.97, 4.91, 4.96 ms over two threads). A call's CPU figure is never taken
    above its wall time, which bounds it: reading the threads' clocks is a system call
    per thread (about 0.4 us each), within the interval it measures, while a spinning
    worker's clock runs through the reads too; on a kernel of a few microseconds that
    put the figure 40% above the wall time. A call that is not a compiled kernel,
    or a system without per-thread clocks, is timed on the wall clock, as is every
    call with ``clock="wall"``. The calls named in ``sparse`` are called in every
    round of the warm-up and then in every k-th round only (:func:`sparse_every`)."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    long: set[str] = set()
    warm: dict[str, float] = {}
    for _ in range(warm_up):
        for name, (call, args) in calls.items():
            start = time.perf_counter()
            call(args)
            took = time.perf_counter() - start
            warm[name] = min(took, warm.get(name, took))
            if took > LONG_CALL_SECONDS:
                long.add(name)
    every = sparse_every(warm, sparse, min_rounds)
    clocks = pool_clocks() if clock == "cpu" else None  # the pool started by now
    threads = {name: kernel_threads(call) if clocks else None
               for name, (call, _) in calls.items()}
    began, rounds = time.process_time(), 0
    while rounds < min_rounds or (rounds < max_rounds
                                  and time.process_time() - began < seconds):
        for name, (call, args) in calls.items():
            if name in long and len(samples[name]) >= LONG_SAMPLES:
                continue
            if name in sparse and rounds % every:
                continue
            count = threads[name]
            busy = _cpu_seconds(clocks) if count and count > 1 else time.thread_time()
            start = time.perf_counter()
            call(args)
            took = time.perf_counter() - start
            if count is None:
                samples[name].append(took)
            elif count > 1:
                samples[name].append(min(took, (_cpu_seconds(clocks) - busy) / count))
            else:
                samples[name].append(min(took, time.thread_time() - busy))
        rounds += 1
    return {name: (fastest(found), len(found)) for name, found in samples.items()}


#: :func:`time_chain`: the calls appended to every round of a chain (their names no
#: kernel takes: kernels are named by the graph's name scope): the tuning's cache flush
#: (:func:`.tuning.cache_flusher`, sized to the CPU's caches), so that the reference
#: starts from caches as cold whatever chain it follows; the reference kernel; the
#: reference again, its caches warm; the vector peak loop (:mod:`.peak`, on registers)
EVICT, REFERENCE = "<evict caches>", "<reference kernel>"
HOT_REFERENCE, PEAK_LOOP = "<reference kernel, caches warm>", "<vector peak loop>"
#: the calls among them whose times say how fast the machine ran in a chain (its
#: speed: the median of their times over their baselines, :func:`chain_speed`). Why
#: three of different kinds, not one: one call's time tracks the kernels only while it
#: is slowed as they are, and on a shared machine the reference alone once ran 2.3x
#: slower for a whole chain while the model's kernels ran 1.2x; that chain set the
#: baseline, and every later figure was 1.9x off. The reference from cold caches moves
#: most with the machine's phases, as the kernels whose weights the caches do not hold
#: do (:mod:`.reference_kernel`); warm, it leaves the memory out; the peak loop moves
#: with the cores alone. A phase that slows them all moves the median with them; one
#: that slows one alone, in any chain, the baseline's included, does not.
VOTERS = (REFERENCE, HOT_REFERENCE, PEAK_LOOP)
#: every call :func:`time_chain` appends (none of them a figure of the chain)
REFERENCE_CALLS = (EVICT, REFERENCE, HOT_REFERENCE, PEAK_LOOP)


class OneThreadCall:
    """A call of ``function(*arguments)`` that runs on the calling thread alone (so a
    chain times it on that thread's CPU clock, :func:`kernel_threads`)."""

    threads = 1

    def __init__(self, function, *arguments):
        self.function, self.arguments = function, arguments

    def __call__(self, args) -> None:
        self.function(*self.arguments)


@dataclass(frozen=True)
class ChainReference:
    """The reference calls built for one CPU (:data:`VOTERS`, after the cache flush)
    and their baselines: each one's time in the first chain timed against this cost
    cache for this CPU, kept with the figures, so that every chain timed against the
    cache (a compile's, a later compile's, the benchmark's check) is put in the same
    unit: the machine's speed in that first chain. ``baselines``: every voter's, by
    name (none before that chain)."""

    calls: dict[str, tuple]
    baselines: Mapping[str, float] = field(default_factory=dict)

    @property
    def seconds(self) -> float | None:
        """The reference kernel's baseline (None before the first chain)."""
        return self.baselines.get(REFERENCE)


def chain_reference(target) -> ChainReference | None:
    """The reference calls of ``target``'s CPU (the reference kernel built once per
    process and CPU, on a target of its own so that nothing of it reaches the build;
    the peak loop compiled once per process), with their baselines from ``target``'s
    cost cache; None where the CPU's code does not run here or the target has no cost
    model."""
    model = getattr(target, "cost_model", None)
    if model is None:
        return None
    key = (target.tuning_key, getattr(target, "rules", "hand"))
    if key not in _REFERENCES:
        _REFERENCES[key] = _voter_calls(target)
    calls = _REFERENCES[key]
    if calls is None:
        return None
    found = model.cache.get(model.base_key, _baseline_key(target)) or {}
    baselines = {name: seconds for name, seconds in found.get("voters", {}).items()
                 if name in calls}
    if "seconds" in found:
        baselines[REFERENCE] = found["seconds"]
    return ChainReference(calls, baselines)


def _voter_calls(target) -> dict[str, tuple] | None:
    """:func:`_reference_calls` and the voters made of what it built: the reference
    kernel again (its caches warm) and the vector peak loop; None where it is None."""
    built = _reference_calls(target)
    if built is None:
        return None
    calls = {**built, HOT_REFERENCE: built[REFERENCE]}
    peak = peak_kernel(target.cpu) if hasattr(target, "cpu") else None
    if peak is not None:
        calls[PEAK_LOOP] = (OneThreadCall(peak[0], PEAK_ITERATIONS, 0.999), ())
    return calls


def _baseline_key(target) -> str:
    """The cost cache's entry of the reference's baseline (by the schedule rules, which
    build another kernel)."""
    return f"chain-reference-{getattr(target, 'rules', 'hand')}"


def _reference_calls(target) -> dict[str, tuple] | None:
    """The calls :func:`chain_reference` appends to a chain: the cache flush of
    ``target``'s CPU, then the reference kernel compiled for that CPU on its random
    input (:func:`.reference_kernel.reference_kernel`: its code kept beside the cost
    cache, so a process does not build it again); None where that CPU's code does not
    run here."""
    if peak_kernel(target.cpu) is None:  # code for a CPU that does not run here
        return None
    kernel = reference_kernel(target, target.cost_model.cache.path.parent)
    if kernel is None:  # it does not compile: NumPy is nothing like the model's code
        return None
    flush = cache_flusher(target.cpu)
    return {EVICT: (lambda args: flush(), ()), REFERENCE: (kernel, kernel.arguments)}


#: :func:`_voter_calls` by CPU description and schedule rules
_REFERENCES: dict[tuple[str, str], dict[str, tuple] | None] = {}


def normalised(timed: Mapping[str, tuple[float, int]], baseline: float,
               speed: float | None = None) -> dict[str, tuple[float, int]]:
    """The figures of a chain timed with the reference (:func:`time_chain`) in the
    reference's unit: each kernel's time over the machine's ``speed`` in the chain (how
    much slower than at the baseline it ran, :func:`chain_speed`; default: the
    reference kernel's time in this chain over its ``baseline``), the reference calls'
    entries left out. A window in which the machine ran 1.3x slower, the reference with
    it, leaves the figures where they were."""
    if speed is None:
        speed = timed[REFERENCE][0] / baseline
    return {name: (seconds / speed, samples) for name, (seconds, samples) in timed.items()
            if name not in REFERENCE_CALLS}


def chain_speed(timed: Mapping[str, tuple[float, int]], baselines: Mapping[str, float]
                ) -> float:
    """How much slower than at its baselines the machine ran in a chain: the median,
    over the :data:`VOTERS` timed in it that have a baseline, of their time over it."""
    return float(np.median([timed[name][0] / baselines[name] for name in VOTERS
                            if name in timed and name in baselines]))


def time_chain(target, calls: Mapping[str, tuple], **options
               ) -> tuple[dict[str, tuple[float, int]], float | None]:
    """The figures of ``calls`` (name -> (callable, arguments), in graph order) timed in
    one chain (:func:`time_in_chains`, ``options`` passed on) with ``target``'s
    reference calls after them in every round (:func:`chain_reference`), normalised by
    the machine's speed in the chain (:func:`chain_speed`, the median of the
    :data:`VOTERS`' slowdowns): what the cost model's estimates and
    ``benchmarks/placement.py``'s check of them both measure; and that speed (how much
    slower than at the baselines the machine ran). The first chain timed against the
    cost cache on the CPU's clock sets the baselines (its figures are its own); a chain
    on the wall clock (``clock="wall"``: a function that is not one kernel) is
    normalised by the voters timed on the wall clock in its rounds, which puts it in
    the baselines' unit too (a chain of the reference calls alone sets them first).
    One voter slowed apart from the kernels, in this chain or in the baselines', moves
    no figure. Without a reference, the chain's own figures and None."""
    reference = chain_reference(target)
    if reference is None:
        return time_in_chains(calls, **options), None
    if reference.seconds is None and options.get("clock", "cpu") != "cpu":
        time_chain(target, {})  # the baseline on the CPU's clock first
        reference = chain_reference(target)
    timed = time_in_chains({**calls, **reference.calls}, sparse=set(reference.calls),
                           **options)
    missing = {name: timed[name][0] for name in VOTERS
               if name in timed and name not in reference.baselines}
    if missing:  # the first chain against the cache (its figures are its own), or a
        # cache written before a voter was: its baseline from this chain
        _keep_baselines(target, {**reference.baselines, **missing})
        if reference.seconds is None:
            return normalised(timed, timed[REFERENCE][0], 1.0), 1.0
        reference = chain_reference(target)
    speed = chain_speed(timed, reference.baselines)
    return normalised(timed, reference.seconds, speed), speed


def _keep_baselines(target, baselines: Mapping[str, float]) -> None:
    """Put the voters' ``baselines`` in ``target``'s cost cache (:func:`chain_reference`
    reads them)."""
    model = target.cost_model
    model.cache.put(model.base_key, _baseline_key(target),
                    {"seconds": baselines[REFERENCE],
                     "voters": {name: seconds for name, seconds in baselines.items()
                                if name != REFERENCE}})


def fused_for(target, graph: Graph) -> Graph:
    """``graph`` as the CPU's build fuses it: the target's graph passes, then fusion."""
    fuse_at = DEFAULT_PIPELINE.index("fuse_ops")
    return PassManager([*target_graph_passes(target), *DEFAULT_PIPELINE[fuse_at:]]).run(graph)


def build_scratch(target, functions: Sequence[Node]) -> dict[str, object]:
    """The kernels of ``functions`` by name, built by ``target`` for timing: the
    fallbacks they record are left out of the target's (the build records its own)."""
    before = set(target.fallbacks)
    kernels = {n.name: target.build(n) for n in functions}
    for name in set(target.fallbacks) - before:
        del target.fallbacks[name]
    return kernels


def cpu_program(target, function: Node):
    """``function``'s body as the CPU runs it: the target's graph passes and fusion
    applied, every fused function built by ``target``; a callable on the body's inputs."""
    graph = fused_for(target, function.body)
    kernels = build_scratch(target, [n for n in graph.nodes if n.body is not None])
    executor = GraphExecutor(graph, kernels, {name: target.name for name in kernels})
    return executor.execute, graph


def node_weight(node: Node) -> int:
    """How much of a fused kernel's time :class:`FusedContext` gives ``node``: its
    multiply-accumulates plus the elements it writes (one operation each: an epilogue's
    element-wise steps cost about that; a convolution's products dominate its kernel)."""
    return multiply_accumulates(node) + sum(v.type.size for v in node.outputs)


def kernel_shares(kernels: Sequence[Node], parts: Mapping[object, frozenset[str]]
                  ) -> dict[object, list[tuple[Node, float]]]:
    """For each part (a set of node names), the fused ``kernels`` holding its nodes and
    the fraction of each kernel's time that is the part's: its nodes' weight
    (:func:`node_weight`) over that of the kernel's nodes in any part (a node the CPU's
    passes added, such as a layout transform, goes with the parts beside it). The
    fractions of one kernel sum to one."""
    owner = {name: part for part, names in parts.items() for name in names}
    found: dict[object, list[tuple[Node, float]]] = {part: [] for part in parts}
    for kernel in kernels:
        weights: dict[object, int] = {}
        for node in kernel.body.nodes:
            part = owner.get(node.name)
            if part is not None:
                weights[part] = weights.get(part, 0) + node_weight(node)
        total = sum(weights.values())
        for part, weight in weights.items():
            found[part].append((kernel, weight / total if total else 1 / len(weights)))
    return found


@dataclass
class FusedContext:
    """The functions a placement asks about as parts of the whole graph they were
    outlined from, fused the way the CPU's build fuses it: a function's time is the
    share of each fused kernel that holds its nodes (by :func:`node_weight`), every
    kernel compiled and timed once.

    Why not each function fused alone: the build fuses across the candidates'
    boundaries (a residual addition into the convolution before it), so kernels
    compiled for a function alone are of other structures than the build's and are
    compiled again, and time other work. Here, where the placement keeps a part on the
    CPU, the build compiles kernels of the structures timed here, which the target
    shares (:meth:`heterocc.sdk.te_target.TETarget.compiled`), and the time estimated is
    the one those kernels take in the model."""

    target: object
    graph: Graph
    #: the node names of each function, by id of its function node
    parts: dict[int, frozenset[str]]
    #: the function nodes (so that an id is not reused while the context is held)
    functions: list[Node] = field(default_factory=list)
    _fused: list[Node] | None = field(default=None, repr=False)
    #: the fused kernels holding each part's nodes, with its share (:func:`kernel_shares`)
    _shares: dict[int, list[tuple[Node, float]]] | None = field(default=None, repr=False)
    #: (seconds, samples, source) of each fused kernel timed or read from the tuning
    #: log (:data:`LOGGED`, :data:`MEASURED`), by its function's name
    _timed: dict[str, tuple[float, int, str]] = field(default_factory=dict, repr=False)
    #: how much slower than its baseline the reference kernel ran in each chain timed
    #: here (:func:`time_chain`; None without a reference), for the report
    slowdowns: list[float | None] = field(default_factory=list, repr=False)

    def knows(self, function: Node) -> bool:
        """Whether ``function`` is one of the parts of this context."""
        return id(function) in self.parts

    def kernels(self) -> list[Node]:
        """The whole graph's fused functions (the graph fused on first use)."""
        if self._fused is None:
            fused = fused_for(self.target, self.graph)
            self._fused = [n for n in fused.nodes if n.body is not None]
        return self._fused

    def measure(self, function: Node) -> tuple[float, int, str]:
        """``function``'s share of the time of the fused kernels holding its nodes, the
        fewest samples any of them was timed by, and where the times came from."""
        if self._shares is None:
            self.shares()
            self._time_candidates()
        seconds, samples, sources = 0.0, MAX_SAMPLES, set()
        for kernel, share in self._shares[id(function)]:
            if kernel.name not in self._timed:
                self._time_rest()
            timed = self._timed[kernel.name]
            seconds += share * timed[0]
            samples = min(samples, timed[1])
            sources.add(timed[2])
        return seconds, samples, source_of(sources)

    def _time_candidates(self) -> None:
        """Time the kernels of every part together (:meth:`_time_kernels`): the whole
        graph's kernels in one chain, those of nodes no pattern matched with the
        candidates'. Why them too: each kernel is timed
        after the one the model runs before it, as ``benchmarks/placement.py`` times
        the model's kernels (a chain of the candidates' kernels alone ran some after
        another predecessor, their caches otherwise warm), and the build compiles them
        anyway (those nodes stay on the CPU whatever the placement)."""
        wanted: dict[str, Node] = {}
        for function in self.functions:
            for kernel, _ in self._shares[id(function)]:
                wanted.setdefault(kernel.name, kernel)
        self._time_kernels(wanted.values())

    def _time_rest(self) -> None:
        """Time the kernels of every part not timed yet, together."""
        self._time_kernels(k for parts in self._shares.values() for k, _ in parts
                           if k.name not in self._timed)

    def _time_kernels(self, kernels) -> None:
        """Compile ``kernels`` together (the target's ``compile_all``: code generated
        while the next kernels are lowered) and time them in graph order, one call of
        each per round (:func:`time_in_chains`); a kernel the tuning log measured is
        neither compiled nor timed."""
        order = {k.name: i for i, k in enumerate(self.kernels())}
        rest = []
        for kernel in sorted({k.name: k for k in kernels}.values(),
                             key=lambda k: order.get(k.name, len(order))):
            logged = logged_time(self.target, kernel.body)
            if logged is not None:
                self._timed[kernel.name] = (logged, 1, LOGGED)
            else:
                rest.append(kernel)
        if not rest:
            return
        compile_all = getattr(self.target, "compile_all", None)
        if callable(compile_all):
            compile_all(rest)
        runs = build_scratch(self.target, rest)
        timed, slower = time_chain(self.target,
                                   {k.name: (runs[k.name], random_arguments(k.inputs))
                                    for k in rest})
        self.slowdowns.append(slower)
        for name, (seconds, samples) in timed.items():
            self._timed[name] = (seconds, samples, MEASURED)

    def shares(self) -> dict[int, list[tuple[Node, float]]]:
        """The fused kernels holding each part's nodes with the part's share of each
        (:func:`kernel_shares`), by id of the part's function; nothing compiled."""
        if self._shares is None:
            self._shares = kernel_shares(self.kernels(), self.parts)
        return self._shares

    def timed_structures(self) -> dict[tuple, tuple[float, int, str]]:
        """The kernels timed so far (seconds, samples, source) by their structure."""
        by_name = {k.name: k for k in self.kernels()}
        return {structure_key(by_name[name].body): timed
                for name, timed in self._timed.items()}


def source_of(sources: set[str]) -> str:
    """How an estimate made of kernels timed or read from the log (``sources``) was
    made: ``"measured"``, ``"tuning log"`` or both."""
    return ", ".join(s for s in (LOGGED, MEASURED) if s in sources) or MEASURED


def cpu_multiply_accumulates(node: Node, winograd: bool = True) -> int:
    """The multiply-accumulates the CPU's kernel of ``node`` performs at the least:
    ``multiply_accumulates``, but for a blocked convolution that Winograd may compute
    (``winograd``: the target lets it) the product's of its cheapest F(m, 3)."""
    direct = multiply_accumulates(node)
    if winograd and node.op == "ConvNCHWc":
        x, w = node.inputs[0].type, node.inputs[1].type
        workload = {"input_shape": tuple(x.shape), "weight_shape": tuple(w.shape),
                    **{name: node.attrs[name] for name in ("strides", "dilations", "group")}}
        if winograd_applies(workload, x.dtype):
            return min(direct, winograd_multiply_accumulates(workload,
                                                             node.outputs[0].type.shape))
    return direct


def mac_element_type(function: Node) -> str | None:
    """The element type of the multiplied operands of ``function``'s first node with
    multiply-accumulates (``int8``, ``float32``, ...), or None when it has none."""
    for node in function.body.nodes:
        if multiply_accumulates(node):
            return str(np.dtype(node.inputs[0].type.dtype))
    return None


@dataclass
class CpuCostModel:
    """The ``estimate`` hook of an :class:`~heterocc.targets.llvm.LLVMTarget`."""

    target: object
    cache: CostCache = field(default_factory=CostCache)
    #: the graph the functions estimated were outlined from (:meth:`within`)
    context: FusedContext | None = None
    #: that graph with the placement's offloaded groups outlined (:meth:`placed`)
    placed_context: FusedContext | None = None

    @property
    def base_key(self) -> str:
        """What every cached figure depends on besides the workload: the CPU
        description (as a target string) and the cost model's version."""
        return f"llvm7/{self.target.tuning_key}"

    @property
    def key(self) -> str:
        """What a function's cached figure depends on besides the workload: the
        :attr:`base_key`, the applied tuning log's records (:func:`log_key`) and
        whether Winograd convolutions are off (their kernels differ)."""
        direct = "" if self._winograd else "/no-winograd"
        return self.base_key + log_key(self.target) + direct

    @property
    def _winograd(self) -> bool:
        """Whether the target may compute convolutions by Winograd (``LLVMTarget.winograd``)."""
        return bool(getattr(self.target, "winograd", True))

    def _multiply_accumulates(self, function: Node) -> int:
        """The multiply-accumulates of ``function``'s kernel (:func:`cpu_multiply_accumulates`)."""
        return sum(cpu_multiply_accumulates(n, self._winograd) for n in function.body.nodes)

    def cached(self, function: Node) -> CostEstimate | None:
        """The function's time from the cache, without measuring (None if absent)."""
        cached = self.cache.get(self.key, workload_key(function))
        if cached is None:
            return None
        return CostEstimate(cached["seconds"],
                            source=f"{cached.get('source', MEASURED)} (cached)",
                            detail={"samples": cached["samples"]})

    def estimate(self, function: Node) -> CostEstimate:
        """The function's time on this CPU: from the cache, or measured now (the kernels
        an applied tuning log measured read from it)."""
        found = self.cached(function)
        if found is not None:
            return found
        seconds, samples, source = self.measure(function)
        self.cache.put(self.key, workload_key(function),
                       {"seconds": seconds, "samples": samples, "source": source})
        macs = self._multiply_accumulates(function)
        element = mac_element_type(function)
        if macs and element is not None:
            self._raise_ceiling(element, macs / seconds)
        return CostEstimate(seconds, source=source, detail={"samples": samples})

    def within(self, graph: Graph, parts: dict[Node, list[Node]]) -> None:
        """Estimate the functions of ``parts`` (function node -> the nodes of ``graph``
        it holds) as parts of ``graph``, fused as the build fuses it
        (:class:`FusedContext`), until the next call; other functions are timed alone."""
        self.context = FusedContext(self.target, graph,
                                    {id(f): frozenset(n.name for n in nodes)
                                     for f, nodes in parts.items()}, list(parts))

    def placed(self, graph: Graph, kept: Mapping[Node, Sequence[Node]],
               offloaded: Sequence[tuple[Sequence[Node], str]]) -> dict[Node, CostEstimate]:
        """The estimates of the functions ``kept`` on the CPU (function node -> its
        nodes of ``graph``, the graph :meth:`within` was given) once the ``offloaded``
        groups of nodes run on other targets (nodes, target name). Two things change
        for them: the build fuses the CPU's part of such a graph otherwise than the
        whole graph (a residual addition whose convolution left cannot join it), and
        the chain of the CPU's kernels skips the offloaded ones, so a kernel runs with
        the caches as other kernels left them (ResNet-18 split on AVX2 code: its last
        small kernels, pooling, flatten, the logits' dequantization, took 25-56% less
        than in the whole graph's chain, where the big convolutions before them had
        streamed megabytes of weights through the caches; unchanged kernels and
        immediate predecessors). So the kept kernels of that fusion are timed again in
        one chain in graph order, as placed (what ``benchmarks/placement.py`` measures
        of the compiled model's CPU kernels), and every kept function gets its share of
        them (kernels of structures compiled for the whole graph are not compiled
        again). Not cached by workload: a function's figure depends on where the others
        run; cached by the split (the offloaded groups' nodes) and the function's
        nodes, so a second compile of the model times nothing."""
        if not offloaded:
            return {}
        split = hashlib.sha1(repr(sorted((target, tuple(n.name for n in nodes))
                                         for nodes, target in offloaded)).encode())
        keys = {f: "placed-" + hashlib.sha1(
            (split.hexdigest() + repr([n.name for n in nodes])).encode()).hexdigest()[:20]
            for f, nodes in kept.items()}
        found = {}
        for function, key in keys.items():
            cached = self.cache.get(self.key, key)
            if cached is not None and "seconds" in cached:
                found[function] = CostEstimate(
                    cached["seconds"], source=f"{cached['source']}, as placed (cached)",
                    detail={"samples": cached["samples"]})
        if len(found) == len(kept):
            return found
        scope = NameScope.of(graph)
        target_of = {id(n): target for nodes, target in offloaded for n in nodes}

        def call(nodes, body):
            target = target_of[id(nodes[0])]
            return scope.fresh(f"{target}_placed"), {"target": target}

        remaining = outline(graph, [list(nodes) for nodes, _ in offloaded], call)
        context = FusedContext(self.target, remaining,
                               {id(f): frozenset(n.name for n in nodes)
                                for f, nodes in kept.items()}, list(kept))
        self.placed_context = context
        for function in kept:
            if function in found:
                continue
            seconds, samples, source = context.measure(function)
            found[function] = CostEstimate(seconds, source=f"{source}, as placed",
                                           detail={"samples": samples})
            self.cache.put(self.key, keys[function],
                           {"seconds": seconds, "samples": samples, "source": source})
        return found

    def measure(self, function: Node) -> tuple[float, int, str]:
        """The fastest of the timed calls of ``function`` on the CPU, their number and
        the figure's source: its share of the whole graph's kernels where
        :meth:`within` gave it, else the function fused and timed alone (read from the
        applied tuning log where it holds every one of the fused kernels)."""
        if self.context is not None and self.context.knows(function):
            return self.context.measure(function)
        if current() is not None:
            fused = fused_for(self.target, function.body)
            logged = [logged_time(self.target, n.body) for n in fused.nodes
                      if n.body is not None]
            if logged and None not in logged:
                return sum(logged), 1, LOGGED
        return (*self._time(function.body), MEASURED)

    def _time(self, body: Graph) -> tuple[float, int]:
        """``body`` fused and built as the CPU runs it, called alone, round after round
        with the reference calls (:func:`time_chain` on the wall clock: the program's
        kernels run on threads that a call of it does not name), so that its figure is
        in the unit of the chains' figures, whatever the machine's speed in its
        window."""
        run, graph = cpu_program(self.target, Node("Function", [], [], name="estimate",
                                                   body=body))
        timed, _ = time_chain(self.target, {"estimate": (run, random_arguments(graph.inputs))},
                              clock="wall")
        return timed["estimate"]

    def lower_bound(self, function: Node) -> tuple[float, str] | None:
        """The least time ``function`` could take on this CPU, and how it was bounded:
        its multiply-accumulates at the peak of this CPU's vector units on their element
        type (:meth:`ceiling`); None for a function without multiply-accumulates (only
        a measurement tells) or where the peak cannot be measured here."""
        macs = self._multiply_accumulates(function)
        element = mac_element_type(function)
        if not macs or element is None:
            return None
        rate = self.ceiling(element)
        if rate is None:
            return None
        return macs / rate, (f"{macs / 1e6:.3g} M MACs at this CPU's {element} vector "
                             f"peak, {rate / 1e9:.3g} GMAC/s")

    def ceiling(self, element: str) -> float | None:
        """The most multiply-accumulates per second this CPU reaches on ``element``
        operands: its vector units' peak (:func:`.peak.multiply_accumulate_peak`, the
        peak loop timed on first use and cached by CPU), or a function's measured rate
        should one have been faster; None for an element type that is not a number or
        a CPU whose code does not run here."""
        found = self.cache.get(self.base_key, f"ceiling-{element}")
        if found is not None and found.get("peak"):
            return found["macs_per_s"]
        try:
            np.dtype(element)
        except TypeError:
            return None
        per_core = self.cache.get(self.base_key, "multiply-add-peak")
        if per_core is None:
            rate = multiply_add_rate(self.target.cpu)
            if rate is None:
                return None
            per_core = {"per_core": rate}
            self.cache.put(self.base_key, "multiply-add-peak", per_core)
        peak = multiply_accumulate_peak(self.target.cpu, element, per_core["per_core"])
        return self._raise_ceiling(element, peak, peak=True)

    def _raise_ceiling(self, element: str, rate: float, peak: bool = False) -> float:
        """Keep ``rate`` as the ceiling if faster; ``peak``: the vector peak has been
        measured (until then the ceiling is not trusted)."""
        found = self.cache.get(self.base_key, f"ceiling-{element}") or {"macs_per_s": 0.0}
        entry = {"macs_per_s": max(rate, found["macs_per_s"]),
                 "peak": peak or bool(found.get("peak"))}
        if entry != found:
            self.cache.put(self.base_key, f"ceiling-{element}", entry)
        return entry["macs_per_s"]
