"""The auto search's choice of a convolution's algorithm: a function task whose
convolution Winograd may compute (dense 3x3 stride-1 float, enough channels) offers the
direct compute and F(2,3)/F(4,3) as a knob, each a sketch of its own compute; a record of
a Winograd point applies with either rule set (the search from scratch is entitled to the
Winograd compute, and schedules it itself)."""

import numpy as np
import pytest
from onnx import helper

import heterocc
from heterocc import te
from heterocc.sdk.registry import get_target
from heterocc.targets.llvm import LLVMTarget
from heterocc.targets.llvm import target as llvm_target_module
from heterocc.targets.llvm.cpu import compiling_for, parse_cpu
from heterocc.targets.llvm.module import build
from heterocc.targets.llvm.schedules.winograd_conv import winograd_conv
from heterocc.targets.llvm.tuning import record_winograd_tile
from heterocc.targets.llvm.tuning.common import search_hints
from heterocc.targets.llvm.tuning.functions import (
    ALGORITHM,
    DIRECT,
    _auto_function_sketch,
    _expressed_function,
    _with_algorithm,
)
from heterocc.te.schedule_reads import reads_of
from heterocc.tuning.auto import Sketch
from heterocc.tuning.auto.sketch import _constant_selects
from heterocc.tuning.extract import extract_tasks, tuning_key
from heterocc.tuning.measure import MeasureOptions, measure_in_process, tuning_context
from heterocc.tuning.records import MeasureRecord, RecordLog
from tests.conftest import make_model


def _conv_model(rng, channels=32, size=10, stride=1, out_channels=None):
    """Conv (3x3, pad 1) + bias + ReLU: one fused function."""
    out_channels = out_channels or channels
    return make_model(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1],
                          strides=[stride, stride]),
         helper.make_node("Relu", ["c"], ["y"])],
        [("x", "float32", [1, channels, size, size])], [("y", "float32", None)],
        {"w": (rng.standard_normal((out_channels, channels, 3, 3)) * 0.1).astype(np.float32),
         "b": rng.standard_normal(out_channels).astype(np.float32)})


def _task(model, rules="none"):
    (task,) = extract_tasks(model, target=get_target("llvm", schedule_rules=rules),
                            search="auto")
    return task


@pytest.mark.parametrize("channels,stride,offered", [
    (32, 1, (DIRECT, 2, 4)),   # both tiles
    (16, 1, (DIRECT, 2)),      # F(4,3) from 32 channels (its rounding on narrow layers)
    (8, 1, None),              # too narrow for either: no knob
    (32, 2, None),             # stride 2: no Winograd
])
def test_a_convolution_task_offers_the_algorithms_winograd_may_take(
        channels, stride, offered, rng):
    task = _task(_conv_model(rng, channels, stride=stride))
    knobs = {k.name: k for k in task.space.knobs}
    if offered is None:
        assert ALGORITHM not in knobs
        assert record_winograd_tile(task.default_config().values) == 0
        return
    assert knobs[ALGORITHM].options == offered
    # the direct compute is the default point; each F(m, 3) has its own sketch's knobs
    assert task.default_config().values[ALGORITHM] == DIRECT
    for m in offered[1:]:
        assert f"w{m}a0.tile.s0" in knobs
        # the transformed input is materialized (inlined, every output block would
        # transform it again)
        assert knobs[f"w{m}p0.location"].options == ("root",)


def test_a_point_leaves_the_other_algorithms_knobs_at_their_defaults(rng):
    task = _task(_conv_model(rng))
    definition = task.definition
    drawn = {record_winograd_tile(definition.sample(task.args, rng)) for _ in range(24)}
    assert drawn == {0, 2, 4}  # every algorithm drawn
    values = definition.sample(task.args, rng)
    assert definition.admissible(task.args, values)
    m = record_winograd_tile(values)
    other = 4 if m != 4 else 2
    name = f"w{other}a0.unroll"
    changed = next(o for o in task.space.knobs[[k.name for k in task.space.knobs].index(
        name)].options if o != values[name])
    assert not definition.admissible(task.args, {**values, name: changed})


@pytest.mark.parametrize("m", [2, 4])
def test_points_of_a_winograd_compute_are_built_and_checked(m, rng):
    task = _task(_conv_model(rng, 32, size=9))
    options = MeasureOptions(repeat=1)
    sketch = _auto_function_sketch(task.args[1], m)
    points = [sketch.default_values(), *(sketch.sample_values(rng) for _ in range(3)),
              *sketch.seed_values()[:2]]
    for values in points:
        config = task.space.from_values(_with_algorithm(task.args[1], m, values))
        result = measure_in_process(task, config, options)  # checked against NumPy
        assert result.ok, (config.to_json(), result.error, result.message)


def test_the_transforms_unroll_the_indices_their_matrices_select_by(rng):
    task = _task(_conv_model(rng))
    expressed = _expressed_function(task.args[1], 4)
    sketch = _auto_function_sketch(task.args[1], 4)
    by_name = {}
    pending = list(expressed.outputs)
    while pending:
        tensor = pending.pop()
        if tensor.name not in by_name and hasattr(tensor.op, "body"):
            by_name[tensor.name] = tensor
            pending += reads_of(tensor.op.body)
    # the transformed input by its two points; the epilogue's output (the output
    # transform inlined into it) by its rows and columns within a tile of 4
    assert _constant_selects(by_name["winograd_data"], sketch.inlined) == {0: 6, 1: 6}
    (output,) = [by_name[name] for name in sketch.other_outputs]
    assert _constant_selects(output, sketch.inlined) == {2: 4, 3: 4}


def _record_log(tmp_path, task, config, key):
    path = tmp_path / "log.jsonl"
    with RecordLog(path, target=key) as log:  # no baseline timed: the auto record applies
        log.append(MeasureRecord(task.workload_key, config.to_json(), config.index, (1e-3,)))
    return str(path)


@pytest.mark.parametrize("isa", ["llvm", "llvm -mattr=-avx512f"], ids=["host", "avx2"])
@pytest.mark.parametrize("rules", ["none", "hand"])
@pytest.mark.parametrize("m", [2, 4])
def test_a_winograd_record_applies_with_either_rule_set(isa, rules, m, tmp_path, rng,
                                                        monkeypatch):
    model = _conv_model(rng, 32, size=9)
    cpu = parse_cpu(isa)
    key = tuning_key(LLVMTarget(cpu=cpu))
    with tuning_context(key):  # the sketch of this CPU's vectors
        (task,) = extract_tasks(model, target=LLVMTarget(cpu=cpu, rules=rules),
                                search="auto")
        values = _with_algorithm(task.args[1], m,
                                 _auto_function_sketch(task.args[1], m).sample_values(rng))
        config = task.space.from_values(values)
    log = _record_log(tmp_path, task, config, key)
    transformed = []
    original = llvm_target_module.transform_weight_array

    def spy(weight, tile):
        transformed.append(tile)
        return original(weight, tile)

    monkeypatch.setattr(llvm_target_module, "transform_weight_array", spy)
    x = rng.standard_normal((1, 32, 9, 9)).astype(np.float32)
    (expected,) = heterocc.compile(model, target="reference").run([x])
    # (the log read where its CPU is the one described: its records are re-read against
    # the spaces of the CPU active then)
    with tuning_context(key):
        compiled = heterocc.compile(model, target=[LLVMTarget(cpu=cpu, rules=rules)],
                                    tuning_log=log)
    np.testing.assert_allclose(compiled.run([x])[0], expected, rtol=1e-4, atol=1e-4)
    assert transformed == [m]  # the weight transformed once, at build, by the record's tile
    # with Winograd off the record's point is no schedule of the direct compute: the
    # target's own schedule follows
    transformed.clear()
    with tuning_context(key):
        direct = heterocc.compile(
            model, target=[LLVMTarget(cpu=cpu, rules=rules, winograd=False)], tuning_log=log)
    np.testing.assert_allclose(direct.run([x])[0], expected, rtol=1e-4, atol=1e-4)
    assert transformed == []


def test_a_record_from_before_the_algorithm_knob_is_read_as_direct(rng):
    task = _task(_conv_model(rng))
    old = {k: v for k, v in task.default_config().values.items()
           if k != ALGORITHM and not k.startswith("w")}
    upgraded = task.definition.upgrade(task.args, dict(old))
    assert upgraded[ALGORITHM] == DIRECT
    assert task.space.from_values(upgraded).index == task.default_config().index


def test_a_winograd_sketch_point_builds_for_aarch64():
    """A NEON cross build of points of an F(4,3) compute's sketch: the product on
    ``fmla``."""
    cpu = parse_cpu("llvm -mtriple=aarch64-linux-gnu")
    m, channels, block = 4, 32, cpu.vector_lanes("float32")
    u_shape = (6, 6, channels // block, channels // block, block, block)
    rng = np.random.default_rng(0)
    for values in ("default", "sampled"):
        X = te.placeholder((1, channels // block, 14, 14, block), "float32", "x")
        U = te.placeholder(u_shape, "float32", "u")
        Y = winograd_conv(X, U, (1, 1, 1, 1), (1, channels // block, 14, 14, block), m)
        sketch = Sketch([Y], search_hints("float32", cpu))
        point = (sketch.default_values() if values == "default"
                 else sketch.sample_values(rng))
        point.update({f"p{k}.location": "root" for k in range(len(sketch.producers))})
        schedule = sketch.apply([Y], sketch.space.from_values(point))
        with compiling_for(cpu):
            assembly = build([te.lower(schedule, [X, U, Y], name="winograd")],
                             name="winograd", cpu=cpu).assembly()
        assert "fmla" in assembly
