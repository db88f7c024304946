"""The accelerator's blocked layout of direct convolutions' tensors in DRAM: NCHW int8
rows of ``block_in`` (inputs) or ``block_out`` (outputs) channels, and back.

Both conversions are one strided copy of each element (a view of the source in the
target's order, copied once), into a fresh array or into ``out``: a kernel's per-thread
buffer (:class:`HostBuffers`) reused from call to call, so a call of a layer allocates
nothing for its inputs' layouts and the channel lanes a block pads stay zero from the
buffer's creation on.
"""

from __future__ import annotations

import threading

import numpy as np

from heterocc.accel_sim import HardwareConfig


class HostBuffers:
    """Arrays a kernel's host steps fill on every call (an input's blocked layout, an
    im2col matrix, a padded input), one set per thread, reused from call to call.

    Each buffer is made once per thread, key and shape, filled with ``fill`` (what its
    never-written parts hold: padding lanes, the zero point around an input), and handed
    out again on every later call of that thread. Such a buffer is written to the device
    within the call that filled it and never escapes it, so two threads running the same
    model never share one, and a thread's next call may overwrite it."""

    def __init__(self):
        self._local = threading.local()

    def get(self, key: object, shape: tuple[int, ...], dtype, fill: int = 0) -> np.ndarray:
        """The calling thread's buffer for ``key`` (made on first use, see the class)."""
        arrays = self._local.__dict__.setdefault("arrays", {})
        found = arrays.get(key)
        if found is None or found.shape != tuple(shape) or found.dtype != np.dtype(dtype):
            found = arrays[key] = np.full(shape, fill, dtype)
        return found


def to_blocked(x: np.ndarray, config: HardwareConfig,
               out: np.ndarray | None = None) -> np.ndarray:
    """An NCHW int8 tensor in the blocked layout of direct convolutions: rows of
    ``block_in`` channels, ordered (batch group, channel block, row, column, batch),
    channels zero-padded to whole blocks. ``out`` (rows x ``block_in`` int8, its
    padding lanes zero) receives it instead of a fresh array: only the tensor's own
    channels are written."""
    n, c, h, w = x.shape
    bi, batch = config.block_in, config.batch
    blocks, full = -(-c // bi), c // bi
    if out is None:
        out = np.zeros((n * blocks * h * w, bi), np.int8)
    tiles = out.reshape(n // batch, blocks, h, w, batch, bi)
    source = x.reshape(n // batch, batch, c, h, w)
    if full:
        tiles[:, :full] = source[:, :, :full * bi].reshape(
            n // batch, batch, full, bi, h, w).transpose(0, 2, 4, 5, 1, 3)
    if c > full * bi:  # the last block's own lanes (its padding lanes stay zero)
        tiles[:, full, :, :, :, :c - full * bi] = source[:, :, full * bi:].transpose(
            0, 3, 4, 1, 2)
    return out


def from_blocked(y: np.ndarray, shape: tuple[int, int, int, int],
                 config: HardwareConfig) -> np.ndarray:
    """The NCHW tensor of ``shape`` held by ``y``, rows of ``block_out`` channels in the
    blocked layout (the inverse of ``to_blocked`` for outputs): a fresh array, each
    element copied once, padding lanes left behind."""
    n, c, h, w = shape
    bo, batch = config.block_out, config.batch
    blocks, full = -(-c // bo), c // bo
    tiles = y.reshape(n // batch, blocks, h, w, batch, bo)
    out = np.empty(shape, y.dtype)
    target = out.reshape(n // batch, batch, c, h, w)
    if full:
        target[:, :, :full * bo].reshape(n // batch, batch, full, bo, h, w)[...] = \
            tiles[:, :full].transpose(0, 4, 1, 5, 2, 3)
    if c > full * bo:
        target[:, :, full * bo:] = tiles[:, full, :, :, :, :c - full * bo].transpose(
            0, 3, 4, 1, 2)
    return out


def blocked_input(config: HardwareConfig, broadcast_to: tuple[int, ...] | None = None):
    """The host step of one blocked input of a kernel: :func:`to_blocked` into that
    input's own per-thread buffer (:class:`HostBuffers`; one per input, since a call
    lays all its inputs out before it writes them). ``broadcast_to``: the shape the
    input is expanded to first (a squeeze-excite scale, N x C x 1 x 1), as a view."""
    buffers = HostBuffers()

    def to_device(x: np.ndarray) -> np.ndarray:
        if broadcast_to is not None:
            x = np.broadcast_to(x, broadcast_to)
        n, c, h, w = x.shape
        out = buffers.get(x.shape, (n * -(-c // config.block_in) * h * w, config.block_in),
                          np.int8)
        return to_blocked(x, config, out)

    return to_device
