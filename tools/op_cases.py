"""Developer tool: run the ONNX node test cases of single-node models directly on
the op registry (no frontend, no passes) and print pass/fail per case.

    python tools/op_cases.py                 # every single-node case
    python tools/op_cases.py Conv Gemm -v    # only these op types, with failures explained
"""

from __future__ import annotations

import argparse
import sys
import traceback
import warnings

import numpy as np
from onnx import numpy_helper
from onnx.backend.test.case.node import collect_testcases

from heterocc.frontend.attributes import node_attributes
from heterocc.ir.types import EXTENDED_DTYPES, TensorType
from heterocc.ops import get_op, has_op, infer_node_types


def _array(x) -> np.ndarray:
    """Test data comes as arrays or, for narrow dtypes, as TensorProtos."""
    return numpy_helper.to_array(x) if hasattr(x, "data_type") else np.asarray(x)


def run_case(case) -> tuple[str, str]:
    graph = case.model.graph
    node = graph.node[0]
    if not has_op(node.op_type):
        return "missing", node.op_type
    op = get_op(node.op_type)
    attrs = op.normalize_attrs(node_attributes(node), node.name)
    by_name = {i.name: _array(x) for i, x in zip(graph.input, case.data_sets[0][0])}
    inputs = [by_name.get(n) if n else None for n in node.input]
    types = [TensorType.of(x) if x is not None else None for x in inputs]
    out_types = infer_node_types(op, types, inputs, attrs, len(node.output), node.name)
    results = op.run(inputs, attrs)
    present = [k for k, name in enumerate(node.output) if name]  # skipped outputs have no data
    for k, expected in zip(present, case.data_sets[0][1]):
        expected = _array(expected)
        got = results[k]
        if out_types[k].shape != expected.shape or out_types[k].dtype != expected.dtype.name:
            return "fail", f"output {k}: inferred {out_types[k]}, expected " \
                           f"{TensorType.of(expected)}"
        if got.shape != expected.shape or got.dtype != expected.dtype:
            return "fail", f"output {k}: got {got.dtype}{got.shape}, expected " \
                           f"{expected.dtype}{expected.shape}"
        if expected.dtype.name in EXTENDED_DTYPES:  # compare narrow formats as float32
            got, expected = got.astype(np.float32), expected.astype(np.float32)
        if expected.dtype.kind in "fc":
            ok = np.allclose(got, expected, rtol=case.rtol, atol=case.atol, equal_nan=True)
        else:
            ok = np.array_equal(got, expected)
        if not ok:
            return "fail", f"output {k}: values differ"
    return "pass", ""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("ops", nargs="*")
    ap.add_argument("-v", action="store_true")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    counts: dict[str, int] = {}
    for case in collect_testcases(None):
        if case.kind != "node" or len(case.model.graph.node) != 1:
            continue
        op_type = case.model.graph.node[0].op_type
        if args.ops and op_type not in args.ops:
            continue
        try:
            status, why = run_case(case)
        except Exception as exc:  # report and go on
            status, why = "error", f"{type(exc).__name__}: {exc}"
            if args.v:
                traceback.print_exc()
        counts[status] = counts.get(status, 0) + 1
        if args.v or status not in ("pass", "missing"):
            print(f"{status:8s} {case.name}  {why}")
    print(counts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
