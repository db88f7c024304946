"""Compile time per model, quantization and target, with the slowest functions.

    python benchmarks/compile_time.py [--torch] [--models resnet18,mobilenet_v2]
        [--quantizations float,symmetric,ort,ort-uint8] [--targets "llvm;vta,llvm"]
        [--placements greedy,cost] [--refuse]

Each compile runs alone in a fresh process. Quantizations: ``float`` (the model as
exported), ``symmetric`` (onnxruntime's quantize_static with symmetric activations and
per-tensor weights), ``ort`` (quantize_static's defaults: QDQ, asymmetric int8
activations, with per-channel weights) and ``ort-uint8`` (the same with uint8
activations). Each compile starts from an empty cache (``HETEROCC_CACHE_DIR`` pointed at a new
folder: no kernel timed for placement before). Prints, per run: total compile
seconds (wall; CPU seconds, steadier on a loaded machine: the process's and those
LLVM's worker processes spent on its modules (not their start-up); and the CPU seconds
of the compiling thread alone, beside which LLVM works on its threads and workers
(``HETEROCC_LLVM_JOBS`` of them), so that on free cores the wall time approaches the
larger of that and the rest shared among the cores), the passes' seconds, the CPU
seconds of each step of a TE target's functions (``expr``: expressing them in TE;
``sched``: scheduling; ``lower``: TE to TIR and the TIR passes; ``ir``: the code
generator's part on the compiling thread, LLVM IR for ``llvm``; ``llvm``: LLVM's
optimization and machine code, beside it), and the five functions whose kernels took
longest to build (for TE targets such as ``llvm``: to lower, on the compiling thread).
Targets with an accelerator compile once per placement of ``--placements``. ``--refuse`` makes the
accelerator refuse every layer its patterns match, so a quantized model compiles
entirely into the CPU's integer fallback kernels (the ``vta,llvm`` rows are then marked
``vta!,llvm``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import describe  # noqa: E402

QUANTIZATIONS = ("float", "symmetric", "ort", "ort-uint8")


def prepare(model: str, quantization: str, use_torch: bool, directory: str) -> str:
    """Write the model, quantized as asked, and return its path."""
    import numpy as np
    import onnx
    from onnxruntime import quantization as oq

    path = os.path.join(directory, f"{model}.onnx")
    if use_torch:
        from torch_models import export

        export(model, path)
    else:
        from heterocc import models

        onnx.save(getattr(models, model)(), path)
    if quantization == "float":
        return path
    pre = os.path.join(directory, f"{model}_pre.onnx")
    oq.quant_pre_process(path, pre, skip_symbolic_shape=True)
    first = onnx.load(pre).graph.input[0]
    name = first.name
    shape = tuple(d.dim_value or 1 for d in first.type.tensor_type.shape.dim)

    class Calibration(oq.CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{name: np.random.default_rng(i).standard_normal(
                shape).astype(np.float32)} for i in range(4)])

        def get_next(self):
            return next(self.batches, None)

    out = os.path.join(directory, f"{model}_{quantization}.onnx")
    symmetric = quantization == "symmetric"
    oq.quantize_static(pre, out, Calibration(), quant_format=oq.QuantFormat.QDQ,
                       activation_type=oq.QuantType.QUInt8 if quantization == "ort-uint8"
                       else oq.QuantType.QInt8, weight_type=oq.QuantType.QInt8,
                       per_channel=not symmetric,
                       extra_options={"ActivationSymmetric": True, "WeightSymmetric": True}
                       if symmetric else {})
    return out


def _refusing(instance) -> None:
    """``instance``'s pattern table with every row refusing its matches."""
    import dataclasses

    table = instance.pattern_table

    def refused():
        return [dataclasses.replace(row, check=lambda nodes: "refused (--refuse)")
                for row in table()]

    instance.pattern_table = refused


def _timed_stages(instances) -> dict[str, float]:
    """CPU seconds of each step of a TE target's compile, summed over functions (filled
    in while compiling): ``express``, ``schedule``, ``lower`` (TE to TIR and the TIR
    passes) and ``ir`` (the code generator's work on the compiling thread: LLVM IR for
    ``llvm``), each on the calling thread, and ``llvm`` (optimization and machine code,
    on LLVM's threads and worker processes: ``LLVMModule.llvm_cpu_seconds``), of which
    ``workers`` in worker processes (not in this process's CPU time)."""
    from heterocc.sdk import te_target
    from heterocc.targets.llvm import module as llvm_module

    stages = dict.fromkeys(("express", "schedule", "lower", "ir", "llvm"), 0.0)
    stages["workers"] = 0.0
    lock = threading.Lock()

    def timing(stage, original):
        def timed(*args, **kwargs):
            began = time.thread_time()  # the calling thread's CPU: LLVM runs beside it
            try:
                return original(*args, **kwargs)
            finally:
                with lock:
                    stages[stage] += time.thread_time() - began
        return timed

    def llvm_timed(module, *args, original=llvm_module.LLVMModule._compile):
        began = time.thread_time()
        original(module, *args)
        with lock:
            stages["llvm"] += module.llvm_cpu_seconds
            stages["workers"] += module.llvm_cpu_seconds - (time.thread_time() - began)

    te_target.express_function = timing("express", te_target.express_function)
    llvm_module.LLVMModule._compile = llvm_timed
    for instance in instances:
        for stage, method in (("schedule", "schedule"), ("lower", "lower"),
                              ("ir", "codegen_later")):
            if hasattr(instance, method):
                setattr(instance, method, timing(stage, getattr(instance, method)))
    return stages


def measure(path: str, target: str, refuse: bool = False, placement: str = "auto") -> dict:
    """Compile ``path`` for ``target`` in this process: total seconds (wall, CPU, CPU of
    this thread), per-pass seconds, per-function build seconds, CPU seconds per step
    (:func:`_timed_stages`); with ``refuse``, the accelerators refuse every match of
    their patterns."""
    import heterocc
    from heterocc.targets import get_target

    instances = []
    builds: dict[str, float] = {}
    for name in target.split(","):
        instance = get_target(name)
        if refuse and hasattr(instance, "pattern_table"):
            _refusing(instance)
        # a TE target lowers each structure in _start_structure (its code generated
        # beside, waited for in the callable it returns); other targets build whole
        hook = "_start_structure" if hasattr(instance, "_start_structure") else "build"
        original = getattr(instance, hook)

        def timed(function, original=original):
            began = time.perf_counter()
            try:
                return original(function)
            finally:
                builds[function.name] = builds.get(function.name, 0.0) + (
                    time.perf_counter() - began)

        setattr(instance, hook, timed)
        instances.append(instance)
    stages = _timed_stages([i for i in instances if hasattr(i, "_start_structure")])
    began, cpu, thread = time.perf_counter(), time.process_time(), time.thread_time()
    compiled = heterocc.compile(path, target=instances, placement=placement)
    seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
    cpu += stages.pop("workers")  # LLVM's worker processes
    return {"seconds": seconds, "cpu": cpu, "thread": time.thread_time() - thread,
            "functions": len(builds),
            "passes": sum(r.seconds for r in compiled.pass_records),
            "stages": stages,
            "slowest": sorted(builds.items(), key=lambda kv: -kv[1])[:5]}


def _run(model: str, quantization: str, target: str, placement: str, path: str,
         refuse: bool) -> None:
    """One compile in a fresh process with an empty cache; prints its row."""
    with tempfile.TemporaryDirectory() as cache:
        child = subprocess.run(
            [sys.executable, __file__, "--measure", path, target, placement,
             *(["--refuse"] if refuse else [])],
            capture_output=True, text=True, env=dict(os.environ, HETEROCC_CACHE_DIR=cache))
    shown = target.replace("vta,", "vta!,") if refuse else target
    if placement != "auto":
        shown += f" {placement}"
    if child.returncode:
        print(f"{model:14s} {quantization:12s} {shown:17s} failed: "
              f"{child.stderr.strip().splitlines()[-1]}")
        return
    result = json.loads(child.stdout.strip().splitlines()[-1])
    slowest = ", ".join(f"{name} {s:.2f}" for name, s in result["slowest"])
    stages = " ".join(f"{s:5.2f}" for s in result["stages"].values())
    print(f"{model:14s} {quantization:12s} {shown:17s} {result['seconds']:8.2f} "
          f"{result['cpu']:6.2f} {result['thread']:6.2f} {result['passes']:7.2f} "
          f"{result['functions']:9d}  {stages}  {slowest}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--torch", action="store_true",
                    help="torchvision's architectures exported by torch (random weights)")
    ap.add_argument("--models", default="resnet18,mobilenet_v2")
    ap.add_argument("--quantizations", default=",".join(QUANTIZATIONS))
    ap.add_argument("--targets", default="llvm;vta,llvm",
                    help="semicolon-separated target strings")
    ap.add_argument("--placements", default="greedy,cost",
                    help="placements for targets with an accelerator (comma-separated)")
    ap.add_argument("--refuse", action="store_true",
                    help="accelerators refuse every layer: the CPU's integer fallback")
    ap.add_argument("--measure", nargs=3, metavar=("MODEL_PATH", "TARGET", "PLACEMENT"),
                    help=argparse.SUPPRESS)  # the child process
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure[:2], refuse=args.refuse,
                                 placement=args.measure[2])))
        return 0
    print(describe())
    print(f"load average (1 min) {os.getloadavg()[0]:.2f}")
    print(f"{'model':14s} {'quantization':12s} {'target':17s} {'seconds':>8s} {'cpu':>6s} "
          f"{'thread':>6s} {'passes':>7s} {'functions':>9s}  "
          f"{'expr':>5s} {'sched':>5s} {'lower':>5s} {'ir':>5s} {'llvm':>5s}  "
          "slowest functions (seconds)")
    with tempfile.TemporaryDirectory() as directory:
        for model in args.models.split(","):
            for quantization in args.quantizations.split(","):
                path = prepare(model, quantization, args.torch, directory)
                for target in args.targets.split(";"):
                    if target != "llvm" and quantization == "float":
                        continue  # nothing for the accelerator in a float model
                    placements = args.placements.split(",") if "," in target else ["auto"]
                    for placement in placements:
                        _run(model, quantization, target, placement, path, args.refuse)
    print(f"load average (1 min) {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
