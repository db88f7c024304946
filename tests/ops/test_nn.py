"""Convolution, matmul, pooling and sampling ops (core/ops/nn.py) against onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest
from onnxruntime_oracle import onnxruntime_outputs
from single_node_oracle import check_inferred, compare_with_onnx, infer, normal, onnx_outputs, rng

from heterocc.errors import TypeInferenceError
from heterocc.ops import FusionKind, ShapeOperandError, get_op

# --------------------------------------------------------------------------- ConvTranspose


@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((1, 2, 4, 4), (2, 3, 3, 3), {}),
    ((2, 3, 3, 5), (3, 2, 2, 3), {"strides": [2, 1]}),
    ((1, 2, 5), (2, 3, 3), {"strides": [2], "dilations": [2], "pads": [1, 2]}),
    ((1, 1, 3, 3), (1, 2, 3, 3), {"strides": [3, 2], "output_padding": [1, 1]}),
    ((1, 1, 3, 3), (1, 2, 3, 3), {"strides": [2, 2], "output_shape": [8, 7]}),
    ((1, 1, 3, 4), (1, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 1, 3, 4), (1, 2, 2, 3), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 2, 2, 2), (2, 1, 2, 2, 2), {"strides": [1, 2, 1]}),
])
def test_conv_transpose_matches_onnx(x_shape, w_shape, attrs):
    bias = normal((w_shape[1] * attrs.get("group", 1),), seed=2)
    compare_with_onnx("ConvTranspose", [normal(x_shape), normal(w_shape, seed=1), bias], attrs,
                      rtol=1e-4, atol=1e-5)


def test_grouped_conv_transpose_is_per_group_conv_transpose():
    # ONNX's reference only handles one output channel per group, so check groups one by one
    x, w = normal((2, 4, 3, 5)), normal((4, 3, 2, 3), seed=1)
    attrs = {"strides": [2, 1], "pads": [0, 1, 1, 0]}
    out = check_inferred("ConvTranspose", [x, w], {**attrs, "group": 2})[0]
    halves = [onnx_outputs("ConvTranspose", [x[:, g * 2:(g + 1) * 2], w[g * 2:(g + 1) * 2]],
                           attrs)[0] for g in range(2)]
    np.testing.assert_allclose(out, np.concatenate(halves, axis=1), rtol=1e-5, atol=1e-5)


def test_conv_transpose_rejects_mismatched_channels():
    with pytest.raises(TypeInferenceError, match="C_in x C_out/group"):
        infer("ConvTranspose", [normal((1, 3, 4, 4)), normal((2, 2, 3, 3))])


# --------------------------------------------------------------------------- MatMul, Gemm


@pytest.mark.parametrize("a_shape,b_shape", [
    ((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)),
    ((2, 1, 3, 4), (5, 4, 2)), ((1, 3, 4), (2, 4, 6)),
])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.float16])
def test_matmul_matches_onnx(a_shape, b_shape, dtype):
    a = rng(0).integers(-5, 5, a_shape).astype(dtype)
    b = rng(1).integers(-5, 5, b_shape).astype(dtype)
    compare_with_onnx("MatMul", [a, b], rtol=1e-3)


def test_matmul_rejects_inner_mismatch():
    with pytest.raises(TypeInferenceError, match=r"inner dimensions differ: \(3, 4\) @ \(5, 2\)"):
        infer("MatMul", [normal((3, 4)), normal((5, 2))])


@pytest.mark.parametrize("attrs,c_shape", [
    ({}, (3, 5)), ({"transA": 1}, (5,)), ({"transB": 1, "alpha": 0.5, "beta": 2.0}, (1, 5)),
    ({"transA": 1, "transB": 1}, ()), ({"alpha": 2.0}, None),
])
def test_gemm_matches_onnx(attrs, c_shape):
    a = normal((4, 3) if attrs.get("transA") else (3, 4))
    b = normal((5, 4) if attrs.get("transB") else (4, 5), seed=1)
    c = None if c_shape is None else normal(c_shape, seed=2)
    compare_with_onnx("Gemm", [a, b, c], attrs, rtol=1e-5)


def test_gemm_keeps_float16_and_int_dtypes():
    a, b = normal((2, 3), np.float16), normal((3, 4), np.float16, seed=1)
    compare_with_onnx("Gemm", [a, b, normal((4,), np.float16)], {"alpha": 0.5}, rtol=1e-3)
    ints = rng().integers(-4, 4, (2, 3)).astype(np.int32)
    compare_with_onnx("Gemm", [ints, ints.T.copy(), np.ones((2, 2), np.int32)], {})


def test_gemm_rejects_c_that_does_not_broadcast():
    with pytest.raises(TypeInferenceError, match="C .* does not broadcast"):
        infer("Gemm", [normal((3, 4)), normal((4, 5)), normal((3, 2))])


# --------------------------------------------------------------------------- pooling

POOL_CASES = [
    {"kernel_shape": [2, 2]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 0, 1]},
    {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [2, 2], "dilations": [2, 1]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
    {"kernel_shape": [2, 3], "strides": [1, 2], "auto_pad": "SAME_LOWER"},
    {"kernel_shape": [2, 2], "auto_pad": "VALID", "strides": [2, 1]},
]


def check_max_pool_indices(x, y, indices):
    """Indices must address, in the flattened input, the maxima MaxPool returned."""
    assert indices.dtype == np.int64 and indices.shape == y.shape
    np.testing.assert_array_equal(x.reshape(-1)[indices], y)


# ONNX's reference gets SAME_LOWER with unequal strides wrong (its output is too small)
@pytest.mark.parametrize("attrs", [a for a in POOL_CASES if a.get("auto_pad") != "SAME_LOWER"])
def test_max_pool_matches_onnx_with_indices(attrs):
    x = normal((2, 3, 5, 7))
    y, indices = check_inferred("MaxPool", [x], attrs, num_outputs=2)
    check_max_pool_indices(x, y, indices)
    # ONNX's reference computes Indices only on its strided path
    strided = attrs.get("strides", [1, 1]) != [1, 1]
    compare_with_onnx("MaxPool", [x], attrs, num_outputs=2 if strided else 1)


def test_max_pool_column_major_indices_and_int8():
    x = normal((1, 2, 4, 5))
    compare_with_onnx("MaxPool", [x], {"kernel_shape": [2, 2], "strides": [2, 1],
                                       "storage_order": 1}, num_outputs=2)
    ints = rng().integers(-128, 127, (1, 2, 5, 5)).astype(np.int8)
    compare_with_onnx("MaxPool", [ints], {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                                          "strides": [2, 2]}, num_outputs=2)


@pytest.mark.parametrize("attrs", POOL_CASES)
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool_matches_onnx(attrs, count_include_pad):
    attrs = {**attrs, "count_include_pad": count_include_pad}
    compare_with_onnx("AveragePool", [normal((1, 2, 6, 7))], attrs, rtol=1e-5)


@pytest.mark.parametrize("op_type,attrs", [
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [3, 3], "ceil_mode": 1,
                     "count_include_pad": 1, "pads": [1, 0, 1, 0]}),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [3, 3], "ceil_mode": 1}),
    ("LpPool", {"kernel_shape": [3, 3], "strides": [3, 3], "ceil_mode": 1}),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [3, 3], "ceil_mode": 1}),
    ("MaxPool", {"kernel_shape": [2, 3], "strides": [1, 2], "auto_pad": "SAME_LOWER"}),
    ("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 2], "storage_order": 1}),
])
def test_pools_match_onnxruntime_where_onnx_reference_errs(op_type, attrs):
    # ceil_mode windows that overflow by more than one pixel, SAME_LOWER with unequal
    # strides and unstrided Indices are wrong in onnx.reference
    x = normal((1, 2, 7, 8))
    dtypes = [np.float32, np.int64] if op_type == "MaxPool" else [np.float32]
    got = check_inferred(op_type, [x], attrs, num_outputs=len(dtypes))
    for mine, theirs in zip(got, onnxruntime_outputs(op_type, [x], attrs, dtypes)):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6)


def test_pools_in_1d_and_3d():
    compare_with_onnx("MaxPool", [normal((1, 2, 9))], {"kernel_shape": [3], "strides": [2]},
                      num_outputs=2)
    compare_with_onnx("AveragePool", [normal((1, 1, 4, 4, 4))],
                      {"kernel_shape": [2, 2, 2], "pads": [1, 0, 0, 0, 1, 1],
                       "count_include_pad": 1})


def test_average_pool_float16_stays_float16():
    compare_with_onnx("AveragePool", [normal((1, 2, 4, 4), np.float16)],
                      {"kernel_shape": [2, 2]}, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool_matches_onnx(p):
    compare_with_onnx("LpPool", [normal((1, 2, 5, 5))],
                      {"kernel_shape": [2, 3], "strides": [1, 2], "pads": [1, 1, 0, 0], "p": p},
                      rtol=1e-5)


@pytest.mark.parametrize("op_type", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools_match_onnx(op_type):
    compare_with_onnx(op_type, [normal((1, 2, 3, 5))], rtol=1e-5)


@pytest.mark.parametrize("shape", [(2, 3, 4), (1, 2, 3, 5), (1, 2, 2, 3, 2)])
def test_global_pools_match_numpy(shape):
    # ONNX's reference mis-shapes GlobalMaxPool outside 2-D and has no GlobalLpPool
    x = normal(shape)
    axes = tuple(range(2, x.ndim))
    (mean,) = check_inferred("GlobalAveragePool", [x])
    (peak,) = check_inferred("GlobalMaxPool", [x])
    (norm,) = check_inferred("GlobalLpPool", [x], {"p": 3})
    np.testing.assert_allclose(mean, x.mean(axis=axes, keepdims=True), rtol=1e-6)
    np.testing.assert_array_equal(peak, x.max(axis=axes, keepdims=True))
    expected = (np.abs(x.astype(np.float64)) ** 3).sum(axis=axes, keepdims=True) ** (1 / 3)
    np.testing.assert_allclose(norm, expected, rtol=1e-5)


def test_pools_are_reductions():
    for op_type in ("MaxPool", "AveragePool", "LpPool", "GlobalAveragePool"):
        assert get_op(op_type).fusion_kind is FusionKind.REDUCTION


def test_pool_errors_name_the_problem():
    with pytest.raises(TypeInferenceError, match="kernel_shape .* must have 2 entries"):
        infer("MaxPool", [normal((1, 1, 4, 4))], {"kernel_shape": [2]})
    with pytest.raises(TypeInferenceError, match="does not fit spatial dim 2"):
        infer("AveragePool", [normal((1, 1, 2, 2))], {"kernel_shape": [3, 3]})
    with pytest.raises(TypeInferenceError, match="attribute 'kernel_shape' is required"):
        infer("LpPool", [normal((1, 1, 4, 4))])


# --------------------------------------------------------------------------- MaxUnpool


def test_max_unpool_inverts_max_pool():
    x = normal((1, 2, 4, 6))
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    pooled, indices = compare_with_onnx("MaxPool", [x], attrs, num_outputs=2)
    compare_with_onnx("MaxUnpool", [pooled, indices], attrs)
    shape = np.array([1, 2, 5, 7], np.int64)
    out = compare_with_onnx("MaxUnpool", [pooled, indices, shape], attrs)[0]
    assert out.shape == (1, 2, 5, 7)


def test_max_unpool_output_shape_is_a_shape_operand():
    pooled = normal((1, 1, 2, 2))
    indices = np.array([[[[0, 3], [9, 14]]]], np.int64)
    shape = np.array([1, 1, 5, 5], np.int64)
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    assert get_op("MaxUnpool").shape_operands == (2,)
    with pytest.raises(ShapeOperandError):
        infer("MaxUnpool", [pooled, indices, shape], attrs, constant={0, 1})
    with pytest.raises(TypeInferenceError, match="at least the unpooled shape"):
        infer("MaxUnpool", [pooled, indices, np.array([1, 1, 3, 3], np.int64)], attrs)


# --------------------------------------------------------------------------- Col2Im


@pytest.mark.parametrize("image,block,attrs", [
    ([5, 5], [2, 2], {}),
    ([6, 5], [3, 2], {"strides": [2, 1], "pads": [1, 0, 1, 1], "dilations": [1, 2]}),
    ([4, 3, 3], [2, 2, 2], {}),
])
def test_col2im_matches_onnx(image, block, attrs):
    n = len(image)
    strides = attrs.get("strides", [1] * n)
    dilations = attrs.get("dilations", [1] * n)
    pads = attrs.get("pads", [0] * 2 * n)
    blocks = [(s + pads[i] + pads[i + n] - (k - 1) * d - 1) // st + 1
              for i, (s, k, d, st) in enumerate(zip(image, block, dilations, strides))]
    data = normal((2, 3 * int(np.prod(block)), int(np.prod(blocks))))
    compare_with_onnx("Col2Im", [data, np.array(image, np.int64), np.array(block, np.int64)],
                      attrs, rtol=1e-5)


def test_col2im_rejects_wrong_block_count():
    with pytest.raises(TypeInferenceError, match=r"must be \(N, C x 4, 16\)"):
        infer("Col2Im", [normal((1, 4, 15)), np.array([5, 5], np.int64),
                         np.array([2, 2], np.int64)])


# --------------------------------------------------------------------------- AffineGrid, GridSample


@pytest.mark.parametrize("size", [[2, 3, 4, 5], [1, 2, 3, 4, 2]])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_affine_grid_matches_onnx(size, align_corners):
    spatial = len(size) - 2
    theta = normal((size[0], spatial, spatial + 1))
    compare_with_onnx("AffineGrid", [theta, np.array(size, np.int64)],
                      {"align_corners": align_corners}, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_2d_matches_onnx(mode, padding_mode, align_corners):
    x = normal((1, 2, 4, 5))
    # coordinates beyond [-1, 1] exercise the padding modes
    grid = (rng(3).random((1, 3, 4, 2)) * 3 - 1.5).astype(np.float32)
    compare_with_onnx("GridSample", [x, grid], {"mode": mode, "padding_mode": padding_mode,
                                                "align_corners": align_corners},
                      rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_grid_sample_3d_matches_onnx(mode):
    x = normal((1, 2, 3, 4, 3))
    grid = (rng(4).random((1, 2, 2, 3, 3)) * 2.4 - 1.2).astype(np.float32)
    compare_with_onnx("GridSample", [x, grid], {"mode": mode, "padding_mode": "border"},
                      rtol=1e-4, atol=1e-5)


def test_grid_sample_accepts_opset16_mode_names():
    x = normal((1, 1, 3, 3))
    grid = (rng(5).random((1, 2, 2, 2)) * 2 - 1).astype(np.float32)
    for old, new in (("bilinear", "linear"), ("bicubic", "cubic")):
        (got,) = check_inferred("GridSample", [x, grid], {"mode": old})
        np.testing.assert_allclose(got, onnx_outputs("GridSample", [x, grid], {"mode": new})[0],
                                   rtol=1e-5, atol=1e-6)


def test_grid_sample_rejects_bad_grid():
    with pytest.raises(TypeInferenceError, match="grid .* must be"):
        infer("GridSample", [normal((1, 1, 3, 3)), normal((1, 2, 2, 3))])


# --------------------------------------------------------------------------- RoiAlign


@pytest.mark.parametrize("attrs", [
    {},
    {"output_height": 3, "output_width": 2, "sampling_ratio": 2, "spatial_scale": 0.5},
    {"mode": "max", "output_height": 2, "output_width": 2},
    {"coordinate_transformation_mode": "output_half_pixel", "output_height": 2,
     "output_width": 3},
])
def test_roi_align_matches_onnx(attrs):
    x = normal((2, 3, 6, 7))
    rois = np.array([[0.5, 0.5, 4.2, 5.1], [1.0, 0.0, 6.9, 3.3], [-1.5, 2.0, 2.0, 7.5]],
                    np.float32)
    batch = np.array([0, 1, 1], np.int64)
    compare_with_onnx("RoiAlign", [x, rois, batch], attrs, rtol=1e-4, atol=1e-5)


def test_roi_align_rejects_bad_rois():
    with pytest.raises(TypeInferenceError, match=r"rois .* must be \(num_rois, 4\)"):
        infer("RoiAlign", [normal((1, 1, 4, 4)), normal((2, 5)), np.zeros(2, np.int64)])


def test_shape_operands_are_declared():
    assert get_op("Col2Im").shape_operands == (1, 2)
    assert get_op("AffineGrid").shape_operands == (1,)
    with pytest.raises(ShapeOperandError):
        infer("AffineGrid", [normal((1, 2, 3)), np.array([1, 1, 2, 2], np.int64)], constant={0})


def test_check_inferred_for_conv_transpose_with_full_output_shape():
    out = check_inferred("ConvTranspose", [normal((1, 1, 2, 2)), normal((1, 1, 2, 2))],
                         {"strides": [2, 2], "output_shape": [1, 1, 5, 4]})[0]
    assert out.shape == (1, 1, 5, 4)


# --------------------------------------------------------------------------- DeformConv


@pytest.mark.parametrize("attrs,x_shape,w_shape", [
    ({}, (1, 2, 4, 4), (3, 2, 2, 2)),
    ({"pads": [1, 1, 1, 1], "strides": [2, 1], "offset_group": 2}, (2, 4, 5, 4), (2, 4, 3, 2)),
    ({"group": 2, "dilations": [1, 2]}, (1, 4, 5, 5), (4, 2, 2, 2)),
])
@pytest.mark.parametrize("with_mask", [False, True])
def test_deform_conv_matches_onnx(attrs, x_shape, w_shape, with_mask):
    x, w = normal(x_shape), normal(w_shape, seed=1)
    (plain,) = infer("Conv", [x, w], {k: v for k, v in attrs.items() if k != "offset_group"})
    out = plain.shape[2:]
    taps = attrs.get("offset_group", 1) * w_shape[2] * w_shape[3]
    offset = normal((x_shape[0], taps * 2, *out), seed=2) * 1.5
    mask = rng(3).random((x_shape[0], taps, *out)).astype(np.float32) if with_mask else None
    bias = normal((w_shape[0],), seed=4)
    compare_with_onnx("DeformConv", [x, w, offset, bias, mask], attrs, rtol=1e-4, atol=1e-5)


def test_deform_conv_with_zero_offsets_is_conv():
    x, w = normal((1, 2, 5, 5)), normal((3, 2, 3, 3), seed=1)
    offset = np.zeros((1, 18, 3, 3), np.float32)
    (deformed,) = check_inferred("DeformConv", [x, w, offset])
    (plain,) = check_inferred("Conv", [x, w])
    np.testing.assert_allclose(deformed, plain, rtol=1e-5, atol=1e-5)


def test_deform_conv_rejects_bad_offset_shape():
    with pytest.raises(TypeInferenceError, match=r"offset .* must have shape \(1, 8, 3, 3\)"):
        infer("DeformConv", [normal((1, 2, 4, 4)), normal((3, 2, 2, 2)),
                             normal((1, 4, 3, 3))])


def test_gemm_broadcast_attribute_of_opset6():
    a, b, c = normal((3, 4)), normal((4, 5), seed=1), normal((5,), seed=2)
    compare_with_onnx("Gemm", [a, b, c], {"broadcast": 1}, opset=6, rtol=1e-5)


# (NOTSET with output_shape is covered above; onnx.reference fails on this stride-1 form)
@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_conv_transpose_output_shape_beyond_the_taps_is_zero_padded(auto_pad):
    x, w = normal((1, 1, 3, 3)), normal((1, 1, 2, 2), seed=1)
    attrs = {"output_shape": [7, 6], "auto_pad": auto_pad}
    (y,) = compare_with_onnx("ConvTranspose", [x, w], attrs, rtol=1e-5, atol=1e-6)
    assert y.shape == (1, 1, 7, 6)
