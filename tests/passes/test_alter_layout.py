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
    blocked_conv_geometry,
    from_blocked,
    pack_conv_weight,
    to_blocked,
    unpack_conv_weight,
)
from heterocc.ops.nn import conv
from heterocc.passes import DEFAULT_PIPELINE, PassManager, alter_layout, alter_layout_for
from heterocc.passes.alter_layout import padded_channels
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
    # the RGB stem reads the NCHW input in place (NCHW1c): no transform in
    (tiny_cnn, 32, 1),       # back before pooling
    (resnet18, 32, 1),       # back before the GAP (the max pool stays blocked)
    (mobilenet_v2, 32, 1),   # back before the GAP: the chain never leaves NCHW[x]c
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


def _image_reduction_model(op: str, keepdims: int, axes: list[int]):
    inits = {"w": RNG.standard_normal((32, 8, 3, 3)).astype(np.float32),
             "axes": np.array(axes, np.int64)}  # (an input since opset 18)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node(op, ["r", "axes"], ["y"], keepdims=keepdims)]
    return make_model(nodes, [("x", "float32", [1, 8, 7, 5])], [("y", "float32", None)],
                      inits)


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax"])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("axes", [[2, 3], [-1, -2]])
def test_reductions_over_the_image_are_blocked_global_pools(op, keepdims, axes):
    """x.mean([2, 3]) of a blocked tensor (MNASNet's and ShuffleNetV2's heads) is its
    global pool on the blocked tensor, only the 1x1 result transformed back (and, without
    keepdims, reshaped to [N, C])."""
    before = _optimized(_image_reduction_model(op, keepdims, axes))
    after = alter_layout(before)
    pool = {"ReduceMean": "AveragePool", "ReduceMax": "MaxPool"}[op]
    assert [n.op for n in after.nodes] == ["LayoutTransform", "ConvNCHWc", "Relu", pool,
                                           "LayoutTransform", *(["Reshape"] * (1 - keepdims))]
    pooled = next(n for n in after.nodes if n.op == pool)
    assert pooled.attrs["kernel_shape"] == [7, 5, 1]
    assert pooled.outputs[0].type.shape == (1, 2, 1, 1, 16)
    assert _transforms(after)[-1].inputs == pooled.outputs
    assert after.outputs[0].type.shape == ((1, 32, 1, 1) if keepdims else (1, 32))
    _assert_same_results(before, after)


def test_other_reductions_of_blocked_values_read_nchw():
    before = _optimized(_image_reduction_model("ReduceMean", 1, [1, 2, 3]))
    after = alter_layout(before)
    assert [n.op for n in after.nodes][-2:] == ["LayoutTransform", "ReduceMean"]
    _assert_same_results(before, after)


@pytest.mark.parametrize("target", ["llvm", "llvm -mattr=-avx512f"], ids=["host", "avx2"])
def test_image_reductions_compile_to_the_references_results(target):
    for keepdims in (0, 1):
        compiled = _llvm_matches_the_reference(
            _image_reduction_model("ReduceMean", keepdims, [2, 3]), target, (1, 8, 7, 5))
        assert not any("reducemean" in n.name for n in compiled.graph.nodes)


@pytest.mark.parametrize("pool", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool_of_a_padded_value_cuts_the_padding_after_pooling(pool):
    """24 filters padded to 32 channels: the pool keeps the padding (one block of
    vectors), the transform of its 1x1 result cuts it off."""
    inits = {"w": RNG.standard_normal((24, 16, 3, 3)).astype(np.float32),
             "b": RNG.standard_normal(24).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1] * 4),
             helper.make_node("Sigmoid", ["c"], ["s"]),
             helper.make_node(pool, ["s"], ["y"])]
    model = make_model(nodes, [("x", "float32", [1, 16, 6, 6])], [("y", "float32", None)],
                       inits)
    before = _optimized(model)
    after = alter_layout_for(16)(before)
    pooled = next(n for n in after.nodes if n.op == pool.replace("Global", ""))
    assert pooled.outputs[0].type.shape == (1, 2, 1, 1, 16)
    assert _transforms(after)[-1].attrs["channels"] == 24
    assert after.outputs[0].type.shape == (1, 24, 1, 1)
    _assert_same_results(before, after)


def test_input_block_follows_the_producer_when_it_divides():
    """A 24-filter conv writes NCHW8c; the next conv reads it in 8-channel blocks. (The
    first reads its 12-channel NCHW input in place: no block of 8 or more divides 12.)"""
    inits = {"w1": RNG.standard_normal((24, 12, 1, 1)).astype(np.float32),
             "w2": RNG.standard_normal((32, 24, 3, 3)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"]),
             helper.make_node("Conv", ["c1", "w2"], ["y"], pads=[1] * 4)]
    model = make_model(nodes, [("x", "float32", [1, 12, 5, 5])], [("y", "float32", None)],
                       inits)
    before = _optimized(model)
    after = alter_layout(before)
    convs = [n for n in after.nodes if n.op == "ConvNCHWc"]
    assert convs[0].inputs[0] is after.inputs[0]
    assert convs[1].inputs[0].type.shape[-1] == 8
    assert [c.outputs[0].type.shape[-1] for c in convs] == [8, 16]
    assert len(_transforms(after)) == 1
    _assert_same_results(before, after)


@pytest.mark.parametrize("channels", [1, 3, 4, 7])
def test_nchw_input_of_few_channels_is_read_in_place(channels):
    """A conv on an NCHW input of fewer channels than a vector block (an image) reads it
    as it is, NCHW being NCHW1c in memory: no transform in, weights packed with input
    blocks of one channel."""
    inits = {"w": RNG.standard_normal((32, channels, 3, 3)).astype(np.float32),
             "b": RNG.standard_normal(32).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[2, 2], pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["y"])]
    model = make_model(nodes, [("x", "float32", [1, channels, 9, 11])],
                       [("y", "float32", None)], inits)
    before = _optimized(model)
    after = alter_layout(before)
    (conv_node,) = [n for n in after.nodes if n.op == "ConvNCHWc"]
    assert conv_node.inputs[0] is after.inputs[0]
    assert conv_node.inputs[1].type.shape == (2, channels, 3, 3, 1, 16)
    assert [t.attrs["src_layout"] for t in _transforms(after)] == ["NCHW16c"]  # out only
    _assert_same_results(before, after)


def test_depthwise_conv_needs_a_blocked_input():
    attrs = {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1], "group": 16}
    with pytest.raises(ValueError, match="depthwise convolution needs a blocked input"):
        blocked_conv_geometry((1, 16, 8, 8), (1, 1, 3, 3, 1, 16), attrs)


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
    (3, 16, 0, 16, 1, [2, 2], [1, 1, 1, 1], [1, 1]),  # NCHW input (in_block 0), read as 1c
])
def test_blocked_conv_reference_matches_conv(channels, filters, in_block, out_block, group,
                                             strides, pads, dilations):
    x = RNG.standard_normal((2, channels, 9, 8)).astype(np.float32)
    w = RNG.standard_normal((filters, channels // group, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(filters).astype(np.float32)
    attrs = {"strides": strides, "pads": pads, "dilations": dilations, "group": group}
    expected = conv(x, w, b, **attrs)
    weight_block = 1 if group > 1 else in_block or 1
    got = get_op("ConvNCHWc").run(
        [to_blocked(x, in_block) if in_block else x,
         pack_conv_weight(w, weight_block, out_block),
         b.reshape(-1, out_block)], attrs)[0]
    np.testing.assert_allclose(from_blocked(got), expected, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------ outputs padded to whole vectors

def _padded(graph, vector_channels=16):
    return alter_layout_for(vector_channels)(graph)


def _padding_model(epilogue, tail=("conv",), filters=24):
    """conv (16 -> ``filters``, 3x3) -> ``epilogue`` op -> ``tail`` readers of it."""
    inits = {"w1": RNG.standard_normal((filters, 16, 3, 3)).astype(np.float32) * 0.2,
             "b1": RNG.standard_normal(filters).astype(np.float32),
             "w2": RNG.standard_normal((16, filters, 1, 1)).astype(np.float32),
             "wd": RNG.standard_normal((filters, 1, 3, 3)).astype(np.float32),
             "bd": RNG.standard_normal(filters).astype(np.float32),
             "s": RNG.standard_normal((filters, 1, 1)).astype(np.float32) + 3.0,
             "lo": np.float32(0.5), "hi": np.float32(6.0)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1] * 4)]
    nodes.append({"sigmoid": helper.make_node("Sigmoid", ["c"], ["e"]),
                  "clip": helper.make_node("Clip", ["c", "lo", "hi"], ["e"]),
                  "div": helper.make_node("Div", ["c", "s"], ["e"]),
                  "exp": helper.make_node("Exp", ["c"], ["e"])}[epilogue])
    outputs = []
    for k, reader in enumerate(tail):
        out = f"y{k}"
        if reader == "conv":
            nodes.append(helper.make_node("Conv", ["e", "w2"], [out]))
        elif reader == "depthwise":  # then a 1x1 conv reads its (padded) output
            nodes += [helper.make_node("Conv", ["e", "wd", "bd"], [f"d{k}"], group=filters,
                                       pads=[1] * 4, strides=[2, 2]),
                      helper.make_node("Conv", [f"d{k}", "w2"], [out])]
        elif reader == "pool":
            nodes.append(helper.make_node("GlobalAveragePool", ["e"], [out]))
        elif reader == "output":
            out = "e"
        outputs.append((out, "float32", None))
    return make_model(nodes, [("x", "float32", [1, 16, 7, 9])], outputs, inits)


@pytest.mark.parametrize("channels,vector,padded", [
    (24, 16, 32), (40, 16, 48), (32, 16, 32), (8, 16, 8), (24, 8, 24), (24, 0, 24),
    (20, 4, 20)])
def test_padded_channels_fill_whole_vectors(channels, vector, padded):
    assert padded_channels(channels, vector) == padded


@pytest.mark.parametrize("epilogue", ["sigmoid", "clip"])  # f(0) != 0 in the padding
@pytest.mark.parametrize("tail", [("conv",), ("depthwise",), ("pool", "output")])
def test_padded_outputs_compute_what_the_unpadded_ones_did(epilogue, tail):
    before = _optimized(_padding_model(epilogue, tail))
    after = _padded(before)
    first = next(n for n in after.nodes if n.op == "ConvNCHWc")
    assert first.outputs[0].type.shape == (1, 2, 7, 9, 16)  # 24 channels held as 32
    assert first.inputs[1].data.shape == (2, 1, 3, 3, 16, 16)
    assert not first.inputs[1].data[1, ..., 8:].any()  # zero filters for the padding
    if "depthwise" in tail:
        depthwise = [n for n in after.nodes if n.op == "ConvNCHWc"][1]
        assert depthwise.attrs["group"] == 32
        assert depthwise.outputs[0].type.shape[1:] == (2, 4, 5, 16)
    if "output" in tail:  # leaving the blocked layout cuts the padding off
        cuts = [n for n in _transforms(after) if n.attrs["dst_layout"] == "NCHW"]
        assert all(cut.attrs["channels"] == 24 for cut in cuts)
        assert sorted(cut.outputs[0].type.shape for cut in cuts) == [(1, 24, 1, 1),
                                                                     (1, 24, 7, 9)]
    _assert_no_round_trips(after)
    _assert_same_results(before, after)


def test_unpadded_layout_without_vector_channels():
    after = alter_layout(_optimized(_padding_model("clip")))
    first = next(n for n in after.nodes if n.op == "ConvNCHWc")
    assert first.outputs[0].type.shape == (1, 3, 7, 9, 8)


def _residual_model():
    """MobileNetV2's 24-channel stage: project to 24, an inverted residual block (expand
    to 48, depthwise, project back to 24) added to it, then expand again; the sum is
    also a graph output."""
    inits = {"w0": RNG.standard_normal((24, 16, 1, 1)).astype(np.float32) * 0.3,
             "w1": RNG.standard_normal((48, 24, 1, 1)).astype(np.float32) * 0.3,
             "wd": RNG.standard_normal((48, 1, 3, 3)).astype(np.float32) * 0.3,
             "w2": RNG.standard_normal((24, 48, 1, 1)).astype(np.float32) * 0.3,
             "b2": RNG.standard_normal(24).astype(np.float32),
             "w3": RNG.standard_normal((48, 24, 1, 1)).astype(np.float32) * 0.3,
             "lo": np.float32(0.0), "hi": np.float32(6.0)}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["p"]),
             helper.make_node("Conv", ["p", "w1"], ["e"]),
             helper.make_node("Clip", ["e", "lo", "hi"], ["ec"]),
             helper.make_node("Conv", ["ec", "wd"], ["d"], group=48, pads=[1] * 4),
             helper.make_node("Conv", ["d", "w2", "b2"], ["q"]),
             helper.make_node("Add", ["p", "q"], ["r"]),
             helper.make_node("Conv", ["r", "w3"], ["y"])]
    return make_model(nodes, [("x", "float32", [1, 16, 6, 8])],
                      [("y", "float32", None), ("r", "float32", None)], inits)


def test_residual_add_of_two_padded_tensors():
    before = _optimized(_residual_model())
    after = _padded(before)
    (add,) = [n for n in after.nodes if n.op == "Add"]
    assert [v.type.shape for v in add.inputs] == [(1, 2, 6, 8, 16)] * 2
    assert all(n.outputs[0].type.shape[-1] == 16 for n in after.nodes if n.op == "ConvNCHWc")
    _assert_same_results(before, after)


@pytest.mark.parametrize("target", ["llvm", "llvm -mattr=-avx512f"])
def test_llvm_pads_to_its_own_vectors_and_matches_the_reference(target):
    """The target pads to its vector width: 24 channels are 32 in 16-lane vectors, and
    stay 24 (three 8-lane vectors) on AVX2."""
    model = _residual_model()
    llvm = LLVMTarget(cpu=target)
    compiled = heterocc.compile(model, target=[llvm])
    lanes = llvm.cpu.vector_lanes("float32")
    blocks = {n.outputs[0].type.shape[-1] for n in compiled.graph.nodes
              if n.body is not None for n in n.body.nodes if n.op == "ConvNCHWc"}
    assert blocks == ({16} if lanes == 16 else {8, 16})
    feeds = {"x": RNG.standard_normal((1, 16, 6, 8), dtype=np.float32)}
    expected = heterocc.compile(model, target="reference").run(feeds)
    for ours, theirs in zip(compiled.run(feeds), expected):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)
    assert llvm.fallbacks == {}


def _shuffle_branch_model(channels=58, size=6):
    """ShuffleNetV2's branch: a 1x1 conv (+ReLU), a 3x3 depthwise conv, a 1x1 conv
    (+ReLU), on ``channels`` channels that no block divides."""
    inits = {"w1": RNG.standard_normal((channels, channels, 1, 1)).astype(np.float32) * 0.2,
             "b1": RNG.standard_normal(channels).astype(np.float32),
             "wd": RNG.standard_normal((channels, 1, 3, 3)).astype(np.float32),
             "bd": RNG.standard_normal(channels).astype(np.float32),
             "w2": RNG.standard_normal((channels, channels, 1, 1)).astype(np.float32) * 0.2,
             "b2": RNG.standard_normal(channels).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "wd", "bd"], ["d"], group=channels, pads=[1] * 4),
             helper.make_node("Conv", ["d", "w2", "b2"], ["c2"]),
             helper.make_node("Relu", ["c2"], ["y"])]
    return make_model(nodes, [("x", "float32", [1, channels, size, size])],
                      [("y", "float32", None)], inits)


@pytest.mark.parametrize("vector,held", [(16, 64), (8, 64)])
def test_channels_no_block_divides_are_padded_to_vectors(vector, held):
    """58 channels (ShuffleNetV2's): every convolution blocked, the outputs padded to
    whole vectors (64), the first reading its NCHW input in place (no transform in: no
    block of 8 or more divides 58), one transform out cutting the padding."""
    before = _optimized(_shuffle_branch_model())
    after = alter_layout_for(vector)(before)
    convs = [n for n in after.nodes if n.op == "ConvNCHWc"]
    assert len(convs) == 3 and not [n for n in after.nodes if n.op == "Conv"]
    assert convs[0].inputs[0] is after.inputs[0]
    assert all(c.outputs[0].type.shape[1] * c.outputs[0].type.shape[-1] == held
               for c in convs)
    assert convs[1].attrs["group"] == held  # the depthwise conv carries the padding on
    (transform,) = _transforms(after)
    assert transform.attrs["channels"] == 58
    _assert_same_results(before, after)


@pytest.mark.parametrize("target", ["llvm", "llvm -mattr=-avx512f"], ids=["host", "avx2"])
def test_padded_shuffle_branch_matches_the_reference(target):
    compiled = _llvm_matches_the_reference(_shuffle_branch_model(channels=116, size=7),
                                           target, (1, 116, 7, 7))
    assert "Conv" not in {n.op for f in compiled.graph.nodes if f.body is not None
                          for n in f.body.nodes}


def _llvm_matches_the_reference(model, target, shape):
    """``model`` compiled for ``target`` (no fallback), checked against the reference
    on a random input ``x`` of ``shape``; returns the compiled model."""
    llvm = LLVMTarget(cpu=target)
    compiled = heterocc.compile(model, target=[llvm])
    feeds = {"x": RNG.standard_normal(shape, dtype=np.float32)}
    (expected,) = heterocc.compile(model, target="reference").run(feeds)
    (ours,) = compiled.run(feeds)
    np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-4)
    assert llvm.fallbacks == {}
    return compiled


def test_padding_stays_finite():
    """A padding channel a reader multiplies by a zero weight must not be infinite (or
    NaN): a divisor's padding is 1, a division by a padded tensor and Exp read no
    padding."""
    before = _optimized(_padding_model("div"))
    after = _padded(before)
    div = next(n for n in after.nodes if n.op == "Div")
    assert np.all(div.inputs[1].data[0, 1, 0, 0, 8:] == 1.0)
    _assert_same_results(before, after)
    before = _optimized(_padding_model("exp"))
    after = _padded(before)
    assert next(n for n in after.nodes if n.op == "Exp").inputs[0].type.ndim == 4
    _assert_same_results(before, after)
    inits = {"w": RNG.standard_normal((24, 16, 1, 1)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"]),
             helper.make_node("Conv", ["x", "w"], ["b"], pads=[0] * 4, strides=[1, 1]),
             helper.make_node("Div", ["a", "b"], ["y"])]
    before = _optimized(make_model(nodes, [("x", "float32", [1, 16, 4, 4])],
                                   [("y", "float32", None)], inits))
    after = _padded(before)
    assert next(n for n in after.nodes if n.op == "Div").inputs[0].type.ndim == 4
    _assert_same_results(before, after)


def test_padded_and_unpadded_operands_meet_in_nchw():
    inits = {"w": RNG.standard_normal((24, 16, 1, 1)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"]),
             helper.make_node("Add", ["a", "r"], ["y"])]
    before = _optimized(make_model(nodes, [("x", "float32", [1, 16, 4, 4]),
                                           ("r", "float32", [1, 24, 4, 4])],
                                   [("y", "float32", None)], inits))
    after = _padded(before)
    assert next(n for n in after.nodes if n.op == "Add").inputs[0].type.shape == (1, 24, 4, 4)
    _assert_same_results(before, after)


def test_layout_transform_cuts_padding_channels():
    x = RNG.standard_normal((1, 2, 3, 4, 16)).astype(np.float32)
    out = get_op("LayoutTransform").run([x], {"src_layout": "NCHW16c", "dst_layout": "NCHW8c",
                                              "channels": 24})[0]
    np.testing.assert_array_equal(out, to_blocked(from_blocked(x)[:, :24], 8))


def _concat_of_convs(filters=(16, 32), vector_channels=0):
    inits = {f"w{i}": RNG.standard_normal((f, 8, 3, 3)).astype(np.float32) * 0.2
             for i, f in enumerate(filters)}
    nodes = [helper.make_node("Conv", ["x", f"w{i}"], [f"c{i}"], pads=[1] * 4)
             for i in range(len(filters))]
    nodes += [helper.make_node("Concat", [f"c{i}" for i in range(len(filters))], ["cat"],
                               axis=1),
              helper.make_node("Relu", ["cat"], ["r"]),
              helper.make_node("Conv", ["r", "wo"], ["y"])]
    inits["wo"] = RNG.standard_normal((16, sum(filters), 1, 1)).astype(np.float32)
    model = make_model(nodes, [("x", "float32", [1, 8, 6, 6])], [("y", "float32", None)],
                       inits)
    before = _optimized(model)
    return before, alter_layout(before, vector_channels=vector_channels)


@pytest.mark.parametrize("filters,block,transforms", [((16, 32), 16, 2), ((8, 16), 8, 3)])
def test_channel_concat_of_whole_blocks_stays_blocked(filters, block, transforms):
    """In the widest block its inputs have that divides every input's channels (the
    16-channel block of (8, 16) filters transformed to 8 channels): transforms only in,
    out, and between blocks."""
    before, after = _concat_of_convs(filters)
    concat = next(n for n in after.nodes if n.op == "Concat")
    assert concat.attrs["axis"] == 1 and concat.outputs[0].type.shape[-1] == block
    assert len(_transforms(after)) == transforms
    _assert_same_results(before, after)


@pytest.mark.parametrize("filters,vector_channels", [((16, 12), 0), ((24, 16), 16)])
def test_concat_of_partial_or_padded_blocks_reads_nchw(filters, vector_channels):
    """12 channels fill no 8- or 16-channel block; 24 filters padded to 32 for a 16-lane
    vector carry padding channels that a blocked concat would put between real ones."""
    before, after = _concat_of_convs(filters, vector_channels)
    concat = next(n for n in after.nodes if n.op == "Concat")
    assert len(concat.outputs[0].type.shape) == 4
    _assert_same_results(before, after)


def _squeeze_excite_model(channels=32, reduced=8):
    """EfficientNet's squeeze-excite: the image times the sigmoid of two 1x1
    convolutions of its global average, one value per channel broadcast over pixels."""
    inits = {"w": RNG.standard_normal((channels, 16, 3, 3)).astype(np.float32),
             "w1": RNG.standard_normal((reduced, channels, 1, 1)).astype(np.float32),
             "w2": RNG.standard_normal((channels, reduced, 1, 1)).astype(np.float32),
             "w3": RNG.standard_normal((16, channels, 1, 1)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1] * 4),
             helper.make_node("GlobalAveragePool", ["c"], ["g"]),
             helper.make_node("Conv", ["g", "w1"], ["r"]),
             helper.make_node("Relu", ["r"], ["rr"]),
             helper.make_node("Conv", ["rr", "w2"], ["e"]),
             helper.make_node("Sigmoid", ["e"], ["s"]),
             helper.make_node("Mul", ["c", "s"], ["m"]),
             helper.make_node("Conv", ["m", "w3"], ["y"])]
    return make_model(nodes, [("x", "float32", [1, 16, 6, 5])], [("y", "float32", None)],
                      inits)


def test_squeeze_excite_scale_stays_blocked():
    """The per-channel scale multiplies the blocked image as it is: no transform between
    the first convolution and the last, the scale broadcast over the pixels."""
    before = _optimized(_squeeze_excite_model())
    after = alter_layout(before)
    mul = next(n for n in after.nodes if n.op == "Mul")
    assert [v.type.shape for v in mul.inputs] == [(1, 2, 6, 5, 16), (1, 2, 1, 1, 16)]
    assert [n.attrs["dst_layout"] for n in _transforms(after)] == ["NCHW16c", "NCHW"]
    _assert_same_results(before, after)


@pytest.mark.parametrize("target", ["llvm", "llvm -mattr=-avx512f"], ids=["host", "avx2"])
def test_squeeze_excite_matches_the_reference(target):
    model = _squeeze_excite_model()
    feeds = {"x": RNG.standard_normal((1, 16, 6, 5), dtype=np.float32)}
    got = heterocc.compile(model, target=target).run(feeds)[0]
    expected = heterocc.compile(model, target="reference").run(feeds)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def _channels_last_norm_model(channels=32, size=5):
    """ConvNeXt's block start: a depthwise 7x7 convolution, a transpose to channels last,
    a LayerNorm over the channels."""
    inits = {"w": RNG.standard_normal((channels, 1, 7, 7)).astype(np.float32) * 0.1,
             "b": RNG.standard_normal(channels).astype(np.float32),
             "g": RNG.standard_normal(channels).astype(np.float32),
             "beta": RNG.standard_normal(channels).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=channels, pads=[3] * 4),
             helper.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("LayerNormalization", ["t", "g", "beta"], ["y"], axis=-1,
                              epsilon=1e-6)]
    return make_model(nodes, [("x", "float32", [1, channels, size, size])],
                      [("y", "float32", None)], inits)


def test_transpose_to_channels_last_reads_the_blocks_in_place():
    """NCHW16c -> NHWC is the blocked tensor with its channel blocks moved after the
    pixels (the block kept innermost) and reshaped: no transform back to NCHW."""
    before = _optimized(_channels_last_norm_model())
    after = alter_layout(before)
    assert [n.op for n in after.nodes] == ["LayoutTransform", "ConvNCHWc", "Transpose",
                                           "Reshape", "LayerNormalization"]
    transpose = next(n for n in after.nodes if n.op == "Transpose")
    assert transpose.attrs["perm"] == [0, 2, 3, 1, 4]
    assert transpose.inputs[0].type.shape == (1, 2, 5, 5, 16)
    assert transpose.outputs[0].type.shape == (1, 5, 5, 2, 16)
    _assert_same_results(before, after)


@pytest.mark.parametrize("perm", [[0, 3, 2, 1], [0, 2, 1, 3]])
def test_other_transposes_of_blocked_values_read_nchw(perm):
    """Only the move of the channels last keeps the blocks; any other permutation reads
    the tensor in NCHW."""
    inits = {"w": RNG.standard_normal((16, 1, 3, 3)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], group=16, pads=[1] * 4),
             helper.make_node("Transpose", ["c"], ["y"], perm=perm)]
    before = _optimized(make_model(nodes, [("x", "float32", [1, 16, 4, 6])],
                                   [("y", "float32", None)], inits))
    after = alter_layout(before)
    assert [n.op for n in after.nodes] == ["LayoutTransform", "ConvNCHWc", "LayoutTransform",
                                           "Transpose"]
    _assert_same_results(before, after)


def test_transpose_of_a_padded_value_cuts_the_padding_in_nchw():
    """24 channels padded to 32 take the NCHW route, which cuts the padding off."""
    inits = {"w": RNG.standard_normal((24, 16, 1, 1)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("Transpose", ["c"], ["y"], perm=[0, 2, 3, 1])]
    before = _optimized(make_model(nodes, [("x", "float32", [1, 16, 4, 4])],
                                   [("y", "float32", None)], inits))
    after = alter_layout_for(16)(before)
    assert [n.op for n in after.nodes][-2:] == ["LayoutTransform", "Transpose"]
    assert _transforms(after)[-1].attrs["channels"] == 24
    _assert_same_results(before, after)


@pytest.mark.parametrize("target", ["llvm", "llvm -mattr=-avx512f"], ids=["host", "avx2"])
def test_channels_last_layer_norm_matches_the_reference(target):
    compiled = _llvm_matches_the_reference(_channels_last_norm_model(channels=48, size=9),
                                           target, (1, 48, 9, 9))
    body = [n.op for f in compiled.graph.nodes if f.body is not None for n in f.body.nodes]
    assert "Transpose" in body and body.count("LayoutTransform") == 1  # only the input's
