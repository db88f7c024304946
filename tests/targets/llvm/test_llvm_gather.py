"""Vector loads at non-consecutive indices are one ``llvm.masked.gather`` (masked where a
vector select guards them), not a load per lane."""

from __future__ import annotations

import re

import numpy as np

from heterocc import te
from heterocc.targets.llvm.cpu import parse_cpu
from heterocc.targets.llvm.module import build, host


def _vectorized(fcompute, x, lanes: int, dtype: str):
    y = te.compute((lanes,), fcompute, name="y", dtype=dtype)
    schedule = te.create_schedule(y)
    schedule[y].vectorize(y.op.axis[0])
    return build(te.lower(schedule, [x, y], name="gathered")), y


def test_gather_reads_every_lane():
    x = te.placeholder((10,), "int32", "x")
    module, _ = _vectorized(lambda i: x[i // 3] * 2 + x[(i * 7) % 10], x, 16, "int32")
    assert "llvm.masked.gather.v16i32" in module.ir and "extractelement" not in module.ir
    data = np.arange(10, dtype=np.int32) * 5 - 17
    out = np.zeros(16, np.int32)
    module(data, out)
    i = np.arange(16)
    np.testing.assert_array_equal(out, data[i // 3] * 2 + data[(i * 7) % 10])


def test_masked_gather_reads_only_the_selected_lanes():
    x = te.placeholder((6,), "float32", "x")  # lanes 6 and 7 would read past its end
    module, _ = _vectorized(lambda i: te.if_then_else(
        i < 6, x[i % 4 + i // 4 * 3], te.const(-1.0)), x, 8, "float32")
    assert "llvm.masked.gather.v8f32" in module.ir
    data = np.linspace(-1, 1, 6, dtype=np.float32)
    out = np.zeros(8, np.float32)
    module(data, out)
    i = np.arange(8)
    np.testing.assert_array_equal(out, np.where(i < 6, data[np.minimum(i % 4 + i // 4 * 3, 5)],
                                                -1.0))


def test_gather_offsets_are_32_bits_where_the_buffer_allows():
    """A gather's offsets are computed as 64-bit integers; within a buffer of fewer than
    2**31 elements they are gathered as 32-bit ones, 16 int32 lanes in one AVX-512
    ``vpgatherdd`` where 64-bit offsets whose range LLVM cannot bound (a parallel loop's
    task, as in channel lanes' finishing stage, which reads its sums 16 apart) take two
    ``vpgatherqd`` of 8. Exact, on the host too."""
    cpu = parse_cpu("llvm -mcpu=skylake-avx512")
    x = te.placeholder((64 * 256,), "int32", "x")
    y = te.compute((64, 16), lambda j, i: x[j * 256 + i * 16 + 3], name="y", dtype="int32")
    schedule = te.create_schedule(y)
    schedule[y].parallel(y.op.axis[0])
    schedule[y].vectorize(y.op.axis[1])
    module = build(te.lower(schedule, [x, y], name="gathered"), cpu=cpu)
    assembly = module.assembly()
    assert "vpgatherqd" not in assembly
    assert re.search(r"vpgatherdd\t[^\n]*%zmm", assembly)
    if not set(cpu.features) <= host().description.features:
        return
    data = np.arange(64 * 256, dtype=np.int32) * 3 - 100
    out = np.zeros((64, 16), np.int32)
    module(data, out)
    np.testing.assert_array_equal(out, data.reshape(64, 256)[:, 3::16])
