"""Full-system cocotb bench of the accelerator (top level ``hc_bench_top``).

The whole machine runs inside the HDL simulator: ``hc_bench_top`` (hw/tb) wraps
``hc_top`` with an AXI4 slave memory written in Verilog, which the bench loads and
dumps in bulk (``$readmemh`` / ``$writememh`` on the files named by the
``+hc_mem_in`` / ``+hc_mem_out`` plusargs). Python plays only the host: it drives the
AXI4-Lite control port as a driver drives the board (instruction address and
count, start, STATUS, the cycle counter), sleeps until the ``irq`` line rises, and
writes what it read back. No Python runs per clock cycle while a stream executes.

What to run comes from the JSON job file named by the ``HC_RTL_JOB`` environment
variable, written by ``heterocc.accel_sim.rtl_device.RtlSimulator``: the memory's
latency, and a list of runs, each a DRAM image (``.npy`` of
uint8), the stream's address and length, and a cycle budget. For each run it
writes the DRAM image after the run and the register readings to the run's result
file (and, when the job names a ``progress`` file, appends the readings to it as one
JSON line as soon as the run ends); the comparison with the simulator happens in the host.

A job with ``"queue"`` instead of ``"runs"`` is a session: the runs are not known in
advance (the next one's DRAM holds what the RTL wrote for the previous ones, after the
host's own steps in between). The bench waits (in wall time: no simulated time passes)
for ``run<i>.json`` in the queue folder, runs it, writes ``reading<i>.json``, and ends at
a run file that says ``{"end": true}`` or after ``idle_s`` seconds without one.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, First, ReadOnly, RisingEdge, Timer
from cocotb.utils import get_sim_time

# register map of hc_ctrl.v (the same offsets as heterocc.accel_sim.rtl_device)
REG_CONTROL = 0x00
REG_STATUS = 0x04
REG_INSN_ADDR = 0x08
REG_INSN_COUNT = 0x0C
REG_CYCLES_LO = 0x10
REG_CYCLES_HI = 0x14
REG_CONFIG_ID = 0x18
REG_RETIRED = 0x1C
STATUS_DONE = 1
STATUS_ERROR = 4
CLOCK_NS = 10


def write_hex_image(path: Path, image: np.ndarray, bus_bytes: int) -> int:
    """Write ``image`` as ``$readmemh`` text, one bus word per line (most significant
    byte first); returns the number of words (the image is zero-padded to a word)."""
    words = -(-image.size // bus_bytes)
    padded = np.zeros(words * bus_bytes, np.uint8)
    padded[: image.size] = image
    digits = np.frombuffer(padded.reshape(words, bus_bytes)[:, ::-1].tobytes().hex().encode(),
                           np.uint8).reshape(words, 2 * bus_bytes)
    lines = np.empty((words, 2 * bus_bytes + 1), np.uint8)
    lines[:, :-1] = digits
    lines[:, -1] = ord("\n")
    path.write_bytes(lines.tobytes())
    return words


def read_hex_image(path: Path, nbytes: int, bus_bytes: int) -> np.ndarray:
    """The first ``nbytes`` bytes of a ``$writememh`` dump (comment lines skipped)."""
    lines = (line.strip() for line in path.read_text().splitlines())
    words = [line for line in lines if line and not line.startswith(("//", "@"))]
    data = bytes.fromhex("".join(word.rjust(2 * bus_bytes, "0") for word in words))
    image = np.frombuffer(data, np.uint8).reshape(-1, bus_bytes)[:, ::-1].ravel()
    return image[:nbytes].copy()


class AxiLiteHost:
    """The host's side of the AXI4-Lite control port: one register access at a time.

    Each handshake is decided on values settled before a rising edge (``ReadOnly``)
    and completes at that edge, so the bench costs a few Python steps per access.
    """

    def __init__(self, dut):
        self.dut = dut
        self.clk = dut.clk
        for name in ("awvalid", "wvalid", "bready", "arvalid", "rready"):
            getattr(dut, f"s_axil_{name}").value = 0

    async def _handshake(self, valids: list, readies: list) -> None:
        pending = list(zip(valids, readies))
        while pending:
            await ReadOnly()
            taken = [pair for pair in pending if pair[1].value == 1]
            await RisingEdge(self.clk)
            for valid, _ in taken:
                valid.value = 0
            pending = [pair for pair in pending if pair not in taken]

    async def write(self, address: int, value: int) -> None:
        dut = self.dut
        dut.s_axil_awaddr.value = address
        dut.s_axil_wdata.value = value
        dut.s_axil_awvalid.value = 1
        dut.s_axil_wvalid.value = 1
        dut.s_axil_bready.value = 1
        await self._handshake([dut.s_axil_awvalid, dut.s_axil_wvalid],
                              [dut.s_axil_awready, dut.s_axil_wready])
        await self._handshake([dut.s_axil_bready], [dut.s_axil_bvalid])

    async def read(self, address: int) -> int:
        dut = self.dut
        dut.s_axil_araddr.value = address
        dut.s_axil_arvalid.value = 1
        await self._handshake([dut.s_axil_arvalid], [dut.s_axil_arready])
        dut.s_axil_rready.value = 1
        while True:
            await ReadOnly()
            if dut.s_axil_rvalid.value == 1:
                value = int(dut.s_axil_rdata.value)
                await RisingEdge(self.clk)
                dut.s_axil_rready.value = 0
                return value
            await RisingEdge(self.clk)


async def _reset(dut) -> None:
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


async def _pulse(dut, signal) -> None:
    signal.value = 1
    await RisingEdge(dut.clk)
    signal.value = 0
    await RisingEdge(dut.clk)


async def _run_one(dut, host: AxiLiteHost, run: dict, folder: Path, bus_bytes: int) -> dict:
    image = np.load(run["image"])
    dut.mem_words.value = write_hex_image(folder / "hc_mem_in.hex", image, bus_bytes)
    # a reset between runs: a run that never finished must not leave the next one busy
    dut.rst.value = 1
    await _pulse(dut, dut.mem_load)
    await _reset(dut)
    await host.write(REG_INSN_ADDR, run["insn_addr"])
    await host.write(REG_INSN_COUNT, run["insn_count"])
    began_wall = time.perf_counter()
    began = get_sim_time("ns")
    await host.write(REG_CONTROL, 1)
    if dut.irq.value != 1:
        # the simulator runs on its own until the stream finishes or the budget is spent
        await First(RisingEdge(dut.irq), Timer(run["max_cycles"] * CLOCK_NS, unit="ns"))
    await RisingEdge(dut.clk)
    simulated = round((get_sim_time("ns") - began) / CLOCK_NS)
    wall = time.perf_counter() - began_wall
    status = await host.read(REG_STATUS)
    cycles = await host.read(REG_CYCLES_LO)
    cycles |= (await host.read(REG_CYCLES_HI)) << 32
    retired = await host.read(REG_RETIRED)
    await _pulse(dut, dut.mem_dump)
    dram = read_hex_image(folder / "hc_mem_out.hex", image.size, bus_bytes)
    np.save(run["result_image"], dram)
    return {
        "done": bool(status & STATUS_DONE),
        "bus_error": bool(status & STATUS_ERROR),
        "cycles": cycles,
        "retired": retired,
        "simulated_cycles": simulated,
        "wall_seconds": wall,
    }


def _next_run(queue: Path, index: int, idle_s: float) -> dict | None:
    """The queue's run ``index`` once the host has written it (None: the session ended,
    or the host wrote nothing for ``idle_s`` seconds). The host renames a finished file
    into place, so a file that exists is whole."""
    path = queue / f"run{index}.json"
    deadline = time.monotonic() + idle_s
    while not path.exists():
        if time.monotonic() > deadline:
            return None
        time.sleep(0.002)
    run = json.loads(path.read_text())
    return None if run.get("end") else run


async def _serve_queue(dut, host: AxiLiteHost, job: dict, folder: Path) -> None:
    """Run the queue's runs one by one as the host writes them (see the module's
    docstring); each run's readings go to ``reading<i>.json`` once its DRAM is saved."""
    queue = Path(job["queue"])
    index = 0
    while (run := _next_run(queue, index, job.get("idle_s", 600.0))) is not None:
        reading = await _run_one(dut, host, run, folder, job["bus_bytes"])
        partial = queue / f"reading{index}.json.part"
        partial.write_text(json.dumps(reading))
        partial.rename(queue / f"reading{index}.json")
        index += 1


@cocotb.test()
async def run_job(dut):
    """Run every stream of the job file and record DRAM and registers after each."""
    job_path = Path(os.environ["HC_RTL_JOB"])
    job = json.loads(job_path.read_text())
    # the clock toggles in the simulator interface (C), not in a Python coroutine
    Clock(dut.clk, CLOCK_NS, unit="ns", impl="gpi").start()
    for name in ("mem_load", "mem_dump"):
        getattr(dut, name).value = 0
    dut.mem_words.value = 0
    dut.mem_read_latency.value = job["latency"]
    dut.mem_write_latency.value = job["latency"]
    host = AxiLiteHost(dut)
    await _reset(dut)
    config_id = await host.read(REG_CONFIG_ID)
    assert config_id == job["config_id"], (
        f"the RTL was built for config ID {config_id:#010x}, the job expects "
        f"{job['config_id']:#010x}; rebuild the RTL for this HardwareConfig"
    )
    if "queue" in job:
        await _serve_queue(dut, host, job, job_path.parent)
        return
    results = []
    progress = job.get("progress")
    for run in job["runs"]:
        results.append(await _run_one(dut, host, run, job_path.parent, job["bus_bytes"]))
        if progress:
            # one JSON line per finished run, so that the host can report as the batch goes
            with open(progress, "a") as lines:
                lines.write(json.dumps(results[-1]) + "\n")
    Path(job["results"]).write_text(json.dumps(results, indent=1))
