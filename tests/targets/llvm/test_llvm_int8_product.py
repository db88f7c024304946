"""A requantization's exact product ``int32((int64(a) * int64(m)) >> s)`` on vectors
(``targets/llvm/int8_product.py``): even/odd ``pmuldq`` products and a blend on x86
(AVX-512, AVX2, SSE4.1), the widened form on AArch64 (``smull``), bit-exact against
NumPy's int64 arithmetic for every shift and at the int32 extremes."""

from __future__ import annotations

import re

import numpy as np
import pytest

from heterocc import te
from heterocc.targets import llvm as hllvm
from heterocc.targets.llvm.cpu import parse_cpu
from heterocc.targets.llvm.int8_product import even_odd_products

#: (target, lanes of the vector loop, whether it uses the even/odd form)
DESCRIPTIONS = [
    ("llvm -mcpu=sapphirerapids", 16, True),  # AVX-512F
    ("llvm -mcpu=sapphirerapids -mattr=-avx512f", 8, True),  # AVX2
    ("llvm -mcpu=nehalem", 4, True),  # SSE4.1
    ("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1", 4, False),  # NEON
]
SHIFTS = [0, 1, 19, 31, 32, 33, 47, 62, 63]
ROWS = 3
#: a multiplier folded into an immediate (31 bits, as ``precise_fixed_point_scale``'s)
IMMEDIATE = 1382408162


def _host_runs(cpu) -> bool:
    host = hllvm.module.host().description
    return cpu.arch == host.arch and cpu.features <= host.features


def _build(cpu, lanes: int, shifts: list[int], n: int, multiplier: str = "vector"):
    """One function per shift: ``out[r, i] = int32((int64(a[r, i]) * int64(m)) >> s)``,
    the loop over ``i`` vectorized by ``lanes``; ``m``: ``m[r, i]`` (``"vector"``),
    ``m[r, 0]`` (``"broadcast"``: one multiplier per row, as a channel's) or an
    immediate (``"immediate"``)."""
    a = te.placeholder((ROWS, n), "int32", "a")
    m = te.placeholder((ROWS, n), "int32", "m")

    def wide_multiplier(r, i):
        if multiplier == "immediate":
            return te.const(IMMEDIATE, "int64")
        return te.cast("int64", m[r, i if multiplier == "vector" else 0])

    funcs = []
    for shift in shifts:
        out = te.compute((ROWS, n), lambda r, i, s=shift: te.cast("int32", (
            te.cast("int64", a[r, i]) * wide_multiplier(r, i)) >> te.const(s, "int64")),
            name="out", dtype="int32")
        schedule = te.create_schedule(out)
        _, inner = schedule[out].split(schedule[out].op.axis[1], factor=lanes)
        schedule[out].vectorize(inner)
        funcs.append(te.lower(schedule, [a, m, out], name=f"product{shift}"))
    return hllvm.build(funcs, cpu=cpu)


def _operands(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(35)
    info = np.iinfo(np.int32)
    a = rng.integers(info.min, info.max, (ROWS, n), endpoint=True, dtype=np.int64)
    m = rng.integers(info.min, info.max, (ROWS, n), endpoint=True, dtype=np.int64)
    # the extremes in both lanes of a pair, and small values of either sign
    edge = [info.min, info.max, -1, 0, 1, info.min, info.max, -7]
    a[0, :8], m[0, :8] = edge, edge[::-1]
    a[1, :8], m[1, :8] = rng.integers(-300, 300, 8), [info.max] * 4 + [info.min] * 4
    m[2, 0] = info.min
    return a.astype(np.int32), m.astype(np.int32)


def _expected(a, m, multiplier: str, shift: int) -> np.ndarray:
    wide = {"vector": m, "broadcast": m[:, :1], "immediate": IMMEDIATE}[multiplier]
    return ((a.astype(np.int64) * np.asarray(wide, np.int64)) >> shift).astype(np.int32)


@pytest.mark.parametrize("target,lanes,even_odd", DESCRIPTIONS,
                         ids=["avx512", "avx2", "sse4", "neon"])
def test_shifted_product_is_exact_for_every_shift(target, lanes, even_odd):
    cpu = parse_cpu(target)
    n = 96
    module = _build(cpu, lanes, SHIFTS, n)
    assembly = module.assembly()
    if even_odd:
        # pmuldq on the operands in place: no 64-bit lane multiply, no widening moves,
        # and no signed product emulated from unsigned ones (pmuludq and corrections:
        # the odd lanes' operands shifted by 32 as int64, which AVX2 and SSE cannot)
        assert re.search(r"\tv?pmuldq\t", assembly)
        assert not re.search(r"\tv?pmullq\t|\tv?pmov[sz]xdq\t|\tv?pmuludq\t", assembly)
    else:
        assert re.search(r"\tsmull2?\tv", assembly)
    if not _host_runs(cpu):
        return
    a, m = _operands(n)
    for shift in SHIFTS:
        got = np.zeros((ROWS, n), np.int32)
        module[f"product{shift}"](a, m, got)
        np.testing.assert_array_equal(got, _expected(a, m, "vector", shift),
                                      err_msg=f"shift {shift} on {target}")


@pytest.mark.parametrize("multiplier", ["broadcast", "immediate"])
@pytest.mark.parametrize("lanes", [16, 7], ids=["even", "odd"])
@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"], ids=["host", "avx2"])
def test_a_channels_multiplier_and_odd_vectors(multiplier, lanes, target):
    """A multiplier broadcast over the vector (a channel's, read once: the vectorizer
    widens the scalar before broadcasting it) or an immediate, and a vector of 7 lanes
    (a 7x7 image's row), take the same form on the host and on AVX2 (whose odd lanes'
    products were emulated from unsigned ones before they were moved down by one
    shuffle), with the same bits."""
    cpu = parse_cpu(target)
    n, shifts = 5 * lanes, [17, 32, 40]
    module = _build(cpu, lanes, shifts, n, multiplier)
    if even_odd_products(cpu.features, cpu.arch):
        assert re.search(r"\tv?pmuldq\t", module.assembly())
        if multiplier == "broadcast":  # (a positive immediate may take pmuludq)
            assert not re.search(r"\tv?pmuludq\t", module.assembly())
    if not _host_runs(cpu):
        return
    a, m = _operands(n)
    for shift in shifts:
        got = np.zeros((ROWS, n), np.int32)
        module[f"product{shift}"](a, m, got)
        np.testing.assert_array_equal(got, _expected(a, m, multiplier, shift))


def test_only_the_exact_product_pattern_is_rewritten():
    """A product of int32 operands widened from int16, or one shifted by a run-time
    amount, keeps the widened form and its result."""
    cpu = parse_cpu("llvm")
    n = 32
    a = te.placeholder((n,), "int16", "a")
    m = te.placeholder((n,), "int32", "m")
    s = te.placeholder((n,), "int64", "s")
    out = te.compute((n,), lambda i: te.cast("int32", (
        te.cast("int64", a[i]) * te.cast("int64", m[i])) >> s[i]), name="out", dtype="int32")
    schedule = te.create_schedule(out)
    _, inner = schedule[out].split(schedule[out].op.axis[0], factor=8)
    schedule[out].vectorize(inner)
    module = hllvm.build(te.lower(schedule, [a, m, s, out], name="f"), cpu=cpu)
    rng = np.random.default_rng(1)
    xs = rng.integers(-2 ** 15, 2 ** 15, n).astype(np.int16)
    ms = rng.integers(-2 ** 31, 2 ** 31, n).astype(np.int32)
    ss = rng.integers(0, 48, n).astype(np.int64)
    got = np.zeros(n, np.int32)
    module["f"](xs, ms, ss, got)
    expected = ((xs.astype(np.int64) * ms) >> ss).astype(np.int32)
    np.testing.assert_array_equal(got, expected)
