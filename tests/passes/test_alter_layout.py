"""alter_layout: blockable Conv nodes become ConvNCHWc on NCHW[x]c data, the blocked
layout is carried through layout-agnostic ops, transforms appear only where a reader
needs another layout, and the rewritten graph computes what the original did."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import heterocc
from heterocc.frontend import from_onnx
from heterocc.ir.checker import check_graph
from heterocc.models import mobilenet_v2, resnet18, tiny_cnn
from heterocc.ops import get_op
from heterocc.ops.layout import (
    from_blocked,
    pack_conv_weight,
    to_blocked,
    unpack_conv_weight,
)
from heterocc.ops.nn import conv
from heterocc.passes import DEFAULT_PIPELINE, PassManager, alter_layout
from heterocc.runtime.interpreter import evaluate
from heterocc.targets.llvm import LLVMTarget
from tests.conftest import make_model

RNG = np.random.default_rng(5)

#: the default passes up to (not including) fusion
BEFORE_FUSION = [p for p in DEFAULT_PIPELINE if p != "fuse_ops"]


def _optimized(model):
    return PassManager(BEFORE_FUSION).run(from_onnx(model))


def _inputs(graph):
    return [RNG.standard_normal(v.type.shape, dtype=np.float32) for v in graph.inputs]


def _assert_same_results(before, after):
    check_graph(after)
    inputs = _inputs(before)
    for a, b in zip(evaluate(before, inputs), evaluate(after, inputs)):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4)


def _transforms(graph):
    return [n for n in graph.nodes if n.op == "LayoutTransform"]


def _assert_no_round_trips(graph):
    """No transform reads the output of another (they would cancel or chain)."""
    producers = graph.producers()
    for node in _transforms(graph):
        source = producers.get(node.inputs[0])
        assert source is None or source.op != "LayoutTransform", node.name


@pytest.mark.parametrize("build,size,transforms", [
    (tiny_cnn, 32, 2),       # in, and back before pooling
    (resnet18, 32, 2),       # in, and back before the GAP (the max pool stays blocked)
    (mobilenet_v2, 32, 2),   # in, and back before the GAP: the chain never leaves NCHW[x]c
])
def test_models_keep_the_blocked_layout_between_convolutions(build, size, transforms):
    before = _optimized(build(size=size))
    after = alter_layout(before)
    assert after.op_counts().get("Conv", 0) == 0
    assert after.op_counts()["ConvNCHWc"] == before.op_counts()["Conv"]
    assert len(_transforms(after)) == transforms
    _assert_no_round_trips(after)
    _assert_same_results(before, after)


def _conv_chain_model(channels=16, filters=32, size=10):
    """conv -> relu -> 1x1 conv -> add (residual from the relu) -> per-channel Mul -> Clip
    -> depthwise conv -> max pool: blocked throughout."""
    inits = {"w1": RNG.standard_normal((filters, channels, 3, 3)).astype(np.float32) * 0.2,
             "b1": RNG.standard_normal(filters).astype(np.float32),
             "w2": RNG.standard_normal((filters, filters, 1, 1)).astype(np.float32) * 0.2,
             "s": RNG.standard_normal((filters, 1, 1)).astype(np.float32),
             "wd": RNG.standard_normal((filters, 1, 3, 3)).astype(np.float32),
             "lo": np.float32(0.0), "hi": np.float32(6.0)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"]),
             helper.make_node("Add", ["c2", "r1"], ["a"]),
             helper.make_node("Mul", ["s", "a"], ["m"]),
             helper.make_node("Clip", ["m", "lo", "hi"], ["k"]),
             helper.make_node("Conv", ["k", "wd"], ["d"], group=filters, strides=[2, 2],
                              pads=[1] * 4),
             helper.make_node("MaxPool", ["d"], ["y"], kernel_shape=[2, 2])]
    return make_model(nodes, [("x", "float32", [1, channels, size, size])],
                      [("y", "float32", None)], inits)


def test_chain_carries_blocks_through_elementwise_ops():
    before = _optimized(_conv_chain_model())
    after = alter_layout(before)
    ops = [n.op for n in after.nodes]
    assert ops == ["LayoutTransform", "ConvNCHWc", "Relu", "ConvNCHWc", "Add", "Mul", "Clip",
                   "ConvNCHWc", "MaxPool", "LayoutTransform"]
    mul = next(n for n in after.nodes if n.op == "Mul")
    assert mul.inputs[0].data.shape == (1, 2, 1, 1, 16)  # the per-channel scale, blocked
    _assert_same_results(before, after)


def test_value_read_in_both_layouts_is_transformed_once():
    """A blocked value read by two NCHW readers and returned: one transform back."""
    inits = {"w": RNG.standard_normal((16, 8, 3, 3)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["p1"]),
             helper.make_node("ReduceMax", ["r"], ["p2"], keepdims=0)]
    model = make_model(nodes, [("x", "float32", [1, 8, 6, 6])],
                       [("p1", "float32", None), ("p2", "float32", None),
                        ("r", "float32", None)], inits)
    before = _optimized(model)
    after = alter_layout(before)
    assert [n.attrs["dst_layout"] for n in _transforms(after)] == ["NCHW8c", "NCHW"]
    _assert_same_results(before, after)


@pytest.mark.parametrize("pool", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools_of_blocked_values_stay_blocked(pool):
    """A global pool reduces each channel block as vectors: the pool of the whole image
    on the blocked tensor, only its 1x1 result transformed back."""
    inits = {"w": RNG.standard_normal((32, 8, 3, 3)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node(pool, ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["y"])]
    model = make_model(nodes, [("x", "float32", [1, 8, 7, 5])], [("y", "float32", None)],
                       inits)
    before = _optimized(model)
    after = alter_layout(before)
    pooled = next(n for n in after.nodes if n.op == pool.replace("Global", ""))
    assert pooled.attrs["kernel_shape"] == [7, 5, 1]
    assert pooled.outputs[0].type.shape == (1, 2, 1, 1, 16)
    assert [n.attrs["dst_layout"] for n in _transforms(after)] == ["NCHW8c", "NCHW"]
    assert _transforms(after)[-1].inputs == pooled.outputs
    _assert_same_results(before, after)


def test_input_block_follows_the_producer_when_it_divides():
    """A 24-filter conv writes NCHW8c; the next conv reads it in 8-channel blocks."""
    inits = {"w1": RNG.standard_normal((24, 4, 1, 1)).astype(np.float32),
             "w2": RNG.standard_normal((32, 24, 3, 3)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"]),
             helper.make_node("Conv", ["c1", "w2"], ["y"], pads=[1] * 4)]
    model = make_model(nodes, [("x", "float32", [1, 4, 5, 5])], [("y", "float32", None)],
                       inits)
    before = _optimized(model)
    after = alter_layout(before)
    convs = [n for n in after.nodes if n.op == "ConvNCHWc"]
    assert [c.inputs[0].type.shape[-1] for c in convs] == [4, 8]
    assert [c.outputs[0].type.shape[-1] for c in convs] == [8, 16]
    assert len(_transforms(after)) == 2
    _assert_same_results(before, after)


@pytest.mark.parametrize("filters,group,dtype,const_weight", [
    (12, 1, "float32", True),    # 12 filters: no block of 8 or 16 divides them
    (16, 2, "float32", True),    # grouped, not depthwise
    (16, 1, "float16", True),    # not float32
    (16, 1, "float32", False),   # weights computed at run time
])
def test_convs_that_cannot_be_blocked_stay_nchw(filters, group, dtype, const_weight):
    w = RNG.standard_normal((filters, 8 // group, 3, 3)).astype(dtype)
    inputs = [("x", dtype, [1, 8, 6, 6])]
    inits = {"w": w}
    if not const_weight:
        inputs.append(("w", dtype, list(w.shape)))
        inits = {}
    model = make_model([helper.make_node("Conv", ["x", "w"], ["c"], group=group),
                        helper.make_node("Relu", ["c"], ["y"])], inputs,
                       [("y", dtype, None)], inits)
    before = _optimized(model)
    after = alter_layout(before)
    assert [n.op for n in after.nodes] == ["Conv", "Relu"]


def test_pipeline_blocks_only_for_the_llvm_target():
    model = tiny_cnn(size=16)
    assert heterocc.compile(model, target="llvm").graph.op_counts().get("ConvNCHWc")
    assert "ConvNCHWc" not in heterocc.compile(model, target="reference").graph.op_counts()
    nchw = heterocc.compile(model, target=[LLVMTarget(blocked_layout=False)])
    assert "ConvNCHWc" not in nchw.graph.op_counts()


# --------------------------------------------------------------------------- the ops

@pytest.mark.parametrize("block", [1, 3, 8, 16])
def test_layout_transform_round_trips(block):
    x = RNG.standard_normal((2, 48, 3, 5)).astype(np.float32)
    transform = get_op("LayoutTransform")
    blocked = transform.run([x], {"src_layout": "NCHW", "dst_layout": f"NCHW{block}c"})[0]
    assert blocked.shape == (2, 48 // block, 3, 5, block)
    np.testing.assert_array_equal(blocked[:, 1, :, :, 0], x[:, block])
    rebl = transform.run([blocked], {"src_layout": f"NCHW{block}c", "dst_layout": "NCHW4c"})[0]
    np.testing.assert_array_equal(rebl, to_blocked(x, 4))
    np.testing.assert_array_equal(from_blocked(rebl), x)


def test_weight_packing_round_trips():
    w = RNG.standard_normal((32, 12, 3, 2)).astype(np.float32)
    packed = pack_conv_weight(w, 4, 16)
    assert packed.shape == (2, 3, 3, 2, 4, 16)
    assert packed[1, 2, 0, 1, 3, 5] == w[16 + 5, 2 * 4 + 3, 0, 1]
    np.testing.assert_array_equal(unpack_conv_weight(packed), w)


@pytest.mark.parametrize("channels,filters,in_block,out_block,group,strides,pads,dilations", [
    (8, 16, 8, 16, 1, [1, 1], [1, 1, 1, 1], [1, 1]),
    (6, 16, 3, 16, 1, [2, 2], [0, 1, 2, 0], [1, 1]),
    (16, 8, 4, 8, 1, [1, 2], [2, 2, 2, 2], [2, 1]),
    (16, 16, 16, 16, 16, [2, 2], [1, 1, 1, 1], [1, 1]),  # depthwise
])
def test_blocked_conv_reference_matches_conv(channels, filters, in_block, out_block, group,
                                             strides, pads, dilations):
    x = RNG.standard_normal((2, channels, 9, 8)).astype(np.float32)
    w = RNG.standard_normal((filters, channels // group, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(filters).astype(np.float32)
    attrs = {"strides": strides, "pads": pads, "dilations": dilations, "group": group}
    expected = conv(x, w, b, **attrs)
    weight_block = 1 if group > 1 else in_block
    got = get_op("ConvNCHWc").run(
        [to_blocked(x, in_block), pack_conv_weight(w, weight_block, out_block),
         b.reshape(-1, out_block)], attrs)[0]
    np.testing.assert_allclose(from_blocked(got), expected, rtol=1e-5, atol=1e-5)
