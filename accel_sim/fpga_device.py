"""The accelerator on an FPGA board through PYNQ: the same driver protocol as the
simulator and the RTL transports, over the RTL's AXI4-Lite register map.

:class:`FpgaDevice` needs two things a PYNQ overlay provides: an MMIO object for
the control port (``read(offset)``, ``write(offset, value)``) and an allocator of
physically contiguous buffers (``pynq.allocate``: arrays with
``physical_address``, ``flush()`` and ``invalidate()``). :func:`open_pynq_device`
builds one from a bitstream; tests pass stand-ins that forward to the RTL.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..errors import AcceleratorError, IllegalInstructionError
from .checker import check_stream
from .config import HardwareConfig
from .driver import DEVICE_ALIGNMENT, RunStatus, read_stream
from .isa import DmaInstruction, Instruction
from .rtl_device import (
    CONTROL_START,
    REG_CONFIG_ID,
    REG_CONTROL,
    REG_CYCLES_HI,
    REG_CYCLES_LO,
    REG_INSN_ADDR,
    REG_INSN_COUNT,
    REG_RETIRED,
    REG_STATUS,
    STATUS_DONE,
    STATUS_ERROR,
)
from .rtl_header import config_id
from .validation import dma_dram_span


class Mmio(Protocol):
    """The part of ``pynq.MMIO`` the driver uses."""

    def read(self, offset: int) -> int:
        """Read a 32-bit register."""
        ...

    def write(self, offset: int, value: int) -> None:
        """Write a 32-bit register."""
        ...


#: ``pynq.allocate``-like: (shape, dtype) -> contiguous array with physical_address.
Allocator = Callable[..., Any]


@dataclass(frozen=True)
class _Region:
    address: int
    nbytes: int
    buffer: Any
    offset: int


class FpgaDevice:
    """An accelerator bitstream on a PYNQ board as an :class:`AcceleratorDriver`.

    Device addresses are physical addresses: the accelerator's AXI master reads
    and writes host memory directly, so every buffer comes from ``allocate``
    (contiguous, cache-flushed around each transfer).
    """

    def __init__(
        self,
        config: HardwareConfig,
        mmio: Mmio,
        allocate: Allocator,
        poll_interval_s: float = 1e-4,
    ):
        self.config = config
        self.mmio = mmio
        self._allocate = allocate
        self.poll_interval_s = poll_interval_s
        self._regions: list[_Region] = []
        built_for = mmio.read(REG_CONFIG_ID)
        if built_for != config_id(config):
            raise AcceleratorError(
                f"the bitstream was built for config ID {built_for:#010x}, not for "
                f"{config.name} ({config_id(config):#010x}); load the matching bitstream"
            )

    def allocate(self, nbytes: int, alignment: int = DEVICE_ALIGNMENT) -> int:
        """A contiguous buffer of ``nbytes``; returns its (aligned) physical address."""
        buffer = self._allocate(shape=(nbytes + alignment,), dtype=np.uint8)
        physical = int(buffer.physical_address)
        address = -(-physical // alignment) * alignment
        if address + nbytes >= 1 << 32:
            raise AcceleratorError(
                f"buffer at {address:#x} lies beyond the accelerator's 32-bit address space"
            )
        self._regions.append(_Region(address, nbytes, buffer, address - physical))
        return address

    def _region(self, address: int, nbytes: int) -> tuple[_Region, slice]:
        for region in self._regions:
            if region.address <= address and address + nbytes <= region.address + region.nbytes:
                start = region.offset + address - region.address
                return region, slice(start, start + nbytes)
        raise AcceleratorError(
            f"device access [{address:#x}, {address + nbytes:#x}) is not inside one buffer "
            "from allocate()"
        )

    def _require_confined(self, instructions: list[Instruction]) -> None:
        """Refuse a DMA whose DRAM bytes are not all inside one allocated buffer."""
        for index, instruction in enumerate(instructions):
            if not isinstance(instruction, DmaInstruction):
                continue
            first, end = dma_dram_span(instruction, self.config)
            if first == end or any(region.address <= first and end <= region.address
                                   + region.nbytes for region in self._regions):
                continue
            raise IllegalInstructionError(
                f"{type(instruction).__name__.upper()} {instruction.buffer.name} touches "
                f"physical bytes [{first:#x}, {end:#x}), which no buffer from allocate() "
                "holds whole; the accelerator may only reach the host's own buffers",
                index, field="dram_base+(y_size-1)*x_stride+x_size",
            )

    def write(self, address: int, data: bytes | np.ndarray) -> None:
        """Copy host bytes into a device buffer and flush them to memory."""
        raw = np.frombuffer(data, np.uint8) if isinstance(data, bytes) else data.view(np.uint8)
        region, span = self._region(address, raw.size)
        region.buffer[span] = raw.ravel()
        region.buffer.flush()

    def read(self, address: int, nbytes: int) -> np.ndarray:
        """Copy device bytes to the host (after invalidating the cache)."""
        region, span = self._region(address, nbytes)
        region.buffer.invalidate()
        return np.array(region.buffer[span], dtype=np.uint8)

    def start(self, instruction_address: int, instruction_count: int) -> None:
        """Check the stream, then program its address and length and start the accelerator.

        The accelerator's DMA reaches any physical address, so the host refuses
        (IllegalInstructionError, DeadlockError) a stream the checker refuses, and
        one whose DMA touches memory outside the buffers from :meth:`allocate`.
        """
        if instruction_address % 16:
            raise AcceleratorError(
                f"instruction address {instruction_address:#x} is not 16-byte aligned"
            )
        instructions = read_stream(self, instruction_address, instruction_count)
        check_stream(instructions, self.config, dram_bytes=1 << 32)
        self._require_confined(instructions)
        self.mmio.write(REG_INSN_ADDR, instruction_address)
        self.mmio.write(REG_INSN_COUNT, instruction_count)
        self.mmio.write(REG_CONTROL, CONTROL_START)

    def wait(self, timeout_s: float | None = None) -> RunStatus:
        """Poll STATUS until done; raises AcceleratorError on a bus error or time-out."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            status = self.mmio.read(REG_STATUS)
            if status & STATUS_ERROR:
                raise AcceleratorError(
                    "the accelerator got an AXI error response: a DMA address is outside "
                    "the memory the board maps"
                )
            if status & STATUS_DONE:
                break
            if deadline is not None and time.monotonic() > deadline:
                retired = self.mmio.read(REG_RETIRED)
                raise AcceleratorError(
                    f"the accelerator did not finish within {timeout_s} s; {retired} "
                    "instructions completed (a deadlock in the stream, or a longer run)"
                )
            time.sleep(self.poll_interval_s)
        cycles = self.mmio.read(REG_CYCLES_LO) | (self.mmio.read(REG_CYCLES_HI) << 32)
        return RunStatus(cycles=cycles)


def open_pynq_device(
    config: HardwareConfig, bitstream: str, ip_name: str = "hc_top_0"
) -> FpgaDevice:
    """Load ``bitstream`` with PYNQ and return the accelerator in it as a device."""
    try:
        import pynq
    except ImportError as exc:
        raise AcceleratorError(
            "the FPGA transport needs PYNQ (pip install pynq) on the board"
        ) from exc
    overlay = pynq.Overlay(bitstream)
    if ip_name not in overlay.ip_dict:
        raise AcceleratorError(
            f"no IP {ip_name!r} in {bitstream}; the overlay has {sorted(overlay.ip_dict)}"
        )
    ip = overlay.ip_dict[ip_name]
    return FpgaDevice(config, pynq.MMIO(ip["phys_addr"], ip["addr_range"]), pynq.allocate)
