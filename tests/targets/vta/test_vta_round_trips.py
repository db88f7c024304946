"""The placement report counts accelerator regions and host round trips (text and
``partition --json``), on models built with onnx.helper and quantized by
``quantize_static``: a conv chain cut by an op the accelerator does not take comes back
to the host once per cut."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

import heterocc
from heterocc.cli import main

pytest.importorskip("onnxruntime.quantization")

from tests.targets.vta.ort_models import quantize  # noqa: E402


def conv_chain(cuts: int, convs_per_piece: int = 2, head: bool = False) -> onnx.ModelProto:
    """``cuts + 1`` pieces of 3x3 convolutions (16 channels, 8x8), a Softmax over the
    channels between consecutive pieces (the CPU's: no pattern of the accelerator takes
    it; an element-wise activation would become its lookup table), and with ``head``
    one before the first piece too."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(cuts)
    nodes, inits, x = [], [], "input"
    if head:
        nodes.append(helper.make_node("Softmax", [x], ["head"], axis=1))
        x = "head"
    for piece in range(cuts + 1):
        for k in range(convs_per_piece):
            name = f"p{piece}c{k}"
            w = numpy_helper.from_array((rng.standard_normal((16, 16, 3, 3)) * 0.2)
                                        .astype(np.float32), f"{name}_w")
            inits.append(w)
            nodes.append(helper.make_node("Conv", [x, w.name], [f"{name}_y"],
                                          pads=[1, 1, 1, 1]))
            x = f"{name}_y"
        if piece < cuts:
            nodes.append(helper.make_node("Softmax", [x], [f"p{piece}_s"], axis=1))
            x = f"p{piece}_s"
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                       [1, 16, 8, 8])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 16, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("cuts", [0, 1, 2])
def test_report_counts_regions_and_round_trips(tmp_path, cuts):
    model = quantize(conv_chain(cuts), tmp_path, "QDQ", "QInt8")
    report = heterocc.compile(model, target="vta,llvm",
                              placement="greedy").placement_report
    assert report.mac_share("vta") == 1.0, report.format()
    assert report.accelerator_regions() == cuts + 1
    assert report.round_trips == cuts
    assert f"regions: {cuts + 1} accelerator regions, {cuts} host round trips" in \
        report.format()
    summary = report.to_json()
    assert (summary["accelerator_regions"], summary["host_round_trips"]) == (cuts + 1, cuts)


def test_partition_json_counts_round_trips(tmp_path, capsys):
    path = tmp_path / "chain.onnx"
    onnx.save(quantize(conv_chain(1), tmp_path, "QDQ", "QInt8"), str(path))
    assert main(["partition", str(path), "--target", "vta,llvm", "--json",
                 "--placement", "greedy"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["accelerator_regions"] == 2 and report["host_round_trips"] == 1


def test_host_work_before_the_first_region_is_no_round_trip(tmp_path):
    """Data that was never on the accelerator does not come back to it."""
    model = quantize(conv_chain(1, head=True), tmp_path, "QDQ", "QInt8")
    report = heterocc.compile(model, target="vta,llvm",
                              placement="greedy").placement_report
    assert report.by_target()["llvm"] > 0
    assert (report.accelerator_regions(), report.round_trips) == (2, 1)
