"""Direct against Winograd F(2,3) and F(4,3) on 3x3 stride-1 convolution layers (bias and
ReLU fused), each layer's kernel timed alone (without the layout transforms) in
alternating rounds on this process's CPU clock, one thread. Prints per layer each
variant's median, its GFLOP/s counted as the direct convolution's multiply-adds, its
ratio to the direct kernel, the largest error against the direct kernel's output
relative to the output's largest magnitude, and the tile the target's own rule
(``winograd=True``) picks. Run:

    python benchmarks/winograd_conv.py [--layers "64,56,64;128,28,128;256,14,256;512,7,512"]
        [--target "llvm -mattr=-avx512f"] [--repeat 30] [--variants direct,F2,F4,rule]

A layer is ``channels,size,filters`` (square input, padding 1). The default layers are
ResNet-18's 3x3 convolutions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HETEROCC_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from alternating import alternating_samples  # noqa: E402  (beside this script)
from conv2d import conv_kernel, conv_model  # noqa: E402
from machine import cpu_target, describe  # noqa: E402

import heterocc  # noqa: E402
from heterocc.targets import llvm as hllvm  # noqa: E402

#: the variants compared: LLVMTarget's ``winograd`` values
VARIANTS = {"direct": False, "F2": 2, "F4": 4, "rule": True}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="64,56,64;128,28,128;256,14,256;512,7,512")
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--variants", default="direct,F2,F4,rule")
    args = parser.parse_args()
    print(describe(args.target))
    cpu = cpu_target(args.target)
    names = args.variants.split(",")
    for layer in args.layers.split(";"):
        channels, size, filters = (int(f) for f in layer.split(","))
        model = conv_model(channels, size, filters, 3, 1, 1, "relu")
        x = np.random.default_rng(1).standard_normal((1, channels, size, size),
                                                     dtype=np.float32)
        kernels, outputs = [], []
        for name in names:
            compiled = heterocc.compile(model, target=[hllvm.LLVMTarget(
                cpu=cpu, winograd=VARIANTS[name])])
            outputs.append(compiled.run({"x": x})[0])
            kernels.append(conv_kernel(compiled))
        samples = alternating_samples(kernels, args.repeat, 2, pause_s=0.0,
                                      clock=time.process_time)
        flops = 2.0 * filters * channels * 9 * size * size
        scale = float(np.abs(outputs[0]).max())
        print(f"conv C{channels} {size}x{size} K{filters} 3x3, {args.target}, "
              f"load {os.getloadavg()[0]:.2f}; kernel alone, CPU clock, one thread")
        first = statistics.median(samples[0])
        for name, times, out in zip(names, samples, outputs):
            median = statistics.median(times)
            error = float(np.abs(out - outputs[0]).max()) / scale
            print(f"  {name:8s} {median * 1e3:8.3f} ms {flops / median / 1e9:7.1f} GFLOP/s "
                  f"ratio {median / first:.3f}  max error / max |y| {error:.1e}")


if __name__ == "__main__":
    main()
