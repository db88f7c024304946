"""The peak of this CPU's vector units, measured: what no kernel of the llvm target can
beat.

A loop of independent vector multiply-adds on registers (no memory), as wide and as
many as the CPU description says (every vector register but four holds an accumulator:
enough chains to cover the multiply-add latency on every port), generated with llvmlite
for that description and timed on one thread. ``benchmarks/fma_peak.py`` prints it; the
CPU's cost model bounds a function's time by it (:func:`multiply_accumulate_peak`), which
takes a few milliseconds where timing reference kernels took half a second.
"""

from __future__ import annotations

import ctypes
import time

import llvmlite.binding as llvm
import numpy as np

from .cpu import CPUDescription
from .module import machines


def peak_kernel_ir(lanes: int, chains: int, fma: bool) -> str:
    """LLVM IR of ``float peak(i64 count, float seed)``: ``count`` iterations, each
    advancing ``chains`` independent ``<lanes x float>`` accumulators by one multiply-add
    (an ``llvm.fma`` call, or a multiply and an add where the CPU has no FMA); returns a
    sum of the accumulators so that none is dead code."""
    vector = f"<{lanes} x float>"
    step = []
    for c in range(chains):
        if fma:
            step.append(f"  %n{c} = call {vector} @llvm.fma.v{lanes}f32({vector} %a{c}, "
                        f"{vector} %x, {vector} %y)")
        else:
            step.append(f"  %m{c} = fmul {vector} %a{c}, %x")
            step.append(f"  %n{c} = fadd {vector} %m{c}, %y")
    phis = [f"  %a{c} = phi {vector} [ %x, %entry ], [ %n{c}, %loop ]" for c in range(chains)]
    total, sums = "%n0", []
    for c in range(1, chains):
        sums.append(f"  %s{c} = fadd {vector} {total}, %n{c}")
        total = f"%s{c}"
    newline = "\n"
    return f"""
declare {vector} @llvm.fma.v{lanes}f32({vector}, {vector}, {vector})
define float @peak(i64 %count, float %seed) {{
entry:
  %x0 = insertelement {vector} undef, float %seed, i32 0
  %x = shufflevector {vector} %x0, {vector} undef, <{lanes} x i32> zeroinitializer
  %y = fmul {vector} %x, %x
  br label %loop
loop:
{newline.join(phis)}
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
{newline.join(step)}
  %i1 = add i64 %i, 1
  %more = icmp ult i64 %i1, %count
  br i1 %more, label %loop, label %done
done:
{newline.join(sums)}
  %r = extractelement {vector} {total}, i32 0
  ret float %r
}}
"""


def peak_kernel(description: CPUDescription):
    """The peak loop compiled for ``description`` into its LLVM state's engine (once per
    process): a ctypes function of the iteration count and a seed (ctypes releases the
    GIL during a call), with its lanes and chains; None where code for ``description``
    does not run here."""
    key = description.spec()
    if key in _KERNELS:
        return _KERNELS[key]
    state = machines(description)
    if state.engine is None:
        return None
    lanes = description.vector_bytes // 4
    chains = max(8, description.vector_registers - 4)
    ir = peak_kernel_ir(lanes, chains, description.fma).replace("@peak(", "@heterocc_peak(")
    module = llvm.parse_assembly(ir)
    module.verify()
    with state.engine_lock:  # the engine the target's kernels are loaded into
        state.engine.add_module(module)
        state.engine.finalize_object()
        address = state.engine.get_function_address("heterocc_peak")
    call = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64, ctypes.c_float)(address)
    _KERNELS[key] = call, lanes, chains
    return _KERNELS[key]


#: :func:`peak_kernel` by CPU description (its module stays in the engine)
_KERNELS: dict[str, tuple] = {}


#: :func:`multiply_add_rate`: runs of this many iterations, the fastest of this many
PEAK_ITERATIONS = 20_000
PEAK_RUNS = 15


def multiply_add_rate(description: CPUDescription, iterations: int = PEAK_ITERATIONS,
                      runs: int = PEAK_RUNS) -> float | None:
    """float32 multiply-adds per second one core of this CPU reaches at its peak (the
    fastest of ``runs`` runs of the peak loop on one thread: other processes only ever
    slow a run; ~50 us each on AVX-512); None where code for ``description`` does not
    run here."""
    found = peak_kernel(description)
    if found is None:
        return None
    call, lanes, chains = found
    call(iterations, 0.999)  # warm: code paged in, the core's vector units awake
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        call(iterations, 0.999)
        best = min(best, time.perf_counter() - start)
    return iterations * chains * lanes / best


def multiply_accumulate_peak(description: CPUDescription, element: str,
                             per_core: float) -> float:
    """The most multiply-accumulates per second on ``element`` operands that all of
    ``description``'s cores reach, given ``per_core`` float32 multiply-adds per second
    per core (:func:`multiply_add_rate`). A vector instruction multiplies at most as many
    operand pairs as its register holds elements (a float32 multiply-add 4-byte lanes,
    an int8 dot product such as VNNI's ``vpdpbusd`` 1-byte ones, four per 32-bit lane, at
    the same throughput), so a narrower element raises the peak by 4 bytes over its size.
    The llvm target's kernels are vector code (no AMX tiles), which this bounds."""
    return per_core * description.num_cores * 4 / np.dtype(element).itemsize
