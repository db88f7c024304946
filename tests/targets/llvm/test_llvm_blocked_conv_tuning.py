"""Tuning the blocked (NCHW[x]c) convolution the llvm target compiles: its templates,
task extraction from the graph the compiler builds, and the log applied at compile time."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import heterocc
from heterocc import te
from heterocc.targets.llvm import LLVMTarget
from heterocc.targets.llvm.module import build
from heterocc.targets.llvm.schedules import BlockedConvTiles, schedule_conv2d_nchwc
from heterocc.targets.llvm.tuning import blocked_conv_tiles
from heterocc.tuning.apply import ApplyHistoryBest
from heterocc.tuning.records import MeasureRecord, RecordLog
from heterocc.tuning.task import Task, extract_tasks

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
    schedule_conv2d_nchwc(schedule, conv, tiles=BlockedConvTiles())
    default = te.lower(schedule, [data, weight, conv], name="candidate")
    assert str(tuned) == str(default)


@pytest.mark.parametrize("values", [
    {"columns": 4, "channel_blocks": 2, "reduce_order": "kernel_outer"},   # tail tile
    {"columns": 5, "channel_blocks": 1, "reduce_order": "kernel_outer"},
    {"columns": 8, "channel_blocks": 2, "reduce_order": "channels_outer"},
])
def test_dense_configs_match_numpy(values):
    out, expected = _run(DENSE, DENSE.space.from_values(values), np.random.default_rng(0))
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("columns,channel_blocks", [(4, 2), (5, 2), (4, 1)])
def test_depthwise_configs_match_numpy(columns, channel_blocks):
    assert DEPTHWISE.space.knobs[0].options == (4, 5)  # output width 5: a tail tile of 4
    config = DEPTHWISE.space.from_values({"columns": columns, "channel_blocks": channel_blocks,
                                          "reduce_order": "channels_outer"})
    out, expected = _run(DEPTHWISE, config, np.random.default_rng(1))
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def _conv_model():
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((32, 32, 3, 3)).astype(np.float32),
                                     "w")
    bias = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(
        nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 9, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 9, 10])], [weight, bias])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _conv_function(compiled):
    (function,) = [n for n in compiled.graph.nodes if n.body is not None
                   and any(m.op == "ConvNCHWc" for m in n.body.nodes)]
    return function


def _log_preferring(task, values):
    chosen = task.space.from_values(values)
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
    with ApplyHistoryBest(_log_preferring(task, {"columns": 4, "channel_blocks": 2,
                                                 "reduce_order": "kernel_outer"})):
        assert blocked_conv_tiles(conv) == BlockedConvTiles(4, 2, kernel_outer=True)
        assert blocked_conv_tiles(plain) is None  # a compute without a workload
    assert blocked_conv_tiles(conv) is None  # outside the log's context


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
