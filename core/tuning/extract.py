"""The tuning tasks of a model for a target: the target instance a tuning is for, and the
tasks its ``tuning()`` hook finds in the model (kept apart from :mod:`.task`, which
names and reads tasks without reading models)."""

from __future__ import annotations

from ..errors import InputError, TargetError
from ..frontend import from_onnx
from ..ir.graph import Graph
from ..sdk.registry import get_target, parse_targets
from .task import SEARCHES, Task, auto_name
from .templates import tunable_targets, tuning_of


def extract_tasks(model, target="llvm", preset: str | None = None,
                  shapes: dict | None = None, search: str = "template") -> list[Task]:
    """One task per distinct tunable workload of ``model`` (an ONNX path, bytes,
    ModelProto or a heterocc Graph) for ``target`` (a registered name or a target
    instance), in order of first appearance: what the target's ``tuning()`` hook finds
    (see :class:`~.templates.TargetTuning`; e.g. ``heterocc.targets.llvm.tuning`` and
    ``heterocc.targets.vta.tuning``). ``preset``: the hardware preset of an accelerator
    target, given to it as its ``config`` option. ``shapes`` fixes symbolic input
    dimensions. ``search="auto"``: the tasks of the template-free search instead: each
    task whose workload the target also offers to the auto search (see :mod:`.auto`)
    becomes its ``auto.`` twin; the others (e.g. the accelerator's tilings, whose
    instruction shapes fix the form of the schedule) keep their space, searched by the
    same evolutionary search and task scheduler with the target's measurement (its
    timing model). A target may form the auto search's tasks itself (its
    ``auto_tasks``: the CPU tunes whole fused functions, epilogue and layout included)."""
    if search not in SEARCHES:
        raise InputError(f"no search {search!r}; choose one of {', '.join(SEARCHES)}")
    target = tuning_target(target, preset)
    graph = model if isinstance(model, Graph) else from_onnx(model, shapes=shapes)
    tuning = tuning_of(target)
    # each task carries its template, from this target: none is looked up by name
    offered = {t.name: t for t in tuning.templates}
    if search == "auto" and tuning.auto_tasks is not None:
        return [t.binding(offered) for t in tuning.auto_tasks(graph)]
    tasks = [t.binding(offered) for t in tuning.tasks(graph)]
    if search == "template":
        return tasks
    return [Task(auto_name(t.template), t.args, t.weight).binding(offered)
            if auto_name(t.template) in offered else t for t in tasks]


def tuning_target(target, preset: str | None = None):
    """The target instance a tuning is for: ``target`` as an instance, a registered name
    (``"llvm"``: the host), or a target string with options (``"llvm -mattr=-avx512f"``,
    ``"llvm -mcpu=znver3"``) naming one tunable target. ``preset``: an accelerator's
    hardware preset (its ``config`` option)."""
    if not isinstance(target, str):
        return target
    options = {} if preset is None else {"config": preset}
    if target in tunable_targets():
        return get_target(target, **options)
    try:
        parsed = parse_targets(target)
    except TargetError as error:
        raise InputError(f"tuning target {target!r}: {error}") from None
    if len(parsed) != 1 or isinstance(parsed[0], str) or parsed[0].name not in tunable_targets():
        raise InputError(f"no tuning templates for target {target!r}; tune one of "
                         f"{' or '.join(tunable_targets())}, with its options if any "
                         "(e.g. 'llvm -mattr=-avx512f')")
    if preset is not None:
        raise InputError(f"--preset names an accelerator's hardware; {target!r} takes its "
                         "options in the target string")
    return parsed[0]


def tuning_key(target) -> str:
    """What ``target`` (an instance) calls the hardware its records are for: its
    ``tuning_key`` (the CPU target: its CPU description as a target string), or empty
    for a target of one form (records that name no target)."""
    return str(getattr(target, "tuning_key", "") or "")
