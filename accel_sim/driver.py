"""The driver protocol every accelerator transport implements (simulator, RTL, FPGA),
and the host-side routine that runs a :class:`Program` through any of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

import numpy as np

from ..errors import AcceleratorError
from .config import HardwareConfig
from .encoding import INSTRUCTION_BYTES, decode_stream, encode_stream
from .isa import DmaInstruction, Instruction, dram_unit_bytes
from .program import DramTensor, Program
from .simulator import RunReport
from .validation import length_error

#: device buffers start on multiples of this many bytes, a multiple of every tile size.
DEVICE_ALIGNMENT = 4096


@dataclass(frozen=True)
class RunStatus:
    """What a transport reports when a stream completes.

    ``cycles`` is the cycle count (measured by the RTL or the board's counter,
    or modelled by the simulator); ``report`` is the simulator's full report.
    """

    cycles: int
    report: RunReport | None = None


@runtime_checkable
class AcceleratorDriver(Protocol):
    """Host view of one accelerator: a DRAM it shares, and a start/wait control port.

    Addresses are byte addresses in the device's DRAM. ``start`` hands the
    accelerator ``instruction_count`` 16-byte instruction words at
    ``instruction_address``; micro-ops are fetched by the stream's own LOAD UOP
    instructions. ``wait`` returns once FINISH completes.
    """

    config: HardwareConfig

    def allocate(self, nbytes: int, alignment: int = DEVICE_ALIGNMENT) -> int:
        """Reserve ``nbytes`` of device DRAM; returns its byte address."""
        ...

    def write(self, address: int, data: bytes | np.ndarray) -> None:
        """Copy host bytes into device DRAM."""
        ...

    def read(self, address: int, nbytes: int) -> np.ndarray:
        """Copy device DRAM bytes to the host (a uint8 array)."""
        ...

    def start(self, instruction_address: int, instruction_count: int) -> None:
        """Launch the stream at ``instruction_address``."""
        ...

    def wait(self, timeout_s: float | None = None) -> RunStatus:
        """Block until the stream finishes (or raise AcceleratorError on time-out)."""
        ...


class HostDram:
    """Device DRAM kept on the host: a bump allocator and bounds-checked copies,
    shared by the transports whose memory lives in this process."""

    def __init__(self, dram_bytes: int, label: str = "device"):
        self.dram = np.zeros(dram_bytes, dtype=np.uint8)
        self._next_free = 0
        self._label = label

    def allocate(self, nbytes: int, alignment: int = DEVICE_ALIGNMENT) -> int:
        """Reserve ``nbytes`` of DRAM (a bump allocator; nothing is ever freed)."""
        address = -(-self._next_free // alignment) * alignment
        if address + nbytes > self.dram.size:
            raise AcceleratorError(
                f"{self._label} DRAM exhausted: {nbytes} bytes requested at {address}, "
                f"{self.dram.size} bytes in all; create the device with more dram_bytes"
            )
        self._next_free = address + nbytes
        return address

    def _span(self, address: int, nbytes: int) -> slice:
        if address < 0 or nbytes < 0 or address + nbytes > self.dram.size:
            raise AcceleratorError(
                f"{self._label} DRAM access [{address}, {address + nbytes}) is outside "
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


def read_stream(driver: AcceleratorDriver, address: int, count: int) -> list[Instruction]:
    """Decode the ``count`` instructions at ``address`` of a device's DRAM (what a
    transport checks before it starts them); a count over the config's budget is
    refused before anything is read."""
    too_long = length_error(count, driver.config)
    if too_long is not None:
        raise too_long
    words = driver.read(address, INSTRUCTION_BYTES * count)
    return decode_stream(words.tobytes(), driver.config)


def relocate(
    instructions: list[Instruction], config: HardwareConfig, byte_offset: int
) -> list[Instruction]:
    """Shift every DMA's DRAM address by ``byte_offset`` (a multiple of each tile size)."""
    relocated = []
    for index, instruction in enumerate(instructions):
        if isinstance(instruction, DmaInstruction):
            unit = dram_unit_bytes(config, instruction.buffer)
            if byte_offset % unit:
                raise AcceleratorError(
                    f"instruction {index}: cannot move a {instruction.buffer.name} transfer by "
                    f"{byte_offset} bytes, not a multiple of its {unit}-byte tiles"
                )
            shifted = instruction.dram_base + byte_offset // unit
            instruction = replace(instruction, dram_base=shifted)
        relocated.append(instruction)
    return relocated


def relocate_tensors(
    instructions: list[Instruction], config: HardwareConfig, byte_offset: int,
    tensors: Mapping[str, DramTensor], moved: Mapping[str, int],
) -> list[Instruction]:
    """:func:`relocate`, except that every transfer of a tensor named in ``moved`` goes
    to that tensor's new byte address instead (a tensor kept elsewhere in the device's
    DRAM: another program's output that this one reads where it was written, so it
    never crosses the host link). A transfer must lie within one tensor of ``tensors``
    to be moved with it; the moved addresses must be multiples of the tiles' sizes."""
    spans = [(tensors[name], address) for name, address in moved.items()]
    relocated = []
    for index, instruction in enumerate(instructions):
        if isinstance(instruction, DmaInstruction):
            found = _moved_transfer(index, instruction, config, spans)
            if found is not None:
                relocated.append(replace(instruction, dram_base=found))
                continue
        relocated.extend(relocate([instruction], config, byte_offset))
    return relocated


def movable_tensor(instructions: list[Instruction], config: HardwareConfig,
                   tensor: DramTensor) -> bool:
    """Whether every transfer that starts in ``tensor`` lies within it (its tiles'
    size), so that :func:`relocate_tensors` can move the tensor elsewhere."""
    try:
        for index, instruction in enumerate(instructions):
            if isinstance(instruction, DmaInstruction):
                _moved_transfer(index, instruction, config, [(tensor, 0)])
    except AcceleratorError:
        return False
    return True


def _moved_transfer(index: int, instruction: DmaInstruction, config: HardwareConfig,
                    spans: list[tuple[DramTensor, int]]) -> int | None:
    """The new ``dram_base`` of a transfer into a moved tensor (None: in none)."""
    unit = dram_unit_bytes(config, instruction.buffer)
    start = instruction.dram_base * unit
    for tensor, address in spans:
        if not tensor.byte_address <= start < tensor.byte_address + tensor.nbytes:
            continue
        last = instruction.dram_base + max(0, (instruction.y_size - 1) * instruction.x_stride
                                           + instruction.x_size - 1)
        if tensor.unit_bytes != unit or (last + 1) * unit > tensor.byte_address + tensor.nbytes:
            raise AcceleratorError(
                f"instruction {index}: its {instruction.buffer.name} transfer of tiles "
                f"{instruction.dram_base}..{last} does not lie within tensor "
                f"{tensor.name!r} in its {tensor.unit_bytes}-byte tiles, so it cannot move "
                "with it; keep the tensor in the program's image")
        target = address + start - tensor.byte_address
        if target % unit:
            raise AcceleratorError(
                f"instruction {index}: tensor {tensor.name!r} moved to byte {address}, not "
                f"a multiple of its {unit}-byte tiles")
        return target // unit
    return None


def execute_program(
    driver: AcceleratorDriver, program: Program, timeout_s: float | None = None
) -> RunStatus:
    """Run ``program`` on a device and copy the device's DRAM image back into it."""
    if driver.config.name != program.config.name:
        raise AcceleratorError(
            f"the program was built for {program.config.name} but the device is "
            f"{driver.config.name}"
        )
    base = driver.allocate(program.dram.size)
    driver.write(base, program.dram)
    stream = encode_stream(relocate(program.instructions, program.config, base), program.config)
    stream_address = driver.allocate(len(stream))
    driver.write(stream_address, stream)
    driver.start(stream_address, len(program.instructions))
    status = driver.wait(timeout_s)
    program.dram[...] = driver.read(base, program.dram.size)
    return status
