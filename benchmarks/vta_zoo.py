"""Modern torchvision networks on ``vta,llvm``: per model, the share of
multiply-accumulates on the accelerator, its regions (those before the classifier),
host round trips, nodes left on the CPU, compile time (wall, and CPU seconds of this
process, which depend less on the machine's load), bit-exactness against the integer
reference and top-1 against ONNX Runtime (and, for scale, how often ONNX Runtime's
unoptimized session, float between Q and DQ, agrees with its optimized one).

    python benchmarks/vta_zoo.py [--size 64] [--inputs 2] [--models a,b,...]
        [--bn-stats default|calibrated]

Each model has random weights (``weights=None``), is exported at ``--size`` x
``--size``, and goes through ``quant_pre_process`` and ``quantize_static`` (QDQ,
per-channel, int8 activations, random calibration inputs), as a user of ONNX Runtime
would quantize it. Run it with an older checkout to see what that one left on the CPU.

``--bn-stats calibrated`` keeps the random weights but sets every batch normalization's
running statistics from 8 batches of random inputs (as training would) before export.
Why: with torchvision's initial statistics (mean 0, variance 1) some networks' signals
fade layer after layer (EfficientNet-B0's logits at 64x64 span 1e-14, their quantization
step 3e-16), so the top-2 logits of an input are often 0-1 steps apart and top-1 is a
coin toss between any two exact-to-an-LSB implementations (ORT's optimized and
unoptimized sessions disagree there too); calibrated statistics give logits spread over
their whole quantized range.
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import describe  # noqa: E402
from quantized_regions import _Samples  # noqa: E402

MODELS = ("mobilenet_v3_small", "mobilenet_v3_large", "efficientnet_b0",
          "shufflenet_v2_x1_0", "regnet_y_400mf", "densenet121", "googlenet",
          "squeezenet1_0")
#: constructor arguments a model needs to build without pretrained weights
_EXTRA = {"googlenet": {"aux_logits": False, "init_weights": True}}
#: composites of the classifier (it starts at the first: "regions before the classifier"
#: are those entered before it)
_CLASSIFIER = frozenset({"dense_bias_requantize"})


def calibrate_batch_norms(model, size: int, batches: int = 8) -> None:
    """Set ``model``'s batch normalization statistics from ``batches`` batches of random
    inputs (cumulative averages, as training sets them); the weights stay as they are."""
    import torch

    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None
    model.train()
    with torch.no_grad():
        for _ in range(batches):
            model(torch.randn(4, 3, size, size))
    model.eval()


def torchvision_qdq(name: str, size: int, directory: str,
                    bn_stats: str = "default") -> onnx.ModelProto:
    """torchvision model ``name``, random weights, quantized as a user of ONNX Runtime
    would; ``bn_stats="calibrated"``: its batch normalizations' statistics set from random
    inputs first (:func:`calibrate_batch_norms`)."""
    import torch
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None, **_EXTRA.get(name, {})).eval()
    if bn_stats == "calibrated":
        calibrate_batch_norms(model, size)
    path = os.path.join(directory, f"{name}.onnx")
    kwargs = {"dynamo": False} if "dynamo" in torch.onnx.export.__code__.co_varnames else {}
    torch.onnx.export(model, (torch.randn(1, 3, size, size),), path, input_names=["input"],
                      output_names=["logits"], opset_version=17, **kwargs)
    pre = os.path.join(directory, f"{name}_pre.onnx")
    oq.quant_pre_process(path, pre, skip_symbolic_shape=True)
    rng = np.random.default_rng(0)
    batches = [{"input": rng.standard_normal((1, 3, size, size)).astype(np.float32)}
               for _ in range(4)]
    out = os.path.join(directory, f"{name}_q.onnx")
    oq.quantize_static(pre, out, _Samples(batches), quant_format=oq.QuantFormat.QDQ,
                       activation_type=oq.QuantType.QInt8, weight_type=oq.QuantType.QInt8,
                       per_channel=True)
    return onnx.load(out)


def measure(name: str, size: int, inputs: int, bn_stats: str = "default") -> dict:
    """One model's row of the table."""
    with tempfile.TemporaryDirectory() as d:
        qdq = torchvision_qdq(name, size, d, bn_stats)
    t0, c0 = time.perf_counter(), time.process_time()
    compiled = heterocc.compile(qdq, target="vta,llvm", placement="greedy")
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    report = compiled.placement_report
    regions = {p.region for p in report.placements if p.target == "vta" and p.region}
    # the classifier starts at the first dense layer (its activations, a hardswish
    # table between two dense layers, belong to it)
    first_dense = next((i for i, p in enumerate(report.placements)
                        if p.composite in _CLASSIFIER), len(report.placements))
    before_classifier = len({p.region for p in report.placements[:first_dense]
                             if p.target == "vta" and p.region})
    session = ort.InferenceSession(qdq.SerializeToString(), providers=["CPUExecutionProvider"])
    # ORT as the QDQ model is written (float between Q and DQ), against ORT's own fused
    # int8 kernels: how often two implementations exact to an LSB disagree on these models
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    as_written = ort.InferenceSession(qdq.SerializeToString(), options,
                                      providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    exact = same_top1 = ort_self = 0
    for _ in range(inputs):
        x = rng.standard_normal((1, 3, size, size)).astype(np.float32)
        ours = compiled.run([x])[0]
        exact += bool(np.array_equal(ours, evaluate(compiled.graph, [x])[0]))
        theirs = session.run(None, {"input": x})[0].argmax()
        same_top1 += int(ours.argmax() == theirs)
        ort_self += int(as_written.run(None, {"input": x})[0].argmax() == theirs)
    return {"model": name, "mac_share": report.mac_share("vta"),
            "regions": len(regions), "before_classifier": before_classifier,
            "round_trips": getattr(report, "round_trips", None),
            "cpu_nodes": sum(p.target != "vta" for p in report.placements),
            "vta_nodes": sum(p.target == "vta" for p in report.placements),
            "compile_s": seconds, "compile_cpu_s": cpu_seconds, "exact": exact,
            "top1": same_top1, "ort_self": ort_self, "inputs": inputs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--inputs", type=int, default=2)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--bn-stats", choices=("default", "calibrated"), default="default",
                    help="batch normalization statistics: torchvision's initial ones, or "
                         "set from random inputs before export (see the module's doc)")
    args = ap.parse_args()
    print(describe())
    print(f"input 1x3x{args.size}x{args.size}, vta,llvm, batch norm statistics: {args.bn_stats}")
    print("| model | MACs on vta | regions (before classifier) | host round trips | "
          "nodes vta / CPU | compile (CPU s) | bit-exact | top-1 as ORT | "
          "ORT unoptimized: top-1 as ORT |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        row = measure(name, args.size, args.inputs, args.bn_stats)
        print(f"| {name} | {100 * row['mac_share']:.2f}% | {row['regions']} "
              f"({row['before_classifier']}) | {row['round_trips']} | "
              f"{row['vta_nodes']} / {row['cpu_nodes']} | {row['compile_s']:.1f} s "
              f"({row['compile_cpu_s']:.1f}) | "
              f"{row['exact']}/{row['inputs']} | {row['top1']}/{row['inputs']} | "
              f"{row['ort_self']}/{row['inputs']} |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
