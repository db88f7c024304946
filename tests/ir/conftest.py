"""Graphs the IR tests share."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc.ir import Graph, Node, TensorType, Value, constant


@pytest.fixture
def chain():
    """``z = Relu(x + c)`` over float32[2, 3] (c a constant of ones): the graph and its
    values x, y (the sum) and z."""
    x = Value("x", TensorType((2, 3), "float32"))
    c = constant(np.ones((2, 3), np.float32), "c")
    y = Value("y", TensorType((2, 3), "float32"))
    z = Value("z", TensorType((2, 3), "float32"))
    nodes = [Node("Add", [x, c], [y], {}, "add"), Node("Relu", [y], [z], {}, "relu")]
    return Graph([x], [z], nodes), x, y, z


@pytest.fixture
def with_function(chain):
    """``chain`` with its two nodes moved into a function node ``fused`` (target
    ``llvm``): a graph with a sub-graph."""
    g, x, y, z = chain
    px = Value("px", x.type)
    py = Value("py", y.type)
    pz = Value("pz", z.type)
    c = g.nodes[0].inputs[1]
    body = Graph([px], [pz], [Node("Add", [px, c], [py], {}, "add"),
                              Node("Relu", [py], [pz], {}, "relu")], "fused_body")
    call = Node("function", [x], [z], {"target": "llvm", "pattern": "elemwise"}, "fused", body)
    return Graph([x], [z], [call])
