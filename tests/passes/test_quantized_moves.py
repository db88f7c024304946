"""Quantize-dequantize round trips around ops that only move elements: ONNX Runtime's
quantizer puts a QuantizeLinear/DequantizeLinear pair on each side of a Reshape or a
Transpose (ConvNeXt's channels-last blocks), and ``realize_qdq`` moves the integers
instead of the reals between two conversions."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import helper

import heterocc
from heterocc.frontend import from_onnx
from heterocc.ir.graph import Node, Value
from heterocc.ir.types import TensorType
from heterocc.ops import get_op
from heterocc.passes import PassManager
from heterocc.passes.quantize import _roundtrip_exact
from tests.conftest import make_model

SCALE, ZERO = 0.0125, 3


def _moves_model(second_scale: float = SCALE, per_axis: bool = False):
    """``x`` quantized, then Reshape and Transpose each between a DequantizeLinear and a
    QuantizeLinear (``second_scale``: the Transpose's QuantizeLinear's), dequantized at
    the end. ``per_axis``: the Transpose's DequantizeLinear is per channel."""
    inits = {"s": np.array(SCALE, np.float32), "z": np.array(ZERO, np.int8),
             "s2": np.array(second_scale, np.float32),
             "shape": np.array([1, 8, 6, 4], np.int64),
             "sc": np.full(8, SCALE, np.float32), "zc": np.full(8, ZERO, np.int8)}
    transpose_dq = ["r_q", "sc", "zc"] if per_axis else ["r_q", "s", "z"]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["x_q"]),
             helper.make_node("DequantizeLinear", ["x_q", "s", "z"], ["x_dq"]),
             helper.make_node("Reshape", ["x_dq", "shape"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "s", "z"], ["r_q"]),
             helper.make_node("DequantizeLinear", transpose_dq, ["r_dq"], axis=1),
             helper.make_node("Transpose", ["r_dq"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("QuantizeLinear", ["t", "s2", "z"], ["t_q"]),
             helper.make_node("DequantizeLinear", ["t_q", "s2", "z"], ["y"])]
    return make_model(nodes, [("x", "float32", [1, 8, 24])], [("y", "float32", None)],
                      inits)


def _realized(model):
    return PassManager(["realize_qdq_linear", "fold_constants", "dce"],
                       check=True).run(from_onnx(model))


def test_moves_between_a_roundtrip_move_the_integers():
    """Both pairs go: the Reshape and the Transpose read int8, one QuantizeLinear (the
    input's) and one DequantizeLinear (the output's) are left."""
    graph = _realized(_moves_model())
    counts = graph.op_counts()
    assert counts["QuantizeLinear"] == 1 and counts["DequantizeLinear"] == 1
    moves = [n for n in graph.nodes if n.op in ("Reshape", "Transpose")]
    assert len(moves) == 2
    assert all(n.inputs[0].type.dtype == "int8" == n.outputs[0].type.dtype for n in moves)


@pytest.mark.parametrize("second_scale,per_axis", [(2 * SCALE, False), (SCALE, True)],
                         ids=["another-scale", "per-channel"])
def test_a_pair_of_two_quantizations_keeps_its_reals(second_scale, per_axis):
    """A QuantizeLinear of another scale than its DequantizeLinear's, or a per-channel
    DequantizeLinear, is no round trip: the Transpose still moves reals."""
    graph = _realized(_moves_model(second_scale, per_axis))
    transpose = next(n for n in graph.nodes if n.op == "Transpose")
    assert transpose.inputs[0].type.dtype == "float32"
    reshape = next(n for n in graph.nodes if n.op == "Reshape")
    assert reshape.inputs[0].type.dtype == "int8"  # the first pair is one


@pytest.mark.parametrize("target", ["llvm", "llvm -mattr=-avx512f"], ids=["host", "avx2"])
def test_moved_integers_give_onnxruntimes_output(target, rng):
    model = _moves_model()
    x = (rng.standard_normal((1, 8, 24)) * 2).astype(np.float32)
    got = heterocc.compile(model, target=target).run({"x": x})[0]
    want = onnxruntime.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16"])
def test_quantizing_the_dequantized_integers_gives_them_back(dtype, rng):
    """The arithmetic :func:`_roundtrip_exact` rests on, on the reference ops: every
    integer of the type, dequantized and quantized again with the same scale and zero
    point, for scales across the whole range it admits (float32)."""
    info = np.iinfo(dtype)
    x = np.arange(info.min, info.max + 1).astype(dtype)
    zero = np.array(info.min // 2 + info.max // 3, dtype)
    low, high = np.log2(np.finfo(np.float32).tiny) + info.bits, 127 - info.bits
    exponents = np.concatenate([[low, high - 1e-6], rng.uniform(low, high, 40)])
    for scale in (2.0 ** exponents * rng.uniform(1, 2, exponents.size)).astype(np.float32):
        if not np.isfinite(scale * np.float32(2 ** info.bits)):
            continue
        real = _reference("DequantizeLinear", x, scale, zero)
        back = _reference("QuantizeLinear", real, scale, zero)
        np.testing.assert_array_equal(back, x, err_msg=f"scale {scale!r}")


def _reference(op: str, *inputs):
    definition = get_op(op)
    return definition.run(list(inputs), definition.normalize_attrs({}))[0]


def _dq(integer: str, real: str, scale: float) -> Node:
    x = Value("x", TensorType((4,), integer))
    s = Value("s", TensorType((), real), data=np.array(scale, real))
    return Node("DequantizeLinear", [x, s], [Value("y", TensorType((4,), real))], {}, "dq")


@pytest.mark.parametrize("integer,real,scale,exact", [
    ("int8", "float32", 0.02, True),
    ("uint16", "float32", 3e-3, True),
    ("int8", "float16", 0.02, True),      # 8 + 2 bits < float16's 11
    ("int16", "float16", 0.02, False),    # a quotient may land half a step away
    ("int8", "float32", 1e-40, False),    # subnormal products lose bits
    ("int8", "float32", 3e36, False),     # products overflow
    ("int32", "float32", 1.0, False),     # 32 bits are more than float32 keeps
], ids=["int8", "uint16", "float16", "int16-in-float16", "subnormal", "overflow", "int32"])
def test_which_roundtrips_are_exact(integer, real, scale, exact):
    assert _roundtrip_exact(_dq(integer, real, scale)) is exact


_ONE_MOVE = {
    "Slice": ([np.array([2], np.int64), np.array([6], np.int64), np.array([1], np.int64)],
              {}),
    "Gather": ([np.array([3, 0, 3], np.int64)], {"axis": 1}),
    "Flatten": ([], {"axis": 2}),
    "Unsqueeze": ([np.array([0], np.int64)], {}),
    "Tile": ([np.array([1, 2, 1], np.int64)], {}),
}


@pytest.mark.parametrize("op", sorted(_ONE_MOVE))
def test_each_moving_op_moves_integers(op, rng):
    """A slice (ShuffleNet's split of a shuffled tensor), a gather (ViT's query, key and
    value out of one product), a flatten, an unsqueeze and a tile between a pair move the
    integers, and the model still gives ONNX Runtime's output bit for bit."""
    operands, attrs = _ONE_MOVE[op]
    inits = {"s": np.array(SCALE, np.float32), "z": np.array(ZERO, np.int8),
             **{f"operand{k}": v for k, v in enumerate(operands)}}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["x_q"]),
             helper.make_node("DequantizeLinear", ["x_q", "s", "z"], ["x_dq"]),
             helper.make_node(op, ["x_dq", *(f"operand{k}" for k in range(len(operands)))],
                              ["m"], **attrs),
             helper.make_node("QuantizeLinear", ["m", "s", "z"], ["m_q"]),
             helper.make_node("DequantizeLinear", ["m_q", "s", "z"], ["y"])]
    model = make_model(nodes, [("x", "float32", [2, 8, 5])], [("y", "float32", None)], inits)
    moved = next(n for n in _realized(model).nodes if n.op == op)
    assert moved.inputs[0].type.dtype == "int8"
    x = (rng.standard_normal((2, 8, 5)) * 2).astype(np.float32)
    got = heterocc.compile(model).run({"x": x})[0]
    want = onnxruntime.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)
