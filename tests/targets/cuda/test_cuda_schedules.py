"""Semantics of every GPU schedule without a GPU: the kernels the CUDA code generator
prints, run sequentially on the CPU (thread loops as serial loops, barriers respected,
per-thread registers per thread), against NumPy."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from heterocc import te
from heterocc.compute.nn import matmul
from heterocc.errors import CompileError
from heterocc.targets.cuda import (
    MatmulTiling,
    compile_cuda,
    cuda_source,
    find_nvcc,
    lower_for_gpu,
    run_emulated,
    schedules,
)

from . import kernels


def _run(case, gpu):
    inputs = case.random_inputs()
    outputs = [np.full(t.shape, np.nan, t.dtype) for t in case.outputs]
    run_emulated(gpu, inputs + outputs)
    for got, want in zip(outputs, case.reference(*inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", kernels.inventory_cases(), ids=lambda c: c.name)
def test_gpu_schedule_matches_numpy(case):
    _run(case, lower_for_gpu(case.outputs, case.inputs, case.name))


def test_matmul_uses_shared_tiles_and_register_blocks():
    case = kernels.matmul(128, 256, 64)
    gpu = lower_for_gpu(case.outputs, case.inputs, "mm")
    (kernel,) = gpu.kernels
    assert kernel.grid == (4, 2, 1) and kernel.block == (16, 16, 1)
    (accumulator,) = kernel.per_thread
    assert accumulator.shape == (4, 4) and accumulator.scope == "local"
    assert set(kernel.per_thread[accumulator]) == {"threadIdx.x", "threadIdx.y"}


@pytest.mark.parametrize("tiling", [MatmulTiling(32, 64, 2, 4, 4), MatmulTiling(64, 32, 4, 2, 16)])
def test_matmul_tilings_with_tails(tiling):
    case = kernels.matmul(70, 90, 37)
    s = te.create_schedule(case.outputs)
    schedules.schedule_matmul(s, case.outputs[0], tiling)
    from heterocc.targets.cuda import lower_to_kernels

    func = te.lower(s, [*case.inputs, *case.outputs], name="mm", optimize=False)
    _run(case, lower_to_kernels(func))


def test_matmul_schedule_rejects_other_computes():
    case = kernels.row_sum()
    s = te.create_schedule(case.outputs)
    with pytest.raises(CompileError, match="is not sum"):
        schedules.schedule_matmul(s, case.outputs[0])
    mm = kernels.matmul(64, 64, 8)
    s = te.create_schedule(mm.outputs)
    with pytest.raises(CompileError, match="does not divide"):
        schedules.schedule_matmul(s, mm.outputs[0], MatmulTiling(64, 64, 3, 4, 8))


@pytest.mark.parametrize("a_shape,b_shape", [((40, 24), (24, 50)),
                                             ((2, 40, 24), (24, 50)),
                                             ((2, 3, 10, 8), (2, 3, 8, 10))])
def test_compute_library_matmul_is_scheduled_as_it_is(a_shape, b_shape):
    """The compute library's product is plain (no CPU packing to undo): a 2-D one gets
    the shared-memory tiles in one kernel, a batched one the reduction schedule."""
    a = te.placeholder(a_shape, "float32", "A")
    b = te.placeholder(b_shape, "float32", "B")
    c = matmul(a, b)
    gpu = lower_for_gpu([c], [a, b], "plain")
    assert len(gpu.kernels) == 1
    assert ("__shared__" in cuda_source("plain", gpu.kernels)) == (len(a_shape) == 2)
    rng = np.random.default_rng(1)
    x = rng.standard_normal(a_shape).astype(np.float32)
    y = rng.standard_normal(b_shape).astype(np.float32)
    out = np.zeros(c.shape, np.float32)
    run_emulated(gpu, [x, y, out])
    np.testing.assert_allclose(out, x @ y, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------ fused epilogues


def _conv_bias_relu_residual() -> kernels.Case:
    conv = kernels.conv2d(n=1, c=8, h=9, w=11, o=12)
    bias = te.placeholder((12,), "float32", "bias")
    skip = te.placeholder(conv.outputs[0].shape, "float32", "skip")
    c = conv.outputs[0]
    biased = te.compute(c.shape, lambda n, k, y, x: c[n, k, y, x] + bias[k], name="biased")
    out = te.compute(c.shape, lambda n, k, y, x: te.maximum(biased[n, k, y, x], 0.0)
                     + skip[n, k, y, x], name="out")

    def reference(x, w, b, s):
        return [np.maximum(conv.reference(x, w)[0] + b[None, :, None, None], 0) + s]

    return kernels.Case("conv_bias_relu_residual", [*conv.inputs, bias, skip], [out], reference)


def _mean_rows(rows=9, columns=40) -> kernels.Case:
    total = kernels.row_sum(rows, columns)
    s = total.outputs[0]
    out = te.compute(s.shape, lambda i: s[i] * (1.0 / columns), name="mean")
    return kernels.Case("mean_rows", total.inputs, [out],
                        lambda a: [a.mean(axis=1)])


@pytest.mark.parametrize("case", [kernels.dense_relu(), kernels.dense_relu(100, 70, 13),
                                  _conv_bias_relu_residual(), _mean_rows()],
                         ids=lambda c: c.name)
def test_elementwise_epilogue_runs_in_the_anchor_kernel(case):
    gpu = lower_for_gpu(case.outputs, case.inputs, case.name)
    assert len(gpu.kernels) == 1 and not gpu.workspaces  # nothing stored in between
    _run(case, gpu)


def test_matmul_epilogue_reads_the_register_tile():
    case = kernels.dense_relu(64, 64, 16)
    gpu = lower_for_gpu(case.outputs, case.inputs, "dense")
    (kernel,) = gpu.kernels
    (accumulator,) = kernel.per_thread
    assert accumulator.scope == "local"
    assert [b.name for b in kernel.params] == ["A", "B", "bias", "out"]


@pytest.mark.parametrize("what", ["transposed", "shifted", "product_is_an_output",
                                  "two_readers"])
def test_epilogue_that_needs_other_threads_sums_is_not_fused(what):
    case = kernels.matmul(48, 48, 8)
    c = case.outputs[0]
    if what == "transposed":
        outs = [te.compute(c.shape, lambda i, j: c[j, i] * 2.0, name="out")]
        reference = [lambda p: p.T * 2]
    elif what == "shifted":
        outs = [te.compute((47, 48), lambda i, j: c[i + 1, j], name="out")]
        reference = [lambda p: p[1:]]
    elif what == "product_is_an_output":
        outs = [c, te.compute(c.shape, lambda i, j: te.maximum(c[i, j], 0.0), name="out")]
        reference = [lambda p: p, lambda p: np.maximum(p, 0)]
    else:
        outs = [te.compute(c.shape, lambda i, j: c[i, j] + 1.0, name="plus"),
                te.compute(c.shape, lambda i, j: c[i, j] - 1.0, name="minus")]
        reference = [lambda p: p + 1, lambda p: p - 1]
    fused = kernels.Case(what, case.inputs, outs,
                         lambda a, b: [f(a @ b) for f in reference])
    gpu = lower_for_gpu(outs, case.inputs, what)
    assert len(gpu.kernels) == 1 + len([o for o in outs if o is not c])
    _run(fused, gpu)


def test_epilogue_of_two_anchors_goes_to_the_first():
    """``out = A @ B + A @ B'``: the sum finishes the first product in its kernel and
    reads the second, which is stored by a kernel of its own, from memory."""
    first, second = kernels.matmul(48, 40, 8), kernels.matmul(48, 40, 8)
    a, b = first.inputs
    b2 = second.inputs[1]
    r = te.reduce_axis(8, "k2")
    c2 = te.compute((48, 40), lambda i, j: te.sum(a[i, r] * b2[r, j], axis=r), name="C2")
    c = first.outputs[0]
    out = te.compute(c.shape, lambda i, j: c[i, j] + c2[i, j], name="out")
    case = kernels.Case("two_anchors", [a, b, b2], [out], lambda x, y, z: [x @ y + x @ z])
    gpu = lower_for_gpu(case.outputs, case.inputs, case.name)
    assert len(gpu.kernels) == 2 and len(gpu.workspaces) == 1  # the second product
    _run(case, gpu)


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed")
def test_fused_epilogues_compile_with_nvcc():
    fused = [dataclasses.replace(kernel, name=f"{case.name}_{kernel.name}")
             for case in (kernels.dense_relu(100, 70, 13), _conv_bias_relu_residual(),
                          _mean_rows())
             for kernel in lower_for_gpu(case.outputs, case.inputs, case.name).kernels]
    compiled = compile_cuda(cuda_source("epilogues", fused), "epilogues", ("sm_80",))
    for kernel in fused:
        assert f".entry {kernel.name}(" in compiled.ptx


def test_a_broadcast_gate_is_computed_once_per_channel():
    """A squeeze-excite's gate, ``Sigmoid`` of a per-channel sum, read by a broadcast
    scale: one kernel computes the sums and their gates, one per channel, the next
    scales; the result matches NumPy."""
    x = te.placeholder((8, 64), "float32", "x")
    s = te.placeholder((8, 4), "float32", "s")
    w = te.placeholder((4,), "float32", "w")
    k = te.reduce_axis(4, "k")
    z = te.compute((8,), lambda c: te.sum(s[c, k] * w[k], axis=k), name="z")
    gate = te.compute((8,), lambda c: 1.0 / (1.0 + te.exp(0.0 - z[c])), name="gate")
    out = te.compute((8, 64), lambda c, p: x[c, p] * gate[c], name="out")
    gpu = lower_for_gpu([out], [x, s, w], "se")
    gate_kernel, scale_kernel = gpu.kernels
    assert gate_kernel.block[0] * gate_kernel.grid[0] == 8
    assert "exp" in str(gate_kernel.body) and "exp" not in str(scale_kernel.body)
    _run(kernels.Case("se", [x, s, w], [out],
                      lambda a, b, c: [a / (1 + np.exp(-(b @ c)))[:, None]]), gpu)
