"""The CPU's tuning space: templates for the schedules of ``schedules.py``, the tasks of a
model as this target compiles it, and the measurement of a candidate.

The templates cover matmul, dense (``X @ W.T``), batch matmul, the blocked NCHW[x]c
convolution the target compiles (dense and depthwise), and the plain NCHW conv2d and
depthwise conv2d. :class:`~heterocc.targets.llvm.target.LLVMTarget` offers them through
its ``tuning()`` hook (:func:`llvm_tuning`); the target reads the applied tuning log
once per function and hands the schedules its configs (:class:`ScheduleConfigs`);
:func:`schedule_matmul_tuned`, :func:`blocked_conv_tiles` and :func:`matmul_panel` apply a
given log to one compute.

One module per concept: :mod:`.matmul` (the matmul, batch matmul and dense templates),
:mod:`.conv` (NCHW conv2d and depthwise conv2d), :mod:`.blocked_conv` (the NCHW[x]c
convolutions the target compiles), :mod:`.auto` (the auto search's workloads),
:mod:`.functions` (whole fused functions as tasks), :mod:`.apply` (a tuning log's
configs for the schedules: :class:`ScheduleConfigs`), :mod:`.measure` (the timing
harness: cache flush and rotation), :mod:`.tasks` (a model's tasks, the measurement of a
candidate, the target's tuning hook).
"""

from __future__ import annotations

from .apply import (
    ScheduleConfigs,
    apply_conv_auto,
    apply_matmul_config,
    blocked_conv_tiles,
    matmul_panel,
    schedule_conv_auto,
    schedule_matmul_tuned,
)
from .auto import (
    AUTO_TEMPLATES,
)
from .blocked_conv import (
    CONV2D_NCHWC,
    DEPTHWISE_CONV2D_NCHWC,
    BlockedConvWorkload,
    blocked_conv_task_args,
    blocked_conv_tiles_of,
    schedule_blocked_conv,
)
from .common import (
    search_hints,
)
from .conv import (
    CONV2D,
    DEPTHWISE_CONV2D,
    conv2d_nchw_reference,
)
from .functions import (
    A_LAYOUTS,
    AUTO_FUNCTION_TEMPLATE,
    FUNCTION,
    FUNCTION_ANCHORS,
    FUNCTION_MARGIN,
    FUNCTION_TEMPLATE,
    REDUCTION_ANCHORS,
    function_body,
    function_configs,
    function_keys,
    function_spec,
    function_tasks,
    function_tuned,
    logged_seconds,
    record_winograd_tile,
)
from .functions import (
    _auto_function_seeds as _auto_function_seeds,
)
from .functions import (
    _function_kind as _function_kind,
)
from .functions import (
    _spec_or_none as _spec_or_none,
)
from .matmul import (
    BATCH_MATMUL,
    DENSE,
    MATMUL,
    schedule_matmul_config,
)
from .measure import (
    FLUSH_L2_MULTIPLE,
    FLUSH_ROWS_PER_CORE,
    MAX_ROTATION,
    cache_flusher,
    rotation_count,
)
from .measure import (
    _rotating as _rotating,
)
from .tasks import (
    TEMPLATES,
    extract_tasks,
    llvm_tuning,
    measure_candidate,
)

__all__ = [
    "AUTO_FUNCTION_TEMPLATE",
    "AUTO_TEMPLATES",
    "A_LAYOUTS",
    "BATCH_MATMUL",
    "BlockedConvWorkload",
    "CONV2D",
    "CONV2D_NCHWC",
    "DENSE",
    "DEPTHWISE_CONV2D",
    "DEPTHWISE_CONV2D_NCHWC",
    "FLUSH_L2_MULTIPLE",
    "FLUSH_ROWS_PER_CORE",
    "FUNCTION",
    "FUNCTION_ANCHORS",
    "FUNCTION_MARGIN",
    "FUNCTION_TEMPLATE",
    "MATMUL",
    "MAX_ROTATION",
    "REDUCTION_ANCHORS",
    "ScheduleConfigs",
    "TEMPLATES",
    "apply_conv_auto",
    "apply_matmul_config",
    "blocked_conv_task_args",
    "blocked_conv_tiles",
    "blocked_conv_tiles_of",
    "cache_flusher",
    "conv2d_nchw_reference",
    "extract_tasks",
    "function_body",
    "function_configs",
    "function_keys",
    "function_spec",
    "function_tasks",
    "function_tuned",
    "logged_seconds",
    "record_winograd_tile",
    "llvm_tuning",
    "matmul_panel",
    "measure_candidate",
    "rotation_count",
    "schedule_blocked_conv",
    "schedule_conv_auto",
    "schedule_matmul_config",
    "schedule_matmul_tuned",
    "search_hints",
]
