"""Vector loads of lanes a small constant stride apart (a stride-2 convolution's phase
split) are one wide masked load and a shuffle where the CPU has masked vector moves of
the element type (AVX-512, bytes with BW), and a gather elsewhere; both read only the
lanes' own elements."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc import te
from heterocc.targets.llvm.cpu import parse_cpu
from heterocc.targets.llvm.module import build, host


def _strided(dtype: str, stride: int, lanes: int, n: int, guarded: bool, cpu=None):
    """``y[i] = x[i * stride + 1]`` vectorized (``guarded``: only where that is below
    ``n``, else 0, the padded read of a copy)."""
    x = te.placeholder((n,), dtype, "x")

    def element(i):
        at = i * stride + 1
        if not guarded:
            return x[at]
        return te.if_then_else(at < n, x[at], te.const(0, dtype))

    y = te.compute((lanes,), element, name="y", dtype=dtype)
    schedule = te.create_schedule(y)
    schedule[y].vectorize(y.op.axis[0])
    return build(te.lower(schedule, [x, y], name="strided"), cpu=cpu)


def _host_has(*features: str) -> bool:
    return set(features) <= host().description.features


@pytest.mark.parametrize("dtype,stride,lanes", [("int8", 2, 32), ("int16", 2, 16),
                                                 ("uint8", 3, 16), ("float32", 4, 8)])
@pytest.mark.parametrize("guarded", [False, True], ids=["plain", "guarded"])
def test_strided_lanes_are_read_exactly(dtype, stride, lanes, guarded):
    # plain: the last lane reads the last element; guarded: the last lanes lie past it
    n = (lanes - 1) * stride + 2 if not guarded else lanes * stride - 3
    module = _strided(dtype, stride, lanes, n, guarded)
    rng = np.random.default_rng(3)
    data = (rng.normal(0, 50, n) if dtype == "float32"
            else rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, n)).astype(dtype)
    out = np.zeros(lanes, dtype)
    module(data, out)
    at = np.arange(lanes) * stride + 1
    expected = np.where(at < n, data[np.minimum(at, n - 1)], 0).astype(dtype)
    np.testing.assert_array_equal(out, expected)
    if _host_has("avx512f", "avx512bw"):
        # one masked load of lanes * stride elements, no gather
        assert f"llvm.masked.load.v{lanes * stride}" in module.ir
        assert "llvm.masked.gather" not in module.ir


def test_byte_lanes_gather_without_masked_byte_moves():
    """AVX2 (no AVX-512 mask registers): strided lanes stay a gather; AVX-512BW loads
    strided bytes wide."""
    cpu = parse_cpu("llvm -mcpu=haswell")
    assert "llvm.masked.gather" in _strided("int8", 2, 32, 64, True, cpu=cpu).ir
    assert "llvm.masked.gather" in _strided("float32", 2, 8, 16, True, cpu=cpu).ir
    avx512 = parse_cpu("llvm -mcpu=skylake-avx512")
    assert "llvm.masked.load.v64i8" in _strided("int8", 2, 32, 64, True, cpu=avx512).ir
