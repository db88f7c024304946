"""Reductions, arg-reductions, softmax family, scans, TopK, Einsum, Trilu, Det and losses
(core/ops/reduction.py) against onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest
from single_node_oracle import check_inferred, compare_with_onnx, infer, onnx_outputs, rng

from heterocc.errors import TypeInferenceError
from heterocc.ir.types import TensorType
from heterocc.ops import FusionKind, ShapeOperandError, get_op

REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
              "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]


def positive(shape, dtype=np.float32, seed=0):
    """Values in [0.5, 1.5): safe for log reductions and products."""
    return (rng(seed).random(shape) + 0.5).astype(dtype)


# --------------------------------------------------------------------------- Reduce*


@pytest.mark.parametrize("op_type", REDUCE_OPS)
@pytest.mark.parametrize("axes,keepdims", [(None, 1), (None, 0), ([1], 1), ([-1, 0], 0),
                                           ([0, 1, 2], 1)])
def test_reduce_matches_onnx(op_type, axes, keepdims):
    x = positive((3, 4, 5))
    inputs = [x, None if axes is None else np.array(axes, np.int64)]
    compare_with_onnx(op_type, inputs, {"keepdims": keepdims})


@pytest.mark.parametrize("op_type", REDUCE_OPS)
def test_reduce_noop_with_empty_axes_reduces_nothing(op_type):
    x = positive((2, 3))
    out = compare_with_onnx(op_type, [x, np.array([], np.int64)], {"noop_with_empty_axes": 1})
    assert out[0].shape == (2, 3)


@pytest.mark.parametrize("op_type", REDUCE_OPS)
def test_reduce_axes_attribute_of_old_opsets(op_type):
    x = positive((3, 4, 2))
    compare_with_onnx(op_type, [x], {"axes": [0, 2], "keepdims": 0}, opset=11)


@pytest.mark.parametrize("op_type,identity", [
    ("ReduceSum", 0.0), ("ReduceProd", 1.0), ("ReduceMax", -np.inf), ("ReduceMin", np.inf),
    ("ReduceL1", 0.0), ("ReduceL2", 0.0), ("ReduceSumSquare", 0.0), ("ReduceLogSum", -np.inf),
    ("ReduceLogSumExp", -np.inf)])
def test_reduce_over_empty_set_gives_identity(op_type, identity):
    x = np.zeros((2, 0, 4), np.float32)
    out = compare_with_onnx(op_type, [x, np.array([1], np.int64)], {"keepdims": 1})
    assert out[0].shape == (2, 1, 4)
    assert np.all(out[0] == np.float32(identity))


@pytest.mark.parametrize("op_type", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
                                     "ReduceSumSquare", "ReduceL1"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8])
def test_reduce_integer_dtype_is_kept(op_type, dtype):
    x = rng(1).integers(0, 5, (4, 3)).astype(dtype)
    inputs = [x, np.array([0], np.int64)]
    out = check_inferred(op_type, inputs)
    assert out[0].dtype == dtype
    # ONNX's reference widens some integer sums to int64; the spec keeps the input dtype
    expected = onnx_outputs(op_type, inputs, {})[0]
    np.testing.assert_array_equal(out[0], expected.astype(dtype))


@pytest.mark.parametrize("op_type", REDUCE_OPS)
def test_reduce_float16_stays_float16(op_type):
    x = positive((4, 6), np.float16)
    compare_with_onnx(op_type, [x, np.array([1], np.int64)], rtol=2e-3, atol=2e-3)


def test_reduce_max_of_bool_tensor():
    x = np.array([[True, False], [False, False]])
    out = compare_with_onnx("ReduceMax", [x, np.array([1], np.int64)], {"keepdims": 0})
    np.testing.assert_array_equal(out[0], [True, False])


def test_reduce_log_sum_exp_is_stable_for_large_values():
    x = np.array([[1000.0, 1000.0], [-np.inf, -np.inf]], np.float32)
    out = check_inferred("ReduceLogSumExp", [x, np.array([1], np.int64)], {"keepdims": 0})
    np.testing.assert_allclose(out[0], [1000 + np.log(2), -np.inf])


def test_reduce_rank0_input():
    compare_with_onnx("ReduceSum", [np.array(3.5, np.float32)], {"keepdims": 0})


def test_reduce_errors():
    x = positive((2, 3))
    with pytest.raises(TypeInferenceError, match="axis 2 is out of range for rank 2"):
        infer("ReduceSum", [x, np.array([2], np.int64)])
    with pytest.raises(TypeInferenceError, match="repeated axis"):
        infer("ReduceMean", [x, np.array([1, -1], np.int64)])
    with pytest.raises(TypeInferenceError, match="both as input 1 and as attribute"):
        infer("ReduceMax", [x, np.array([1], np.int64)], {"axes": [0]})
    with pytest.raises(ShapeOperandError) as caught:
        infer("ReduceL2", [x, np.array([1], np.int64)], constant=[0])
    assert caught.value.value_index == 1
    assert get_op("ReduceSum").shape_operands == (1,)
    assert get_op("ReduceSum").fusion_kind == FusionKind.REDUCTION


# --------------------------------------------------------------------------- ArgMax, ArgMin


@pytest.mark.parametrize("op_type", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("select_last_index", [0, 1])
def test_arg_extreme_with_ties(op_type, axis, keepdims, select_last_index):
    x = rng(2).integers(0, 3, (4, 5, 3)).astype(np.float32)  # many ties
    compare_with_onnx(op_type, [x], {"axis": axis, "keepdims": keepdims,
                                     "select_last_index": select_last_index})


def test_arg_extreme_errors():
    with pytest.raises(TypeInferenceError, match="axis 3 is out of range"):
        infer("ArgMax", [np.zeros((2, 3), np.float32)], {"axis": 3})
    with pytest.raises(TypeInferenceError, match="has size 0"):
        infer("ArgMin", [np.zeros((2, 0), np.float32)], {"axis": 1})


# --------------------------------------------------------------------------- softmax family


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_family(op_type, axis):
    x = (rng(3).standard_normal((3, 4, 5)) * 4).astype(np.float32)
    compare_with_onnx(op_type, [x], {"axis": axis})


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_family_float16(op_type):
    x = rng(4).standard_normal((2, 7)).astype(np.float16)
    compare_with_onnx(op_type, [x], rtol=3e-3, atol=3e-3)


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_family_on_empty_axis(op_type):
    (out,) = check_inferred(op_type, [np.zeros((3, 0), np.float32)])
    assert out.shape == (3, 0)


def test_hardmax_picks_first_of_ties():
    out = check_inferred("Hardmax", [np.array([[2, 5, 5], [1, 1, 1]], np.float32)])
    np.testing.assert_array_equal(out[0], [[0, 1, 0], [1, 0, 0]])


def test_softmax_rejects_integer_input():
    with pytest.raises(TypeInferenceError,
                       match=r"Softmax: input \(input 0\) must be a float tensor"):
        infer("Softmax", [np.zeros((2, 2), np.int32)])


# --------------------------------------------------------------------------- CumSum, CumProd


@pytest.mark.parametrize("op_type", ["CumSum", "CumProd"])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, -1])
def test_scans(op_type, exclusive, reverse, axis):
    x = positive((3, 4))
    compare_with_onnx(op_type, [x, np.array(axis, np.int32)],
                      {"exclusive": exclusive, "reverse": reverse})


@pytest.mark.parametrize("op_type", ["CumSum", "CumProd"])
def test_scans_integer(op_type):
    x = rng(5).integers(1, 4, (2, 5)).astype(np.int32)
    out = compare_with_onnx(op_type, [x, np.array(1, np.int64)], {"exclusive": 1})
    assert out[0].dtype == np.int32


@pytest.mark.parametrize("op_type", ["CumSum", "CumProd"])
def test_exclusive_scan_of_empty_axis(op_type):
    (out,) = check_inferred(op_type, [np.zeros((0, 3), np.float64), np.array(0, np.int64)],
                            {"exclusive": 1, "reverse": 1})
    assert out.shape == (0, 3)


def test_scan_errors():
    x = positive((2, 3))
    with pytest.raises(TypeInferenceError, match="axis 2 is out of range"):
        infer("CumSum", [x, np.array(2, np.int64)])
    with pytest.raises(TypeInferenceError, match="int32/int64 scalar"):
        infer("CumProd", [x, np.array([0, 1], np.int64)])
    # a run-time axis is fine: the output type does not depend on it
    assert infer("CumSum", [x, np.array(1, np.int64)], constant=[0]) == [TensorType.of(x)]


# --------------------------------------------------------------------------- TopK


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("axis", [-1, 0])
@pytest.mark.parametrize("k", [0, 2, 4])
def test_topk_with_ties(largest, axis, k):
    x = rng(6).integers(0, 3, (4, 4)).astype(np.float32)
    compare_with_onnx("TopK", [x, np.array([k], np.int64)], {"largest": largest, "axis": axis},
                      num_outputs=2)


def test_topk_ties_go_to_lower_index():
    values, indices = check_inferred("TopK", [np.array([1, 3, 3, 2, 3], np.int32),
                                              np.array([3], np.int64)], num_outputs=2)
    np.testing.assert_array_equal(values, [3, 3, 3])
    np.testing.assert_array_equal(indices, [1, 2, 4])
    _, smallest = check_inferred("TopK", [np.array([2, 1, 1], np.uint8),
                                          np.array([2], np.int64)], {"largest": 0},
                                 num_outputs=2)
    np.testing.assert_array_equal(smallest, [1, 2])


def test_topk_k_attribute_of_opset_1():
    x = rng(7).standard_normal((3, 5)).astype(np.float32)
    compare_with_onnx("TopK", [x], {"k": 2}, num_outputs=2, opset=9)


def test_topk_errors():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(TypeInferenceError, match=r"k=4 must lie in \[0, 3\]"):
        infer("TopK", [x, np.array([4], np.int64)], num_outputs=2)
    with pytest.raises(ShapeOperandError):
        infer("TopK", [x, np.array([1], np.int64)], num_outputs=2, constant=[0])
    assert get_op("TopK").fusion_kind == FusionKind.OPAQUE


# --------------------------------------------------------------------------- Einsum


EINSUM_CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("ij->ji", [(3, 4)]),
    ("ji", [(3, 4)]),
    ("i,i", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (1, 4, 5)]),
    ("...ij", [(2, 3, 4)]),
    ("...ij->ij", [(3, 4)]),
    ("ij...,jk->ik...", [(2, 3, 6), (3, 4)]),
    ("a b, b c -> a c", [(2, 3), (3, 2)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("Ab,bA->A", [(2, 3), (3, 2)]),
]


@pytest.mark.parametrize("equation,shapes", EINSUM_CASES)
def test_einsum(equation, shapes):
    inputs = [rng(i).standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)]
    compare_with_onnx("Einsum", inputs, {"equation": equation}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_einsum_other_dtypes(dtype):
    inputs = [rng(i).integers(-3, 4, s).astype(dtype) for i, s in enumerate([(3, 4), (4, 2)])]
    compare_with_onnx("Einsum", inputs, {"equation": "ij,jk->ik"})


@pytest.mark.parametrize("equation,shapes,message", [
    ("ij,jk->ik", [(3, 4), (5, 2)], "label 'j' has size 4 and 5"),
    ("ij,jk->ik", [(3, 4)], "2 operand term"),
    ("ij->iz", [(3, 4)], "do not appear in any input"),
    ("ijk->i", [(3, 4)], "does not match input 0 of rank 2"),
    ("ij->ii", [(3, 3)], "repeats a label"),
    ("i1->i", [(3, 1)], "characters other than letters"),
    ("...ij->ij", [(2, 3, 4)], "drops the ellipsis dims"),
])
def test_einsum_errors(equation, shapes, message):
    inputs = [np.zeros(s, np.float32) for s in shapes]
    with pytest.raises(TypeInferenceError, match=message):
        infer("Einsum", inputs, {"equation": equation})


# --------------------------------------------------------------------------- Trilu, Det


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -1, 0, 2, 9])
@pytest.mark.parametrize("shape", [(4, 5), (2, 3, 3), (3, 0)])
def test_trilu(upper, k, shape):
    x = rng(8).integers(1, 9, shape).astype(np.int64)
    compare_with_onnx("Trilu", [x, None if k is None else np.array(k, np.int64)],
                      {"upper": upper})


def test_trilu_errors():
    with pytest.raises(TypeInferenceError, match="rank >= 2"):
        infer("Trilu", [np.zeros((3,), np.float32)])
    with pytest.raises(TypeInferenceError, match="int64 scalar"):
        infer("Trilu", [np.zeros((3, 3), np.float32), np.array([1, 2], np.int64)])


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (1, 2, 2, 2)])
def test_det(shape):
    x = rng(9).standard_normal(shape).astype(np.float32)
    compare_with_onnx("Det", [x], rtol=1e-4, atol=1e-5)


def test_det_errors():
    with pytest.raises(TypeInferenceError, match="square in its last two dims"):
        infer("Det", [np.zeros((2, 3), np.float32)])


# --------------------------------------------------------------------------- losses


LOSS_SHAPES = [(4, 3), (2, 3, 5), (2, 4, 3, 2)]


def loss_inputs(shape, with_weight, ignore_index, seed=10):
    gen = rng(seed)
    scores = gen.standard_normal(shape).astype(np.float32)
    target = gen.integers(0, shape[1], (shape[0],) + shape[2:]).astype(np.int64)
    if ignore_index is not None:
        target.reshape(-1)[::3] = ignore_index
    weight = gen.random(shape[1]).astype(np.float32) + 0.1 if with_weight else None
    return scores, target, weight


@pytest.mark.parametrize("shape", LOSS_SHAPES)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("with_weight", [False, True])
@pytest.mark.parametrize("ignore_index", [None, 1, -5])
def test_negative_log_likelihood_loss(shape, reduction, with_weight, ignore_index):
    scores, target, weight = loss_inputs(shape, with_weight, ignore_index)
    attrs = {"reduction": reduction}
    if ignore_index is not None:
        attrs["ignore_index"] = ignore_index
    compare_with_onnx("NegativeLogLikelihoodLoss", [scores, target, weight], attrs)


@pytest.mark.parametrize("shape", LOSS_SHAPES)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("with_weight", [False, True])
@pytest.mark.parametrize("ignore_index", [None, 2])
def test_softmax_cross_entropy_loss(shape, reduction, with_weight, ignore_index):
    scores, target, weight = loss_inputs(shape, with_weight, ignore_index)
    attrs = {"reduction": reduction}
    if ignore_index is not None:
        attrs["ignore_index"] = ignore_index
    compare_with_onnx("SoftmaxCrossEntropyLoss", [scores, target, weight], attrs,
                      num_outputs=2, rtol=1e-5, atol=1e-5)


def test_loss_errors():
    scores = np.zeros((4, 3), np.float32)
    with pytest.raises(TypeInferenceError, match=r"target/labels shape \(3,\) must be \(4,\)"):
        infer("NegativeLogLikelihoodLoss", [scores, np.zeros(3, np.int64)])
    with pytest.raises(TypeInferenceError, match="reduction 'avg'"):
        infer("SoftmaxCrossEntropyLoss", [scores, np.zeros(4, np.int64)], {"reduction": "avg"},
              num_outputs=2)
    with pytest.raises(TypeInferenceError, match=r"weight shape \(2,\) must be \(3,\)"):
        infer("NegativeLogLikelihoodLoss", [scores, np.zeros(4, np.int64),
                                            np.ones(2, np.float32)])


# --------------------------------------------------------------------------- narrow dtypes

BFLOAT16_CASES = [
    ("ReduceSum", [np.array([1], np.int64)], {}),
    ("ReduceMax", [np.array([0], np.int64)], {"keepdims": 0}),
    ("ReduceLogSumExp", [], {}),
    ("ArgMin", [], {"axis": 1}),
    ("Softmax", [], {}),
    ("CumSum", [np.array(1, np.int64)], {"exclusive": 1}),
    ("TopK", [np.array([2], np.int64)], {}),
    ("Hardmax", [], {"axis": 0}),
]


@pytest.mark.parametrize("op_type,operands,attrs", BFLOAT16_CASES)
def test_bfloat16_computes_like_float32(op_type, operands, attrs):
    bfloat16 = pytest.importorskip("ml_dtypes").bfloat16
    # distinct small integers are exact in bfloat16 and leave no ties
    x = (rng(11).permutation(12).reshape(3, 4) / 4).astype(np.float32)
    num_outputs = 2 if op_type == "TopK" else 1
    narrow = check_inferred(op_type, [x.astype(bfloat16), *operands], attrs, num_outputs)
    wide = check_inferred(op_type, [x, *operands], attrs, num_outputs)
    for got, expected in zip(narrow, wide):
        if expected.dtype == np.float32:
            assert got.dtype == bfloat16
            np.testing.assert_allclose(got.astype(np.float32), expected, rtol=1e-2, atol=1e-2)
        else:
            np.testing.assert_array_equal(got, expected)


def test_einsum_bfloat16():
    bfloat16 = pytest.importorskip("ml_dtypes").bfloat16
    a, b = (rng(i).integers(-3, 4, s).astype(bfloat16) for i, s in enumerate([(2, 3), (3, 2)]))
    (out,) = check_inferred("Einsum", [a, b], {"equation": "ij,jk->ik"})
    np.testing.assert_array_equal(out.astype(np.float32),
                                  a.astype(np.float32) @ b.astype(np.float32))


def test_storage_only_dtypes_are_rejected():
    float8 = pytest.importorskip("ml_dtypes").float8_e4m3fn
    x = np.zeros((2, 3), float8)
    with pytest.raises(TypeInferenceError, match="data \\(input 0\\) must be numeric .* got "
                                                 "float8_e4m3fn; Cast it first"):
        infer("ReduceSum", [x])
    with pytest.raises(TypeInferenceError, match="must be a float tensor"):
        infer("Softmax", [x])
    with pytest.raises(TypeInferenceError, match="must be numeric"):
        infer("ArgMax", [np.zeros(3, bool)])
