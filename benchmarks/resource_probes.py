"""Hostile model shapes against the compiler's resource limits (issue #30's probes): each
runs in its own process under an address-space limit (``ulimit -v``, default 8,000,000
KiB) and must end within a minute in a clear HeteroccError (exit status 2 from the CLI)
or a correct result, never a MemoryError, a RecursionError or exit status 0 without
output.

    python benchmarks/resource_probes.py [--ulimit-kib 8000000] [--timeout 60] [NAME...]

Prints one line per probe: its exit status, wall seconds (and the CPU seconds the probe
used: on a shared machine the wall time is mostly waiting), and the last line it printed.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HUGE = 100_000


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "probe", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def _float(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def chain(length: int = HUGE) -> onnx.ModelProto:
    """``length`` elementwise ops one after the other."""
    nodes, previous = [], "x"
    for i in range(length):
        nodes.append(helper.make_node("Relu" if i % 2 else "Neg", [previous], [f"t{i}"]))
        previous = f"t{i}"
    return _model(nodes, [_float("x", (4,))], [_float(previous, (4,))])


def constant_of_shape() -> onnx.ModelProto:
    """A HUGE x HUGE constant (40 GB of float32) added to the input."""
    shape = numpy_helper.from_array(np.array([HUGE, HUGE], np.int64), "shape")
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["c"],
                              value=numpy_helper.from_array(np.array([1.0], np.float32))),
             helper.make_node("Add", ["x", "c"], ["y"])]
    return _model(nodes, [_float("x", (1,))], [_float("y", ["d0", "d1"])], [shape])


def expand() -> onnx.ModelProto:
    """The input broadcast to HUGE x HUGE."""
    shape = numpy_helper.from_array(np.array([HUGE, HUGE], np.int64), "shape")
    nodes = [helper.make_node("Expand", ["x", "shape"], ["y"])]
    return _model(nodes, [_float("x", (1, 1))], [_float("y", ["d0", "d1"])], [shape])


def reshape_overflow() -> onnx.ModelProto:
    """A Reshape whose target's element count overflows int64 (2**32 x 2**32 x 2**2 wraps
    to 0 elements in int64 arithmetic)."""
    shape = numpy_helper.from_array(np.array([2**32, 2**32, 4], np.int64), "shape")
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"])]
    return _model(nodes, [_float("x", (4,))], [_float("y", ["d0", "d1", "d2"])], [shape])


def huge_input() -> onnx.ModelProto:
    """A HUGE x HUGE input (the CLI makes random inputs for it)."""
    return _model([helper.make_node("Relu", ["x"], ["y"])], [_float("x", (HUGE, HUGE))],
                  [_float("y", (HUGE, HUGE))])


PROBES = {
    "chain_100k": (chain, ["compile"]),
    "constant_of_shape": (constant_of_shape, ["run"]),
    "expand": (expand, ["run"]),
    "reshape_overflow": (reshape_overflow, ["run"]),
    "huge_input": (huge_input, ["run"]),
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*", default=list(PROBES))
    ap.add_argument("--ulimit-kib", type=int, default=8_000_000)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--target", default="llvm")
    args = ap.parse_args()
    folder = tempfile.mkdtemp()
    print(f"ulimit -v {args.ulimit_kib}, timeout {args.timeout:.0f} s, target {args.target}, "
          f"load {os.getloadavg()[0]:.2f}")
    bad = 0
    for name in args.names:
        make, command = PROBES[name]
        path = os.path.join(folder, f"{name}.onnx")
        onnx.save(make(), path)
        cli = [sys.executable, "-m", "heterocc.cli", *command, path, "--target", args.target]
        shell = f"ulimit -v {args.ulimit_kib}; exec " + " ".join(cli)
        t0 = time.perf_counter()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True,
                                  timeout=args.timeout)
            status, text = done.returncode, (done.stdout + done.stderr).strip()
        except subprocess.TimeoutExpired:
            status, text = "timeout", ""
        seconds = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        last = text.splitlines()[-1] if text else "(no output)"
        clear = status == 2 and last.startswith("heterocc: error:") or status == 0 and text
        bad += not clear
        print(f"{name:18s} exit {status!s:7s} {seconds:6.1f} s ({cpu:6.1f} s CPU)  "
              f"{'ok ' if clear else 'BAD'} "
              f"{last[:220]}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
