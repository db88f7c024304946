"""Whole networks on the RTL: a real network, quantized by onnxruntime, run with every
accelerator function on the Verilator RTL layer after layer, the RTL's DRAM carried from
one layer to the next; each layer bit-exact with the simulator and the integer reference,
and cycle-exact (within 1%) with the timing model, and the model's outputs equal to the
simulator-run model's."""

import numpy as np
import onnx
import pytest

from heterocc.cli import main
from heterocc.models import resnet18, tiny_cnn
from heterocc.targets.vta.hil import network_hil
from tests.hw.conftest import BUILD_ROOT, require_rtl_tools

pytestmark = [pytest.mark.rtl, pytest.mark.hil, pytest.mark.slow]


def quantized_per_channel(model: onnx.ModelProto, directory) -> onnx.ModelProto:
    """``model`` quantized by onnxruntime's quantize_static in its default setting (QDQ,
    uint8 activations with zero points) with per-channel int8 weights, calibrated on
    seeded random inputs."""
    oq = pytest.importorskip("onnxruntime.quantization")
    name = model.graph.input[0].name
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]

    class Calibration(oq.CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{name: np.random.default_rng(i).standard_normal(shape)
                                  .astype(np.float32)} for i in range(2)])

        def get_next(self):
            return next(self.batches, None)

    onnx.save(model, str(directory / "float.onnx"))
    oq.quantize_static(str(directory / "float.onnx"), str(directory / "qdq.onnx"),
                       Calibration(), quant_format=oq.QuantFormat.QDQ, per_channel=True)
    return onnx.load(str(directory / "qdq.onnx"))


@pytest.fixture(scope="module")
def resnet18_32(tmp_path_factory):
    directory = tmp_path_factory.mktemp("resnet18_32")
    model = quantized_per_channel(resnet18(size=32, classes=10), directory)
    onnx.save(model, str(directory / "resnet18_32.onnx"))
    return directory / "resnet18_32.onnx"


def test_resnet18_runs_on_the_verilator_rtl(resnet18_32, caplog):
    require_rtl_tools("verilator")
    with caplog.at_level("INFO", logger="heterocc.hil"):
        report = network_hil(str(resnet18_32), simulator="verilator", build_root=BUILD_ROOT)
    table = report.table()
    # every convolution (with its shortcut and residual addition) runs on the accelerator
    assert len(report.layers) >= 20, table
    assert report.agrees, table
    assert all(layer.comparison.matches and layer.reference_matches
               for layer in report.layers), table
    assert report.max_deviation <= 0.01, table
    assert report.outputs_match_simulator and report.outputs_match, table
    assert report.rtl_cycles > 100_000
    # progress as it goes: one line per layer, numbered, with cycles and the rate
    progress = [r.getMessage() for r in caplog.records if r.getMessage().startswith("layer ")]
    assert len(progress) == len(report.layers)
    assert progress[-1].startswith(f"layer {len(report.layers)}/{len(report.layers)} ")
    assert "cycles/s" in progress[0]
    assert table.splitlines()[-1].startswith(str(resnet18_32))


def test_hil_command_prints_the_network_table(tmp_path, capsys):
    """``heterocc hil MODEL --simulator verilator``: progress, then the table (a small
    network keeps this one short; the ResNet-18 above runs through the same function)."""
    require_rtl_tools("verilator")
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_cnn(size=8), str(path))
    assert main(["hil", str(path), "--simulator", "verilator",
                 "--build-dir", str(BUILD_ROOT)]) == 0
    out = capsys.readouterr().out
    header, rule = out.splitlines()[:2]
    assert header.split() == ["#", "function", "instr", "RTL", "cycles", "model", "cycles",
                              "dev", "%", "wall", "s", "cycles/s", "simulator", "reference"]
    assert set(rule) == {"-"}
    assert "5/5 accelerator functions agree with the simulator and the reference" in out
