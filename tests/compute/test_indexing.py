"""TE computes of index-driven ops (core/compute/indexing.py) against the NumPy
reference, through the llvm target; every case must really compile (no fallback)."""

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


@pytest.fixture
def data(rng):
    return rng.standard_normal((3, 4, 5)).astype(np.float32)


@pytest.mark.parametrize("axis,indices", [
    (0, ints(2, -1, 0, 1)),
    (1, ints(-4, 3, 1, 1, 0, 2).reshape(2, 3)),
    (-1, np.array(-2, np.int64)),
    (2, np.array([[4], [0]], np.int32)),
])
def test_gather(data, axis, indices):
    operands = [("x", data, False), ("indices", indices, False)]
    assert_llvm_matches_reference(*single_node("Gather", operands, {"axis": axis}))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(rng, data, axis):
    shape = list(data.shape)
    shape[axis] = 2
    dim = data.shape[axis]
    indices = rng.integers(-dim, dim, shape).astype(np.int64)
    operands = [("x", data, False), ("indices", indices, False)]
    assert_llvm_matches_reference(*single_node("GatherElements", operands, {"axis": axis}))


@pytest.mark.parametrize("batch_dims,indices", [
    (0, ints(0, 1, 2, 2, -1, 0).reshape(2, 3)),
    (0, ints(1, -3, 2, 0).reshape(2, 1, 2)),
    (1, ints(3, 0, -1).reshape(3, 1)),
    (1, ints(0, 4, 2, 2, 1, 1).reshape(3, 1, 2)),
])
def test_gather_nd(data, batch_dims, indices):
    operands = [("x", data, False), ("indices", indices, False)]
    assert_llvm_matches_reference(*single_node("GatherND", operands,
                                               {"batch_dims": batch_dims}))


def test_out_of_range_index_reads_the_edge_instead_of_out_of_bounds(data):
    """The reference rejects an out-of-range index; the kernel clamps it (documented)."""
    model, _ = single_node("Gather", [("x", data, False), ("indices", ints(0, 0), False)],
                           {"axis": 1})
    compiled = heterocc.compile(model, target="llvm")
    out = compiled.run([data, ints(7, -9)])[0]
    np.testing.assert_array_equal(out, data[:, [3, 0]])


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot(axis):
    indices = np.array([[0, 3, -1], [-4, 7, 2.7]], np.float32)
    operands = [("indices", indices, False), ("depth", np.array([4], np.int64), True),
                ("values", np.array([-1, 5], np.int32), False)]
    assert_llvm_matches_reference(*single_node("OneHot", operands, {"axis": axis},
                                               out_dtype="int32"))


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -1, 2])
def test_trilu(data, upper, k):
    operands = [("x", data, False)]
    if k is not None:
        operands.append(("k", np.array(k, np.int64), False))
    assert_llvm_matches_reference(*single_node("Trilu", operands, {"upper": upper}))


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
    fallbacks = next(iter(compiled._cache.values())).targets["llvm"].fallbacks
    assert any("cubic" in reason for reason in fallbacks.values()), fallbacks


def test_gather_from_an_empty_axis_never_compiles_a_load(rng):
    """No index is in range of an empty axis: the kernel would have nothing to clamp to."""
    data = np.zeros((2, 0), np.float32)
    model, inputs = single_node("Gather", [("x", data, False), ("indices", ints(0), False)],
                                {"axis": 1})
    compiled = heterocc.compile(model, target="llvm")
    with pytest.raises(heterocc.errors.InputError):
        compiled.run(inputs)  # the NumPy fallback rejects the index, as the reference does
    fallbacks = next(iter(compiled._cache.values())).targets["llvm"].fallbacks
    assert any("empty axis" in reason for reason in fallbacks.values()), fallbacks


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


@pytest.mark.parametrize("batch_axis,time_axis", [(1, 0), (0, 1)])
def test_reverse_sequence(batch_axis, time_axis, rng):
    shape = [0, 0, 3]
    shape[batch_axis], shape[time_axis] = 4, 5
    x = rng.standard_normal(shape).astype(np.float32)
    lengths = np.array([5, 0, 2, 1], np.int64)
    model, inputs = single_node("ReverseSequence", [("x", x, False), ("lens", lengths, False)],
                                {"batch_axis": batch_axis, "time_axis": time_axis})
    assert_llvm_matches_reference(model, inputs)
