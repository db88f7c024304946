"""The simulator as a device transport (it implements :class:`AcceleratorDriver`)."""

from __future__ import annotations

import numpy as np

from ..errors import AcceleratorError
from .config import HardwareConfig
from .driver import DEVICE_ALIGNMENT, RunStatus
from .encoding import INSTRUCTION_BYTES, decode_stream
from .simulator import RunReport, run_stream


class SimulatorDevice:
    """A simulated accelerator with its own DRAM (zero-filled lazily by the OS).

    ``start`` checks and runs the stream to completion at once; ``wait`` returns
    its status.
    """

    def __init__(self, config: HardwareConfig, dram_bytes: int = 64 << 20):
        self.config = config
        self.dram = np.zeros(dram_bytes, dtype=np.uint8)
        self._next_free = 0
        self._last: RunReport | None = None

    def allocate(self, nbytes: int, alignment: int = DEVICE_ALIGNMENT) -> int:
        """Reserve ``nbytes`` of DRAM (a bump allocator; nothing is ever freed)."""
        address = -(-self._next_free // alignment) * alignment
        if address + nbytes > self.dram.size:
            raise AcceleratorError(
                f"device DRAM exhausted: {nbytes} bytes requested at {address}, "
                f"{self.dram.size} bytes in all; create the device with more dram_bytes"
            )
        self._next_free = address + nbytes
        return address

    def _span(self, address: int, nbytes: int) -> slice:
        if address < 0 or nbytes < 0 or address + nbytes > self.dram.size:
            raise AcceleratorError(
                f"device DRAM access [{address}, {address + nbytes}) is outside "
                f"[0, {self.dram.size})"
            )
        return slice(address, address + nbytes)

    def write(self, address: int, data: bytes | np.ndarray) -> None:
        """Copy bytes into DRAM."""
        raw = np.frombuffer(data, np.uint8) if isinstance(data, bytes) else data.view(np.uint8)
        self.dram[self._span(address, raw.size)] = raw.ravel()

    def read(self, address: int, nbytes: int) -> np.ndarray:
        """Copy bytes out of DRAM."""
        return self.dram[self._span(address, nbytes)].copy()

    def start(self, instruction_address: int, instruction_count: int) -> None:
        """Decode the stream from DRAM, check it and run it."""
        words = self.dram[self._span(instruction_address, instruction_count * INSTRUCTION_BYTES)]
        instructions = decode_stream(words.tobytes(), self.config)
        self._last = run_stream(instructions, self.config, self.dram)

    def wait(self, timeout_s: float | None = None) -> RunStatus:
        """The status of the stream ``start`` ran (the time-out never elapses here)."""
        if self._last is None:
            raise AcceleratorError("wait() without a preceding start()")
        report, self._last = self._last, None
        return RunStatus(cycles=report.timing.total_cycles, report=report)
