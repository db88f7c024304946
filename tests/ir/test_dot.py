"""Graphviz rendering of a graph (heterocc.ir.dot)."""

from __future__ import annotations

from heterocc.ir.dot import to_dot


def test_dot_output_mentions_every_op(chain):
    g, *_ = chain
    dot = to_dot(g)
    assert dot.startswith("digraph") and '"Add"' in dot and '"Relu"' in dot


def test_inputs_and_outputs_are_ellipses_joined_by_typed_edges(chain):
    g, *_ = chain
    dot = to_dot(g)
    assert 'in0 [label="x: float32[2, 3]", shape=ellipse];' in dot
    assert 'out0 [label="z", shape=ellipse];' in dot
    assert 'in0 -> n0 [label="float32[2, 3]", fontsize=8];' in dot
    assert "n0 -> n1" in dot and "n1 -> out0" in dot
    assert dot.rstrip().endswith("}")


def test_a_function_is_a_cluster_labeled_with_its_target(with_function):
    dot = to_dot(with_function)
    assert "subgraph cluster_0 {" in dot and 'label="fused [llvm]"' in dot
    # edges run from the graph input into the body and from the body to the output
    assert "in0 -> n0_0" in dot and "n0_0 -> n0_1" in dot and "n0_1 -> out0" in dot


def test_a_function_without_a_target_attribute_takes_the_placement_or_the_fallback(
        with_function):
    del with_function.nodes[0].attrs["target"]
    assert 'label="fused [reference]"' in to_dot(with_function)
    assert 'label="fused [cpu]"' in to_dot(with_function, default_target="cpu")
    assert 'label="fused [vta]"' in to_dot(with_function, placement={"fused": "vta"})


def test_quotes_in_names_are_escaped(chain):
    g, *_ = chain
    g.name = 'my "model"'
    assert to_dot(g).startswith('digraph "my \\"model\\"" {')
