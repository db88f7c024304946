"""HardwareConfig: defaults, presets, names, JSON persistence, validation."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from heterocc.accel_sim.config import HardwareConfig
from heterocc.errors import AcceleratorError


def test_default_is_1x16x16_int8_with_specified_buffers():
    config = HardwareConfig()
    assert (config.batch, config.block_in, config.block_out) == (1, 16, 16)
    assert (config.inp_dtype, config.wgt_dtype, config.out_dtype) == (np.int8,) * 3
    assert config.acc_dtype == np.int32
    assert config.uop_depth == 32 * 1024 // 4
    assert config.inp_depth == 32 * 1024 // 16
    assert config.wgt_depth == 256 * 1024 // 256
    assert config.acc_depth == 128 * 1024 // 64
    assert config.name == "1x16x16_i8w8a32o8_15_15_18_17_b64q64"


@pytest.mark.parametrize("shape", ["1x8x8", "1x16x16", "1x32x32", "1x64x64"])
def test_presets_round_trip_through_name_and_json(shape, tmp_path):
    config = HardwareConfig.preset(shape)
    assert config.name.startswith(shape + "_")
    # the name pins what the encoding and semantics depend on; timing parameters (the
    # 64x64's 16-byte DRAM port) take their defaults, see test_name_leaves_timing_out
    rebuilt = HardwareConfig.from_name(config.name)
    assert rebuilt.name == config.name
    assert rebuilt == dataclasses.replace(config, dram_bytes_per_cycle=rebuilt.dram_bytes_per_cycle)
    path = tmp_path / "config.json"
    config.save_json(path)
    assert HardwareConfig.load_json(path) == config
    assert json.loads(path.read_text())["log_block_in"] == config.log_block_in


def test_name_leaves_timing_out():
    slow = HardwareConfig(dram_latency_cycles=500)
    assert slow.name == HardwareConfig().name
    assert HardwareConfig.from_name(slow.name).dram_latency_cycles == 64


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"inp_bits": 12}, "inp_bits=12: supported widths"),
        ({"log_acc_buffer_bytes": 3}, "acc buffer"),
        ({"token_queue_depth": 0}, "token_queue_depth must be at least 1"),
        ({"bus_width_bits": 48}, "bus_width_bits=48"),
        ({"log_batch": -1}, "log_batch must be >= 0"),
        ({"log_block_in": 2.5}, "log_block_in must be an integer"),
    ],
)
def test_invalid_configs_are_rejected(values, message):
    with pytest.raises(AcceleratorError, match=message):
        HardwareConfig(**values)


def test_bad_names_files_and_keys(tmp_path):
    with pytest.raises(AcceleratorError, match="not a hardware config name"):
        HardwareConfig.from_name("1x16")
    with pytest.raises(AcceleratorError, match="not a power of 2"):
        HardwareConfig.from_name("1x12x16_i8w8a32o8_15_15_18_17_b64q64")
    with pytest.raises(AcceleratorError, match="unknown hardware config key"):
        HardwareConfig.from_dict({"block_in": 16})
    path = tmp_path / "broken.json"
    path.write_text("{")
    with pytest.raises(AcceleratorError, match="cannot read hardware config"):
        HardwareConfig.load_json(path)
    with pytest.raises(AcceleratorError, match="no preset"):
        HardwareConfig.preset("2x16x16")
