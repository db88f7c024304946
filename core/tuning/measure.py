"""Measuring candidates: build, check against the reference and time each config in an
isolated worker process, with a time-out.

The worker is a separate (spawned) Python process that stays up across candidates;
when a candidate crashes it (a segfault in generated code) or runs past the time-out,
the worker is killed, the candidate is recorded as an error and a fresh worker serves
the next one, so tuning goes on. The in-process work is the target's (the ``measure`` of
its :class:`~.templates.TargetTuning`): ``llvm`` builds with LLVM and times wall-clock
seconds per call; ``vta`` generates the instruction stream and reports the timing
model's cycles.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import importlib
import math
import multiprocessing
import os
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from .extract import tuning_target
from .records import fastest
from .space import Config
from .task import Task
from .templates import tuning_of

#: how a candidate can fail
ERROR_KINDS = ("build", "runtime", "wrong", "timeout", "crash")

#: what a timed call finds in the caches (:attr:`MeasureOptions.cache`). ``hot``: the
#: calls run back to back on the same operands, which the previous call left in cache;
#: ``flush``: before each call the target evicts the candidate's weights from every
#: cache level and everything else from its cores' private caches (the flush itself not
#: timed); ``rotate``: the calls take turns over enough
#: copies of the candidate's constants and outputs that each finds its own evicted
#: from the L2 caches, while its inputs stay where the last call left them, as in a
#: model, where a kernel's weights and output buffer were last touched a network run
#: ago and its input was just written by the kernel before it.
CACHE_MODES = ("hot", "flush", "rotate")


@dataclass(frozen=True)
class MeasureOptions:
    """``timeout_s`` bounds one candidate (build + check + timing); ``repeat`` timings
    are taken, each of at least ``min_repeat_s`` of calls (batched to reach it).
    ``cache`` is what the timed calls find in the caches (see :data:`CACHE_MODES`;
    a target that cannot arrange it, such as a timing model, ignores it).
    ``cutoff_s``: a candidate whose first timed call takes longer is timed by one call
    more only (far slower than the task's best, its rank is settled; the faster of the
    two counts, so one call slowed by another process does not discard it; see
    :func:`candidate_limits`)."""

    timeout_s: float = 20.0
    repeat: int = 3
    min_repeat_s: float = 0.002
    rtol: float = 1e-3
    atol: float = 1e-3
    seed: int = 0
    #: the target the candidates are built for, as a target string (``task.tuning_key``
    #: of the tuned target, e.g. a CPU description); empty: the templates' target as
    #: registered (the host)
    target: str = ""
    cache: str = "flush"
    cutoff_s: float = math.inf

    def __post_init__(self):
        if self.cache not in CACHE_MODES:
            raise InputError(f"measure option cache={self.cache!r}: one of "
                             f"{', '.join(CACHE_MODES)}")


#: a candidate whose first call takes longer than this many times the task's best cost
#: so far is timed by one call more only (:attr:`MeasureOptions.cutoff_s`)
CUTOFF_MULTIPLE = 4.0
#: a task's candidates get this many times the longest a successful one of the task
#: took to build, check and time ...
TIMEOUT_MULTIPLE = 4.0
#: ... but never less than this (the first build in a fresh worker, a loaded machine)
TIMEOUT_FLOOR_S = 8.0
#: before any success, a candidate gets the floor plus :data:`FIRST_CALLS` calls of its
#: task at this rate (floating-point operations per second: a scalar loop's)
SLOWEST_RATE = 0.5e9
#: calls of a candidate before its timing is cut short: the check and the first timed
FIRST_CALLS = 2


def candidate_limits(options: MeasureOptions, best_cost: float, slowest_s: float,
                     flops: float = 0.0) -> MeasureOptions:
    """``options`` for the next candidates of a task of ``flops`` operations per call
    whose best cost so far is ``best_cost`` (seconds per call; infinite: none yet) and
    whose slowest successful measurement took ``slowest_s`` (0: none yet): timing stops
    after two calls where the first is beyond :data:`CUTOFF_MULTIPLE` times the best, and the
    time-out is :data:`TIMEOUT_MULTIPLE` times the slowest success, or before any,
    what building and :data:`FIRST_CALLS` calls at :data:`SLOWEST_RATE` take (at least
    :data:`TIMEOUT_FLOOR_S`, at most ``options.timeout_s``). A search spends most of its
    trials on candidates far from the best; without limits a few slow or huge ones
    (an unrolled body LLVM takes a minute to optimize) cost more than the rest."""
    cutoff = CUTOFF_MULTIPLE * best_cost if math.isfinite(best_cost) else options.cutoff_s
    if slowest_s > 0:
        expected = TIMEOUT_MULTIPLE * slowest_s
    else:
        expected = FIRST_CALLS * flops / SLOWEST_RATE if flops > 0 else math.inf
    timeout = min(options.timeout_s, max(TIMEOUT_FLOOR_S, expected))
    return dataclasses.replace(options, cutoff_s=min(cutoff, options.cutoff_s),
                               timeout_s=timeout)


#: timings a finalist's remeasurement takes (:func:`single_call_timing`)
SINGLE_CALL_SAMPLES = 15


def single_call_timing(options: MeasureOptions) -> MeasureOptions:
    """``options`` timing :data:`SINGLE_CALL_SAMPLES` calls one at a time, the fastest
    counting (:func:`.records.fastest`): how finalists are measured again. A call
    shorter than the scheduler's time slice often runs whole without another process
    taking its cores, even on a loaded machine, while a sample averaging many calls
    (the search's own timings) almost always includes one that was preempted. Summed
    over MobileNetV2's 32 functions at load 9, the fastest of 15 single calls put the
    search's picks at 0.88x the hand schedules' speed, the quiet model measured 0.87x;
    the search's own timings had them at 1.07x."""
    return dataclasses.replace(options, repeat=SINGLE_CALL_SAMPLES, min_repeat_s=0.0)


def tuning_context(target: str) -> contextlib.AbstractContextManager:
    """The context a tuning for ``target`` (a target string, see
    :attr:`MeasureOptions.target`; empty: none) builds, measures and reads records in:
    the target's own ``compile_context`` (the CPU target: its CPU is the one tiled for,
    and its records are the ones read)."""
    if not target:
        return contextlib.nullcontext()
    enter = getattr(tuning_target(target), "compile_context", None)
    return enter() if enter is not None else contextlib.nullcontext()


@dataclass(frozen=True)
class MeasureResult:
    """What measuring one candidate gave: costs (lower is better) or an error."""

    costs: tuple[float, ...] = ()
    error: str | None = None
    message: str = ""
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.costs)

    @property
    def cost(self) -> float:
        """The fastest timing (:func:`.records.fastest`), infinite for a failed candidate."""
        return fastest(self.costs) if self.ok else math.inf


class CandidateError(Exception):
    """A candidate failed in a known way (``kind`` is one of ERROR_KINDS)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def check_output(task: Task, got: np.ndarray, expected: np.ndarray,
                 options: MeasureOptions) -> None:
    """Raise CandidateError('wrong') unless ``got`` matches the reference."""
    if got.shape != expected.shape or not np.allclose(got, expected, rtol=options.rtol,
                                                      atol=options.atol):
        worst = float(np.max(np.abs(got - expected))) if got.shape == expected.shape else math.nan
        raise CandidateError("wrong", f"{task.template}: output differs from the NumPy "
                                      f"reference (max abs error {worst:.3g})")


#: environment variable naming the lock file that serializes timings on a machine
TIMING_LOCK_ENV = "HETEROCC_TIMING_LOCK"


def timing_lock_path() -> str:
    """The lock file of this machine's timings (``$HETEROCC_TIMING_LOCK``, else one per
    user in the temporary directory)."""
    return os.environ.get(TIMING_LOCK_ENV) or os.path.join(
        tempfile.gettempdir(), f"heterocc-timing-{os.getuid()}.lock")


@contextlib.contextmanager
def exclusive_timing() -> Iterator[None]:
    """Hold this machine's timing slot: measuring processes (local workers, Ray tasks on
    one node) build in parallel but time one at a time, so that no timing shares the
    cores with another. The slot is a ``flock`` on :func:`timing_lock_path`, released
    by the kernel when a holder dies (a crashed or killed candidate never blocks it)."""
    fd = os.open(timing_lock_path(), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def wait_for_timings() -> None:
    """Return once no timing holds this machine's timing slot (at once when none does):
    what the tuning process calls between two pieces of its own work (each candidate
    a proposal scores), so that its proposals, made while the pool's workers build and
    time the last batch, never share the cores with a timing. A timed call of a
    parallel kernel waits for its slowest thread: on a 2-core machine, a proposal
    running beside it left the kernel one core, so the search ranked its candidates as
    one core runs them and kept points of one or two parallel iterations (14 of
    MobileNetV2's 32 functions in a search from scratch), which ran slower in the
    model. The slot is tested with a shared ``flock`` (a timing holds it exclusively),
    and released at once: the timing that starts next waits for nobody. (An open and a
    close per call: microseconds, against the milliseconds of scoring a candidate.)"""
    fd = os.open(timing_lock_path(), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits while a timing holds it exclusively
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


#: a watch over one timing sample (:func:`time_calls`): called just before the sample,
#: it returns a call that says, just after it, whether the sample ran on fewer cores
#: than the code asked for (the target's thread pool ran its loops on one core)
SampleWatch = Callable[[], Callable[[], bool]]

#: a sample its watch finds degraded is taken again, at most this many times (then the
#: fastest of its takes counts)
SAMPLE_RETAKES = 3


def time_calls(call: Callable[[], None], options: MeasureOptions,
               flush: Callable[[], None] | None = None,
               watch: SampleWatch | None = None) -> tuple[float, ...]:
    """Seconds per call of ``call``: ``repeat`` samples, each averaging enough calls to
    last ``min_repeat_s``, taken while holding the machine's timing slot
    (:func:`exclusive_timing`). With ``flush`` (the target's cache flush, see
    :attr:`MeasureOptions.cache`), ``flush()`` runs before every call and each
    call is timed alone, so the flush's own time is never counted. With ``watch``
    (:data:`SampleWatch`), a sample that ran on fewer cores than asked is taken again
    (:data:`SAMPLE_RETAKES` times at most): a figure of the code, not of where the
    operating system happened to put its threads."""
    with exclusive_timing():
        return _time_calls(call, options, flush, watch)


def _time_calls(call: Callable[[], None], options: MeasureOptions,
                flush: Callable[[], None] | None = None,
                watch: SampleWatch | None = None) -> tuple[float, ...]:
    if flush is not None:
        flush()
    once = _time_once(call)
    if once > options.cutoff_s:  # far slower than the best: a second call settles it
        if flush is not None:
            flush()
        return (once, _watched(lambda: _time_once(call), watch))
    if flush is None:
        return _time_batches(call, options, once, watch)
    number = _calls_per_sample(once, options, FLUSHED_CALLS)

    def sample() -> float:
        total = 0.0
        for _ in range(number):
            flush()
            start = time.perf_counter()
            call()
            total += time.perf_counter() - start
        return total / number

    return tuple(_watched(sample, watch) for _ in range(options.repeat))


def _watched(sample: Callable[[], float], watch: SampleWatch | None) -> float:
    """One ``sample()``, taken again while ``watch`` finds it degraded (at most
    :data:`SAMPLE_RETAKES` times; then the fastest take)."""
    if watch is None:
        return sample()
    fastest_take = math.inf
    for _ in range(1 + SAMPLE_RETAKES):
        degraded = watch()
        seconds = sample()
        if not degraded():
            return seconds
        fastest_take = min(fastest_take, seconds)
    return fastest_take


#: the most calls one flushed sample averages: each call costs a flush besides (a read
#: of twice the L2 caches), and one call timed alone is already long against the
#: clock's resolution
FLUSHED_CALLS = 100


def _time_batches(call: Callable[[], None], options: MeasureOptions,
                  once: float, watch: SampleWatch | None = None) -> tuple[float, ...]:
    """Samples of calls run back to back, each batch timed as a whole (``once``: the
    seconds of one call, timed before)."""
    number = _calls_per_sample(once, options, BATCHED_CALLS)

    def sample() -> float:
        start = time.perf_counter()
        for _ in range(number):
            call()
        return (time.perf_counter() - start) / number

    return tuple(_watched(sample, watch) for _ in range(options.repeat))


#: the most calls one back-to-back sample batches
BATCHED_CALLS = 1000


def _time_once(call: Callable[[], None]) -> float:
    """Seconds of one call (the first of a timing: its length sets the batching)."""
    start = time.perf_counter()
    call()
    return max(time.perf_counter() - start, 1e-7)


def _calls_per_sample(once: float, options: MeasureOptions, limit: int) -> int:
    """Calls that one sample of a call lasting ``once`` seconds averages to last
    ``options.min_repeat_s``: at least one, at most ``limit``."""
    return max(1, min(limit, math.ceil(options.min_repeat_s / once)))


#: seconds NumPy's BLAS threads may go on busy-waiting after a product (OpenBLAS spins
#: for about 2^28 cycles before it sleeps)
BLAS_IDLE_S = 0.25


@functools.lru_cache(maxsize=2)
def task_inputs(key: str, seed: int) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """Random inputs of task ``key`` and its reference output, computed once per task in
    a worker (the candidates of a task follow one another; two are kept, for a task's
    best and its hand schedule timed in turn), then a pause of
    ``BLAS_IDLE_S``: BLAS threads still spinning after the reference's product would take
    a core from the candidate timed next, ranking parallel schedules below serial ones
    unlike a quiet run of the compiled model."""
    task = Task.from_key(key)
    inputs = tuple(task.definition.inputs(task.args, np.random.default_rng(seed)))
    expected = task.definition.reference(task.args, list(inputs))
    for array in inputs:  # shared by every candidate of the task
        array.flags.writeable = False
    time.sleep(BLAS_IDLE_S)
    return inputs, expected


def measure_in_process(task: Task, config: Config, options: MeasureOptions) -> MeasureResult:
    """Measure one candidate in this process, in the tuned target's context
    (:func:`tuning_context`)."""
    with tuning_context(options.target):
        return _measure(task, config, options)


def _measure(task: Task, config: Config, options: MeasureOptions) -> MeasureResult:
    """:func:`measure_in_process` inside the tuned target's context."""
    start = time.perf_counter()
    runner = tuning_of(task.target).measure
    try:
        costs = runner(task, config, options)
    except CandidateError as error:
        return MeasureResult(error=error.kind, message=str(error),
                             elapsed_s=time.perf_counter() - start)
    except Exception as error:
        return MeasureResult(error="runtime", message="".join(
            traceback.format_exception_only(error)).strip(), elapsed_s=time.perf_counter() - start)
    return MeasureResult(costs=tuple(costs), elapsed_s=time.perf_counter() - start)


def _worker_main(connection, setup_modules: Sequence[str]) -> None:
    for module in setup_modules:
        importlib.import_module(module)
    connection.send("ready")
    while True:
        try:
            job = connection.recv()
        except EOFError:
            return
        connection.send(measure_values(*job))


def measure_values(key: str, values: dict, options: MeasureOptions) -> MeasureResult:
    """Measure the config of knob ``values`` of task ``key`` in this process: what a
    worker is sent. Its space is built in the tuned target's context (the CPU's
    registers and lanes shape a sketch)."""
    with tuning_context(options.target):
        task = Task.from_key(key)
        return _measure(task, task.space.from_values(values), options)


def measure_in_order(measure_one: Callable[[Task, Config], MeasureResult], task: Task,
                     configs: Sequence[Config],
                     on_result: Callable[[Config, MeasureResult], None] | None = None
                     ) -> list[MeasureResult]:
    """``measure_one`` on each of ``configs`` in turn, reporting each result to
    ``on_result`` as it arrives (what a pool of one does)."""
    results = []
    for config in configs:
        results.append(measure_one(task, config))
        if on_result is not None:
            on_result(config, results[-1])
    return results


class InProcessMeasurer:
    """Measures candidates in this process: no isolation, so only for runners that
    cannot crash or hang the interpreter (the accelerator's timing model)."""

    def __init__(self, options: MeasureOptions | None = None):
        self.options = options or MeasureOptions()

    def measure_one(self, task: Task, config: Config,
                    options: MeasureOptions | None = None) -> MeasureResult:
        return measure_in_process(task, config, options or self.options)

    def measure_batch(self, task: Task, configs: Sequence[Config],
                      on_result: Callable[[Config, MeasureResult], None] | None = None,
                      options=None) -> list[MeasureResult]:
        """Measure ``configs`` one after another (the interface of the pools, ``options``
        as theirs; a time-out cannot stop a call here)."""
        def measure_one(task: Task, config: Config) -> MeasureResult:
            now = options() if callable(options) else options
            return self.measure_one(task, config, now)

        return measure_in_order(measure_one, task, configs, on_result)

    def close(self) -> None:
        """Nothing to release (the interface of :class:`Measurer`)."""

    def __enter__(self) -> InProcessMeasurer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Measurer:
    """Measures candidates in an isolated worker process that is replaced after a crash
    or a time-out (the successor spawned at once, so that it starts up while the tuner
    works on its next candidates). ``setup_modules`` are imported in the worker first
    (e.g. to register extra templates). Use as a context manager, or call :meth:`close`."""

    def __init__(self, options: MeasureOptions | None = None,
                 setup_modules: Sequence[str] = (), start_timeout_s: float = 120.0,
                 wait_s: float = 0.0):
        self.options = options or MeasureOptions()
        self.setup_modules = tuple(setup_modules)
        self.start_timeout_s = start_timeout_s
        # one of several workers may wait this long for the timing slot on top of its
        # own time-out (see pool.LocalPool)
        self.wait_s = wait_s
        self._context = multiprocessing.get_context("spawn")
        self._process = None
        self._connection = None
        self._ready = False

    def _spawn(self) -> None:
        """Start a worker process without waiting for it to be ready (it imports the
        compiler and the setup modules meanwhile: several seconds)."""
        parent, child = self._context.Pipe()
        process = self._context.Process(target=_worker_main,
                                        args=(child, self.setup_modules), daemon=True)
        process.start()
        self._process = process  # only a started process is stopped (killed) later
        child.close()
        self._connection = parent
        self._ready = False

    def _start(self) -> None:
        """A worker ready for a candidate: the one spawned before (a standby), else a
        new one."""
        if self._process is None:
            self._spawn()
        if self._ready:
            return
        parent = self._connection
        if not parent.poll(self.start_timeout_s):
            self._stop()
            raise InputError(f"tuning worker did not start within {self.start_timeout_s} s")
        try:
            parent.recv()
        except EOFError:
            self._stop()
            raise InputError("tuning worker exited while starting (a setup module failed "
                             "to import?)") from None
        self._ready = True

    def _replace(self) -> None:
        """The worker stopped and its successor spawned at once (a standby), so that it
        starts while the tuner chooses the next candidates, not after."""
        self._stop()
        try:
            self._spawn()
        except OSError:  # no process now: the next candidate starts one (or says why)
            self._stop()

    def _stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.join()
            self._process = None
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def measure(self, task: Task, configs: Sequence[Config]) -> list[MeasureResult]:
        """Measure ``configs`` of ``task`` one after another."""
        return [self.measure_one(task, config) for config in configs]

    def measure_one(self, task: Task, config: Config,
                    options: MeasureOptions | None = None) -> MeasureResult:
        """Measure one candidate in the worker (under ``options``, default this
        measurer's); crashes and hangs become errors."""
        options = options or self.options
        self._start()
        start = time.perf_counter()
        try:
            self._connection.send((task.workload_key, config.to_json(), options))
            if not self._connection.poll(options.timeout_s + self.wait_s):
                self._replace()
                return MeasureResult(error="timeout", message=(
                    f"no result within {options.timeout_s + self.wait_s:.3g} s"),
                    elapsed_s=time.perf_counter() - start)
            return self._connection.recv()
        except (EOFError, ConnectionError):
            self._process.join(timeout=5)
            exitcode = self._process.exitcode
            self._replace()
            return MeasureResult(error="crash", message=(
                f"the worker process died (exit code {exitcode})"),
                elapsed_s=time.perf_counter() - start)

    def close(self) -> None:
        self._stop()

    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
