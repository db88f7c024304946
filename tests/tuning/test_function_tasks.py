"""The auto search's tasks are whole fused functions, measured as the model compiles them
(epilogue, block layout, prepacked constants), and compile applies a function's auto
record only where it beat that function's hand schedule on the same harness."""

import numpy as np
import pytest
from onnx import helper

import heterocc
from heterocc import te, tir
from heterocc.targets.llvm import LLVMTarget
from heterocc.targets.llvm import tuning as llvm_tuning
from heterocc.targets.llvm.cpu import active_cpu
from heterocc.targets.llvm.tuning import function_body, function_keys, function_spec
from heterocc.tuning.apply import ApplyHistoryBest
from heterocc.tuning.auto import SearchHints, Sketch
from heterocc.tuning.extract import extract_tasks
from heterocc.tuning.measure import CACHE_MODES, MeasureOptions, measure_in_process, task_inputs
from heterocc.tuning.records import MeasureRecord, RecordLog
from heterocc.tuning.task import Task
from tests.conftest import make_model


def _conv_model(rng):
    """Conv + bias + ReLU6 (Clip): one fused function with an epilogue."""
    return make_model(
        [helper.make_node("Conv", ["x", "w", "bias"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Clip", ["c", "lo", "hi"], ["y"])],
        [("x", "float32", [1, 16, 8, 8])], [("y", "float32", None)],
        {"w": rng.standard_normal((32, 16, 3, 3)).astype(np.float32),
         "bias": rng.standard_normal(32).astype(np.float32),
         "lo": np.array(0, np.float32), "hi": np.array(6, np.float32)})


def _matmul_model(rng, m=8, k=64, n=64):
    return make_model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [("x", "float32", [m, k])], [("y", "float32", None)],
        {"w": rng.standard_normal((k, n)).astype(np.float32)})


def test_function_tasks_carry_the_in_model_epilogue_and_layout(rng):
    (task,) = extract_tasks(_conv_model(rng), search="auto")
    assert task.template == "auto.function" and task.args[0] == "conv2d_nchwc"
    body = function_body(task.args[1])
    ops = [node.op for node in body.nodes]
    assert "ConvNCHWc" in ops and "Clip" in ops  # the epilogue is part of the task
    assert len(body.inputs[0].type.shape) == 5  # the blocked layout the model uses
    # the clip bounds (small constants) are kept by value: they are folded into the code
    bounds = [v.data for n in body.nodes if n.op == "Clip" for v in n.inputs[1:]]
    assert [float(b) for b in bounds] == [0.0, 6.0]
    # the text is canonical: the rebuilt body describes itself the same way
    assert function_spec(body) == task.args[1]
    assert Task.from_key(task.workload_key) == task


def test_functions_of_one_structure_are_one_task_weighted_by_their_count(rng):
    # same structure, different weights and (small) biases: one kernel, so one task
    w = rng.standard_normal((16, 16, 1, 1)).astype(np.float32)
    bias = rng.standard_normal(16).astype(np.float32)
    model = make_model(
        [helper.make_node("Conv", ["x", "w1", "b1"], ["a"]),
         helper.make_node("Relu", ["a"], ["b"]),
         helper.make_node("Conv", ["b", "w2", "b2"], ["c"]),
         helper.make_node("Relu", ["c"], ["y"])],
        [("x", "float32", [1, 16, 6, 6])], [("y", "float32", None)],
        {"w1": w, "w2": w * 2, "b1": bias, "b2": bias + 1})
    tasks = extract_tasks(model, search="auto")
    assert [(t.template, t.weight) for t in tasks] == [("auto.function", 2)]


def _dense_model(rng):
    """Gemm with transB and a bias (a fully connected layer), then ReLU."""
    return make_model(
        [helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1),
         helper.make_node("Relu", ["g"], ["y"])],
        [("x", "float32", [4, 48])], [("y", "float32", None)],
        {"w": rng.standard_normal((40, 48)).astype(np.float32),
         "b": rng.standard_normal(40).astype(np.float32)})


def _batch_model(rng):
    return make_model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [("x", "float32", [3, 8, 24])], [("y", "float32", None)],
        {"w": rng.standard_normal((3, 24, 32)).astype(np.float32)})


def _depthwise_model(rng):
    return make_model(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], group=16),
         helper.make_node("Relu", ["c"], ["y"])],
        [("x", "float32", [1, 16, 10, 10])], [("y", "float32", None)],
        {"w": rng.standard_normal((16, 1, 3, 3)).astype(np.float32)})


def _reduce_model(rng):
    """A long reduction to few points (the sketch's rfactor rule applies)."""
    return make_model(
        [helper.make_node("ReduceSumSquare", ["x", "axes"], ["y"], keepdims=1)],
        [("x", "float32", [3, 20000])], [("y", "float32", None)],
        {"axes": np.array([1], np.int64)})


def _max_pool_model(rng):
    return make_model(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                          pads=[1, 1, 1, 1])],
        [("x", "float32", [1, 16, 9, 9])], [("y", "float32", None)], {})


def _average_pool_model(rng):
    return make_model(
        [helper.make_node("GlobalAveragePool", ["x"], ["y"])],
        [("x", "float32", [1, 32, 7, 7])], [("y", "float32", None)], {})


MODELS = {"conv": _conv_model, "matmul": _matmul_model, "dense": _dense_model,
          "batch_matmul": _batch_model, "depthwise": _depthwise_model,
          "reduce": _reduce_model, "max_pool": _max_pool_model,
          "average_pool": _average_pool_model}


@pytest.mark.parametrize("which", sorted(MODELS))
def test_function_candidates_are_built_by_the_target_and_checked(which, rng):
    model = MODELS[which](rng)
    (task,) = extract_tasks(model, search="auto")
    hand = Task("function", task.args)
    options = MeasureOptions(repeat=1)
    configs = task.definition.first_configs(task.args)
    configs += [task.space.get(i) for i in task.space.random_indices(rng, 3)]
    # the points a search from scratch draws first (the sketch's sampling rules)
    configs += [task.space.from_values(task.definition.sample(task.args, rng))
                for _ in range(2)]
    assert measure_in_process(hand, hand.default_config(), options).ok
    for config in configs:
        result = measure_in_process(task, config, options)
        assert result.ok, (config.to_json(), result.error, result.message)


def _log(tmp_path, task, config, auto_cost, hand_cost):
    hand = Task("function", task.args)
    path = tmp_path / f"log{auto_cost}.jsonl"
    with RecordLog(path) as log:
        log.append(MeasureRecord(task.workload_key, config.to_json(), config.index,
                                 (auto_cost,)))
        log.append(MeasureRecord(hand.workload_key, {"schedule": "hand"},
                                 hand.default_config().index, (hand_cost,)))
    return str(path)


@pytest.mark.parametrize("auto_wins", [True, False])
def test_an_auto_record_applies_only_where_it_beat_the_hand_schedule(
        auto_wins, tmp_path, rng, monkeypatch):
    model = _conv_model(rng)
    (task,) = extract_tasks(model, search="auto")
    config = task.space.from_values({**task.default_config().to_json(),
                                     "a0.location": "direct"})
    # a win by less than the margin is no win: timings vary by a few percent
    log = _log(tmp_path, task, config, 1.0 if auto_wins else 1.99, 2.0)
    choices = []
    original = llvm_tuning.function_configs

    def spy(body, log, *rules):
        choices.append(body)
        return original(body, log, *rules)

    monkeypatch.setattr("heterocc.targets.llvm.target.function_configs", spy)
    applied = []
    original_tuned = llvm_tuning.function_tuned

    def tuned_spy(expressed, configs, cpu=None):
        schedule = original_tuned(expressed, configs, cpu)
        applied.append(schedule is not None)
        return schedule

    monkeypatch.setattr("heterocc.targets.llvm.target.function_tuned", tuned_spy)
    x = rng.standard_normal((1, 16, 8, 8)).astype(np.float32)
    expected = heterocc.compile(model).run([x])[0]
    applied.clear()
    choices.clear()
    compiled = heterocc.compile(model, target="llvm", tuning_log=log)
    # the convolution's function (and only it: the layout transforms have no records)
    assert applied.count(True) == (1 if auto_wins else 0)
    np.testing.assert_allclose(compiled.run([x])[0], expected, rtol=1e-4, atol=1e-4)
    # the choice is per function: its key comes from the body as compiled
    decided = []
    for body in choices:
        choice = llvm_tuning.function_configs(body, ApplyHistoryBest(log)).choice
        decided.append(None if choice is None else choice[0])
    assert decided.count("auto" if auto_wins else "hand") == 1


def test_a_hand_win_overrides_the_bare_workloads_records(tmp_path, rng):
    """A function whose hand schedule won keeps it even where the log also holds a
    bare-workload record (measured without the epilogue) that would change it."""
    model = _conv_model(rng)
    (task,) = extract_tasks(model, search="auto")
    (anchor,) = extract_tasks(model, search="template")
    bare = Task("auto." + anchor.template, anchor.args)
    log = _log(tmp_path, task, task.default_config(), 3.0, 2.0)
    with RecordLog(log) as records:
        config = bare.default_config()
        records.append(MeasureRecord(bare.workload_key, config.to_json(), config.index,
                                     (0.5,)))
    body = function_body(task.args[1])
    configs = llvm_tuning.function_configs(body, ApplyHistoryBest(log))
    assert configs.choice == ("hand", None)
    assert configs.matmul_panel(8, 64, 64, "float32") is None


def test_a_products_panel_is_a_knob_applied_to_its_prepacked_constant(tmp_path, rng):
    model = _matmul_model(rng)
    (task,) = extract_tasks(model, search="auto")
    assert task.args[0] == "matmul"
    panels = dict((k.name, k.options) for k in task.space.knobs)["panel"]
    assert set(panels) >= {16, 32, 64} - {p for p in (16, 32, 64) if 64 % p}
    config = task.space.from_values({**task.default_config().to_json(), "panel": 16})
    target = _compile_product_applying(model, _log(tmp_path, task, config, 1.0, 2.0), rng)
    prepacked = [tuple(p.shape) for cf in target._compiled.values()
                 for p in cf.lowered.params if p.name.endswith(".packed")]
    assert prepacked == [(64 // 16, 64, 16)]


def model_weight(model):
    from onnx import numpy_helper

    return numpy_helper.to_array(model.graph.initializer[0])


def _compile_product_applying(model, log, rng) -> LLVMTarget:
    """Compile the one-MatMul ``model`` applying ``log``; check it computes ``x @ w``;
    return the target (its compiled functions)."""
    x = rng.standard_normal(tuple(
        d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)).astype(np.float32)
    target = LLVMTarget()
    compiled = heterocc.compile(model, target=[target], tuning_log=log)
    np.testing.assert_allclose(compiled.run([x])[0], x @ model_weight(model), rtol=1e-4,
                               atol=1e-4)
    return target


def test_seeds_fill_the_registers_and_block_a_long_reduction():
    from heterocc import te
    from heterocc.compute.nn import matmul

    A = te.placeholder((256, 1024), "float32", "A")
    B = te.placeholder((1024, 256), "float32", "B")
    sketch = Sketch([matmul(A, B, "C")], SearchHints(vector_lanes=16, registers=32))
    seeds = sketch.seed_values()
    assert seeds[0] == sketch.default_values()
    for values in seeds:
        rows, columns = values["a0.tile.s0"][-1], values["a0.tile.s1"][-1]
        # the accumulators fit the registers the operands leave
        assert rows * (columns // 16) <= 32 - 4
        sketch.space.from_values(values)  # every seed is a point of the space
    shapes = {(v["a0.tile.s0"][-1], v["a0.tile.s1"][-1]) for v in seeds}
    assert {(16, 16), (8, 32), (4, 64)} <= shapes
    blocked = [v for v in seeds if v["a0.tile.s0"][1] > 1]
    assert blocked and all(v["a0.tile.r0"] < 1024 for v in blocked)


def test_a_function_task_keeps_its_sketchs_sampling_rules(rng):
    """The evolution drops a function task's children that break the sketch's sampling
    rules (its template has ``admissible``): a register tile of several rows not
    unrolled whole keeps its accumulators in memory."""
    (task,) = extract_tasks(_conv_model(rng), search="auto")
    admissible = task.definition.admissible
    assert admissible is not None
    sample = task.definition.sample(task.args, np.random.default_rng(0))
    assert admissible(task.args, sample)
    options = {knob.name: knob.options for knob in task.space.knobs}
    *rows_axes, _ = sorted(name for name in sample if name.startswith("a0.tile.s"))
    rows = next({name: o} for name in rows_axes for o in options[name] if o[-1] == 2)
    assert not admissible(task.args, {**sample, **rows, "a0.unroll": 0})


def test_function_keys_name_both_searches(rng):
    (task,) = extract_tasks(_matmul_model(rng), search="auto")
    hand_key, auto_key = function_keys(task.args[1], task.args[0])
    assert auto_key == task.workload_key
    assert Task.from_key(hand_key).template == "function"


def test_records_of_an_earlier_space_are_skipped_not_fatal(tmp_path, rng):
    """A log written when the sketch had other knobs: its records are no points of
    today's space, so compile keeps the hand schedule instead of failing."""
    model = _conv_model(rng)
    (task,) = extract_tasks(model, search="auto")
    config = task.default_config()
    stale = {k: v for k, v in config.to_json().items() if not k.endswith(".order")}
    path = tmp_path / "stale.jsonl"
    with RecordLog(path) as log:
        log.append(MeasureRecord(task.workload_key, stale, config.index, (0.5,)))
        log.append(MeasureRecord(Task("function", task.args).workload_key,
                                 {"schedule": "hand"}, 0, (2.0,)))
    choice = llvm_tuning.function_configs(function_body(task.args[1]),
                                          ApplyHistoryBest(path)).choice
    assert choice == ("hand", None)
    x = rng.standard_normal((1, 16, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(
        heterocc.compile(model, tuning_log=str(path)).run([x])[0],
        heterocc.compile(model).run([x])[0], rtol=1e-5, atol=1e-5)


def test_the_order_knob_walks_the_last_axis_outermost():
    from heterocc import te
    from heterocc.compute.nn import matmul

    A = te.placeholder((64, 32), "float32", "A")
    B = te.placeholder((32, 64), "float32", "B")
    C = matmul(A, B, "C")
    sketch = Sketch([C], SearchHints(vector_lanes=16, registers=32))
    values = {**sketch.default_values(), "a0.tile.s0": (1, 1, 8), "a0.tile.s1": (1, 1, 16)}
    loops = {}
    for order in ("natural", "reversed"):
        config = sketch.space.from_values({**values, "a0.order": order})
        schedule = sketch.apply([C], config)
        # the parallel loop fuses the outer tiles: rows first, or column panels first
        (fused,) = [iv for iv in schedule[C].leaf_iter_vars if ".fused" in iv.name]
        loops[order] = fused.name
    assert loops["natural"].startswith("i0") and loops["reversed"].startswith("i1")


@pytest.mark.parametrize("rfactor", ["vector", "parallel"])
def test_a_reduction_task_measures_and_applies_its_rfactor_points(rfactor, tmp_path, rng):
    """A reduction function is a task, its long reduction to few points gets the rfactor
    rule, and each rfactor point is checked against the reference, then compiled into
    the model by its record."""
    model = _reduce_model(rng)
    (task,) = extract_tasks(model, search="auto")
    assert task.args[0] == "reduce"
    assert task.space.get(0).values.keys() >= {"a0.rfactor"}
    config = task.space.from_values({**task.default_config().values, "a0.rfactor": rfactor})
    result = measure_in_process(task, config, MeasureOptions(repeat=1))
    assert result.ok, (result.error, result.message)
    log = _log(tmp_path, task, config, 1.0, 2.0)
    x = rng.standard_normal((3, 20000)).astype(np.float32)
    compiled = heterocc.compile(model, tuning_log=log)
    np.testing.assert_allclose(compiled.run([x])[0], (x.astype(np.float64) ** 2).sum(
        axis=1, keepdims=True), rtol=1e-4)


@pytest.mark.parametrize("which", ["dense", "batch_matmul", "depthwise", "reduce"])
def test_dense_batch_and_depthwise_functions_apply_their_auto_records(which, tmp_path, rng):
    """The kinds whose bare-workload records compile never applied: as functions, their
    auto records apply like any other (and compute the same)."""
    model = MODELS[which](rng)
    (task,) = extract_tasks(model, search="auto")
    config = task.space.get(task.space.random_indices(rng, 1)[0])
    log = _log(tmp_path, task, config, 1.0, 2.0)
    choice = llvm_tuning.function_configs(function_body(task.args[1]),
                                          ApplyHistoryBest(log)).choice
    assert choice[0] == "auto" and choice[1].index == config.index
    x = rng.standard_normal(model_input_shape(model)).astype(np.float32)
    np.testing.assert_allclose(heterocc.compile(model, tuning_log=log).run([x])[0],
                               heterocc.compile(model).run([x])[0], rtol=1e-4, atol=1e-4)


def model_input_shape(model):
    return [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]


def test_a_win_by_median_alone_does_not_apply_when_the_hand_was_faster_at_best(
        tmp_path, rng):
    """Hand timings hit by a burst of other work: its median looks slow, but its fastest
    timing beats the auto record's fastest, so the hand schedule stays."""
    (task,) = extract_tasks(_conv_model(rng), search="auto")
    config, hand = task.default_config(), Task("function", task.args)
    body = function_body(task.args[1])
    for hand_costs, expected in (((0.9, 3.0, 3.0), "hand"), ((2.0, 3.0, 3.0), "auto")):
        path = tmp_path / f"{hand_costs[0]}.jsonl"
        with RecordLog(path) as log:
            log.append(MeasureRecord(task.workload_key, config.to_json(), config.index,
                                     (1.0, 1.1, 1.2)))
            log.append(MeasureRecord(hand.workload_key, {"schedule": "hand"},
                                     hand.default_config().index, hand_costs))
        choice = llvm_tuning.function_configs(body, ApplyHistoryBest(path)).choice
        assert choice[0] == expected


def test_the_sketch_expresses_the_hand_depthwise_tile(rng):
    """The depthwise hand schedule's elements in the sketch's space: the padded input
    read in place (the default point inlines a border the compute does not ask to keep;
    a dense convolution's kept padding stays materialized) and the window handed to
    LLVM's unroller while the register tile is unrolled in the TIR."""
    (depthwise,) = extract_tasks(_depthwise_model(rng), search="auto")
    (dense,) = extract_tasks(_conv_model(rng), search="auto")
    assert depthwise.default_config()["p0.location"] == "inline"
    assert dense.default_config()["p0.location"] == "root"
    # the kept padding read in place too, from the first batch (the default so else)
    in_place = {**dense.default_config().to_json(), "p0.location": "inline"}
    assert dense.definition.first_configs(dense.args)[1].values == in_place
    config = depthwise.space.from_values({**depthwise.default_config().to_json(),
                                          "a0.reduce_unroll": "hint"})
    schedule, args = depthwise.definition.instantiate(depthwise.args, config)
    hinted = tir.collect(te.lower(schedule, args).body, lambda n: isinstance(n, tir.For)
                         and n.kind is tir.ForKind.UNROLL_HINT)
    assert sorted(int(loop.extent.value) for loop in hinted) == [3, 3]  # the 3x3 window
    result = measure_in_process(depthwise, config, MeasureOptions(repeat=1))
    assert result.ok, result.message


def test_the_timings_paired_with_the_hand_schedule_decide(tmp_path, rng):
    """Where the log holds the search's best timed in turn with the hand schedule
    (``paired`` and ``baseline`` records), those pairs alone decide: a point timed fast
    during the search but slower than the hand schedule beside it keeps the hand
    schedule (and a faster point of the search timed only during it does not take its
    place); one that wins its pairs is applied, by them, even where another point's
    search timings were faster still."""
    (task,) = extract_tasks(_conv_model(rng), search="auto")
    hand = Task("function", task.args)
    body = function_body(task.args[1])
    finalist = task.default_config()
    other = task.space.get(task.space.random_indices(rng, 1)[0])
    assert other.index != finalist.index
    for paired, expected in (((2.0, 2.1, 1.9), "hand"), ((1.0, 1.1, 1.05), "auto")):
        path = tmp_path / f"{paired[0]}.jsonl"
        with RecordLog(path) as log:
            log.append(MeasureRecord(task.workload_key, finalist.to_json(), finalist.index,
                                     (0.5,), tuner="auto"))
            log.append(MeasureRecord(task.workload_key, other.to_json(), other.index,
                                     (0.4,), tuner="auto"))
            for cost in paired:
                log.append(MeasureRecord(task.workload_key, finalist.to_json(),
                                         finalist.index, (cost,), tuner="paired"))
                log.append(MeasureRecord(hand.workload_key, {"schedule": "hand"},
                                         hand.default_config().index, (1.5,),
                                         tuner="baseline"))
        choice = llvm_tuning.function_configs(body, ApplyHistoryBest(path)).choice
        assert choice[0] == expected
        if expected == "auto":
            assert choice[1].index == finalist.index


@pytest.mark.parametrize("cache", CACHE_MODES)
@pytest.mark.parametrize("search", ["auto", "template"])
def test_candidates_measure_in_every_cache_mode(cache, search, rng):
    (task,) = extract_tasks(_conv_model(rng), search=search)
    options = MeasureOptions(repeat=2, cache=cache)
    result = measure_in_process(task, task.default_config(), options)
    assert result.ok and len(result.costs) == 2, (result.error, result.message)
    if search == "auto":
        hand = Task("function", task.args)
        assert measure_in_process(hand, hand.default_config(), options).ok


def _timed_with(monkeypatch, task, cache):
    """What the target hands :func:`time_calls` for ``task`` in ``cache`` mode."""
    handed = {}

    def fake_time_calls(call, options, flush=None, watch=None):
        handed.update(call=call, flush=flush, watch=watch)
        return (1.0,)

    # a function task is measured through the target's compile path (tuning.functions)
    monkeypatch.setattr(llvm_tuning.functions, "time_calls", fake_time_calls)
    measure_in_process(task, task.default_config(), MeasureOptions(repeat=1, cache=cache))
    return handed


def test_only_the_flush_mode_flushes_the_caches_of_the_tuned_cpu(monkeypatch, rng):
    (task,) = extract_tasks(_conv_model(rng), search="auto")
    cpu = active_cpu()
    evicted, flushed = [], []
    monkeypatch.setattr(llvm_tuning.measure, "evict_from_caches",
                        lambda arrays: evicted.append([a.nbytes for a in arrays]) or True)
    monkeypatch.setattr(llvm_tuning.measure, "cache_flusher",
                        lambda tuned: lambda: flushed.append(tuned))
    flush = _timed_with(monkeypatch, task, "flush")["flush"]
    evicted.clear()
    flush()
    # the kernel's weights (16x32x3x3, prepacked) and bias leave every cache level, then
    # the cores' L2 caches are flushed
    assert len(evicted) == 1 and sum(evicted[0]) >= 4 * (16 * 32 * 9 + 32)
    assert flushed == [cpu]
    monkeypatch.undo()
    assert _timed_with(monkeypatch, task, "hot")["flush"] is None
    assert _timed_with(monkeypatch, task, "rotate")["flush"] is None
    # every mode's samples are watched for loops that ran on one core (then retaken)
    assert _timed_with(monkeypatch, task, "hot")["watch"] is llvm_tuning.measure.pool_watch
    flusher = llvm_tuning.cache_flusher(cpu)
    buffer, sums = flusher.args
    assert buffer.nbytes >= llvm_tuning.FLUSH_L2_MULTIPLE * cpu.l2 * cpu.num_cores
    flusher()
    assert np.all(sums == buffer.shape[1])  # every row of the buffer was read


def test_the_flush_is_the_l2_flush_alone_without_weights_or_where_nothing_evicts(monkeypatch):
    cpu = active_cpu()
    flush = MeasureOptions(cache="flush")
    assert llvm_tuning.measure._flush_of(flush) is llvm_tuning.cache_flusher(cpu)
    weights = [np.ones(1024, np.float32)]
    assert llvm_tuning.measure._flush_of(flush, weights) is not llvm_tuning.cache_flusher(cpu)
    # a CPU without an eviction instruction for user code: the L2 flush only
    monkeypatch.setattr(llvm_tuning.measure, "evicts_here", lambda: False)
    assert llvm_tuning.measure._flush_of(flush, weights) is llvm_tuning.cache_flusher(cpu)
    assert llvm_tuning.measure._flush_of(MeasureOptions(cache="hot"), weights) is None


def test_the_rotate_mode_takes_turns_over_copies_of_constants_and_outputs(monkeypatch, rng):
    (task,) = extract_tasks(_conv_model(rng), search="auto")
    made = []
    rotating = llvm_tuning._rotating

    def spy(make, footprint):
        made.append(footprint)
        return rotating(lambda: made.append(make()) or made[-1], footprint)

    monkeypatch.setattr(llvm_tuning.functions, "_rotating", spy)
    call = _timed_with(monkeypatch, task, "rotate")["call"]
    footprint, copies = made[0], made[1:]
    # the weights (16x32x3x3, prepacked), the bias and the 32x8x8 output, in float32
    assert footprint >= 4 * (16 * 32 * 9 + 32 + 32 * 8 * 8)
    assert len(copies) == llvm_tuning.rotation_count(footprint, active_cpu())
    inputs, expected = task_inputs(task.workload_key, 0)
    for _ in range(2 * len(copies)):  # the turns go round, each copy computing right
        (got,) = call()
        np.testing.assert_allclose(got, expected[0], rtol=1e-3, atol=1e-3)


def test_the_rotation_is_long_enough_to_leave_the_l2_caches_and_bounded():
    cpu = active_cpu()
    evicting = llvm_tuning.FLUSH_L2_MULTIPLE * cpu.l2 * cpu.num_cores
    count = llvm_tuning.rotation_count(evicting // 10, cpu)
    assert (count - 1) * (evicting // 10) >= evicting
    assert llvm_tuning.rotation_count(10 * evicting, cpu) == 2
    assert llvm_tuning.rotation_count(1, cpu) == llvm_tuning.MAX_ROTATION


@pytest.mark.parametrize("layout", ["row_blocks", "in_place"])
def test_a_products_a_layout_is_a_knob_of_its_function(layout, tmp_path, rng):
    """``a_layout``: a product's A read in place, or copied in blocks of the register
    tile's rows (6 of 32: the last block cut short) by the reduction's chunk (16 of 64),
    what compile then builds, exactly; the seeds that chunk a long reduction come in
    both layouts."""
    model = _matmul_model(rng, m=32)
    (task,) = extract_tasks(model, search="auto")
    knobs = dict((k.name, k.options) for k in task.space.knobs)
    assert knobs["a_layout"] == ("in_place", "row_blocks")
    assert task.default_config()["a_layout"] == "in_place"
    config = task.space.from_values({
        **task.default_config().to_json(), "a_layout": layout, "a0.tile.s0": (1, 1, 6),
        "a0.tile.r0": 16})
    target = _compile_product_applying(model, _log(tmp_path, task, config, 1.0, 2.0), rng)
    (lowered,) = [cf.lowered for cf in target._compiled.values()]
    allocations = {n.buffer.name: [int(e) for e in n.buffer.shape] for n in tir.collect(
        lowered.body, lambda n: isinstance(n, tir.Allocate))}
    packed = [shape for name, shape in allocations.items() if name.endswith("packed_A")]
    assert packed == ([[6, 4, 6, 16]] if layout == "row_blocks" else [])
    (long,) = extract_tasks(_matmul_model(rng, m=64, k=1024), search="auto")
    seeds = [long.space.from_values(v) for v in long.definition.seeds(long.args)]
    chunked = [c for c in seeds if c["a0.tile.r0"] < 1024]
    assert {c["a_layout"] for c in chunked} == {"in_place", "row_blocks"}
    assert all(c["a_layout"] == "in_place" for c in seeds if c not in chunked)


def test_the_pools_of_a_blocked_model_are_tasks_of_their_own(rng):
    # with the hand rules off a pool's generic schedule is scalar: the search from
    # scratch tunes it like a convolution, in the blocked layout the model uses
    model = make_model(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                          pads=[1, 1, 1, 1])],
        [("x", "float32", [1, 16, 8, 8])], [("y", "float32", None)],
        {"w": rng.standard_normal((32, 16, 3, 3)).astype(np.float32)})
    target = LLVMTarget(rules="none")
    tasks = extract_tasks(model, target=target, search="auto")
    assert sorted(task.args[0] for task in tasks) == ["conv2d_nchwc", "pool"]
    (pool,) = [task for task in tasks if task.args[0] == "pool"]
    (node,) = function_body(pool.args[1]).nodes
    assert node.op == "MaxPool" and len(node.inputs[0].type.shape) == 5
    assert pool.flops == 32 * 4 * 4 * 9  # an operation per tap of each window
