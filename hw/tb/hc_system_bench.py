"""Full-system cocotb bench of the accelerator (top level ``hc_top``).

It plays the host and the memory: cocotbext-axi's ``AxiRam`` is the DRAM on the
AXI4 master port and an ``AxiLiteMaster`` drives the control port through the
driver protocol (instruction address and count, start, poll STATUS, read the
cycle counter). What to run comes from the JSON job file named by the
``HC_RTL_JOB`` environment variable, written by
``heterocc.accel_sim.rtl_device.RtlSimulator``: a list of runs, each a DRAM image
(``.npy`` of uint8), the stream's address and length, and a cycle budget. For
each run it writes the DRAM image after the run and the register readings to
the run's result file; the comparison with the simulator happens in pytest.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam

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
POLL_INTERVAL_CYCLES = 32


async def _reset(dut) -> None:
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await RisingEdge(dut.clk)


async def _run_one(dut, ram: AxiRam, control: AxiLiteMaster, run: dict) -> dict:
    # a reset between runs: a run that never finished must not leave the next one busy
    await _reset(dut)
    image = np.load(run["image"])
    ram.write(0, image.tobytes())
    await control.write_dword(REG_INSN_ADDR, run["insn_addr"])
    await control.write_dword(REG_INSN_COUNT, run["insn_count"])
    began_wall = time.perf_counter()
    await control.write_dword(REG_CONTROL, 1)
    waited = 0
    status = 0
    while waited < run["max_cycles"]:
        await ClockCycles(dut.clk, POLL_INTERVAL_CYCLES)
        waited += POLL_INTERVAL_CYCLES
        status = await control.read_dword(REG_STATUS)
        if status & STATUS_DONE:
            break
    wall = time.perf_counter() - began_wall
    cycles = await control.read_dword(REG_CYCLES_LO)
    cycles |= (await control.read_dword(REG_CYCLES_HI)) << 32
    retired = await control.read_dword(REG_RETIRED)
    np.save(run["result_image"], np.frombuffer(ram.read(0, image.size), np.uint8))
    return {
        "done": bool(status & STATUS_DONE),
        "bus_error": bool(status & STATUS_ERROR),
        "cycles": cycles,
        "retired": retired,
        "simulated_cycles": waited,
        "wall_seconds": wall,
    }


@cocotb.test()
async def run_job(dut):
    """Run every stream of the job file and record DRAM and registers after each."""
    job = json.loads(Path(os.environ["HC_RTL_JOB"]).read_text())
    Clock(dut.clk, 10, unit="ns").start()
    # per-transaction logging of the bus models would dominate the log and the run time
    logging.getLogger(f"cocotb.{dut._name}").setLevel(logging.WARNING)
    ram = AxiRam(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst, size=job["ram_bytes"])
    control = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
    await _reset(dut)
    config_id = await control.read_dword(REG_CONFIG_ID)
    assert config_id == job["config_id"], (
        f"the RTL was built for config ID {config_id:#010x}, the job expects "
        f"{job['config_id']:#010x}; rebuild the RTL for this HardwareConfig"
    )
    results = []
    for run in job["runs"]:
        ram.write(0, bytes(job["ram_bytes"]))
        results.append(await _run_one(dut, ram, control, run))
    Path(job["results"]).write_text(json.dumps(results, indent=1))
