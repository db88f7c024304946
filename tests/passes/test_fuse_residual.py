"""Fusion of a quantized residual addition of two convolutions' outputs (a ResNet's
downsampling skip, ``core/passes/fuse_ops.py``): the convolution that comes first keeps
its 8-bit output and the other one's epilogue reads it, in any node order, rather than
the first writing its int32 term (4x the bytes); the same bits as the reference."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc.ir.graph import Graph, Node, Value, constant
from heterocc.ir.types import TensorType
from heterocc.ops import get_op
from heterocc.passes import fuse_ops, fused_functions
from heterocc.runtime.interpreter import evaluate
from heterocc.targets.llvm.target import LLVMKernel, LLVMTarget

SHAPE = (1, 8, 6, 6)


def _conv_and_term(name: str, x: Value, rng) -> tuple[list[Node], list[Node], Value]:
    """A quantized 1x1 convolution of ``x`` (int8 output) and its addition's term
    ``Requantize(int32(q) - zero)`` as ``_rewrite_add`` makes it."""
    requantize = get_op("Requantize").normalize_attrs
    i32 = TensorType(SHAPE, "int32")
    acc, q = Value(f"{name}acc", i32), Value(f"{name}q", TensorType(SHAPE, "int8"))
    weight = constant(rng.integers(-127, 128, (8, 8, 1, 1)).astype(np.int8), f"{name}w")
    conv = [Node("ConvInteger", [x, weight], [acc], get_op("ConvInteger").normalize_attrs({}),
                 f"{name}conv"),
            Node("Requantize", [acc], [q], requantize({
                "multiplier": 1_234_567, "shift": 20, "qmin": -128, "qmax": 127,
                "out_dtype": "int8"}), f"{name}rq")]
    wide, centered, term = (Value(f"{name}{k}", i32) for k in "wct")
    chain = [
        Node("Cast", [q], [wide], get_op("Cast").normalize_attrs({"to": 6}), f"{name}cast"),
        Node("Sub", [wide, constant(np.array(3, np.int32), f"{name}z")], [centered], {},
             f"{name}sub"),
        Node("Requantize", [centered], [term], requantize({
            "multiplier": 1_180_929_605, "shift": 0, "product_shift": 9, "qmin": -2 ** 31,
            "qmax": 2 ** 31 - 1, "out_dtype": "int32"}), f"{name}trq")]
    return conv, chain, term


def _two_convolutions(order: str) -> Graph:
    """``Requantize(term(conv_a(x)) + term(conv_b(x)))``: both convolutions, then both
    terms (``interleaved``), or each convolution followed by its term (``a-first``,
    ``b-first``)."""
    rng = np.random.default_rng(0)
    x = Value("x", TensorType(SHAPE, "int8"))
    (conv_a, chain_a, term_a), (conv_b, chain_b, term_b) = (
        _conv_and_term(name, x, rng) for name in "ab")
    total, y = Value("total", TensorType(SHAPE, "int32")), Value("y", TensorType(SHAPE, "int8"))
    tail = [Node("Add", [term_a, term_b], [total], {}, "add"),
            Node("Requantize", [total], [y], get_op("Requantize").normalize_attrs({
                "multiplier": 1, "shift": 20, "zero_point": -128, "qmin": -128, "qmax": 127,
                "out_dtype": "int8"}), "rq")]
    body = {"interleaved": conv_a + conv_b + chain_a + chain_b,
            "a-first": conv_a + chain_a + conv_b + chain_b,
            "b-first": conv_b + chain_b + conv_a + chain_a}[order]
    return Graph([x], [y], body + tail)


@pytest.mark.parametrize("order", ["interleaved", "a-first", "b-first"])
def test_the_first_of_two_added_convolutions_writes_bytes_for_the_other(order):
    graph = _two_convolutions(order)
    fused = fuse_ops(graph)
    first, second = fused_functions(fused)
    # the first writes its int8 output, the second reads it with x and adds
    assert [v.type.dtype for v in first.outputs] == ["int8"]
    assert sorted(v.type.dtype for v in second.inputs) == ["int8", "int8"]
    assert [n.op for n in first.body.nodes] == ["ConvInteger", "Requantize"]
    assert sum(n.op == "Cast" for n in second.body.nodes) == 2
    llvm = LLVMTarget()
    kernels = [llvm.build(f) for f in (first, second)]
    assert all(isinstance(k, LLVMKernel) for k in kernels), llvm.fallbacks
    x = np.random.default_rng(1).integers(-128, 128, SHAPE).astype(np.int8)
    values = {fused.inputs[0]: x}
    for function, kernel in zip((first, second), kernels):
        values.update(zip(function.outputs, kernel([values[v] for v in function.inputs])))
    np.testing.assert_array_equal(values[fused.outputs[0]], evaluate(graph, [x])[0])


def test_a_convolution_added_to_an_identity_skip_keeps_the_addition():
    """An addition whose other term is no convolution's (an identity skip read by
    others too) changes nothing: the convolution's epilogue takes the whole addition."""
    rng = np.random.default_rng(0)
    x, skip = Value("x", TensorType(SHAPE, "int8")), Value("skip", TensorType(SHAPE, "int8"))
    conv, chain, term = _conv_and_term("a", x, rng)
    _, skip_chain, skip_term = _conv_and_term("s", skip, rng)
    skip_chain[0] = Node("Cast", [skip], skip_chain[0].outputs, skip_chain[0].attrs, "scast")
    total, y = Value("total", TensorType(SHAPE, "int32")), Value("y", TensorType(SHAPE, "int8"))
    graph = Graph([x, skip], [y], conv + chain + skip_chain + [
        Node("Add", [term, skip_term], [total], {}, "add"),
        Node("Requantize", [total], [y], get_op("Requantize").normalize_attrs({
            "multiplier": 1, "shift": 20, "qmin": -128, "qmax": 127, "out_dtype": "int8"}),
            "rq")])
    (function,) = fused_functions(fuse_ops(graph))
    assert [v.type.dtype for v in function.outputs] == ["int8"]
