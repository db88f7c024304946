"""A fused chain of ops that each read their input several times (NaN-aware Clip, x op
x) compiles in time linear in its length: the inlined expression stays a DAG through
lowering, the TIR passes and code generation."""

from __future__ import annotations

import time

import numpy as np
import pytest
from onnx import TensorProto, helper

import heterocc


def _chain(op: str, length: int):
    nodes, previous = [], "x"
    for k in range(length):
        inputs = [previous, "low", "high"] if op == "Clip" else [previous, previous]
        nodes.append(helper.make_node(op, inputs, [f"t{k}"]))
        previous = f"t{k}"
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor("low", TensorProto.FLOAT, [], [-1.5]),
         helper.make_tensor("high", TensorProto.FLOAT, [], [1.5])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("op", ["Clip", "Max", "Add"])
def test_long_chains_compile_quickly_and_match_the_reference(op):
    model = _chain(op, 24)
    start = time.perf_counter()
    compiled = heterocc.compile(model, target="llvm")
    assert time.perf_counter() - start < 30  # was exponential: minutes from 4 Clips on
    assert compiled.fallbacks == {}
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32) * 2
    x[0, :3] = [np.nan, np.inf, -np.inf]
    expected = heterocc.compile(model, target="reference").run([x])[0]
    np.testing.assert_array_equal(compiled.run([x])[0], expected)
