"""int8 depthwise kernels of MobileNetV2's layers, each kernel against the ones it
replaces, in alternating rounds in one process, on the CPU clock:

* ``phases``: 16-bit products (the data centered as int16; strided: split by column
  phase), what a CPU without a pair product gets;
* ``pairs``: strided layers' neighbouring column taps on one int16 pair product
  (``pairs_apply``: AVX-512BW; elsewhere where the copied rows mostly load whole
  vectors);
* ``windows``: a kernel row per 8-bit dot product over quads gathered in registers by a
  byte shuffle (``quads_apply``: VNNI, NEON ``sdot``; on x86 without VNNI two ``pmaddwd``
  by weights widened to int16; without VBMI the shuffle is ``pshufb`` per 128-bit block).

    python benchmarks/int8_depthwise.py [--target "llvm -mcpu=haswell"] [--rounds 10]

(On a CPU with AVX-VNNI, such as Zen 5, ``-mattr=-avx512f`` still has a 256-bit
``vpdpbusd``: ``-mcpu=haswell`` is AVX2 without VNNI.)

Prints, per layer (channels, input size, stride), the median ms per call (int32 sums,
no epilogue) of each kernel the target can build and each one / ``phases``; all give the
same bits (checked). Each kernel reads its constant weight packed once beforehand, as a
model's kernel does (``depthwise_weight_packing``: the window kernel's quads, int16
without VNNI, the column pairs' pairs of taps, else each tap's int16 vector).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys

import numpy as np
from alternating import same_bits_medians

#: (channels, input height and width, stride) of MobileNetV2's depthwise layers
LAYERS = ((32, 112, 1), (96, 112, 2), (144, 56, 1), (144, 56, 2), (192, 28, 1),
          (192, 28, 2), (384, 14, 1), (576, 14, 1), (576, 14, 2), (960, 7, 1))

#: each kernel, by the choices that select it (pairs_apply, quads_apply)
KERNELS = {"phases": (False, False), "pairs": (True, False), "windows": (True, True)}


@contextlib.contextmanager
def _choices(pairs: bool, windows: bool):
    """``int8_depthwise_conv`` with the column pairs and the window kernel allowed or
    not (where allowed, each still applies only where its own test says)."""
    from heterocc.targets.llvm.schedules import int8_depthwise as dw

    saved = dw.pairs_apply, dw.quads_apply
    if not pairs:
        dw.pairs_apply = lambda *args: False
    if not windows:
        dw.quads_apply = lambda *args: False
    try:
        yield
    finally:
        dw.pairs_apply, dw.quads_apply = saved


def build(channels: int, size: int, stride: int, cpu, kernel: str):
    """The compiled depthwise kernel of one layer (3x3, pad 1) built with ``kernel``'s
    choices and scheduled as a model's (the window kernel's copy inside the result's
    parallel loop), its weight a constant packed beforehand as a model's kernel reads it
    (``depthwise_weight_packing``), the kind its sums carry (``kernel`` itself, or the
    one it fell back to) and the weight's packing."""
    from heterocc import te
    from heterocc.targets import llvm as hllvm
    from heterocc.targets.llvm.schedules import int8_depthwise as dw
    from heterocc.targets.llvm.schedules.int8_conv import schedule_int8_conv_result
    from heterocc.targets.llvm.schedules.int8_depthwise_quads import attach_copies_in_blocks
    from heterocc.te.schedule_reads import reads_of

    with _choices(*KERNELS[kernel]):
        x = te.placeholder((1, channels, size, size), "uint8", "x")
        zero = te.placeholder((1,), "uint8", "zero")
        attrs = {"strides": (stride, stride), "pads": (1, 1, 1, 1), "dilations": (1, 1),
                 "group": channels}
        shape, dtype, packing = dw.depthwise_weight_packing((channels, 1, 3, 3), attrs, cpu,
                                                            (1, channels, size, size))
        w = te.placeholder((channels, 1, 3, 3), "int8", "w")
        packed = te.placeholder(shape, dtype, "w.packed")
        out = dw.int8_depthwise_conv(x, w, zero, attrs, cpu, packed_weight=packed)
    sums = next(t for t in reads_of(out.op.body) if "int8_rows" in t.op.attrs)
    built = "windows" if sums.op.attrs.get("int8_quads") else \
        "pairs" if sums.op.attrs.get("int8_pairs") else "phases"
    schedule = te.create_schedule(out)
    dw.schedule_int8_depthwise(schedule, sums, cpu)
    schedule_int8_conv_result(schedule, out, cpu=cpu)
    attach_copies_in_blocks(schedule, out, schedule[out], schedule[out].leaf_iter_vars[0])
    module = hllvm.build(te.lower(schedule, [x, packed, zero, out], name="conv"), cpu=cpu)
    return module["conv"], tuple(out.shape), built, packing


def _with_weight(function, packed_weight, x, zero, out):
    """``function`` called with its packed weight between the data and the zero point."""
    return function(x, packed_weight, zero, out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=10, help="calls per timed block")
    args = parser.parse_args()
    os.environ.setdefault("HETEROCC_NUM_THREADS", "1")
    from heterocc.targets.llvm.cpu import parse_cpu
    from heterocc.targets.llvm.schedules import int8_depthwise as dw

    cpu = parse_cpu(args.target)
    print(f"{args.target}: load average (1 min) {os.getloadavg()[0]:.2f}; {args.rounds} "
          f"alternating rounds of {args.calls} calls, each timed; CPU clock, 1 thread")
    rng = np.random.default_rng(0)
    for channels, size, stride in LAYERS:
        built = [build(channels, size, stride, cpu, kernel) for kernel in KERNELS]
        x = rng.integers(0, 256, (1, channels, size, size)).astype(np.uint8)
        w = rng.integers(-128, 128, (channels, 1, 3, 3)).astype(np.int8)
        zero = np.array([7], np.uint8)
        # each kernel with its own packing of the weight, made once (as a model's is)
        kernels = {kind: (functools.partial(_with_weight, function,
                                            dw.pack_depthwise_weight_array(w, packing)), shape)
                   for function, shape, kind, packing in built}
        outs = [np.zeros(shape, np.int32) for _, shape in kernels.values()]
        medians = same_bits_medians([f for f, _ in kernels.values()], (x, zero), outs,
                                    args.rounds * args.calls, args.calls)
        if medians is None:
            print(f"{channels} channels at {size}x{size}: the kernels differ")
            return 1
        base = medians[0]
        figures = ", ".join(f"{kind} {seconds * 1e3:.4f} ms ({seconds / base:.2f}x)"
                            for kind, seconds in zip(kernels, medians))
        print(f"{channels:4d} channels {size:3d}x{size:<3d} stride {stride}: {figures}")
    print(f"load average (1 min) {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
