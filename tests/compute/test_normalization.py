"""TE computes of normalizations (core/compute/normalization.py) against the NumPy
references, through the llvm target: every case claimed here must really compile (no
NumPy fallback) and match within float tolerance."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import heterocc
from tests.compute.test_elementwise import assert_same, check, random_array
from tests.compute.test_reduction import _fallback_reason
from tests.conftest import make_model

FLOAT_TYPES = ["float32", "float64"]


#: the seed of the ``rng`` fixture (tests/conftest.py) in this module
RNG_SEED = 31


def _positive(rng, shape, dtype):
    return (np.abs(rng.standard_normal(shape)) + 0.1).astype(dtype)


# ---------------------------------------------------------------- BatchNormalization


@pytest.mark.parametrize("dtype", FLOAT_TYPES)
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 3, 4, 5)])
def test_batch_normalization_inference(dtype, shape, rng):
    channels = shape[1]
    x = random_array(rng, shape, dtype)
    scale, bias, mean = (random_array(rng, (channels,), dtype) for _ in range(3))
    check("BatchNormalization", [x, scale, bias, mean, _positive(rng, (channels,), dtype)],
          {"epsilon": 1e-3})


def test_batch_normalization_per_activation_form(rng):
    """spatial=0 (opsets < 9): statistics of shape [C, d...]."""
    x = random_array(rng, (2, 3, 4), "float32")
    params = [random_array(rng, (3, 4), "float32") for _ in range(3)]
    check("BatchNormalization", [x, *params, _positive(rng, (3, 4), "float32")],
          {"spatial": 0})


def test_batch_normalization_with_wider_statistics(rng):
    x = random_array(rng, (2, 3, 4), "float32")
    params = [random_array(rng, (3,), "float64") for _ in range(3)]
    check("BatchNormalization", [x, *params, _positive(rng, (3,), "float64")])


def test_batch_normalization_training_falls_back(rng):
    x = random_array(rng, (2, 3, 4), "float32")
    params = [random_array(rng, (3,), "float32") for _ in range(3)]
    reason = _fallback_reason("BatchNormalization", [x, *params, _positive(rng, (3,), "float32")],
                              {"training_mode": 1})
    assert "training mode" in reason


# ---------------------------------------------------------------- LayerNormalization


def _compiled(nodes, inputs, outputs):
    """``nodes`` over graph inputs (name, array) pairs through heterocc.compile: the llvm
    target must compile every function; returns its outputs and the reference's."""
    model = make_model(nodes, [(name, a.dtype.name, a.shape) for name, a in inputs], outputs)
    ours = heterocc.compile(model, target="llvm")
    reference = heterocc.compile(model, target="reference")
    arrays = [a for _, a in inputs]
    assert ours.fallbacks == {}
    return ours.run(arrays), reference.run(arrays)


@pytest.mark.parametrize("stash_type", [1, 11])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("axis,scale_shape", [(-1, (6,)), (1, (4, 6)), (1, (1, 6)),
                                              (0, (3, 4, 6))])
def test_layer_normalization(stash_type, with_bias, axis, scale_shape, rng):
    x = random_array(rng, (3, 4, 6), "float32")
    inputs = [("x", x), ("scale", random_array(rng, scale_shape, "float32"))]
    if with_bias:
        inputs.append(("bias", random_array(rng, scale_shape[-1:], "float32")))
    node = helper.make_node("LayerNormalization", [name for name, _ in inputs], ["y"],
                            axis=axis, epsilon=1e-4, stash_type=stash_type)
    ours, reference = _compiled([node], inputs, [("y", "float32", None)])
    assert_same(ours, reference)


def test_layer_normalization_statistics_outputs_fall_back(rng):
    x = random_array(rng, (3, 4), "float32")
    reason = _fallback_reason("LayerNormalization", [x, random_array(rng, (4,), "float32")],
                              {})
    assert "Mean/InvStdDev" in reason


# ---------------------------------------------------------------- RMSNormalization


@pytest.mark.parametrize("dtype", FLOAT_TYPES)
@pytest.mark.parametrize("axis,scale_shape", [(-1, (6,)), (1, (4, 6)), (0, (1,))])
def test_rms_normalization(dtype, axis, scale_shape, rng):
    x = random_array(rng, (3, 4, 6), dtype)
    check("RMSNormalization", [x, random_array(rng, scale_shape, dtype)],
          {"axis": axis, "epsilon": 1e-3})


def test_rms_normalization_with_wider_stash(rng):
    x = random_array(rng, (5, 8), "float32")
    check("RMSNormalization", [x, random_array(rng, (8,), "float32")], {"stash_type": 11})


# ---------------------------------------------------------------- Instance / Group


@pytest.mark.parametrize("dtype", FLOAT_TYPES)
@pytest.mark.parametrize("shape", [(2, 3, 7), (2, 3, 4, 5), (1, 2, 3, 2, 4)])
def test_instance_normalization(dtype, shape, rng):
    x = random_array(rng, shape, dtype)
    scale, bias = (random_array(rng, (shape[1],), dtype) for _ in range(2))
    check("InstanceNormalization", [x, scale, bias], {"epsilon": 1e-3})


@pytest.mark.parametrize("groups", [1, 2, 6])
@pytest.mark.parametrize("per_group", [False, True])
def test_group_normalization(groups, per_group, rng):
    x = random_array(rng, (2, 6, 3, 4), "float32")
    size = groups if per_group else 6
    scale, bias = (random_array(rng, (size,), "float32") for _ in range(2))
    check("GroupNormalization", [x, scale, bias], {"num_groups": groups, "epsilon": 1e-4})


def test_group_normalization_with_wider_stash(rng):
    x = random_array(rng, (2, 4, 5), "float32")
    scale, bias = (random_array(rng, (4,), "float32") for _ in range(2))
    check("GroupNormalization", [x, scale, bias], {"num_groups": 2, "stash_type": 11})


# ---------------------------------------------------------------- Lp, MVN, LRN


@pytest.mark.parametrize("dtype", FLOAT_TYPES)
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, -1])
def test_lp_normalization_with_zero_slices(dtype, p, axis, rng):
    x = random_array(rng, (4, 5), dtype)
    x[1, :] = 0
    x[:, 2] = 0
    check("LpNormalization", [x], {"axis": axis, "p": p})


@pytest.mark.parametrize("dtype", FLOAT_TYPES)
@pytest.mark.parametrize("axes", [[0, 2, 3], [1], [-1, -2], [0, 1, 2, 3]])
def test_mean_variance_normalization(dtype, axes, rng):
    x = random_array(rng, (2, 3, 4, 5), dtype)
    x[0, 1] = 2.5  # a constant slice: zero variance
    check("MeanVarianceNormalization", [x], {"axes": axes}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", FLOAT_TYPES)
@pytest.mark.parametrize("size", [1, 2, 3, 5, 9])
def test_local_response_normalization(dtype, size, rng):
    x = random_array(rng, (2, 6, 3, 4), dtype)
    check("LRN", [x], {"size": size, "alpha": 0.02, "beta": 0.6, "bias": 1.5})


def test_local_response_normalization_rank_three(rng):
    check("LRN", [random_array(rng, (2, 5, 7), "float32")], {"size": 3})
