"""Run a stream end to end: check it, time it, execute it bit-exactly."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .checker import check_stream
from .config import HardwareConfig
from .functional import FunctionalSimulator
from .isa import Instruction
from .timing import TimingReport, schedule_stream


@dataclass(frozen=True)
class RunReport:
    """What one run produced: its timing and the work it did (DRAM is updated in place)."""

    timing: TimingReport
    macs: int
    instructions: int

    def summary(self) -> str:
        """A short human-readable report."""
        return f"{self.instructions} instructions, {self.macs} MACs\n{self.timing.summary()}"


def run_stream(
    instructions: Sequence[Instruction],
    config: HardwareConfig,
    dram: np.ndarray,
    check: bool = True,
) -> RunReport:
    """Execute ``instructions`` against ``dram`` (a 1-D uint8 array, modified in place).

    The stream is checked first (``check=False`` skips the checker's stream rules,
    for streams already checked; every instruction is still validated by the timing
    model and the simulator before it runs, so no stream reads or writes outside
    ``dram`` or asks for more work than the config's budget). Instructions execute
    in the order the timing model issues them, which is the order the token
    protocol allows; a deadlocked stream raises
    DeadlockError naming each module's blocked instruction instead of hanging.
    """
    if check:
        check_stream(instructions, config, dram_bytes=dram.size)
    timing = schedule_stream(instructions, config)
    machine = FunctionalSimulator(config, dram)
    for index in timing.execution_order():
        machine.execute(instructions[index], index)
    return RunReport(timing=timing, macs=machine.macs, instructions=len(instructions))
