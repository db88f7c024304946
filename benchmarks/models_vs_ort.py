"""Whole models through heterocc next to ONNX Runtime, measured in the same run.

    python benchmarks/models_vs_ort.py [--target reference] [--torch] [--repeats 10]
                                       [--compare-nchw] [--tuning-log F] [--models M ...]

``--target`` takes any target string, e.g. ``llvm`` (the host) or
``"llvm -mattr=-avx512f"`` (AVX2 code on an AVX-512 machine). The first line names the
machine and the CPU and ISA the code is generated for. Prints, per model: ONNX node
count, ops after the passes, fused functions, compile time, max abs difference against
ONNX Runtime, and median latencies (measured in alternating blocks, so load changes hit
both alike) with their ratio;
``--compare-nchw`` adds the llvm target without the blocked convolution layout;
``--tuning-log F`` adds the model compiled with the log's best schedules
(``heterocc tune``), timed in the same alternating blocks as the untuned one.
``--torch`` exports ResNet-18 / MobileNetV2 from torch (benchmarks/torch_models.py);
without it the built-in onnx.helper versions (heterocc.models) are used. The transformer
layers are always built with onnx.helper (``heterocc.models.encoder_layer``): ``encoder``
is [1,64,256] with 4 heads and an FFN of 1024 (GELU), ``bert_layer`` a BERT-base layer,
[1,128,768] with 12 heads and an FFN of 3072. Inputs take each model's input shape.
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
from heterocc.passes import fused_functions
from heterocc.targets.llvm import LLVMTarget

sys.path.insert(0, os.path.dirname(__file__))
from alternating import alternating_medians  # noqa: E402  (beside this script)
from machine import cpu_target, describe  # noqa: E402  (beside this script)

#: the transformer layers: name -> encoder_layer arguments
TRANSFORMERS = {"encoder": dict(seq=64, d_model=256, heads=4, ffn=1024),
                "bert_layer": dict(seq=128, d_model=768, heads=12, ffn=3072)}


def load_models(use_torch: bool, only: list[str] | None = None
                ) -> dict[str, onnx.ModelProto]:
    """The benchmark's models by name (only those in ``only`` when given)."""
    from heterocc.models import encoder_layer, mobilenet_v2, resnet18

    def wanted(name: str) -> bool:
        return not only or name in only

    models: dict[str, onnx.ModelProto] = {}
    if use_torch:
        from torch_models import export

        out = tempfile.mkdtemp()
        models.update({n: onnx.load(export(n, os.path.join(out, f"{n}.onnx")))
                       for n in ("resnet18", "mobilenet_v2") if wanted(n)})
    else:
        builders = {"resnet18": resnet18, "mobilenet_v2": mobilenet_v2}
        models.update({n: build() for n, build in builders.items() if wanted(n)})
    models.update({n: encoder_layer(**shape) for n, shape in TRANSFORMERS.items()
                   if wanted(n)})
    return models


def input_shape(model: onnx.ModelProto) -> tuple[int, ...]:
    """The static shape of the model's first graph input."""
    dims = model.graph.input[0].type.tensor_type.shape.dim
    return tuple(d.dim_value for d in dims)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="reference")
    ap.add_argument("--torch", action="store_true", help="export the models from torch")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--compare-nchw", action="store_true",
                    help="with --target llvm: also time LLVMTarget(blocked_layout=False)")
    ap.add_argument("--tuning-log", help="also time the model compiled with this tuning log")
    ap.add_argument("--models", nargs="+", help="only these models (default: all)")
    args = ap.parse_args()
    print(describe(args.target))
    print(f"load average (1 min) {os.getloadavg()[0]:.2f}")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    rng = np.random.default_rng(0)
    print(f"{'model':14s} {'onnx':>5s} {'ops':>5s} {'funcs':>5s} {'compile_s':>9s} "
          f"{'max|diff|':>10s} {'heterocc_ms':>11s} {'ort_ms':>8s} {'ratio':>7s}")
    for name, model in load_models(args.torch, args.models).items():
        x = rng.standard_normal(input_shape(model)).astype(np.float32)
        t0 = time.perf_counter()
        compiled = heterocc.compile(model, target=args.target)
        compile_s = time.perf_counter() - t0
        sess = ort.InferenceSession(model.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
        input_name = sess.get_inputs()[0].name
        ours = compiled.run({input_name: x})[0]
        ref = sess.run(None, {input_name: x})[0]
        feed = {input_name: x}
        runs = [lambda c=compiled, f=feed: c.run(f), lambda s=sess, f=feed: s.run(None, f)]
        if args.compare_nchw:
            t0 = time.perf_counter()
            nchw = heterocc.compile(model, target=[LLVMTarget(blocked_layout=False,
                                                              cpu=cpu_target(args.target))])
            nchw_compile_s = time.perf_counter() - t0
            nchw_diff = float(np.max(np.abs(nchw.run(feed)[0] - ref)))
            runs.append(lambda c=nchw, f=feed: c.run(f))
        if args.tuning_log:
            t0 = time.perf_counter()
            tuned = heterocc.compile(model, target=args.target, tuning_log=args.tuning_log)
            tuned_compile_s = time.perf_counter() - t0
            tuned_diff = float(np.max(np.abs(tuned.run(feed)[0] - ref)))
            runs.append(lambda c=tuned, f=feed: c.run(f))
        seconds = alternating_medians(runs, args.repeats, pause_s=0.2)
        ms, ort_ms = seconds[0] * 1e3, seconds[1] * 1e3
        graph = compiled.graph
        print(f"{name:14s} {len(model.graph.node):5d} {graph.num_nodes():5d} "
              f"{len(fused_functions(graph)):5d} {compile_s:9.2f} "
              f"{float(np.max(np.abs(ours - ref))):10.2e} {ms:11.2f} {ort_ms:8.2f} "
              f"{ms / ort_ms:7.2f}x")
        if args.compare_nchw:
            print(f"{'  (nchw)':14s} {'':5s} {'':5s} {'':5s} {nchw_compile_s:9.2f} "
                  f"{nchw_diff:10.2e} {seconds[2] * 1e3:11.2f} {ort_ms:8.2f} "
                  f"{seconds[2] * 1e3 / ort_ms:7.2f}x")
        if args.tuning_log:
            tuned_ms = seconds[-1] * 1e3
            print(f"{'  (tuned)':14s} {'':5s} {'':5s} {'':5s} {tuned_compile_s:9.2f} "
                  f"{tuned_diff:10.2e} {tuned_ms:11.2f} {ort_ms:8.2f} "
                  f"{tuned_ms / ort_ms:7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
