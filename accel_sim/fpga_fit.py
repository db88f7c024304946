"""Whether an accelerator configuration fits a named FPGA part, from Yosys.

:func:`synthesize` runs ``hw/synth/synth_xilinx.tcl`` (Yosys ``synth_xilinx``) on the
RTL generated for a :class:`HardwareConfig` and counts the primitives of its report;
:func:`fit` sets those counts against a part's resources. Synthesis takes minutes, so
results are cached under ``$HETEROCC_CACHE_DIR/synthesis`` (default
``~/.cache/heterocc/synthesis``) by a hash of everything that decides them: the
generated header, every RTL source, the synthesis script, the Yosys version and the
device family. Change any of them and the cache misses.

These are Yosys' figures, not Vivado's: Yosys maps to the same primitives (LUT6,
DSP48E1/E2, RAMB36/RAMB18) but optimizes less, so they are an upper bound for logic
and close for DSPs and block RAMs, which follow from the design's structure.

``heterocc accel fit [--preset P | --config JSON] --part xc7z020`` is the command.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import AcceleratorError
from .config import HardwareConfig
from .rtl_header import RTL_DIR, rtl_header_text, rtl_sources

#: the Yosys script (reads HC_INCLUDE_DIR, HC_SOURCES, HC_REPORT, HC_FAMILY)
SYNTH_SCRIPT = RTL_DIR.parent / "synth" / "synth_xilinx.tcl"

#: the share of each resource a configuration may take and still "fit": the rest is
#: left for routing, the board's interconnect and timing closure.
DEFAULT_LIMIT = 0.8


@dataclass(frozen=True)
class Part:
    """An FPGA part: its Yosys family, Vivado part number and resources.

    ``bram36`` counts 36 Kb block RAMs (a RAMB18 is half of one); UltraRAM, where a
    part has it, is listed but not used by the flow (Yosys maps no URAM by default).
    """

    name: str
    family: str
    vivado_part: str
    board: str
    lut: int
    ff: int
    dsp: int
    bram36: int
    uram: int = 0


#: the parts the fit check and the Vivado flow know (datasheet figures: DS190, DS891)
PARTS: dict[str, Part] = {
    "xc7z020": Part("xc7z020", "xc7", "xc7z020clg400-1", "PYNQ-Z2",
                    lut=53_200, ff=106_400, dsp=220, bram36=140),
    "xczu3eg": Part("xczu3eg", "xcup", "xczu3eg-sbva484-1-e", "Ultra96-V2",
                    lut=70_560, ff=141_120, dsp=360, bram36=216),
    "xczu7ev": Part("xczu7ev", "xcup", "xczu7ev-ffvc1156-2-e", "ZCU104",
                    lut=230_400, ff=460_800, dsp=1_728, bram36=312, uram=96),
}

#: LUTs each distributed-RAM or shift-register primitive occupies (they sit in SLICEM
#: LUTs, so a fit counts them with the logic LUTs)
_LUTRAM_LUTS = {
    "RAM32X1S": 1, "RAM64X1S": 1, "RAM128X1S": 2, "RAM256X1S": 4,
    "RAM32X1D": 2, "RAM64X1D": 2, "RAM128X1D": 4, "RAM256X1D": 8,
    "RAM32M": 4, "RAM64M": 4, "RAM32M16": 8, "RAM64M8": 8,
    "SRL16E": 1, "SRLC16E": 1, "SRLC32E": 1,
}


@dataclass(frozen=True)
class Resources:
    """Primitive counts of one synthesis: ``lut`` includes the LUTs that distributed
    RAM and shift registers take (``lutram``); ``bram36`` counts a RAMB18 as half."""

    lut: int
    lutram: int
    ff: int
    dsp: int
    bram36: float
    carry: int

    def to_dict(self) -> dict[str, float]:
        """JSON-ready counts."""
        return asdict(self)


def parse_stat(report: str) -> Resources:
    """Resource counts from the cell list of Yosys' ``stat`` report (7-series or
    UltraScale+ primitives)."""
    cells: dict[str, int] = {}
    for name, number in re.findall(r"^\s+(\S+)\s+(\d+)$", report, flags=re.MULTILINE):
        cells[name] = cells.get(name, 0) + int(number)

    def count(pattern: str) -> int:
        return sum(n for name, n in cells.items() if re.fullmatch(pattern, name))

    lutram = sum(_LUTRAM_LUTS.get(name, 0) * n for name, n in cells.items())
    return Resources(
        lut=count(r"LUT[1-6]") + lutram,
        lutram=lutram,
        ff=count(r"FD[CPRS]E?"),
        dsp=count(r"DSP48E[12]"),
        bram36=count(r"RAMB36E[12]") + count(r"RAMB18E[12]") / 2,
        carry=count(r"CARRY[48]"),
    )


@dataclass(frozen=True)
class Synthesis:
    """One synthesis result: the config's name, the family, the counts, the cache key,
    the seconds Yosys took when it ran, and whether this came from the cache."""

    config: str
    family: str
    resources: Resources
    key: str
    seconds: float
    cached: bool


def _yosys_version() -> str:
    if shutil.which("yosys") is None:
        raise AcceleratorError("yosys is not installed; run bash hw/install_tools.sh")
    return subprocess.run(["yosys", "-V"], capture_output=True, text=True,
                          check=True).stdout.strip()


def _family(part_or_family: str) -> str:
    if part_or_family in PARTS:
        return PARTS[part_or_family].family
    if part_or_family in ("xc7", "xcup"):
        return part_or_family
    raise AcceleratorError(f"unknown FPGA part or family {part_or_family!r}; choose one of "
                           f"{sorted(PARTS)} (or a Yosys family: xc7, xcup)")


def synthesis_key(config: HardwareConfig, family: str) -> str:
    """Hash of what decides the synthesis of ``config`` for ``family``: the header, the
    RTL sources, the script and the Yosys version."""
    digest = hashlib.sha256()
    for part in (rtl_header_text(config), SYNTH_SCRIPT.read_text(), _yosys_version(),
                 _family(family)):
        digest.update(part.encode())
        digest.update(b"\0")
    for source in rtl_sources():
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    return digest.hexdigest()[:24]


def cache_root() -> Path:
    """Where synthesis results are kept (``$HETEROCC_CACHE_DIR/synthesis``)."""
    base = os.environ.get("HETEROCC_CACHE_DIR") or "~/.cache/heterocc"
    return Path(base).expanduser() / "synthesis"


def synthesize(config: HardwareConfig, family: str = "xc7", cache: Path | None = None,
               keep: Path | None = None) -> Synthesis:
    """Synthesize ``config`` for ``family`` (a family or a part name) with Yosys, or
    return the cached counts of an identical earlier run. ``keep``: also copy Yosys'
    log and report there."""
    family = _family(family)
    key = synthesis_key(config, family)
    folder = (cache or cache_root()) / key
    summary = folder / "resources.json"
    if summary.is_file():
        saved = json.loads(summary.read_text())
        return Synthesis(config.name, family, Resources(**saved["resources"]), key,
                         saved["seconds"], cached=True)
    with tempfile.TemporaryDirectory(prefix="hc_synth_") as scratch:
        work = Path(scratch)
        include = work / "include"
        include.mkdir()
        (include / "hc_config.vh").write_text(rtl_header_text(config))
        report, log_path = work / "stat.txt", work / "yosys.log"
        environment = {**os.environ, "HC_INCLUDE_DIR": str(include), "HC_FAMILY": family,
                       "HC_SOURCES": " ".join(str(p) for p in rtl_sources()),
                       "HC_REPORT": str(report)}
        began = time.perf_counter()
        with open(log_path, "w") as log:
            done = subprocess.run(["yosys", "-q", "-c", str(SYNTH_SCRIPT)], env=environment,
                                  stdout=log, stderr=subprocess.STDOUT, check=False)
        seconds = round(time.perf_counter() - began, 1)
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            for path in (report, log_path):
                if path.exists():
                    shutil.copy(path, keep / path.name)
        if done.returncode != 0:
            tail = log_path.read_text()[-2000:]
            raise AcceleratorError(f"yosys failed on config {config.name} ({family}, exit "
                                   f"{done.returncode}):\n{tail}")
        resources = parse_stat(report.read_text())
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(report, folder / "stat.txt")
    summary.write_text(json.dumps({"config": config.name, "family": family,
                                   "resources": resources.to_dict(), "seconds": seconds},
                                  indent=1) + "\n")
    return Synthesis(config.name, family, resources, key, seconds, cached=False)


@dataclass(frozen=True)
class Fit:
    """A synthesis set against a part: utilization per resource (0..1) and whether
    each is within ``limit``."""

    part: Part
    synthesis: Synthesis
    limit: float

    @property
    def utilization(self) -> dict[str, float]:
        """Used / available for LUT, FF, DSP and BRAM."""
        r, p = self.synthesis.resources, self.part
        return {"LUT": r.lut / p.lut, "FF": r.ff / p.ff, "DSP": r.dsp / p.dsp,
                "BRAM": r.bram36 / p.bram36}

    @property
    def over(self) -> list[str]:
        """The resources above the limit."""
        return [name for name, used in self.utilization.items() if used > self.limit]

    @property
    def fits(self) -> bool:
        """Every resource within the limit."""
        return not self.over

    def to_dict(self) -> dict:
        """JSON-ready: part, config, counts, utilization, limit, verdict."""
        return {"part": self.part.name, "config": self.synthesis.config,
                "family": self.synthesis.family, "resources": self.synthesis.resources.to_dict(),
                "utilization": {k: round(v, 4) for k, v in self.utilization.items()},
                "limit": self.limit, "fits": self.fits, "synthesis_key": self.synthesis.key,
                "cached": self.synthesis.cached}

    def table(self) -> str:
        """One line per resource: used, available, percent, within the limit or not."""
        r, p = self.synthesis.resources, self.part
        rows = [("LUT", r.lut, p.lut), ("FF", r.ff, p.ff), ("DSP", r.dsp, p.dsp),
                ("BRAM36", r.bram36, p.bram36)]
        lines = [f"{self.synthesis.config} on {p.name} ({p.board}), Yosys synth_xilinx "
                 f"-family {self.synthesis.family}"
                 f"{' (cached)' if self.synthesis.cached else ''}:"]
        for name, used, available in rows:
            share = used / available
            mark = "ok" if share <= self.limit else f"OVER {self.limit:.0%}"
            lines.append(f"  {name:<6} {used:>9,g} / {available:>7,}  {share:6.1%}  {mark}")
        verdict = "fits" if self.fits else f"does not fit ({', '.join(self.over)})"
        lines.append(f"  {verdict} at <= {self.limit:.0%} of each resource")
        return "\n".join(lines)


def part(name: str) -> Part:
    """The named part (AcceleratorError naming the known ones otherwise)."""
    try:
        return PARTS[name]
    except KeyError:
        raise AcceleratorError(f"unknown FPGA part {name!r}; choose one of {sorted(PARTS)}") \
            from None


def fit(config: HardwareConfig, part_name: str = "xc7z020", limit: float = DEFAULT_LIMIT,
        cache: Path | None = None) -> Fit:
    """Synthesize ``config`` for the part's family (cached) and check it against the
    part at ``limit`` of each resource."""
    if not 0 < limit <= 1:
        raise AcceleratorError(f"fit limit must be in (0, 1], got {limit}")
    chosen = part(part_name)
    return Fit(chosen, synthesize(config, chosen.family, cache), limit)
