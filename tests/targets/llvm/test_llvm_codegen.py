"""LLVM codegen: dtypes, casts, intrinsics, integer floor division, guarded loads that
never touch memory out of bounds, parallel loops, vector IR and FMA, argument checks,
and the exported shared library."""

from __future__ import annotations

import ctypes
import math
import mmap
import re
import threading

import numpy as np
import pytest

from heterocc import te, tir
from heterocc.errors import CompileError, InputError
from heterocc.targets import llvm as hllvm
from heterocc.targets.llvm.cpu import parse_cpu

RNG = np.random.default_rng(3)


def build_unary(shape, dtype, fcompute, out_dtype=None, vector=0, parallel=False):
    A = te.placeholder(shape, dtype, "A")
    B = te.compute(shape, lambda *i: fcompute(A[i]), name="B", dtype=out_dtype)
    s = te.create_schedule(B)
    axes = s[B].op.axis
    if vector:
        _, inner = s[B].split(axes[-1], factor=vector)
        s[B].vectorize(inner)
    if parallel:
        s[B].parallel(axes[0])
    return hllvm.build(te.lower(s, [A, B], name="f")), B


def call(module, out_tensor, *inputs):
    out = np.zeros(out_tensor.shape, out_tensor.dtype)
    module["f"](*inputs, out)
    return out


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "float16", "float32",
                                   "float64"])
@pytest.mark.parametrize("vector", [0, 8])
def test_arithmetic_per_dtype(dtype, vector):
    module, B = build_unary((3, 16), dtype, lambda x: x * 3 + x - 1, vector=vector)
    a = (RNG.integers(0, 40, (3, 16)) if dtype.startswith("u") else
         RNG.integers(-40, 40, (3, 16))).astype(dtype)
    expected = (a * np.array(3, dtype) + a - np.array(1, dtype)).astype(dtype)
    np.testing.assert_array_equal(call(module, B, a), expected)


@pytest.mark.parametrize("vector", [0, 4])
def test_integer_floor_division_matches_numpy(vector):
    A = te.placeholder((2, 12), "int32", "A")
    D = te.placeholder((2, 12), "int32", "D")
    Q = te.compute((2, 12), lambda i, j: A[i, j] // D[i, j] * 1000 + A[i, j] % D[i, j], name="Q")
    s = te.create_schedule(Q)
    if vector:
        _, inner = s[Q].split(Q.op.axis[1], factor=vector)
        s[Q].vectorize(inner)
    module = hllvm.build(te.lower(s, [A, D, Q], name="f"))
    a = RNG.integers(-50, 50, (2, 12)).astype(np.int32)
    d = RNG.choice([-7, -3, -1, 1, 2, 5], (2, 12)).astype(np.int32)
    np.testing.assert_array_equal(call(module, Q, a, d), a // d * 1000 + a % d)


@pytest.mark.parametrize("source,target", [("float32", "int32"), ("int32", "float32"),
                                           ("float32", "float16"), ("uint8", "int64"),
                                           ("int64", "int8"), ("float32", "bool"),
                                           ("bool", "float32"), ("int8", "uint8")])
def test_casts(source, target):
    module, B = build_unary((20,), source, lambda x: tir.cast(target, x), vector=4)
    if source == "bool":
        a = RNG.integers(0, 2, 20).astype(bool)
    elif source.startswith("float"):
        a = (RNG.standard_normal(20) * 50).astype(source)
        a[:3] = [0.0, -0.0, 2.5]
    else:
        a = RNG.integers(0, 100, 20).astype(source)
    np.testing.assert_array_equal(call(module, B, a), a.astype(target))


UNARY = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "fabs": np.abs, "floor": np.floor,
    "ceil": np.ceil, "tanh": np.tanh, "sin": np.sin, "cos": np.cos, "round": np.round,
    "erf": np.vectorize(math.erf), "atan": np.arctan,
}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype,vector", [("float32", 8), ("float32", 32), ("float64", 0),
                                          ("float64", 8)])
def test_math_intrinsics(name, dtype, vector):
    module, B = build_unary((32,), dtype, lambda x: tir.call_intrin(name, x), vector=vector)
    a = RNG.uniform(0.1, 4.0, 32).astype(dtype)
    a[:4] = [0.5, 1.5, 2.5, 3.5]
    expected = UNARY[name](a).astype(dtype)
    np.testing.assert_allclose(call(module, B, a), expected, rtol=2e-6, atol=1e-6)


def test_vector_math_calls_libmvec_when_available():
    from heterocc.targets.llvm import vecmath

    module, B = build_unary((64,), "float32", te.tanh, vector=32)
    assert vecmath.uses_libmvec(module.ir) == (vecmath.libmvec() is not None)
    a = RNG.uniform(-3, 3, 64).astype(np.float32)
    np.testing.assert_allclose(call(module, B, a), np.tanh(a), rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("target", ["llvm", "llvm -mattr=-avx512f"], ids=["host", "avx2"])
@pytest.mark.parametrize("vector", [8, 12, 16, 24, 32])
def test_vector_exp_matches_numpy_over_the_whole_float_range(vector, target):
    """float32 exp of whole vectors, computed in registers (``vector_exp``), over the
    float range: within 2 ulps of NumPy's where the result is normal, denormal results
    within one of their ulps, 0 and infinity where NumPy gives them (a causal mask's
    -3.4e38, overflow), NaN kept; and no call in its code."""
    A = te.placeholder((96,), "float32", "A")
    B = te.compute((96,), lambda i: te.exp(A[i]), name="B")
    schedule = te.create_schedule(B)
    schedule[B].vectorize(schedule[B].split(B.op.axis[0], factor=vector)[1])
    module = hllvm.build(te.lower(schedule, [A, B], name="f"), cpu=target)
    a = np.concatenate([np.linspace(-120, 100, 54), RNG.uniform(-3, 3, 32),
                        [-3.4e38, -1e4, -103.9, -87.5, -80.01, 80.01, 88.5, 88.8, np.inf,
                         np.nan]]).astype(np.float32)
    got = call(module, B, a)
    with np.errstate(over="ignore", under="ignore"):
        expected = np.exp(a.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_array_equal(got == 0, expected == 0)
    np.testing.assert_array_equal(np.isinf(got), np.isinf(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(got[finite], expected[finite], rtol=2.5e-7,
                               atol=np.finfo(np.float32).smallest_subnormal)
    code = module.assembly().split("f__hcc0:", 1)[-1].split(".Lfunc_end")[0]
    assert "call" not in code
    # AVX-512 applies the power of two with vscalefps (exact for denormal results too)
    # to vectors of a power of two registers
    assert ("vscalefps" in code) == ("avx512f" in parse_cpu(target).features
                                     and vector in (8, 16, 32))


def test_vector_exp_builds_for_neon_without_calls():
    """The in-register exp is plain LLVM IR: an AArch64 cross build computes it with
    NEON instructions, not a libm call per lane."""
    A = te.placeholder((64,), "float32", "A")
    B = te.compute((64,), lambda i: te.exp(A[i]), name="B")
    schedule = te.create_schedule(B)
    schedule[B].vectorize(schedule[B].split(B.op.axis[0], factor=4)[1])
    assembly = hllvm.build(te.lower(schedule, [A, B], name="f"),
                           cpu="llvm -mtriple=aarch64-linux-gnu").assembly()
    assert "expf" not in assembly and re.search(r"\bfmla\s+v\d+\.4s", assembly)


def test_pow_min_max_select_compare():
    A = te.placeholder((16,), "float32", "A")
    B = te.placeholder((16,), "float32", "B")
    C = te.compute((16,), lambda i: te.if_then_else(
        A[i] > B[i], te.power(te.fabs(A[i]), 1.5), te.maximum(A[i], 0.0) + te.minimum(B[i], 0.5)),
        name="C")
    s = te.create_schedule(C)
    s[C].vectorize(s[C].op.axis[0])
    module = hllvm.build(te.lower(s, [A, B, C], name="f"))
    a, b = RNG.standard_normal(16).astype(np.float32), RNG.standard_normal(16).astype(np.float32)
    expected = np.where(a > b, np.abs(a) ** 1.5, np.maximum(a, 0) + np.minimum(b, 0.5))
    np.testing.assert_allclose(call(module, C, a, b), expected, rtol=1e-6)


def guarded_array(values: np.ndarray) -> np.ndarray:
    """A copy of ``values`` ending exactly at an inaccessible page: any read past its
    end faults."""
    page = mmap.PAGESIZE
    nbytes = values.nbytes
    pages = -(-nbytes // page) + 1
    region = mmap.mmap(-1, pages * page)
    libc = ctypes.CDLL(None)
    base = ctypes.addressof(ctypes.c_char.from_buffer(region))
    assert libc.mprotect(ctypes.c_void_p(base + (pages - 1) * page), page, 0) == 0
    start = (pages - 1) * page - nbytes
    view = np.frombuffer(region, dtype=values.dtype, count=values.size, offset=start)
    view = view.reshape(values.shape)
    view[...] = values
    guarded_array.keep_alive.append(region)
    return view


guarded_array.keep_alive = []


def test_guarded_loads_stay_in_bounds():
    """A shifted read guarded by a select (padding) only loads where the guard holds: the
    input ends at an inaccessible page, so a speculative load would crash."""
    n = 1000
    A = te.placeholder((n,), "float32", "A")
    C = te.compute((n,), lambda i: te.if_then_else(i + 3 < n, A[te.minimum(i + 3, n + 50)],
                                                   -1.0), name="C")
    s = te.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=16)
    s[C].vectorize(ii)
    func = te.lower(s, [A, C], name="f")
    assert tir.collect(func.body, lambda n: isinstance(n, tir.BufferLoad)
                                          and n.predicate is not None)
    module = hllvm.build(func)
    a = guarded_array(RNG.standard_normal(n).astype(np.float32))
    expected = np.concatenate([a[3:], [-1.0, -1.0, -1.0]]).astype(np.float32)
    np.testing.assert_array_equal(call(module, C, a), expected)


@pytest.mark.parametrize("dtype", ["float32", "int8", "bool"])
def test_vectorized_concat_uses_masked_loads(dtype):
    """Concatenation selects between two inputs per lane; each input is read only in its
    own lanes (masked vector loads), so neither is read past its end."""
    rows, left, right = 3, 37, 27
    A = te.placeholder((rows, left), dtype, "A")
    B = te.placeholder((rows, right), dtype, "B")
    C = te.compute((rows, left + right), lambda i, j: te.if_then_else(
        j < left, A[i, j], B[i, j - left]), name="C")
    s = te.create_schedule(C)
    s[C].vectorize(s[C].split(s[C].op.axis[1], factor=16)[1])
    func = te.lower(s, [A, B, C], name="f")
    loads = tir.collect(func.body, lambda n: isinstance(n, tir.BufferLoad))
    assert len(loads) == 2 and all(isinstance(load.indices[0], tir.Ramp) for load in loads)
    module = hllvm.build(func)
    assert "llvm.masked.load" in module.ir
    a = guarded_array((RNG.standard_normal((rows, left)) * 10).astype(dtype))
    b = guarded_array((RNG.standard_normal((rows, right)) * 10).astype(dtype))
    np.testing.assert_array_equal(call(module, C, a, b), np.concatenate([a, b], axis=1))


@pytest.mark.parametrize("target", ["llvm", "llvm -mattr=-avx512f"])
@pytest.mark.parametrize("pad_value", [0.0, -0.0, 1.0])
def test_padded_vector_reads_never_touch_the_padding(target, pad_value):
    """A read of a padded row (a whole vector or the padding value under one scalar
    condition) loads nothing where the condition fails: a masked load where the CPU
    has mask registers and the padding is +0.0 (what a masked load gives), a branch
    around the load otherwise (-0.0 keeps its sign)."""
    rows, block = 6, 16
    A = te.placeholder((rows, block), "float32", "A")
    C = te.compute((rows, block), lambda i, b: te.if_then_else(
        i + 1 < rows, A[te.minimum(i + 1, rows + 5), b], te.const(pad_value, "float32")),
        name="C")
    s = te.create_schedule(C)
    s[C].vectorize(C.op.axis[1])
    cpu = hllvm.parse_cpu(target)
    module = hllvm.build(te.lower(s, [A, C], name="f"), cpu=cpu)
    masked = "avx512f" in cpu.features and pad_value == 0.0 and math.copysign(1, pad_value) > 0
    assert ("llvm.masked.load" in module.unoptimized_ir) == masked
    a = guarded_array(RNG.standard_normal((rows, block)).astype(np.float32))
    out = call(module, C, a)
    np.testing.assert_array_equal(out[:-1], a[1:])
    assert np.all(out[-1] == pad_value)
    assert np.all(np.signbit(out[-1]) == np.signbit(np.float32(pad_value)))


def test_non_dividing_vector_split_reads_no_further():
    n = 999
    module, B = build_unary((n,), "float32", lambda x: x + 1.0, vector=16)
    a = guarded_array(RNG.standard_normal(n).astype(np.float32))
    np.testing.assert_array_equal(call(module, B, a), a + 1)


def test_parallel_loop_uses_runtime_and_is_correct():
    module, B = build_unary((64, 100), "float32", lambda x: x * x, vector=4, parallel=True)
    assert "heterocc_parallel_for" in module.ir
    a = RNG.standard_normal((64, 100)).astype(np.float32)
    for _ in range(20):  # repeated regions reuse the pool
        np.testing.assert_array_equal(call(module, B, a), a * a)
    assert hllvm.num_threads() >= 1


def test_nested_parallel_and_parallel_reduction_with_heap_buffer():
    n = 300
    A = te.placeholder((n, n), "float32", "A")
    T = te.compute((n, n), lambda i, j: A[i, j] * 2.0, name="T")  # 360 KB: heap allocated
    r = te.reduce_axis(n, "r")
    S = te.compute((n,), lambda i: te.sum(T[i, r], axis=r), name="S")
    s = te.create_schedule(S)
    s[T].parallel(s[T].op.axis[0])
    s[T].parallel(s[T].op.axis[1])
    outer, _ = s[S].split(s[S].op.axis[0], nparts=7)
    s[S].parallel(outer)
    module = hllvm.build(te.lower(s, [A, S], name="f"))
    assert "aligned_alloc" in module.unoptimized_ir
    a = RNG.standard_normal((n, n)).astype(np.float32)
    np.testing.assert_allclose(call(module, S, a), (a * 2).sum(1), rtol=1e-4, atol=1e-4)


def test_vector_fma_in_machine_code():
    A = te.placeholder((64, 64), "float32", "A")
    B = te.placeholder((64, 64), "float32", "B")
    k = te.reduce_axis(64, "k")
    C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C)
    i, j = s[C].op.axis
    s[C].reorder(i, k, j)
    jo, ji = s[C].split(j, factor=16)
    s[C].vectorize(ji)
    module = hllvm.build(te.lower(s, [A, B, C], name="f"))
    assert "<16 x float>" in module.ir
    if "+fma" in hllvm.module.host().features:
        assert "vfmadd" in module.assembly()


def test_argument_checks():
    module, B = build_unary((4, 5), "float32", lambda x: x + 1.0)
    good = np.zeros((4, 5), np.float32)
    with pytest.raises(InputError, match="expected 2 arrays"):
        module["f"](good)
    with pytest.raises(InputError, match=r"float32\[4, 5\]"):
        module["f"](np.zeros((5, 4), np.float32), good.copy())
    with pytest.raises(InputError, match=r"float32\[4, 5\]"):
        module["f"](np.zeros((4, 5), np.float64), good.copy())
    with pytest.raises(InputError, match="C-contiguous"):
        module["f"](np.zeros((5, 4), np.float32).T, good.copy())
    with pytest.raises(InputError, match="shares memory"):
        module["f"](good, good)
    readonly = np.zeros((4, 5), np.float32)
    readonly.flags.writeable = False
    with pytest.raises(InputError, match="read-only"):
        module["f"](good, readonly)
    with pytest.raises(CompileError, match="no function"):
        module["g"]


def test_build_later_runs_llvm_on_its_own_thread_and_raises_through_the_wait(monkeypatch,
                                                                            llvm_jobs):
    from heterocc.targets.llvm import module as llvm_module

    llvm_jobs(1)  # one thread, in this process (workers: test_llvm_workers.py)
    threads = []
    optimize = llvm_module._optimized_module

    def spy(ir_text, machine):
        threads.append(threading.current_thread().name)
        return optimize(ir_text, machine)

    monkeypatch.setattr(llvm_module, "_optimized_module", spy)
    A = te.placeholder((4, 8), "float32", "A")
    B = te.compute((4, 8), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    wait = llvm_module.build_later(te.lower(te.create_schedule(B), [A, B], name="f"))
    a = RNG.standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_allclose(call(wait(), B, a), a * 2 + 1, rtol=1e-6)
    assert threads and threads[0].startswith("heterocc-llvm")

    def refuse(ir_text, machine):
        raise CompileError("generated LLVM IR does not verify: (as if)")

    monkeypatch.setattr(llvm_module, "_optimized_module", refuse)
    wait = llvm_module.build_later(te.lower(te.create_schedule(B), [A, B], name="f"))
    with pytest.raises(CompileError, match="does not verify"):
        wait()


def _build_later_in_child(connection):
    from heterocc.targets.llvm import module as llvm_module

    A = te.placeholder((4,), "float32", "A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    wait = llvm_module.build_later(te.lower(te.create_schedule(B), [A, B], name="f"))
    a = np.arange(4, dtype=np.float32)
    connection.send(call(wait(), B, a).tolist())


def test_build_later_works_in_a_forked_child():
    """A child forked after the LLVM thread started inherits the executor without its
    thread: without a fresh one, its builds waited forever (concurrent exports from
    forked workers hung)."""
    import multiprocessing

    from heterocc.targets.llvm import module as llvm_module

    A = te.placeholder((4,), "float32", "A")
    B = te.compute((4,), lambda i: A[i] * 3.0, name="B")
    llvm_module.build_later(te.lower(te.create_schedule(B), [A, B], name="f"))()
    context = multiprocessing.get_context("fork")
    parent, child = context.Pipe()
    worker = context.Process(target=_build_later_in_child, args=(child,))
    worker.start()
    worker.join(60)
    if worker.exitcode is None:
        worker.kill()
    assert worker.exitcode == 0
    assert parent.recv() == [1.0, 2.0, 3.0, 4.0]


def test_unflattened_function_is_refused():
    A = te.placeholder((4, 4), "float32", "A")
    B = te.compute((4, 4), lambda i, j: A[i, j], name="B")
    func = te.lower(te.create_schedule(B), [A, B], optimize=False)
    with pytest.raises(CompileError, match="not flattened"):
        hllvm.build(func)


def test_export_library_round_trip(tmp_path):
    A = te.placeholder((33, 17), "float32", "A")
    B = te.compute((33, 17), lambda i, j: te.exp(A[i, j]) * 2.0, name="B")
    C = te.compute((33,), lambda i: A[i, 0] + A[i, 16], name="C")
    s1, s2 = te.create_schedule(B), te.create_schedule(C)
    s1[B].parallel(s1[B].op.axis[0])
    s1[B].vectorize(s1[B].split(s1[B].op.axis[1], factor=8)[1])
    module = hllvm.build([te.lower(s1, [A, B], name="expo"), te.lower(s2, [A, C], name="ends")])
    path = module.export_library(tmp_path / "kernels.so")
    loaded = hllvm.load_library(path)
    assert [sig.name for sig in loaded.signatures] == ["expo", "ends"]
    a = RNG.standard_normal((33, 17)).astype(np.float32)
    b, c = np.zeros((33, 17), np.float32), np.zeros(33, np.float32)
    loaded["expo"](a, b)
    loaded["ends"](a, c)
    np.testing.assert_allclose(b, np.exp(a) * 2, rtol=1e-6)
    np.testing.assert_allclose(c, a[:, 0] + a[:, 16], rtol=1e-6)
    with pytest.raises(InputError):
        loaded["ends"](a, b)


def test_same_names_in_two_builds_do_not_clash():
    first, B1 = build_unary((8,), "float32", lambda x: x + 1.0)
    second, B2 = build_unary((8,), "float32", lambda x: x + 2.0)
    a = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(call(first, B1, a), a + 1)
    np.testing.assert_array_equal(call(second, B2, a), a + 2)


def test_compute_indexing_past_its_input_is_clamped_not_read():
    """A compute whose own index leaves its input (a bug in the compute) still never
    reads outside the array."""
    n = 1000
    A = te.placeholder((n,), "float32", "A")
    C = te.compute((n,), lambda i: A[i + 1] - A[i], name="C")
    module = hllvm.build(te.lower(te.create_schedule(C), [A, C], name="f"))
    a = guarded_array(np.arange(n, dtype=np.float32))
    np.testing.assert_array_equal(call(module, C, a)[:-1], np.ones(n - 1, np.float32))


def _parallel_square_module():
    return build_unary((256, 64), "float32", lambda x: x * x, vector=16, parallel=True)


def test_parallel_kernels_from_several_python_threads():
    from concurrent.futures import ThreadPoolExecutor

    module, B = _parallel_square_module()
    inputs = [RNG.standard_normal((256, 64)).astype(np.float32) for _ in range(8)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda a: call(module, B, a), inputs))
    for a, result in zip(inputs, results):
        np.testing.assert_array_equal(result, a * a)


def _run_in_child(queue):
    module, B = _parallel_square_module()
    a = np.arange(256 * 64, dtype=np.float32).reshape(256, 64)
    queue.put(bool(np.array_equal(call(module, B, a), a * a)))


def test_parallel_kernel_in_forked_child():
    """The pool's workers do not survive fork(); the child must start its own."""
    import multiprocessing

    module, B = _parallel_square_module()
    call(module, B, np.ones((256, 64), np.float32))  # the parent's pool is running
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_run_in_child, args=(queue,))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0 and queue.get(timeout=5)


@pytest.mark.parametrize("dtype", ["int32", "uint16", "int8"])
def test_truncating_division_and_bitwise_ops(dtype):
    A = te.placeholder((24,), dtype, "A")
    D = te.placeholder((24,), dtype, "D")
    Q = te.compute((24,), lambda i: te.truncdiv(A[i], D[i]) + te.truncmod(A[i], D[i]), name="Q")
    W = te.compute((24,), lambda i: ((A[i] & D[i]) | (A[i] >> 2)) ^ (D[i] << 1), name="W")
    s = te.create_schedule([Q, W])
    s[Q].vectorize(s[Q].split(s[Q].op.axis[0], factor=8)[1])
    module = hllvm.build(te.lower(s, [A, D, Q, W], name="f"))
    info = np.iinfo(dtype)
    a = RNG.integers(max(info.min, -100), min(info.max, 100), 24).astype(dtype)
    d = RNG.choice([v for v in (-7, -3, 1, 2, 5, 9) if info.min <= v], 24).astype(dtype)
    q, w = np.zeros(24, dtype), np.zeros(24, dtype)
    module["f"](a, d, q, w)
    expected_q = (np.trunc(a.astype(np.float64) / d).astype(dtype) + np.fmod(a, d)).astype(dtype)
    np.testing.assert_array_equal(q, expected_q)
    np.testing.assert_array_equal(w, ((a & d) | (a >> 2)) ^ (d << 1))


def test_float_truncmod_is_fmod():
    module, B = build_unary((16,), "float32", lambda x: te.truncmod(x, 1.5) + te.truncdiv(x, 2.0),
                            vector=8)
    a = RNG.uniform(-10, 10, 16).astype(np.float32)
    expected = np.fmod(a, np.float32(1.5)) + np.trunc(a / np.float32(2))
    np.testing.assert_allclose(call(module, B, a), expected, rtol=1e-6, atol=1e-6)


def test_bool_outputs_and_logic_vectorized():
    A = te.placeholder((32,), "float32", "A")
    M = te.placeholder((32,), "bool", "M")
    C = te.compute((32,), lambda i: te.logical_and(A[i] > 0.0, ~M[i]) | te.not_equal(A[i], A[i]),
                   name="C")
    s = te.create_schedule(C)
    s[C].vectorize(s[C].split(s[C].op.axis[0], factor=16)[1])
    module = hllvm.build(te.lower(s, [A, M, C], name="f"))
    a = RNG.standard_normal(32).astype(np.float32)
    a[5] = np.nan
    m = RNG.integers(0, 2, 32).astype(bool)
    np.testing.assert_array_equal(call(module, C, a, m), ((a > 0) & ~m) | np.isnan(a))


def test_object_file_links_into_a_c_program(tmp_path):
    """The exported object follows the C ABI: a C caller links it with the runtime."""
    import subprocess

    from heterocc.targets.llvm import runtime

    module, _ = build_unary((4, 8), "float32", lambda x: x * 2.0 + 1.0, vector=8, parallel=True)
    module.export_object(tmp_path / "kernel.o")
    (tmp_path / "main.c").write_text(
        "#include <stdio.h>\nvoid f(float *a, float *b);\n"
        "int main(void) { float a[32], b[32]; for (int i = 0; i < 32; ++i) a[i] = (float)i;\n"
        "  f(a, b); for (int i = 0; i < 32; ++i) if (b[i] != 2.0f * i + 1.0f) return 1;\n"
        "  puts(\"ok\"); return 0; }\n")
    runtime.write_runtime_source(tmp_path)
    runtime.run_compiler([str(tmp_path / "main.c"), str(tmp_path / "kernel.o"),
                          str(tmp_path / "heterocc_runtime.c"), "-pthread", "-lm",
                          "-o", str(tmp_path / "main")], "linking the test program")
    result = subprocess.run([str(tmp_path / "main")], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "ok"


def test_builds_from_several_python_threads():
    from concurrent.futures import ThreadPoolExecutor

    def build_and_run(offset):
        module, B = build_unary((40,), "float32", lambda x: x + float(offset), vector=8)
        a = np.arange(40, dtype=np.float32)
        return np.array_equal(call(module, B, a), a + offset)

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(build_and_run, range(8)))


def test_an_unroll_hint_stays_a_loop_until_code_generation():
    """``unroll(iv, explicit=False)``: the TIR keeps one body; the LLVM code asks LLVM to
    unroll the loop fully (a distinct, self-referencing loop ID), and LLVM does."""
    A = te.placeholder((64, 16), "float32", "A")
    k = te.reduce_axis(16, "k")
    B = te.compute((64,), lambda i: te.sum(A[i, k], axis=[k]), name="B")
    s = te.create_schedule(B)
    s[B].unroll(k, explicit=False)
    lowered = te.lower(s, [A, B], name="rowsum")
    assert "unroll_hint(0, 16)" in str(lowered)
    module = hllvm.build(lowered)
    loop_ids = [line for line in module.unoptimized_ir.splitlines()
                if line.startswith("!") and "distinct" in line]
    assert len(loop_ids) == 1
    node = loop_ids[0].split(" = ")[0]
    assert loop_ids[0].startswith(f"{node} = distinct !{{ {node}, ")
    assert '!{ !"llvm.loop.unroll.full" }' in module.unoptimized_ir
    assert module.ir.count("fadd") >= 16  # no loop of one addition left
    a = np.random.default_rng(0).standard_normal((64, 16)).astype(np.float32)
    b = np.empty(64, np.float32)
    module["rowsum"](a, b)
    np.testing.assert_allclose(b, a.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_statements_of_a_region_share_index_arithmetic_where_it_dominates():
    """Index arithmetic (reading no memory) is emitted once for all the statements of a
    loop body that use it; what a guard's branch emitted is emitted again after it (the
    branch does not dominate what follows), so the module verifies and computes."""
    A = tir.Buffer("A", (8, 16), "float32")
    B = tir.Buffer("B", (8, 16), "float32")
    i = tir.Var("i")
    row = i * 16 + 3  # one scalar computation, used by every statement below

    def copy(source, target, scale):
        return tir.BufferStore(B, tir.BufferLoad(A, (row + source,)) * scale, (row + target,))

    # the guarded copy reads at row + 5 first; the copy after the guard reads there too
    guarded = tir.IfThenElse(tir.Binary("lt", i, tir.IntImm(4)), copy(5, 5, 5.0))
    body = tir.seq([copy(0, 0, 2.0), copy(1, 1, 3.0), guarded, copy(5, 6, 6.0)])
    func = tir.PrimFunc("f", (A, B), tir.For(i, 0, 8, tir.ForKind.SERIAL, body))
    module = hllvm.build(func)
    body_ir = module.unoptimized_ir.split("i.body:")[1].split("i.exit:")[0]
    assert body_ir.count("mul i64") == 1  # i * 16, once for all four statements
    a = np.arange(128, dtype=np.float32).reshape(8, 16)
    b = np.zeros((8, 16), np.float32)
    module["f"](a, b)
    expected = np.zeros((8, 16), np.float32)
    expected[:, 3], expected[:, 4], expected[:, 9] = a[:, 3] * 2, a[:, 4] * 3, a[:, 8] * 6
    expected[:4, 8] = a[:4, 8] * 5
    np.testing.assert_array_equal(b, expected)


def test_a_module_makes_each_constant_once_and_tells_apart_what_prints_differently():
    """CodeGenLLVM.constant shares one object per type and value within a module, but
    never across values that print differently (-0.0 and 0.0, lists by lane)."""
    from llvmlite import ir

    from heterocc.targets.llvm.codegen import CodeGenLLVM

    codegen = CodeGenLLVM()
    f32, i32 = ir.FloatType(), ir.IntType(32)
    assert codegen.constant(i32, 3) is codegen.constant(i32, 3)
    assert codegen.constant(i32, 3) is not codegen.constant(ir.IntType(64), 3)
    assert str(codegen.constant(f32, -0.0)) != str(codegen.constant(f32, 0.0))
    lanes = ir.VectorType(i32, 4)
    assert codegen.constant(lanes, [0, 1, 2, 3]) is codegen.constant(lanes, [0, 1, 2, 3])
    assert str(codegen.constant(lanes, [0, 1, 2, 3])) != str(codegen.constant(lanes, [3, 2, 1, 0]))
    assert codegen.constant(lanes, ir.Undefined) is codegen.constant(lanes, ir.Undefined)
    assert CodeGenLLVM().constant(i32, 3) is not codegen.constant(i32, 3)  # per module


def test_uniform_vector_constants_are_written_once_and_parse_as_lane_by_lane():
    import llvmlite.binding as llvm
    from llvmlite import ir

    from heterocc.targets.llvm.codegen import CodeGenLLVM

    codegen = CodeGenLLVM()
    floats, masks = ir.VectorType(ir.FloatType(), 16), ir.VectorType(ir.IntType(1), 64)
    cases = [(masks, ir.Undefined, "undef"), (floats, 0.0, "zeroinitializer"),
             (floats, [2.0] * 16, "splat (float 0x4000000000000000)"),
             (floats, -0.0, "splat (float 0x8000000000000000)"),
             (masks, [True] * 64, "splat (i1 true)")]
    for ty, value, text in cases:
        made = codegen.constant(ty, value)
        assert made.get_reference() == text
        lanes = ir.Constant(ty, value)  # llvmlite's lane-by-lane text
        assert lanes.get_reference() != text
        # LLVM reads both as one constant: a function returning each prints the same
        module = llvm.parse_assembly(
            f"define {ty} @a() {{\n  ret {made}\n}}\ndefine {ty} @b() {{\n  ret {lanes}\n}}\n")
        assert str(module.get_function("a")).split("{")[1] == \
            str(module.get_function("b")).split("{")[1]
    mixed = codegen.constant(floats, [float(k) for k in range(16)])
    assert mixed.get_reference().startswith("<float") and "splat" not in mixed.get_reference()


@pytest.mark.parametrize("target", ["llvm -mcpu=haswell", "llvm -mtriple=aarch64-linux-gnu"],
                         ids=["avx2", "neon"])
def test_padded_byte_rows_load_whole_vectors_where_every_lane_is_inside(target):
    """A padded copy of byte rows (an int8 depthwise convolution's) on a CPU without a
    masked load of bytes (AVX2, NEON): each vector is one plain load under one scalar
    test where all its lanes lie inside the image, lane by lane only at the borders;
    bit-exact, and nothing read past the input's end."""
    height, width, pad = 9, 60, 1
    A = te.placeholder((height, width), "uint8", "A")
    C = te.compute((height + 2 * pad, width + 2 * pad), lambda i, j: te.if_then_else(
        te.logical_and(te.logical_and(i >= pad, i < height + pad),
                       te.logical_and(j >= pad, j < width + pad)),
        A[i - pad, j - pad], te.const(7, "uint8")), name="C")
    s = te.create_schedule(C)
    s[C].vectorize(s[C].split(C.op.axis[1], factor=16)[1])
    cpu = hllvm.parse_cpu(target)
    module = hllvm.build(te.lower(s, [A, C], name="f"), cpu=cpu)
    ir_text = module.unoptimized_ir
    # each masked load (the borders, lane by lane) is the other branch of a plain load's
    masked = len(re.findall(r'call <\d+ x i8> @"llvm\.masked\.load', ir_text))
    assert masked and len(re.findall(r"phi\s+<\d+ x i8>", ir_text)) == masked
    if cpu.arch != "x86_64":
        return
    a = guarded_array(RNG.integers(0, 256, (height, width)).astype(np.uint8))
    expected = np.pad(a, pad, constant_values=7)
    np.testing.assert_array_equal(call(module, C, a), expected)


def test_every_lane_is_the_extreme_lanes_condition():
    """``every_lane`` of a padded read's predicate holds exactly where each of its
    lanes does (checked against the lanes for bases across the bounds), for ramps
    running either way and comparisons written either way round; None where no scalar
    condition says it (an equality, a ramp of unknown stride)."""
    from heterocc.targets.llvm.codegen import every_lane

    base, row, step = (tir.Var(name, "int64") for name in ("base", "row", "step"))
    lanes = 8

    def ramp(stride):
        return tir.Ramp(base, tir.IntImm(stride, "int64"), lanes)

    def wide(value):
        return tir.Broadcast(tir.IntImm(value, "int64"), lanes)

    predicates = [
        tir.binary("and", tir.Broadcast(row >= 0, lanes),
                   tir.binary("and", ramp(1) >= wide(0), ramp(1) < wide(20))),
        tir.binary("and", ramp(-2) > wide(-5), ramp(-2) <= wide(9)),
        tir.binary("and", wide(3) <= ramp(3), wide(40) > ramp(3)),
    ]
    for predicate in predicates:
        condition = every_lane(predicate)
        assert condition is not None and tir.lanes_of(condition.dtype) == 1
        for b in range(-30, 40):
            for r in (-1, 0):
                values = {base: tir.IntImm(b, "int64"), row: tir.IntImm(r, "int64")}
                lane_values = tir.simplify(tir.substitute(predicate, values))
                every = tir.simplify(tir.substitute(condition, values))
                assert isinstance(every, tir.IntImm)
                assert bool(every.value) == all(
                    bool(tir.simplify(tir.substitute(_lane(predicate, k), values)).value)
                    for k in range(lanes)), (predicate, b, r, lane_values)
    assert every_lane(tir.binary("eq", ramp(1), wide(0))) is None
    assert every_lane(tir.Ramp(base, step, lanes) >= wide(0)) is None


def _lane(predicate, k: int):
    """Lane ``k`` of a predicate of broadcasts and ramps, as a scalar expression."""
    if isinstance(predicate, tir.Broadcast):
        return predicate.value
    if isinstance(predicate, tir.Ramp):
        return predicate.base + predicate.stride * tir.IntImm(k, "int64")
    return tir.binary(predicate.op, _lane(predicate.a, k), _lane(predicate.b, k))


def test_spilled_vectors_sit_on_a_stack_realigned_to_them():
    """A kernel that holds more vectors than the CPU has registers spills some to the
    stack. Every function realigns its stack to them, so that each spill and reload is
    an aligned move (LLVM otherwise spilled 512-bit registers to the 16 bytes a call
    aligns the stack to: unaligned moves, each reload across two cache lines at three of
    four entry alignments; MobileNetV2's int8 16->96 1x1 ran 1.36x slower there): 40
    accumulators of 16 floats over a reduction, on AVX-512's 32 registers. Exact."""
    cpu = parse_cpu("llvm -mcpu=skylake-avx512")
    a = te.placeholder((64, 16), "float32", "A")
    w = te.placeholder((64, 40), "float32", "W")
    r = te.reduce_axis(64, "r")
    c = te.compute((40, 16), lambda k, i: te.sum(a[r, i] * w[r, k], axis=[r]), name="C")
    s = te.create_schedule(c)
    local = s.cache_write(c, "local")
    k, i = s[local].op.axis
    s[local].reorder(s[local].op.reduce_axis[0], k, i)
    s[local].unroll(k)
    s[local].vectorize(i)
    s[c].vectorize(s[c].op.axis[1])
    module = hllvm.build(te.lower(s, [a, w, c], name="f"), cpu=cpu)
    assert '"stackrealign"' in module.unoptimized_ir
    assembly = module.assembly()
    assert re.search(r"vmovaps\t%zmm\d+, -?\d*\(%rsp\)", assembly)  # spilled, aligned
    assert not re.search(r"vmovups\t%zmm\d+, -?\d*\(%rsp\)", assembly)
    assert "andq\t$-64, %rsp" in assembly
    if not {"avx512f"} <= hllvm.host_cpu().features:
        return
    x = RNG.standard_normal((64, 16)).astype(np.float32)
    y = RNG.standard_normal((64, 40)).astype(np.float32)
    out = np.zeros((40, 16), np.float32)
    module["f"](x, y, out)
    np.testing.assert_allclose(out, y.T @ x, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", ["uint8", "int16", "float32"])
def test_a_vector_of_no_power_of_two_lanes_is_one_masked_store(dtype):
    """A row of 7 elements (a 7x7 image's), stored as a vector, is one store under an
    AVX-512 mask (bytes and words with BW) where LLVM would store 4, 2 and 1 elements;
    the lanes past the row are not written: the elements past the last row keep their
    values. Without AVX-512 (AVX2), the pieces. Exact."""
    def build(target):
        x = te.placeholder((5, 7), dtype, "x")
        y = te.compute((5, 7), lambda i, j: x[i, j] + te.const(3, dtype), name="y")
        s = te.create_schedule(y)
        s[y].vectorize(y.op.axis[1])
        return hllvm.build(te.lower(s, [x, y], name="f"), cpu=parse_cpu(target))

    target = "llvm -mcpu=skylake-avx512"
    masked = build(target)
    assert "llvm.masked.store" in masked.unoptimized_ir
    assert re.search(r"vmov\w+\t%[xy]mm\d+, [^\n]*\{%k\d\}", masked.assembly())
    assert "llvm.masked.store" not in build("llvm -mcpu=haswell").unoptimized_ir
    if not set(parse_cpu(target).features) <= hllvm.host_cpu().features:
        return
    data = (np.arange(35) % 50).reshape(5, 7).astype(dtype)
    memory = np.full(35 + 16, 99, dtype)  # the output, then elements nobody may write
    out = memory[:35].reshape(5, 7)
    masked["f"](data, out)
    np.testing.assert_array_equal(out, data + 3)
    assert (memory[35:] == 99).all()
