"""Channel shuffles and splits on the accelerator: ``channel_gathers`` makes a quantized
ShuffleNet unit's Concat -> Reshape -> Transpose -> Reshape -> Slice integer and one
``ChannelGather`` per tensor leaving it, and the composite ``channel_gather`` runs each
as a 1x1 convolution with 0/1 weights on the GEMM core (``gather``); models built with
onnx.helper and quantized by ``quantize_static``."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import heterocc
from heterocc.accel_sim import HardwareConfig
from heterocc.ir.graph import Graph, Node, Value, constant
from heterocc.ir.types import TensorType
from heterocc.ops import get_op
from heterocc.passes import channel_gathers
from heterocc.runtime.interpreter import evaluate
from heterocc.targets.vta import VtaTarget
from heterocc.targets.vta.gather import padded_sources

pytest.importorskip("onnxruntime.quantization")

from tests.targets.vta.ort_models import (  # noqa: E402
    onnxruntime_session,
    output_scale,
    quantize,
)

MOVEMENT = ("Concat", "Reshape", "Transpose", "Slice", "Split")


def shuffle_units(half: int, batch: int = 1, size: int = 6, split: bool = False
                  ) -> onnx.ModelProto:
    """conv+relu to ``2 * half`` channels, then two ShuffleNet units (split in halves,
    a 1x1 conv+relu branch on the second, concatenation, channel shuffle of 2 groups),
    then a 1x1 conv. The halves are split by two Slices, or by one Split (``split``)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    channels = 2 * half
    inits = [numpy_helper.from_array((rng.standard_normal((o, i, k, k)) * 0.4)
                                     .astype(np.float32), name)
             for name, o, i, k in (("w0", channels, 3, 3), ("wa", half, half, 1),
                                   ("wb", half, half, 1), ("w1", 16, channels, 1))]
    inits += [numpy_helper.from_array(np.array(v, np.int64), name) for name, v in (
        ("lo", [0]), ("mid", [half]), ("hi", [channels]), ("axis", [1]),
        ("split5", [batch, 2, half, size, size]), ("flat", [batch, channels, size, size]),
        *([("halves", [half, half])] if split else []))]
    nodes = [helper.make_node("Conv", ["input", "w0"], ["c0"], pads=[1] * 4),
             helper.make_node("Relu", ["c0"], ["x0"])]
    for unit, w in enumerate(("wa", "wb")):
        x, p = f"x{unit}", f"u{unit}_"
        if split:
            nodes.append(helper.make_node("Split", [x, "halves"], [p + "a", p + "b"], axis=1))
        else:
            nodes += [helper.make_node("Slice", [x, "lo", "mid", "axis"], [p + "a"]),
                      helper.make_node("Slice", [x, "mid", "hi", "axis"], [p + "b"])]
        nodes += [helper.make_node("Conv", [p + "b", w], [p + "bc"]),
                  helper.make_node("Relu", [p + "bc"], [p + "br"]),
                  helper.make_node("Concat", [p + "a", p + "br"], [p + "cat"], axis=1),
                  helper.make_node("Reshape", [p + "cat", "split5"], [p + "r5"]),
                  helper.make_node("Transpose", [p + "r5"], [p + "t"], perm=[0, 2, 1, 3, 4]),
                  helper.make_node("Reshape", [p + "t", "flat"], [f"x{unit + 1}"])]
    nodes.append(helper.make_node("Conv", ["x2", "w1"], ["y"]))
    graph = helper.make_graph(
        nodes, "shuffle_units",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 16, size, size])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _check_against_references(compiled, model, shape, seeds=2):
    session = onnxruntime_session(model, optimized=False)
    scale = output_scale(model)
    for seed in range(seeds):
        x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        ours = compiled.run([x])[0]
        np.testing.assert_array_equal(ours, evaluate(compiled.graph, [x])[0])
        assert np.abs(ours - session.run(None, {"input": x})[0]).max() <= 2 * scale + 1e-6


@pytest.mark.parametrize("preset, half, split", [("1x16x16", 10, False),
                                                 ("1x16x16", 24, True),
                                                 ("1x8x8", 10, False)])
def test_shuffle_units_run_on_the_accelerator_in_one_region(tmp_path, preset, half, split):
    """Halves of 10 channels do not fill whole tiles (as ShuffleNet's 58): the gathers
    read them where their producers left them."""
    model = quantize(shuffle_units(half, split=split), tmp_path, "QDQ", "QInt8")
    compiled = heterocc.compile(model, target=[VtaTarget(config=preset), "llvm"],
                                placement="greedy")
    report = compiled.placement_report
    assert report.mac_share("vta") == 1.0
    assert report.accelerator_regions() == 1 and report.round_trips == 0, report.format()
    gathers = [p for p in report.placements if p.op == "ChannelGather"]
    # each unit's two halves, and the shuffled tensor the last conv reads
    assert len(gathers) == 5 and all(p.target == "vta" for p in gathers), report.format()
    moved = [p for p in report.placements if p.op in MOVEMENT]
    assert moved and all(p.target == "vta" and "folded into the gather" in p.reason
                         for p in moved), report.format()
    # each once, though a unit's two gathers share its shuffle
    assert len({p.node for p in moved}) == len(moved), report.format()
    _check_against_references(compiled, model, (1, 3, 6, 6))


def test_gathers_of_two_batches_stay_on_the_cpu_and_agree(tmp_path):
    """Two images in one batch: their channel blocks do not follow each other in the
    blocked layout, so the gathers run on the CPU (their TE compute), still exact."""
    model = quantize(shuffle_units(10, batch=2), tmp_path, "QDQ", "QInt8")
    compiled = heterocc.compile(model, target="vta,llvm", placement="greedy")
    gathers = [p for p in compiled.placement_report.placements if p.op == "ChannelGather"]
    assert gathers and all(p.target == "llvm" and "batch 2" in p.reason for p in gathers)
    _check_against_references(compiled, model, (2, 3, 6, 6))


def test_channel_gather_reference_and_padded_sources():
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (1, 5, 2, 2)).astype(np.int8)
    b = rng.integers(-128, 128, (1, 3, 2, 2)).astype(np.int8)
    channels = [7, 0, 5, 4, 2]
    (got,) = get_op("ChannelGather").run([a, b], {"channels": channels, "absorbed": []})
    np.testing.assert_array_equal(got, np.concatenate([a, b], axis=1)[:, channels])
    node = Node("ChannelGather", [Value("a", TensorType(a.shape, "int8")),
                                  Value("b", TensorType(b.shape, "int8"))],
                [Value("y", TensorType((1, 5, 2, 2), "int8"))], {"channels": channels})
    # b starts at the second 4-channel tile
    assert padded_sources(node, HardwareConfig.preset("1x8x8").block_in // 2).tolist() == \
        [10, 0, 8, 4, 2]


def _moved(op: str, attrs: dict, *operands) -> tuple[Graph, Value]:
    """An int8 (1, 6, 2, 3) input through ``op`` (its other operands constants)."""
    x = Value("x", TensorType((1, 6, 2, 3), "int8"))
    inputs = [x, *(constant(np.array(v, np.int64), f"c{i}") for i, v in enumerate(operands))]
    attrs = get_op(op).normalize_attrs(attrs, "move")
    (shape,) = [r.shape for r in get_op(op).run(
        [np.zeros(x.type.shape, np.int8), *(v.data for v in inputs[1:])], attrs)]
    out = Value("y", TensorType(shape, "int8"))
    return Graph([x], [out], [Node(op, inputs, [out], attrs, "move")]), x


def test_channel_gathers_takes_channel_moves_and_leaves_the_others():
    """A reversal of the channels (a Slice with step -1) is a gather, checked against the
    graph it replaces; a transpose of the spatial axes is not and stays."""
    rng = np.random.default_rng(5)
    x_data = rng.integers(-128, 128, (1, 6, 2, 3)).astype(np.int8)
    graph, _ = _moved("Slice", {}, [5], [-7], [1], [-1])
    rewritten = channel_gathers(graph)
    assert [n.op for n in rewritten.nodes] == ["ChannelGather"]
    assert rewritten.nodes[0].attrs["channels"] == [5, 4, 3, 2, 1, 0]
    np.testing.assert_array_equal(evaluate(rewritten, [x_data])[0],
                                  evaluate(graph, [x_data])[0])
    graph, _ = _moved("Transpose", {"perm": [0, 1, 3, 2]})
    assert [n.op for n in channel_gathers(graph).nodes] == ["Transpose"]
