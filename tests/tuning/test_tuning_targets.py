"""Tuning names its hardware: `heterocc tune --target 'llvm <options>'` tunes the code of
that CPU description (timed on this host, which must run it), every record says which
description it was tuned for, and a log applies only where a compile is for that one —
so records tuned for another CPU, or on another machine, never apply, while records that
name no CPU (logs written before records named one) still do."""

from __future__ import annotations

import argparse
import io

import numpy as np
import pytest
from onnx import helper

import heterocc
from heterocc.errors import InputError
from heterocc.targets.llvm import LLVMTarget
from heterocc.targets.llvm import tuning as llvm_tuning
from heterocc.targets.llvm.cpu import host_cpu, parse_cpu
from heterocc.tuning.apply import ApplyHistoryBest, records_for
from heterocc.tuning.cli import add_tune_parser
from heterocc.tuning.extract import extract_tasks, tuning_key, tuning_target
from heterocc.tuning.measure import MeasureOptions, measure_in_process
from heterocc.tuning.records import MeasureRecord, RecordLog, read_records
from heterocc.tuning.task import Task
from tests.conftest import make_model

#: a description of this host's CPU other than the host's own, runnable here on any
#: machine: the same CPU told it has one core (its schedules differ: no parallel loops)
ONE_CORE = "llvm -num-cores=1"


def _model(rng):
    return make_model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                      [("x", "float32", [16, 64])], [("y", "float32", None)],
                      {"w": rng.standard_normal((64, 48)).astype(np.float32)})


def _tune(model_path, log, target):
    parser = argparse.ArgumentParser()
    add_tune_parser(parser.add_subparsers())
    args = parser.parse_args(["tune", str(model_path), "--target", target, "--search", "auto",
                              "--trials", "3", "--log", str(log), "--repeat", "1",
                              "--quiet"])
    assert args.func(args, stream=io.StringIO()) == 0


def test_a_target_string_names_the_cpu_tuned_for():
    target = tuning_target(ONE_CORE)
    assert isinstance(target, LLVMTarget) and target.cpu.num_cores == 1
    assert tuning_key(target) == target.cpu.spec()
    assert tuning_key(tuning_target("llvm")) == host_cpu().spec()
    assert parse_cpu(tuning_key(target)) == target.cpu  # workers rebuild it from the key
    assert tuning_key(tuning_target("vta")) == ""  # one form of its hardware


def test_tuning_for_a_cpu_this_host_cannot_run_is_refused(rng, tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(_model(rng).SerializeToString())
    other = ("llvm -mtriple=aarch64-linux-gnu" if host_cpu().arch == "x86_64"
             else "llvm -mtriple=x86_64-linux-gnu")
    with pytest.raises(InputError, match="cannot tune for .* on this machine: .*tune on a "
                                         "machine with that CPU"):
        extract_tasks(str(path), target=other, search="auto")
    with pytest.raises(InputError, match="no tuning templates for target 'reference"):
        tuning_target("reference")


def test_records_name_their_cpu_and_apply_only_to_it(rng, tmp_path):
    """Tuned for the one-core description: the log's records say so, the one-core
    compile takes them, the host's compile (another description) does not."""
    model = _model(rng)
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    log = tmp_path / "tune.jsonl"
    _tune(path, log, ONE_CORE)
    one_core = tuning_key(tuning_target(ONE_CORE))
    records = read_records(log)
    assert records and {r.target for r in records} == {one_core}
    assert read_records(log, host_cpu().spec()) == []
    (task,) = extract_tasks(str(path), target=ONE_CORE, search="auto")
    body = llvm_tuning.function_body(task.args[1])
    with ApplyHistoryBest(log) as applied:
        with records_for(one_core):  # the records are for this CPU
            assert llvm_tuning.function_configs(body, applied).choice is not None
        with records_for(host_cpu().spec()):  # another CPU: nothing applies
            assert llvm_tuning.function_configs(body, applied).choice is None
            assert applied.workload_keys == []
    x = rng.standard_normal((16, 64)).astype(np.float32)
    for target in (ONE_CORE, "llvm"):
        got = heterocc.compile(model, target=target, tuning_log=str(log)).run([x])[0]
        np.testing.assert_allclose(got, x @ _weight(model), rtol=1e-4, atol=1e-4)


def _weight(model):
    from onnx import numpy_helper
    return numpy_helper.to_array(model.graph.initializer[0])


def test_one_log_holds_two_cpus_and_resumes_each(rng, tmp_path):
    """Tuning the host and then the one-core description into one log: each run resumes
    only its own records (the second run's trials are not taken as done)."""
    path = tmp_path / "m.onnx"
    path.write_bytes(_model(rng).SerializeToString())
    log = tmp_path / "tune.jsonl"
    _tune(path, log, "llvm")
    host_records = read_records(log, host_cpu().spec())
    _tune(path, log, ONE_CORE)
    one_core = read_records(log, tuning_key(tuning_target(ONE_CORE)))
    assert len(host_records) >= 3 and len(one_core) >= 3
    assert RecordLog(log, target=host_cpu().spec()).records() == host_records


def test_records_without_a_target_still_apply_everywhere():
    key = '["function",["matmul","spec"]]'
    untargeted = MeasureRecord(key, {"schedule": "hand"}, 0, (1.0,))
    elsewhere = MeasureRecord(key, {"schedule": "other"}, 1, (0.5,), target="llvm -mcpu=x")
    applied = ApplyHistoryBest([untargeted, elsewhere])
    with records_for("llvm -mcpu=y"):
        assert applied.best_cost(key) == 1.0
    with records_for("llvm -mcpu=x"):
        assert applied.best_cost(key) == 0.5
    assert applied.best_cost(key) == 0.5  # no target said: every record


def test_a_worker_that_cannot_run_the_tuned_cpus_code_fails_the_candidate_clearly(rng):
    """A Ray node of another CPU gets a candidate for the tuned one: an error naming the
    missing features, not an illegal instruction that kills the worker."""
    other = ("llvm -mtriple=aarch64-linux-gnu" if host_cpu().arch == "x86_64"
             else "llvm -mtriple=x86_64-linux-gnu")
    key = tuning_key(LLVMTarget(cpu=other))
    task = Task("auto.matmul", (8, 16, 8, "float32"))
    options = MeasureOptions(repeat=1, target=key)
    result = measure_in_process(task, task.default_config(), options)
    assert result.error == "runtime" and "this worker cannot run it" in result.message
