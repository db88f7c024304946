"""The accelerator as an SDK device: ``heterocc.sdk.ResidentDevice`` over any transport of
``heterocc.accel_sim`` (its simulator, the RTL under cocotb, an FPGA board: every
``AcceleratorDriver``).

Loading a program writes its whole DRAM image once (the packed weights, the epilogue's
constants, the micro-op kernels) and its instruction stream, relocated to where the image
landed; a call then writes only the activations (``copy_in``, a tensor of the program
by name), runs the stream and reads the output tensor (``copy_out``). The weights stay
on the device for as long as the model is loaded, so they cross the bus once.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass

import numpy as np

from heterocc.accel_sim import HardwareConfig, run_stream
from heterocc.accel_sim.device import SimulatorDevice
from heterocc.accel_sim.driver import AcceleratorDriver, relocate, relocate_tensors
from heterocc.accel_sim.encoding import encode_stream
from heterocc.accel_sim.program import Program, element_dtype, pack_tiles, tensor_matrix
from heterocc.accel_sim.simulator import RunReport
from heterocc.sdk import (
    AcceleratorError,
    DeviceCall,
    DeviceQueue,
    DeviceTiming,
    InputError,
    program_name,
)

#: device DRAM of the default (simulated) device: reserved, not touched, until used
SIMULATED_DRAM_BYTES = 1 << 30


@dataclass
class _Loaded:
    """A program resident on the device: where its image and its stream are, and where
    each of its tensors is (in its image, or in a region's shared tensors)."""

    program: Program
    base: int
    stream_address: int
    instructions: list
    addresses: dict[str, int]


@dataclass(frozen=True, eq=False)
class SharedTensors:
    """Tensors a region's programs hand to each other in the device's DRAM (``nbytes``
    by name): a device allocates them once, on the first program linked to them, and
    keeps them while the model is loaded. A region's call holds the device from its
    first program to its last (``heterocc.sdk.device_lock``), so two calls never
    interleave their writes to them."""

    name: str
    nbytes: dict[str, int]


@dataclass(frozen=True, eq=False)
class LinkedProgram:
    """``program`` with some of its tensors (``links``: the program's tensor name ->
    a tensor of ``shared``) read and written where ``shared`` keeps them instead of in
    its own image: a producer's output and its consumer's input linked to one shared
    tensor pass from one program to the next without the host. Its stream is the
    program's, each transfer of a linked tensor pointed at the shared one when loaded
    (``accel_sim.driver.relocate_tensors``); its image (weights) is the program's,
    written once however many links it has."""

    program: Program
    shared: SharedTensors
    links: dict[str, str]

    @property
    def config(self) -> HardwareConfig:
        return self.program.config

    @property
    def tensors(self) -> dict:
        return self.program.tensors

    @property
    def dram(self) -> np.ndarray:
        return self.program.dram

    @property
    def instructions(self) -> list:
        return self.program.instructions


class VtaDevice:
    """The accelerator of ``config`` behind ``driver`` (by default a simulator with
    ``SIMULATED_DRAM_BYTES`` of DRAM), as an SDK ``ResidentDevice``; buffers are the
    program's DRAM tensors by name. ``last_report`` holds the simulator's report of the
    last run (None from a transport that reports cycles only).

    One device is one DRAM: ``lock`` (re-entrant) is what the SDK's kernels hold from a
    program's first ``copy_in`` to its last ``copy_out`` (``heterocc.sdk.device_lock``),
    so a model may run on it from several threads; ``load`` takes it too.

    It is an SDK ``AsyncDevice`` over every transport: ``submit`` starts a loaded
    program (the transport's ``start``: a board runs it from there, the RTL's stream is
    checked) and returns a handle at once; the run's completion (the simulator running
    the stream, the RTL simulating it, the board's status polled: the transport's
    ``wait``) goes on on the device's own thread, and ``wait`` returns its timing.
    ``timeout_s`` bounds a run (None: no limit): past it, ``wait`` raises
    AcceleratorError naming the program (a board's polling stops there too)."""

    #: whether a region may keep tensors in this device's DRAM between its programs
    #: (``LinkedProgram``; a device that replays each program on its own image says no)
    shares_tensors = True

    def __init__(self, config: HardwareConfig, driver: AcceleratorDriver | None = None,
                 name: str | None = None, timeout_s: float | None = None):
        self.config = config
        self.driver = driver if driver is not None else SimulatorDevice(config,
                                                                         SIMULATED_DRAM_BYTES)
        self.name = name or f"vta-{type(self.driver).__name__}"
        self.timeout_s = timeout_s
        self.last_report: RunReport | None = None
        self._loaded: dict[int, _Loaded] = {}
        #: a region's shared tensors' addresses, by id of its SharedTensors (kept too)
        self._shared: dict[int, tuple[SharedTensors, dict[str, int]]] = {}
        self.lock = threading.RLock()
        #: where runs complete (one at a time, as the transports hold one pending run)
        self._completions = DeviceQueue(self.name)
        self._in_flight: DeviceCall | None = None

    # -- the life cycle

    def load(self, program: Program) -> None:
        """Write ``program``'s image and relocated stream to the device (once)."""
        if id(program) in self._loaded:
            return
        with self.lock:  # two threads must not both place the same program
            if id(program) not in self._loaded:
                self._load(program)

    def _load(self, program: Program | LinkedProgram) -> None:
        if program.config.name != self.config.name:
            raise AcceleratorError(f"the program was built for {program.config.name} but the "
                                   f"device is {self.config.name}")
        if isinstance(program, LinkedProgram):
            # the image (weights) is the program's own, written once for both forms
            self.load(program.program)
            base = self._loaded[id(program.program)].base
            moved = {name: self._shared_address(program.shared, shared)
                     for name, shared in program.links.items()}
            instructions = relocate_tensors(program.instructions, program.config, base,
                                            program.tensors, moved)
        else:
            base = self.driver.allocate(program.dram.size)
            self.driver.write(base, program.dram)
            instructions = relocate(program.instructions, program.config, base)
            moved = {}
        stream = encode_stream(instructions, program.config)
        stream_address = self.driver.allocate(len(stream))
        self.driver.write(stream_address, stream)
        addresses = {name: base + tensor.byte_address
                     for name, tensor in program.tensors.items()}
        addresses.update(moved)
        self._loaded[id(program)] = _Loaded(program, base, stream_address, instructions,
                                            addresses)

    def _shared_address(self, shared: SharedTensors, name: str) -> int:
        """Where the device keeps tensor ``name`` of ``shared`` (allocated on first use)."""
        found = self._shared.get(id(shared))
        if found is None:
            found = self._shared[id(shared)] = (shared, {})
        addresses = found[1]
        if name not in addresses:
            if name not in shared.nbytes:
                raise AcceleratorError(f"region {shared.name!r} shares no tensor {name!r}; "
                                       f"it shares {', '.join(shared.nbytes)}")
            addresses[name] = self.driver.allocate(shared.nbytes[name])
        return addresses[name]

    def resident(self, program: Program, buffer: str) -> bool:
        """Every tensor of a loaded program stays where it is between runs."""
        return id(program) in self._loaded and buffer in program.tensors

    def reset(self) -> None:
        """Forget every loaded program (their DRAM is not reclaimed: the transports'
        allocators only grow)."""
        self._loaded.clear()
        self._shared.clear()

    def _entry(self, program: Program, buffer: str | None = None) -> _Loaded:
        entry = self._loaded.get(id(program))
        if entry is None:
            raise AcceleratorError("the program is not loaded on this device; load() it first")
        if buffer is not None and buffer not in program.tensors:
            raise InputError(f"the program has no tensor {buffer!r}; it has "
                             f"{', '.join(program.tensors)}")
        return entry

    # -- the data path

    def copy_in(self, program: Program, buffer: str, array: np.ndarray) -> None:
        """Lay ``array`` (the tensor's matrix) out as tensor ``buffer``'s tiles."""
        self.load(program)
        entry = self._entry(program, buffer)
        tensor = program.tensors[buffer]
        packed = pack_tiles(np.asarray(array, element_dtype(self.config, tensor.buffer)),
                            tensor.tile_rows, tensor.tile_cols)
        self.driver.write(entry.addresses[buffer], packed.reshape(-1).view(np.uint8))

    def submit(self, program: Program) -> DeviceCall:
        """Start the loaded ``program``; its handle (see the class). What a transport
        refuses at its start (a stream the checker rejects) is raised here; one program
        is in flight at a time."""
        entry = self._entry(program)
        if self._in_flight is not None and not self._in_flight.done():
            raise AcceleratorError(f"device {self.name}: program {self._in_flight.program} "
                                   "is still running; wait() for it before submitting "
                                   f"{program_name(program)}")
        if isinstance(self.driver, SimulatorDevice):
            # in process: run the decoded stream as loaded (checked when it was compiled)
            complete = functools.partial(self._simulate, entry)
        else:
            self.driver.start(entry.stream_address, len(entry.instructions))
            complete = functools.partial(self._complete, self.timeout_s)
        self._in_flight = DeviceCall(self.name, program_name(program),
                                     self._completions.submit(complete))
        return self._in_flight

    def wait(self, call: DeviceCall, timeout_s: float | None = None) -> DeviceTiming:
        """The timing of a submitted run once it finished (within ``timeout_s``, else
        the device's ``timeout_s``): the cycles of the transport's counter (the
        simulator's timing model), its modules' busy cycles as the detail."""
        if call is not self._in_flight:
            raise AcceleratorError(f"device {self.name}: the handle of {call.program} is not "
                                   "the program in flight here; wait on each handle once, "
                                   "on the device that submitted it")
        timing = call.result(self.timeout_s if timeout_s is None else timeout_s)
        self._in_flight = None
        return timing

    def run(self, program: Program) -> DeviceTiming:
        """Run the loaded stream to FINISH: ``wait(submit(program))``."""
        return self.wait(self.submit(program))

    def _simulate(self, entry: _Loaded) -> DeviceTiming:
        report = run_stream(entry.instructions, self.config, self.driver.dram, check=False)
        return self._timing(report, report.timing.total_cycles)

    def _complete(self, timeout_s: float | None) -> DeviceTiming:
        status = self.driver.wait(timeout_s)
        return self._timing(status.report, status.cycles)

    def _timing(self, report: RunReport | None, cycles: int) -> DeviceTiming:
        self.last_report = report
        detail = {} if report is None else {
            f"{getattr(module, 'value', module)}_busy": timing.busy_cycles
            for module, timing in report.timing.modules.items()}
        return DeviceTiming(int(cycles), detail)

    def copy_out(self, program: Program, buffer: str) -> np.ndarray:
        """Tensor ``buffer``'s matrix."""
        entry = self._entry(program, buffer)
        tensor = program.tensors[buffer]
        # the transport's read is the one copy: the matrix is a view of it (batch-1
        # tiles are the matrix's rows)
        return tensor_matrix(self.config, tensor,
                             self.driver.read(entry.addresses[buffer], tensor.nbytes))

    def tensor_bytes(self, program: Program, buffer: str) -> np.ndarray:
        """Tensor ``buffer``'s bytes as the device holds them (its tiles, unconverted)."""
        entry = self._entry(program, buffer)
        tensor = program.tensors[buffer]
        return self.driver.read(entry.addresses[buffer], tensor.nbytes)

    def image(self, program: Program) -> np.ndarray:
        """The program's DRAM image as the device holds it now (what hardware in the
        loop replays on the RTL)."""
        entry = self._entry(program)
        return self.driver.read(entry.base, program.dram.size)
