"""The accelerator's ISA (encode/decode) and its functional and timing simulator.

``docs/isa.md`` is the reference. The main entry points:

- :class:`HardwareConfig` fixes shapes, data types, buffer sizes and timing;
- the instruction records (:class:`Load`, :class:`Store`, :class:`Gemm`,
  :class:`Alu`, :class:`Finish`, :class:`MicroOp`) and their encoding;
- :func:`check_stream`, :func:`schedule_stream` and :func:`run_stream`;
- :class:`ProgramBuilder` for hand-written programs;
- :class:`SimulatorDevice`, one transport of the :class:`AcceleratorDriver` protocol.
"""

from .checker import check_stream, find_stream_errors
from .config import HardwareConfig
from .device import SimulatorDevice
from .driver import AcceleratorDriver, RunStatus, execute_program
from .encoding import (
    decode_instruction,
    decode_stream,
    decode_uops,
    disassemble,
    encode_instruction,
    encode_stream,
    encode_uops,
    read_stream_file,
    write_stream_file,
)
from .functional import FunctionalSimulator
from .isa import (
    Alu,
    AluOp,
    Buffer,
    Finish,
    Gemm,
    Instruction,
    Load,
    MicroOp,
    Module,
    Opcode,
    Queue,
    Store,
    isa_layout,
    module_of,
)
from .program import DramTensor, Program, ProgramBuilder
from .simulator import RunReport, run_stream
from .timing import TimingReport, instruction_cost, schedule_stream

__all__ = [
    "AcceleratorDriver",
    "Alu",
    "AluOp",
    "Buffer",
    "DramTensor",
    "Finish",
    "FunctionalSimulator",
    "Gemm",
    "HardwareConfig",
    "Instruction",
    "Load",
    "MicroOp",
    "Module",
    "Opcode",
    "Program",
    "ProgramBuilder",
    "Queue",
    "RunReport",
    "RunStatus",
    "SimulatorDevice",
    "Store",
    "TimingReport",
    "check_stream",
    "decode_instruction",
    "decode_stream",
    "decode_uops",
    "disassemble",
    "encode_instruction",
    "encode_stream",
    "encode_uops",
    "execute_program",
    "find_stream_errors",
    "instruction_cost",
    "isa_layout",
    "module_of",
    "read_stream_file",
    "run_stream",
    "schedule_stream",
    "write_stream_file",
]
