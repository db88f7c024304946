"""The Graph IR as JSON plus parameters (heterocc.ir.serialize): what round-trips and
what a malformed document is told."""

from __future__ import annotations

import json

import numpy as np
import pytest

from heterocc.errors import ArtifactError
from heterocc.ir import Graph, Node, TensorType, Value
from heterocc.ir.printer import format_graph
from heterocc.ir.serialize import GRAPH_FORMAT_VERSION, graph_from_json, graph_to_json


def _round_trip(graph: Graph) -> Graph:
    doc, params = graph_to_json(graph)
    # the document is plain JSON: it survives text, and the params are arrays only
    doc = json.loads(json.dumps(doc))
    assert all(isinstance(p, np.ndarray) for p in params.values())
    return graph_from_json(doc, params)


def test_a_graph_with_a_function_round_trips(with_function):
    back = _round_trip(with_function)
    assert format_graph(back) == format_graph(with_function)
    call = back.nodes[0]
    assert call.body.name == "fused_body" and call.attrs["target"] == "llvm"
    # the constant the body reads keeps its data
    (c,) = call.body.constants()
    np.testing.assert_array_equal(c.data, np.ones((2, 3), np.float32))


def test_a_constant_read_twice_is_stored_once_and_read_back_as_one_value(chain):
    g, x, y, z = chain
    c = g.nodes[0].inputs[1]
    w = Value("w", x.type)
    graph = g.rebuild([*g.nodes, Node("Add", [z, c], [w], {}, "again")], [w])
    doc, params = graph_to_json(graph)
    assert len(params) == 1
    back = graph_from_json(doc, params)
    assert back.nodes[0].inputs[1] is back.nodes[2].inputs[1]


def test_attributes_of_every_kind_round_trip():
    x = Value("x", TensorType((3,), "float32"))
    y = Value("y", x.type)
    inner = Graph([Value("p", x.type)], [], [], "branch")
    attrs = {"i": 2, "f": 0.5, "s": "edge", "ints": [1, 2], "np": np.int64(7),
             "inf": float("inf"), "ninf": [float("-inf")], "table": np.arange(4, dtype=np.int8),
             "graph": inner, "none": None}
    back = _round_trip(Graph([x], [y], [Node("Custom", [x, None], [y], attrs, "n")]))
    got = back.nodes[0].attrs
    assert got["i"] == 2 and got["f"] == 0.5 and got["s"] == "edge" and got["ints"] == [1, 2]
    assert got["np"] == 7 and type(got["np"]) is int
    assert got["inf"] == float("inf") and got["ninf"] == [float("-inf")]
    np.testing.assert_array_equal(got["table"], np.arange(4, dtype=np.int8))
    assert isinstance(got["graph"], Graph) and got["graph"].name == "branch"
    assert got["none"] is None and back.nodes[0].inputs[1] is None


def test_another_format_version_is_refused_naming_both():
    with pytest.raises(ArtifactError, match=f"format 99 .*reads format {GRAPH_FORMAT_VERSION}"):
        graph_from_json({"format": 99, "graph": {}}, {})


def test_malformed_documents_name_what_is_wrong(chain):
    g, *_ = chain
    doc, params = graph_to_json(g)
    with pytest.raises(ArtifactError, match="missing parameter 'p0'"):
        graph_from_json(doc, {})
    broken = json.loads(json.dumps(doc))
    broken["graph"]["nodes"][1]["inputs"] = ["v99"]
    with pytest.raises(ArtifactError, match="undefined value 'v99'"):
        graph_from_json(broken, params)
    del broken["graph"]["nodes"]
    with pytest.raises(ArtifactError, match="malformed graph JSON: KeyError"):
        graph_from_json(broken, params)
    odd = json.loads(json.dumps(doc))
    odd["graph"]["nodes"][0]["attrs"] = {"x": {"mystery": 1}}
    with pytest.raises(ArtifactError, match="unknown attribute encoding \\['mystery'\\]"):
        graph_from_json(odd, params)
