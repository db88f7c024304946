"""The LLVM target's matmul schedule: correct for any sizes (tails, tiny, non-square) and
ranks (the compute library's plain products, packed by the target)."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest

from heterocc import te, tir
from heterocc.compute.nn import matmul as plain_matmul
from heterocc.errors import CompileError
from heterocc.targets import llvm as hllvm
from heterocc.targets.llvm import schedules
from heterocc.targets.llvm.cpu import active_cpu, compiling_for
from heterocc.targets.llvm.module import build

RNG = np.random.default_rng(5)


@pytest.mark.parametrize("m,n,k", [(64, 64, 64), (37, 45, 29), (3, 5, 2), (1, 100, 7),
                                   (130, 33, 64)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matmul_schedule_matches_numpy(m, n, k, dtype):
    func = schedules.matmul_function(m, n, k, dtype, cpu=active_cpu())
    a = RNG.standard_normal((m, k)).astype(dtype)
    b = RNG.standard_normal((k, n)).astype(dtype)
    c = np.full((m, n), np.nan, dtype)
    hllvm.build(func)(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_main_tiles_are_guard_free_and_vectorized():
    func = schedules.matmul_function(37, 45, 29, cpu=active_cpu())
    assert tir.collect(func.body, lambda n: isinstance(n, tir.Ramp) and n.lanes == 32)
    module = hllvm.build(func)
    assert "<32 x float>" in module.unoptimized_ir


def test_matmul_rejects_mismatched_operands():
    A = te.placeholder((4, 5), "float32", "A")
    with pytest.raises(CompileError, match="needs A"):
        schedules.matmul(A, te.placeholder((4, 5), "float32", "B"), cpu=active_cpu())


def _check_scheduled_product(A, B, C) -> None:
    """``C = A @ B`` given the CPU's matmul schedule, built, against NumPy."""
    s = te.create_schedule(C)
    schedules.schedule_matmul(s, C, cpu=active_cpu())
    module = hllvm.build(te.lower(s, [A, B, C], name="product"))
    a = RNG.standard_normal(A.shape).astype(np.float32)
    b = RNG.standard_normal(B.shape).astype(np.float32)
    c = np.full(C.shape, np.nan, np.float32)
    module["product"](a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("a_shape,b_shape", [
    ((2, 5, 7), (7, 9)),              # [B, T, K] x [K, N]
    ((2, 3, 6, 5), (2, 3, 5, 6)),     # [B, H, T, D] x [B, H, D, T]: a batched right operand
    ((3, 1, 4, 5), (2, 5, 40)),       # broadcast batch axes, two panels
    ((1, 4, 70), (70, 20)),           # a panel narrower than the default
])
def test_plain_products_of_any_rank_are_packed_and_match_numpy(a_shape, b_shape):
    """The compute library's plain product, packed by the llvm target (B read through
    its panels, batch axes kept) and register-tiled, against NumPy."""
    A = te.placeholder(a_shape, "float32", "A")
    B = te.placeholder(b_shape, "float32", "B")
    C = plain_matmul(A, B)
    assert "packed_B" not in C.op.attrs  # plain: packing is the target's decision
    schedules.pack_matmuls([C], cpu=active_cpu())
    packed = C.op.attrs["packed_B"]
    assert packed.shape[:-3] == b_shape[:-2] and packed.shape[-2] == b_shape[-2]
    assert packed.shape[-1] == schedules.default_panel(b_shape[-1], "float32", cpu=active_cpu())
    _check_scheduled_product(A, B, C)


@pytest.mark.parametrize("a_shape,b_shape", [((7,), (7, 9)), ((2, 5, 7), (7,))])
def test_products_with_a_vector_operand_get_the_reduction_schedule(a_shape, b_shape):
    A = te.placeholder(a_shape, "float32", "A")
    B = te.placeholder(b_shape, "float32", "B")
    C = plain_matmul(A, B)
    assert not schedules.pack_matmul(C, cpu=active_cpu())
    _check_scheduled_product(A, B, C)


def _small_integers(shape) -> np.ndarray:
    """float32 operands whose products sum exactly (small integers: every partial sum
    of these products is an integer below 2**24), so that any order of the reduction
    gives NumPy's result to the bit."""
    return RNG.integers(-4, 5, shape).astype(np.float32)


ISAS = pytest.mark.parametrize("target", ["llvm", "llvm -mattr=-avx512f"], ids=["host", "avx2"])


#: vector multiply-adds, and vector loads or stores on the stack (a spilled register)
_MULADDS = re.compile(r"\bfmla\s+v\d+\.4s|\bvfmadd\w+\s")
_STACK = re.compile(r"\b(?:ldr|ldp|str|stp)\s+q\d+.*\[sp|\(%rsp\).*%[xyz]mm|%[xyz]mm.*\(%rsp\)")


@pytest.mark.parametrize("target,vectors,rows", [
    ("llvm -mcpu=znver4", 4, 6),                # AVX-512: 6 rows of 64 floats
    ("llvm -mcpu=skylake-avx512", 4, 6),
    ("llvm -mcpu=x86-64-v3", 2, 6),             # AVX2: the 6x16 tile
    ("llvm -mtriple=aarch64-linux-gnu", 4, 6),  # NEON: 6 rows of 16 floats
])
def test_the_default_panel_loads_least_per_muladd_and_fits_the_registers(target, vectors,
                                                                          rows):
    """The default register tile (:func:`schedules.panel_vectors` vectors of B by the
    rows the registers leave) is the one of fewest loads per multiply-add; its code
    (whatever machine runs the test) does every multiply-add of an unrolled step from
    registers, with no vector spilled to the stack."""
    cpu = hllvm.parse_cpu(target)
    assert schedules.panel_vectors(cpu) == vectors
    panel = schedules.default_panel(1024, "float32", cpu)
    assert panel == vectors * cpu.vector_lanes("float32")
    assert schedules.matmul_tile_rows(96, panel, "float32", cpu) == rows
    with compiling_for(cpu):
        assembly = build([schedules.matmul_function(96, 2 * panel, 256, cpu=cpu)],
                         name="tile", cpu=cpu).assembly()
    steps = schedules.reduction_steps(256, schedules.reduction_unroll_limit(
        rows, panel, "float32", cpu))
    assert len(_MULADDS.findall(assembly)) >= rows * vectors * steps
    assert not _STACK.findall(assembly)


@ISAS
@pytest.mark.parametrize("m,n,k", [(1, 45, 29), (13, 100, 64), (100, 70, 31),
                                   (1000, 33, 96)])
def test_register_tiles_of_any_row_count_are_exact(target, m, n, k):
    """Row counts that no tile divides (the tiles are evened over the rows, the last one
    shorter) and columns that no panel divides, in the code of either ISA."""
    cpu = hllvm.parse_cpu(target)
    panel = schedules.default_panel(n, "float32", cpu)
    rows = schedules.matmul_tile_rows(m, panel, "float32", cpu)
    vectors = max(schedules.PANEL_VECTORS, panel // cpu.vector_lanes("float32"))
    # no more tiles than the panel's register tile needs
    assert -(-m // rows) == -(-m // schedules.tile_rows(cpu, None, vectors))
    a, b = _small_integers((m, k)), _small_integers((k, n))
    c = np.full((m, n), np.nan, np.float32)
    hllvm.build(schedules.matmul_function(m, n, k, cpu=cpu), cpu=cpu)(a, b, c)
    np.testing.assert_array_equal(c, a @ b)


def _scheduled_product(a_shape, b_shape, cpu):
    """Placeholders, the packed product and its CPU schedule for ``cpu``."""
    A = te.placeholder(a_shape, "float32", "A")
    B = te.placeholder(b_shape, "float32", "B")
    C = plain_matmul(A, B)
    schedules.pack_matmul(C, cpu=cpu)
    s = te.create_schedule(C)
    schedules.schedule_matmul(s, C, cpu)
    return A, B, C, s


def _assert_product_exact(a_shape, b_shape, cpu):
    """The packed, scheduled product for ``cpu`` of small integers (every sum exact):
    NumPy's bits, every output written."""
    A, B, C, s = _scheduled_product(a_shape, b_shape, cpu)
    a, b = _small_integers(a_shape), _small_integers(b_shape)
    c = np.full(C.shape, np.nan, np.float32)
    hllvm.build(te.lower(s, [A, B, C], name="product"), cpu=cpu)["product"](a, b, c)
    np.testing.assert_array_equal(c, np.matmul(a, b))


@ISAS
@pytest.mark.parametrize("a_shape,b_shape", [
    ((200, 64), (64, 1100)),        # groups of panels, the last group and panel short
    ((2, 200, 64), (2, 64, 520)),   # batched
])
def test_grouped_panels_are_exact(target, a_shape, b_shape):
    """With an L2 too small for A, a row tile meets a group of panels in turn
    (:func:`schedules.panel_group`); groups and panels that do not divide are exact."""
    cpu = dataclasses.replace(hllvm.parse_cpu(target), num_cores=2)
    m, depth, n = a_shape[-2], a_shape[-1], b_shape[-1]
    panel = schedules.default_panel(n, "float32", cpu)
    # an L2 of four panels: two to a group, A (50 KiB) and a panel overflow it
    cpu = dataclasses.replace(cpu, l2=4 * depth * panel * 4)
    group = schedules.panel_group(m, depth, -(-n // panel), panel, 4,
                                  math.prod(a_shape[:-2]), cpu=cpu)
    assert 1 < group < -(-n // panel)
    _assert_product_exact(a_shape, b_shape, cpu)


@ISAS
@pytest.mark.parametrize("a_shape,b_shape", [
    ((2, 13, 29), (29, 45)),            # [B, T, K] x [K, N]: a shared right operand
    ((2, 3, 100, 16), (2, 3, 16, 100)),  # attention's [B, H, T, D] x [B, H, D, T]
])
def test_batched_products_of_any_row_count_are_exact(target, a_shape, b_shape):
    cpu = hllvm.parse_cpu(target)
    _assert_product_exact(a_shape, b_shape, cpu)


@pytest.mark.parametrize("target,spill", [
    ("llvm -mcpu=x86-64-v4", r"\(%rsp\).*mm|mm.*\(%rsp\)"),   # AVX-512: 14 rows
    ("llvm -mcpu=x86-64-v3", r"\(%rsp\).*mm|mm.*\(%rsp\)"),   # AVX2: 6 rows
    ("llvm -mtriple=aarch64-linux-gnu", r"(str|ldr|stp|ldp)\s+q\d+.*\[sp"),  # NEON: 13
])
def test_the_register_tile_fits_the_registers(target, spill):
    """The tallest tile the description gives keeps its accumulators and operands in
    vector registers: no vector register is spilled to the stack (one more row would)."""
    cpu = hllvm.parse_cpu(target)
    rows = schedules.tile_rows(cpu)
    assembly = hllvm.build(schedules.matmul_function(rows * 8, 256, 256, cpu=cpu),
                           cpu=cpu).assembly()
    assert not [line for line in assembly.splitlines() if re.search(spill, line)]


@pytest.mark.parametrize("shape", [(7, 13), (3, 64, 65), (300, 70), (5,)])
def test_injective_schedule_broadcast_add(shape):
    A = te.placeholder(shape, "float32", "A")
    bias = te.placeholder((shape[-1],), "float32", "bias")
    C = te.compute(shape, lambda *i: te.exp(A[i]) + bias[i[-1]], name="C")
    s = te.create_schedule(C)
    schedules.schedule_injective(s, C, cpu=active_cpu())
    func = te.lower(s, [A, bias, C], name="f")
    a = RNG.standard_normal(shape).astype(np.float32)
    b = RNG.standard_normal(shape[-1]).astype(np.float32)
    c = np.zeros(shape, np.float32)
    hllvm.build(func)(a, b, c)
    np.testing.assert_allclose(c, np.exp(a) + b, rtol=1e-5, atol=1e-6)
    # the fused index recombines: A and C are read and written as contiguous vectors
    loads = tir.collect(func.body, lambda n: isinstance(n, tir.BufferLoad) and n.buffer.name == "A")
    assert all(isinstance(load.indices[0], tir.Ramp) for load in loads)


@pytest.mark.parametrize("shape,axis", [((40, 1000), 1), ((300, 70), 0), ((6, 7, 8), 1)])
def test_reduction_schedule_sum(shape, axis):
    A = te.placeholder(shape, "float32", "A")
    r = te.reduce_axis(shape[axis], "r")
    out_shape = shape[:axis] + shape[axis + 1:]

    def body(*i):
        return te.sum(A[i[:axis] + (r,) + i[axis:]], axis=r)

    S = te.compute(out_shape, body, name="S")
    s = te.create_schedule(S)
    schedules.schedule_reduction(s, S)
    a = RNG.standard_normal(shape).astype(np.float32)
    out = np.zeros(out_shape, np.float32)
    hllvm.build(te.lower(s, [A, S], name="f"))(a, out)
    np.testing.assert_allclose(out, a.sum(axis), rtol=1e-4, atol=1e-4)


def conv2d_nchw(X, Wt, stride, padding):
    """A padded direct convolution in TE (the shape schedule_conv2d_nchw expects)."""
    n, c, h, w = X.shape
    k, _, r, s = Wt.shape
    out_h = (h + 2 * padding - r) // stride + 1
    out_w = (w + 2 * padding - s) // stride + 1
    padded = te.compute(
        (n, c, h + 2 * padding, w + 2 * padding),
        lambda b, ch, y, x: te.if_then_else(
            te.logical_and(te.logical_and(y >= padding, y < h + padding),
                           te.logical_and(x >= padding, x < w + padding)),
            X[b, ch, y - padding, x - padding], 0.0), name="padded")
    rc, ry, rx = te.reduce_axis(c, "rc"), te.reduce_axis(r, "ry"), te.reduce_axis(s, "rx")
    return te.compute((n, k, out_h, out_w), lambda b, f, y, x: te.sum(
        padded[b, rc, y * stride + ry, x * stride + rx] * Wt[f, rc, ry, rx],
        axis=[rc, ry, rx]), name="Y")


def conv2d_reference(x, w, stride, padding):
    n, c, h, width = x.shape
    k, _, r, s = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    out_h = (h + 2 * padding - r) // stride + 1
    out_w = (width + 2 * padding - s) // stride + 1
    out = np.zeros((n, k, out_h, out_w), np.float64)
    for ry in range(r):
        for rx in range(s):
            window = xp[:, :, ry:ry + stride * out_h:stride, rx:rx + stride * out_w:stride]
            out += np.einsum("nchw,kc->nkhw", window, w[:, :, ry, rx])
    return out


@pytest.mark.parametrize("shape,kernel,stride,padding", [
    ((1, 8, 14, 14), (16, 8, 3, 3), 1, 1),
    ((2, 3, 17, 19), (5, 3, 3, 3), 2, 1),
    ((1, 4, 9, 40), (12, 4, 1, 1), 1, 0),
    ((1, 2, 11, 11), (8, 2, 5, 5), 1, 2),
])
def test_conv2d_schedule_matches_numpy(shape, kernel, stride, padding):
    X = te.placeholder(shape, "float32", "X")
    Wt = te.placeholder(kernel, "float32", "W")
    Y = conv2d_nchw(X, Wt, stride, padding)
    s = te.create_schedule(Y)
    schedules.schedule_conv2d_nchw(s, Y, cpu=active_cpu())
    func = te.lower(s, [X, Wt, Y], name="conv")
    assert tir.collect(func.body, lambda n: isinstance(n, tir.For) and n.kind is
                       tir.ForKind.PARALLEL)
    x = RNG.standard_normal(shape).astype(np.float32)
    w = RNG.standard_normal(kernel).astype(np.float32)
    y = np.full(Y.shape, np.nan, np.float32)
    hllvm.build(func)(x, w, y)
    np.testing.assert_allclose(y, conv2d_reference(x, w, stride, padding), rtol=1e-4, atol=1e-4)


@ISAS
def test_a_last_panel_cut_to_no_whole_number_of_vectors_runs_a_vector_at_a_time(target):
    """n leaves a last panel of one vector and a quarter (20 of 32 lanes on AVX-512):
    the tile runs it as a whole vector and a short one, never as one vector of that
    width (which LLVM scalarized, spilling the accumulators), and stays exact."""
    cpu = hllvm.parse_cpu(target)
    lanes = cpu.vector_lanes("float32")
    width = schedules.default_panel(4096, "float32", cpu)
    tail = lanes + lanes // 4
    n = 3 * width + tail
    assert schedules.ragged_panel_tail(n, width, "float32", cpu)
    assert not schedules.ragged_panel_tail(3 * width + lanes // 2, width, "float32", cpu)
    A = te.placeholder((40, 24), "float32", "A")
    B = te.placeholder((24, n), "float32", "B")
    C = plain_matmul(A, B)
    schedules.pack_matmul(C, cpu=cpu)
    s = te.create_schedule(C)
    schedules.schedule_matmul(s, C, cpu)
    text = str(te.lower(s, [A, B, C], name="product"))
    assert f", 1, {tail})" not in text and f", 1, {lanes // 4})" in text
    _assert_product_exact((40, 24), (24, n), cpu)


@pytest.mark.parametrize("target,limit", [
    ("llvm -mcpu=x86-64-v3", 8),              # AVX2: 6x16 tile, 12 FMAs a step
    ("llvm -mcpu=x86-64-v4", 4),              # AVX-512: 14x32 tile, 28 FMAs a step
    ("llvm -mtriple=aarch64-linux-gnu", 1),   # NEON: not unrolled (it spilled)
])
@pytest.mark.parametrize("depth", [256, 27, 12, 31])
def test_the_reduction_loop_does_the_most_dividing_steps_an_iteration(target, limit, depth):
    """The register tile's reduction loop is split into iterations of the most steps,
    up to the description's limit (:func:`schedules.reduction_unroll_limit`), that
    divide the reduction (no guarded tail), unrolled by LLVM."""
    cpu = hllvm.parse_cpu(target)
    panel = schedules.default_panel(64, "float32", cpu)
    rows = schedules.matmul_tile_rows(64, panel, "float32", cpu)
    assert schedules.reduction_unroll_limit(rows, panel, "float32", cpu) == limit
    steps = schedules.reduction_steps(depth, limit)
    assert steps == max(d for d in range(1, limit + 1) if depth % d == 0)
    text = str(schedules.matmul_function(64, 64, depth, cpu=cpu))
    if steps == 1:
        assert "k.inner" not in text and f"for k in serial(0, {depth})" in text
    else:
        assert f"for k.outer in serial(0, {depth // steps})" in text
        assert f"for k.inner in unroll_hint(0, {steps})" in text


@ISAS
@pytest.mark.parametrize("m,n,k", [(13, 40, 27), (50, 100, 12), (7, 16, 1000)])
def test_unrolled_reductions_are_exact(target, m, n, k):
    """Reductions unrolled by a divisor short of the limit (27: 3 steps, 12: 6 on AVX2)
    or by the whole limit, with short row tiles and a short last panel."""
    _assert_product_exact((m, k), (k, n), hllvm.parse_cpu(target))


@ISAS
@pytest.mark.parametrize("a_shape,b_shape", [((128, 64), (64, 100)), ((2, 30, 16), (16, 50))])
def test_a_short_last_panel_runs_in_the_parallel_loop(target, a_shape, b_shape):
    """The last column panel, cut short by n, is computed inside the parallel loop over
    the panels (a branch of its body), not serially after it: every statement at the
    top of the function is an allocation or a parallel loop."""
    cpu = hllvm.parse_cpu(target)
    A, B, C, s = _scheduled_product(a_shape, b_shape, cpu)
    lines = str(te.lower(s, [A, B, C], name="product")).splitlines()[1:]
    top = [line.strip() for line in lines if re.match(r"  \S", line)]
    assert top and all(re.match(r"(allocate |for \S+ in parallel\()", line) for line in top)
    assert any("else:" in line for line in lines)
    _assert_product_exact(a_shape, b_shape, cpu)


@pytest.mark.parametrize("m,rows,block", [(30, 14, 8), (28, 14, 32), (5, 12, 16)])
def test_a_products_a_packed_in_row_blocks_is_exact(m, rows, block):
    """A read through its copy in blocks of ``rows`` rows by ``block`` reduction steps
    (zero rows past m: 30 rows in tiles of 14, 5 rows in one tile of 12): the copy
    holds A's blocks, and the product scheduled around it matches NumPy."""
    k, n = 32, 48
    A = te.placeholder((m, k), "float32", "A")
    B = te.placeholder((k, n), "float32", "B")
    C = schedules.matmul(A, B, cpu=active_cpu())
    blocks = schedules.pack_matmul_rows(C, rows, block)
    assert C.op.attrs["packed_A"] is blocks
    assert tuple(blocks.shape) == (-(-m // rows), k // block, rows, block)
    s = te.create_schedule(C)
    packed = C.op.attrs["packed_B"]
    s[packed].parallel(s[packed].op.axis[0])
    schedules.schedule_packed_rows(s, blocks, cpu=active_cpu())
    io, jo, ii, ji = s[C].tile(*s[C].op.axis, rows, 16)
    s[C].vectorize(ji)
    lowered = te.lower(s, [A, B, C], name="f")
    a, b = _small_integers((m, k)), _small_integers((k, n))
    c = np.full((m, n), np.nan, np.float32)
    hllvm.build(lowered)["f"](a, b, c)
    np.testing.assert_array_equal(c, a @ b)
    # the copy itself: A's rows, blocked; zeros past its last row
    copy = te.compute(blocks.shape, lambda *i: blocks[i], name="copy")
    s = te.create_schedule(copy)
    out = np.empty(tuple(blocks.shape), np.float32)
    hllvm.build(te.lower(s, [A, copy], name="g"))["g"](a, out)
    padded = np.zeros((out.shape[0] * rows, k), np.float32)
    padded[:m] = a
    expected = padded.reshape(-1, rows, k // block, block).transpose(0, 2, 1, 3)
    np.testing.assert_array_equal(out, expected)


def test_row_blocks_need_a_packed_2d_product_and_a_dividing_block():
    A = te.placeholder((8, 24), "float32", "A")
    B = te.placeholder((24, 16), "float32", "B")
    with pytest.raises(CompileError, match="no 2-D product"):
        schedules.pack_matmul_rows(plain_matmul(A, B, "C"), 4, 8)  # B not packed
    C = schedules.matmul(A, B, cpu=active_cpu())
    with pytest.raises(CompileError, match="dividing"):
        schedules.pack_matmul_rows(C, 4, 16)
    schedules.pack_matmul_rows(C, 4, 8)
    with pytest.raises(CompileError, match="packed already"):
        schedules.pack_matmul_rows(C, 4, 8)


@pytest.mark.parametrize("target", ["llvm", "llvm -mattr=-avx512f",
                                    "llvm -mtriple=aarch64-linux-gnu"],
                         ids=["host", "avx2", "neon"])
@pytest.mark.parametrize("a_shape,b_shape", [((2, 37, 16), (2, 16, 197)),
                                             ((40, 24), (24, 100))])
def test_full_panels_of_a_ragged_product_pack_contiguous_rows(target, a_shape, b_shape):
    """n = 197 (ViT's attention scores) leaves a short last panel: the full panels
    pack B's rows as contiguous vectors, behind a branch on the panel, and only the
    last one reads clamped columns (which gathered in every panel: [12,197,64] x
    [12,64,197] ran 1.23x faster without). Exact where it runs."""
    cpu = hllvm.parse_cpu(target)
    A, B, C, s = _scheduled_product(a_shape, b_shape, cpu)
    func = te.lower(s, [A, B, C], name="product")
    (pack,) = [line for line in str(func).splitlines()
               if line.strip().startswith(f"{C.name}.packed_B[ramp(")]
    width = C.op.attrs["packed_B"].shape[-1]
    assert re.search(rf"= select\(\(.+? < \d+\), B\[ramp\([^\]]*, 1, {width}\)\]", pack)
    if cpu.arch == "x86_64":
        _assert_product_exact(a_shape, b_shape, cpu)
    else:  # cross-built
        assert build(func, name="product", cpu=cpu).assembly()
