"""Synthesize the accelerator with Yosys (synth_xilinx, 7-series) and report its
resources (LUT, FF, DSP, BRAM) for a HardwareConfig.

    python hw/synth/run_synth.py [--preset 1x16x16 | --config CONFIG.json] [--out DIR]

It generates the config header, runs hw/synth/synth_xilinx.tcl and writes
``resources.json`` and Yosys's ``stat`` report into the output folder (default
hw/build/synth_<config name>), then prints the summary.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from heterocc.accel_sim import HardwareConfig
from heterocc.accel_sim.rtl_header import RTL_DIR, rtl_sources, write_rtl_header

SCRIPT = Path(__file__).resolve().parent / "synth_xilinx.tcl"
REPO = RTL_DIR.parents[1]

#: Yosys cell names of each resource class (7-series primitives).
RESOURCE_CELLS = {
    "LUT": re.compile(r"LUT[1-6]$"),
    "FF": re.compile(r"FD[CPRS]E?$"),
    "DSP": re.compile(r"DSP48E1$"),
    "BRAM36": re.compile(r"RAMB36E1$"),
    "BRAM18": re.compile(r"RAMB18E1$"),
    "LUTRAM": re.compile(r"RAM(32|64|128|256)[XM0-9SD]*$"),
    "CARRY4": re.compile(r"CARRY4$"),
}


def parse_stat(report: str) -> dict[str, int]:
    """Resource counts from the top-level cell list of Yosys's ``stat`` output."""
    counts = dict.fromkeys(RESOURCE_CELLS, 0)
    for name, number in re.findall(r"^\s+(\S+)\s+(\d+)$", report, flags=re.MULTILINE):
        for resource, pattern in RESOURCE_CELLS.items():
            if pattern.match(name):
                counts[resource] += int(number)
    return counts


def synthesize(config: HardwareConfig, out_dir: Path) -> dict[str, object]:
    """Run Yosys for ``config``; returns the resource summary (also saved as JSON)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    include = write_rtl_header(config, out_dir / "include").parent
    report = out_dir / "stat.txt"
    environment = {
        **os.environ,
        "HC_INCLUDE_DIR": str(include),
        "HC_SOURCES": " ".join(str(path) for path in rtl_sources()),
        "HC_REPORT": str(report),
    }
    began = time.perf_counter()
    with open(out_dir / "yosys.log", "w") as log:
        completed = subprocess.run(
            ["yosys", "-q", "-c", str(SCRIPT)], cwd=REPO, env=environment, stdout=log,
            stderr=subprocess.STDOUT, check=False,
        )
    if completed.returncode != 0:
        raise SystemExit(f"yosys failed (exit {completed.returncode}); see {out_dir / 'yosys.log'}")
    summary = {
        "config": config.name,
        "device_family": "xc7 (Yosys synth_xilinx)",
        "resources": parse_stat(report.read_text()),
        "seconds": round(time.perf_counter() - began, 1),
    }
    (out_dir / "resources.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def main(argv: list[str] | None = None) -> None:
    """Command-line entry (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--preset", default="1x16x16")
    source.add_argument("--config", help="HardwareConfig JSON file")
    parser.add_argument("--out", help="output folder (default hw/build/synth_<config>)")
    args = parser.parse_args(argv)
    config = (
        HardwareConfig.load_json(args.config) if args.config else HardwareConfig.preset(args.preset)
    )
    out_dir = Path(args.out) if args.out else REPO / "hw" / "build" / f"synth_{config.name}"
    summary = synthesize(config, out_dir)
    json.dump(summary, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
