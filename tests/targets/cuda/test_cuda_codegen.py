"""CUDA C from the kernels of every GPU schedule: what the text must contain, and that
nvcc compiles all of it (PTX and cubins for sm_80 and sm_90) in one translation unit."""

from __future__ import annotations

import dataclasses
import functools

import pytest

from heterocc import tir
from heterocc.errors import CompileError
from heterocc.targets.cuda import (
    DEFAULT_ARCHS,
    compile_cuda,
    cuda_source,
    find_nvcc,
    lower_for_gpu,
    lower_to_kernels,
)
from heterocc.targets.cuda.codegen import c_type
from heterocc.tir import ForKind, IRBuilder

from . import kernels

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed")


@functools.cache
def _all_kernels():
    out = []
    for case in kernels.inventory_cases():
        gpu = lower_for_gpu(case.outputs, case.inputs, case.name)
        out += [dataclasses.replace(k, name=f"{case.name}_{k.name}") for k in gpu.kernels]
    return out


@needs_nvcc
def test_every_schedule_compiles_with_nvcc_in_one_unit():
    source = cuda_source("inventory", _all_kernels())
    compiled = compile_cuda(source, "inventory")
    assert set(compiled.cubins) == set(DEFAULT_ARCHS)
    assert all(len(cubin) > 0 for cubin in compiled.cubins.values())
    for kernel in _all_kernels():
        assert f".entry {kernel.name}(" in compiled.ptx


def test_matmul_source_has_tiles_barriers_vectors_and_registers():
    case = kernels.matmul(128, 256, 64)
    source = cuda_source("mm", lower_for_gpu(case.outputs, case.inputs, "mm").kernels)
    assert "__launch_bounds__(256) mm_kernel0(const float* __restrict__ A, " \
           "const float* __restrict__ B, float* __restrict__ C)" in source
    assert "mm_kernel0<<<grid(4, 2, 1), block(16, 16, 1)>>>(A, B, C)" in source
    assert source.count("__syncthreads();") == 2
    assert source.count("__shared__ __align__(16) float") == 2
    assert "float C_local[16];" in source
    assert "*(float4*)(A_shared + " in source and "*(float4*)(B_shared + " in source
    assert "hcc_floordiv" not in source.split("mm_kernel0(")[1], \
        "non-negative index arithmetic divides directly"


def test_narrow_thread_loop_is_guarded_and_names_are_legal():
    ib = IRBuilder()
    data = tir.Buffer("and", (2, 64), "float32")
    result = tir.Buffer("pow", (2, 64), "float32")
    with ib.for_range(2, "b", ForKind.THREAD_BINDING, thread_tag="blockIdx.x") as b:
        with ib.for_range(64, "t", ForKind.THREAD_BINDING, thread_tag="threadIdx.x") as t:
            ib.store(result, tir.BufferLoad(data, (b, t)), b, t)
        with ib.for_range(32, "t", ForKind.THREAD_BINDING, thread_tag="threadIdx.x") as t:
            ib.store(result, tir.BufferLoad(data, (b, t)) * 2.0, b, t)
    gpu = lower_to_kernels(tir.PrimFunc("f", (data, result), ib.get()))
    assert len(gpu.kernels) == 1
    source = cuda_source("f", gpu.kernels)
    assert "if (threadIdx.x < 32) {" in source
    assert "if (threadIdx.x < 64)" not in source
    assert "const float* __restrict__ and_, float* __restrict__ pow_" in source


@needs_nvcc
def test_nvcc_error_shows_the_failing_source_line():
    source = "extern \"C\" __global__ void k(float* a) {\n  a[0] = undefined_name;\n}\n"
    with pytest.raises(CompileError) as error:
        compile_cuda(source, "broken", ("sm_80",))
    message = str(error.value)
    assert "nvcc failed on 'broken'" in message and "undefined_name" in message
    assert "    2>|   a[0] = undefined_name;" in message


def test_unsupported_dtype_is_named():
    with pytest.raises(CompileError, match="'complex64' has no CUDA C type"):
        c_type("complex64")
