"""Every order of llvm, vta, cuda and an SDK target compiles (or is refused with the valid
orders), through the Python API and the CLI; every fallback is a warning that strict mode
makes an error."""

from __future__ import annotations

import itertools
import json
import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import heterocc
from heterocc.cli import main
from heterocc.errors import FallbackError, TargetError
from heterocc.models import tiny_cnn
from heterocc.sdk.registry import HOST_TARGET, is_accelerator, order_targets
from heterocc.targets import available_targets

#: the SDK example target (examples/dotprod_accel), where it is installed
SDK = "dotprod" if "dotprod" in available_targets() else None
NAMES = ["llvm", "vta", "cuda", *([SDK] if SDK else [])]
ORDERS = [",".join(p) for k in range(1, len(NAMES) + 1)
          for p in itertools.permutations(NAMES, k)]


def _int8_dense() -> onnx.ModelProto:
    """int8 x -> MatMulInteger (small weights: the SDK target's int16 accumulators hold
    them) -> + int32 bias -> y."""
    rng = np.random.default_rng(0)
    w = rng.integers(-3, 4, (20, 10)).astype(np.int8)
    b = rng.integers(-500, 500, (10,)).astype(np.int32)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["x", "w"], ["m"]),
         helper.make_node("Add", ["m", "b"], ["y"])], "dense",
        [helper.make_tensor_value_info("x", TensorProto.INT8, [4, 20])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [4, 10])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


X = np.random.default_rng(1).integers(-8, 8, (4, 20)).astype(np.int8)


@pytest.mark.parametrize("order", ORDERS)
def test_every_order_puts_accelerators_first_and_one_fallback_last(order):
    names = order.split(",")
    resolved = order_targets(names)
    placed = [t if isinstance(t, str) else t.name for t in resolved.targets]
    accelerators = [n for n in names if is_accelerator(n)]
    general = [n for n in names if not is_accelerator(n)]
    assert placed[:-1] == accelerators  # their relative order is the user's priority
    assert placed[-1] == (general[-1] if general else HOST_TARGET)
    assert resolved.added_fallback == (not general)
    # what changes where code runs is a warning: a fallback added, a target unused
    assert bool(resolved.warnings) == (not general or len(general) > 1)


def test_a_target_listed_twice_is_refused_with_the_valid_orders():
    with pytest.raises(TargetError, match="listed twice.*valid orders"):
        order_targets(["vta", "llvm", "vta"])


def _check_order(order: str, tmp_path, capsys, partition: bool = True) -> None:
    model = _int8_dense()
    expected = (X.astype(np.int32) @ onnx.numpy_helper.to_array(model.graph.initializer[0])
                .astype(np.int32) + onnx.numpy_helper.to_array(model.graph.initializer[1]))
    compiled = heterocc.compile(model, target=order)
    assert np.array_equal(compiled.run({"x": X})[0], expected)
    path = tmp_path / "dense.onnx"
    onnx.save(model, str(path))
    np.save(tmp_path / "x.npy", X)
    capsys.readouterr()
    assert main(["run", str(path), "--target", order, "--input", f"x={tmp_path / 'x.npy'}",
                 "--outputs", str(tmp_path / "y.npz")]) == 0
    assert np.array_equal(np.load(tmp_path / "y.npz")["y"], expected)
    if not partition:
        return
    capsys.readouterr()
    assert main(["partition", str(path), "--target", order, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {n["target"] for n in report["nodes"]} <= {*order.split(","), HOST_TARGET}


#: the shapes of order that once crashed or confused: an accelerator alone or last, two
#: general-purpose targets, the SDK target in every position
REPRESENTATIVE = ["vta", "llvm,vta", "cuda,llvm", "vta,cuda",
                  *([f"{SDK}", f"llvm,{SDK}", f"{SDK},vta", f"vta,{SDK},llvm"] if SDK else [])]


@pytest.mark.parametrize("order", REPRESENTATIVE)
def test_orders_that_crashed_compile_run_and_partition(order, tmp_path, capsys):
    _check_order(order, tmp_path, capsys)


@pytest.mark.slow
@pytest.mark.parametrize("order", [o for o in ORDERS if o not in REPRESENTATIVE])
def test_every_order_compiles_and_runs(order, tmp_path, capsys):
    _check_order(order, tmp_path, capsys, partition=False)


def test_an_accelerator_alone_runs_what_it_can_and_says_what_it_cannot(caplog):
    if SDK is None:
        pytest.skip("the example SDK target (examples/dotprod_accel) is not installed")
    model = helper.make_model(_int8_dense().graph)  # + a CPU-only op after the dense layer
    model.graph.node.append(helper.make_node("Neg", ["y"], ["z"]))
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("z", TensorProto.INT32,
                                                                 [4, 10]))
    # greedy: the subject is what the accelerator can run, not whether it is faster than
    # this machine's CPU at it (placement by cost may keep the small dense layer here)
    with caplog.at_level(logging.WARNING, logger="heterocc"):
        compiled = heterocc.compile(model, target=SDK, placement="greedy")
    report = compiled.placement_report
    assert report.by_target()[SDK] >= 1 and report.by_target()[HOST_TARGET] >= 1
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "added as the fallback" in said and "Neg" in said
    assert any("added as the fallback" in w for w in report.warnings)
    assert "warning:" in report.format()
    with pytest.raises(FallbackError, match="strict"):
        heterocc.compile(model, target=SDK, strict=True, placement="greedy")


def test_a_float_model_on_an_int8_accelerator_says_to_quantize(caplog):
    with caplog.at_level(logging.WARNING, logger="heterocc"):
        compiled = heterocc.compile(tiny_cnn(), target="vta,llvm")
    assert any("quantize" in w.lower() and "vta took no node" in w for w in compiled.warnings)
    assert any("quantize_static" in r.getMessage() for r in caplog.records)


def test_two_general_purpose_targets_warn_which_one_is_used(caplog):
    with caplog.at_level(logging.WARNING, logger="heterocc"):
        compiled = heterocc.compile(_int8_dense(), target="cuda,llvm")
    assert [t if isinstance(t, str) else t.name for t in compiled.targets] == ["llvm"]
    assert any("cuda gets nothing" in w for w in compiled.warnings)
    with pytest.raises(FallbackError):
        heterocc.compile(_int8_dense(), target="cuda,llvm", strict=True)


def test_cuda_without_a_gpu_says_it_emulates(caplog):
    from heterocc.targets.cuda import gpu_available

    if gpu_available():
        pytest.skip("a GPU is present: nothing is emulated")
    with caplog.at_level(logging.WARNING, logger="heterocc"):
        compiled = heterocc.compile(_int8_dense(), target="cuda")
    assert any("CPU emulation" in w for w in compiled.warnings)
    quiet = heterocc.compile(_int8_dense(), target="cuda -run_on=emulator")
    assert not any("emulation" in w for w in quiet.warnings)  # asked for: not a fallback


def test_a_function_run_on_numpy_is_a_warning():
    graph = helper.make_graph([helper.make_node("StringNormalizer", ["x"], ["y"],
                                                case_change_action="UPPER")], "strings",
                              [helper.make_tensor_value_info("x", TensorProto.STRING, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.STRING, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    compiled = heterocc.compile(model, target="llvm")
    assert any("NumPy reference" in w and "StringNormalizer" in w for w in compiled.warnings)
    assert compiled.run({"x": np.array(["a", "b"], dtype=object)})[0].tolist() == ["A", "B"]
    with pytest.raises(FallbackError, match="NumPy"):
        heterocc.compile(model, target="llvm", strict=True)


def test_an_accelerator_from_a_factory_without_annotations_is_ordered_first():
    from heterocc.sdk import registry

    if SDK is None:
        pytest.skip("the example SDK target (examples/dotprod_accel) is not installed")
    sdk_class = type(registry.get_target(SDK))

    def make():  # no return annotation: the registry must ask an instance
        return sdk_class()

    registry.register_target("unannotated_accel", make, replace=True)
    try:
        resolved = order_targets(["llvm", "unannotated_accel"])
        assert [t if isinstance(t, str) else t.name for t in resolved.targets] == \
            ["unannotated_accel", "llvm"]
    finally:
        registry._TARGETS.pop("unannotated_accel")
