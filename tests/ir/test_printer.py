"""The Graph IR's text form (heterocc.ir.printer)."""

from __future__ import annotations

import numpy as np

from heterocc.ir import Graph, Node, TensorType, Value, constant
from heterocc.ir.printer import format_graph


def test_printer_shows_every_node_and_type(chain):
    g, *_ = chain
    text = format_graph(g)
    assert "%y: float32[2, 3] = Add(%x, %c)" in text
    assert "%z: float32[2, 3] = Relu(%y)" in text
    assert text.strip().endswith("return %z")


def test_the_header_counts_large_constants_and_small_ones_print_inline():
    x = Value("x", TensorType((4,), "float32"))
    y, z = Value("y", x.type), Value("z", x.type)
    big = constant(np.zeros((16,), np.float32), "w")
    small = constant(np.array([1, 2], np.int64), "s")
    g = Graph([x], [z], [Node("Mul", [x, big], [y], {}, "m"),
                         Node("Tile", [y, small], [z], {}, "t")])
    lines = format_graph(g).splitlines()
    assert lines[0] == "graph main (%x: float32[4])"
    assert lines[1] == "  # 1 constants, 64 bytes"
    assert "= Tile(%y, [1, 2]:int64)" in lines[3]


def test_attributes_print_by_kind():
    x = Value("x", TensorType((2, 2), "float32"))
    y = Value("y", x.type)
    attrs = {"alpha": 0.25, "mode": "constant", "table": np.arange(3, dtype=np.int32),
             "big": np.zeros((3, 4), np.float32), "unset": None}
    text = format_graph(Graph([x], [y], [Node("Pad", [x], [y], attrs, "p")]))
    assert ("{alpha=0.25, mode='constant', table=array([0, 1, 2], int32), "
            "big=array<float32[3, 4]>}") in text


def test_a_function_prints_its_body_indented(with_function):
    lines = format_graph(with_function).splitlines()
    assert lines[1] == "  %z: float32[2, 3] = fused(%x) {target='llvm', pattern='elemwise'} {"
    assert lines[2] == "    fn (%px: float32[2, 3]) {"
    assert lines[3].startswith("      %py: float32[2, 3] = Add(%px, %c)")
    assert lines[5:8] == ["      return %pz", "    }", "  }"]
    assert str(with_function) == format_graph(with_function)
