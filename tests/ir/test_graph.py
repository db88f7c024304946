"""The Graph IR's data structure (heterocc.ir.graph): queries, rebuilding, names.
Printing, rendering, checking and serializing graphs are tested in the files named
after their modules."""

from __future__ import annotations

import numpy as np

from heterocc.ir import FUNCTION_OP, Graph, NameScope, Node, TensorType, Value, constant


def test_producers_consumers_and_constants(chain):
    g, x, y, z = chain
    add, relu = g.nodes
    assert g.producers() == {y: add, z: relu}
    c = add.inputs[1]
    assert g.consumers() == {x: [add], c: [add], y: [relu]}
    assert g.constants() == [c] and c.is_const and not x.is_const


def test_a_node_reading_a_value_twice_is_one_consumer():
    x = Value("x", TensorType((2,), "float32"))
    y = Value("y", x.type)
    mul = Node("Mul", [x, x], [y], {}, "square")
    assert Graph([x], [y], [mul]).consumers() == {x: [mul]}


def test_walk_and_counts_look_inside_functions(with_function):
    walked = [(graph.name, node.name) for graph, node in with_function.walk()]
    assert walked == [("main", "fused"), ("fused_body", "add"), ("fused_body", "relu")]
    assert with_function.op_counts() == {"Add": 1, "Relu": 1}
    assert with_function.op_counts(recursive=False) == {}
    assert with_function.num_nodes() == 2
    call = with_function.nodes[0]
    assert call.op == FUNCTION_OP and call.is_function


def test_rebuild_keeps_inputs_and_name_and_shares_no_lists(chain):
    g, x, y, z = chain
    g.name = "model"
    rebuilt = g.rebuild(g.nodes[:1], [y])
    assert rebuilt.name == "model" and rebuilt.inputs == [x] and rebuilt.outputs == [y]
    assert rebuilt.inputs is not g.inputs and len(g.nodes) == 2


def test_values_and_nodes_hash_by_identity():
    t = TensorType((1,), "float32")
    a, b = Value("v", t), Value("v", t)
    assert a != b and len({a, b}) == 2 and a.uid != b.uid
    assert repr(a) == "%v: float32[1]"
    assert repr(constant(np.zeros(1, np.float32), "w")) == "%w: const float32[1]"


def test_name_scope_hands_out_fresh_names(chain):
    g, *_ = chain
    scope = NameScope.of(g)
    assert scope.fresh("relu") == "relu_1" and scope.fresh("relu") == "relu_2"
    assert scope.fresh("new") == "new"
    assert scope.fresh("c") == "c_1"  # constants' names are taken too
