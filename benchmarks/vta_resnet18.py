"""ResNet-18, quantized to QDQ with onnxruntime's quantize_static (random calibration),
run partitioned across the accelerator simulator and the CPU.

    python benchmarks/vta_resnet18.py [--torch] [--inputs 20] [--size 224]

Prints: compile time; each accelerator function's output checked bit-exactly
against the NumPy int8 reference of that function; the whole model against ONNX
Runtime on the same QDQ model (max abs difference, top-1 agreement); the share of
MACs on the accelerator; per-layer simulated cycles and GEMM utilization with one
and with two virtual threads, next to the hand-written reference program's.
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
from heterocc.accel_sim import schedule_stream
from heterocc.accel_sim.isa import Buffer
from heterocc.accel_sim.reference_programs import Requantization, tiled_gemm_program
from heterocc.runtime.interpreter import evaluate
from heterocc.targets.vta import VtaTarget


class RandomCalibration(oq.CalibrationDataReader):
    def __init__(self, name: str, shape, count: int):
        self.batches = iter([{name: np.random.default_rng(1000 + i).standard_normal(shape)
                              .astype(np.float32)} for i in range(count)])

    def get_next(self):
        return next(self.batches, None)


def quantized_resnet18(use_torch: bool, size: int) -> onnx.ModelProto:
    d = tempfile.mkdtemp()
    path = os.path.join(d, "float.onnx")
    if use_torch:
        sys.path.insert(0, os.path.dirname(__file__))
        from torch_models import export

        export("resnet18", path)
    else:
        from heterocc.models import resnet18

        onnx.save(resnet18(size=size), path)
    pre = os.path.join(d, "pre.onnx")
    oq.quant_pre_process(path, pre, skip_symbolic_shape=True)
    out = os.path.join(d, "qdq.onnx")
    name = onnx.load(pre).graph.input[0].name
    oq.quantize_static(pre, out, RandomCalibration(name, (1, 3, size, size), 8),
                       quant_format=oq.QuantFormat.QDQ, activation_type=oq.QuantType.QInt8,
                       weight_type=oq.QuantType.QInt8,
                       extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
    return onnx.load(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--torch", action="store_true")
    ap.add_argument("--inputs", type=int, default=20)
    ap.add_argument("--size", type=int, default=224)
    args = ap.parse_args()
    model = quantized_resnet18(args.torch, args.size)
    name = model.graph.input[0].name
    shape = (1, 3, args.size, args.size)

    targets = {}
    compiled = {}
    for threads in (1, 2):
        targets[threads] = VtaTarget(virtual_threads=threads)
        t0 = time.perf_counter()
        compiled[threads] = heterocc.compile(model, target=[targets[threads], "reference"])
        if threads == 2:
            print(f"compile time (vta,reference): {time.perf_counter() - t0:.2f} s")
    main_model, target = compiled[2], targets[2]
    print("nodes per target:", main_model.placement_report.by_target())

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

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    diffs, agree = [], 0
    for i in range(args.inputs):
        x = np.random.default_rng(i).standard_normal(shape).astype(np.float32)
        ours = main_model.run({name: x})[0]
        ref = sess.run(None, {name: x})[0]
        diffs.append(float(np.max(np.abs(ours - ref))))
        agree += int(ours.argmax() == ref.argmax())
    print(f"vs ONNX Runtime over {args.inputs} inputs: max abs diff {max(diffs):.4f} "
          f"(median {np.median(diffs):.4f}), top-1 agreement {agree}/{args.inputs}")

    total_macs = 0
    for node in main_model.graph.nodes:
        for _, n in node.body.walk() if node.body is not None else []:
            if n.op in ("ConvInteger", "MatMulInteger", "Conv", "Gemm", "MatMul"):
                out = n.outputs[0].type
                w = n.inputs[1].type
                k = int(np.prod(w.shape[1:])) if n.op in ("ConvInteger", "Conv") else w.shape[0]
                total_macs += out.size * k
    acc_macs = sum(k.macs for k in target.kernels)
    print(f"MACs on the accelerator: {acc_macs / 1e9:.3f} G of {total_macs / 1e9:.3f} G "
          f"({100 * acc_macs / max(total_macs, 1):.1f}%)")

    compiled[1].run({name: x0})
    print("\nper layer: cycles and GEMM utilization of the generated (TE -> TIR -> DAE) streams "
          "with 1 and 2 virtual threads; 'ref 2vt': the hand-written reference program "
          "(accel_sim.reference_programs) with the same tiling and threads, and the "
          "unshortened nine-pass requantization")
    print(f"{'layer':36s} {'cycles 1vt':>11s} {'util 1vt':>9s} {'cycles 2vt':>11s} "
          f"{'util 2vt':>9s} {'ref 2vt':>11s} {'ref util':>9s}")
    ref_total = 0
    for k1, k2 in zip(targets[1].kernels, targets[2].kernels):
        ref = reference_timing(k2)
        ref_total += ref.total_cycles
        print(f"{k1.name[:36]:36s} {k1.last_cycles:11d} {100 * k1.utilization:8.1f}% "
              f"{k2.last_cycles:11d} {100 * k2.utilization:8.1f}% {ref.total_cycles:11d} "
              f"{100 * ref.gemm_utilization:8.1f}%")
    c1 = sum(k.last_cycles for k in targets[1].kernels)
    c2 = sum(k.last_cycles for k in targets[2].kernels)
    print(f"{'total':36s} {c1:11d} {'':9s} {c2:11d} {'':9s} {ref_total:11d}")

    weights = {c.name: c.body.nodes[0].inputs[1].type.shape for _, c in composites}
    print("\nGEMM utilization of the 3x3 convolutions per stage (busy GEMM cycles / cycles, "
          "over the stage's 3x3 layers):")
    for channels in sorted({shape[0] for shape in weights.values() if len(shape) == 4}):
        layers = [n for n, shape in weights.items()
                  if len(shape) == 4 and shape[0] == channels and tuple(shape[2:]) == (3, 3)]
        line = []
        for threads in (1, 2):
            kernels = [k for k in targets[threads].kernels if k.name in layers]
            busy = sum(k.utilization * k.last_cycles for k in kernels)
            cycles = sum(k.last_cycles for k in kernels)
            line.append(f"{threads} thread(s) {100 * busy / cycles:.1f}%")
        print(f"  {channels:4d} channels ({len(layers)} layers): {', '.join(line)}")
    return 0


def reference_timing(kernel):
    """The timing model's report of the hand-written reference program for the same GEMM,
    tiling and thread count as ``kernel`` (cycles do not depend on the values)."""
    w = kernel.program.read("W")
    rows = kernel.program.tensors["A"].rows
    ones = np.ones(w.shape[0], np.int64)
    epilogue = Requantization(*([ones] * 5), zero_point=0, qmin=-128, qmax=127)
    program = tiled_gemm_program(kernel.config, np.zeros((rows, w.shape[1]), np.int8), w,
                                 kernel.virtual_threads, kernel.tiling, Buffer.OUT, epilogue)
    return schedule_stream(program.instructions, kernel.config)


if __name__ == "__main__":
    sys.exit(main())
