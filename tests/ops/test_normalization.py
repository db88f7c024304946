"""Normalization ops (core/ops/normalization.py) against onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest
from single_node_oracle import check_inferred, compare_with_onnx, infer, normal

from heterocc.errors import TypeInferenceError
from heterocc.ops import FusionKind, get_op


def batch_norm_inputs(shape, seed=0, dtype=np.float32):
    channels = shape[1]
    return [normal(shape, dtype, seed, scale=2.0, shift=1.0), normal(channels, dtype, seed + 1),
            normal(channels, dtype, seed + 2), normal(channels, dtype, seed + 3),
            np.abs(normal(channels, dtype, seed + 4)) + np.asarray(0.5, dtype)]


# --------------------------------------------------------------------------- BatchNormalization


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (2, 3, 4, 5), (1, 2, 2, 3, 2)])
def test_batch_norm_inference(shape):
    compare_with_onnx("BatchNormalization", batch_norm_inputs(shape), {"epsilon": 1e-3})


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 4, 5)])
def test_batch_norm_training_mode_outputs_running_statistics(shape):
    compare_with_onnx("BatchNormalization", batch_norm_inputs(shape),
                      {"training_mode": 1, "momentum": 0.8}, num_outputs=3, rtol=1e-5,
                      atol=1e-5)


def test_batch_norm_float16_with_float32_statistics():
    x, scale, bias, mean, var = batch_norm_inputs((2, 3, 4), dtype=np.float16)
    inputs = [x, scale, bias, mean.astype(np.float32), var.astype(np.float32)]
    out = compare_with_onnx("BatchNormalization", inputs, rtol=5e-3, atol=5e-3)
    assert out[0].dtype == np.float16


def test_batch_norm_old_opset_attributes():
    inputs = batch_norm_inputs((2, 3, 4, 4))
    compare_with_onnx("BatchNormalization", inputs, {"spatial": 1, "is_test": 1}, opset=6)


def test_batch_norm_per_activation_statistics_of_spatial_0():
    x = normal((2, 3, 4), seed=1)
    scale, bias, mean = (normal((3, 4), seed=seed) for seed in (2, 3, 4))
    var = np.abs(normal((3, 4), seed=5)) + 0.5
    (y,) = check_inferred("BatchNormalization", [x, scale, bias, mean, var], {"spatial": 0})
    np.testing.assert_allclose(y, (x - mean) / np.sqrt(var + 1e-5) * scale + bias, rtol=1e-5)


def test_batch_norm_errors():
    inputs = batch_norm_inputs((2, 3, 4))
    with pytest.raises(TypeInferenceError, match=r"scale \(input 1\) has shape \(4,\); "
                                                 r"expected \(3,\)"):
        infer("BatchNormalization", [inputs[0], np.ones(4, np.float32)] + inputs[2:])
    with pytest.raises(TypeInferenceError, match="need training_mode=1"):
        infer("BatchNormalization", inputs, num_outputs=3)
    with pytest.raises(TypeInferenceError, match="must be a float tensor"):
        infer("BatchNormalization", [inputs[0].astype(np.int32)] + inputs[1:])
    with pytest.raises(TypeInferenceError, match="needs per-channel statistics"):
        infer("BatchNormalization", inputs, {"training_mode": 1, "spatial": 0})
    assert get_op("BatchNormalization").fusion_kind == FusionKind.REDUCTION


# --------------------------------------------------------------------------- Layer/RMS norm


@pytest.mark.parametrize("axis", [-1, -2, 1, 0])
@pytest.mark.parametrize("with_bias", [False, True])
def test_layer_norm(axis, with_bias):
    x = normal((2, 3, 4), seed=0, scale=3.0, shift=1.0)
    trailing = x.shape[axis % 3:]
    inputs = [x, normal(trailing, seed=1), normal(trailing, seed=2) if with_bias else None]
    compare_with_onnx("LayerNormalization", inputs, {"axis": axis}, num_outputs=3,
                      rtol=1e-5, atol=1e-5)


def test_layer_norm_broadcast_scale_and_float16():
    x = normal((2, 3, 4), np.float16, 3)
    compare_with_onnx("LayerNormalization", [x, normal((1, 4), np.float16, 4)],
                      {"axis": 1}, rtol=5e-3, atol=5e-3)


def test_layer_norm_statistics_follow_stash_type():
    x = normal((2, 5), np.float16, 5)
    y, mean, inv_std = check_inferred("LayerNormalization", [x, np.ones(5, np.float16)],
                                      {"stash_type": 11}, num_outputs=3)
    assert (y.dtype, mean.dtype, inv_std.dtype) == (np.float16, np.float64, np.float64)
    wide = x.astype(np.float64)
    np.testing.assert_allclose(mean[:, 0], wide.mean(axis=1))
    np.testing.assert_allclose(inv_std[:, 0], 1 / np.sqrt(wide.var(axis=1) + 1e-5))


@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_rms_norm(axis):
    x = normal((2, 3, 4), seed=6, scale=2.0)
    compare_with_onnx("RMSNormalization", [x, normal(x.shape[axis % 3:], seed=7)],
                      {"axis": axis, "epsilon": 1e-3})


def test_trailing_norm_errors():
    x = normal((2, 3, 4))
    with pytest.raises(TypeInferenceError, match=r"Scale \(input 1\) of shape \(3,\) does "
                                                 r"not broadcast to the normalized dims \(4,\)"):
        infer("LayerNormalization", [x, np.ones(3, np.float32)])
    with pytest.raises(TypeInferenceError, match="axis 3 is out of range"):
        infer("RMSNormalization", [x, np.ones(4, np.float32)], {"axis": 3})
    with pytest.raises(TypeInferenceError, match="stash_type 7"):
        infer("LayerNormalization", [x, np.ones(4, np.float32)], {"stash_type": 7})


# --------------------------------------------------------------------------- Instance/Group norm


@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 5)])
def test_instance_norm(shape):
    x = normal(shape, seed=8, scale=2.0, shift=-1.0)
    compare_with_onnx("InstanceNormalization",
                      [x, normal(shape[1], seed=9), normal(shape[1], seed=10)],
                      {"epsilon": 1e-4}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("num_groups", [1, 2, 4])
def test_group_norm_per_channel_affine(num_groups):
    x = normal((2, 4, 3, 3), seed=11, scale=2.0)
    compare_with_onnx("GroupNormalization", [x, normal(4, seed=12), normal(4, seed=13)],
                      {"num_groups": num_groups}, rtol=1e-5, atol=1e-5)


def test_group_norm_per_group_affine_of_opset_18():
    x = normal((2, 6, 5), seed=14)
    compare_with_onnx("GroupNormalization", [x, normal(3, seed=15), normal(3, seed=16)],
                      {"num_groups": 3, "epsilon": 1e-3}, opset=18, rtol=1e-5, atol=1e-5)


def test_instance_and_group_norm_errors():
    with pytest.raises(TypeInferenceError, match="at least one spatial dim"):
        infer("InstanceNormalization", [normal((2, 3)), np.ones(3, np.float32),
                                        np.ones(3, np.float32)])
    with pytest.raises(TypeInferenceError, match="num_groups=4 must be positive and divide "
                                                 "the 6 channels"):
        infer("GroupNormalization", [normal((2, 6, 3)), np.ones(6, np.float32),
                                     np.ones(6, np.float32)], {"num_groups": 4})
    with pytest.raises(TypeInferenceError, match="attribute 'num_groups' is required"):
        infer("GroupNormalization", [normal((2, 6, 3)), np.ones(6, np.float32),
                                     np.ones(6, np.float32)])


# --------------------------------------------------------------------------- Lp, MVN, LRN


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # ONNX's 0/0
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_lp_norm_l2(axis):
    x = normal((3, 4, 2), seed=17)
    x[0, 0, :] = 0  # a zero vector normalizes to zero
    compare_with_onnx("LpNormalization", [x], {"p": 2, "axis": axis})


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_lp_norm_l1(axis):
    # ONNX's reference sums x (not |x|) for p=1, so the oracle here is NumPy
    x = normal((3, 4, 2), seed=18)
    x[0, 0, :] = 0
    (y,) = check_inferred("LpNormalization", [x], {"p": 1, "axis": axis})
    norm = np.sum(np.abs(x), axis=axis, keepdims=True)
    with np.errstate(invalid="ignore"):
        expected = np.where(norm == 0, 0, x / norm)
    np.testing.assert_allclose(y, expected, rtol=1e-6)


@pytest.mark.parametrize("axes", [None, [0, 2, 3], [1], [2, 3]])
def test_mean_variance_norm(axes):
    x = normal((2, 3, 4, 5), seed=18, scale=3.0, shift=2.0)
    compare_with_onnx("MeanVarianceNormalization", [x], {} if axes is None else {"axes": axes},
                      rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_lrn(size):
    # ONNX's reference walks the channels with the batch size, so keep N == C
    x = normal((5, 5, 3, 3), seed=19, scale=2.0)
    compare_with_onnx("LRN", [x], {"size": size, "alpha": 0.01, "beta": 0.6, "bias": 2.0},
                      rtol=1e-5, atol=1e-6)


def test_lrn_on_3d_input_matches_channel_window_definition():
    x = normal((1, 6, 2), seed=20)
    (y,) = check_inferred("LRN", [x], {"size": 3})
    square_sum = np.stack([np.sum(x[:, max(0, c - 1):c + 2] ** 2, axis=1) for c in range(6)],
                          axis=1)
    np.testing.assert_allclose(y, x / (1 + 0.0001 / 3 * square_sum) ** 0.75, rtol=1e-6)


def test_lp_mvn_lrn_errors():
    with pytest.raises(TypeInferenceError, match="p=3 is not supported"):
        infer("LpNormalization", [normal((2, 3))], {"p": 3})
    with pytest.raises(TypeInferenceError, match="axis 4 is out of range"):
        infer("MeanVarianceNormalization", [normal((2, 3, 4))], {"axes": [0, 4]})
    with pytest.raises(TypeInferenceError, match=r"X must be \[N, C, d1, ...\]"):
        infer("LRN", [normal((2, 3))], {"size": 3})


@pytest.mark.parametrize("op_type,extra,attrs", [
    ("LayerNormalization", [np.ones(4, np.float32)], {}),
    ("RMSNormalization", [np.full(4, 2, np.float32)], {}),
    ("InstanceNormalization", [np.ones(3, np.float32), np.zeros(3, np.float32)], {}),
    ("LpNormalization", [], {}),
])
def test_bfloat16_computes_like_float32(op_type, extra, attrs):
    bfloat16 = pytest.importorskip("ml_dtypes").bfloat16
    x = normal((2, 3, 4), seed=21).astype(bfloat16)
    narrow = check_inferred(op_type, [x] + [e.astype(bfloat16) for e in extra], attrs)[0]
    wide = check_inferred(op_type, [x.astype(np.float32)] + extra, attrs)[0]
    assert narrow.dtype == bfloat16
    np.testing.assert_allclose(narrow.astype(np.float32), wide, rtol=2e-2, atol=2e-2)
