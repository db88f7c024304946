"""Shape and data-movement ops (core/ops/tensor.py) against onnx.reference."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, numpy_helper
from single_node_oracle import (
    check_inferred,
    compare_with_onnx,
    data,
    infer,
    ints,
    onnx_outputs,
    registry_outputs,
)

from heterocc.errors import HeteroccError, InputError, TypeInferenceError
from heterocc.ops import FusionKind, ShapeOperandError, get_op

# --------------------------------------------------------------------------- Reshape, Flatten


@pytest.mark.parametrize("in_shape,shape,allowzero", [
    ((2, 3, 4), (6, 4), 0), ((2, 3, 4), (-1, 2, 3), 0), ((2, 3, 4), (0, -1), 0),
    ((2, 3, 4), (24,), 1), ((0, 3), (3, 0), 1), ((2, 3, 4), (2, 0, 2, 2), 0)])
def test_reshape_matches_onnx(in_shape, shape, allowzero):
    compare_with_onnx("Reshape", [data(in_shape), ints(*shape)], {"allowzero": allowzero})


def test_reshape_rejects_wrong_element_count():
    with pytest.raises(TypeInferenceError, match=r"Reshape.*cannot reshape \(2, 3\)"):
        infer("Reshape", [data((2, 3)), ints(4, 2)])


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
def test_flatten_matches_onnx(axis):
    compare_with_onnx("Flatten", [data((2, 3, 4))], {"axis": axis})


def test_flatten_rejects_axis_out_of_range():
    with pytest.raises(TypeInferenceError, match=r"Flatten.*axis 4 is out of range"):
        infer("Flatten", [data((2, 3, 4))], {"axis": 4})


# ------------------------------------------------------------------------ Transpose, Concat


@pytest.mark.parametrize("perm", [None, [0, 2, 1], [2, 0, 1], [1, 0, 2]])
def test_transpose_matches_onnx(perm):
    attrs = {} if perm is None else {"perm": perm}
    compare_with_onnx("Transpose", [data((2, 3, 4), np.int32)], attrs)


def test_transpose_rejects_non_permutation():
    with pytest.raises(TypeInferenceError, match=r"perm \[0, 0, 1\] is not a permutation"):
        infer("Transpose", [data((2, 3, 4))], {"perm": [0, 0, 1]})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_matches_onnx(axis):
    shapes = [(2, 3, 4), (2, 3, 4), (2, 3, 4)]
    inputs = []
    for i, shape in enumerate(shapes):
        shape = list(shape)
        shape[axis] += i
        inputs.append(data(tuple(shape), np.float16, seed=i))
    compare_with_onnx("Concat", inputs, {"axis": axis})


def test_concat_rejects_mismatched_shapes_and_dtypes():
    with pytest.raises(TypeInferenceError, match=r"input 1 of shape \(2, 4\) does not match"):
        infer("Concat", [data((2, 3)), data((2, 4))], {"axis": 0})
    with pytest.raises(TypeInferenceError, match="input 1 is int32 but input 0 is float32"):
        infer("Concat", [data((2, 3)), data((2, 3), np.int32)], {"axis": 0})


# ------------------------------------------------------------------------------------ Split


@pytest.mark.parametrize("sizes,axis", [([1, 2, 3], 1), ([4, 2], -1), ([0, 6], 1)])
def test_split_with_sizes_input_matches_onnx(sizes, axis):
    x = data((3, 6)) if axis == 1 else data((2, 6))
    compare_with_onnx("Split", [x, ints(*sizes)], {"axis": axis}, num_outputs=len(sizes))


@pytest.mark.parametrize("num_outputs,dim", [(3, 6), (3, 7), (4, 10), (1, 5)])
def test_split_num_outputs_matches_onnx(num_outputs, dim):
    x = data((dim, 2))
    compare_with_onnx("Split", [x], {"num_outputs": num_outputs}, num_outputs=num_outputs)


def test_split_attribute_of_old_opsets():
    x = data((5, 2))
    compare_with_onnx("Split", [x], {"split": [2, 3]}, num_outputs=2, opset=11)


def test_split_equal_parts_infers_from_output_count():
    types = infer("Split", [data((6, 2))], num_outputs=3)
    assert [t.shape for t in types] == [(2, 2)] * 3


def test_split_errors():
    with pytest.raises(TypeInferenceError, match=r"split sizes \[2, 2\] must .* sum to .* 6"):
        infer("Split", [data((6, 2)), ints(2, 2)], num_outputs=2)
    with pytest.raises(TypeInferenceError, match="3 split sizes .* node has 2 outputs"):
        infer("Split", [data((6, 2)), ints(2, 2, 2)], num_outputs=2)
    with pytest.raises(InputError, match="Split: needs split sizes"):
        get_op("Split").run([data((6, 2))], get_op("Split").normalize_attrs({}))


# ------------------------------------------------------------------------------------ Slice

SLICE_CASES = [
    ([0, 1], [2, 3], None, None),
    ([1], [100], [1], None),
    ([-1], [-100], [0], [-1]),
    ([3, -2], [0, 0], [1, 2], [-1, -2]),
    ([-100, 0], [100, 5], [0, 2], [2, 3]),
    ([5], [1], [2], [1]),
    ([0], [-1], [-1], None),
    ([10], [-10], [1], [-3]),
]


@pytest.mark.parametrize("starts,ends,axes,steps", SLICE_CASES)
def test_slice_matches_onnx(starts, ends, axes, steps):
    x = data((4, 5, 6))
    inputs = [x, ints(*starts), ints(*ends), None if axes is None else ints(*axes),
              None if steps is None else ints(*steps)]
    if axes is None and steps is None:
        inputs = inputs[:3]
    elif steps is None:
        inputs = inputs[:4]
    compare_with_onnx("Slice", inputs)


def test_slice_negative_step_clamps_start_into_the_axis():
    # The spec clamps a backward start to [0, dim - 1], so a start before the axis still
    # yields element 0 (NumPy slicing, and so onnx.reference, yields nothing there).
    x = data((3, 4))
    (got,) = check_inferred("Slice", [x, ints(-10), ints(-20), ints(1), ints(-1)])
    np.testing.assert_array_equal(got, x[:, :1])


def test_slice_attributes_of_opset_1():
    x = data((4, 5))
    compare_with_onnx("Slice", [x], {"starts": [1, 0], "ends": [3, -1], "axes": [0, 1]},
                      opset=9)


def test_slice_errors():
    x = data((4, 5))
    with pytest.raises(TypeInferenceError, match="step 0 on axis 0"):
        infer("Slice", [x, ints(0), ints(2), ints(0), ints(0)])
    with pytest.raises(TypeInferenceError, match=r"axes \[0, 0\] must be distinct"):
        infer("Slice", [x, ints(0, 0), ints(2, 2), ints(0, 0)])
    with pytest.raises(ShapeOperandError):
        infer("Slice", [x, ints(0), ints(2)], constant=[0, 1])


# ---------------------------------------------------------------- Squeeze, Unsqueeze, Expand, Tile


@pytest.mark.parametrize("axes", [None, [0], [-1], [0, 3]])
def test_squeeze_matches_onnx(axes):
    x = data((1, 3, 4, 1))
    compare_with_onnx("Squeeze", [x] if axes is None else [x, ints(*axes)])


def test_squeeze_and_unsqueeze_attributes_of_old_opsets():
    compare_with_onnx("Squeeze", [data((1, 3, 1))], {"axes": [2]}, opset=11)
    compare_with_onnx("Unsqueeze", [data((3, 2))], {"axes": [0, -1]}, opset=11)


def test_squeeze_rejects_non_unit_axis():
    with pytest.raises(TypeInferenceError, match=r"cannot squeeze axis 1 of size 3"):
        infer("Squeeze", [data((1, 3)), ints(1)])


@pytest.mark.parametrize("axes", [[0], [-1], [0, 3], [1, 3, 2], [-3]])
def test_unsqueeze_matches_onnx(axes):
    compare_with_onnx("Unsqueeze", [data((3, 4)), ints(*axes)])


def test_unsqueeze_rejects_axis_beyond_output_rank():
    with pytest.raises(TypeInferenceError, match=r"axes \(of the rank-3 output\) \[3\] must be"):
        infer("Unsqueeze", [data((3, 4)), ints(3)])


@pytest.mark.parametrize("in_shape,shape", [((3, 1), (2, 3, 4)), ((1, 4), (3, 1)),
                                             ((2, 3), (3,)), ((1,), (0,))])
def test_expand_matches_onnx(in_shape, shape):
    compare_with_onnx("Expand", [data(in_shape, np.int8), ints(*shape)])


def test_expand_rejects_incompatible_shape():
    with pytest.raises(TypeInferenceError, match="do not broadcast"):
        infer("Expand", [data((2, 3)), ints(4, 3)])


@pytest.mark.parametrize("repeats", [[1, 1], [2, 3], [0, 2]])
def test_tile_matches_onnx(repeats):
    compare_with_onnx("Tile", [data((2, 3), np.uint8), ints(*repeats)])


def test_tile_rejects_wrong_repeat_count():
    with pytest.raises(TypeInferenceError, match=r"repeats \[2\] must be 2 non-negative"):
        infer("Tile", [data((2, 3)), ints(2)])


# -------------------------------------------------------------------------------------- Pad


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [[1, 2, 0, 2, 1, 2], [0, 0, 2, 0, 0, 1], [2, 3, 4, 2, 3, 4]])
def test_pad_matches_onnx(mode, pads):
    x = data((3, 4, 5))
    inputs = [x, ints(*pads)]
    if mode == "constant":
        inputs.append(np.array(2.5, np.float32))
    compare_with_onnx("Pad", inputs, {"mode": mode})


@pytest.mark.parametrize("mode", ["constant", "edge"])
def test_pad_negative_pads_crop(mode):
    # onnx.reference rejects negative pads; for these modes cropping after padding with the
    # positive part is an equivalent oracle.
    x = data((3, 4, 5))
    pads = [-1, 1, 0, 1, -2, 2]
    (got,) = check_inferred("Pad", [x, ints(*pads)], {"mode": mode})
    grown = np.pad(x, [(0, 1), (1, 0), (0, 2)], mode=mode)
    np.testing.assert_array_equal(got, grown[1:, :-2, :])


@pytest.mark.parametrize("mode", ["constant", "edge"])
def test_pad_with_axes_input_matches_onnx(mode):
    x = data((3, 4, 5), np.int32)
    compare_with_onnx("Pad", [x, ints(1, 2, 0, 3), None, ints(-1, 0)], {"mode": mode})


def test_pad_attributes_of_opset_2():
    x = data((2, 3))
    compare_with_onnx("Pad", [x], {"pads": [0, 1, 1, 0], "value": 1.5}, opset=10)


def test_pad_errors():
    x = data((2, 3))
    with pytest.raises(TypeInferenceError, match=r"pads \[1, 1\] must have 2 x 2 entries"):
        infer("Pad", [x, ints(1, 1)])
    with pytest.raises(TypeInferenceError, match="reflect pads .* smaller than its 2 entries"):
        infer("Pad", [x, ints(2, 0, 0, 0)], {"mode": "reflect"})
    with pytest.raises(TypeInferenceError, match="mode 'mirror' is not one of"):
        infer("Pad", [x, ints(1, 0, 0, 0)], {"mode": "mirror"})


@pytest.mark.parametrize("target,axes", [([3, 4], None), ([6, 7], None), ([2, 8], None),
                                         ([5], [-1]), ([1, 2], [2, 0])])
def test_center_crop_pad_matches_onnx(target, axes):
    x = data((4, 5, 6))
    if axes is None:
        x = data((4, 5))
    attrs = {} if axes is None else {"axes": axes}
    compare_with_onnx("CenterCropPad", [x, ints(*target)], attrs)


# -------------------------------------------------------------- Shape, Size, ConstantOfShape


@pytest.mark.parametrize("start,end", [(0, None), (1, None), (-2, None), (0, -1), (-10, 10),
                                       (2, 1)])
def test_shape_matches_onnx(start, end):
    attrs = {"start": start} | ({} if end is None else {"end": end})
    compare_with_onnx("Shape", [data((2, 3, 4))], attrs)


def test_size_matches_onnx():
    compare_with_onnx("Size", [data((2, 3, 4))])
    compare_with_onnx("Size", [data((0, 3))])


@pytest.mark.parametrize("value", [None, np.array([7], np.int32), np.array([1.5], np.float16),
                                   np.array([True])])
@pytest.mark.parametrize("shape", [(2, 3), ()])
def test_constant_of_shape_matches_onnx(value, shape):
    shape_input = np.array(shape, np.int64)
    theirs_attrs = {} if value is None else {"value": numpy_helper.from_array(value)}
    (expected,) = onnx_outputs("ConstantOfShape", [shape_input], theirs_attrs)
    (inferred,), (got,) = registry_outputs(
        "ConstantOfShape", [shape_input], {} if value is None else {"value": value})
    assert (inferred.shape, inferred.dtype) == (got.shape, got.dtype.name)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


def test_constant_of_shape_rejects_negative_dims():
    with pytest.raises(TypeInferenceError, match=r"shape \[2, -1\] must be .* non-negative"):
        infer("ConstantOfShape", [ints(2, -1)])


# ------------------------------------------------------------------------ Range, EyeLike


@pytest.mark.parametrize("start,limit,delta,dtype", [
    (0, 10, 3, np.int64), (10, 4, -2, np.int32), (5, 5, 1, np.int16), (1, 0, 1, np.int64),
    (0.5, 3.2, 0.3, np.float32), (3.0, -1.0, -0.5, np.float64), (1.0, 9.0, 1.5, np.float16)])
def test_range_matches_onnx(start, limit, delta, dtype):
    inputs = [np.array(v, dtype) for v in (start, limit, delta)]
    compare_with_onnx("Range", inputs, rtol=1e-3)


def test_range_rejects_zero_delta_and_mixed_dtypes():
    with pytest.raises(TypeInferenceError, match="delta must not be 0"):
        infer("Range", [ints(0).reshape(()), ints(5).reshape(()), ints(0).reshape(())])
    with pytest.raises(TypeInferenceError, match="scalars of one dtype"):
        infer("Range", [np.array(0, np.int32), ints(5).reshape(()), ints(1).reshape(())])


@pytest.mark.parametrize("shape,k,dtype", [((3, 3), 0, None), ((3, 5), 2, None),
                                           ((4, 2), -1, TensorProto.INT32),
                                           ((2, 3), 0, TensorProto.BOOL)])
def test_eye_like_matches_onnx(shape, k, dtype):
    attrs = {"k": k} | ({} if dtype is None else {"dtype": dtype})
    compare_with_onnx("EyeLike", [data(shape)], attrs)


def test_eye_like_rejects_non_matrix():
    with pytest.raises(TypeInferenceError, match="EyeLike: input must be 2-D"):
        infer("EyeLike", [data((2, 2, 2))])


# ------------------------------------------------------------- DepthToSpace, SpaceToDepth


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("blocksize", [1, 2, 3])
def test_depth_to_space_matches_onnx(mode, blocksize):
    x = data((2, 2 * blocksize * blocksize, 3, 4))
    compare_with_onnx("DepthToSpace", [x], {"blocksize": blocksize, "mode": mode})


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
@pytest.mark.parametrize("blocksize", [1, 2])
def test_space_to_depth_inverts_depth_to_space(mode, blocksize):
    x = data((2, 3, 4 * blocksize, 2 * blocksize))
    attrs = {"blocksize": blocksize, "mode": mode}
    if mode == "DCR":
        (packed,) = compare_with_onnx("SpaceToDepth", [x], attrs)
    else:  # onnx.reference has no CRD SpaceToDepth: the inverse of DepthToSpace is the oracle
        (packed,) = registry_outputs("SpaceToDepth", [x], attrs)[1]
    (restored,) = compare_with_onnx("DepthToSpace", [packed], attrs)
    np.testing.assert_array_equal(restored, x)


def test_block_ops_reject_indivisible_dims():
    with pytest.raises(TypeInferenceError, match="5 channels are not divisible"):
        infer("DepthToSpace", [data((1, 5, 2, 2))], {"blocksize": 2})
    with pytest.raises(TypeInferenceError, match=r"spatial dims 3x4 are not divisible"):
        infer("SpaceToDepth", [data((1, 1, 3, 4))], {"blocksize": 2})


# -------------------------------------------------------------------------------- registry


@pytest.mark.parametrize("op_type", [
    "Reshape", "Flatten", "Transpose", "Concat", "Split", "Slice", "Squeeze", "Unsqueeze",
    "Expand", "Tile", "Pad", "CenterCropPad", "Shape", "Size", "ConstantOfShape", "Range",
    "EyeLike", "DepthToSpace", "SpaceToDepth"])
def test_data_movement_ops_are_injective(op_type):
    assert get_op(op_type).fusion_kind == FusionKind.INJECTIVE


def test_runtime_errors_are_heterocc_errors():
    with pytest.raises(HeteroccError, match="Tile: repeats"):
        get_op("Tile").run([data((2, 2)), ints(-1, 1)], {})


@pytest.mark.parametrize("op_type,inputs,index", [
    ("Reshape", [data((2, 3)), ints(3, 2)], 1),
    ("Split", [data((4, 2)), ints(1, 3)], 1),
    ("Slice", [data((4, 2)), ints(0), ints(2), ints(0), ints(1)], 4),
    ("Squeeze", [data((1, 2)), ints(0)], 1),
    ("Unsqueeze", [data((2,)), ints(0)], 1),
    ("Expand", [data((2, 1)), ints(2, 3)], 1),
    ("Tile", [data((2, 1)), ints(2, 3)], 1),
    ("Pad", [data((2, 1)), ints(1, 1, 1, 1)], 1),
    ("Pad", [data((2, 1)), ints(1, 1), None, ints(0)], 3),
    ("CenterCropPad", [data((2, 1)), ints(3, 3)], 1),
    ("ConstantOfShape", [ints(2, 3)], 0),
    ("Range", [ints(0).reshape(()), ints(5).reshape(()), ints(1).reshape(())], 1),
])
def test_shape_operands_that_are_not_constant_ask_for_specialization(op_type, inputs, index):
    assert index in get_op(op_type).shape_operands
    constant = [i for i in range(len(inputs)) if i != index]
    num_outputs = 2 if op_type == "Split" else 1
    with pytest.raises(ShapeOperandError) as caught:
        infer(op_type, inputs, num_outputs=num_outputs, constant=constant)
    assert caught.value.value_index == index


# ------------------------------------------------------------------------------ BitCast

@pytest.mark.parametrize("source,to", [
    (np.float32, TensorProto.INT32),
    (np.int32, TensorProto.FLOAT),
    (np.uint16, TensorProto.FLOAT16),
    (np.float64, TensorProto.UINT64),
    (np.int8, TensorProto.UINT8),
    (np.int16, TensorProto.BFLOAT16),
])
def test_bitcast_matches_onnx(source, to):
    raw = np.random.default_rng(0).integers(0, 256, 12 * np.dtype(source).itemsize, np.uint8)
    compare_with_onnx("BitCast", [raw.view(source).reshape(3, 4)], {"to": to})


def test_bitcast_bool_to_uint8_matches_onnx():
    compare_with_onnx("BitCast", [np.array([True, False, True])], {"to": TensorProto.UINT8})


def test_bitcast_keeps_sub_byte_bit_patterns():
    x = np.array([15, 8, 7, 0], dtype=ml_dtypes.uint4)
    out = check_inferred("BitCast", [x], {"to": TensorProto.INT4})[0]
    assert out.dtype == ml_dtypes.int4
    np.testing.assert_array_equal(out.astype(np.int8), [-1, -8, 7, 0])


def test_bitcast_rejects_different_widths():
    with pytest.raises(TypeInferenceError, match=r"float32 \(32 bits\) as int16 \(16 bits\)"):
        infer("BitCast", [np.zeros(3, np.float32)], {"to": TensorProto.INT16})


def test_bitcast_rejects_strings():
    with pytest.raises(TypeInferenceError, match="no fixed bit width"):
        infer("BitCast", [np.zeros(3, np.float64)], {"to": TensorProto.STRING})


def test_bitcast_requires_to():
    with pytest.raises(TypeInferenceError, match="'to' is required"):
        infer("BitCast", [np.zeros(3, np.float32)])
