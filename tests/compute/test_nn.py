"""TE computes of the ops of core/ops/nn.py (core/compute/nn.py) against the NumPy
references through the llvm target: transposed convolution, Lp pooling, MaxUnpool, Col2Im,
spatial sampling (AffineGrid, GridSample, RoiAlign), DeformConv and GlobalMaxPool."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc import te
from heterocc.compute import compute_of
from heterocc.errors import CompileError
from heterocc.ir.types import TensorType
from heterocc.ops import get_op
from heterocc.ops.nn import conv_geometry
from tests.compute.test_elementwise import (
    check,
    random_array,
)
from tests.compute.test_reduction import FLOAT_TYPES


@pytest.mark.parametrize("attrs,x_shape,w_shape", [
    ({}, (1, 2, 4, 4), (2, 3, 3, 3)),
    ({"strides": [2, 2], "pads": [1, 0, 1, 0], "output_padding": [1, 1]}, (2, 2, 3, 4),
     (2, 2, 3, 2)),
    ({"group": 2, "dilations": [2, 1]}, (1, 4, 3, 3), (4, 1, 2, 2)),
    ({"strides": [3, 2], "auto_pad": "SAME_UPPER"}, (1, 1, 3, 3), (1, 2, 3, 3)),
    ({"strides": [2], "output_shape": [10]}, (1, 2, 4), (2, 3, 3)),
    ({"strides": [1, 2, 1]}, (1, 1, 2, 3, 2), (1, 2, 2, 2, 2)),
])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_transpose(attrs, x_shape, w_shape, bias, rng):
    x = random_array(rng, x_shape, "float32")
    w = random_array(rng, w_shape, "float32")
    b = random_array(rng, (w_shape[1] * attrs.get("group", 1),), "float32") if bias else None
    check("ConvTranspose", [x, w, b], attrs, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [2, 2]},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2], "p": 1},
    {"kernel_shape": [2, 3], "dilations": [2, 1], "ceil_mode": 1, "strides": [2, 2], "p": 3},
    {"kernel_shape": [3, 3], "auto_pad": "SAME_LOWER", "strides": [2, 2]},
])
def test_lp_pool(attrs, rng):
    check("LpPool", [random_array(rng, (2, 3, 7, 6), "float32")], attrs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_global_lp_pool(p, rng):
    check("GlobalLpPool", [random_array(rng, (2, 3, 5, 4), "float64")], {"p": p})


def _max_pool_with_indices(x, attrs):
    return get_op("MaxPool").run([x], get_op("MaxPool").normalize_attrs(attrs))


@pytest.mark.parametrize("output_shape", [None, (1, 2, 6, 7)])
def test_max_unpool_inverts_max_pool(output_shape, rng):
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    pooled, indices = _max_pool_with_indices(random_array(rng, (1, 2, 4, 6), "float32"), attrs)
    shape = None if output_shape is None else np.array(output_shape, np.int64)
    check("MaxUnpool", [pooled, indices, shape], attrs)


@pytest.mark.parametrize("image,block,attrs", [
    ([5, 6], [2, 3], {}),
    ([4, 7], [2, 3], {"strides": [2, 1], "pads": [1, 0, 1, 2], "dilations": [1, 2]}),
    ([3, 4, 5], [2, 2, 3], {}),
])
def test_col2im(image, block, attrs, rng):
    channels = 2
    strides = attrs.get("strides", [1] * len(image))
    dilations = attrs.get("dilations", [1] * len(image))
    pads = attrs.get("pads", [0] * 2 * len(image))
    counts = [(size + pads[i] + pads[i + len(image)] - (k - 1) * d - 1) // s + 1
              for i, (size, k, d, s) in enumerate(zip(image, block, dilations, strides))]
    data = random_array(rng, (2, channels * int(np.prod(block)), int(np.prod(counts))),
                        "float32")
    check("Col2Im", [data, np.array(image, np.int64), np.array(block, np.int64)], attrs,
          rtol=1e-5, atol=1e-5)


def test_col2im_with_an_ambiguous_block_is_refused():
    """Over a 4 x 4 image, (1, 4) and (4, 1) blocks both take 4 rows per channel and slide
    to 4 positions: the shapes cannot tell them apart."""
    with pytest.raises(CompileError, match="block shape"):
        compute_of("Col2Im")([te.placeholder((1, 4, 4), "float32", "x"), None, None],
                             {"strides": None, "dilations": None, "pads": None},
                             [TensorType((1, 1, 4, 4), "float32")])


@pytest.mark.parametrize("size", [(2, 3, 4, 5), (1, 2, 3, 4, 2)])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_affine_grid(size, align_corners, rng):
    spatial = len(size) - 2
    theta = random_array(rng, (size[0], spatial, spatial + 1), "float32", high=1.0)
    check("AffineGrid", [theta, np.array(size, np.int64)], {"align_corners": align_corners},
          rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_2d(mode, padding_mode, align_corners, rng):
    x = random_array(rng, (2, 3, 4, 5), "float32")
    # coordinates past [-1, 1] exercise the padding modes
    grid = (rng.random((2, 3, 6, 2)) * 3.2 - 1.6).astype(np.float32)
    check("GridSample", [x, grid], {"mode": mode, "padding_mode": padding_mode,
                                    "align_corners": align_corners}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_grid_sample_3d(mode, rng):
    x = random_array(rng, (1, 2, 3, 4, 5), "float64")
    grid = rng.random((1, 2, 3, 2, 3)) * 2.4 - 1.2
    check("GridSample", [x, grid], {"mode": mode, "padding_mode": "zeros"})


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("transformation", ["half_pixel", "output_half_pixel"])
def test_roi_align(mode, transformation, rng):
    x = random_array(rng, (2, 3, 8, 9), "float32")
    rois = np.array([[0.5, 1.0, 6.0, 7.5], [2.0, 0.0, 3.0, 2.0], [-2.0, -1.0, 10.0, 12.0]],
                    np.float32)
    check("RoiAlign", [x, rois, np.array([0, 1, 1], np.int64)],
          {"mode": mode, "coordinate_transformation_mode": transformation,
           "output_height": 3, "output_width": 2, "sampling_ratio": 2, "spatial_scale": 0.9},
          rtol=1e-5, atol=1e-5)


def _conv_out(x_shape, w_shape, attrs):
    plain = {k: v for k, v in attrs.items() if k not in ("offset_group",)}
    return conv_geometry(x_shape, w_shape, plain)[4]


@pytest.mark.parametrize("attrs,x_shape,w_shape", [
    ({}, (1, 2, 4, 4), (3, 2, 2, 2)),
    ({"pads": [1, 1, 1, 1], "strides": [2, 1], "offset_group": 2}, (2, 4, 5, 4), (2, 4, 3, 2)),
    ({"group": 2, "dilations": [1, 2]}, (1, 4, 5, 5), (4, 2, 2, 2)),
    ({"group": 2, "offset_group": 2, "pads": [0, 1, 1, 0]}, (1, 4, 4, 3), (2, 2, 2, 2)),
    ({"strides": [2], "pads": [1, 1]}, (1, 2, 7), (2, 2, 3)),
])
@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_deform_conv(attrs, x_shape, w_shape, with_mask, with_bias, rng):
    out = _conv_out(x_shape, w_shape, attrs)
    rank = len(out)
    taps = attrs.get("offset_group", 1) * int(np.prod(w_shape[2:]))
    x = random_array(rng, x_shape, "float32")
    w = random_array(rng, w_shape, "float32")
    # offsets of a few pixels move taps between pixels and past the borders
    offset = (rng.standard_normal((x_shape[0], taps * rank, *out)) * 1.5).astype(np.float32)
    bias = random_array(rng, (w_shape[0],), "float32") if with_bias else None
    mask = rng.random((x_shape[0], taps, *out)).astype(np.float32) if with_mask else None
    check("DeformConv", [x, w, offset, bias, mask], attrs, rtol=1e-5, atol=1e-4)


def test_deform_conv_float64_whole_pixel_offsets(rng):
    """Integer offsets land exactly on pixels (fraction 0) and past the image's edge."""
    x = random_array(rng, (1, 3, 4, 5), "float64")
    w = random_array(rng, (2, 3, 2, 2), "float64")
    offset = rng.integers(-3, 4, (1, 8, 3, 4)).astype(np.float64)
    check("DeformConv", [x, w, offset], {})


@pytest.mark.parametrize("dtype", FLOAT_TYPES)
@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (1, 2, 7), (2, 3, 2, 3, 2)])
def test_global_max_pool(dtype, shape, rng):
    x = random_array(rng, shape, dtype)
    x.reshape(-1)[3] = np.nan
    check("GlobalMaxPool", [x])
