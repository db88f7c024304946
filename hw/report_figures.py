"""Print the RTL figures as Markdown: per-program RTL cycles against the timing
model, simulation speed per simulator, the timing model on compiled and random
streams at two memory latencies, and synthesis resources.

It reads what the test suites leave in hw/build (run them first):

    python -m pytest tests/hw -m rtl            # system reports, synthesis of a small config
    python benchmarks/fpga_fit.py               # synthesis of the full-size configs
    python hw/report_figures.py
"""

from __future__ import annotations

import json
from pathlib import Path

BUILD = Path(__file__).resolve().parent / "build"


def system_tables() -> list[str]:
    """One table per (simulator, config) system report."""
    lines = []
    for path in sorted((BUILD / "reports").glob("system_*.json")):
        report = json.loads(path.read_text())
        lines += [
            f"### {report['simulator']}, {report['config']}",
            "",
            f"simulated cycles per second: {report['simulated_cycles_per_second']:,.0f}; "
            f"largest |RTL/model - 1|: {report['max_cycle_error']:.1%}",
            "",
            "| program | instructions | RTL cycles | model cycles | ratio |",
            "|---|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {row['program']} | {row['instructions']} | {row['rtl_cycles']} | "
            f"{row['model_cycles']} | {row['ratio']:.3f} |"
            for row in report["programs"]
        ]
        lines.append("")
    return lines


def timing_model_tables() -> list[str]:
    """RTL against the timing model per bench memory latency (test_timing_model.py)."""
    path = BUILD / "reports" / "timing_model.json"
    if not path.exists():
        return []
    lines = []
    for key, report in json.loads(path.read_text()).items():
        lines += [
            f"### timing model, bench memory {key.replace('_', ' ')}",
            "",
            f"RTL / model: {report['min_ratio']:.3f} - {report['max_ratio']:.3f} over "
            f"{len(report['streams'])} streams",
            "",
            "| stream | instructions | RTL cycles | model cycles | ratio |",
            "|---|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {row['stream']} | {row['instructions']} | {row['rtl_cycles']} | "
            f"{row['model_cycles']} | {row['ratio']:.3f} |"
            for row in report["streams"]
        ]
        lines.append("")
    return lines


def synthesis_tables() -> list[str]:
    """Resources of every config in the synthesis cache (heterocc.accel_sim.fpga_fit)."""
    from heterocc.accel_sim.fpga_fit import cache_root

    lines = []
    for path in sorted(cache_root().glob("*/resources.json")):
        summary = json.loads(path.read_text())
        resources = summary["resources"]
        lines += [
            f"### synthesis, {summary['config']} (Yosys synth_xilinx -family "
            f"{summary['family']}, {summary['seconds']} s)",
            "",
            "| " + " | ".join(resources) + " |",
            "|" + "---:|" * len(resources),
            "| " + " | ".join(str(value) for value in resources.values()) + " |",
            "",
        ]
    return lines


if __name__ == "__main__":
    print("\n".join(system_tables() + timing_model_tables() + synthesis_tables()))
