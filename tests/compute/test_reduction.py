"""TE computes of reductions and the other ops of core/ops/reduction.py (Einsum, Det, the
losses, TopK, CumSum/CumProd, Trilu; core/compute/reduction.py) against the NumPy references,
through the llvm target: every case claimed here must really compile (no NumPy fallback)
and match exactly (integers, bools) or within float tolerance."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import heterocc
from heterocc import te
from heterocc.compute import compute_of
from heterocc.compute.reduction import PRODUCT_CHUNK, _axes_from_shapes
from heterocc.errors import CompileError
from heterocc.ir.graph import Graph, Node, Value
from heterocc.ir.types import TensorType
from heterocc.ops import get_op
from heterocc.sdk.te_target import ExpressedFunction
from heterocc.targets.llvm.cpu import active_cpu
from heterocc.targets.llvm.module import build as build_module
from heterocc.targets.llvm.target import LLVMTarget, _schedule
from tests.compute.test_elementwise import (
    assert_same,
    check,
    random_array,
    run_compiled,
    with_specials,
)
from tests.compute.test_tensor import (
    assert_llvm_matches_reference,
    single_node,
)
from tests.conftest import make_model

FLOAT_TYPES = ["float32", "float64"]
INT_TYPES = ["int8", "int64", "uint32"]
AXES_FORMS = [([1], 1), ([0, 2], 0), ([-1], 0), (None, 1), (None, 0)]

SUMMING = ["ReduceSum", "ReduceSumSquare", "ReduceL1", "ReduceProd"]
FLOAT_MATH = ["ReduceMean", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"]


#: the seed of the ``rng`` fixture (tests/conftest.py) in this module
RNG_SEED = 23


def _reduce_attrs(axes, keepdims):
    attrs = {"keepdims": keepdims}
    if axes is not None:
        attrs["axes"] = axes
    return attrs


def _near_one(rng, shape, dtype):
    """Floats near 1, so that long products neither overflow nor vanish."""
    return (1.0 + 0.05 * rng.standard_normal(shape)).astype(dtype)


# ---------------------------------------------------------------- Reduce*


@pytest.mark.parametrize("axes,keepdims", AXES_FORMS)
@pytest.mark.parametrize("dtype", ["float32", *INT_TYPES])
def test_wrapping_reductions_match_exactly_on_integers(axes, keepdims, dtype, rng):
    x = random_array(rng, (3, 4, 5), dtype)
    check(SUMMING, [x], _reduce_attrs(axes, keepdims), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axes,keepdims", AXES_FORMS)
@pytest.mark.parametrize("dtype", [*FLOAT_TYPES, "int32"])
def test_float_math_reductions(axes, keepdims, dtype, rng):
    x = random_array(rng, (3, 4, 5), dtype, low=1, high=9) if dtype[0] in "iu" else \
        np.abs(random_array(rng, (3, 4, 5), dtype)) + 0.25  # LogSum needs positive sums
    check(FLOAT_MATH, [x], _reduce_attrs(axes, keepdims), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axes,keepdims", AXES_FORMS)
@pytest.mark.parametrize("dtype", ["float64", "int8", "uint32", "bool"])
def test_max_and_min(axes, keepdims, dtype, rng):
    x = random_array(rng, (3, 4, 5), dtype)
    check(["ReduceMax", "ReduceMin"], [x], _reduce_attrs(axes, keepdims))


@pytest.mark.parametrize("dtype", FLOAT_TYPES)
def test_nan_propagates_like_numpy(dtype, rng):
    x = with_specials(random_array(rng, (4, 6), dtype))
    x[2, 3] = np.nan
    check(["ReduceMax", "ReduceMin", "ReduceLogSumExp", "ReduceSum"], [x],
          {"axes": [1], "keepdims": 0})
    check(["ReduceMax", "ReduceMin"], [x], {"axes": [0]})


def test_log_sum_exp_is_stable_and_handles_infinite_slices():
    x = np.array([[1000.0, 1001.0, 999.0], [-np.inf, -np.inf, -np.inf],
                  [np.inf, 0.0, 1.0], [-1000.0, -1001.0, -1002.0]], np.float32)
    check("ReduceLogSumExp", [x], {"axes": [1]})


@pytest.mark.parametrize("dtype", ["float32", "int32", "uint8"])
@pytest.mark.parametrize("shape,axes", [((5, 7, 9), [0, 2]), ((2, 300), [1]),
                                        ((2, PRODUCT_CHUNK), [1])])
def test_product_tree_over_long_axes(dtype, shape, axes, rng):
    x = _near_one(rng, shape, dtype) if dtype == "float32" else random_array(rng, shape, dtype)
    check("ReduceProd", [x], {"axes": axes, "keepdims": 0}, rtol=1e-5, atol=1e-6)


def test_noop_with_empty_axes_is_elementwise(rng):
    x = random_array(rng, (3, 4), "float32")
    check(["ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceMax"], [x],
          {"noop_with_empty_axes": 1})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceLogSumExp", "ReduceProd", "ReduceMax"])
def test_rank_zero_input(op):
    node = helper.make_node(op, ["x"], ["y"], keepdims=0)
    model = make_model([node], [("x", "float32", ())], [("y", "float32", ())])
    ours, reference = _compiled_without_fallback(model, np.array(1.5, np.float32))
    assert_same(ours, reference)


@pytest.mark.parametrize("op,dtype", [
    *((op, dtype) for op in SUMMING + FLOAT_MATH + ["ReduceMax", "ReduceMin"]
      for dtype in ("float32", "int32")),
    ("ReduceMax", "bool"), ("ReduceMin", "bool")])
def test_reductions_over_no_elements_give_the_reference_constant(op, dtype):
    # the input is not read at all, yet stays a kernel parameter
    got, expected = _run_te(op, [np.zeros((2, 0, 3), dtype)], {"axes": [1], "keepdims": 0})
    assert_same(got, expected)


def test_mean_truncates_integer_quotients(rng):
    x = np.array([[-7, 0, 2], [5, 5, 6], [-1, -1, 1]], np.int32)
    check("ReduceMean", [x], {"axes": [1], "keepdims": 0})


def _fallback_reason(op, inputs, attrs):
    """The reason the llvm target gives for running ``op`` on NumPy."""
    values = [Value(f"in{k}", TensorType(a.shape, a.dtype.name)) for k, a in enumerate(inputs)]
    definition = get_op(op)
    attrs = definition.normalize_attrs(attrs)
    results = definition.run(inputs, attrs)
    outputs = [Value(f"out{k}", TensorType(r.shape, r.dtype.name))
               for k, r in enumerate(results)]
    body = Graph(values, outputs, [Node(op, values, outputs, attrs, name=op.lower())])
    target = LLVMTarget()
    target.build(Node("function", values, outputs, name="f", body=body))
    return target.fallbacks.get("f", "")


@pytest.mark.parametrize("op,x,attrs,reason", [
    ("ReduceMean", np.ones((2, 3), np.int64), {"axes": [1]}, "64-bit integers"),
    ("ReduceSum", np.ones((2, 0, 3), np.float32), {"axes": [2]}, "empty tensor"),
    ("ReduceSum", np.ones((2, 3), np.float16), {"axes": [1]}, "float16"),
    ("Softmax", np.ones((2, 3), np.float16), {}, "float16"),
])
def test_unsupported_forms_fall_back_with_a_reason(op, x, attrs, reason):
    assert reason in _fallback_reason(op, [x], attrs)


# ------------------------------------------------- axes from shapes (constant axes input)


@pytest.mark.parametrize("in_shape,out_shape,count,keepdims,axes", [
    ((3, 4, 5), (3, 1, 5), 1, True, (1,)),
    ((3, 1, 5), (1, 1, 1), 3, True, (0, 2)),
    ((3, 4, 5), (3, 5), 1, False, (1,)),
    ((3, 4, 5), (4,), 2, False, (0, 2)),
    ((3, 1, 5), (3, 5), 1, False, (1,)),
    ((3, 1, 1), (3, 1), 1, False, (1,)),  # either size-1 axis: the same values
    ((2, 6), (), 2, False, (0, 1)),
])
def test_axes_told_from_shapes(in_shape, out_shape, count, keepdims, axes):
    assert _axes_from_shapes("ReduceSum", in_shape, out_shape, count, keepdims) == axes


@pytest.mark.parametrize("in_shape,out_shape,count", [((3, 2, 2), (3, 2), 1),
                                                      ((4, 4), (4,), 1)])
def test_ambiguous_axes_are_refused(in_shape, out_shape, count):
    with pytest.raises(CompileError, match="cannot be told"):
        _axes_from_shapes("ReduceSum", in_shape, out_shape, count, False)


# ---------------------------------------------------------------- ArgMax / ArgMin


@pytest.mark.parametrize("select_last_index", [0, 1])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("axis", [0, -1])
@pytest.mark.parametrize("dtype", ["float32", "int8", "uint16"])
def test_arg_extremes_with_ties(select_last_index, keepdims, axis, dtype, rng):
    x = random_array(rng, (4, 5, 6), dtype, low=0, high=3) if dtype[0] in "iu" else \
        rng.integers(-2, 3, (4, 5, 6)).astype(dtype)  # few distinct values: many ties
    attrs = {"axis": axis, "keepdims": keepdims, "select_last_index": select_last_index}
    check(["ArgMax", "ArgMin"], [x], attrs)


@pytest.mark.parametrize("select_last_index", [0, 1])
def test_arg_extremes_pick_nan_like_numpy(select_last_index, rng):
    x = random_array(rng, (3, 6), "float32")
    x[0, [1, 4]] = np.nan
    x[1, 2] = np.inf
    x[2, :] = -np.inf
    check(["ArgMax", "ArgMin"], [x], {"axis": 1, "select_last_index": select_last_index})


# ---------------------------------------------------------------- softmax family


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", FLOAT_TYPES)
def test_softmax_family(axis, dtype, rng):
    x = random_array(rng, (3, 4, 7), dtype)
    check(["Softmax", "LogSoftmax", "Hardmax"], [x], {"axis": axis})


def test_softmax_family_on_large_and_infinite_values():
    x = np.array([[0, 1, 2, 3], [10000, 10001, 10002, 10003],
                  [-np.inf, -np.inf, -np.inf, -np.inf], [-np.inf, 0, 1, -np.inf],
                  [5, 5, 5, 5]], np.float32)
    check(["Softmax", "LogSoftmax", "Hardmax"], [x], {"axis": 1})


def test_softmax_family_on_nan_and_infinities(rng):
    x = with_specials(random_array(rng, (4, 6), "float32"))
    x[2, 1], x[3, 0] = np.nan, np.inf
    check(["Softmax", "LogSoftmax"], [x], {"axis": 1})
    check(["Softmax", "LogSoftmax"], [x], {"axis": 0})


def test_hardmax_marks_the_first_maximum_or_nan(rng):
    x = np.array([[1, 3, 3, 0], [2, 2, 2, 2], [0, np.nan, 5, np.nan]], np.float32)
    check("Hardmax", [x], {"axis": 1})


# ---------------------------------------------------------------- GlobalMaxPool


# ---------------------------------------------------------------- CumSum


def _run_te(op, inputs, attrs):
    """``op``'s compute over placeholders of ``inputs``, scheduled as the llvm target
    schedules it, compiled and run with every input as a parameter (lowering accepts
    parameters the kernel never reads); returns its outputs and the reference's."""
    definition = get_op(op)
    attrs = definition.normalize_attrs(attrs)
    expected = definition.run(inputs, attrs)
    out_types = [TensorType(e.shape, e.dtype.name) for e in expected]
    params = [te.placeholder(a.shape, a.dtype.name, f"in{k}") for k, a in enumerate(inputs)]
    outputs = compute_of(op)(params, attrs, out_types)
    schedule = _schedule(ExpressedFunction(params, [], outputs), active_cpu())
    prim = te.lower(schedule, params + outputs, name="kernel")
    kernel = build_module([prim], name="kernel")["kernel"]
    got = [np.empty(e.shape, e.dtype) for e in expected]
    kernel(*inputs, *got)
    return got, expected


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("dtype", ["float32", "int8", "uint64"])
def test_cumsum_rank_one(exclusive, reverse, dtype, rng):
    x = random_array(rng, (37,), dtype)
    got, expected = _run_te("CumSum", [x, np.array(0)], {"exclusive": exclusive,
                                                         "reverse": reverse})
    assert_same(got, expected, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- the whole pipeline


def _compiled_without_fallback(model, x):
    ours = heterocc.compile(model, target="llvm")
    reference = heterocc.compile(model, target="reference")
    assert ours.fallbacks == {}
    return ours.run([x]), reference.run([x])


@pytest.mark.parametrize("op,attrs", [
    ("Softmax", {"axis": 1}), ("LogSoftmax", {"axis": -1}), ("Hardmax", {"axis": 0}),
    ("ArgMax", {"axis": 1, "keepdims": 0}), ("ArgMin", {"axis": 2, "select_last_index": 1}),
    ("ReduceLogSumExp", {"keepdims": 0}), ("ReduceMax", {"keepdims": 1}),
])
def test_through_compile(op, attrs, rng):
    x = random_array(rng, (2, 5, 6), "float32")
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    out_dtype = "int64" if op.startswith("Arg") else "float32"
    model = make_model([node], [("x", "float32", (2, 5, 6))], [("y", out_dtype, None)])
    ours, reference = _compiled_without_fallback(model, x)
    assert_same(ours, reference)


def test_softmax_after_matmul_fuses_and_compiles(rng):
    """A softmax fed by an elementwise epilogue: one function, several reduction anchors."""
    w = random_array(rng, (6, 6), "float32")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Mul", ["h", "two"], ["s"]),
             helper.make_node("Softmax", ["s"], ["y"], axis=-1)]
    model = make_model(nodes, [("x", "float32", (4, 6))], [("y", "float32", None)],
                       {"w": w, "two": np.full((1, 6), 2.0, np.float32)})
    ours, reference = _compiled_without_fallback(model, random_array(rng, (4, 6), "float32"))
    assert_same(ours, reference)


def test_run_compiled_reports_several_outputs(rng):
    """Several reductions of one input in one function (shared input, separate anchors)."""
    x = random_array(rng, (5, 8), "float64")
    got, expected = run_compiled([("ReduceMax", {"axes": [1]}), ("Softmax", {"axis": 0}),
                                  ("ArgMin", {"axis": 1})], [x])
    assert_same(got, expected)


@pytest.mark.parametrize("equation,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ii->i", [(4, 4)]),
    ("i,i", [(5,), (5,)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (3, 4, 2)]),
    ("abc,cd,bd->ad", [(2, 3, 4), (4, 5), (3, 5)]),
    ("ba", [(3, 4)]),
])
def test_einsum_forms(equation, shapes, rng):
    inputs = [random_array(rng, shape, "float32") for shape in shapes]
    check("Einsum", inputs, {"equation": equation}, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", ["int32", "float64"])
def test_einsum_dtypes(dtype, rng):
    inputs = [random_array(rng, (3, 4), dtype, -50, 50), random_array(rng, (4, 2), dtype,
                                                                      -50, 50)]
    check("Einsum", inputs, {"equation": "ij,jk->ik"})


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (3, 3), (2, 3, 4, 4)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_det(shape, dtype, rng):
    check("Det", [random_array(rng, shape, dtype, high=1.0)], rtol=1e-5, atol=1e-6)


def test_singular_matrix_has_a_zero_determinant():
    check("Det", [np.array([[1.0, 2.0], [2.0, 4.0]])])


def test_large_matrices_are_refused():
    with pytest.raises(CompileError, match="at most"):
        compute_of("Det")([te.placeholder((5, 5), "float32", "x")], {},
                          [TensorType((), "float32")])


FORMS = [("none", None), ("sum", None), ("mean", None), ("mean", 2), ("none", -1)]


def _targets(rng, shape, classes, ignore_index):
    target = rng.integers(0, classes, shape).astype(np.int64)
    if ignore_index is not None:
        target.reshape(-1)[::3] = ignore_index
    return target


@pytest.mark.parametrize("reduction,ignore_index,weighted,shape", [
    (reduction, ignore_index, k % 2 == 1, [(4, 5), (2, 3, 4, 2)][k // 2 % 2])
    for k, (reduction, ignore_index) in enumerate(FORMS)])
def test_negative_log_likelihood(reduction, ignore_index, weighted, shape, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    target = _targets(rng, (shape[0], *shape[2:]), shape[1], ignore_index)
    weight = rng.random(shape[1]).astype(np.float32) if weighted else None
    check("NegativeLogLikelihoodLoss", [x, target, weight],
          {"reduction": reduction, "ignore_index": ignore_index}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reduction,ignore_index,weighted", [
    ("none", None, False), ("mean", 2, True), ("sum", -1, True)])
def test_softmax_cross_entropy_gives_loss_and_log_probabilities(reduction, ignore_index,
                                                                weighted, rng):
    scores = (rng.standard_normal((3, 6, 4)) * 5).astype(np.float64)
    labels = _targets(rng, (3, 4), 6, ignore_index).astype(np.int32)
    weights = rng.random(6) if weighted else None
    check("SoftmaxCrossEntropyLoss", [scores, labels, weights],
          {"reduction": reduction, "ignore_index": ignore_index}, rtol=1e-9, atol=1e-12)


def test_every_target_ignored_gives_the_references_nan(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    check("NegativeLogLikelihoodLoss", [x, np.full(3, 1, np.int64)],
          {"reduction": "mean", "ignore_index": 1})


@pytest.mark.parametrize("largest,axis,k,dtype", [
    (1, -1, 3, "float32"), (0, 0, 2, "int64"), (1, 1, 6, "uint8"), (0, 2, 5, "float32")])
def test_topk(largest, axis, k, dtype, rng):
    x = random_array(rng, (4, 6, 5), dtype, 0, 5)  # few values: many ties
    k = min(k, x.shape[axis])
    check("TopK", [x, np.array([k], np.int64)], {"axis": axis, "largest": largest})


@pytest.mark.parametrize("largest", [0, 1])
def test_topk_with_nan(largest, rng):
    x = np.array([[1.0, np.nan, 3.0, -np.inf, np.nan, 2.0]], np.float64)
    check("TopK", [x, np.array([4], np.int64)], {"axis": 1, "largest": largest})


@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
@pytest.mark.parametrize("exclusive,reverse,shape,axis", [
    (0, 0, (37,), 0), (1, 0, (3, 5, 4), 1), (0, 1, (3, 5, 4), -1), (1, 1, (6, 2), 0)])
def test_scans_along_any_axis(op, exclusive, reverse, shape, axis, rng):
    x = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    check(op, [x, np.array(axis, np.int64)], {"exclusive": exclusive, "reverse": reverse},
          rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op,dtype", [("CumSum", "int8"), ("CumProd", "uint64"),
                                      ("CumProd", "int32")])
def test_integer_scans_wrap_exactly(op, dtype, rng):
    x = random_array(rng, (4, 9), dtype)
    check(op, [x, np.array([1], np.int32)], {"exclusive": 0, "reverse": 0})


def test_one_element_axis_is_a_copy(rng):
    x = random_array(rng, (5, 1), "float64")
    check("CumProd", [x, np.array(1, np.int64)], {"exclusive": 0, "reverse": 1})


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -1, 2])
def test_trilu(rng, upper, k):
    data = rng.standard_normal((3, 4, 5)).astype(np.float32)
    operands = [("x", data, False)]
    if k is not None:
        operands.append(("k", np.array(k, np.int64), False))
    assert_llvm_matches_reference(*single_node("Trilu", operands, {"upper": upper}))
