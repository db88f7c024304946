"""A CNN quantized by onnxruntime's quantize_static, run partitioned across the
accelerator simulator and the CPU.

    python benchmarks/vta_resnet18.py [--model resnet18|mobilenet_v2] [--torch]
        [--format qdq|qoperator] [--activations int8|uint8] [--symmetric]
        [--inputs 20] [--size 224]

The default is ONNX Runtime's own default configuration with per-channel weights:
QDQ, int8 activations with zero points (asymmetric), int8 weights per output
channel, calibrated on random inputs; ``--symmetric`` gives the symmetric setting
earlier figures used. Prints: compile time on ``vta,llvm``; the share of
multiply-accumulates on the accelerator (the placement report); each accelerator
function checked bit-exactly against the NumPy int8 reference of that function;
the whole model bit-exact against the reference integer semantics of the
partitioned graph; the whole model against ONNX Runtime, run as written
(optimizations off: dequantize, float op, quantize) and with its fused int8
kernels (which on x86 CPUs without VNNI saturate u8 x s8 pair sums in int16, see
docs/vta.md), as max abs difference and top-1 agreement; per-layer simulated
cycles and GEMM utilization with one and with two virtual threads, next to the
bytes the host moves per call against the layer's own tensors.
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
from onnxruntime import quantization as oq

import heterocc
from heterocc.runtime.interpreter import evaluate
from heterocc.targets.vta import VtaTarget

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import describe  # noqa: E402


class RandomCalibration(oq.CalibrationDataReader):
    def __init__(self, name: str, shape, count: int):
        self.batches = iter([{name: np.random.default_rng(1000 + i).standard_normal(shape)
                              .astype(np.float32)} for i in range(count)])

    def get_next(self):
        return next(self.batches, None)


def float_model(model: str, use_torch: bool, size: int, path: str) -> None:
    """Write the float model: torchvision's architecture exported by torch, or the same
    network built with onnx.helper (``heterocc.models``)."""
    if use_torch:
        sys.path.insert(0, os.path.dirname(__file__))
        from torch_models import export

        export(model, path)
    else:
        from heterocc import models

        onnx.save(getattr(models, model)(size=size), path)


def quantized(model: str, use_torch: bool, size: int, fmt: str, activations: str,
              symmetric: bool) -> onnx.ModelProto:
    """``model`` through onnxruntime's pre-processing and quantize_static."""
    d = tempfile.mkdtemp()
    path = os.path.join(d, "float.onnx")
    float_model(model, use_torch, size, path)
    pre = os.path.join(d, "pre.onnx")
    oq.quant_pre_process(path, pre, skip_symbolic_shape=True)
    out = os.path.join(d, "quantized.onnx")
    name = onnx.load(pre).graph.input[0].name
    extra = {"ActivationSymmetric": True, "WeightSymmetric": True} if symmetric else {}
    oq.quantize_static(pre, out, RandomCalibration(name, (1, 3, size, size), 8),
                       quant_format=oq.QuantFormat.QDQ if fmt == "qdq"
                       else oq.QuantFormat.QOperator,
                       activation_type=oq.QuantType.QInt8 if activations == "int8"
                       else oq.QuantType.QUInt8,
                       weight_type=oq.QuantType.QInt8, per_channel=not symmetric,
                       extra_options=extra)
    return onnx.load(out)


def _session(model: onnx.ModelProto, optimized: bool) -> ort.InferenceSession:
    options = ort.SessionOptions()
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["resnet18", "mobilenet_v2"], default="resnet18")
    ap.add_argument("--torch", action="store_true",
                    help="export torchvision's architecture with torch (random weights)")
    ap.add_argument("--format", choices=["qdq", "qoperator"], default="qdq")
    ap.add_argument("--activations", choices=["int8", "uint8"], default="int8")
    ap.add_argument("--symmetric", action="store_true",
                    help="symmetric activations and per-tensor weights")
    ap.add_argument("--inputs", type=int, default=20)
    ap.add_argument("--size", type=int, default=224)
    args = ap.parse_args()
    print(f"{describe()}; {args.model} "
          f"({'torch export' if args.torch else 'onnx.helper'}), quantize_static "
          f"{args.format}, {args.activations} activations, "
          f"{'symmetric' if args.symmetric else 'asymmetric, per-channel weights'}")
    model = quantized(args.model, args.torch, args.size, args.format, args.activations,
                      args.symmetric)
    name = model.graph.input[0].name
    shape = (1, 3, args.size, args.size)

    targets = {}
    compiled = {}
    for threads in (1, 2):
        targets[threads] = VtaTarget(virtual_threads=threads)
        t0 = time.perf_counter()
        compiled[threads] = heterocc.compile(model, target=[targets[threads], "llvm"])
        if threads == 2:
            print(f"compile time (vta,llvm): {time.perf_counter() - t0:.2f} s")
    main_model, target = compiled[2], targets[2]
    report = main_model.placement_report
    macs = report.macs_by_target()
    print("nodes per target:", report.by_target())
    print(f"MACs on the accelerator: {macs.get('vta', 0) / 1e9:.3f} G of "
          f"{sum(macs.values()) / 1e9:.3f} G ({100 * report.mac_share('vta'):.1f}%)")
    summary = report.to_json()
    regions: dict = {}
    for p in report.placements:
        if p.target == "vta" and p.region:
            regions.setdefault(p.region, set()).add((p.composite, p.function))
    print(f"accelerator regions: {len(regions)}; composites per region: " + ", ".join(
        f"{name}: " + " + ".join(f"{sum(1 for c, _ in members if c == kind)} {kind}"
                                 for kind in sorted({c for c, _ in members}))
        for name, members in regions.items()))
    print(f"network MAC-weighted utilization: {summary['utilization']:.4f}; host bytes "
          f"per run: {summary['host_bytes']}")
    convs = [r for r in summary["nodes"] if r["op"] == "ConvInteger" and "host_bytes" in r]
    wide = [r for r in convs if r["in_channels"] >= 16]
    ratio = max((r["host_bytes"] / (r["input_bytes"] + r["output_bytes"]) for r in wide),
                default=0.0)
    print(f"host bytes / (input + output bytes), max over the {len(wide)} convolutions "
          f"with >= 16 input channels: {ratio:.2f}")

    # bit-exactness of every accelerator function against its NumPy int8 reference
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal(shape).astype(np.float32)
    record: dict = {}
    evaluate(main_model.graph, [x0], record=record)
    exact = 0
    composites = [(region, c) for region in main_model.graph.nodes
                  if region.attrs.get("target") == "vta" for c in region.body.nodes]
    for region, comp in composites:
        region_inputs = [record[v] for v in region.inputs]
        inner: dict = {}
        evaluate(region.body, region_inputs, record=inner)
        args_ = [inner.get(v, v.data if v.is_const else None) for v in comp.inputs]
        kernel = next(k for k in target.kernels if k.name == comp.name)
        (got,) = kernel(args_)
        (want,) = evaluate(comp.body, args_)
        exact += int(np.array_equal(got, want))
    print(f"accelerator functions bit-exact vs NumPy int8 reference: {exact}/{len(composites)}")

    sessions = {"as written": _session(model, optimized=False),
                "fused int8 kernels": _session(model, optimized=True)}
    diffs = {k: [] for k in sessions}
    agree = dict.fromkeys(sessions, 0)
    whole_exact = 0
    for i in range(args.inputs):
        x = np.random.default_rng(i).standard_normal(shape).astype(np.float32)
        ours = main_model.run({name: x})[0]
        whole_exact += int(np.array_equal(ours, evaluate(main_model.graph, [x])[0]))
        for k, sess in sessions.items():
            ref = sess.run(None, {name: x})[0]
            diffs[k].append(float(np.max(np.abs(ours - ref))))
            agree[k] += int(ours.argmax() == ref.argmax())
    print(f"whole model bit-exact vs the reference integer semantics: "
          f"{whole_exact}/{args.inputs}")
    for k in sessions:
        print(f"vs ONNX Runtime ({k}) over {args.inputs} inputs: max abs diff "
              f"{max(diffs[k]):.4f} (median {np.median(diffs[k]):.4f}), top-1 agreement "
              f"{agree[k]}/{args.inputs}")

    compiled[1].run({name: x0})
    print("\nper layer: lowering (direct convolution on chip, or an im2col / dense GEMM), "
          "cycles and GEMM utilization of the generated (TE -> TIR -> DAE) streams with 1 and "
          "2 virtual threads, bytes the host moves per call, and the layer's own input + "
          "output bytes")
    print(f"{'layer':32s} {'lowering':>8s} {'cycles 1vt':>11s} {'util 1vt':>9s} "
          f"{'cycles 2vt':>11s} {'util 2vt':>9s} {'host B':>10s} {'in+out B':>10s}")
    layer_bytes = {c.name: sum(v.type.nbytes for v in c.body.inputs)
                   + c.body.outputs[0].type.nbytes for _, c in composites}
    for k1, k2 in zip(targets[1].kernels, targets[2].kernels):
        lowering = "alu" if not k2.macs else "direct" if k2.input_tensor == "X" else "gemm"
        print(f"{k1.name[:32]:32s} {lowering:>8s} {k1.last_cycles:11d} "
              f"{100 * k1.utilization:8.1f}% {k2.last_cycles:11d} {100 * k2.utilization:8.1f}% "
              f"{k2.host_bytes:10d} {layer_bytes[k2.name]:10d}")
    c1 = sum(k.last_cycles for k in targets[1].kernels)
    c2 = sum(k.last_cycles for k in targets[2].kernels)
    busy = sum(k.utilization * k.last_cycles for k in targets[2].kernels)
    print(f"{'total':32s} {'':8s} {c1:11d} {'':9s} {c2:11d} {100 * busy / c2:8.1f}% "
          f"{sum(k.host_bytes for k in targets[2].kernels):10d} "
          f"{sum(layer_bytes.values()):10d}")

    weights = {c.name: c.body.nodes[0].inputs[1].type.shape for _, c in composites
               if c.body.nodes[0].op in ("ConvInteger", "MatMulInteger")}
    print("\nGEMM utilization of the 3x3 convolutions per stage (busy GEMM cycles / cycles, "
          "over the stage's 3x3 layers):")
    for channels in sorted({shape[0] for shape in weights.values() if len(shape) == 4}):
        layers = [n for n, shape in weights.items() if len(shape) == 4 and shape[0] == channels
                  and tuple(shape[2:]) == (3, 3) and shape[1] > 1]  # dense, not depthwise
        if not layers:
            continue
        line = []
        for threads in (1, 2):
            kernels = [k for k in targets[threads].kernels if k.name in layers]
            busy = sum(k.utilization * k.last_cycles for k in kernels)
            cycles = sum(k.last_cycles for k in kernels)
            line.append(f"{threads} thread(s) {100 * busy / cycles:.1f}%")
        print(f"  {channels:4d} channels ({len(layers)} layers): {', '.join(line)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
