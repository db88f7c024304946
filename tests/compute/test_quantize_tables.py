"""Per-channel requantization reads its constants from tables (``te.constant_tensor``):
the compiled function's size does not grow with the channel count, and it stays
bit-exact with the NumPy reference, also through an exported artifact."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc import te
from heterocc.ir.graph import Graph, Node, Value
from heterocc.ir.types import TensorType
from heterocc.ops import get_op
from heterocc.sdk.te_target import express_function, function_constants
from heterocc.targets.llvm.cpu import active_cpu
from heterocc.targets.llvm.module import _generate
from heterocc.targets.llvm.target import LLVMKernel, LLVMTarget, _schedule
from heterocc.tir.visitor import children


def _attrs(rng, channels: int) -> dict:
    return get_op("Requantize").normalize_attrs({
        "multiplier": rng.integers(1, 2 ** 15, channels).tolist(),
        "shift": rng.integers(0, 32, channels).tolist(), "zero_point": -3,
        "qmin": -128, "qmax": 127, "out_dtype": "int8",
        "acc_limit": rng.integers(1000, 2 ** 31 - 1, channels).tolist()})


def _function(channels: int, rng, with_bias: bool = False,
              size: int = 4) -> tuple[Node, list, np.ndarray]:
    """A fused ConvInteger (+ bias) + per-channel Requantize function (``size`` x ``size``
    outputs per channel), its inputs and the reference's output."""
    x = Value("x", TensorType((1, 8, size + 2, size + 2), "int8"))
    w = Value("w", TensorType((channels, 8, 3, 3), "int8"), rng.integers(
        -128, 128, (channels, 8, 3, 3), dtype=np.int8))
    zero = Value("x_zero", TensorType((), "int8"), np.array(5, np.int8))
    acc = Value("acc", TensorType((1, channels, size, size), "int32"))
    nodes = [Node("ConvInteger", [x, w, zero], [acc], get_op("ConvInteger").normalize_attrs({}),
                  name="conv")]
    if with_bias:
        bias = Value("bias", TensorType((1, channels, 1, 1), "int32"), rng.integers(
            -5000, 5000, (1, channels, 1, 1), dtype=np.int32))
        biased = Value("biased", TensorType((1, channels, size, size), "int32"))
        nodes.append(Node("Add", [acc, bias], [biased], {}, name="add"))
        acc = biased
    y = Value("y", TensorType((1, channels, size, size), "int8"))
    attrs = _attrs(rng, channels)
    nodes.append(Node("Requantize", [acc], [y], attrs, name="requantize"))
    body = Graph([x], [y], nodes)
    data = rng.integers(-128, 128, (1, 8, size + 2, size + 2), dtype=np.int8)
    function = Node("function", [x], [y], name=f"conv_requantize_{channels}", body=body)
    return function, [data], _reference(body, [data])


def _reference(body: Graph, inputs: list) -> np.ndarray:
    values = dict(zip(body.inputs, inputs))
    for node in body.nodes:
        args = [values[v] if v in values else v.data for v in node.inputs]
        (values[node.outputs[0]],) = get_op(node.op).run(args, node.attrs)
    return values[body.outputs[0]]


def _tree_size(node) -> int:
    """Nodes of ``node``'s tree (a shared sub-tree counted at every use)."""
    return 1 + sum(_tree_size(child) for child in children(node))


def _lowered(function: Node):
    expressed = express_function(function.body)
    return te.lower(_schedule(expressed, active_cpu()), expressed.params + expressed.outputs,
                    name="f")


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("size", [4, 8, 9])  # vectors across channels, within one, both
def test_per_channel_requantize_is_bit_exact(with_bias, size):
    rng = np.random.default_rng(3)
    function, inputs, expected = _function(48, rng, with_bias, size)
    target = LLVMTarget()
    kernel = target.build(function)
    assert isinstance(kernel, LLVMKernel), target.fallbacks
    np.testing.assert_array_equal(kernel(inputs)[0], expected)


def test_function_size_does_not_grow_with_the_channel_count():
    rng = np.random.default_rng(4)
    # both sizes above the CPU's thresholds for several tiles and parallel loops (a
    # smaller function gets fewer loops, not fewer per-channel ones)
    small, large = _function(1024, rng, True)[0], _function(4096, rng, True)[0]
    small_tir, large_tir = _lowered(small), _lowered(large)
    assert _tree_size(large_tir.body) == _tree_size(small_tir.body) < 2000
    small_ir = _generate([small_tir], ["f"], "m")
    large_ir = _generate([large_tir], ["f"], "m")
    assert abs(large_ir.count("\n") - small_ir.count("\n")) < 10
    assert large_ir.count("select") < 50
    tables = express_function(large.body).tables
    assert [t.shape for t in tables] == [(4096,)] * len(tables) and 3 <= len(tables) <= 5


def test_a_list_of_one_value_throughout_is_an_immediate():
    rng = np.random.default_rng(5)
    function = _function(16, rng)[0]
    (requantize,) = [n for n in function.body.nodes if n.op == "Requantize"]
    requantize.attrs.update(multiplier=[321] * 16, shift=[9] * 16, acc_limit=[2 ** 31 - 1] * 16)
    assert express_function(function.body).tables == []


def test_tables_are_taken_by_shared_and_exported_kernels(tmp_path):
    rng = np.random.default_rng(6)
    function, inputs, expected = _function(24, rng, True)
    # the same structure (ops, attributes, types) with other weights shares the kernel
    other = _function(24, np.random.default_rng(6), True)[0]
    (w,) = [v for v in other.body.nodes[0].inputs if v.name == "w"]
    w.data = np.ascontiguousarray(w.data[::-1])
    target = LLVMTarget()
    kernels = {function.name: target.build(function), "other": target.build(other)}
    np.testing.assert_array_equal(kernels[function.name](inputs)[0], expected)
    np.testing.assert_array_equal(kernels["other"](inputs)[0], _reference(other.body, inputs))
    assert target.distinct_kernels == 1
    info = target.save_kernels(kernels, str(tmp_path))
    loaded = LLVMTarget().load_kernel(function, str(tmp_path), info)
    np.testing.assert_array_equal(loaded(inputs)[0], expected)
    assert len(function_constants(function.body)) == len(loaded.constants) > 3


def test_layers_differing_in_the_input_zero_point_share_one_kernel(tmp_path):
    """The input zero point of ConvInteger is read by the kernel, not folded into it:
    two layers that differ only there (and in their weights) share one kernel, each
    bit-exact with its own zero point, also through an exported artifact."""
    from heterocc.sdk.te_target import structure_key

    rng = np.random.default_rng(7)
    function, inputs, expected = _function(24, rng, True)
    other = _function(24, np.random.default_rng(7), True)[0]
    (zero,) = [v for v in other.body.nodes[0].inputs if v.name == "x_zero"]
    zero.data = np.array(-7, np.int8)
    assert structure_key(function.body) == structure_key(other.body)
    assert not express_function(other.body).scalars  # the zero point is an argument
    target = LLVMTarget()
    kernels = {function.name: target.build(function), "other": target.build(other)}
    np.testing.assert_array_equal(kernels[function.name](inputs)[0], expected)
    other_expected = _reference(other.body, inputs)
    assert not np.array_equal(other_expected, expected)
    np.testing.assert_array_equal(kernels["other"](inputs)[0], other_expected)
    assert target.distinct_kernels == 1
    info = target.save_kernels({"other": kernels["other"]}, str(tmp_path))
    loaded = LLVMTarget().load_kernel(other, str(tmp_path), info)
    np.testing.assert_array_equal(loaded(inputs)[0], other_expected)
