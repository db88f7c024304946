"""Resize and Upsample (core/ops/resize.py) against onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest
from single_node_oracle import check_inferred, compare_with_onnx, infer, ints, onnx_outputs

from heterocc.errors import TypeInferenceError
from heterocc.ir.types import TensorType
from heterocc.ops import FusionKind, ShapeOperandError, get_op, infer_node_types

COORDINATE_MODES = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                    "align_corners", "asymmetric"]


def image(shape=(1, 2, 5, 6), dtype=np.float32, seed=0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * 10).astype(dtype)


def floats(*values) -> np.ndarray:
    return np.array(values, np.float32)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("coordinate_mode", COORDINATE_MODES)
@pytest.mark.parametrize("scales", [(1.0, 1.0, 2.0, 1.5), (1.0, 1.0, 0.6, 0.5)])
def test_resize_scales_match_onnx(mode, coordinate_mode, scales):
    attrs = {"mode": mode, "coordinate_transformation_mode": coordinate_mode}
    compare_with_onnx("Resize", [image(), None, floats(*scales)], attrs, rtol=1e-4,
                      atol=1e-4)


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor",
                                          "ceil"])
@pytest.mark.parametrize("coordinate_mode", ["half_pixel", "asymmetric", "align_corners"])
def test_resize_nearest_modes_match_onnx(nearest_mode, coordinate_mode):
    attrs = {"mode": "nearest", "nearest_mode": nearest_mode,
             "coordinate_transformation_mode": coordinate_mode}
    compare_with_onnx("Resize", [image(dtype=np.int32), None, None, ints(1, 2, 9, 4)], attrs)


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
@pytest.mark.parametrize("axes", [None, [2, 3], [3, 2]])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_sizes_with_aspect_policy_match_onnx(policy, axes, mode):
    sizes = ints(7, 4) if axes is not None else ints(1, 2, 7, 4)
    attrs = {"mode": mode, "keep_aspect_ratio_policy": policy}
    if axes is not None:
        attrs["axes"] = axes
    compare_with_onnx("Resize", [image(), None, None, sizes], attrs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("scales", [(1.0, 1.0, 0.5, 0.4), (1.0, 1.0, 0.7, 1.0),
                                    (1.0, 1.0, 2.0, 0.8)])
def test_resize_antialias_matches_onnx(mode, scales):
    attrs = {"mode": mode, "antialias": 1}
    compare_with_onnx("Resize", [image((1, 1, 9, 10)), None, floats(*scales)], attrs,
                      rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cubic_a", [-0.5, -0.75])
@pytest.mark.parametrize("scales", [(1.0, 1.0, 2.5, 1.7), (1.0, 1.0, 0.5, 0.8)])
def test_resize_cubic_exclude_outside_matches_onnx(cubic_a, scales):
    attrs = {"mode": "cubic", "cubic_coeff_a": cubic_a, "exclude_outside": 1}
    compare_with_onnx("Resize", [image(), None, floats(*scales)], attrs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
# ROIs whose source coordinates stay clear of rounding ties and of the input's edges, where
# float32 (onnx.reference) and float64 (ours) arithmetic could round differently.
@pytest.mark.parametrize("roi", [(0.0, 0.0, 0.2, 0.35, 1.0, 1.0, 0.8, 0.9),
                                 (0.0, 0.0, -0.27, 0.4, 1.0, 1.0, 1.13, 0.6)])
def test_resize_tf_crop_and_resize_matches_onnx(mode, roi):
    attrs = {"mode": mode, "coordinate_transformation_mode": "tf_crop_and_resize",
             "extrapolation_value": -7.0}
    compare_with_onnx("Resize", [image(), floats(*roi), None, ints(1, 2, 6, 4)], attrs,
                      rtol=1e-4, atol=1e-4)


def test_resize_negative_axes_equal_positive_ones():
    # onnx.reference does not accept negative axes; the positive spelling is the oracle.
    x = image()
    attrs = {"mode": "linear", "keep_aspect_ratio_policy": "not_larger"}
    (got,) = check_inferred("Resize", [x, None, None, ints(7, 4)], attrs | {"axes": [-1, -2]})
    (expected,) = onnx_outputs("Resize", [x, None, None, ints(7, 4)], attrs | {"axes": [3, 2]})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_tf_half_pixel_for_nn(mode):
    # Opset-11 only, and absent from onnx.reference: x_original = (x + 0.5) / scale.
    x = image((1, 1, 1, 4))
    (got,) = check_inferred("Resize", [x, None, floats(1, 1, 1, 2.5)],
                            {"mode": mode, "coordinate_transformation_mode":
                             "tf_half_pixel_for_nn"})
    coords = (np.arange(10) + 0.5) / 2.5
    if mode == "nearest":
        expected = x[..., np.clip(np.ceil(coords - 0.5), 0, 3).astype(int)]
    else:
        expected = np.interp(coords, np.arange(4), x[0, 0, 0])[None, None, None]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scales", [(1, 1, 0.3, 1), (1, 1, 0.2, 1)])
def test_resize_pytorch_half_pixel_single_output_samples_the_origin(scales):
    # The spec maps a length-1 output to coordinate 0; onnx.reference uses -0.5 (or the
    # half-pixel formula when scale * length is not exactly 1), so a hand oracle is used.
    x = image()
    attrs = {"mode": "cubic", "coordinate_transformation_mode": "pytorch_half_pixel"}
    (got,) = check_inferred("Resize", [x, None, floats(*scales)], attrs)
    np.testing.assert_allclose(got, x[:, :, :1, :], rtol=1e-6)


def test_resize_tf_crop_and_resize_with_axes_matches_onnx():
    attrs = {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize",
             "axes": [3, 2]}
    compare_with_onnx("Resize", [image(), floats(0.1, 0.2, 0.9, 0.7), None, ints(5, 3)], attrs,
                      rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.float16])
def test_resize_keeps_dtype_and_saturates_integers(dtype):
    x = np.random.default_rng(0).integers(-128, 128, (1, 1, 4, 5)).astype(np.int64)
    x = np.clip(x, np.iinfo(np.int8).min, np.iinfo(np.int8).max) + (128 if dtype == np.uint8
                                                                   else 0)
    attrs = {"mode": "cubic"}
    compare_with_onnx("Resize", [x.astype(dtype), None, floats(1, 1, 1.8, 1.4)], attrs,
                      rtol=1e-2, atol=1e-2)


def test_resize_empty_scales_mean_absent():
    x = image()
    compare_with_onnx("Resize", [x, floats(), floats(), ints(1, 2, 3, 3)], {"mode": "linear"},
                      rtol=1e-4, atol=1e-4)


def test_resize_errors():
    x = image()
    with pytest.raises(TypeInferenceError, match="exactly one of scales .* and sizes"):
        infer("Resize", [x, None, floats(1, 1, 2, 2), ints(1, 2, 10, 12)])
    with pytest.raises(TypeInferenceError, match="exactly one of scales .* and sizes"):
        infer("Resize", [x])
    with pytest.raises(TypeInferenceError, match=r"scales \[2.0, 2.0\] must have 4 entries"):
        infer("Resize", [x, None, floats(2, 2)])
    with pytest.raises(TypeInferenceError, match="antialias applies to linear and cubic"):
        infer("Resize", [x, None, floats(1, 1, 2, 2)], {"antialias": 1})
    with pytest.raises(TypeInferenceError, match="coordinate_transformation_mode 'corners'"):
        infer("Resize", [x, None, floats(1, 1, 2, 2)],
              {"coordinate_transformation_mode": "corners"})
    with pytest.raises(ShapeOperandError):
        infer("Resize", [x, None, floats(1, 1, 2, 2)], constant=[0])


# --------------------------------------------------------------------------------- Upsample


def test_upsample_nearest_matches_onnx():
    compare_with_onnx("Upsample", [image(), floats(1, 1, 2, 3)], {"mode": "nearest"},
                      opset=9)


def test_upsample_scales_attribute_of_opset_7():
    # onnx.reference only knows the opset-9 form, with scales as an input.
    x = image()
    (got,) = check_inferred("Upsample", [x], {"mode": "nearest", "scales": [1, 2, 3, 1]})
    (expected,) = onnx_outputs("Upsample", [x, floats(1, 2, 3, 1)], {"mode": "nearest"},
                               opset=9)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("mode,scales", [("nearest", (1, 1, 1.5, 2.5)),
                                         ("linear", (1, 1, 2, 1.5))])
def test_upsample_equals_asymmetric_resize(mode, scales):
    # onnx.reference implements Upsample for integer nearest scales only; Resize with
    # asymmetric coordinates (and floor rounding) is the documented equivalent.
    x = image()
    (got,) = check_inferred("Upsample", [x, floats(*scales)], {"mode": mode})
    (expected,) = onnx_outputs("Resize", [x, None, floats(*scales)],
                               {"mode": mode, "coordinate_transformation_mode": "asymmetric",
                                "nearest_mode": "floor"})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_upsample_rejects_downscaling():
    op = get_op("Upsample")
    x = image()
    with pytest.raises(TypeInferenceError, match=r"scales .* must be 4 factors >= 1"):
        infer_node_types(op, [TensorType.of(x), TensorType((4,), "float32")],
                         [x, floats(1, 1, 0.5, 1)], op.normalize_attrs({}), 1)


def test_resize_fusion_kinds():
    assert get_op("Resize").fusion_kind == FusionKind.INJECTIVE
    assert get_op("Upsample").fusion_kind == FusionKind.INJECTIVE
