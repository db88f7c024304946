"""The simulator as a device transport (it implements :class:`AcceleratorDriver`)."""

from __future__ import annotations

from ..errors import AcceleratorError
from .config import HardwareConfig
from .driver import HostDram, RunStatus, read_stream
from .simulator import RunReport, run_stream


class SimulatorDevice(HostDram):
    """A simulated accelerator with its own DRAM (zero-filled lazily by the OS).

    ``start`` checks and runs the stream to completion at once; ``wait`` returns
    its status.
    """

    def __init__(self, config: HardwareConfig, dram_bytes: int = 64 << 20):
        super().__init__(dram_bytes, "device")
        self.config = config
        self._last: RunReport | None = None

    def start(self, instruction_address: int, instruction_count: int) -> None:
        """Decode the stream from DRAM, check it and run it."""
        instructions = read_stream(self, instruction_address, instruction_count)
        self._last = run_stream(instructions, self.config, self.dram)

    def wait(self, timeout_s: float | None = None) -> RunStatus:
        """The status of the stream ``start`` ran (the time-out never elapses here)."""
        if self._last is None:
            raise AcceleratorError("wait() without a preceding start()")
        report, self._last = self._last, None
        return RunStatus(cycles=report.timing.total_cycles, report=report)
