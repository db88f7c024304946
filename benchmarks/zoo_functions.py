"""One zoo model through heterocc and ONNX Runtime, function by function: the fastest of
``--runs`` calls of each of heterocc's functions (its per-op profile) and of each of ONNX
Runtime's kernels (its profiler), in the order they run, and their sums: where a model's
time goes, and which layer is behind its peer.

    python benchmarks/zoo_functions.py mobilenet_v2 [--int8] [--runs 30] [--target llvm]
                                        [--threads 1] [--json PATH] [--against PATH]

Both engines run ``--threads`` intra-op threads (default one; heterocc's pool through
``HETEROCC_NUM_THREADS`` unless it is set), their calls alternating; at more than one
thread in blocks of :data:`THREADED_BLOCK` calls each, each block after a pause of
:data:`THREADED_PAUSE_S`, since a pool's workers spin for a while after a call and would
take a core from the other engine's next calls (one engine's first functions then ran on
one thread, in every run; ONNX Runtime's spin for tens of milliseconds). ``--json`` also
writes both lists to a file; ``--against`` reads such a file of the same model at another
thread count and prints each engine's scaling from it: the sums' speedup and the
functions that lose most against a perfect one (their time here minus their time there
times that thread count over this one), e.g. one thread's file against two threads::

    python benchmarks/zoo_functions.py mobilenet_v2 --int8 --runs 200 --json one.json
    python benchmarks/zoo_functions.py mobilenet_v2 --int8 --runs 200 --threads 2 \
        --against one.json

The minimum of each function over the runs is the figure a loaded machine inflates least
(a profiled call is timed on the wall clock); a layer's row in each list is found by its
position (heterocc's functions are fused: a convolution with its epilogue, a residual
addition with the convolution before it).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import zoo  # noqa: E402  (beside this script)
from machine import core_round_trip_ns, describe  # noqa: E402

#: calls of each engine in a row at more than one thread (see the docstring)
THREADED_BLOCK = 10
#: the pause before each block at more than one thread: ONNX Runtime's workers spin
#: 20-60 ms after its last call returns (MobileNetV2 int8's functions measured right after
#: its block, on 2 cores: 1.21x faster on two threads than on one; after this pause 1.6x)
THREADED_PAUSE_S = 0.2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    zoo.model_arguments(parser)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads of each engine")
    parser.add_argument("--json", help="also write both lists to this file")
    parser.add_argument("--against", help="a --json file of this model at another thread "
                        "count: print each function's scaling from it")
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
        block = 1 if args.threads == 1 else THREADED_BLOCK
        pause_s = 0.0 if args.threads == 1 else THREADED_PAUSE_S
        for start in range(0, args.runs, block):
            calls = min(block, args.runs - start)
            for run in (lambda: compiled.run(feed), lambda: session.run(None, feed)):
                time.sleep(pause_s)
                for _ in range(calls):
                    run()
        with open(session.end_profiling()) as f:
            events = json.load(f)
    print(describe(args.target))
    apart = core_round_trip_ns() if args.threads > 1 else None
    print(f"{args.model} {'int8' if args.int8 else 'float'} on {args.target}, "
          f"{args.threads} thread(s): fastest of {args.runs} runs, ms; "
          f"load average (1 min) {os.getloadavg()[0]:.2f}"
          + (f"; first two CPUs {apart} ns apart (a cache line's round trip)"
             if apart is not None else ""))
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
    if args.against:
        with open(args.against) as f:
            print_scaling(json.load(f), args.threads, ours,
                          [(t, n, kinds[n]) for n, t in theirs.items()])
    return 0


#: functions listed per engine by :func:`print_scaling`
WORST_SCALING = 12


def print_scaling(before: dict, threads: int, ours: list, theirs: list) -> None:
    """Each engine's scaling from ``before`` (a ``--json`` file at another thread count)
    to this run's ``ours`` and ``theirs`` ((ms, node, op) in order): the sums' speedup,
    and the :data:`WORST_SCALING` functions whose time here exceeds a perfect scaling of
    their time there most (matched by node name)."""
    factor = before["threads"] / threads
    print(f"-- scaling from {before['threads']} thread(s) (load then "
          f"{before['load']:.2f}) to {threads}: loss = ms here - ms there x {factor:g}")
    for engine, rows in (("heterocc", ours), ("onnxruntime", theirs)):
        there = {row["node"]: row["ms"] for row in before[engine]}
        matched = [(t - there[n] * factor, t, there[n], n, op) for t, n, op in rows
                   if n in there]
        here_sum = sum(t for _, t, _, _, _ in matched)
        there_sum = sum(t for _, _, t, _, _ in matched)
        loss_us = (here_sum - there_sum * factor) * 1e3
        print(f"{engine}: {there_sum:.3f} -> {here_sum:.3f} ms, speedup "
              f"{there_sum / max(here_sum, 1e-9):.2f}, loss {loss_us:.0f} us "
              f"({len(matched)} of {len(rows)} functions matched)")
        for loss, t, before_t, node, op in sorted(matched, reverse=True)[:WORST_SCALING]:
            print(f"{loss * 1e3:8.1f} us  {before_t:7.3f} -> {t:7.3f}  "
                  f"{before_t / max(t, 1e-9):5.2f}x  {node[:40]:40s}  {op[:40]}")


if __name__ == "__main__":
    sys.exit(main())
