"""What a :class:`~heterocc.sdk.TunableTarget` builds its tuning from: config spaces and
knobs, templates, tasks and their workload keys, measurement helpers, records and the
tuning log a compilation applies, and the template-free (auto) search's pieces.

These are the tuning machinery's own classes (``heterocc.tuning``), gathered here so that a
target imports them from the SDK; see ``docs/tuning.md``."""

from heterocc.tuning.apply import ApplyHistoryBest, current, lookup, records_for
from heterocc.tuning.auto import (
    CONSTANT_SELECTS,
    AutoWorkload,
    SearchHints,
    Sketch,
    auto_name,
    auto_template,
)
from heterocc.tuning.measure import (
    CandidateError,
    MeasureOptions,
    check_output,
    task_inputs,
    time_calls,
)
from heterocc.tuning.records import BASELINE, PAIRED, MeasureRecord, fastest
from heterocc.tuning.space import Config, ConfigSpace, Knob, divisors, split_options
from heterocc.tuning.task import SCHEDULE_RULES, Task, matmul_dims, workload_key
from heterocc.tuning.templates import SECONDS, TargetTuning, Template

__all__ = [
    "BASELINE", "PAIRED", "SCHEDULE_RULES", "SECONDS", "ApplyHistoryBest", "AutoWorkload",
    "CONSTANT_SELECTS", "CandidateError", "Config", "ConfigSpace", "Knob", "MeasureOptions",
    "MeasureRecord", "SearchHints", "Sketch",
    "TargetTuning", "Task", "Template", "auto_name", "auto_template", "check_output",
    "current", "divisors", "fastest", "lookup", "matmul_dims", "records_for", "split_options",
    "task_inputs", "time_calls", "workload_key",
]
