"""Tuning meets targets only through their ``tuning()`` hook: a target registered from
outside offers its templates, the tasks of a model and the measurement of a candidate."""

from dataclasses import dataclass

import numpy as np
import pytest

from heterocc import sdk
from heterocc.errors import InputError, TargetError
from heterocc.sdk.registry import available_targets, get_target, register_target
from heterocc.targets.llvm import LLVMTarget
from heterocc.targets.vta import VtaTarget
from heterocc.tuning.extract import extract_tasks
from heterocc.tuning.measure import MeasureOptions, measure_in_process
from heterocc.tuning.space import ConfigSpace, Knob
from heterocc.tuning.task import Task
from heterocc.tuning.templates import TargetTuning, Template, tunable_targets, tuning_of
from tests.conftest import make_model

SCALE = Template(
    "toy_scale", "toy_tunable",
    space=lambda args: ConfigSpace((Knob("factor", "split", (1, 2, 4)),)),
    default=lambda args: {"factor": 1},
    instantiate=lambda args, config: config["factor"],
    inputs=lambda args, rng: [rng.standard_normal(args[0])],
    reference=lambda args, inputs: inputs[0],
    flops=lambda args: args[0], cost_unit="steps")


def _tasks(graph):
    return [Task("toy_scale", (int(np.prod(v.type.shape)),)) for v in graph.inputs]


def _measure(task, config, options):
    return (float(task.args[0] // config["factor"]),)


@dataclass
class ToyTunable:
    name: str = "toy_tunable"

    def build(self, function):
        raise NotImplementedError("the toy target only tunes")

    def tuning(self):
        return TargetTuning((SCALE,), _tasks, _measure)


register_target("toy_tunable", ToyTunable, "a target that only offers tuning", source="test")


def test_a_target_from_outside_is_tuned_through_its_hook():
    assert "toy_tunable" in tunable_targets()
    model = make_model([], [("x", "float32", [2, 6])], [("x", "float32", [2, 6])])
    (task,) = extract_tasks(model, target="toy_tunable")
    assert task.workload_key == '["toy_scale",12]' and task.target == "toy_tunable"
    assert Task.from_key(task.workload_key).definition is SCALE
    best = task.space.from_values({"factor": 4})
    assert measure_in_process(task, best, MeasureOptions()).costs == (3.0,)


def test_the_tasks_of_a_model_carry_their_template(monkeypatch):
    """Tuning a model's tasks looks no template up by name (which would build every
    tunable target to collect theirs): each task carries its target's."""
    model = make_model([], [("x", "float32", [2, 6])], [("x", "float32", [2, 6])])
    (task,) = extract_tasks(model, target="toy_tunable")
    assert task.bound is SCALE and task == Task("toy_scale", (12,))

    def no_lookup(name):
        raise AssertionError(f"template {name!r} looked up by name")

    monkeypatch.setattr("heterocc.tuning.task.get_template", no_lookup)
    assert task.definition is SCALE and task.weighted(3).definition is SCALE
    assert task.default_config()["factor"] == 1 and task.space.from_values({"factor": 2})
    with pytest.raises(AssertionError, match="looked up by name"):
        _ = Task("toy_scale", (12,)).definition  # a task named by its key only


def test_the_built_in_targets_declare_their_hooks():
    assert isinstance(LLVMTarget(), sdk.TunableTarget)
    assert isinstance(LLVMTarget(), sdk.GraphPassTarget)
    assert isinstance(VtaTarget(), sdk.TunableTarget) and isinstance(VtaTarget(), sdk.HilTarget)
    assert {"llvm", "vta"} <= set(tunable_targets())
    assert "reference" in available_targets() and "reference" not in tunable_targets()


def test_a_target_without_the_hook_is_refused_by_name():
    with pytest.raises(InputError, match="no tuning templates for target 'reference'"):
        extract_tasks(make_model([], [("x", "float32", [2])], [("x", "float32", [2])]),
                      target="reference")
    with pytest.raises(InputError, match="has no tuning templates"):
        tuning_of("reference")


def test_an_option_the_target_does_not_take_is_named():
    with pytest.raises(TargetError, match="'llvm' does not take the option.* config"):
        get_target("llvm", config="1x16x16")


def test_a_modelled_cost_is_not_measured_again(tmp_path):
    """Cycles (here "steps") from a model are the same at every measurement: remeasuring
    the finalists would only repeat the simulator's work, so nothing is measured again
    and the ranking is the log's."""
    from heterocc.tuning.records import MeasureRecord, RecordLog
    from heterocc.tuning.tuners import remeasure_best

    task = Task("toy_scale", (12,))
    log = RecordLog(str(tmp_path / "log.jsonl"))
    for factor in (1, 2, 4):
        config = task.space.from_values({"factor": factor})
        log.append(MeasureRecord(task.workload_key, config.to_json(), config.index,
                                 _measure(task, config, None)))

    class Counting:
        calls = 0

        def measure_one(self, task, config):
            Counting.calls += 1
            raise AssertionError("a modelled cost was measured again")

    finalists = remeasure_best(task, Counting(), log, count=2)
    assert Counting.calls == 0
    assert [c["factor"] for c in finalists] == [4, 2]
    assert len(log.records()) == 3
