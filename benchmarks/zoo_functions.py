"""One zoo model through heterocc and ONNX Runtime, function by function: the fastest of
``--runs`` calls of each of heterocc's functions (its per-op profile) and of each of ONNX
Runtime's kernels (its profiler), in the order they run, and their sums: where a model's
time goes, and which layer is behind its peer.

    python benchmarks/zoo_functions.py mobilenet_v2 [--int8] [--runs 30] [--target llvm]
                                        [--threads 1] [--json PATH]

Both engines run ``--threads`` intra-op threads (default one; heterocc's pool through
``HETEROCC_NUM_THREADS`` unless it is set), their calls alternating. ``--json`` also
writes both lists to a file (compare one thread's with two threads' for the scaling of
each function). The minimum of each function over
the runs is the figure a loaded machine inflates least (a profiled call is timed on the
wall clock); a layer's row in each list is found by its position (heterocc's functions
are fused: a convolution with its epilogue, a residual addition with the convolution
before it).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import zoo  # noqa: E402  (beside this script)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    zoo.model_arguments(parser)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads of each engine")
    parser.add_argument("--json", help="also write both lists to this file")
    args = parser.parse_args()
    os.environ.setdefault("HETEROCC_NUM_THREADS", str(args.threads))
    import onnxruntime as ort

    import heterocc

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{args.model}.onnx")
        why = zoo.export(args.model, path)
        if why:
            print(f"skipped: {why}")
            return 0
        if args.int8:
            quantized = os.path.join(tmp, f"{args.model}.int8.onnx")
            zoo.quantize(path, quantized)
            path = quantized
        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(tmp, "ort_profile")
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        feed = zoo.random_feed(session, np.random.default_rng(1))
        compiled = heterocc.compile(path, target=args.target)
        compiled.run(feed)
        session.run(None, feed)
        compiled.enable_profiling()
        for _ in range(args.runs):
            compiled.run(feed)
            session.run(None, feed)
        with open(session.end_profiling()) as f:
            events = json.load(f)
    print(f"{args.model} {'int8' if args.int8 else 'float'} on {args.target}, "
          f"{args.threads} thread(s): fastest of {args.runs} runs, ms; "
          f"load average (1 min) {os.getloadavg()[0]:.2f}")
    theirs: dict[str, float] = collections.defaultdict(lambda: float("inf"))
    kinds = {}
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            node = e["name"][:-len("_kernel_time")]
            theirs[node] = min(theirs[node], e["dur"] / 1e3)
            kinds[node] = e["args"].get("op_name", "?")
    ours = [(min(s for _, s in e.spans) * 1e3, e.node, e.op)
            for e in compiled.profile_entries()]
    print(f"sum: heterocc {sum(t for t, _, _ in ours):.3f}, "
          f"ONNX Runtime {sum(theirs.values()):.3f}")
    print("-- heterocc's functions")
    for seconds, node, ops in ours:
        print(f"{seconds:8.3f}  {node[:48]:48s}  {ops[:60]}")
    print("-- ONNX Runtime's kernels")
    for node, seconds in theirs.items():
        print(f"{seconds:8.3f}  {kinds[node][:24]:24s}  {node[:70]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "load": os.getloadavg()[0],
                       "heterocc": [{"ms": t, "node": n, "ops": o} for t, n, o in ours],
                       "onnxruntime": [{"ms": t, "node": n, "op": kinds[n]}
                                       for n, t in theirs.items()]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
