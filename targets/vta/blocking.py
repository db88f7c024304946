"""The accelerator's blocked layout of direct convolutions' tensors in DRAM: NCHW int8
rows of ``block_in`` (inputs) or ``block_out`` (outputs) channels, and back."""

from __future__ import annotations

import numpy as np

from heterocc.accel_sim import HardwareConfig


def to_blocked(x: np.ndarray, config: HardwareConfig) -> np.ndarray:
    """An NCHW int8 tensor in the blocked layout of direct convolutions: rows of
    ``block_in`` channels, ordered (batch group, channel block, row, column, batch),
    channels zero-padded to whole blocks."""
    n, c, h, w = x.shape
    bi, batch = config.block_in, config.batch
    blocks = -(-c // bi)
    padded = np.zeros((n, blocks * bi, h, w), np.int8)
    padded[:, :c] = x
    return padded.reshape(n // batch, batch, blocks, bi, h, w).transpose(
        0, 2, 4, 5, 1, 3).reshape(-1, bi)


def from_blocked(y: np.ndarray, shape: tuple[int, int, int, int],
                 config: HardwareConfig) -> np.ndarray:
    """The NCHW tensor of ``shape`` held by ``y``, rows of ``block_out`` channels in the
    blocked layout (the inverse of ``to_blocked`` for outputs)."""
    n, c, h, w = shape
    bo, batch = config.block_out, config.batch
    blocks = -(-c // bo)
    tiles = y.reshape(n // batch, blocks, h, w, batch, bo)
    return np.ascontiguousarray(tiles.transpose(0, 4, 1, 5, 2, 3).reshape(
        n, blocks * bo, h, w)[:, :c])
