"""Tuning templates and how tuning finds them: the seam between the tuning machinery and
the targets.

A template turns a workload (a tuple of ints and a dtype, see :mod:`.task`) into a
config space, a default config (the hand-written schedule's choices), a candidate built
by a :class:`~.space.Config`, random inputs and a NumPy reference. Templates belong to
their targets: a target offers its templates, the tasks of a graph and the measurement
of a candidate through its ``tuning()`` hook, a :class:`TargetTuning` (the CPU's are in
``heterocc.targets.llvm.tuning``, the accelerator's in ``heterocc.targets.vta.tuning``).
Templates can also be registered directly (:func:`register_template`), e.g. by a test or
a setup module of the measuring worker.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..errors import InputError
from ..sdk.registry import available_targets, get_target
from .space import Config, ConfigSpace

if TYPE_CHECKING:
    from ..ir.graph import Graph
    from .measure import MeasureOptions
    from .task import Task

#: the unit of a cost measured as wall-clock seconds per call
SECONDS = "s"


@dataclass(frozen=True)
class Template:
    """How to tune one kind of workload on one target.

    ``instantiate(args, config)`` gives what the target's measurement builds (for a
    target compiled from TE: a ``(te.Schedule, [tensors...])`` pair, inputs first,
    output last). ``features`` describes a candidate to the cost model; without it the
    candidate is lowered and its loop nest described
    (:func:`.features.loop_nest_features`). ``cost_unit``: what a measured cost counts,
    :data:`SECONDS` per call or a modelled unit such as ``"cycles"``."""

    name: str
    target: str
    space: Callable[[tuple], ConfigSpace]
    default: Callable[[tuple], dict]
    instantiate: Callable[[tuple, Config], object]
    inputs: Callable[[tuple, np.random.Generator], list[np.ndarray]]
    reference: Callable[[tuple, list[np.ndarray]], np.ndarray]
    flops: Callable[[tuple], int]
    features: Callable[[tuple, Config], np.ndarray] | None = None
    cost_unit: str = SECONDS
    #: further points a search measures first (after the default), by knob values
    seeds: Callable[[tuple], list[dict]] | None = None
    #: ``upgrade(args, values)``: a record's knob values completed with the knobs added
    #: to the space after it was written (each given the option the schedule took
    #: without it), so that an older log still applies; None: records name every knob
    upgrade: Callable[[tuple, dict], dict] | None = None
    #: ``sample(args, rng)``: a random point by knob values, drawn by the space's own
    #: sampling rules (an auto template's sketch: annotated, register tiles that fit the
    #: CPU); None: a search draws every knob uniformly
    sample: Callable[[tuple, np.random.Generator], dict] | None = None
    #: ``admissible(args, values)``: whether a point keeps the space's sampling rules,
    #: which a search's mutations and crossovers may break (such children are dropped);
    #: None: every point is
    admissible: Callable[[tuple, dict], bool] | None = None

    def default_config(self, args: tuple) -> Config:
        """The config matching the target's hand-written schedule."""
        return self.space(args).from_values(self.default(args))

    def config_of(self, args: tuple, values: dict) -> Config:
        """The point of today's space that a record's knob ``values`` name (completed
        by :attr:`upgrade`); InputError when they name none."""
        if self.upgrade is not None:
            values = self.upgrade(args, dict(values))
        return self.space(args).from_values(values)

    def first_configs(self, args: tuple) -> list[Config]:
        """The default config, then the :attr:`seeds` (distinct, in order)."""
        space = self.space(args)
        configs = [self.default_config(args)]
        for values in self.seeds(args) if self.seeds is not None else ():
            config = space.from_values(values)
            if config.index not in {c.index for c in configs}:
                configs.append(config)
        return configs


@dataclass(frozen=True)
class TargetTuning:
    """What a target offers tuning (its ``tuning()`` hook returns one).

    ``templates``: its templates; ``tasks(graph)``: the tasks of a model's graph (as
    the frontend gives it) for this target instance, one per distinct workload, in order
    of first appearance; ``measure(task, config, options)``: build, check and time one
    candidate in this process, returning its costs (lower is better) or raising
    :class:`~.measure.CandidateError`; ``auto_tasks(graph)``: see the field."""

    templates: Sequence[Template]
    tasks: Callable[[Graph], list[Task]]
    measure: Callable[[Task, Config, MeasureOptions], tuple[float, ...]]
    #: the tasks of the template-free search, when the target forms them otherwise
    #: (e.g. whole fused functions, measured as the model compiles them); None: each
    #: task of ``tasks`` becomes its ``auto.`` twin where the target offers one
    auto_tasks: Callable[[Graph], list[Task]] | None = None
    #: ``baseline(auto_task)``: the task whose default config is what compile does with
    #: the workload when no auto record wins (timed beside the search's best); None:
    #: the template of the auto task's name without its ``auto.`` prefix
    baseline: Callable[[Task], Task | None] | None = None
    #: whether the auto search measures each template's default and seeds first (its
    #: hand knowledge); False: it starts from scratch, from random points of the sketch
    seeded: bool = True


#: templates registered directly, by name (they take precedence over the targets')
TEMPLATES: dict[str, Template] = {}


def register_template(template: Template) -> Template:
    """Add ``template`` to the direct registry (a later one of the same name replaces it)."""
    TEMPLATES[template.name] = template
    return template


def tuning_of(target) -> TargetTuning:
    """The :class:`TargetTuning` of ``target`` (a registered name or a target instance);
    InputError when it has no ``tuning`` hook."""
    instance = get_target(target) if isinstance(target, str) else target
    hook = getattr(instance, "tuning", None)
    if not callable(hook):
        raise InputError(f"target {getattr(instance, 'name', instance)!r} has no tuning "
                         f"templates; targets with them: {', '.join(tunable_targets())}")
    return hook()


def tunable_targets() -> list[str]:
    """The registered targets that offer tuning (their factory has a ``tuning`` hook)."""
    return [name for name, info in available_targets().items()
            if callable(getattr(info.target_class, "tuning", None))]


#: the templates of the tunable targets, by name, for the registered target set they
#: were collected from
_TARGET_TEMPLATES: dict[tuple[str, ...], dict[str, Template]] = {}


def _target_templates() -> dict[str, Template]:
    names = tuple(tunable_targets())
    found = _TARGET_TEMPLATES.get(names)
    if found is None:
        found = {t.name: t for name in names for t in tuning_of(name).templates}
        _TARGET_TEMPLATES.clear()
        _TARGET_TEMPLATES[names] = found
    return found


def get_template(name: str) -> Template:
    """The template called ``name``: registered directly, or offered by a target."""
    template = TEMPLATES.get(name) or _target_templates().get(name)
    if template is None:
        known = sorted({*TEMPLATES, *_target_templates()})
        raise InputError(f"no tuning template {name!r}; known: {', '.join(known)}")
    return template
