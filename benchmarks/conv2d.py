"""fp32 conv2d through heterocc's LLVM target vs ONNX Runtime, measured in the same run.

Default: N1 C64 56x56, K64 3x3, pad 1 (the ResNet-18 stage-1 convolution). Prints the
max abs difference, GFLOP/s of both (medians, measured in alternating blocks so load
changes on a shared machine hit both alike) and their ratio. Run:

    python benchmarks/conv2d.py [--channels 64] [--size 56] [--filters 64] [--kernel 3]
                                [--stride 1] [--group 1] [--epilogue relu] [--repeat 20]
                                [--target "llvm -mattr=-avx512f"]

``--group`` equal to the channel count gives a depthwise convolution; ``--epilogue``
appends ``bias`` (an Add of a per-channel constant) or ``relu`` (bias, then Relu) so the
fused epilogue is measured too. The default compilation (blocked NCHW[x]c convolution where
``alter_layout`` applies, its layout transforms included in the time) is measured next to
the direct NCHW one (``LLVMTarget(blocked_layout=False)``) and ONNX Runtime; the two
convolution kernels are then also timed alone (a model keeps its data blocked from one
convolution to the next, so it pays the transforms once, not around every layer).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import onnx
import onnxruntime as ort
from alternating import alternating_medians  # beside this script
from machine import cpu_target, describe  # beside this script
from onnx import TensorProto, helper, numpy_helper

import heterocc
from heterocc.targets import llvm as hllvm


def conv_model(channels: int, size: int, filters: int, kernel: int, stride: int,
               group: int, epilogue: str) -> onnx.ModelProto:
    """A one-convolution ONNX model (weights as initializers), with an optional epilogue."""
    rng = np.random.default_rng(0)
    weights = rng.standard_normal((filters, channels // group, kernel, kernel),
                                  dtype=np.float32) * 0.1
    bias = rng.standard_normal((filters, 1, 1), dtype=np.float32)
    pad = kernel // 2
    nodes = [helper.make_node("Conv", ["x", "w"], ["conv"], pads=[pad] * 4,
                              strides=[stride] * 2, group=group)]
    last = "conv"
    if epilogue in ("bias", "relu"):
        nodes.append(helper.make_node("Add", [last, "b"], ["biased"]))
        last = "biased"
    if epilogue == "relu":
        nodes.append(helper.make_node("Relu", [last], ["relu"]))
        last = "relu"
    out_size = (size + 2 * pad - kernel) // stride + 1
    graph = helper.make_graph(
        nodes, "conv2d",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info(last, TensorProto.FLOAT,
                                       [1, filters, out_size, out_size])],
        initializer=[numpy_helper.from_array(weights, "w")]
        + ([numpy_helper.from_array(bias, "b")] if epilogue != "none" else []))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def conv_kernel(compiled):
    """A call of the compiled convolution's own kernel (its fused function, without the
    layout transforms around a blocked one) on random inputs of its input types."""
    executable = compiled.build_static()
    (function,) = [node for node in executable.graph.nodes if node.body is not None
                   and node.body.nodes[0].op in ("Conv", "ConvNCHWc")]
    rng = np.random.default_rng(2)
    args = [rng.standard_normal(v.type.shape, dtype=np.float32) for v in function.inputs]
    kernel = executable.executor.kernels[function.name]
    return lambda: kernel(args)


def add_layer_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that say one convolution layer: input channels, square input size,
    filters, square kernel size and stride (shared with ``conv_tiles.py``)."""
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--size", type=int, default=56)
    parser.add_argument("--filters", type=int, default=64)
    parser.add_argument("--kernel", type=int, default=3)
    parser.add_argument("--stride", type=int, default=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_layer_arguments(parser)
    parser.add_argument("--group", type=int, default=1)
    parser.add_argument("--epilogue", choices=("none", "bias", "relu"), default="none")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--target", default="llvm",
                        help='the CPU to generate code for, e.g. "llvm -mattr=-avx512f"')
    args = parser.parse_args()
    print(describe(args.target))
    cpu = cpu_target(args.target)
    model = conv_model(args.channels, args.size, args.filters, args.kernel, args.stride,
                       args.group, args.epilogue)
    start = time.perf_counter()
    compiled = heterocc.compile(model, target=[hllvm.LLVMTarget(cpu=cpu)])
    compile_s = time.perf_counter() - start
    nchw = heterocc.compile(model, target=[hllvm.LLVMTarget(blocked_layout=False, cpu=cpu)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal(
        (1, args.channels, args.size, args.size), dtype=np.float32)
    ours = compiled.run({"x": x})[0]
    theirs = session.run(None, {"x": x})[0]
    nchw_diff = float(np.abs(nchw.run({"x": x})[0] - theirs).max())
    ours_s, nchw_s, theirs_s = alternating_medians(
        [lambda: compiled.run({"x": x}), lambda: nchw.run({"x": x}),
         lambda: session.run(None, {"x": x})], args.repeat, pause_s=0.3)
    kernel_s, nchw_kernel_s = alternating_medians(
        [conv_kernel(compiled), conv_kernel(nchw)], args.repeat, pause_s=0.05)
    out_size = ours.shape[-1]
    flops = 2.0 * args.filters * (args.channels // args.group) * args.kernel ** 2 * out_size ** 2
    fallbacks = compiled.build_static().targets["llvm"].fallbacks
    print(f"runtime threads: {hllvm.num_threads()}, ort threads: {args.threads}")
    print(f"conv2d N1 C{args.channels} {args.size}x{args.size} K{args.filters} "
          f"{args.kernel}x{args.kernel} stride {args.stride} group {args.group} "
          f"epilogue {args.epilogue}: compile {compile_s:.2f} s, max abs diff vs ORT "
          f"{float(np.abs(ours - theirs).max()):.2e}"
          + (f", NumPy fallbacks: {fallbacks}" if fallbacks else ""))
    layout = "blocked" if "ConvNCHWc" in compiled.graph.op_counts() else "NCHW"
    print(f"heterocc: {flops / ours_s / 1e9:8.1f} GFLOP/s ({ours_s * 1e3:.3f} ms; {layout}, "
          "layout transforms included)")
    print(f"  nchw:   {flops / nchw_s / 1e9:8.1f} GFLOP/s ({nchw_s * 1e3:.3f} ms; "
          f"LLVMTarget(blocked_layout=False), max abs diff vs ORT {nchw_diff:.2e})")
    print(f"ort:      {flops / theirs_s / 1e9:8.1f} GFLOP/s ({theirs_s * 1e3:.3f} ms)")
    print(f"convolution kernel alone: {layout} {kernel_s * 1e3:.3f} ms "
          f"({flops / kernel_s / 1e9:.1f} GFLOP/s), nchw {nchw_kernel_s * 1e3:.3f} ms "
          f"({flops / nchw_kernel_s / 1e9:.1f} GFLOP/s)")
    print(f"ratio heterocc/ort (throughput): {theirs_s / ours_s:.2f}x, "
          f"nchw/ort: {theirs_s / nchw_s:.2f}x")


if __name__ == "__main__":
    main()
