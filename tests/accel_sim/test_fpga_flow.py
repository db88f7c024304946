"""FPGA fit checks (report parsing, utilization, the cache) and the generated
Vivado/PYNQ build files, checked against the config and part they were made for.
Nothing here runs Yosys or Vivado (tests/hw/test_synthesis.py runs Yosys)."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from heterocc.accel_sim import HardwareConfig
from heterocc.accel_sim.cli import main as accel_main
from heterocc.accel_sim.fpga_fit import (
    PARTS,
    Fit,
    Resources,
    Synthesis,
    fit,
    parse_stat,
    synthesis_key,
)
from heterocc.accel_sim.rtl_header import rtl_sources
from heterocc.accel_sim.vivado import IP_NAME, top_ports, write_vivado_project
from heterocc.errors import AcceleratorError

STAT = "\n".join([
    "   Number of cells:  10",
    "     CARRY4                        5",
    "     DSP48E1                       3",
    "     FDRE                         20",
    "     FDSE                          2",
    "     LUT6                          7",
    "     LUT2                          1",
    "     RAMB36E1                      4",
    "     RAMB18E1                      3",
    "     RAM64M                        2",
    "     SRLC32E                       1",
])


def test_parse_stat_counts_resource_classes():
    r = parse_stat(STAT)
    # distributed RAM and shift registers sit in LUTs: 2 RAM64M x 4 + 1 SRL
    assert (r.lutram, r.lut) == (9, 8 + 9)
    assert (r.ff, r.dsp, r.carry) == (22, 3, 5)
    assert r.bram36 == 4 + 3 / 2
    ultrascale = parse_stat(STAT.replace("E1 ", "E2 ").replace("CARRY4 ", "CARRY8 "))
    assert (ultrascale.dsp, ultrascale.bram36, ultrascale.carry) == (3, 5.5, 5)


def _synthesis(**counts) -> Synthesis:
    values = {"lut": 1000, "lutram": 0, "ff": 1000, "dsp": 10, "bram36": 10.0, "carry": 0}
    return Synthesis("c", "xc7", Resources(**{**values, **counts}), "k", 1.0, cached=False)


def test_fit_sets_each_resource_against_the_part_and_the_limit():
    part = PARTS["xc7z020"]
    inside = Fit(part, _synthesis(dsp=176, bram36=112), 0.8)  # exactly 80% of both
    assert inside.fits and inside.utilization["DSP"] == pytest.approx(0.8)
    over = Fit(part, _synthesis(dsp=177, bram36=113), 0.8)
    assert not over.fits and over.over == ["DSP", "BRAM"]
    assert "OVER 80%" in over.table() and "does not fit (DSP, BRAM)" in over.table()
    assert json.loads(json.dumps(over.to_dict()))["utilization"]["DSP"] == round(177 / 220, 4)


def test_synthesis_is_cached_by_rtl_hash(tmp_path, monkeypatch):
    """A result saved under a config's key is returned without running Yosys; another
    config, or another family, has another key."""
    pytest.importorskip("shutil").which("yosys") or pytest.fail("yosys is missing")
    config = HardwareConfig.preset("pynq-z2")
    key = synthesis_key(config, "xc7")
    assert key != synthesis_key(HardwareConfig(), "xc7")
    assert key != synthesis_key(config, "xcup")
    counts = {"lut": 30000, "lutram": 100, "ff": 20000, "dsp": 129, "bram36": 96.0,
              "carry": 10}
    (tmp_path / key).mkdir()
    (tmp_path / key / "resources.json").write_text(json.dumps(
        {"resources": counts, "seconds": 600.0}))
    monkeypatch.setattr("subprocess.run", _no_yosys_run(monkeypatch))
    result = fit(config, "xc7z020", cache=tmp_path)
    assert result.synthesis.cached and result.synthesis.resources.dsp == 129
    assert result.fits


def _no_yosys_run(monkeypatch):
    import subprocess

    real = subprocess.run

    def run(command, *args, **kwargs):
        assert command[:2] == ["yosys", "-V"], f"synthesis ran: {command}"
        return real(command, *args, **kwargs)
    return run


def test_unknown_parts_and_limits_are_refused():
    with pytest.raises(AcceleratorError, match="xc7z020"):
        fit(HardwareConfig(), "xc7a35t")
    with pytest.raises(AcceleratorError, match="limit"):
        fit(HardwareConfig(), "xc7z020", limit=1.5)


@pytest.mark.parametrize("part_name", sorted(PARTS))
def test_vivado_files_follow_the_config_and_part(tmp_path, part_name):
    config = dataclasses.replace(HardwareConfig.preset("pynq-z2"), clock_mhz=125)
    part = PARTS[part_name]
    files = write_vivado_project(config, part_name, tmp_path)
    assert {f.name for f in files} >= {"create_project.tcl", "build_bitstream.tcl",
                                       "ooc_timing.tcl", "hc_timing.xdc", "hc_pynq_top.v",
                                       "hc_config.json", "hc_config.vh"}
    project = (tmp_path / "create_project.tcl").read_text()
    assert f"-part {part.vivado_part}" in project
    for source in rtl_sources():  # every RTL source is in the project and copied
        assert f"rtl/{source.name}" in project
        assert (tmp_path / "rtl" / source.name).read_text() == source.read_text()
    assert f"-reference hc_pynq_top {IP_NAME}" in project
    if part.family == "xc7":
        assert "CONFIG.PCW_FPGA0_PERIPHERAL_FREQMHZ {125}" in project
        assert "processing_system7" in project and "ps/IRQ_F2P" in project
    else:
        assert "CONFIG.PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ {125}" in project
        assert "zynq_ultra_ps_e" in project and "ps/pl_ps_irq0" in project
    # the clock constraint: 125 MHz is an 8 ns period
    xdc = (tmp_path / "hc_timing.xdc").read_text()
    assert re.search(r"create_clock -name hc_clk -period 8\.000 \[get_ports clk\]", xdc)
    assert f"-part {part.vivado_part}" in (tmp_path / "ooc_timing.tcl").read_text()
    bitstream = (tmp_path / "build_bitstream.tcl").read_text()
    assert "hc.bit" in bitstream and "hc.hwh" in bitstream and "timing not met at 125 MHz" \
        in bitstream
    assert HardwareConfig.load_json(tmp_path / "hc_config.json") == config
    assert (tmp_path / "rtl" / "hc_config.vh").read_text().count(config.name) >= 1


def test_vivado_wrapper_declares_every_top_port_with_its_interface(tmp_path):
    config = dataclasses.replace(HardwareConfig(bus_width_bits=128), clock_mhz=150)
    write_vivado_project(config, "xczu3eg", tmp_path)
    wrapper = (tmp_path / "hc_pynq_top.v").read_text()
    ports = top_ports()
    assert {p.name for p in ports} >= {"clk", "rst", "irq", "s_axil_awaddr", "m_axi_rdata"}
    for port in ports:
        assert re.search(rf"{port.direction} wire (\[[^\]]+\] )?{port.name}\b", wrapper)
        assert f".{port.name}({port.name})" in wrapper
    assert "FREQ_HZ 150000000" in wrapper and "POLARITY ACTIVE_HIGH" in wrapper
    assert "PROTOCOL AXI4LITE" in wrapper and "DATA_WIDTH 128" in wrapper
    assert '"xilinx.com:interface:aximm:1.0 m_axi RDATA"' in wrapper


def test_accel_vivado_command_writes_the_folder(tmp_path, capsys):
    assert accel_main(["vivado", "--preset", "pynq-z2", "--clock-mhz", "50",
                       "-o", str(tmp_path)]) == 0
    assert "at 50 MHz on xc7z020clg400-1" in capsys.readouterr().out
    assert "-period 20.000" in (tmp_path / "hc_timing.xdc").read_text()
    with pytest.raises(SystemExit):  # argparse names the known parts
        accel_main(["vivado", "--part", "nope", "-o", str(tmp_path)])
    assert "xc7z020" in capsys.readouterr().err


def test_accel_fit_command_reads_the_cache(tmp_path, monkeypatch, capsys):
    """``heterocc accel fit``: exit 0 when the config fits, 1 when it does not."""
    monkeypatch.setenv("HETEROCC_CACHE_DIR", str(tmp_path))
    config = HardwareConfig.preset("pynq-z2")
    folder = tmp_path / "synthesis" / synthesis_key(config, "xc7")
    folder.mkdir(parents=True)
    counts = {"lut": 30000, "lutram": 100, "ff": 20000, "dsp": 129, "bram36": 96.0,
              "carry": 10}
    (folder / "resources.json").write_text(json.dumps({"resources": counts, "seconds": 1.0}))
    assert accel_main(["fit", "--preset", "pynq-z2", "--part", "xc7z020", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["fits"] and report["cached"] and report["resources"]["dsp"] == 129
    assert accel_main(["fit", "--preset", "pynq-z2", "--limit", "0.5"]) == 1
    assert "does not fit (LUT, DSP, BRAM)" in capsys.readouterr().out
