"""The CPU's hand schedule rules turned off (``--schedule-rules none``): every model
still compiles to correct code on the generic schedules, and the auto search starts from
scratch (random points of the sketch, no seeds from the hand schedules), its records
competing with the generic schedules."""

import argparse
import io

import numpy as np
import onnx
import pytest
from onnx import helper

import heterocc
from heterocc.cli import main
from heterocc.errors import InputError
from heterocc.sdk.registry import get_target
from heterocc.targets.llvm import LLVMTarget
from heterocc.targets.llvm.rules import InjectiveRule, ReductionRule
from heterocc.targets.llvm.tuning import function_body, function_configs, function_tasks
from heterocc.tuning.apply import ApplyHistoryBest
from heterocc.tuning.cli import add_tune_parser
from heterocc.tuning.records import MeasureRecord, RecordLog, config_costs, read_records
from heterocc.tuning.task import Task, with_schedule_rules
from heterocc.tuning.templates import tuning_of
from tests.conftest import make_model, quantize_with_onnxruntime


def _cnn(rng) -> onnx.ModelProto:
    """A convolution with bias and ReLU, a depthwise convolution, a max pool, a
    residual addition, a global average pool and a classifier: every anchor kind."""
    def weights(*shape):
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], group=16),
        helper.make_node("Add", ["c2", "r1"], ["a"]),
        helper.make_node("MaxPool", ["a"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1),
    ]
    return make_model(nodes, [("x", "float32", [1, 3, 12, 12])], [("y", "float32", None)],
                      {"w1": weights(16, 3, 3, 3), "b1": weights(16), "w2": weights(16, 1, 3, 3),
                       "wf": weights(10, 16), "bf": weights(10)})


def test_rules_off_compile_every_kind_of_function_correctly(rng):
    model = _cnn(rng)
    x = rng.standard_normal((1, 3, 12, 12)).astype(np.float32)
    (want,) = heterocc.compile(model, target="reference").run([x])
    for rules in ("hand", "none"):
        compiled = heterocc.compile(model, target="llvm", schedule_rules=rules)
        (got,) = compiled.run([x])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        assert compiled.fallbacks == {}  # machine code, not NumPy
    # the same through the target string and a target instance
    (got,) = heterocc.compile(model, target="llvm -schedule-rules=none").run([x])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    (got,) = heterocc.compile(model, target=[LLVMTarget(rules="none")]).run([x])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_rules_off_int8_model_gives_the_same_bits_as_the_hand_rules(rng, tmp_path):
    model = _cnn(rng)
    quantized = quantize_with_onnxruntime(model, (1, 3, 12, 12), tmp_path)
    x = rng.standard_normal((1, 3, 12, 12)).astype(np.float32)
    (hand,) = heterocc.compile(quantized, target="llvm").run([x])
    (none,) = heterocc.compile(quantized, target="llvm", schedule_rules="none").run([x])
    # the integer convolutions without the dot product, as plain integer sums: exact
    np.testing.assert_array_equal(none, hand)


def test_rules_off_target_has_only_the_generic_rules():
    target = get_target("llvm", schedule_rules="none")
    assert target.rules == "none"
    assert [type(r) for r in target.schedule_rules()] == [ReductionRule, InjectiveRule]
    assert len(get_target("llvm").schedule_rules()) > 2  # the hand rules
    tuning = tuning_of(target)
    assert not tuning.seeded and tuning_of(get_target("llvm")).seeded


def test_schedule_rules_are_checked():
    with pytest.raises(InputError, match="schedule rules 'tiles'.*hand or none"):
        LLVMTarget(rules="tiles")
    with pytest.raises(InputError, match="schedule rules 'tiles'"):
        heterocc.compile(_cnn(np.random.default_rng(0)), schedule_rules="tiles")
    assert with_schedule_rules("llvm", "hand") == "llvm"
    assert with_schedule_rules("vta,llvm", "none") == "vta,llvm -schedule-rules=none"
    assert with_schedule_rules(["vta", "llvm"], "none") == ["vta", "llvm -schedule-rules=none"]


def test_compile_and_run_commands_take_schedule_rules(rng, tmp_path, capsys):
    path = tmp_path / "cnn.onnx"
    onnx.save(_cnn(rng), str(path))
    assert main(["compile", str(path), "--schedule-rules", "none"]) == 0
    assert "compiled" in capsys.readouterr().out
    assert main(["run", str(path), "--schedule-rules", "none"]) == 0
    with pytest.raises(SystemExit):
        main(["compile", str(path), "--schedule-rules", "tiles"])


def _tune(argv, stream):
    parser = argparse.ArgumentParser()
    add_tune_parser(parser.add_subparsers())
    args = parser.parse_args(["tune", *argv])
    return args.func(args, stream)


def test_template_search_refuses_the_rules_off(tmp_path):
    with pytest.raises(InputError, match="--search auto"):
        _tune([str(tmp_path / "any.onnx"), "--schedule-rules", "none", "--log",
               str(tmp_path / "t.jsonl")], io.StringIO())


@pytest.mark.slow
def test_search_from_scratch_beats_the_generic_schedule_in_a_few_trials(rng, tmp_path):
    # one convolution (16 -> 32 channels, 3x3, 28x28) with its ReLU: the generic
    # schedule sums each output point's 144 products one by one
    model = make_model(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])],
        [("x", "float32", [1, 16, 28, 28])], [("y", "float32", None)],
        {"w": (rng.standard_normal((32, 16, 3, 3)) * 0.1).astype(np.float32)})
    path, log = tmp_path / "conv.onnx", tmp_path / "scratch.jsonl"
    onnx.save(model, str(path))
    assert _tune([str(path), "--search", "auto", "--schedule-rules", "none", "--trials", "6",
                  "--batch-size", "3", "--repeat", "3", "--remeasure", "0", "--log", str(log),
                  "--quiet"], io.StringIO()) == 0
    records = read_records(log)
    (task,) = function_tasks(heterocc.frontend.from_onnx(str(path)),
                             get_target("llvm", schedule_rules="none"))
    searched = [r for r in records if r.tuner == "auto"]
    assert len(searched) == 6
    # from scratch: neither the sketch's default point nor its seeds were measured
    first = {c.index for c in task.definition.first_configs(task.args)}
    assert not first & {r.config_index for r in searched}
    # the generic schedule is the baseline, timed beside the search's best
    generic = Task("function_generic", task.args).workload_key
    assert {r.workload_key for r in records if r.tuner == "baseline"} == {generic}
    costs = config_costs(records)
    best_found = min(costs[task.workload_key].values())
    assert best_found < min(costs[generic].values())
    # compiled with the hand rules off, the function takes the search's record: correct
    x = rng.standard_normal((1, 16, 28, 28)).astype(np.float32)
    (want,) = heterocc.compile(model, target="reference").run([x])
    tuned = heterocc.compile(model, target="llvm", schedule_rules="none", tuning_log=str(log))
    (got,) = tuned.run([x])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_an_auto_record_competes_with_the_baseline_of_the_rules_compiled_with(rng, tmp_path):
    """One log, two rule sets: the auto record is slower than the hand schedule (kept
    with the hand rules) and faster than the generic schedule (taken with them off)."""
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
                       [("x", "float32", [1, 16, 8, 8])], [("y", "float32", None)],
                       {"w": rng.standard_normal((16, 16, 3, 3)).astype(np.float32)})
    (task,) = function_tasks(heterocc.frontend.from_onnx(model), get_target("llvm"))
    config = task.default_config()
    path = tmp_path / "both.jsonl"
    with RecordLog(path) as log:
        log.append(MeasureRecord(task.workload_key, config.to_json(), config.index, (1.0,)))
        for template, cost in (("function", 0.5), ("function_generic", 4.0)):
            log.append(MeasureRecord(Task(template, task.args).workload_key,
                                     {"schedule": "hand"}, 0, (cost,)))
    body = function_body(task.args[1])
    applied = ApplyHistoryBest(path)
    assert function_configs(body, applied).choice == ("hand", None)
    assert function_configs(body, applied, "none").choice == ("auto", config)
    x = rng.standard_normal((1, 16, 8, 8)).astype(np.float32)
    (want,) = heterocc.compile(model, target="reference").run([x])
    for rules in ("hand", "none"):
        (got,) = heterocc.compile(model, schedule_rules=rules, tuning_log=str(path)).run([x])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
