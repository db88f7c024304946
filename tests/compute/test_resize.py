"""Resize and Upsample (core/compute/resize.py) against the NumPy references through the
llvm target; every case must really compile unless it says why it falls back."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import heterocc
from tests.compute.test_tensor import (
    assert_llvm_matches_reference,
    ints,
    single_node,
)
from tests.conftest import make_model

_COORDINATES = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                "asymmetric", "tf_half_pixel_for_nn"]


def _resize(x, scales=None, sizes=None, **attrs):
    operands = [("x", x, False), ("roi", None, True),
                ("scales", None if scales is None else np.array(scales, np.float32), True)]
    if sizes is not None:
        operands.append(("sizes", ints(*sizes), True))
    return single_node("Resize", operands, attrs)


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor",
                                          "ceil"])
def test_resize_nearest_rounding(rng, nearest_mode):
    x = rng.standard_normal((1, 2, 4, 5)).astype(np.float32)
    attrs = {"mode": "nearest", "nearest_mode": nearest_mode}
    assert_llvm_matches_reference(*_resize(x, scales=[1, 1, 2.0, 0.6], **attrs))


@pytest.mark.parametrize("coordinates", _COORDINATES)
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_coordinate_modes(rng, coordinates, mode):
    x = rng.standard_normal((2, 2, 4, 5)).astype(np.float32)
    attrs = {"mode": mode, "coordinate_transformation_mode": coordinates}
    # scales are read at run time; sizes give a static scale
    sizes = {"sizes": [2, 2, 3, 9]} if mode == "linear" else {"scales": [1, 1, 1.75, 0.5]}
    assert_llvm_matches_reference(*_resize(x, **sizes, **attrs), rtol=1e-5)


@pytest.mark.parametrize("coordinates", ["half_pixel", "align_corners"])
def test_resize_linear_excluding_outside_taps(rng, coordinates):
    x = rng.standard_normal((1, 3, 4, 5)).astype(np.float32)
    attrs = {"mode": "linear", "coordinate_transformation_mode": coordinates,
             "exclude_outside": 1}
    assert_llvm_matches_reference(*_resize(x, scales=[1, 1, 1.75, 0.4], **attrs), rtol=1e-5)


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
def test_resize_keeps_aspect_ratio(rng, policy):
    x = rng.standard_normal((1, 1, 4, 6)).astype(np.float32)
    attrs = {"mode": "linear", "keep_aspect_ratio_policy": policy, "axes": [2, 3]}
    operands = [("x", x, False), ("roi", None, True), ("scales", None, True),
                ("sizes", ints(7, 8), True)]
    assert_llvm_matches_reference(*single_node("Resize", operands, attrs), rtol=1e-5)


def test_resize_nearest_of_integers_with_axes(rng):
    x = rng.integers(-100, 100, (2, 3, 4)).astype(np.int8)
    operands = [("x", x, False), ("roi", None, True),
                ("scales", np.array([2.5, 0.5], np.float32), True)]
    assert_llvm_matches_reference(*single_node("Resize", operands,
                                               {"axes": [2, 0], "mode": "nearest"}))


def test_unsupported_resize_falls_back_with_a_reason(rng):
    x = rng.standard_normal((1, 1, 4, 4)).astype(np.float32)
    model, inputs = _resize(x, scales=[1, 1, 2, 2], mode="cubic")
    compiled = heterocc.compile(model, target="llvm")
    np.testing.assert_allclose(compiled.run(inputs)[0],
                               heterocc.compile(model, target="reference").run(inputs)[0])
    fallbacks = compiled.fallbacks
    assert any("cubic" in reason for reason in fallbacks.values()), fallbacks


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample(rng, mode):
    """Opset 9 Upsample: scales as an input (opset 7 took them as an attribute)."""
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    operands = [("x", x, False), ("scales", np.array([1, 1, 2, 1.5], np.float32), True)]
    assert_llvm_matches_reference(*single_node("Upsample", operands, {"mode": mode},
                                               opset=9), rtol=1e-5)
    node = helper.make_node("Upsample", ["x"], ["y"], mode=mode, scales=[1.0, 1.0, 2.0, 1.5])
    model = make_model([node], [("x", "float32", [1, 2, 3, 4])],
                       [("y", "float32", [1, 2, 6, 6])], opset=7)
    assert_llvm_matches_reference(model, [x], rtol=1e-5)
