"""Task extraction, `heterocc tune` and applying its log."""

import argparse
import io

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from heterocc import te
from heterocc.accel_sim import HardwareConfig
from heterocc.targets.llvm.cpu import active_cpu
from heterocc.targets.llvm.module import build
from heterocc.targets.llvm.schedules import matmul
from heterocc.targets.llvm.tuning import schedule_matmul_tuned
from heterocc.targets.vta.tuning import vta_gemm_task, vta_tiling
from heterocc.tuning.apply import ApplyHistoryBest, lookup
from heterocc.tuning.cli import add_tune_parser
from heterocc.tuning.extract import extract_tasks
from heterocc.tuning.measure import SINGLE_CALL_SAMPLES
from heterocc.tuning.records import MeasureRecord, best_configs, read_records
from heterocc.tuning.task import Task, workload_key


def _model(path):
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
               for name, shape in (("w1", (8, 3, 3, 3)), ("w2", (8, 1, 3, 3)),
                                   ("w3", (8, 1, 3, 3)), ("fc", (10, 128)))]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c1", "w2"], ["c2"], pads=[1, 1, 1, 1], group=8),
        helper.make_node("Conv", ["c2", "w3"], ["c3"], pads=[1, 1, 1, 1], group=8),
        helper.make_node("Flatten", ["c3"], ["f"]),
        helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_extract_tasks_one_per_distinct_workload(tmp_path):
    tasks = extract_tasks(_model(tmp_path / "m.onnx"))
    # the workloads the llvm target compiles: convolutions in the blocked layout (8 filters:
    # blocks of 8; the 3-channel input read in place, in blocks of one channel), the two
    # equal depthwise convolutions one task
    assert [t.template for t in tasks] == ["conv2d_nchwc", "depthwise_conv2d_nchwc", "matmul"]
    assert tasks[0].args == (1, 3, 4, 4, 1, 1, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, "float32")
    assert tasks[1].args == (1, 1, 4, 4, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, "float32")
    assert tasks[2].args == (1, 10, 128, "float32")
    accel = extract_tasks(tmp_path / "m.onnx", target="vta")
    # grouped convolutions stay on the CPU; im2col GEMMs are padded to the 16x16 core
    assert accel == [vta_gemm_task(16, 32, 16, "1x16x16"), vta_gemm_task(1, 128, 16, "1x16x16")]
    assert accel[0].args[3] == HardwareConfig.preset("1x16x16").name


def test_tune_command_logs_every_trial_and_the_log_applies(tmp_path):
    model, log = _model(tmp_path / "m.onnx"), tmp_path / "tune.jsonl"
    parser = argparse.ArgumentParser()
    add_tune_parser(parser.add_subparsers())
    args = parser.parse_args(["tune", str(model), "--trials", "2", "--log", str(log),
                              "--tuner", "random", "--batch-size", "2", "--repeat", "1",
                              "--remeasure", "0"])
    out = io.StringIO()
    assert args.func(args, stream=out) == 0
    text = out.getvalue()
    assert "3 tasks" in text and "2/2 trials" in text
    assert text.count("[task 3/3] matmul") == 1  # one line per batch when not a terminal
    records = read_records(log)
    assert len(records) == 6
    assert set(best_configs(log)) == {t.workload_key for t in extract_tasks(model)}


def test_tune_command_measures_the_finalists_again(tmp_path):
    """With --remeasure the best configs and the default get two more records each, and
    the summary line compares the best with the default."""
    model, log = _model(tmp_path / "m.onnx"), tmp_path / "tune.jsonl"
    parser = argparse.ArgumentParser()
    add_tune_parser(parser.add_subparsers())
    args = parser.parse_args(["tune", str(model), "--trials", "3", "--log", str(log),
                              "--tuner", "random", "--repeat", "1", "--remeasure", "1"])
    out = io.StringIO()
    assert args.func(args, stream=out) == 0
    records = read_records(log)
    for task in extract_tasks(model):
        mine = [r for r in records if r.workload_key == task.workload_key]
        default = task.default_config().index
        assert sum(r.config_index == default for r in mine) == 3
        assert any(r.tuner == "remeasure" for r in mine)
        # the finalists are timed by single calls whatever --repeat asked of the trials
        assert {len(r.costs) for r in mine if r.tuner == "remeasure"} == {SINGLE_CALL_SAMPLES}
        assert {len(r.costs) for r in mine if r.tuner == "random"} == {1}
    assert out.getvalue().count(", default ") == 3


def test_tune_command_times_single_calls_when_asked(tmp_path):
    model, log = _model(tmp_path / "m.onnx"), tmp_path / "tune.jsonl"
    parser = argparse.ArgumentParser()
    add_tune_parser(parser.add_subparsers())
    args = parser.parse_args(["tune", str(model), "--trials", "1", "--log", str(log),
                              "--tuner", "random", "--remeasure", "0", "--timing", "single"])
    assert args.func(args, stream=io.StringIO()) == 0
    records = read_records(log)
    assert len(records) == 3
    assert {len(r.costs) for r in records} == {SINGLE_CALL_SAMPLES}


def test_applied_log_schedules_the_llvm_matmul(tmp_path):
    task = Task("matmul", (16, 40, 24, "float32"))
    chosen = task.space.from_values({**task.default_config().to_json(), "tile_rows": 4,
                                     "accumulate": "memory", "k_chunk": 16})
    slower = task.default_config()
    records = [MeasureRecord(task.workload_key, chosen.to_json(), chosen.index, (1.0,)),
               MeasureRecord(task.workload_key, slower.to_json(), slower.index, (2.0,))]
    A = te.placeholder((16, 24), "float32", "A")
    B = te.placeholder((24, 40), "float32", "B")
    C = matmul(A, B, cpu=active_cpu())
    assert not schedule_matmul_tuned(None, te.create_schedule(C), C)  # no log
    with ApplyHistoryBest(records) as applied:
        assert lookup(task.workload_key).index == chosen.index
        assert lookup(workload_key("matmul", (1, 2, 3, "float32"))) is None
    schedule = te.create_schedule(C)
    assert schedule_matmul_tuned(applied, schedule, C)
    assert lookup(task.workload_key) is None
    module = build(te.lower(schedule, [A, B, C], name="tuned"))
    a, b = np.ones((16, 24), np.float32), np.arange(24 * 40, dtype=np.float32).reshape(24, 40)
    c = np.zeros((16, 40), np.float32)
    module(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_applied_log_gives_the_accelerator_tiling():
    task = vta_gemm_task(64, 128, 64, "1x16x16", True)
    config = task.space.from_values({"block_rows": 16, "block_cols": 2, "k_chunk": 4,
                                     "virtual_threads": 1})
    with ApplyHistoryBest([MeasureRecord(task.workload_key, config.to_json(), config.index,
                                         (100.0,))]):
        tiling, threads = vta_tiling(64, 128, 64, "1x16x16")
        assert vta_tiling(64, 128, 128, "1x16x16") is None
    assert (tiling.block_rows, tiling.block_cols, tiling.k_chunk, threads) == (16, 2, 4, 1)


def test_compile_applies_a_tuned_matmul_schedule(tmp_path):
    """A model's MatMul function takes its schedule from the tuning log."""
    import heterocc
    from heterocc.cli import main as cli_main
    from tests.conftest import make_model

    model = make_model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                       [("a", "float32", [64, 48])], [("y", "float32", None)],
                       {"b": np.random.default_rng(0).standard_normal((48, 40))
                        .astype(np.float32)})
    path, log = tmp_path / "mm.onnx", tmp_path / "mm.jsonl"
    onnx.save(model, str(path))
    assert cli_main(["tune", str(path), "--target", "llvm", "--trials", "3", "--log",
                     str(log), "--tuner", "random", "--repeat", "1"]) == 0
    assert any("matmul" in key for key in best_configs(log))
    tuned = heterocc.compile(model, target="llvm", tuning_log=str(log))
    a = np.random.default_rng(1).standard_normal((64, 48)).astype(np.float32)
    np.testing.assert_allclose(tuned.run([a])[0], heterocc.compile(model).run([a])[0],
                               rtol=1e-4, atol=1e-4)
