"""fp32 matmul (default 1024^3): heterocc's CPU schedule (targets/llvm/schedules.py) vs
NumPy and ONNX Runtime (a one-MatMul model with both operands as inputs, like the
kernel's), measured in the same process.

Prints the machine and the CPU/ISA the code is generated for (first line), then GFLOP/s
of each (medians of repeated runs, in alternating blocks) and heterocc's ratios. Run:
    python benchmarks/matmul.py [--size 1024] [--repeat 30] [--target "llvm -mattr=-avx512f"]
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import onnx
import onnxruntime as ort
from alternating import alternating_medians  # beside this script
from machine import cpu_target, describe  # beside this script

from heterocc.targets import llvm as hllvm
from heterocc.targets.llvm.schedules import (
    default_panel,
    matmul_function,
    matmul_tile_rows,
    panel_group,
    reduction_steps,
    reduction_unroll_limit,
)


def ort_matmul(n: int) -> ort.InferenceSession:
    """An ONNX Runtime session computing ``A @ B`` for (n, n) fp32 inputs A and B."""
    from onnx import TensorProto, helper

    spec = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [n, n])
            for name in ("A", "B", "C")]
    graph = helper.make_graph([helper.make_node("MatMul", ["A", "B"], ["C"])], "matmul",
                              spec[:2], spec[2:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    options = ort.SessionOptions()
    options.intra_op_num_threads = os.cpu_count()
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    # 30 timings each: six alternating blocks, each after a pause (2 blocks swung the
    # ratio by 10% from run to run on a 2-core machine; the first calls after a pause
    # run 5-10% slower, for every engine)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--target", default="llvm",
                        help='the CPU to generate code for, e.g. "llvm -mattr=-avx512f"')
    args = parser.parse_args()
    print(describe(args.target))
    n = args.size
    cpu = cpu_target(args.target)
    module = hllvm.build(matmul_function(n, n, n, name="matmul", cpu=cpu), cpu=cpu)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)
    module["matmul"](a, b, c)
    error = float(np.abs(c - a @ b).max())
    session = ort_matmul(n)
    feed = {"A": a, "B": b}
    flops = 2.0 * n ** 3
    seconds = alternating_medians(
        [lambda: module["matmul"](a, b, c), lambda: np.matmul(a, b, out=c),
         lambda: session.run(None, feed)], args.repeat)
    ours, theirs, ort_rate = (flops / s / 1e9 for s in seconds)
    print(f"runtime threads: {hllvm.num_threads()}, "
          f"load average (1 min) {os.getloadavg()[0]:.2f}")
    panel = default_panel(n, "float32", cpu)
    rows = matmul_tile_rows(n, panel, "float32", cpu)
    steps = reduction_steps(n, reduction_unroll_limit(rows, panel, "float32", cpu))
    print(f"matmul {n}x{n}x{n} fp32 (max abs error vs numpy {error:.2e}); register tile "
          f"{rows} rows x {panel} columns, panels in groups of "
          f"{panel_group(n, n, -(-n // panel), panel, 4, 1, cpu=cpu)}, reduction unrolled "
          f"{steps} steps an iteration")
    print(f"heterocc: {ours:8.1f} GFLOP/s")
    print(f"numpy:    {theirs:8.1f} GFLOP/s")
    print(f"onnxrt:   {ort_rate:8.1f} GFLOP/s")
    print(f"ratio heterocc/numpy: {ours / theirs:.2f}x, heterocc/onnxruntime: "
          f"{ours / ort_rate:.2f}x")


if __name__ == "__main__":
    main()
