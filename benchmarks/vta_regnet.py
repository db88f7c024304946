"""RegNetY-400MF (grouped convolutions, group width 8) on ``vta,llvm``: the share of
multiply-accumulates on the accelerator, its regions, the compile time, bit-exactness
against the integer reference and top-1 against ONNX Runtime.

    python benchmarks/vta_regnet.py [--size 64] [--inputs 2]

torchvision's ``regnet_y_400mf(weights=None)`` (random weights), exported at
``--size`` x ``--size``, through ``quant_pre_process`` and ``quantize_static`` (QDQ,
per-channel, int8 activations, random calibration inputs). Run it with a checkout
before grouped convolutions went on chip to see the share they left on the CPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

import heterocc
from heterocc.runtime.interpreter import evaluate

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import describe  # noqa: E402
from vta_zoo import torchvision_qdq  # noqa: E402


def regnet_qdq(size: int, directory: str) -> onnx.ModelProto:
    """RegNetY-400MF, random weights, quantized as a user of ONNX Runtime would."""
    return torchvision_qdq("regnet_y_400mf", size, directory)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--inputs", type=int, default=2)
    args = ap.parse_args()
    print(describe())
    with tempfile.TemporaryDirectory() as d:
        qdq = regnet_qdq(args.size, d)
    t0 = time.perf_counter()
    compiled = heterocc.compile(qdq, target="vta,llvm")
    seconds = time.perf_counter() - t0
    report = compiled.placement_report
    regions = {p.region for p in report.placements if p.target == "vta" and p.region}
    grouped = [p for p in report.placements if p.op in ("ConvInteger", "Conv") and p.macs]
    print(f"regnet_y_400mf, input 1x3x{args.size}x{args.size}, vta,llvm: "
          f"MACs on vta {100 * report.mac_share('vta'):.2f}% of "
          f"{sum(report.macs_by_target().values()) / 1e6:.1f} M, "
          f"convolutions on vta {sum(p.target == 'vta' for p in grouped)}/{len(grouped)}, "
          f"{len(regions)} accelerator regions, "
          f"{getattr(report, 'round_trips', 'n/a')} host round trips, "
          f"compile {seconds:.1f} s, "
          f"{sum(p.metrics.get('cycles', 0) for p in report.placements)} modelled "
          "accelerator cycles per run")
    session = ort.InferenceSession(qdq.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    exact = same_top1 = 0
    for _ in range(args.inputs):
        x = rng.standard_normal((1, 3, args.size, args.size)).astype(np.float32)
        ours = compiled.run([x])[0]
        exact += bool(np.array_equal(ours, evaluate(compiled.graph, [x])[0]))
        same_top1 += int(ours.argmax() == session.run(None, {"input": x})[0].argmax())
    print(f"bit-exact against the integer reference: {exact}/{args.inputs} inputs; "
          f"top-1 as ONNX Runtime: {same_top1}/{args.inputs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
