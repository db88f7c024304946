"""int8 convolutions on CPUs without VNNI: two ``vpmaddwd`` a group of four bytes by
weights widened to int16 when packed (the llvm target's form there,
:func:`heterocc.targets.llvm.schedules.int8_conv.weight_dtype`) against the split-data
``vpmaddubsw`` form it replaced (four multiplies a group, int8 weights), in alternating
rounds in one process, on the CPU clock.

    python benchmarks/int8_pmaddubsw.py [--rounds 6]

Prints, per CPU description (AVX2, AVX-512BW without VNNI) and layer, each kernel's
median ms per call (int32 sums, no epilogue), its GMAC/s and new / old; the two give the
same bits (checked). Both descriptions must run on this host.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from alternating import same_bits_medians
from machine import describe

#: CPU descriptions whose byte dot product is not VNNI's
TARGETS = ("llvm -mcpu=haswell", "llvm -mcpu=skylake-avx512")
#: (input shape, filters, kernel size): ResNet-18's 3x3s, MobileNetV2's 16->96 and
#: 96->24 1x1s
LAYERS = (((1, 64, 56, 56), 64, 3), ((1, 128, 28, 28), 128, 3), ((1, 256, 14, 14), 256, 3),
          ((1, 16, 112, 112), 96, 1), ((1, 96, 56, 56), 24, 1))


def build(cpu, shape, filters: int, kernel: int, widened: bool):
    """The compiled convolution (stride 1, same padding), its weights widened to int16
    when packed (``widened``) or int8 multiplied by the split-data ``vpmaddubsw``."""
    from heterocc import te
    from heterocc.targets import llvm as hllvm
    from heterocc.targets.llvm.schedules.int8_conv import (
        schedule_int8_conv,
        schedule_int8_conv_result,
    )

    module = sys.modules["heterocc.targets.llvm.schedules.int8_conv"]
    chosen = module.weight_dtype
    x = te.placeholder(shape, "uint8", "x")
    w = te.placeholder((filters, shape[1], kernel, kernel), "int8", "w")
    zero = te.placeholder((1,), "uint8", "zero")
    attrs = {"strides": (1, 1), "pads": (kernel // 2,) * 4, "dilations": (1, 1), "group": 1}
    if not widened:
        module.weight_dtype = lambda cpu: "int8"
    try:
        out = module.int8_conv(x, w, zero, attrs, cpu)
    finally:
        module.weight_dtype = chosen
    schedule = te.create_schedule(out)
    schedule_int8_conv(schedule, out.op.body.a.tensor, cpu)
    schedule_int8_conv_result(schedule, out, cpu=cpu)
    built = hllvm.build(te.lower(schedule, [x, w, zero, out], name="conv"), cpu=cpu)
    return built["conv"], tuple(out.shape)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=5, help="calls per timed block")
    args = parser.parse_args()
    os.environ.setdefault("HETEROCC_NUM_THREADS", "1")
    from heterocc.targets import llvm as hllvm
    from heterocc.targets.llvm.cpu import parse_cpu

    host = hllvm.module.host().description
    print(describe())
    print(f"load average (1 min) {os.getloadavg()[0]:.2f}; {args.rounds} alternating rounds "
          f"of {args.calls} calls; CPU clock, 1 thread")
    rng = np.random.default_rng(0)
    for target in TARGETS:
        cpu = parse_cpu(target)
        if not (cpu.arch == host.arch and cpu.features <= host.features):
            print(f"{target}: skipped, this host cannot run it")
            continue
        for shape, filters, kernel in LAYERS:
            kernels = [build(cpu, shape, filters, kernel, widened)
                       for widened in (False, True)]
            x = rng.integers(0, 256, shape).astype(np.uint8)
            w = rng.integers(-128, 128, (filters, shape[1], kernel, kernel)).astype(np.int8)
            zero = np.array([7], np.uint8)
            outs = [np.zeros(out_shape, np.int32) for _, out_shape in kernels]
            medians = same_bits_medians([k for k, _ in kernels], (x, w, zero), outs,
                                        args.rounds * args.calls, args.calls)
            if medians is None:
                print(f"{target} {shape}: the kernels differ")
                return 1
            old, new = medians
            macs = int(np.prod(outs[0].shape)) * shape[1] * kernel * kernel
            print(f"{target:46s} {kernel}x{kernel} {shape[1]:3d}->{filters:3d} at "
                  f"{shape[2]:3d}x{shape[3]:<3d}: split vpmaddubsw {old * 1e3:.3f} ms "
                  f"({macs / old / 1e9:.1f} GMAC/s), widened weights {new * 1e3:.3f} ms "
                  f"({macs / new / 1e9:.1f} GMAC/s), {new / old:.2f}x")
    print(f"load average (1 min) {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
