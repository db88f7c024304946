"""``heterocc demo``: compile the bundled model, run it, compare with ONNX Runtime."""

from __future__ import annotations

import statistics
import time

import numpy as np

from .models import tiny_cnn
from .passes import fused_functions


def _median_ms(fn, repeats: int = 10) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def run_demo(target: str = "reference") -> int:
    from . import compile as hcompile

    model = tiny_cnn()
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    print(f"model: tiny_cnn ({len(model.graph.node)} ONNX nodes), input {list(x.shape)} float32")
    t0 = time.perf_counter()
    compiled = hcompile(model, target=target)
    compile_s = time.perf_counter() - t0
    graph = compiled.graph
    print(f"compiled for {target} in {compile_s * 1e3:.1f} ms: {graph.num_nodes()} ops in "
          f"{len(fused_functions(graph))} fused functions")
    for fn in fused_functions(graph):
        print(f"  {fn.name:40s} -> {compiled.targets[-1]}")
    (probs,) = compiled.run({"input": x})
    ms = _median_ms(lambda: compiled.run({"input": x}))
    print(f"output probabilities: {np.array2string(probs[0], precision=3)}")
    print(f"top-1 class: {int(probs[0].argmax())}   heterocc run: {ms:.2f} ms (median of 10)")
    try:
        import onnxruntime as ort
    except ImportError:
        print("onnxruntime not installed: no comparison")
        return 0
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (ref,) = sess.run(None, {"input": x})
    ort_ms = _median_ms(lambda: sess.run(None, {"input": x}))
    print(f"ONNX Runtime: {ort_ms:.2f} ms (median of 10); max abs difference "
          f"{float(np.max(np.abs(probs - ref))):.2e}")
    return 0
