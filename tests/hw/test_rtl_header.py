"""The generated Verilog header agrees with the ISA layout and the config."""

from __future__ import annotations

import re

import pytest

from heterocc.accel_sim import HardwareConfig, Opcode, isa_layout
from heterocc.accel_sim.rtl_header import (
    check_rtl_support,
    config_id,
    rtl_header_text,
    rtl_sources,
    write_rtl_header,
)
from heterocc.errors import AcceleratorError

PRESETS = ["1x8x8", "1x16x16", "1x32x32"]


def _defines(text: str) -> dict[str, str]:
    return dict(re.findall(r"^`define (\w+) (.+)$", text, flags=re.MULTILINE))


@pytest.mark.parametrize("preset", PRESETS)
def test_header_fields_match_the_isa_layout(preset):
    config = HardwareConfig.preset(preset)
    defines = _defines(rtl_header_text(config))
    layout = isa_layout(config)
    for prefix, opcode in (("DMA", Opcode.LOAD), ("GEMM", Opcode.GEMM), ("ALU", Opcode.ALU)):
        for field in layout.fields(opcode):
            assert int(defines[f"HC_{prefix}_{field.name.upper()}_LO"]) == field.offset
            assert int(defines[f"HC_{prefix}_{field.name.upper()}_W"]) == field.width
    for field in layout.uop:
        assert int(defines[f"HC_UOP_{field.name.upper()}_LO"]) == field.offset
    assert int(defines["HC_WGT_DEPTH"]) == config.wgt_depth
    assert int(defines["HC_ACC_TILE_BEATS"]) * config.bus_width_bits == config.acc_tile_bytes * 8
    assert defines["HC_CONFIG_ID"] == f"32'h{config_id(config):08x}"


def test_header_is_rewritten_only_when_it_changes(tmp_path):
    path = write_rtl_header(HardwareConfig(), tmp_path)
    stamp = path.stat().st_mtime_ns
    assert write_rtl_header(HardwareConfig(), tmp_path).stat().st_mtime_ns == stamp
    write_rtl_header(HardwareConfig.preset("1x8x8"), tmp_path)
    assert "1x8x8" in path.read_text()


def test_configs_the_rtl_cannot_build_are_refused():
    with pytest.raises(AcceleratorError, match="bus_width_bits must be at most 128"):
        check_rtl_support(HardwareConfig(bus_width_bits=256))
    with pytest.raises(AcceleratorError, match="power of two"):
        rtl_header_text(HardwareConfig(), command_queue_depth=48)


def test_config_ids_tell_configs_apart_and_sources_end_with_the_top_level():
    assert len({config_id(HardwareConfig.preset(p)) for p in PRESETS}) == len(PRESETS)
    sources = rtl_sources()
    assert sources[-1].name == "hc_top.v" and len(sources) > 10
