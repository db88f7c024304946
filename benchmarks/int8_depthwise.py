"""int8 depthwise kernels of MobileNetV2's downsampling layers: the column-pair kernel
(taps in pairs of columns on one int16 pair product, ``pairs_apply``) against the
column-phase one it replaces, in alternating rounds in one process, on the CPU clock.

    python benchmarks/int8_depthwise.py [--target "llvm -mattr=-avx512f"] [--rounds 10]

Prints, per layer (channels, input size, stride), each kernel's median ms per call
(int32 sums, no epilogue) and new / old; the two give the same bits (checked).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from alternating import same_bits_medians

#: (channels, input height and width, stride) of MobileNetV2's strided depthwise layers
LAYERS = ((96, 112, 2), (144, 56, 2), (192, 28, 2), (576, 14, 2))


def build(channels: int, size: int, stride: int, cpu, pairs: bool):
    """The compiled depthwise kernel of one layer (3x3, pad 1), with the column-pair
    kernel where it applies (``pairs``) or the column-phase one."""
    from heterocc import te
    from heterocc.targets import llvm as hllvm
    from heterocc.targets.llvm.schedules import int8_depthwise as dw
    from heterocc.targets.llvm.schedules.int8_conv import schedule_int8_conv_result

    applies = dw.pairs_apply
    if not pairs:
        dw.pairs_apply = lambda *args: False
    try:
        x = te.placeholder((1, channels, size, size), "uint8", "x")
        w = te.placeholder((channels, 1, 3, 3), "int8", "w")
        zero = te.placeholder((1,), "uint8", "zero")
        attrs = {"strides": (stride, stride), "pads": (1, 1, 1, 1), "dilations": (1, 1),
                 "group": channels}
        out = dw.int8_depthwise_conv(x, w, zero, attrs, cpu)
    finally:
        dw.pairs_apply = applies
    schedule = te.create_schedule(out)
    dw.schedule_int8_depthwise(schedule, out.op.body.tensor, cpu)
    schedule_int8_conv_result(schedule, out, cpu=cpu)
    module = hllvm.build(te.lower(schedule, [x, w, zero, out], name="conv"), cpu=cpu)
    return module["conv"], tuple(out.shape)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=10, help="calls per timed block")
    args = parser.parse_args()
    os.environ.setdefault("HETEROCC_NUM_THREADS", "1")
    from heterocc.targets.llvm.cpu import parse_cpu

    cpu = parse_cpu(args.target)
    print(f"{args.target}: load average (1 min) {os.getloadavg()[0]:.2f}; "
          f"{args.rounds} alternating rounds of {args.calls} calls, each timed; CPU clock, "
          "1 thread")
    rng = np.random.default_rng(0)
    for channels, size, stride in LAYERS:
        kernels = [build(channels, size, stride, cpu, pairs) for pairs in (False, True)]
        x = rng.integers(0, 256, (1, channels, size, size)).astype(np.uint8)
        w = rng.integers(-128, 128, (channels, 1, 3, 3)).astype(np.int8)
        zero = np.array([7], np.uint8)
        outs = [np.zeros(shape, np.int32) for _, shape in kernels]
        medians = same_bits_medians([k for k, _ in kernels], (x, w, zero), outs,
                                    args.rounds * args.calls, args.calls)
        if medians is None:
            print(f"{channels} channels at {size}x{size}: the kernels differ")
            return 1
        old, new = (seconds * 1e3 for seconds in medians)
        print(f"{channels:4d} channels {size:3d}x{size:<3d} stride {stride}: column phases "
              f"{old:.4f} ms, column pairs {new:.4f} ms, {new / old:.2f}x")
    print(f"load average (1 min) {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
