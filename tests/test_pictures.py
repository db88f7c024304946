"""The profile as CSV, JSON and a Chrome trace; a tuning log's curve as SVG."""

import csv
import io
import json
import xml.etree.ElementTree as ET

import numpy as np
import onnx
import pytest

import heterocc
from heterocc.cli import main
from heterocc.errors import InputError
from heterocc.models import tiny_cnn
from heterocc.profiling import chrome_trace, profile_csv, profile_rows, write_profile
from heterocc.tuning.curve import best_so_far, tuning_curve_svg
from heterocc.tuning.records import MeasureRecord, RecordLog


def _profiled(runs=3):
    model = heterocc.compile(tiny_cnn(), target="llvm")
    model.enable_profiling()
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    for _ in range(runs):
        model.run({"input": x})
    return model.profile_entries()


def test_profile_tables_and_trace_hold_every_call():
    entries = _profiled(runs=3)
    rows = profile_rows(entries)
    assert [r["node"] for r in rows] == [e.node for e in sorted(entries, key=lambda e:
                                                                -e.seconds)]
    assert all(r["calls"] == 3 for r in rows)
    assert abs(sum(r["share"] for r in rows) - 1.0) < 1e-3
    table = list(csv.DictReader(io.StringIO(profile_csv(entries))))
    assert [t["node"] for t in table] == [r["node"] for r in rows]
    trace = chrome_trace(entries)
    calls = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(calls) == 3 * len(entries)
    assert min(e["ts"] for e in calls) == 0.0 and all(e["dur"] >= 0 for e in calls)
    # the calls of one run follow each other in graph order: no two overlap on one track
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in calls)
    assert all(a_end <= b_start + 1e-3 for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
    json.dumps(trace)


def test_run_writes_profile_files(tmp_path, capsys):
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(), str(path))
    assert main(["run", str(path), "--repeat", "2", "--profile-out", str(tmp_path / "p.csv"),
                 "--trace", str(tmp_path / "t.json")]) == 0
    assert (tmp_path / "p.csv").read_text().startswith("node,op,target,calls")
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    with pytest.raises(InputError, match="csv or .json"):
        write_profile(tmp_path / "p.txt", _profiled(1))


def _log(tmp_path):
    costs = {"conv": [5.0, 4.0, None, 4.5, 2.0], "dense": [1.0, 1.0, 0.5]}
    path = tmp_path / "tune.jsonl"
    with RecordLog(path) as log:
        for task, values in costs.items():
            for i, c in enumerate(values):
                log.append(MeasureRecord(task, {"i": i}, i, () if c is None else (c,),
                                         None if c is not None else "RuntimeError"))
    return path


def test_tuning_curve_is_best_so_far_and_valid_svg(tmp_path, capsys):
    from heterocc.tuning.records import read_records

    records = read_records(_log(tmp_path))
    curves = best_so_far(records)
    assert curves == {"conv": [1.0, 1.25, 1.25, 1.25, 2.5], "dense": [1.0, 1.0, 2.0]}
    svg = tuning_curve_svg(records)
    root = ET.fromstring(svg)
    lines = root.findall("{http://www.w3.org/2000/svg}polyline")
    assert len(lines) == 2 and len(lines[0].get("points").split()) == 5
    out = tmp_path / "curve.svg"
    assert main(["tuning-curve", str(tmp_path / "tune.jsonl"), "-o", str(out)]) == 0
    assert out.read_text().startswith("<svg")


def test_a_region_profile_row_counts_its_composites():
    from heterocc.runtime.executor import ops_summary

    assert ops_summary(["conv", "conv", "add", "conv", "pool"]) == "conv x3+add+pool"
    rng = np.random.default_rng(0)
    samples = [{"input": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}
               for _ in range(2)]
    model = heterocc.compile(tiny_cnn(), target="vta,llvm", calibration=samples,
                             placement="greedy")
    model.enable_profiling()
    model.run(samples[0])
    regions = [e for e in model.profile_entries() if e.target == "vta"]
    assert any(" x" in e.op for e in regions)  # repeated composites counted, not cut off
