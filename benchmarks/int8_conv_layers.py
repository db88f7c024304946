"""ResNet's int8 dense convolutions one layer at a time, heterocc's kernel next to ONNX
Runtime's (its QLinearConv), per-op profiles of both, one thread each, CPU clock.

    python benchmarks/int8_conv_layers.py [--layers resnet50] [--runs 40] [--target llvm]
    python benchmarks/int8_conv_layers.py --layer 256 64 56 1 1

Each layer is an ONNX Runtime-quantized (QDQ, per-channel int8 weights, uint8
activations) convolution with its bias and ReLU followed by a 1x1 projection, so that the
measured kernel (the first convolution, requantization fused) writes uint8 as in a model.
Prints, per layer, the first convolution's ms per run in heterocc's profile and in ONNX
Runtime's profiler (``--runs`` runs each, the two engines alternating in blocks of 5), and
their ratio. heterocc's output is checked to be within one quantization step of ONNX
Runtime's (the float output of the projection).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

#: (input channels, output channels, size, kernel, stride): ResNet-50's dense
#: convolutions (the stem, each stage's 1x1 reduction, 3x3, 1x1 expansion, the
#: downsampling skip and the strided 3x3), and ResNet-18's 3x3s
LAYERS = {
    "resnet50": ((3, 64, 224, 7, 2), (64, 64, 56, 1, 1), (256, 64, 56, 1, 1),
                 (64, 64, 56, 3, 1), (64, 256, 56, 1, 1), (256, 512, 56, 1, 2),
                 (128, 128, 56, 3, 2), (512, 128, 28, 1, 1), (128, 128, 28, 3, 1),
                 (128, 512, 28, 1, 1), (1024, 256, 14, 1, 1), (256, 256, 14, 3, 1),
                 (256, 1024, 14, 1, 1), (2048, 512, 7, 1, 1), (512, 512, 7, 3, 1),
                 (512, 2048, 7, 1, 1)),
    "resnet18": ((64, 64, 56, 3, 1), (64, 128, 56, 3, 2), (128, 128, 28, 3, 1),
                 (256, 256, 14, 3, 1), (512, 512, 7, 3, 1)),
}


def layer_model(cin: int, cout: int, size: int, kernel: int, stride: int, path: Path) -> str:
    """The QDQ model of one layer (see the module's docstring); returns its path."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    shape = (1, cin, size, size)
    out = (size + 2 * (kernel // 2) - kernel) // stride + 1
    weights = rng.standard_normal((cout, cin, kernel, kernel)) / np.sqrt(cin * kernel * kernel)
    w_scale = np.abs(weights).reshape(cout, -1).max(axis=1) / 127
    w_int = np.round(weights / w_scale[:, None, None, None]).astype(np.int8)
    x_scale, x_zero = 0.02, 80
    bias = np.round(rng.standard_normal(cout) * 0.1 / (x_scale * w_scale)).astype(np.int32)
    inits = [numpy_helper.from_array(w_int, "w_q"),
             numpy_helper.from_array(w_scale.astype(np.float32), "w_scale"),
             numpy_helper.from_array(np.zeros(cout, np.int8), "w_zero"),
             numpy_helper.from_array(bias, "b_q"),
             numpy_helper.from_array((x_scale * w_scale).astype(np.float32), "b_scale"),
             numpy_helper.from_array(np.zeros(cout, np.int32), "b_zero"),
             numpy_helper.from_array(np.array(x_scale, np.float32), "x_scale"),
             numpy_helper.from_array(np.array(x_zero, np.uint8), "x_zero"),
             numpy_helper.from_array(np.array(6 / 255, np.float32), "y_scale"),
             numpy_helper.from_array(np.array(0, np.uint8), "y_zero")]
    nodes = [helper.make_node("DequantizeLinear", ["input", "x_scale", "x_zero"], ["x"]),
             helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zero"], ["w"], axis=0),
             helper.make_node("DequantizeLinear", ["b_q", "b_scale", "b_zero"], ["b"], axis=0),
             helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[kernel // 2] * 4,
                              strides=[stride] * 2),
             helper.make_node("Relu", ["y"], ["relu"]),
             helper.make_node("QuantizeLinear", ["relu", "y_scale", "y_zero"], ["output"])]
    graph = helper.make_graph(
        nodes, "layer", [helper.make_tensor_value_info("input", TensorProto.UINT8, shape)],
        [helper.make_tensor_value_info("output", TensorProto.UINT8, (1, cout, out, out))],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path / "qdq.onnx"))
    return str(path / "qdq.onnx")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", choices=sorted(LAYERS), default="resnet50")
    parser.add_argument("--layer", type=int, nargs=5, action="append",
                        metavar=("CIN", "COUT", "SIZE", "KERNEL", "STRIDE"))
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--block", type=int, default=10)
    parser.add_argument("--target", default="llvm")
    args = parser.parse_args()
    os.environ.setdefault("HETEROCC_NUM_THREADS", "1")
    import onnxruntime as ort
    from alternating import alternating_samples
    from machine import describe

    import heterocc

    print(describe(args.target))
    print(f"load average (1 min) {os.getloadavg()[0]:.2f}; one thread each, CPU clock, "
          f"{args.rounds} rounds of {args.block}")
    print(f"{'layer':24s} {'heterocc_ms':>11s} {'ort_ms':>8s} {'ratio':>6s}")
    ratios = []
    for layer in args.layer or LAYERS[args.layers]:
        with tempfile.TemporaryDirectory() as directory:
            path = layer_model(*layer, Path(directory))
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = 1
            session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
            compiled = heterocc.compile(path, target=args.target)
        feed = {"input": np.random.default_rng(1).integers(
            0, 256, (1, layer[0], layer[2], layer[2])).astype(np.uint8)}
        ours, theirs = compiled.run(feed)[0], session.run(None, feed)[0]
        steps = int(np.max(np.abs(ours.astype(np.int32) - theirs)))
        samples = alternating_samples([functools.partial(compiled.run, feed),
                                       functools.partial(session.run, None, feed)],
                                      args.rounds * args.block, args.block, pause_s=0.0,
                                      clock=time.process_time)
        ours_ms, theirs_ms = (statistics.median(s) * 1e3 for s in samples)
        ratios.append(ours_ms / theirs_ms)
        name = "{}->{}@{} k{} s{}".format(*layer)
        print(f"{name:24s} {ours_ms:11.3f} {theirs_ms:8.3f} {ours_ms / theirs_ms:6.2f}x"
              f"  (max step difference from ORT {steps})", flush=True)
    print(f"geomean {np.exp(np.mean(np.log(ratios))):.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
