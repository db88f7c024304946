import numpy as np
import pytest

from heterocc.errors import GraphError
from heterocc.ir import Graph, Node, TensorType, Value, constant
from heterocc.ir.checker import check_graph
from heterocc.ir.dot import to_dot
from heterocc.ir.printer import format_graph


def _chain():
    x = Value("x", TensorType((2, 3), "float32"))
    c = constant(np.ones((2, 3), np.float32), "c")
    y = Value("y", TensorType((2, 3), "float32"))
    z = Value("z", TensorType((2, 3), "float32"))
    nodes = [Node("Add", [x, c], [y], {}, "add"), Node("Relu", [y], [z], {}, "relu")]
    return Graph([x], [z], nodes), x, y, z


def test_printer_shows_every_node_and_type():
    g, *_ = _chain()
    text = format_graph(g)
    assert "%y: float32[2, 3] = Add(%x, %c)" in text
    assert "%z: float32[2, 3] = Relu(%y)" in text
    assert text.strip().endswith("return %z")


def test_checker_accepts_a_well_formed_graph():
    g, *_ = _chain()
    check_graph(g)


def test_checker_names_an_undefined_input():
    g, x, y, z = _chain()
    ghost = Value("ghost", x.type)
    bad = g.rebuild([Node("Add", [x, ghost], [y], {}, "add"), g.nodes[1]])
    with pytest.raises(GraphError, match="ghost.*not defined"):
        check_graph(bad)


def test_checker_detects_a_cycle():
    g, x, y, z = _chain()
    # add reads z, which relu produces from add's output: a cycle
    bad = g.rebuild([Node("Add", [x, z], [y], {}, "add"), g.nodes[1]])
    with pytest.raises(GraphError, match="cycle"):
        check_graph(bad)


def test_checker_detects_inconsistent_types():
    g, x, y, z = _chain()
    wrong = Value("z", TensorType((3, 2), "float32"))
    bad = g.rebuild([g.nodes[0], Node("Relu", [y], [wrong], {}, "relu")], [wrong])
    with pytest.raises(GraphError, match="type inference gives float32\\[2, 3\\]"):
        check_graph(bad)


def test_checker_names_an_unknown_op():
    g, x, y, z = _chain()
    bad = g.rebuild([Node("NoSuchOp", [x], [y], {}, "mystery"), g.nodes[1]])
    with pytest.raises(GraphError, match="unknown op 'NoSuchOp'"):
        check_graph(bad)


def test_dot_output_mentions_every_op():
    g, *_ = _chain()
    dot = to_dot(g)
    assert dot.startswith("digraph") and '"Add"' in dot and '"Relu"' in dot
