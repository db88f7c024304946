"""Signal ops (core/ops/signal.py): DFT, STFT, windows and MelWeightMatrix against
onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto
from single_node_oracle import check_inferred, compare_with_onnx, infer, normal

from heterocc.errors import InputError, TypeInferenceError
from heterocc.ir.types import TensorType
from heterocc.ops import ShapeOperandError, get_op


def scalar(value, dtype=np.int64):
    return np.array(value, dtype=dtype)


# ---------------------------------------------------------------------------------- DFT

@pytest.mark.parametrize("shape,axis,dft_length,attrs", [
    ((2, 8, 1), 1, None, {}),
    ((2, 8, 2), 1, None, {}),
    ((3, 5, 4, 2), 0, None, {}),
    ((3, 5, 4, 2), -3, 7, {}),
    ((2, 9, 1), 1, 6, {"onesided": 1}),
    ((2, 9, 1), -2, 12, {"onesided": 1}),
    ((4, 6, 2), 1, None, {"inverse": 1}),
    ((4, 6, 2), 1, 9, {"inverse": 1}),
    ((2, 5, 3, 2), 1, None, {"inverse": 1, "onesided": 1}),
    ((2, 5, 3, 2), 1, 9, {"inverse": 1, "onesided": 1}),
])
def test_dft_matches_onnx(shape, axis, dft_length, attrs):
    length = None if dft_length is None else scalar(dft_length)
    compare_with_onnx("DFT", [normal(shape), length, scalar(axis)], attrs, rtol=1e-4, atol=1e-4)


def test_dft_defaults_to_the_last_signal_axis():
    compare_with_onnx("DFT", [normal((3, 6, 2))], {}, rtol=1e-4, atol=1e-4)


def test_dft_opset19_axis_attribute():
    compare_with_onnx("DFT", [normal((2, 6, 4, 1))], {"axis": 2}, opset=19, rtol=1e-4,
                      atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_dft_keeps_the_input_dtype(dtype):
    x = normal((3, 8, 2), dtype)
    out = check_inferred("DFT", [x, None, scalar(1)], {})[0]
    expected = np.fft.fft(x[..., 0].astype(np.float64) + 1j * x[..., 1], axis=1)
    tolerance = 1e-12 if dtype == np.float64 else 2e-2
    np.testing.assert_allclose(out[..., 0], expected.real, rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(out[..., 1], expected.imag, rtol=tolerance, atol=tolerance)


def test_dft_inverse_undoes_forward():
    x = normal((2, 7, 2), np.float64)
    spectrum = check_inferred("DFT", [x, None, scalar(1)])[0]
    back = check_inferred("DFT", [spectrum, None, scalar(1)], {"inverse": 1})[0]
    np.testing.assert_allclose(back, x, atol=1e-12)


def test_dft_axis_and_length_are_shape_operands():
    x, length, axis = normal((2, 8, 1)), scalar(4), scalar(1)
    with pytest.raises(ShapeOperandError) as err:
        infer("DFT", [x, length, axis], constant={0, 1})
    assert err.value.value_index == 2
    assert infer("DFT", [x, length, axis])[0] == TensorType((2, 4, 2), "float32")


@pytest.mark.parametrize("shape,axis,length,attrs,message", [
    ((2, 8, 3), 1, None, {}, "last dimension must be 1"),
    ((2, 8, 2), -1, None, {}, "axis -1 is out of range"),
    ((2, 8, 2), 2, None, {}, "axis 2 is out of range"),
    ((2, 8, 2), 1, 0, {}, "dft_length is 0"),
    ((2, 8, 2), 1, None, {"inverse": 2}, "must each be 0 or 1"),
])
def test_dft_rejects_bad_operands(shape, axis, length, attrs, message):
    dft_length = None if length is None else scalar(length)
    with pytest.raises(TypeInferenceError, match=message):
        infer("DFT", [normal(shape), dft_length, scalar(axis)], attrs)


def test_dft_rejects_integer_input():
    with pytest.raises(TypeInferenceError, match="has dtype int32"):
        infer("DFT", [np.zeros((2, 4, 1), np.int32)])


# --------------------------------------------------------------------------------- STFT

@pytest.mark.parametrize("length,step,frame,window,attrs", [
    (64, 8, 16, False, {}),
    (64, 8, None, True, {}),
    (50, 7, 12, True, {}),
    (40, 5, 10, False, {"onesided": 0}),
    (33, 33, None, False, {}),
])
def test_stft_matches_onnx(length, step, frame, window, attrs):
    signal = normal((2, length, 1))
    win = normal((frame or 16,), seed=1) if window else None
    frame_length = None if frame is None else scalar(frame)
    compare_with_onnx("STFT", [signal, scalar(step), win, frame_length], attrs, rtol=1e-4,
                      atol=1e-4)


def test_stft_of_a_complex_signal_matches_onnx():
    compare_with_onnx("STFT", [normal((1, 30, 2)), scalar(4), normal((8,), seed=1)],
                      {"onesided": 0}, rtol=1e-4, atol=1e-4)


def test_stft_frame_is_a_windowed_dft():
    signal, window = normal((1, 20, 1), np.float64), normal((8,), np.float64, seed=1)
    out = check_inferred("STFT", [signal, scalar(3), window], {"onesided": 0})[0]
    third = np.fft.fft(signal[0, 6:14, 0] * window)
    np.testing.assert_allclose(out[0, 2, :, 0] + 1j * out[0, 2, :, 1], third, atol=1e-12)


@pytest.mark.parametrize("signal_shape,frame,window_length,message", [
    ((2, 16, 1), 8, 6, "window has length 6 but frame_length is 8"),
    ((2, 16, 1), 20, None, "frame_length 20 must lie in"),
    ((16, 1), 4, None, "must have rank 3"),
    ((2, 16, 4), 4, None, "last dimension must be 1"),
])
def test_stft_rejects_bad_operands(signal_shape, frame, window_length, message):
    window = None if window_length is None else normal((window_length,))
    with pytest.raises(TypeInferenceError, match=message):
        infer("STFT", [normal(signal_shape), scalar(2), window, scalar(frame)])


# ------------------------------------------------------------------------------ windows

WINDOWS = ["BlackmanWindow", "HammingWindow", "HannWindow"]


@pytest.mark.parametrize("op_type", WINDOWS)
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("size,size_dtype", [(10, np.int32), (7, np.int64), (2, np.int64)])
def test_window_matches_onnx(op_type, periodic, size, size_dtype):
    compare_with_onnx(op_type, [scalar(size, size_dtype)], {"periodic": periodic}, atol=1e-6)


@pytest.mark.parametrize("op_type", WINDOWS)
@pytest.mark.parametrize("output_datatype,tolerance", [
    (TensorProto.DOUBLE, 1e-12), (TensorProto.FLOAT16, 2e-3)])
def test_window_output_datatype_matches_onnx(op_type, output_datatype, tolerance):
    compare_with_onnx(op_type, [scalar(12)], {"output_datatype": output_datatype},
                      rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("op_type", WINDOWS)
def test_symmetric_window_of_one_sample_is_its_peak(op_type):
    out = check_inferred(op_type, [scalar(1)], {"periodic": 0})[0]
    np.testing.assert_allclose(out, [1.0])


def test_hann_window_is_numpys_symmetric_hanning():
    out = check_inferred("HannWindow", [scalar(9)], {"periodic": 0,
                                                    "output_datatype": TensorProto.DOUBLE})[0]
    np.testing.assert_allclose(out, np.hanning(9), atol=1e-15)


def test_window_rejects_a_string_output_datatype():
    with pytest.raises(TypeInferenceError, match="output_datatype has dtype object"):
        infer("HannWindow", [scalar(4)], {"output_datatype": TensorProto.STRING})


def test_window_size_must_be_a_scalar():
    with pytest.raises(TypeInferenceError, match="must be a scalar"):
        infer("HammingWindow", [np.array([3, 4], np.int64)])


def test_window_size_is_a_shape_operand():
    with pytest.raises(ShapeOperandError):
        infer("BlackmanWindow", [scalar(4)], constant=set())


# ---------------------------------------------------------------------- MelWeightMatrix

@pytest.mark.parametrize("bins,dft_length,rate,low,high,attrs", [
    (8, 16, 8192, 0.0, 4096.0, {}),
    (10, 64, 16000, 20.0, 8000.0, {}),
    (5, 33, 8000, 100.0, 3000.0, {"output_datatype": TensorProto.DOUBLE}),
    (4, 512, 22050, 0.0, 11025.0, {}),
])
def test_mel_weight_matrix_matches_onnx(bins, dft_length, rate, low, high, attrs):
    inputs = [scalar(bins, np.int32), scalar(dft_length, np.int32), scalar(rate, np.int32),
              scalar(low, np.float32), scalar(high, np.float32)]
    compare_with_onnx("MelWeightMatrix", inputs, attrs)


def test_mel_weight_matrix_rejects_an_upper_edge_past_nyquist():
    inputs = [scalar(8), scalar(16), scalar(8000), scalar(0.0, np.float32),
              scalar(8000.0, np.float32)]
    op = get_op("MelWeightMatrix")
    with pytest.raises(InputError, match="outside"):
        op.run(inputs, op.normalize_attrs({}))


def test_mel_weight_matrix_rejects_non_positive_bins():
    inputs = [scalar(0), scalar(16), scalar(8000), scalar(0.0, np.float32),
              scalar(4000.0, np.float32)]
    with pytest.raises(TypeInferenceError, match="must be positive"):
        infer("MelWeightMatrix", inputs)
