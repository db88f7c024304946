"""Tuning tasks: one template applied to one workload, named by a stable key; the tasks
of a model come from its target (:func:`extract_tasks`).

A workload key is the JSON text of ``[template, *args]`` (e.g.
``["matmul", 1024, 1024, 1024, "float32"]``): the same in every process and run, so a
log written by one run is read, resumed and applied by another.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from ..errors import InputError
from .records import MeasureRecord
from .space import Config, ConfigSpace
from .templates import Template, get_template


@dataclass(frozen=True)
class Task:
    """Tune ``template`` (a template's name) on workload ``args``. ``weight``: how many
    times the model runs this workload per inference (the task scheduler weighs its
    latency by it; not part of the task's identity). ``bound``: the template itself, which
    the tasks of a model carry (:func:`~.extract.extract_tasks` binds its target's), so
    that tuning them looks nothing up; a task named only by a workload key (a log's
    record, a measuring worker) finds it by name (:func:`~.templates.get_template`)."""

    template: str
    args: tuple
    weight: int = field(default=1, compare=False)
    bound: Template | None = field(default=None, compare=False, repr=False)

    def weighted(self, weight: int) -> Task:
        """This task with ``weight``."""
        return replace(self, weight=weight)

    @property
    def workload_key(self) -> str:
        return workload_key(self.template, self.args)

    def binding(self, templates: dict[str, Template]) -> Task:
        """This task carrying its template from ``templates`` (by name), when there."""
        template = templates.get(self.template)
        return self if template is None else replace(self, bound=template)

    @property
    def definition(self) -> Template:
        """The template: the one carried, else the one registered under the name."""
        return self.bound if self.bound is not None else get_template(self.template)

    @property
    def target(self) -> str:
        return self.definition.target

    @property
    def space(self) -> ConfigSpace:
        return self.definition.space(self.args)

    def default_config(self) -> Config:
        return self.definition.default_config(self.args)

    def config_of(self, values: dict) -> Config:
        """The config a record's knob ``values`` name (see ``Template.config_of``)."""
        return self.definition.config_of(self.args, values)

    @property
    def flops(self) -> int:
        return self.definition.flops(self.args)

    @classmethod
    def from_key(cls, key: str) -> Task:
        """The task a workload key names."""
        try:
            name, *args = json.loads(key)
        except (json.JSONDecodeError, TypeError, ValueError):
            raise InputError(f"{key!r} is not a workload key (JSON list [template, *args])"
                             ) from None
        get_template(name)
        return cls(name, tuple(args))

    def __str__(self) -> str:
        return self.workload_key


def reindexed(records: Iterable[MeasureRecord]) -> list[MeasureRecord]:
    """``records`` with those of templates that upgrade older records (their space grew
    knobs, see ``Template.upgrade``) re-read against today's space: each takes the index
    of the point its values name (the index it was written with numbered the older
    space, where it may name another point), and one naming no point is dropped, so
    that a log holding records of both forms ranks each config by all of its own."""
    tasks: dict[str, Task | None] = {}
    found = []
    for record in records:
        key = record.workload_key
        if key not in tasks:
            try:
                task = Task.from_key(key)
            except InputError:  # a template not registered here: read it as it is
                task = None
            tasks[key] = task if task is not None and task.definition.upgrade else None
        task = tasks[key]
        if task is None:
            found.append(record)
            continue
        try:
            index = task.config_of(record.config).index
        except InputError:
            continue
        found.append(record if index == record.config_index
                     else replace(record, config_index=index))
    return found


def workload_key(template: str, args: tuple) -> str:
    """The stable key of ``template`` on ``args``."""
    return json.dumps([template, *args], separators=(",", ":"))


def matmul_dims(node) -> tuple[int, int, int] | None:
    """``(m, n, k)`` of a product of two matrices: a Gemm (after its transposes), or a
    MatMul / MatMulInteger of 2-D operands; None for any other node."""
    a, b = node.inputs[0].type, node.inputs[1].type
    if node.op == "Gemm":
        m, k = reversed(a.shape) if node.attrs.get("transA") else a.shape
        n = b.shape[0] if node.attrs.get("transB") else b.shape[1]
        return m, n, k
    if len(a.shape) == 2 and len(b.shape) == 2:
        return a.shape[0], b.shape[1], a.shape[1]
    return None


#: the searches: hand-written templates (AutoTVM) or sketches from the compute (Ansor)
SEARCHES = ("template", "auto")
#: the schedule rules a target with hand rules compiles with: its own (``hand``) or
#: none but the generic ones (``none``: where the auto search from scratch starts),
#: its option ``-schedule-rules``
SCHEDULE_RULES = ("hand", "none")


def with_schedule_rules(target, rules: str):
    """``target`` (a target string, comma-separated list, list or instance) with
    schedule ``rules``: ``"hand"`` leaves it as it is; ``"none"`` gives the last target
    (in a list, the CPU that takes what the others do not) the option
    ``-schedule-rules=none``; a target instance says its own (e.g.
    ``LLVMTarget(rules="none")``) and is left as it is."""
    if rules not in SCHEDULE_RULES:
        raise InputError(f"schedule rules {rules!r}: choose {' or '.join(SCHEDULE_RULES)}")
    if rules == "hand":
        return target
    if isinstance(target, str):
        return f"{target} -schedule-rules={rules}"
    if isinstance(target, list | tuple) and target:
        return [*target[:-1], with_schedule_rules(target[-1], rules)]
    return target


def auto_name(template: str) -> str:
    """The auto search's template name for workloads of ``template``."""
    return "auto." + template
