"""Well-formedness checks of a graph (heterocc.ir.checker)."""

from __future__ import annotations

import pytest

from heterocc.errors import GraphError
from heterocc.ir import Graph, Node, TensorType, Value
from heterocc.ir.checker import check_graph


def test_checker_accepts_a_well_formed_graph(chain):
    g, *_ = chain
    check_graph(g)


def test_checker_names_an_undefined_input(chain):
    g, x, y, z = chain
    ghost = Value("ghost", x.type)
    bad = g.rebuild([Node("Add", [x, ghost], [y], {}, "add"), g.nodes[1]])
    with pytest.raises(GraphError, match="ghost.*not defined"):
        check_graph(bad)


def test_checker_detects_a_cycle(chain):
    g, x, y, z = chain
    # add reads z, which relu produces from add's output: a cycle
    bad = g.rebuild([Node("Add", [x, z], [y], {}, "add"), g.nodes[1]])
    with pytest.raises(GraphError, match="cycle"):
        check_graph(bad)


def test_checker_detects_inconsistent_types(chain):
    g, x, y, z = chain
    wrong = Value("z", TensorType((3, 2), "float32"))
    bad = g.rebuild([g.nodes[0], Node("Relu", [y], [wrong], {}, "relu")], [wrong])
    with pytest.raises(GraphError, match="type inference gives float32\\[2, 3\\]"):
        check_graph(bad)
    check_graph(bad, check_types=False)  # structure alone is fine


def test_checker_names_an_unknown_op(chain):
    g, x, y, z = chain
    bad = g.rebuild([Node("NoSuchOp", [x], [y], {}, "mystery"), g.nodes[1]])
    with pytest.raises(GraphError, match="unknown op 'NoSuchOp'"):
        check_graph(bad)


def test_checker_refuses_a_value_defined_twice_and_an_undefined_output(chain):
    g, x, y, z = chain
    twice = g.rebuild([g.nodes[0], Node("Relu", [x], [y], {}, "again")], [y])
    with pytest.raises(GraphError, match="%y is defined twice.*'again'"):
        check_graph(twice)
    with pytest.raises(GraphError, match="graph output %ghost is not defined"):
        check_graph(g.rebuild(g.nodes, [Value("ghost", z.type)]))
    with pytest.raises(GraphError, match="an input is listed twice"):
        check_graph(Graph([x, x], [z], g.nodes))


def test_checker_checks_a_function_against_its_call(with_function):
    check_graph(with_function)
    call = with_function.nodes[0]
    narrow = Value("x8", TensorType((2, 3), "float16"))
    bad = with_function.rebuild([Node("function", [narrow], call.outputs, call.attrs,
                                      call.name, call.body)])
    bad.inputs = [narrow]
    with pytest.raises(GraphError, match="argument %x8 is float16\\[2, 3\\], parameter %px"):
        check_graph(bad)
    short = with_function.rebuild([Node("function", [], call.outputs, call.attrs, call.name,
                                        call.body)])
    with pytest.raises(GraphError, match="takes 1 inputs, called with 0"):
        check_graph(short)
