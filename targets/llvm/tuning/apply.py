"""A tuning log's configs for the schedules of one function (:class:`ScheduleConfigs`), and
helpers that apply a given log to one compute, for code outside a compile (tests,
benchmarks): every one takes the log; none reads an ambient one."""

from __future__ import annotations

from dataclasses import dataclass

from heterocc.sdk import te
from heterocc.sdk.tuning import ApplyHistoryBest, Config, Sketch, auto_name, workload_key

from ..cpu import CPUDescription
from ..schedules import (
    BlockedConvTiles,
    DepthwiseConvTiles,
)
from .blocked_conv import blocked_conv_task_args, blocked_conv_tiles_of
from .common import search_hints
from .matmul import schedule_matmul_config

# ------------------------------------------------------------------ applying a tuning log


@dataclass(frozen=True)
class ScheduleConfigs:
    """What the applied tuning log says for the schedules of one function, decided when
    the function starts compiling (:func:`function_configs`) and handed to the CPU's
    schedule rules: no schedule reads a log or a context itself. ``log``: the applied
    log (None: every schedule keeps its defaults); ``choice``: the decision for the
    function as a whole, None (no records of it: the workload records apply),
    ``("hand", None)`` (the hand schedules, with their defaults) or
    ``("auto", config)`` (its auto record: see :func:`function_tuned`)."""

    log: ApplyHistoryBest | None = None
    choice: tuple | None = None

    def _best_of(self, keys: list[str]) -> tuple[str | None, Config | None]:
        return (None, None) if self.log is None else self.log.best_of(keys)

    def matmul_panel(self, m: int, n: int, k: int, dtype: str) -> int | None:
        """The panel width (packed columns of B) of the log's best ``matmul`` config of
        this shape, or None: the compute is packed with it so that :meth:`matmul` can
        then apply that config. Inside a function the log tuned as a whole: its auto
        record's panel, or None for the hand schedule."""
        choice = self.choice
        if choice is not None:
            return choice[1]["panel"] if choice[0] == "auto" and "panel" in choice[1].values \
                else None
        key, config = self._best_of(_matmul_keys((m, n, k, dtype)))
        return None if config is None or key != workload_key("matmul", (m, n, k, dtype)) \
            else config["panel"]

    def matmul(self, C: te.Tensor) -> tuple[str, Config] | None:
        """The log's best config for the product ``C`` (packed by ``pack_matmul``):
        ``("auto", config)`` for the auto search's, ``("hand", config)`` for the
        ``matmul`` template's among those whose panel width matches the packing already
        in the compute (see :meth:`matmul_panel`); None when there is none."""
        packed = C.op.attrs.get("packed_B")
        if packed is None or len(C.shape) != 2 or self.choice is not None or self.log is None:
            return None
        (m, n), (_, depth, panel) = C.shape, packed.shape
        args = (m, n, depth, C.dtype)
        key, config = self._best_of(_matmul_keys(args))
        if config is not None and key == workload_key(auto_name("matmul"), args):
            return "auto", config
        config = self.log.lookup(workload_key("matmul", args),
                                 where=lambda c: c["panel"] == panel)
        return None if config is None else ("hand", config)

    def _blocked_conv_task(self, conv: te.Tensor) -> tuple[str, tuple] | None:
        """``(template, args)`` of the blocked convolution ``conv``'s task (its compute
        carries the workload) when a log applies and no whole-function choice was made."""
        workload = conv.op.attrs.get("blocked_conv")
        if workload is None or self.log is None or self.choice is not None:
            return None
        return blocked_conv_task_args(
            workload["input_shape"], workload["weight_shape"], workload["strides"],
            workload["pads"], workload["dilations"], workload["group"], conv.dtype)

    def blocked_conv_tiles(self, conv: te.Tensor
                           ) -> BlockedConvTiles | DepthwiseConvTiles | None:
        """The tiles (:func:`blocked_conv_tiles_of`) of the log's best config for the
        blocked convolution ``conv``, or None without a log or a record of it."""
        task = self._blocked_conv_task(conv)
        if task is None:
            return None
        template, args = task
        config = self.log.lookup(workload_key(template, args))
        return None if config is None else blocked_conv_tiles_of(
            config, template == "depthwise_conv2d_nchwc")

    def conv_auto(self, conv: te.Tensor) -> Config | None:
        """The log's auto-search record of the blocked convolution ``conv``'s workload
        when it beats the template's records, else None."""
        task = self._blocked_conv_task(conv)
        if task is None:
            return None
        template, args = task
        auto_key = workload_key(auto_name(template), args)
        key, config = self._best_of([workload_key(template, args), auto_key])
        return config if key == auto_key else None


def apply_matmul_config(schedule: te.Schedule, C: te.Tensor,
                        chosen: tuple[str, Config] | None,
                        cpu: CPUDescription | None = None) -> bool:
    """Schedule the product ``C`` by ``chosen`` (:meth:`ScheduleConfigs.matmul`): the
    auto search's sketch, derived from this very compute, or the ``matmul`` template's
    schedule; False, touching nothing, for None."""
    if chosen is None:
        return False
    kind, config = chosen
    if kind == "auto":
        Sketch([C], search_hints(C.dtype, cpu)).schedule_stages(schedule, [C], config)
    else:
        schedule_matmul_config(schedule, C, C.op.attrs["packed_B"], config)
    return True


def apply_conv_auto(schedule: te.Schedule, conv: te.Tensor, config: Config | None,
                    epilogue: te.Tensor | None = None,
                    cpu: CPUDescription | None = None) -> bool:
    """Schedule the blocked convolution ``conv`` (and its elementwise ``epilogue``, the
    function's output, when given) by its auto-search ``config``
    (:meth:`ScheduleConfigs.conv_auto`); False, touching nothing, for None. The sketch
    is derived from this very compute: the epilogue is fused into the convolution's
    tiles by the same point that was tuned without it."""
    if config is None:
        return False
    outputs = [epilogue if epilogue is not None else conv]
    Sketch(outputs, search_hints(conv.dtype, cpu)).schedule_stages(schedule, outputs, config)
    return True


def _matmul_keys(args: tuple) -> list[str]:
    """The template's and the auto search's keys of a matmul workload."""
    return [workload_key("matmul", args), workload_key(auto_name("matmul"), args)]


def matmul_panel(log: ApplyHistoryBest | None, m: int, n: int, k: int, dtype: str
                 ) -> int | None:
    """:meth:`ScheduleConfigs.matmul_panel` of tuning ``log`` (None: no log, no panel)."""
    return ScheduleConfigs(log).matmul_panel(m, n, k, dtype)


def schedule_matmul_tuned(log: ApplyHistoryBest | None, schedule: te.Schedule, C: te.Tensor,
                          cpu: CPUDescription | None = None) -> bool:
    """Schedule a product made by ``schedules.matmul`` with the best config of tuning
    ``log`` (:meth:`ScheduleConfigs.matmul`); False, touching nothing, when there is
    none."""
    return apply_matmul_config(schedule, C, ScheduleConfigs(log).matmul(C), cpu)


def blocked_conv_tiles(log: ApplyHistoryBest | None, conv: te.Tensor
                       ) -> BlockedConvTiles | DepthwiseConvTiles | None:
    """:meth:`ScheduleConfigs.blocked_conv_tiles` of tuning ``log``."""
    return ScheduleConfigs(log).blocked_conv_tiles(conv)


def schedule_conv_auto(log: ApplyHistoryBest | None, schedule: te.Schedule, conv: te.Tensor,
                       epilogue: te.Tensor | None = None,
                       cpu: CPUDescription | None = None) -> bool:
    """:func:`apply_conv_auto` with the auto record of tuning ``log``."""
    return apply_conv_auto(schedule, conv, ScheduleConfigs(log).conv_auto(conv), epilogue, cpu)
