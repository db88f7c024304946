"""Applying a tuning log at compile time: the best measured config of each task.

``with ApplyHistoryBest("tune.jsonl"): heterocc.compile(...)`` makes the log's best
configs current for the code inside the block; targets then ask :func:`lookup` (or the
target-specific helpers below) for the config of a workload and fall back to their
default schedule when it has none. The current context is a ``ContextVar``, so threads
and nested blocks each see their own.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from .. import te
from .records import MeasureRecord, config_costs, read_records
from .space import Config
from .task import Task, workload_key
from .templates import schedule_matmul_config

if TYPE_CHECKING:
    from ..targets.llvm.schedules import BlockedConvTiles

_CURRENT: contextvars.ContextVar[ApplyHistoryBest | None] = contextvars.ContextVar(
    "heterocc_tuning_context", default=None)


class ApplyHistoryBest:
    """The successfully measured configs of a log (a path, or records), best first per
    task; a config measured several times is ranked by the median of its records
    (:func:`.records.config_costs`)."""

    def __init__(self, log: str | Path | Iterable[MeasureRecord]):
        records = read_records(log) if isinstance(log, str | Path) else list(log)
        first_record: dict[tuple[str, int], MeasureRecord] = {}
        for record in records:
            if record.ok:
                first_record.setdefault((record.workload_key, record.config_index), record)
        self._by_task: dict[str, list[MeasureRecord]] = {
            key: [first_record[key, index] for index in sorted(costs, key=costs.get)]
            for key, costs in config_costs(records).items()}
        self._token = None

    @property
    def workload_keys(self) -> list[str]:
        return list(self._by_task)

    def lookup(self, key: str, where: Callable[[Config], bool] | None = None) -> Config | None:
        """The fastest config of task ``key`` (satisfying ``where`` when given), or None."""
        records = self._by_task.get(key)
        if not records:
            return None
        space = Task.from_key(key).space
        for record in records:
            config = space.from_values(record.config)
            if where is None or where(config):
                return config
        return None

    def __enter__(self) -> ApplyHistoryBest:
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc) -> None:
        _CURRENT.reset(self._token)


def current() -> ApplyHistoryBest | None:
    """The tuning log applied here, if any."""
    return _CURRENT.get()


def lookup(key: str, where: Callable[[Config], bool] | None = None) -> Config | None:
    """The best config of workload ``key`` in the current log (None outside one, or when
    the log has no successful record of it)."""
    context = current()
    return None if context is None else context.lookup(key, where)


def matmul_panel(m: int, n: int, k: int, dtype: str) -> int | None:
    """The panel width (packed columns of B) of the current log's best ``matmul`` config
    of this shape, or None: the compute is built with it (``targets.llvm.schedules.
    matmul``) so that :func:`schedule_matmul_tuned` can then apply that config."""
    config = lookup(workload_key("matmul", (m, n, k, dtype)))
    return None if config is None else config["panel"]


def schedule_matmul_tuned(schedule: te.Schedule, C: te.Tensor) -> bool:
    """Schedule a product made by ``targets.llvm.schedules.matmul`` with the current
    log's best ``matmul`` config of its shape (among those whose panel width matches the
    packing already in the compute: the best one's, see :func:`matmul_panel`, unless the
    compute was built outside the log's context); False, touching nothing, when there
    is none."""
    packed = C.op.attrs.get("packed_B")
    if packed is None or len(C.shape) != 2:
        return False
    (m, n), (_, depth, panel) = C.shape, packed.shape
    config = lookup(workload_key("matmul", (m, n, depth, C.dtype)),
                    where=lambda c: c["panel"] == panel)
    if config is None:
        return False
    schedule_matmul_config(schedule, C, packed, config)
    return True


def blocked_conv_tiles(conv: te.Tensor) -> BlockedConvTiles | None:
    """The ``BlockedConvTiles`` of the current log's best config for the blocked
    convolution ``conv`` (a ``ConvNCHWc`` compute of the compute library, which
    carries its workload), or None when no log applies or it has no record of it."""
    from .templates import blocked_conv_task_args, blocked_conv_tiles_of

    workload = conv.op.attrs.get("blocked_conv")
    if workload is None or current() is None:
        return None
    template, args = blocked_conv_task_args(
        workload["input_shape"], workload["weight_shape"], workload["strides"],
        workload["pads"], workload["dilations"], workload["group"], conv.dtype)
    config = lookup(workload_key(template, args))
    return None if config is None else blocked_conv_tiles_of(config)


def vta_tiling(rows: int, k: int, n: int, hardware, requantize: bool = True
               ) -> tuple[object, int] | None:
    """The current log's best accelerator GEMM tiling and virtual thread count of a
    (rows x k) @ (k x n) GEMM on ``hardware`` (a ``HardwareConfig``, preset or config
    name), or None."""
    from ..accel_sim.reference_programs import GemmTiling
    from .accel import vta_gemm_task

    config = lookup(vta_gemm_task(rows, k, n, hardware, requantize).workload_key)
    if config is None:
        return None
    tiling = GemmTiling(config["block_rows"], config["block_cols"], config["k_chunk"])
    return tiling, config["virtual_threads"]
