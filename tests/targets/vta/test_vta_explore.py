"""heterocc accel explore: the sweep of configs, the model's latency from the timing
model, and the table, JSON and Pareto plot. Yosys is replaced by a resource formula
here (its flow and cache are tested in tests/accel_sim/test_fpga_flow.py and
tests/hw/test_synthesis.py), so these tests stay fast."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ElementTree

import numpy as np
import pytest

from heterocc.accel_sim import HardwareConfig
from heterocc.accel_sim.fpga_fit import PARTS, Fit, Resources, Synthesis
from heterocc.accel_sim.timing import schedule_stream
from heterocc.cli import main as cli_main
from heterocc.errors import AcceleratorError
from heterocc.models import tiny_cnn
from heterocc.targets.vta import VtaTarget, explore

CALIBRATION = [{"input": np.random.default_rng(i).standard_normal((1, 3, 8, 8))
                .astype(np.float32)} for i in range(2)]


def test_sweep_crosses_shapes_buffers_and_clocks():
    configs = explore.sweep(["8x8", "1x16x16"], acc_kib=[32, 64], clocks_mhz=[100, 200])
    assert len(configs) == 8
    first = configs[0]
    # 8x8 starts from its preset (smaller buffers), then takes the sweep's values
    assert first.block_in == first.block_out == 8 and first.log_acc_buffer_bytes == 15
    assert first.log_wgt_buffer_bytes == HardwareConfig.preset("1x8x8").log_wgt_buffer_bytes
    assert [c.clock_mhz for c in configs[:2]] == [100, 200]
    assert configs[-1].name.startswith("1x16x16") and configs[-1].log_acc_buffer_bytes == 16
    # a shape without a preset reshapes the default config
    assert explore.sweep(["1x4x8"], [16], [16], [8])[0].name.startswith("1x4x8")
    for bad in ("16", "12x12", "axb", "0x8"):
        with pytest.raises(AcceleratorError, match="GEMM shape"):
            explore.parse_gemm(bad)
    with pytest.raises(AcceleratorError, match="power of two"):
        explore.sweep(["8x8"], wgt_kib=[96])


def test_sweep_takes_named_presets_as_they_are():
    """``--gemm 8x8,pynq-z2``: a preset by name keeps its buffers (the xc7z020 fit), so
    its synthesis is the one ``accel fit --preset pynq-z2`` cached."""
    configs = explore.sweep(["8x8", "pynq-z2"], clocks_mhz=[100, 150])
    pynq = HardwareConfig.preset("pynq-z2")
    assert [c.block_in for c in configs] == [8, 8, 16, 16]
    assert configs[2].name == pynq.name and configs[3].clock_mhz == 150
    assert {**configs[2].to_dict(), "clock_mhz": pynq.clock_mhz} == pynq.to_dict()
    with pytest.raises(AcceleratorError, match="no GEMM shape .*pynq-z2"):
        explore.sweep(["pynq-z9"])


def test_model_cycles_sum_the_timing_model_over_the_compiled_functions():
    """Each config compiles the model anew: the latency follows the config's shape."""
    results = {}
    targets = []

    def make(config):
        targets.append(VtaTarget(config=config))
        return targets[-1]

    for preset in ("1x8x8", "1x16x16"):
        config = HardwareConfig.preset(preset)
        functions, cycles = explore.model_cycles(tiny_cnn(size=8), config, make, CALIBRATION)
        kernels = targets[-1].kernels
        assert functions == len(kernels) > 0
        assert all(k.config == config for k in kernels)
        assert cycles == sum(schedule_stream(k.program.instructions, config).total_cycles
                             for k in kernels)
        results[preset] = cycles
    # four times the multiply-accumulates per cycle: fewer cycles for the same model
    assert results["1x16x16"] < results["1x8x8"]


def _formula_fit(calls):
    """A stand-in for Yosys: resources grow with the GEMM core and the buffers."""
    def fit(config, part, limit):
        calls.append(config.name)
        buffers = sum(1 << getattr(config, f"log_{b}_buffer_bytes") for b in
                      ("uop", "inp", "wgt", "acc"))
        resources = Resources(lut=10_000 + 40 * config.macs_per_iteration, lutram=0,
                              ff=5_000, dsp=config.macs_per_iteration // 2,
                              bram36=buffers / 4096, carry=0)
        return Fit(PARTS[part], Synthesis(config.name, "xc7", resources, "k", 1.0, False),
                   limit)
    return fit


def test_explore_writes_table_json_and_pareto_plot(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(explore, "fit", _formula_fit(calls))
    configs = explore.sweep(["8x8", "16x16", "32x32"], clocks_mhz=[100, 200])
    result = explore.explore(tiny_cnn(size=8), configs, lambda c: VtaTarget(config=c),
                             "xc7z020", calibration=CALIBRATION)
    # one synthesis per distinct config name: clocks share it
    assert sorted(calls) == sorted({c.name for c in configs})
    assert len(result.points) == 6
    for slow, fast in zip(result.points[::2], result.points[1::2]):
        assert slow.cycles == fast.cycles
        assert slow.latency_ms == pytest.approx(2 * fast.latency_ms)
        assert slow.latency_ms == pytest.approx(slow.cycles / 100e3)
    # 32x32: 512 DSPs, more than 80% of the xc7z020's 220
    assert [p.fit.fits for p in result.points] == [True, True, True, True, False, False]
    front = explore.pareto(result.points, "lut")
    for point in result.points:  # nothing on the front is beaten on both axes
        for member in front:
            assert not (point.latency_ms < member.latency_ms
                        and point.fit.synthesis.resources.lut
                        < member.fit.synthesis.resources.lut)
    files = result.write(tmp_path, "dsp")
    assert [f.name for f in files] == ["explore.txt", "explore.json", "pareto_dsp.svg"]
    saved = json.loads((tmp_path / "explore.json").read_text())
    assert [p["config"] for p in saved["points"]] == [c.name for c in configs]
    assert saved["points"][0]["latency_ms"] == round(result.points[0].latency_ms, 4)
    assert saved["points"][4]["fits"] is False and saved["part"] == "xc7z020"
    table = (tmp_path / "explore.txt").read_text().splitlines()
    assert len(table) == 2 + 6 and table[2].split()[0] == configs[0].name
    svg = ElementTree.fromstring((tmp_path / "pareto_dsp.svg").read_text())
    circles = svg.findall("{http://www.w3.org/2000/svg}circle")
    assert len(circles) == 6
    assert sum(c.get("fill") == "white" for c in circles) == 2  # the two that do not fit


def test_accel_explore_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(explore, "fit", _formula_fit([]))
    model = tmp_path / "tiny.onnx"
    model.write_bytes(tiny_cnn(size=8).SerializeToString())
    samples = tmp_path / "calibration.npz"
    np.savez(samples, input=np.stack([sample["input"] for sample in CALIBRATION]))
    status = cli_main(["accel", "explore", str(model), "--gemm", "8x8,16x16",
                       "--clock-mhz", "100,150", "--calibrate", str(samples),
                       "-o", str(tmp_path / "out")])
    assert status == 0
    out = capsys.readouterr().out
    assert "4 configurations" in out and "pareto_lut.svg" in out
    assert len(json.loads((tmp_path / "out" / "explore.json").read_text())["points"]) == 4
