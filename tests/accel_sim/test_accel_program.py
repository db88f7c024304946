"""The program builder: DRAM placement, tensor packing and its input checks."""

from __future__ import annotations

import numpy as np
import pytest

from heterocc.accel_sim.config import HardwareConfig
from heterocc.accel_sim.isa import Buffer, MicroOp
from heterocc.accel_sim.program import ProgramBuilder, read_tensor, tensor_matrix
from heterocc.errors import AcceleratorError


def test_tensors_are_tile_aligned_and_read_back():
    config = HardwareConfig()
    builder = ProgramBuilder(config)
    kernel = builder.uops("k", [MicroOp(1, 2, 3)])
    weights = np.arange(16 * 32).reshape(16, 32).astype(np.int8)
    w = builder.tensor("W", Buffer.WGT, data=weights)
    acc = builder.tensor("ACC", Buffer.ACC, data=np.full((2, 32), -7, np.int32))
    assert kernel.byte_address == 0 and kernel.rows == 1
    assert w.byte_address % config.wgt_tile_bytes == 0 and w.byte_address >= 4
    assert (w.grid_rows, w.grid_cols) == (1, 2) and w.tile(0, 1) == w.tile_base + 1
    program = builder.build()
    np.testing.assert_array_equal(program.read("W"), weights)
    np.testing.assert_array_equal(program.read("ACC"), np.full((2, 32), -7))
    assert program.read("ACC").dtype == np.int32
    assert acc.nbytes == 2 * 2 * config.acc_tile_bytes
    assert program.uops == [MicroOp(1, 2, 3)]


def test_builder_rejects_bad_tensors():
    builder = ProgramBuilder(HardwareConfig())
    with pytest.raises(AcceleratorError, match="does not split into 1x16 tiles"):
        builder.tensor("A", Buffer.INP, data=np.zeros((1, 17), np.int8))
    with pytest.raises(AcceleratorError, match="do not fit int8"):
        builder.tensor("B", Buffer.INP, data=np.full((1, 16), 300))
    builder.tensor("C", Buffer.OUT, shape=(1, 16))
    with pytest.raises(AcceleratorError, match="already defined"):
        builder.tensor("C", Buffer.OUT, shape=(1, 16))
    with pytest.raises(AcceleratorError, match="exactly one of data and shape"):
        builder.tensor("D", Buffer.OUT)
    c = builder.build().tensors["C"]
    with pytest.raises(AcceleratorError, match="outside tensor 'C'"):
        c.tile(1, 0)


@pytest.mark.parametrize("config", [HardwareConfig(), HardwareConfig(log_batch=1)],
                         ids=["batch1", "batch2"])
def test_a_tensors_own_bytes_read_as_its_matrix(config):
    """``tensor_matrix`` reads a tensor from its own bytes (a device's read), without a
    copy where one-row tiles are the matrix's rows; ``read_tensor`` always copies (the
    image changes under it)."""
    builder = ProgramBuilder(config)
    builder.tensor("pad", Buffer.INP, shape=(2, 16))
    matrix = np.arange(4 * 32).reshape(4, 32).astype(np.int8)
    tensor = builder.tensor("A", Buffer.INP, data=matrix)
    program = builder.build()
    raw = program.dram[tensor.byte_address:tensor.byte_address + tensor.nbytes].copy()
    viewed = tensor_matrix(config, tensor, raw)
    np.testing.assert_array_equal(viewed, matrix)
    assert np.shares_memory(viewed, raw) == (config.batch == 1)
    read = read_tensor(config, tensor, program.dram)
    np.testing.assert_array_equal(read, matrix)
    assert not np.shares_memory(read, program.dram)
