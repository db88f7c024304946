"""Tuning the blocked (NCHW[x]c) convolution the llvm target compiles: its templates,
task extraction from the graph the compiler builds, and the log applied at compile time."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import heterocc
from heterocc import te
from heterocc.targets.llvm import LLVMTarget
from heterocc.targets.llvm.cpu import active_cpu
from heterocc.targets.llvm.module import build
from heterocc.targets.llvm.schedules import (
    BlockedConvTiles,
    DepthwiseConvTiles,
    default_blocked_conv_tiles,
    default_depthwise_conv_tiles,
    dense_conv_reduction_blocks,
    schedule_conv2d_nchwc,
)
from heterocc.targets.llvm.tuning import (
    blocked_conv_tiles,
    blocked_conv_tiles_of,
    schedule_blocked_conv,
)
from heterocc.tuning.apply import ApplyHistoryBest
from heterocc.tuning.extract import extract_tasks
from heterocc.tuning.records import MeasureRecord, RecordLog
from heterocc.tuning.task import Task
from heterocc.tuning.tuners import RandomTuner, resume

#: 32 -> 32 channels in blocks of 16 (2 output blocks), 3x3, stride 1, pad 1, 9x10
DENSE = Task("conv2d_nchwc", (1, 2, 9, 10, 16, 2, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1,
                              "float32"))
#: 16 channels in blocks of 8, 3x3, stride 2, dilation 2, asymmetric padding, 13x11
DEPTHWISE = Task("depthwise_conv2d_nchwc", (1, 2, 13, 11, 8, 3, 3, 2, 2, 2, 1, 1, 2, 2, 2,
                                            "float32"))


def _lowered(task, config):
    schedule, tensors = task.definition.instantiate(task.args, config)
    return te.lower(schedule, tensors, name="candidate"), tensors


def _run(task, config, rng):
    prim, tensors = _lowered(task, config)
    inputs = task.definition.inputs(task.args, rng)
    out = np.zeros(tensors[-1].shape, tensors[-1].dtype)
    build(prim)(*inputs, out)
    return out, task.definition.reference(task.args, inputs)


def test_blocked_conv_knobs():
    knobs = {k.name: k.options for k in DENSE.space.knobs}
    # divisors of the output width (10) up to the register budget, and non-divisors
    assert knobs["columns"] == (2, 4, 5, 8, 10)
    assert knobs["channel_blocks"] == (1, 2)
    assert knobs["reduce_order"] == ("channels_outer", "kernel_outer")
    depthwise = {k.name: k.options for k in DEPTHWISE.space.knobs}
    assert depthwise["reduce_order"] == ("channels_outer",)  # no channel reduction
    assert DEPTHWISE.flops == 2 * 16 * 6 * 5 * 9  # 16 channels, 6x5 outputs, 3x3 taps


@pytest.mark.parametrize("task", [DENSE, DEPTHWISE], ids=["dense", "depthwise"])
def test_default_config_is_the_default_schedule(task):
    """Without a log the compiler's schedule is exactly the template's default config."""
    tuned, tensors = _lowered(task, task.default_config())
    data, weight, conv = tensors
    schedule = te.create_schedule(conv)
    schedule_conv2d_nchwc(schedule, conv, tiles=BlockedConvTiles(), cpu=active_cpu())
    default = te.lower(schedule, [data, weight, conv], name="candidate")
    assert str(tuned) == str(default)


@pytest.mark.parametrize("values", [
    {"columns": 4, "channel_blocks": 2, "reduce_order": "kernel_outer"},   # tail tile
    {"columns": 5, "channel_blocks": 1, "reduce_order": "kernel_outer"},
    {"columns": 8, "channel_blocks": 2, "reduce_order": "channels_outer"},
])
def test_dense_configs_match_numpy(values):
    # values of a record written before the unroll and chunk knobs: their defaults apply
    out, expected = _run(DENSE, DENSE.config_of(values), np.random.default_rng(0))
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("columns,channel_blocks", [(4, 2), (5, 2), (4, 1)])
def test_depthwise_configs_match_numpy(columns, channel_blocks):
    assert DEPTHWISE.space.knobs[0].options == (4, 5)  # output width 5: a tail tile of 4
    config = DEPTHWISE.config_of({"columns": columns, "channel_blocks": channel_blocks,
                                  "reduce_order": "channels_outer"})
    out, expected = _run(DEPTHWISE, config, np.random.default_rng(1))
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def _conv_model(channels=32, size=(9, 10), stride=1):
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(
        rng.standard_normal((32, channels, 3, 3)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1],
                              strides=[stride] * 2),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(
        nodes, "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, *size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                       [1, 32, *((d - 1) // stride + 1 for d in size)])],
        [weight, bias])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _conv_function(compiled):
    (function,) = [n for n in compiled.graph.nodes if n.body is not None
                   and any(m.op == "ConvNCHWc" for m in n.body.nodes)]
    return function


def _log_preferring(task, values):
    chosen = task.config_of(values)
    default = task.default_config()
    return [MeasureRecord(task.workload_key, chosen.to_json(), chosen.index, (1.0,)),
            MeasureRecord(task.workload_key, default.to_json(), default.index, (2.0,))]


def test_extracted_task_is_the_compiled_workload():
    """The task's key is the one the compiler looks up for the kernel it builds."""
    model = _conv_model()
    (task,) = extract_tasks(model)
    assert task == DENSE
    _, _, conv = _lowered(task, task.default_config())[1]
    plain = te.compute((4,), lambda i: te.const(0.0, "float32"), name="plain")
    log = ApplyHistoryBest(_log_preferring(task, {"columns": 4, "channel_blocks": 2,
                                                  "reduce_order": "kernel_outer"}))
    assert blocked_conv_tiles(log, conv) == BlockedConvTiles(4, 2, kernel_outer=True)
    assert blocked_conv_tiles(log, plain) is None  # a compute without a workload
    assert blocked_conv_tiles(None, conv) is None  # without a log


def test_stem_task_reads_the_nchw_input_in_place():
    """A 3-channel NCHW input's convolution (read in place, as NCHW1c): its task's
    workload has input blocks of one channel, its template builds the convolution over
    the 4-D input, and configs across its space compute it."""
    (task,) = extract_tasks(_conv_model(3, (11, 12), 2))
    assert task == Task("conv2d_nchwc", (1, 3, 11, 12, 1, 2, 16, 3, 3, 2, 2, 1, 1, 1, 1,
                                         1, 1, "float32"))
    data = _lowered(task, task.default_config())[1][0]
    assert tuple(data.shape) == (1, 3, 11, 12)
    rng = np.random.default_rng(4)
    for index in range(0, task.space.size, max(1, task.space.size // 10)):
        config = task.space.get(index)
        out, expected = _run(task, config, rng)
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4,
                                   err_msg=str(config.to_json()))


def test_compile_applies_the_logged_conv_schedule(tmp_path):
    import onnxruntime as ort

    model = _conv_model()
    (task,) = extract_tasks(model)
    log = tmp_path / "conv.jsonl"
    with RecordLog(log) as records:
        for record in _log_preferring(task, {"columns": 4, "channel_blocks": 2,
                                             "reduce_order": "kernel_outer"}):
            records.append(record)
    x = np.random.default_rng(2).standard_normal((1, 32, 9, 10)).astype(np.float32)
    untuned = heterocc.compile(model, target="llvm")
    tuned = heterocc.compile(model, target="llvm", tuning_log=str(log))
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x})[0]
    for compiled in (untuned, tuned):
        np.testing.assert_allclose(compiled.run([x])[0], expected, rtol=1e-4, atol=1e-4)
    default_code = str(LLVMTarget().build(_conv_function(untuned)).prim)
    with ApplyHistoryBest(log):
        tuned_code = str(LLVMTarget().build(_conv_function(tuned)).prim)
    assert tuned_code != default_code
    # a log without this workload falls back to the default schedule
    other = Task("conv2d_nchwc", (*DENSE.args[:2], 12, *DENSE.args[3:]))
    with ApplyHistoryBest(_log_preferring(other, {"columns": 4, "channel_blocks": 2,
                                                  "reduce_order": "kernel_outer"})):
        assert str(LLVMTarget().build(_conv_function(untuned)).prim) == default_code
    onnx.checker.check_model(model)


#: 128 -> 64 channels in blocks of 16, 3x3 over 7x7: the default chunks its reduction
#: where one input block's weights for a tile fill at most half the L1 (AVX2's one-block
#: tiles; AVX-512's two-block tiles with a 48 KiB L1, not 32)
CHUNKED = Task("conv2d_nchwc", (1, 8, 7, 7, 16, 4, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1,
                                "float32"))
#: 1024 -> 128 channels in blocks of 16, 1x1 over 7x7: the default chunks its reduction
#: whatever the ISA and L1 (128 or 512 KiB of weights, 1-4 KiB per input block)
CHUNKED_POINTWISE = Task("conv2d_nchwc", (1, 64, 7, 7, 16, 8, 16, 1, 1, 1, 1, 0, 0, 0, 0,
                                          1, 1, "float32"))
#: 64 -> 160 channels in blocks of 16, 1x1 over 7x7: with AVX-512 the default tile takes
#: five of the ten output blocks (schedules.pointwise_conv_tile), a count the space
#: offers only as the default
POINTWISE = Task("conv2d_nchwc", (1, 4, 7, 7, 16, 10, 16, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1,
                                  "float32"))
#: 8 -> 12 channels in blocks of 4 (3 output blocks), 3x3 over 5x4: a space of 72 points
SMALL_DENSE = Task("conv2d_nchwc", (1, 2, 5, 4, 4, 3, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1,
                                    "float32"))
#: 12 channels in blocks of 4, 3x3 over 6x5: a space of 16 points
SMALL_DEPTHWISE = Task("depthwise_conv2d_nchwc", (1, 3, 6, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1,
                                                  "float32"))


def test_new_knobs_offer_only_valid_options():
    knobs = {k.name: k.options for k in CHUNKED.space.knobs}
    # None: the schedule's default (default_block_unroll); 16: the whole block
    assert knobs["block_unroll"] == (None, 1, 2, 4, 8, 16)
    assert knobs["reduction_blocks"] == (0, 1, 2, 4, 8)  # divisors of the 8 input blocks
    assert knobs["channel_blocks"] == (1, 2, 4)
    small = {k.name: k.options for k in SMALL_DENSE.space.knobs}
    assert small["channel_blocks"] == (1, 3)  # 3 output blocks: 3 per tile offered
    assert small["block_unroll"] == (None, 1, 2, 4)
    assert small["reduction_blocks"] == (0, 1, 2)
    depthwise = {k.name: k.options for k in SMALL_DEPTHWISE.space.knobs}
    assert depthwise["channel_blocks"] == (1, 3)
    assert depthwise["unroll_window"] == (True, False)
    assert depthwise["parallel"] == (True, False)
    assert "block_unroll" not in depthwise and "reduction_blocks" not in depthwise


@pytest.mark.parametrize("task", [DENSE, DEPTHWISE, CHUNKED, CHUNKED_POINTWISE,
                                  SMALL_DEPTHWISE, POINTWISE],
                         ids=["dense", "depthwise", "chunked", "chunked-pointwise",
                              "small-depthwise", "pointwise"])
def test_default_config_is_the_default_schedule_and_tiles(task):
    """The default config's tiles are the schedules' own defaults, resolved: the
    dense schedule's reduction chunks, the depthwise schedule's window and threads."""
    _, _, conv = _lowered(task, task.default_config())[1]
    default = task.default_config()
    depthwise = task.template == "depthwise_conv2d_nchwc"
    if depthwise:
        assert blocked_conv_tiles_of(default, True) == default_depthwise_conv_tiles(
            conv, cpu=active_cpu())
    else:
        tiles = blocked_conv_tiles_of(default)
        window = [int(axis.extent) for axis in conv.op.reduce_axis[1:3]]
        assert (tiles.columns, tiles.channel_blocks) == default_blocked_conv_tiles(
            conv.shape, windowed=window != [1, 1], cpu=active_cpu())
        assert tiles.block_unroll is None
        assert tiles.reduction_blocks == dense_conv_reduction_blocks(
            conv.shape, [int(axis.extent) for axis in conv.op.reduce_axis],
            tiles.channel_blocks, cpu=active_cpu())
    if task is CHUNKED_POINTWISE:
        assert default["reduction_blocks"] > 0  # the default schedule chunks it here
    if task is POINTWISE:
        knob = {k.name: k.options for k in task.space.knobs}["channel_blocks"]
        assert default["channel_blocks"] in knob and {1, 2} <= set(knob)
    tuned, tensors = _lowered(task, default)
    schedule = te.create_schedule(tensors[-1])
    schedule_conv2d_nchwc(schedule, tensors[-1], cpu=active_cpu())
    assert str(tuned) == str(te.lower(schedule, tensors, name="candidate"))


@pytest.mark.parametrize("task", [SMALL_DENSE, SMALL_DEPTHWISE], ids=["dense", "depthwise"])
def test_every_point_of_a_small_space_matches_numpy(task):
    """No point of the space fails to build (kernel_outer with chunks included: it
    runs unchunked), and every one computes the convolution."""
    rng = np.random.default_rng(3)
    for index in range(task.space.size):
        config = task.space.get(index)
        out, expected = _run(task, config, rng)
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4,
                                   err_msg=str(config.to_json()))


def test_old_records_apply_with_the_new_knobs_defaults():
    """A record written before the new knobs applies with what the schedule chose
    without them, for the record's own tile; a depthwise one with the depthwise
    schedule's default window and threads."""
    _, _, conv = _lowered(CHUNKED, CHUNKED.default_config())[1]
    _, _, depthwise_conv = _lowered(DEPTHWISE, DEPTHWISE.default_config())[1]
    old = {"columns": 4, "channel_blocks": 4, "reduce_order": "channels_outer"}
    old_depthwise = {"columns": 4, "channel_blocks": 2, "reduce_order": "channels_outer"}
    records = [MeasureRecord(CHUNKED.workload_key, old, 3, (1.0,)),
               MeasureRecord(DEPTHWISE.workload_key, old_depthwise, 1, (1.0,))]
    chunks = dense_conv_reduction_blocks(
        conv.shape, [int(axis.extent) for axis in conv.op.reduce_axis], 4, cpu=active_cpu())
    default = default_depthwise_conv_tiles(depthwise_conv, cpu=active_cpu())
    log = ApplyHistoryBest(records)
    assert blocked_conv_tiles(log, conv) == BlockedConvTiles(4, 4, reduction_blocks=chunks)
    assert blocked_conv_tiles(log, depthwise_conv) == DepthwiseConvTiles(
        4, 2, default.unroll_window, default.parallel)
    # a kernel_outer record: unchunked, as its schedule was
    kernel_outer = CHUNKED.config_of({**old, "reduce_order": "kernel_outer"})
    assert kernel_outer["reduction_blocks"] == 0 and kernel_outer["block_unroll"] is None


def test_depthwise_knobs_reach_the_compiled_schedule():
    """A depthwise record's window and threads choice is what compile applies."""
    default = SMALL_DEPTHWISE.default_config()
    flipped = SMALL_DEPTHWISE.config_of({**default.to_json(),
                                         "unroll_window": not default["unroll_window"]})
    _, tensors = _lowered(SMALL_DEPTHWISE, default)
    conv = tensors[-1]
    codes = []
    for config in (default, flipped):
        record = MeasureRecord(SMALL_DEPTHWISE.workload_key, config.to_json(), config.index,
                               (1.0,))
        schedule = te.create_schedule(conv)
        schedule_blocked_conv(schedule, conv,
                              blocked_conv_tiles(ApplyHistoryBest([record]), conv),
                              cpu=active_cpu())
        codes.append(str(te.lower(schedule, tensors, name="candidate")))
        assert codes[-1] == str(_lowered(SMALL_DEPTHWISE, config)[0])
    assert codes[0] != codes[1]


def test_a_run_resumes_over_an_old_record(tmp_path):
    """Tuning on over a log with a record written before the new knobs counts it as a
    trial of the point it names today (instead of failing to read it)."""
    old = {"columns": 4, "channel_blocks": 2, "reduce_order": "kernel_outer"}
    with RecordLog(tmp_path / "old.jsonl") as log:
        log.append(MeasureRecord(CHUNKED.workload_key, old, 5, (1e-3,)))
        tuner = RandomTuner(CHUNKED)
        progress = resume(CHUNKED, tuner, log, trials=4)
    assert progress.resumed == 1 and progress.best_cost == 1e-3
    assert progress.best_config == CHUNKED.config_of(old)
    assert tuner.visited == {CHUNKED.config_of(old).index}


def test_old_and_new_records_of_one_log_rank_by_their_own_configs():
    """An old record's index numbered the older space; in a log that also holds new
    records it may be a new config's index. Records are re-read by their values, so
    each config is ranked by its own timings only."""
    old = {"columns": 4, "channel_blocks": 4, "reduce_order": "channels_outer"}
    upgraded = CHUNKED.config_of(old)
    new = CHUNKED.space.get(7)  # a new config the old record's stale index also names
    other = CHUNKED.space.get(8)
    assert new.index != upgraded.index and other.index != upgraded.index
    records = [MeasureRecord(CHUNKED.workload_key, old, new.index, (3.0,)),
               MeasureRecord(CHUNKED.workload_key, new.to_json(), new.index, (1.0,)),
               MeasureRecord(CHUNKED.workload_key, other.to_json(), other.index, (1.8,))]
    with ApplyHistoryBest(records) as applied:
        assert applied.lookup(CHUNKED.workload_key) == new
        assert applied.best_cost(CHUNKED.workload_key) == 1.0
    tuner = RandomTuner(CHUNKED)
    progress = resume(CHUNKED, tuner, None, trials=8, records=records)
    assert progress.resumed == 3 and progress.best_config == new
    assert tuner.costs == {upgraded.index: 3.0, new.index: 1.0, other.index: 1.8}
