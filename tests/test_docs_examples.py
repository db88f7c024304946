"""The IR listings in the docs are what the printers print today: each listing follows a
``<!-- printed by tests/test_docs_examples.py::NAME -->`` marker, and test NAME builds
it again and compares."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from heterocc import te
from heterocc.frontend import from_onnx
from heterocc.ir.printer import format_graph
from heterocc.passes.dce import eliminate_dead_code
from heterocc.passes.quantize import realize_qdq

DOCS = Path(__file__).resolve().parents[1] / "docs"


def listing(page: str, test_name: str) -> str:
    """The code block after the marker naming ``test_name`` on ``page``."""
    marker = f"<!-- printed by tests/test_docs_examples.py::{test_name} -->"
    text = (DOCS / page).read_text()
    assert text.count(marker) == 1, f"{page} has no single marker for {test_name}"
    block = re.match(r"\s*```\w*\n(.*?)\n```", text.split(marker, 1)[1], re.DOTALL)
    assert block, f"no code block follows the marker of {test_name} in {page}"
    return block.group(1)


def test_lowered_tir_example():
    a = te.placeholder((4, 8), "float32", "A")
    b = te.placeholder((8, 16), "float32", "B")
    bias = te.placeholder((16,), "float32", "bias")
    k = te.reduce_axis(8, "k")
    product = te.compute((4, 16), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    out = te.compute((4, 16), lambda i, j: te.maximum(product[i, j] + bias[j], 0.0),
                     name="out")
    s = te.create_schedule([out])
    _, j = s[out].op.axis
    j_outer, j_inner = s[out].split(j, factor=8)
    s[out].vectorize(j_inner)
    s[product].compute_at(s[out], j_outer)
    printed = str(te.lower(s, [a, b, bias, out], name="dense_relu"))
    assert printed == listing("architecture.md", "test_lowered_tir_example")


def _qdq_conv_relu():
    """A uint8 QDQ convolution: per-channel weight scales, an int32 bias, a ReLU."""
    rng = np.random.default_rng(0)
    arrays = {"xs": np.float32(0.05), "xz": np.uint8(128),
              "wq": rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8),
              "ws": np.array([0.01, 0.02, 0.015, 0.03], np.float32),
              "wz": np.zeros(4, np.int8),
              "bq": rng.integers(-500, 500, 4).astype(np.int32),
              "bs": np.array([0.0005, 0.001, 0.00075, 0.0015], np.float32),
              "ys": np.float32(0.1), "yz": np.uint8(120)}
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wf"], axis=0),
             helper.make_node("DequantizeLinear", ["bq", "bs"], ["bf"], axis=0),
             helper.make_node("Conv", ["xf", "wf", "bf"], ["c"], pads=[1] * 4, name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("QuantizeLinear", ["r", "ys", "yz"], ["y"])]
    graph = helper.make_graph(
        nodes, "qconv", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 4, 8, 8])],
        [numpy_helper.from_array(v, k) for k, v in arrays.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    return model


def test_quantized_graph_example():
    graph = eliminate_dead_code(realize_qdq(from_onnx(_qdq_conv_relu())))
    assert format_graph(graph) == listing("quantized-ops.md", "test_quantized_graph_example")
