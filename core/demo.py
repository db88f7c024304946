"""``heterocc demo``: the bundled CNN, in float on the CPU and quantized to int8
across the accelerator simulator and the CPU, next to ONNX Runtime."""

from __future__ import annotations

import os
import statistics
import tempfile
import time

import numpy as np
import onnx

from .driver import compile as hcompile
from .models import tiny_cnn
from .passes import fused_functions


def _median_ms(fn, repeats: int = 10) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _summary(compiled) -> str:
    counts: dict[str, int] = {}
    for node in compiled.graph.nodes:
        if node.body is not None:
            target = node.attrs.get("target", compiled.targets[-1])
            counts[target] = counts.get(target, 0) + 1
    return ", ".join(f"{n} on {t}" for t, n in counts.items())


def run_demo(target: str = "vta,llvm") -> int:
    model = tiny_cnn()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
    calibration = [[rng.standard_normal((1, 3, 32, 32)).astype(np.float32)] for _ in range(8)]
    print(f"model: tiny_cnn ({len(model.graph.node)} ONNX nodes: conv, batch norm, residual "
          f"add, pooling, dense, softmax), input {list(x.shape)} float32\n")

    cpu_target = target.split(",")[-1]
    t0 = time.perf_counter()
    float_model = hcompile(model, target=cpu_target)
    float_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    # greedy: the demo shows every layer the accelerator takes running there (placement
    # by cost, the default elsewhere, may keep this small model on the CPU)
    quantized = hcompile(model, target=target, calibration=calibration, placement="greedy")
    quant_s = time.perf_counter() - t0
    print(f"float32 on {cpu_target}: compiled in {float_s * 1e3:.0f} ms, "
          f"{float_model.graph.num_nodes()} ops in {len(fused_functions(float_model.graph))} "
          "functions")
    print(f"int8 on {target}: quantized + compiled in {quant_s * 1e3:.0f} ms, functions: "
          f"{_summary(quantized)}")
    report = quantized.placement_report
    if report is not None:
        print("placement (nodes per target): " + ", ".join(
            f"{t}: {n}" for t, n in report.by_target().items()))

    (p_float,) = float_model.run({"input": x})
    quantized.enable_profiling()
    (p_int8,) = quantized.run({"input": x})
    print(f"\nfloat32 probabilities: {np.array2string(p_float[0], precision=3)}")
    print(f"int8    probabilities: {np.array2string(p_int8[0], precision=3)}")
    print(f"top-1: float32 {int(p_float.argmax())}, int8 {int(p_int8.argmax())}; "
          f"max |difference| {float(np.max(np.abs(p_float - p_int8))):.3f}")
    print("\nper-function profile of the int8 run (accelerator rows show simulated cycles):")
    print(quantized.profile_report())

    float_ms = _median_ms(lambda: float_model.run({"input": x}))
    int8_ms = _median_ms(lambda: quantized.run({"input": x}))
    print(f"\nwall time, median of 10: float32 {float_ms:.2f} ms, int8 with the simulated "
          f"accelerator {int8_ms:.2f} ms")
    try:
        import onnxruntime as ort
    except ImportError:
        print("onnxruntime not installed: no comparison")
        return 0
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (ref,) = sess.run(None, {"input": x})
    ort_ms = _median_ms(lambda: sess.run(None, {"input": x}))
    print(f"ONNX Runtime float32: {ort_ms:.2f} ms; max |difference| to heterocc float32 "
          f"{float(np.max(np.abs(p_float - ref))):.2e}")
    if "," in target:
        _onnxruntime_quantized(model, target, x, calibration)
    return 0


def _onnxruntime_quantized(model, target: str, x: np.ndarray, calibration) -> None:
    """The same model as users bring it: pre-processed by onnxruntime's quant_pre_process
    (BatchNorm folded into the convolutions) and quantized by its quantize_static with its
    defaults (QDQ, asymmetric int8 activations) and per-channel weights."""
    import onnxruntime as ort
    from onnxruntime import quantization as oq

    class Samples(oq.CalibrationDataReader):
        def __init__(self):
            self.batches = iter({"input": batch[0]} for batch in calibration)

        def get_next(self):
            return next(self.batches, None)

    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "float.onnx"), os.path.join(d, "qdq.onnx")
        pre = os.path.join(d, "pre.onnx")
        onnx.save(model, src)
        oq.quant_pre_process(src, pre, skip_symbolic_shape=True)
        oq.quantize_static(pre, dst, Samples(), per_channel=True)
        qdq = onnx.load(dst)
    t0 = time.perf_counter()
    compiled = hcompile(qdq, target=target, placement="greedy")
    seconds = time.perf_counter() - t0
    report = compiled.placement_report
    shares = ", ".join(f"{t} {100 * report.mac_share(t):.1f}%"
                       for t in report.macs_by_target())
    print(f"\nthe same model quantized by onnxruntime's quant_pre_process and quantize_static "
          f"(QDQ, asymmetric int8 "
          f"activations, per-channel weights) on {target}: compiled in {seconds * 1e3:.0f} "
          f"ms; multiply-accumulates: {shares}")
    (ours,) = compiled.run({"input": x})
    session = ort.InferenceSession(qdq.SerializeToString(), providers=["CPUExecutionProvider"])
    (theirs,) = session.run(None, {"input": x})
    print(f"int8 probabilities:              {np.array2string(ours[0], precision=3)}")
    print(f"ONNX Runtime on the same model:  {np.array2string(theirs[0], precision=3)}")
    print(f"top-1: heterocc {int(ours.argmax())}, ONNX Runtime {int(theirs.argmax())}; "
          f"max |difference| {float(np.max(np.abs(ours - theirs))):.3f}")
