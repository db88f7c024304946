"""Constant tables (per-channel requantization) reach CUDA kernels as arguments, like the
graph's constants: the emulated kernels stay bit-exact and the source takes them."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc.targets.cuda.target import CudaTarget
from tests.compute.test_quantize_tables import _function


@pytest.mark.parametrize("size", [4, 8])
def test_per_channel_requantize_through_emulated_kernels(size):
    function, inputs, expected = _function(48, np.random.default_rng(3), True, size)
    target = CudaTarget(run_on="emulator", nvcc="never")
    kernel = target.build(function)
    assert not target.fallbacks
    np.testing.assert_array_equal(kernel(inputs)[0], expected)
    source = target.modules[function.name].source
    assert "const int* __restrict__ requantize_multiplier" in source
