"""Devices at once in a plain ``run()``: a model with two independent branches, int8
convolutions on the accelerator (``vta``, greedy placement) and float dense layers on
the CPU (``llvm``), run with the branches overlapping and one function after another.

    python benchmarks/branch_overlap.py [--rounds 7] [--convs 3] [--channels 32]
        [--size 28] [--width 1024] [--clock-mhz 10]

Prints the CPU, the placement, the wall time per run of both ways (medians over
alternating rounds in one process, and their ratio), whether the outputs are the same
bits, and the modelled timeline of one run (``CompiledModel.run_timeline``: accelerator
spans from the device's cycle counts at ``--clock-mhz`` and its link, CPU spans and the
host part of the accelerator's calls measured in a replay pass without the simulator
beside them): one function after another against the devices overlapping. The
accelerator here is the simulator, so the wall times say how much of the simulator's and
the CPU kernels' work overlaps on this machine; the modelled timeline says what the
hardware would do.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import heterocc
from heterocc.targets.vta import VtaTarget

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import describe  # noqa: E402


def branches_model(convs: int, channels: int, size: int, width: int) -> onnx.ModelProto:
    """x -> ``convs`` x (Conv 3x3 + Relu) and x -> Flatten -> Gemm -> Tanh -> Gemm."""
    rng = np.random.default_rng(0)
    inits, nodes, y = [], [], "x"
    for k in range(convs):
        inits += [numpy_helper.from_array((rng.standard_normal((channels, channels, 3, 3))
                                           * 0.1).astype(np.float32), f"w{k}"),
                  numpy_helper.from_array((rng.standard_normal(channels) * 0.1)
                                          .astype(np.float32), f"b{k}")]
        nodes += [helper.make_node("Conv", [y, f"w{k}", f"b{k}"], [f"c{k}"], pads=[1] * 4),
                  helper.make_node("Relu", [f"c{k}"], [f"r{k}"])]
        y = f"r{k}"
    features = channels * size * size
    inits += [numpy_helper.from_array((rng.standard_normal((features, width)) * 0.01)
                                      .astype(np.float32), "d0"),
              numpy_helper.from_array((rng.standard_normal((width, width)) * 0.03)
                                      .astype(np.float32), "d1")]
    nodes += [helper.make_node("Flatten", ["x"], ["flat"]),
              helper.make_node("MatMul", ["flat", "d0"], ["h0"]),
              helper.make_node("Tanh", ["h0"], ["t0"]),
              helper.make_node("MatMul", ["t0", "d1"], ["dense"])]
    shape = (1, channels, size, size)
    graph = helper.make_graph(
        nodes, "branches", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, None),
         helper.make_tensor_value_info("dense", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def quantize_convolutions(model: onnx.ModelProto, shape) -> onnx.ModelProto:
    """The convolutions through onnxruntime's ``quantize_static`` (QDQ, per-channel);
    the dense layers stay float."""
    from onnxruntime import quantization as oq

    rng = np.random.default_rng(1)

    class Reader(oq.CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"x": rng.standard_normal(shape).astype(np.float32)}
                               for _ in range(4)])

        def get_next(self):
            return next(self.feeds, None)

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "float.onnx"), os.path.join(tmp, "qdq.onnx")
        onnx.save(model, src)
        oq.quantize_static(src, dst, Reader(), quant_format=oq.QuantFormat.QDQ,
                           op_types_to_quantize=["Conv"], per_channel=True)
        return onnx.load(dst)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--convs", type=int, default=3)
    parser.add_argument("--channels", type=int, default=32)
    parser.add_argument("--size", type=int, default=28)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--clock-mhz", type=float, default=10)
    args = parser.parse_args(argv)
    print(describe())
    shape = (1, args.channels, args.size, args.size)
    model = quantize_convolutions(branches_model(args.convs, args.channels, args.size,
                                                 args.width), shape)
    compiled = heterocc.compile(model, target=[VtaTarget(clock_mhz=args.clock_mhz), "llvm"],
                                placement="greedy")
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    compiled.run([x])  # compiles and warms up
    executor = next(iter(compiled._cache.values())).executor
    lanes = executor.lanes
    placed = {lane: sum(1 for step in lanes.lanes if step == lane) for lane in lanes.lanes}
    print(f"functions per lane: {placed}; branches on different devices: {lanes.overlaps}")
    times: dict[bool, list[float]] = {True: [], False: []}
    outputs: dict[bool, list[np.ndarray]] = {}
    for _ in range(args.rounds):
        for overlap in (True, False):  # alternating: load changes hit both alike
            executor.overlap = overlap
            start = time.perf_counter()
            outputs[overlap] = compiled.run([x])
            times[overlap].append(time.perf_counter() - start)
    executor.overlap = True
    same = all(a.tobytes() == b.tobytes() for a, b in zip(outputs[True], outputs[False]))
    at_once, in_turn = (statistics.median(times[k]) for k in (True, False))
    print(f"wall per run (median of {args.rounds}, alternating): overlapped "
          f"{at_once * 1e3:.2f} ms, one after another {in_turn * 1e3:.2f} ms "
          f"({in_turn / at_once:.2f}x); outputs the same bits: {same}")
    timeline = compiled.run_timeline([x])
    sequential = timeline.makespan(timeline.sequential)
    overlapped = timeline.makespan(timeline.pipelined)
    busy = timeline.busy(timeline.pipelined)
    print(f"modelled run at {args.clock_mhz:g} MHz: {sequential * 1e3:.3f} ms one function "
          f"after another, {overlapped * 1e3:.3f} ms overlapped "
          f"({sequential / overlapped:.2f}x); busy: "
          + ", ".join(f"{lane} {s * 1e3:.3f} ms" for lane, s in busy.items()))
    print(f"load average: {os.getloadavg()[0]:.2f}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
