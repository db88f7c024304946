"""The host's blocked layout (``targets.vta.blocking``): one copy each way, per-thread
buffers."""

import threading

import numpy as np
import pytest

from heterocc.accel_sim import HardwareConfig
from heterocc.targets.vta.blocking import HostBuffers, blocked_input, from_blocked, to_blocked


def _blocked_reference(x: np.ndarray, config: HardwareConfig) -> np.ndarray:
    """Element by element: row (batch group, channel block, y, x, batch), lane."""
    n, c, h, w = x.shape
    bi, batch = config.block_in, config.batch
    blocks = -(-c // bi)
    out = np.zeros((n * blocks * h * w, bi), np.int8)
    for b in range(n):
        for ch in range(c):
            for y in range(h):
                for col in range(w):
                    row = (((b // batch * blocks + ch // bi) * h + y) * w + col) * batch \
                        + b % batch
                    out[row, ch % bi] = x[b, ch, y, col]
    return out


@pytest.mark.parametrize("config", [HardwareConfig(), HardwareConfig(log_batch=1),
                                    HardwareConfig.preset("1x32x32")],
                         ids=lambda c: c.name.split("_")[0])
@pytest.mark.parametrize("shape", [(2, 3, 3, 4), (2, 16, 2, 3), (2, 40, 2, 2)])
def test_blocked_layout_round_trips(config, shape):
    x = np.random.default_rng(sum(shape)).integers(-128, 128, shape).astype(np.int8)
    expected = _blocked_reference(x, config)
    np.testing.assert_array_equal(to_blocked(x, config), expected)
    # into a buffer: its padding lanes are left as they are (zero from its creation)
    buffer = np.zeros_like(expected)
    assert to_blocked(x, config, buffer) is buffer
    np.testing.assert_array_equal(buffer, expected)
    # an output of as many channels reads back as the tensor
    back = from_blocked(expected, shape, config)
    assert back.flags.c_contiguous and not np.shares_memory(back, expected)
    np.testing.assert_array_equal(back, x)


def test_blocked_input_reuses_its_buffer_per_thread_and_broadcasts():
    config = HardwareConfig()
    to_device = blocked_input(config)
    x = np.ones((1, 20, 2, 2), np.int8)
    first = to_device(x)
    assert to_device(x * 2) is first  # the same buffer, refilled
    np.testing.assert_array_equal(first, _blocked_reference(x * 2, config))
    seen = []
    thread = threading.Thread(target=lambda: seen.append(to_device(x)))
    thread.start()
    thread.join()
    assert seen[0] is not first  # another thread, another buffer
    scale = np.arange(20, dtype=np.int8).reshape(1, 20, 1, 1)
    np.testing.assert_array_equal(
        blocked_input(config, (1, 20, 2, 2))(scale),
        _blocked_reference(np.broadcast_to(scale, (1, 20, 2, 2)), config))


def test_host_buffers_fill_once_and_remake_on_a_new_shape():
    buffers = HostBuffers()
    a = buffers.get("k", (2, 3), np.int8, 5)
    assert (a == 5).all()
    a[:] = 1
    assert buffers.get("k", (2, 3), np.int8, 5) is a  # kept as written
    b = buffers.get("k", (3, 3), np.int8, 5)
    assert b.shape == (3, 3) and (b == 5).all()
