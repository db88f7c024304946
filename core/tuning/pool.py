"""Measurement pools: candidates measured concurrently, each isolated, results handed
back as they arrive.

:class:`LocalPool` runs ``workers`` isolated worker processes on this machine (each a
:class:`~.measure.Measurer`: a crashing or hanging candidate costs its worker, replaced,
and one trial). :class:`RayPool` runs each candidate as a Ray task on a Ray cluster
(``ray start --head`` on one machine, ``ray start --address=HEAD:6379`` on the others;
``address="auto"`` joins it, ``"local"`` starts one in this process). Ray is an optional
dependency (``pip install heterocc[distributed]``).

In both, builds fan out while timings do not overlap: the target's timing runs under
the machine's timing slot (:func:`.measure.exclusive_timing`, a file lock per node), so
at most one candidate per node is timed at a time.
"""

from __future__ import annotations

import importlib
import queue
import threading
import time
from collections.abc import Callable, Sequence

from ..errors import InputError
from .measure import (
    MeasureOptions,
    Measurer,
    MeasureResult,
    measure_in_order,
    measure_values,
)
from .space import Config
from .task import Task

#: called with each candidate's result as soon as it is measured
OnResult = Callable[[Config, MeasureResult], None]
#: what a batch is measured under: options, or a call giving each candidate's as it
#: starts (limits that follow the results of the batch's earlier candidates)
BatchOptions = MeasureOptions | Callable[[], MeasureOptions] | None


def options_now(options: BatchOptions, default: MeasureOptions) -> MeasureOptions:
    """The options a candidate starting now is measured under."""
    if options is None:
        return default
    return options() if callable(options) else options


class LocalPool:
    """``workers`` isolated measuring processes on this machine (see the module
    docstring). ``setup_modules`` are imported in every worker first."""

    def __init__(self, options: MeasureOptions | None = None, workers: int = 1,
                 setup_modules: Sequence[str] = ()):
        if workers < 1:
            raise InputError(f"--workers {workers}: need at least one measuring worker")
        self.options = options or MeasureOptions()
        # a worker may wait for the others' timings before its own (one slot per node)
        wait = self.options.timeout_s * (workers - 1)
        self.measurers = [Measurer(self.options, setup_modules, wait_s=wait)
                          for _ in range(workers)]

    @property
    def workers(self) -> int:
        return len(self.measurers)

    def measure_one(self, task: Task, config: Config,
                    options: MeasureOptions | None = None) -> MeasureResult:
        return self.measurers[0].measure_one(task, config, options)

    def measure_batch(self, task: Task, configs: Sequence[Config],
                      on_result: OnResult | None = None,
                      options: BatchOptions = None) -> list[MeasureResult]:
        """Measure ``configs`` on the workers (under ``options``, see
        :data:`BatchOptions`; default the pool's); ``on_result`` is called (in this
        thread's order of arrival, one call at a time) as each finishes. Results in the
        order of ``configs``."""
        if len(self.measurers) == 1 or len(configs) <= 1:
            return measure_in_order(
                lambda t, c: self.measure_one(t, c, options_now(options, self.options)),
                task, configs, on_result)
        pending: queue.Queue = queue.Queue()
        for position, config in enumerate(configs):
            pending.put((position, config))
        done: queue.Queue = queue.Queue()

        def serve(measurer: Measurer) -> None:
            while True:
                try:
                    position, config = pending.get_nowait()
                except queue.Empty:
                    return
                try:
                    done.put((position, config, measurer.measure_one(
                        task, config, options_now(options, self.options))))
                except Exception as error:  # a worker that cannot start: the run's error
                    done.put((position, config, error))

        threads = [threading.Thread(target=serve, args=(m,), daemon=True)
                   for m in self.measurers[:len(configs)]]
        for thread in threads:
            thread.start()
        results: list[MeasureResult | None] = [None] * len(configs)
        for _ in configs:
            position, config, result = done.get()
            if isinstance(result, Exception):
                for thread in threads:
                    thread.join()
                raise result
            results[position] = result
            if on_result is not None:
                on_result(config, result)
        for thread in threads:
            thread.join()
        return results

    def close(self) -> None:
        for measurer in self.measurers:
            measurer.close()

    def __enter__(self) -> LocalPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _ray_measure(key: str, values: dict, options: MeasureOptions,
                 setup_modules: tuple[str, ...]) -> MeasureResult:
    """One candidate, in a Ray worker process."""
    for module in setup_modules:
        importlib.import_module(module)
    return measure_values(key, values, options)


class RayPool:
    """Candidates measured as Ray tasks (see the module docstring). ``address``: a Ray
    cluster's address, ``"auto"`` (the cluster ``ray start --head`` started on this
    machine) or ``"local"`` (a runtime started in this process with ``local_cpus``).
    A candidate that crashes its Ray worker is a ``crash``; one still running after its
    time-out (plus the wait for its node's timing slot) is cancelled, a ``timeout``."""

    def __init__(self, address: str, options: MeasureOptions | None = None,
                 setup_modules: Sequence[str] = (), local_cpus: int = 2,
                 max_in_flight: int | None = None):
        try:
            import ray
        except ImportError:
            raise InputError("--ray needs the optional Ray dependency: pip install "
                             "'heterocc[distributed]'") from None
        self._ray = ray
        self.options = options or MeasureOptions()
        self.setup_modules = tuple(setup_modules)
        self._started_here = not ray.is_initialized()
        if self._started_here:
            if address == "local":
                ray.init(num_cpus=local_cpus, include_dashboard=False,
                         log_to_driver=False)
            else:
                ray.init(address=address, include_dashboard=False, log_to_driver=False)
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.max_in_flight = max_in_flight or max(1, cpus)
        # no retries: a candidate that kills its worker must cost one trial, not more
        self._remote = ray.remote(max_retries=0, num_cpus=1)(_ray_measure)

    @property
    def workers(self) -> int:
        return self.max_in_flight

    def measure_one(self, task: Task, config: Config,
                    options: MeasureOptions | None = None) -> MeasureResult:
        return self.measure_batch(task, [config], options=options)[0]

    def measure_batch(self, task: Task, configs: Sequence[Config],
                      on_result: OnResult | None = None,
                      options: BatchOptions = None) -> list[MeasureResult]:
        """Measure ``configs`` as Ray tasks (under ``options``, see
        :data:`BatchOptions`; default the pool's), at most ``max_in_flight`` at a time;
        ``on_result`` is called as each finishes. Results in the order of ``configs``."""
        ray = self._ray
        nodes = max(1, len([n for n in ray.nodes() if n.get("Alive")]))
        queued = max(1, -(-self.max_in_flight // nodes))  # candidates per node's slot
        results: list[MeasureResult | None] = [None] * len(configs)
        waiting = list(enumerate(configs))
        running: dict = {}
        while waiting or running:
            while waiting and len(running) < self.max_in_flight:
                position, config = waiting.pop(0)
                now = options_now(options, self.options)
                ref = self._remote.remote(task.workload_key, config.to_json(), now,
                                          self.setup_modules)
                running[ref] = (position, config, time.perf_counter(),
                                now.timeout_s * queued)
            ready, _ = ray.wait(list(running), num_returns=1, timeout=0.2)
            finished = []
            for ref in ready:
                position, config, start, _ = running.pop(ref)
                finished.append((position, config, self._result(ref, start)))
            now = time.perf_counter()
            for ref, (position, config, start, limit) in list(running.items()):
                if now - start > limit:
                    ray.cancel(ref, force=True)
                    running.pop(ref)
                    finished.append((position, config, MeasureResult(
                        error="timeout", message=f"no result within {limit:.0f} s",
                        elapsed_s=now - start)))
            for position, config, result in finished:
                results[position] = result
                if on_result is not None:
                    on_result(config, result)
        return results

    def _result(self, ref, start: float) -> MeasureResult:
        ray = self._ray
        try:
            return ray.get(ref)
        except (ray.exceptions.WorkerCrashedError, ray.exceptions.RayTaskError,
                ray.exceptions.TaskCancelledError, ray.exceptions.NodeDiedError) as error:
            return MeasureResult(error="crash", message=(
                f"the Ray worker died ({type(error).__name__}): "
                f"{str(error).splitlines()[0] if str(error) else ''}"),
                elapsed_s=time.perf_counter() - start)

    def close(self) -> None:
        if self._started_here and self._ray.is_initialized():
            self._ray.shutdown()

    def __enter__(self) -> RayPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def make_pool(options: MeasureOptions, workers: int = 1, ray: str | None = None,
              setup_modules: Sequence[str] = ()) -> LocalPool | RayPool:
    """A :class:`RayPool` on ``ray`` (an address, ``auto`` or ``local``) when given,
    else a :class:`LocalPool` of ``workers``."""
    if ray:
        return RayPool(ray, options, setup_modules, local_cpus=max(workers, 2))
    return LocalPool(options, workers, setup_modules)
