"""Where a compiled zoo model's time goes between its kernels, on one thread: the CPU time
of a whole run, of each kernel inside it and of each kernel alone, medians over ``--runs``
runs.

    python benchmarks/between_kernels.py googlenet [--int8] [--runs 30] [--target llvm]
        [--flush [--flush-mb MB]]

- **run**: ``executor.execute``, the whole run as a user's call pays it;
- **native call**: the native run's call alone (the executor's Python around it, some
  microseconds a run, is below what two medians of separate runs can tell apart);
- **kernels in the run**: the sum of each kernel's time inside the native run, timed by
  the runtime (``heterocc_run_sequence_cpu_timed``); that call's own time minus it, in the
  same run, less the runtime's two clock reads per kernel (as Python's reads cost them):
  at most the cost between kernels (the runtime's table walk and indirect calls; each
  clock read is a system call whose cost on a loaded virtual machine varies, so this is
  an upper bound: ``runtime_overhead.py`` puts a chain of tiny kernels in a native run at
  under half a microsecond per kernel, the kernel's work included);
- **kernels alone**: the sum of each kernel's machine code called again right after
  itself (through ctypes, about a microsecond a call), on the arguments it had in the run
  (warm caches); in the run minus alone: what following another kernel costs a kernel
  (its inputs, weights and output buffer out of the caches);
- **kernels alone, caches flushed** (``--flush``): each kernel's machine code called
  after a sweep over a buffer three times the last-level cache (``--flush-mb`` to size
  it by hand): what it takes with everything it reads coming from memory, the other
  bound of its time in the run (ResNet-18 int8's last stage takes about this in a run).

Every figure is the calling thread's CPU time, which does not grow while other processes
hold the core (wall time on a loaded machine mostly counts their time slices), and the
medians are taken over the same runs, so they can be compared with one another on a shared
machine. A model's median against the *sum of its kernels' fastest calls* (what a
per-function profile's minima add up to) is no such comparison: every kernel's median is
above its minimum, and the gap between the two sums grows with the load.
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import zoo  # noqa: E402  (beside this script)
from machine import describe  # noqa: E402
from runtime_overhead import machine_code_calls  # noqa: E402


def _thread_seconds() -> float:
    return time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID)


def flush_bytes(megabytes: int) -> int:
    """The flushing sweep's size: ``megabytes`` MB, or (0) three times the largest
    cache Linux describes for CPU 0 (64 MB where it describes none)."""
    if megabytes:
        return megabytes << 20
    sizes = []
    for index in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        with open(index) as described:
            text = described.read().strip()
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        sizes.append(int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text))
    return 3 * max(sizes) if sizes else 64 << 20


def _compile(name: str, int8: bool, target: str):
    """The zoo model's executor (``--int8``: quantized as zoo.py does) and its input."""
    import onnxruntime as ort

    import heterocc

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, f"{name}.onnx")
        why = zoo.export(name, path)
        if why:
            raise SystemExit(f"skipped: {why}")
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(1)
        feed = zoo.random_feed(session, rng)
        if int8:
            quantized = os.path.join(tmp, f"{name}.int8.onnx")
            zoo.quantize(path, quantized)
            path = quantized
        executor = heterocc.compile(path, target=target).build_static().executor
    return executor, [feed[name] for name in executor.input_names]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    zoo.model_arguments(parser)
    parser.add_argument("--top", type=int, default=8,
                        help="kernels listed whose time in the run exceeds alone the most")
    parser.add_argument("--flush", action="store_true",
                        help="also time each kernel alone after the caches are flushed")
    parser.add_argument("--flush-mb", type=int, default=0,
                        help="the flushing sweep's buffer in MB (default: three times the "
                             "last-level cache)")
    args = parser.parse_args()
    os.environ["HETEROCC_NUM_THREADS"] = "1"
    executor, inputs = _compile(args.model, args.int8, args.target)
    executor.execute(inputs)
    runs, nodes = executor.runs, executor.graph.nodes
    if len(runs) != 1 or (runs[0].first, runs[0].last) != (0, len(nodes) - 1):
        print(f"{args.model}: its {len(nodes)} functions are not one native run "
              f"({[(r.first, r.last) for r in runs]}); this script times one run only")
        return 1
    (run,) = runs
    by_slot = dict(zip(executor._input_slots, inputs))
    run_inputs = [by_slot[slot] for slot in run.reads]
    if run.native.cpu_timed(run_inputs) is None:
        print(f"{args.model}: its runtime cannot time kernels on the CPU clock")
        return 1
    alone_calls = machine_code_calls(executor, inputs)
    whole, native, between = [], [], []
    inside, alone = [[] for _ in nodes], [[] for _ in nodes]
    flushed = [[] for _ in nodes]
    sweep = np.ones(flush_bytes(args.flush_mb), np.uint8).view(np.uint64) if args.flush \
        else None
    for _ in range(args.runs):
        start = _thread_seconds()
        executor.execute(inputs)
        whole.append(_thread_seconds() - start)
        start = _thread_seconds()
        run.native(run_inputs)
        native.append(_thread_seconds() - start)
        start = _thread_seconds()
        spans = run.native.cpu_timed(run_inputs)[1]
        between.append(_thread_seconds() - start - sum(spans))
        for samples, seconds in zip(inside, spans):
            samples.append(seconds)
        for samples, (call, addresses, _) in zip(alone, alone_calls):
            call(*addresses)
            start = _thread_seconds()
            call(*addresses)
            samples.append(_thread_seconds() - start)
        if sweep is not None:
            for samples, (call, addresses, _) in zip(flushed, alone_calls):
                sweep.sum()
                start = _thread_seconds()
                call(*addresses)
                samples.append(_thread_seconds() - start)
    median = statistics.median
    reads = 1000
    start = _thread_seconds()
    for _ in range(reads):
        _thread_seconds()
    clock_read = (_thread_seconds() - start) / reads  # Python's read: an upper bound
    clocks = 2 * len(nodes) * clock_read
    in_run = sum(median(s) for s in inside)
    by_itself = sum(median(s) for s in alone)
    print(describe())
    print(f"{args.model} {'int8' if args.int8 else 'float'} on {args.target}, one thread: "
          f"{len(nodes)} functions in one native run; medians of {args.runs} runs, thread "
          f"CPU ms; load average (1 min) {os.getloadavg()[0]:.2f}")
    print(f"  run (executor.execute)      {median(whole) * 1e3:9.3f}  (fastest "
          f"{min(whole) * 1e3:.3f})")
    print(f"  native call                 {median(native) * 1e3:9.3f}  (fastest "
          f"{min(native) * 1e3:.3f})")
    print(f"  kernels in the run, summed  {in_run * 1e3:9.3f}  (between kernels, in the "
          f"same runs: at most {max(median(between) - clocks, 0.0) * 1e3:.3f}, after "
          f"{clocks * 1e3:.3f} of clock reads)")
    print(f"  kernels alone, summed       {by_itself * 1e3:9.3f}  (in the run minus alone: "
          f"{(in_run - by_itself) * 1e3:+.3f})")
    if sweep is not None:
        print(f"  kernels alone, caches flushed {sum(median(s) for s in flushed) * 1e3:7.3f}  "
              f"(after a sweep of {sweep.nbytes >> 20} MB)")
    order = sorted(range(len(nodes)), key=lambda k: median(alone[k]) - median(inside[k]))
    print(f"  the {args.top} kernels slower in the run than alone by the most:")
    for k in order[:args.top]:
        cold = f"  flushed {median(flushed[k]) * 1e3:7.3f}" if sweep is not None else ""
        print(f"    {nodes[k].name[:56]:56s} in the run {median(inside[k]) * 1e3:7.3f}  "
              f"alone {median(alone[k]) * 1e3:7.3f}{cold}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
