"""How a quantizer's choices decide how much of a CNN runs on the accelerator as one
piece: accelerator regions and share of multiply-accumulates on ``vta,llvm``.

    python benchmarks/quantized_regions.py [--model resnet18|mobilenet_v2] [--size 64]

Rows: ONNX Runtime's quantize_static (QDQ, per-channel, int8 activations) without and
with quant_pre_process (without it, BatchNorm sits between Q/DQ pairs and stays on the
CPU; heterocc warns, naming quant_pre_process); the built-in quantizer
(``heterocc.quantization``) without residual additions (how it was), with them (the
default), and per-channel + asymmetric + percentile. Models are ``heterocc.models``
(built with onnx.helper, BatchNormalization nodes kept), random weights, random
calibration inputs; each row also prints the compile time and whether the int8 top-1
agrees with the float model on one random input.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import onnx
from onnxruntime import quantization as oq

import heterocc
from heterocc import models
from heterocc.quantization import QuantizationOptions

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import describe  # noqa: E402


class _Samples(oq.CalibrationDataReader):
    def __init__(self, batches):
        self.left = iter(batches)

    def get_next(self):
        return next(self.left, None)


def _ort(model: onnx.ModelProto, batches, pre_process: bool) -> onnx.ModelProto:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "float.onnx")
        onnx.save(model, path)
        if pre_process:
            oq.quant_pre_process(path, os.path.join(d, "pre.onnx"), skip_symbolic_shape=True)
            path = os.path.join(d, "pre.onnx")
        out = os.path.join(d, "q.onnx")
        oq.quantize_static(path, out, _Samples(batches), quant_format=oq.QuantFormat.QDQ,
                           activation_type=oq.QuantType.QInt8,
                           weight_type=oq.QuantType.QInt8, per_channel=True)
        return onnx.load(out)


def _row(label: str, compiled, seconds: float, x, float_top1: int) -> None:
    report = compiled.placement_report
    regions = {p.region for p in report.placements if p.target == "vta" and p.region}
    top1 = int(np.argmax(compiled.run(x)[0]))
    pre = any("quant_pre_process" in w for w in compiled.warnings)
    print(f"{label:44s} regions {len(regions):3d}  MACs on vta "
          f"{100 * report.mac_share('vta'):5.1f}%  compile {seconds:5.1f} s  "
          f"top-1 as float {'yes' if top1 == float_top1 else 'no'}"
          f"{'  (warns: quant_pre_process)' if pre else ''}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet18", choices=["resnet18", "mobilenet_v2"])
    ap.add_argument("--size", type=int, default=64)
    args = ap.parse_args()
    print(describe())
    model = getattr(models, args.model)(size=args.size)
    rng = np.random.default_rng(0)
    shape = (1, 3, args.size, args.size)
    batches = [{"input": rng.standard_normal(shape).astype(np.float32)} for _ in range(4)]
    x = {"input": rng.standard_normal(shape).astype(np.float32)}
    float_top1 = int(np.argmax(heterocc.compile(model, target="llvm").run(x)[0]))
    print(f"{args.model}, input {shape}, vta,llvm")
    for pre in (False, True):
        qdq = _ort(model, batches, pre)
        t0 = time.perf_counter()
        compiled = heterocc.compile(qdq, target="vta,llvm")
        _row(f"quantize_static, quant_pre_process {'yes' if pre else 'no'}", compiled,
             time.perf_counter() - t0, x, float_top1)
    for label, options in [
            ("built-in, residual additions off", QuantizationOptions(residual_adds=False)),
            ("built-in (default)", QuantizationOptions()),
            ("built-in, per-channel asymmetric percentile",
             QuantizationOptions(per_channel=True, symmetric=False, method="percentile"))]:
        t0 = time.perf_counter()
        compiled = heterocc.compile(model, target="vta,llvm", calibration=batches,
                                    quantization=options)
        _row(label, compiled, time.perf_counter() - t0, x, float_top1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
