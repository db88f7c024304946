"""AffineGrid, GridSample and RoiAlign (core/compute/sampling.py) against the NumPy
references through the llvm target."""

from __future__ import annotations

import numpy as np
import pytest

from tests.compute.test_elementwise import check, random_array


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
