"""Concurrent ``heterocc compile -o DIR`` into one directory (issue #30's export race):
each race starts ``--writers`` CLI processes at once on the same output directory; the
directory must then load and run, equal to a fresh compile, with no staging directories
left beside it.

    python benchmarks/export_race.py [--races 16] [--writers 2]

Prints, per race, the writers' exit statuses and whether the artifact loaded whole, and
a total; exits 1 if any race left an unloadable artifact.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import heterocc
from heterocc.errors import HeteroccError


def _model() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.linspace(-1, 1, 64 * 32, dtype=np.float32)
                                .reshape(64, 32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Relu", ["m"], ["y"])]
    graph = helper.make_graph(nodes, "race", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, (8, 64))], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, (8, 32))], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--races", type=int, default=16)
    ap.add_argument("--writers", type=int, default=2)
    args = ap.parse_args()
    folder = tempfile.mkdtemp()
    model_path = os.path.join(folder, "model.onnx")
    onnx.save(_model(), model_path)
    x = np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)
    expected = heterocc.compile(model_path).run([x])[0]
    whole = 0
    print(f"{args.races} races of {args.writers} writers, load {os.getloadavg()[0]:.2f}")
    for race in range(args.races):
        out = os.path.join(folder, f"race{race}", "artifact")
        writers = [subprocess.Popen([sys.executable, "-m", "heterocc.cli", "compile",
                                     model_path, "-o", out], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True)
                   for _ in range(args.writers)]
        statuses = [w.wait() for w in writers]
        try:
            got = heterocc.load(out).run([x])[0]
            ok = got.tobytes() == expected.tobytes()
            result = "loads, output equal" if ok else "loads, OUTPUT DIFFERS"
        except HeteroccError as exc:
            ok, result = False, f"REFUSED: {exc}"
        left = sorted(set(os.listdir(os.path.dirname(out))) - {"artifact"})
        ok = ok and not left
        whole += ok
        print(f"race {race:2d}: exit {statuses}, {result}"
              + (f", left behind {left}" if left else ""))
    print(f"{whole}/{args.races} races left one whole, loadable artifact")
    return 0 if whole == args.races else 1


if __name__ == "__main__":
    sys.exit(main())
