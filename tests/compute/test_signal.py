"""DFT, STFT and the cosine-sum windows (core/compute/signal.py) against the NumPy
references through the llvm target; axis, lengths and steps are read in the kernel."""

from __future__ import annotations

import numpy as np
import pytest

from tests.compute.test_elementwise import check, random_array


def _int(value):
    return None if value is None else np.array(value, np.int64)


@pytest.mark.parametrize("inverse,onesided", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("length", [None, 6, 11])
@pytest.mark.parametrize("axis", [1, 2, -2])
@pytest.mark.parametrize("complex_input", [False, True])
def test_dft(inverse, onesided, length, axis, complex_input, rng):
    x = random_array(rng, (2, 8, 7, 2 if complex_input or (inverse and onesided) else 1),
                     "float64")
    check("DFT", [x, _int(length), _int(axis)], {"inverse": inverse, "onesided": onesided},
          rtol=1e-9, atol=1e-9)


def test_dft_axis_attribute_of_older_opsets(rng):
    x = random_array(rng, (3, 5, 2), "float32")
    check("DFT", [x], {"axis": 0}, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("onesided", [0, 1])
@pytest.mark.parametrize("window,frame_length", [(True, None), (False, 8), (True, 8)])
def test_stft(onesided, window, frame_length, rng):
    signal = random_array(rng, (2, 40, 1), "float32")
    w = np.hanning(8).astype(np.float32) if window else None
    check("STFT", [signal, _int(5), w, _int(frame_length)], {"onesided": onesided},
          rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("size", [1, 10])
@pytest.mark.parametrize("dtype", [1, 11, 7])  # float32, float64, int64
def test_windows(op, periodic, size, dtype):
    check(op, [np.array(size, np.int64)], {"periodic": periodic, "output_datatype": dtype},
          rtol=1e-6, atol=1e-7)
