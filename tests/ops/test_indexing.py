"""Gather*, Scatter*, OneHot and ReverseSequence (core/ops/indexing.py) against onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest
from single_node_oracle import check_inferred, compare_with_onnx, data, infer, normal, onnx_outputs

from heterocc.errors import InputError, TypeInferenceError
from heterocc.ops import FusionKind, get_op


def indices(shape, low, high, seed=1, dtype=np.int64) -> np.ndarray:
    return np.random.default_rng(seed).integers(low, high, shape).astype(dtype)


def run(op_type, inputs, attrs=None):
    op = get_op(op_type)
    return op.run(inputs, op.normalize_attrs(dict(attrs or {})))


# ----------------------------------------------------------------------------------- Gather


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("index_shape", [(), (3,), (2, 3)])
def test_gather_matches_onnx(axis, index_shape):
    x = data((4, 5, 6))
    dim = x.shape[axis]
    compare_with_onnx("Gather", [x, indices(index_shape, -dim, dim, dtype=np.int32)],
                      {"axis": axis})


@pytest.mark.parametrize("axis", [0, 1, -2])
def test_gather_elements_matches_onnx(axis):
    x = data((4, 5, 3), np.int16)
    dim = x.shape[axis]
    index_shape = [4, 5, 3]
    index_shape[axis] = 7
    compare_with_onnx("GatherElements", [x, indices(tuple(index_shape), -dim, dim)],
                      {"axis": axis})


def test_gather_elements_indices_may_be_smaller_off_the_axis():
    x = data((4, 5))
    idx = indices((2, 3), -4, 4)
    (got,) = check_inferred("GatherElements", [x, idx], {"axis": 0})
    np.testing.assert_array_equal(got, np.take_along_axis(x[:, :3], idx % 4, axis=0))


@pytest.mark.parametrize("data_shape,index_shape,batch_dims", [
    ((4, 5), (3, 2), 0), ((4, 5, 6), (2, 3, 1), 0), ((4, 5, 6), (3,), 0),
    ((2, 5, 6), (2, 3, 1), 1), ((2, 3, 5, 6), (2, 3, 4, 2), 2), ((2, 3, 4), (2, 2), 1)])
def test_gather_nd_matches_onnx(data_shape, index_shape, batch_dims):
    x = data(data_shape)
    depth = index_shape[-1]
    limits = data_shape[batch_dims:batch_dims + depth]
    columns = [indices(index_shape[:-1] + (1,), -d, d, seed=k) for k, d in enumerate(limits)]
    compare_with_onnx("GatherND", [x, np.concatenate(columns, axis=-1)],
                      {"batch_dims": batch_dims})


@pytest.mark.parametrize("op_type,inputs,attrs", [
    ("Gather", [data((4, 5)), np.array([1, 5])], {"axis": 1}),
    ("Gather", [data((4, 5)), np.array([-5])], {}),
    ("GatherElements", [data((4, 5)), np.array([[0, 7]])], {"axis": 1}),
    ("GatherND", [data((4, 5)), np.array([[1, -6]])], {}),
    ("ScatterElements", [data((4, 5)), np.array([[4]]), data((1, 1))], {}),
    ("ScatterND", [data((4, 5)), np.array([[9]]), data((1, 5))], {}),
])
def test_out_of_range_index_is_reported_at_inference_and_run_time(op_type, inputs, attrs):
    with pytest.raises(TypeInferenceError, match=rf"{op_type}: .*index -?\d+ is out of range"):
        infer(op_type, inputs, attrs)
    with pytest.raises(InputError, match=rf"{op_type}: .*index -?\d+ is out of range"):
        run(op_type, inputs, attrs)


def test_gather_nd_errors():
    with pytest.raises(TypeInferenceError, match=r"last dim of indices \(3\) must be in"):
        infer("GatherND", [data((4, 5)), np.zeros((2, 3), np.int64)])
    with pytest.raises(TypeInferenceError, match="first 1 dims of data"):
        infer("GatherND", [data((4, 5)), np.zeros((3, 1), np.int64)], {"batch_dims": 1})


def test_gather_rejects_float_indices():
    with pytest.raises(TypeInferenceError, match="indices must be int32 or int64"):
        infer("Gather", [data((4, 5)), np.zeros(2, np.float32)])


# ---------------------------------------------------------------------------------- Scatter


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, -1])
def test_scatter_elements_matches_onnx(reduction, axis):
    x = data((4, 5))
    dim = x.shape[axis]
    index_shape = (3, 5) if axis == 0 else (4, 3)
    if reduction == "none":  # repeated indices would leave the winner unspecified
        idx = np.stack([np.random.default_rng(k).permutation(dim)[:3] - dim * (k % 2)
                        for k in range(index_shape[1 - axis % 2])], axis=1 - axis % 2)
    else:
        idx = indices(index_shape, -dim, dim)
    compare_with_onnx("ScatterElements", [x, idx, data(index_shape, seed=2)],
                      {"axis": axis, "reduction": reduction})


def test_scatter_is_scatter_elements_of_opset_9():
    # onnx.reference has no Scatter: its successor's reference is the oracle.
    inputs = [data((3, 3)), np.array([[1, 0, -1], [0, 2, 1]]), data((2, 3), seed=3)]
    (got,) = check_inferred("Scatter", inputs, {"axis": 1})
    (expected,) = onnx_outputs("ScatterElements", inputs, {"axis": 1})
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("data_shape,idx", [
    ((4, 5, 6), [[1], [-1]]), ((4, 5, 6), [[0, 1], [3, 4], [2, -5]]),
    ((4, 5), [[[0, 0], [1, 1]], [[2, 2], [3, -1]]])])
def test_scatter_nd_matches_onnx(reduction, data_shape, idx):
    x = data(data_shape)
    idx = np.array(idx, np.int64)
    updates = data(idx.shape[:-1] + data_shape[idx.shape[-1]:], seed=4)
    compare_with_onnx("ScatterND", [x, idx, updates], {"reduction": reduction})


def test_scatter_nd_accumulates_repeated_indices():
    x = np.zeros(4, np.int32)
    (out,) = run("ScatterND", [x, np.array([[1], [1], [3]]), np.array([5, 6, 7], np.int32)],
                 {"reduction": "add"})
    np.testing.assert_array_equal(out, [0, 11, 0, 7])


def test_scatter_errors():
    with pytest.raises(TypeInferenceError, match="reduction 'avg' must be one of"):
        infer("ScatterElements", [data((2, 2)), np.zeros((1, 1), np.int64), data((1, 1))],
              {"reduction": "avg"})
    with pytest.raises(TypeInferenceError, match=r"updates float32\[2, 2\] must have the shape"):
        infer("ScatterElements", [data((2, 2)), np.zeros((1, 1), np.int64), data((2, 2))])
    with pytest.raises(TypeInferenceError, match=r"updates .* must be float32\[2, 3\]"):
        infer("ScatterND", [data((4, 3)), np.zeros((2, 1), np.int64), data((2, 2))])


# ------------------------------------------------------------------ OneHot, ReverseSequence


@pytest.mark.parametrize("axis", [-1, 0, 1, -3])
@pytest.mark.parametrize("index_dtype", [np.int64, np.float32])
def test_one_hot_matches_onnx(axis, index_dtype):
    idx = np.array([[0, 3, -1], [-4, 5, 2]], index_dtype)  # 5 is out of range: all off
    values = np.array([-2, 7], np.int32)
    compare_with_onnx("OneHot", [idx, np.array(4, np.int64), values], {"axis": axis})


def test_one_hot_errors():
    idx = np.array([0, 1])
    with pytest.raises(TypeInferenceError, match="depth 0 must be positive"):
        infer("OneHot", [idx, np.array(0), np.array([0.0, 1.0])])
    with pytest.raises(TypeInferenceError, match=r"values must be \[off_value, on_value\]"):
        infer("OneHot", [idx, np.array(2), np.array([0.0, 1.0, 2.0])])


@pytest.mark.parametrize("batch_axis,time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence_matches_onnx(batch_axis, time_axis):
    shape = [5, 5, 3]
    shape[batch_axis] = 4
    lens = np.array([1, 5, 0, 3], np.int64)
    compare_with_onnx("ReverseSequence", [data(tuple(shape)), lens],
                      {"batch_axis": batch_axis, "time_axis": time_axis})


def test_reverse_sequence_rejects_too_long_sequence():
    with pytest.raises(TypeInferenceError, match=r"sequence length 6 is out of range \[0, 5\]"):
        infer("ReverseSequence", [data((5, 2)), np.array([1, 6], np.int64)])
    with pytest.raises(InputError, match="ReverseSequence: sequence length 6"):
        run("ReverseSequence", [data((5, 2)), np.array([1, 6], np.int64)])


@pytest.mark.parametrize("op_type,kind", [
    ("Gather", FusionKind.INJECTIVE), ("GatherElements", FusionKind.INJECTIVE),
    ("GatherND", FusionKind.INJECTIVE), ("ScatterElements", FusionKind.OPAQUE),
    ("ScatterND", FusionKind.OPAQUE), ("Scatter", FusionKind.OPAQUE),
    ("OneHot", FusionKind.OPAQUE), ("ReverseSequence", FusionKind.OPAQUE)])
def test_fusion_kinds(op_type, kind):
    assert get_op(op_type).fusion_kind == kind


# ------------------------------------------------------------------------ TensorScatter

@pytest.mark.parametrize("cache_shape,update_shape,indices,attrs", [
    ((2, 3, 6, 4), (2, 3, 2, 4), [1, 4], {}),
    ((2, 3, 6, 4), (2, 3, 3, 4), [4, 5], {"mode": "circular"}),
    ((3, 5, 2), (3, 2, 2), [0, 3, 1], {"axis": 1}),
    ((2, 4, 5, 3), (2, 2, 5, 3), [2, 0], {"axis": -3}),
    ((2, 4, 7), (2, 4, 7), [0, 0], {"axis": 2}),
    ((2, 6, 3), (2, 2, 3), None, {"axis": 1}),
])
def test_tensor_scatter_matches_onnx(cache_shape, update_shape, indices, attrs):
    write_indices = None if indices is None else np.array(indices, np.int64)
    compare_with_onnx("TensorScatter",
                      [normal(cache_shape), normal(update_shape, seed=1), write_indices], attrs)


def test_tensor_scatter_of_strings_matches_onnx():
    cache = np.array([["a", "b", "c"], ["d", "e", "f"]], dtype=object)
    update = np.array([["x"], ["y"]], dtype=object)
    out = compare_with_onnx("TensorScatter", [cache, update, np.array([2, 0], np.int64)],
                            {"axis": 1})[0]
    assert out.tolist() == [["a", "b", "x"], ["y", "e", "f"]]


def test_tensor_scatter_linear_mode_refuses_to_run_past_the_cache():
    op = get_op("TensorScatter")
    inputs = [normal((2, 4, 3)), normal((2, 2, 3)), np.array([1, 3], np.int64)]
    with pytest.raises(InputError, match="mode='circular'"):
        op.run(inputs, op.normalize_attrs({"axis": 1}))


@pytest.mark.parametrize("cache_shape,update_shape,attrs,message", [
    ((2, 4, 3), (2, 2, 3), {"axis": 0}, "batch axis"),
    ((2, 4, 3), (2, 5, 3), {"axis": 1}, "may not be longer"),
    ((2, 4, 3), (2, 2, 2), {"axis": 1}, "must match past_cache"),
    ((2, 4, 3), (2, 2, 3), {"axis": 1, "mode": "ring"}, "mode 'ring'"),
    ((2, 4, 3), (2, 2, 3), {"axis": 3}, "axis 3 is out of range"),
])
def test_tensor_scatter_rejects_bad_operands(cache_shape, update_shape, attrs, message):
    with pytest.raises(TypeInferenceError, match=message):
        infer("TensorScatter", [normal(cache_shape), normal(update_shape)], attrs)


def test_tensor_scatter_checks_write_indices_shape():
    with pytest.raises(TypeInferenceError, match="write_indices"):
        infer("TensorScatter", [normal((2, 4, 3)), normal((2, 2, 3)), np.zeros(3, np.int64)])
