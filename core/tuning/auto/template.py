"""Auto-search tasks: a workload whose schedule space is derived by the sketch rules
from its compute, wrapped as a :class:`~..templates.Template` so that the rest of the
tuning machinery (tasks, measurement, records, applying a log) serves both kinds.

A target offers an auto template per kind of workload it can build as a plain compute
(see :func:`auto_template`); its name is ``auto.<kind>``, so that the log's records of
the two searches sit side by side under different workload keys and compilation takes
whichever is faster (:func:`..apply.best_of`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ... import te
from ..space import Config, ConfigSpace
from ..task import auto_name
from ..templates import Template
from .sketch import SearchHints, Sketch

#: prefix of every auto template's name
AUTO_PREFIX = "auto."


def is_auto(template_name: str) -> bool:
    """Whether ``template_name`` names an auto-search template."""
    return template_name.startswith(AUTO_PREFIX)


@dataclass(frozen=True)
class AutoWorkload:
    """How a target builds one kind of workload for the auto search: ``build(args)``
    gives ``(inputs, outputs)`` tensors of the plain compute as the target compiles it
    (its own layout rewrites applied); ``hints(args)`` the hardware facts the sketch's
    default point uses (vector lanes of the dtype, registers, cores)."""

    kind: str
    build: Callable[[tuple], tuple[list[te.Tensor], list[te.Tensor]]]
    hints: Callable[[tuple], SearchHints]
    inputs: Callable[[tuple, np.random.Generator], list[np.ndarray]]
    reference: Callable[[tuple, list[np.ndarray]], np.ndarray]
    flops: Callable[[tuple], int]


def auto_template(workload: AutoWorkload, target: str) -> Template:
    """The :class:`Template` of the auto search over ``workload`` on ``target``: its
    space is the sketch of the workload's compute, its default the sketch's default
    point, and a candidate the compute scheduled by a point."""

    def sketch(args: tuple) -> Sketch:
        # the hardware facts of the target being tuned (its CPU) are part of the key
        return sketch_for(args, workload.hints(args))

    @functools.lru_cache(maxsize=64)
    def sketch_for(args: tuple, hints: SearchHints) -> Sketch:
        _, outputs = workload.build(args)
        return Sketch(outputs, hints)

    def space(args: tuple) -> ConfigSpace:
        return sketch(args).space

    def default(args: tuple) -> dict:
        return sketch(args).default_values()

    def instantiate(args: tuple, config: Config):
        inputs, outputs = workload.build(args)
        return sketch(args).apply(outputs, config), [*inputs, *outputs]

    def seeds(args: tuple) -> list[dict]:
        return sketch(args).seed_values()

    def upgrade(args: tuple, values: dict) -> dict:
        # a record names every knob of its sketch, but its index numbered the sketch of
        # its day: read it back by its values (a knob that gained options, such as the
        # reduction's step unrolling, renumbers every point after it)
        return values

    def sample(args: tuple, rng: np.random.Generator) -> dict:
        return sketch(args).sample_values(rng)

    def admissible(args: tuple, values: dict) -> bool:
        return sketch(args).admissible(values)

    return Template(auto_name(workload.kind), target, space, default, instantiate,
                    workload.inputs, workload.reference, workload.flops, seeds=seeds,
                    upgrade=upgrade, sample=sample, admissible=admissible)
