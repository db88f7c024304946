import numpy as np
import pytest
from onnx import helper

from heterocc.errors import PartitionError
from heterocc.frontend import from_onnx
from heterocc.ir.checker import check_graph
from heterocc.passes import fuse_ops
from heterocc.passes.partition import partition
from heterocc.patterns import CompositePattern, is_constant, is_op, match, optional, wildcard
from heterocc.runtime.interpreter import evaluate
from tests.conftest import make_model

CONV = is_op("Conv")(wildcard(), is_constant(), optional(is_constant()))
TABLE = [CompositePattern("conv_relu", is_op("Relu")(CONV)),
         CompositePattern("conv", CONV,
                          check=lambda nodes: None if nodes[-1].attrs["group"] == 1
                          else "grouped convolution is not supported")]


def _model(rng, group2=1):
    w = lambda o, i: rng.standard_normal((o, i, 3, 3)).astype(np.float32)  # noqa: E731
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], group=group2,
                              name="conv2"),
             helper.make_node("Sigmoid", ["c2"], ["s"], name="sigmoid"),
             helper.make_node("Conv", ["s", "w3"], ["y"], pads=[1, 1, 1, 1], name="conv3")]
    inits = {"w1": w(4, 4), "w2": w(4, 4 // group2), "w3": w(4, 4)}
    return from_onnx(make_model(nodes, [("x", "float32", [1, 4, 5, 5])],
                                [("y", "float32", None)], inits))


def test_composites_regions_and_report(rng):
    g = _model(rng)
    out, report = partition(g, {"fake": TABLE}, fallback="reference")
    check_graph(out)
    targets = {p.node: p.target for p in report.placements}
    assert targets == {"conv1": "fake", "relu1": "fake", "conv2": "fake",
                       "sigmoid": "reference", "conv3": "fake"}
    regions = [n for n in out.nodes if n.body is not None]
    # conv1+relu1 and conv2 are adjacent: one region; conv3 is separated by the sigmoid
    assert [n.attrs["composites"] for n in regions] == [2, 1]
    assert [[c.attrs["composite"] for c in r.body.nodes] for r in regions] == \
        [["conv_relu", "conv"], ["conv"]]
    assert "no pattern of fake matches" in report.format()
    x = rng.standard_normal((1, 4, 5, 5)).astype(np.float32)
    np.testing.assert_allclose(evaluate(out, [x])[0], evaluate(g, [x])[0], rtol=1e-5)
    fused = fuse_ops(out)  # the CPU remainder fuses; regions stay whole
    assert [n.attrs.get("target", "cpu") for n in fused.nodes] == ["fake", "cpu", "fake"]


def test_a_refused_match_falls_back_with_the_reason(rng):
    g = _model(rng, group2=2)
    _, report = partition(g, {"fake": TABLE}, fallback="reference")
    conv2 = next(p for p in report.placements if p.node == "conv2")
    assert conv2.target == "reference"
    assert conv2.reason == "fake pattern conv matched, but grouped convolution is not supported"


def test_strict_mode_refuses_the_fallback(rng):
    g = _model(rng, group2=2)
    with pytest.raises(PartitionError, match="conv2.*grouped convolution"):
        partition(g, {"fake": TABLE}, fallback="reference", strict=True)


def test_regions_never_merge_across_an_outside_path(rng):
    # a -> conv_a -> (relu outside) -> conv_b, and conv_a -> conv_b directly (via Add):
    w = rng.standard_normal((2, 2, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"], name="conv_a"),
             helper.make_node("Sigmoid", ["a"], ["s"], name="outside"),
             helper.make_node("Add", ["a", "s"], ["b"], name="add"),
             helper.make_node("Conv", ["b", "w"], ["y"], name="conv_b")]
    g = from_onnx(make_model(nodes, [("x", "float32", [1, 2, 3, 3])],
                             [("y", "float32", None)], {"w": w}))
    table = [CompositePattern("conv", CONV), CompositePattern("add", is_op("Add")(
        wildcard(), wildcard()))]
    out, report = partition(g, {"fake": table}, fallback="reference")
    check_graph(out)
    x = rng.standard_normal((1, 2, 3, 3)).astype(np.float32)
    np.testing.assert_allclose(evaluate(out, [x])[0], evaluate(g, [x])[0], rtol=1e-5)
    region_of = {p.node: p.region for p in report.placements}
    assert region_of["conv_a"] != region_of["add"]  # the sigmoid path forbids the merge
    assert region_of["add"] == region_of["conv_b"]


def test_a_pattern_row_must_look_at_every_input_of_its_ops():
    """MatMulInteger(x, w) leaves both zero points unchecked: refused when the row is
    built, naming every input left out (all at once)."""
    from heterocc.errors import PatternError
    from heterocc.patterns import absent

    dense = is_op("MatMulInteger")(wildcard(), is_constant())
    with pytest.raises(PatternError, match=r"'dense' does not look at input\(s\) "
                                           r"MatMulInteger.a_zero_point, "
                                           r"MatMulInteger.b_zero_point"):
        CompositePattern("dense", is_op("Add")(dense, is_constant()))
    listed = is_op("MatMulInteger")(wildcard(), is_constant(), absent(), absent())
    row = CompositePattern("dense", listed)
    assert row.name == "dense"


def test_absent_matches_only_an_omitted_input(rng):
    from heterocc.patterns import absent

    w = rng.integers(-3, 3, (4, 5)).astype(np.int8)
    zero = np.array(0, np.int8)
    for inputs, expected in ((["x", "w"], True), (["x", "w", "zx"], False)):
        node = helper.make_node("MatMulInteger", inputs, ["y"], name="mm")
        g = from_onnx(make_model([node], [("x", "int8", [2, 4])], [("y", "int32", None)],
                                 {"w": w, "zx": zero}))
        pattern = is_op("MatMulInteger")(wildcard(), is_constant(), absent(), absent())
        producers = {v: n for n in g.nodes for v in n.outputs}
        assert (match(pattern, g.outputs[0], producers) is not None) == expected
