"""One compiled model run from many threads at once, every output compared bitwise with
the serial run of the same input (issue #30's done-when probe).

    python benchmarks/thread_stress.py [--model resnet18|mobilenet_v2] [--torch]
        [--threads 8] [--runs 50] [--inputs 8] [--size 224] [--targets llvm vta,llvm]

``llvm`` compiles the float model; ``vta,llvm`` the model quantized by onnxruntime's
``quantize_static`` (QDQ, int8 activations with zero points, per-channel weights) as
``benchmarks/vta_resnet18.py`` makes it. ``--torch`` exports torchvision's architecture
with torch (random weights), otherwise the same network is built with onnx.helper.
Each thread makes ``--runs`` calls over the ``--inputs`` inputs in its own order; the
script prints, per target, how many of the threads x runs outputs equal the serial
output of their input, how many equal another input's output instead, and the wall
time (serial and threaded), and exits 1 if any differs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time

import numpy as np
import onnx

import heterocc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from machine import describe  # noqa: E402
from vta_resnet18 import float_model, quantized  # noqa: E402


def stress(run, inputs: list[np.ndarray], threads: int, runs: int) -> dict:
    """Serial outputs of every input, then ``threads`` x ``runs`` threaded calls."""
    t0 = time.perf_counter()
    serial = [[o.copy() for o in run(x)] for x in inputs]
    serial_s = time.perf_counter() - t0
    barrier = threading.Barrier(threads)
    results: list[tuple[int, list[np.ndarray]]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(t: int) -> None:
        try:
            barrier.wait()
            for i in range(runs):
                k = (t * 5 + i * 3) % len(inputs)
                out = [o.copy() for o in run(inputs[k])]
                with lock:
                    results.append((k, out))
        except BaseException as exc:  # noqa: BLE001 - counted and printed below
            errors.append(exc)

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    t0 = time.perf_counter()
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    threaded_s = time.perf_counter() - t0
    keys = [b"".join(o.tobytes() for o in out) for out in serial]
    equal = other = 0
    for k, out in results:
        key = b"".join(o.tobytes() for o in out)
        equal += key == keys[k]
        other += key != keys[k] and key in keys
    return {"calls": threads * runs, "done": len(results), "equal": equal, "other": other,
            "errors": [repr(e) for e in errors[:3]], "serial_s": serial_s,
            "threaded_s": threaded_s}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["resnet18", "mobilenet_v2"], default="resnet18")
    ap.add_argument("--torch", action="store_true")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--inputs", type=int, default=8)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--targets", nargs="+", default=["llvm", "vta,llvm"])
    args = ap.parse_args()
    print(f"{describe()}; {args.model} ({'torch export' if args.torch else 'onnx.helper'}), "
          f"{args.threads} threads x {args.runs} runs, {args.inputs} inputs, load "
          f"{os.getloadavg()[0]:.2f}")
    shape = (1, 3, args.size, args.size)
    inputs = [np.random.default_rng(500 + i).standard_normal(shape).astype(np.float32)
              for i in range(args.inputs)]
    failed = False
    for target in args.targets:
        if target == "llvm":
            path = os.path.join(tempfile.mkdtemp(), "float.onnx")
            float_model(args.model, args.torch, args.size, path)
            model = onnx.load(path)
        else:
            model = quantized(args.model, args.torch, args.size, "qdq", "int8", False)
        name = model.graph.input[0].name
        compiled = heterocc.compile(model, target=target)
        r = stress(lambda x, c=compiled, n=name: c.run({n: x}), inputs, args.threads,
                   args.runs)
        failed |= r["equal"] != r["calls"]
        print(f"{target:9s} {r['equal']}/{r['calls']} bitwise equal to serial "
              f"({r['other']} equal to another input's output, {r['calls'] - r['done']} "
              f"raised {r['errors']}); serial {r['serial_s'] / len(inputs) * 1e3:.1f} ms/run, "
              f"threaded {r['threaded_s'] / r['calls'] * 1e3:.1f} ms/run wall")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
