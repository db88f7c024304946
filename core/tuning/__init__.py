"""heterocc.tuning: schedules chosen by measurement (AutoTVM style).

Templates expose knobs in a config space (:mod:`.space`); they belong to the targets,
which offer them, the tasks of a model and the measurement of a candidate through their
``tuning()`` hook (:mod:`.templates`, :mod:`.task`); tuners propose configs
(:mod:`.tuners`), which are built and measured in isolated worker processes
(:mod:`.measure`); every measurement is appended to a JSON-lines log (:mod:`.records`)
that a later run resumes from and that compilation applies (:mod:`.apply`).
"""

from .apply import ApplyHistoryBest, lookup
from .extract import extract_tasks
from .measure import InProcessMeasurer, MeasureOptions, Measurer, MeasureResult
from .records import MeasureRecord, RecordLog, best_configs, read_records
from .space import Config, ConfigSpace, Knob
from .task import Task, workload_key
from .templates import TEMPLATES, TargetTuning, Template, register_template, tuning_of
from .tuners import (
    CostModel,
    GeneticTuner,
    GridTuner,
    RandomTuner,
    XGBTuner,
    make_tuner,
    remeasure_best,
    tune_task,
)

__all__ = [
    "ApplyHistoryBest", "Config", "ConfigSpace", "CostModel", "GeneticTuner", "GridTuner",
    "InProcessMeasurer", "Knob", "MeasureOptions", "MeasureRecord", "MeasureResult", "Measurer",
    "RandomTuner", "RecordLog", "TEMPLATES", "TargetTuning", "Task", "Template", "XGBTuner",
    "best_configs", "extract_tasks", "lookup", "make_tuner", "read_records",
    "register_template", "remeasure_best", "tune_task", "tuning_of", "workload_key",
]
