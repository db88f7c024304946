"""Design-space exploration of the accelerator: area against model latency.

For each :class:`HardwareConfig` of a sweep (GEMM shapes x buffer sizes x clocks),
:func:`explore` compiles the model for that config (the same config the compiler, the
simulator, the timing model and the RTL generator use), sums the timing model's cycles
of every accelerator function into the model's latency at the config's clock, and
synthesizes the config's RTL with Yosys for a named part (``accel_sim.fpga_fit``,
cached by RTL hash) to get its resources, utilization and whether it fits.

``heterocc accel explore MODEL --gemm 8x8,16x16,32x32 --part xc7z020`` is the command;
it writes a table, JSON and a Pareto plot (latency against LUT or DSP) as SVG.

The latency counts the accelerator's cycles only (its functions one after another, as
the network runs them); layers left to the CPU and host transfers are not in it. Yosys
knows no timing, so a clock is the user's claim: the Vivado flow (``accel_sim.vivado``)
is where timing closure is checked.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from heterocc.accel_sim import HardwareConfig
from heterocc.accel_sim.fpga_fit import DEFAULT_LIMIT, Fit, fit
from heterocc.accel_sim.timing import schedule_stream
from heterocc.sdk import AcceleratorError
from heterocc.sdk.runtime import compile_model

#: builds the accelerator target for a config (the package's VtaTarget: this module is
#: imported by the package, so it takes the class rather than importing it)
TargetFactory = Callable[[HardwareConfig], object]


def parse_gemm(text: str) -> tuple[int, int, int]:
    """``"16x16"`` (block_in x block_out, batch 1) or ``"1x16x16"`` -> (batch, in, out)."""
    try:
        extents = [int(part) for part in text.lower().split("x")]
    except ValueError:
        extents = []
    if len(extents) == 2:
        extents = [1, *extents]
    if len(extents) != 3 or any(e < 1 or e & (e - 1) for e in extents):
        raise AcceleratorError(f"GEMM shape {text!r}: expected BLOCK_INxBLOCK_OUT or "
                               "BATCHxBLOCK_INxBLOCK_OUT, powers of two (e.g. 16x16)")
    return extents[0], extents[1], extents[2]


def _log2(value: int) -> int:
    return value.bit_length() - 1


def _kib(name: str, kib: int) -> int:
    if kib < 1 or kib & (kib - 1):
        raise AcceleratorError(f"{name} buffer of {kib} KiB: give a power of two")
    return _log2(kib * 1024)


def _shape_base(batch: int, block_in: int, block_out: int) -> dict[str, int]:
    try:
        return HardwareConfig.preset(f"{batch}x{block_in}x{block_out}").to_dict()
    except AcceleratorError:
        return {**HardwareConfig().to_dict(), "log_batch": _log2(batch),
                "log_block_in": _log2(block_in), "log_block_out": _log2(block_out)}


def _start(shape: str) -> dict[str, int]:
    """The config a sweep entry starts from: a named preset (``pynq-z2``) as it is, or
    a GEMM shape's starting point."""
    if any(ch.isalpha() and ch != "x" for ch in shape.lower()):
        try:
            return HardwareConfig.preset(shape).to_dict()
        except AcceleratorError as exc:
            raise AcceleratorError(f"sweep entry {shape!r} is no GEMM shape (e.g. 16x16) "
                                   f"and {exc}") from None
    return _shape_base(*parse_gemm(shape))


def sweep(gemm: Sequence[str], wgt_kib: Sequence[int] = (), acc_kib: Sequence[int] = (),
          inp_kib: Sequence[int] = (), clocks_mhz: Sequence[int] = ()) -> list[HardwareConfig]:
    """Every combination of the GEMM shapes, buffer sizes and clocks as configs.

    A shape starts from its preset (``1x8x8`` keeps its smaller buffers) or, without
    one, from the default config reshaped; an entry may also name a preset outright
    (``pynq-z2``: 1x16x16 with the buffers that fit the xc7z020). An empty buffer or
    clock list keeps that starting point's value."""
    configs = []
    for shape, wgt, acc, inp, clock in itertools.product(
            gemm, wgt_kib or [None], acc_kib or [None], inp_kib or [None], clocks_mhz or [None]):
        base = _start(shape)
        changes = {}
        if wgt is not None:
            changes["log_wgt_buffer_bytes"] = _kib("weight", wgt)
        if acc is not None:
            changes["log_acc_buffer_bytes"] = _kib("accumulator", acc)
        if inp is not None:
            changes["log_inp_buffer_bytes"] = _kib("input", inp)
        if clock is not None:
            changes["clock_mhz"] = clock
        configs.append(HardwareConfig.from_dict({**base, **changes}))
    return configs


@dataclass(frozen=True)
class Point:
    """One configuration: its model latency from the timing model and its fit."""

    config: HardwareConfig
    functions: int
    cycles: int
    compile_seconds: float
    fit: Fit

    @property
    def latency_ms(self) -> float:
        """The accelerator's cycles at the config's clock, in milliseconds."""
        return self.cycles / (self.config.clock_mhz * 1e3)

    def to_dict(self) -> dict:
        """JSON-ready: config (all parameters), latency, resources and fit."""
        return {"config": self.config.name, "parameters": self.config.to_dict(),
                "clock_mhz": self.config.clock_mhz, "accelerator_functions": self.functions,
                "cycles": self.cycles, "latency_ms": round(self.latency_ms, 4),
                "compile_seconds": round(self.compile_seconds, 1), **{
                    key: value for key, value in self.fit.to_dict().items()
                    if key != "config"}}


def pareto(points: Sequence[Point], resource: str = "lut") -> list[Point]:
    """The points no other point beats on both latency and ``resource`` (lut or dsp)."""
    def cost(point: Point) -> tuple[float, float]:
        return point.latency_ms, getattr(point.fit.synthesis.resources, resource)

    front = []
    for point in points:
        mine = cost(point)
        dominated = any(
            other is not point and cost(other)[0] <= mine[0] and cost(other)[1] <= mine[1]
            and cost(other) != mine for other in points)
        if not dominated:
            front.append(point)
    return sorted(front, key=lambda p: cost(p)[0])


def model_cycles(model, config: HardwareConfig, make_target: TargetFactory,
                 calibration=None) -> tuple[int, int]:
    """(accelerator functions, their timing-model cycles summed) of ``model`` compiled
    for ``config`` (the target ``make_target(config)``)."""
    target = make_target(config)
    compile_model(model, target=[target, "reference"], calibration=calibration)
    if not target.kernels:
        raise AcceleratorError(f"config {config.name}: the accelerator took no part of the "
                               "model (see heterocc partition for why)")
    cycles = sum(schedule_stream(k.program.instructions, config).total_cycles
                 for k in target.kernels)
    return len(target.kernels), cycles


@dataclass(frozen=True)
class Exploration:
    """The points of a sweep for one model and part."""

    model: str
    part: str
    limit: float
    points: list[Point]
    seconds: float

    def table(self) -> str:
        """One row per configuration, Pareto points (latency vs LUT) marked ``*``."""
        front = {id(p) for p in pareto(self.points, "lut")}
        header = (f"{'config':<40} {'MHz':>4} {'latency ms':>10} {'cycles':>11} {'LUT':>7} "
                  f"{'DSP':>5} {'BRAM36':>6} {'LUT%':>6} {'DSP%':>6} {'BRAM%':>6}  fits")
        lines = [f"{self.model} on {self.part} (<= {self.limit:.0%} of each resource; "
                 "* = Pareto, latency vs LUT)", header]
        for p in self.points:
            r, u = p.fit.synthesis.resources, p.fit.utilization
            lines.append(
                f"{p.config.name:<40} {p.config.clock_mhz:>4} {p.latency_ms:>10.2f} "
                f"{p.cycles:>11,} {r.lut:>7,} {r.dsp:>5} {r.bram36:>6g} {u['LUT']:>6.1%} "
                f"{u['DSP']:>6.1%} {u['BRAM']:>6.1%}  {'yes' if p.fit.fits else 'no'}"
                f"{' *' if id(p) in front else ''}")
        return "\n".join(lines)

    def to_json(self) -> str:
        """Model, part, limit, seconds and every point (``Point.to_dict``)."""
        return json.dumps({
            "model": self.model, "part": self.part, "limit": self.limit,
            "seconds": round(self.seconds, 1),
            "pareto_lut": [p.config.name for p in pareto(self.points, "lut")],
            "pareto_dsp": [p.config.name for p in pareto(self.points, "dsp")],
            "points": [p.to_dict() for p in self.points]}, indent=1) + "\n"

    def write(self, folder: Path, resource: str = "lut") -> list[Path]:
        """Write ``explore.txt``, ``explore.json`` and ``pareto_<resource>.svg``."""
        folder.mkdir(parents=True, exist_ok=True)
        files = {"explore.txt": self.table() + "\n", "explore.json": self.to_json(),
                 f"pareto_{resource}.svg": pareto_svg(self, resource)}
        for name, text in files.items():
            (folder / name).write_text(text)
        return [folder / name for name in files]


def explore(model, configs: Sequence[HardwareConfig], make_target: TargetFactory,
            part: str = "xc7z020",
            limit: float = DEFAULT_LIMIT, calibration=None, jobs: int = 1,
            progress: Callable[[str], None] = lambda line: None) -> Exploration:
    """Latency and fit of every config. Synthesis (Yosys, ``jobs`` at a time) runs
    beside the compilations; configs differing only in clock share one synthesis."""
    if not configs:
        raise AcceleratorError("explore needs at least one configuration")
    began = time.perf_counter()
    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    fits: dict[str, Future] = {}
    for config in configs:
        if config.name not in fits:
            fits[config.name] = pool.submit(fit, config, part, limit)
    points = []
    try:
        for index, config in enumerate(configs):
            started = time.perf_counter()
            functions, cycles = model_cycles(model, config, make_target, calibration)
            compile_seconds = time.perf_counter() - started
            result = fits[config.name].result()
            point = Point(config, functions, cycles, compile_seconds, result)
            points.append(point)
            progress(f"{index + 1}/{len(configs)} {config.name} at {config.clock_mhz} MHz: "
                     f"{point.latency_ms:.2f} ms ({cycles:,} cycles, {functions} functions); "
                     f"LUT {result.synthesis.resources.lut:,} DSP {result.synthesis.resources.dsp}"
                     f" BRAM36 {result.synthesis.resources.bram36:g}: "
                     f"{'fits' if result.fits else 'does not fit'} {part}"
                     f"{' (synthesis cached)' if result.synthesis.cached else ''}")
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    label = model if isinstance(model, str) else getattr(model.graph, "name", "model")
    return Exploration(str(label), part, limit, points, time.perf_counter() - began)


# --- the Pareto plot ------------------------------------------------------------------

_WIDTH, _HEIGHT, _MARGIN = 720, 480, 70


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    step = (high - low) / count if high > low else 1.0
    return [low + step * i for i in range(count + 1)]


def _short_label(config: HardwareConfig) -> str:
    """Shape, weight and accumulator KiB, clock: what tells a sweep's points apart."""
    return (f"{config.batch}x{config.block_in}x{config.block_out} "
            f"w{(1 << config.log_wgt_buffer_bytes) // 1024}K "
            f"a{(1 << config.log_acc_buffer_bytes) // 1024}K {config.clock_mhz} MHz")


def pareto_svg(exploration: Exploration, resource: str = "lut") -> str:
    """Latency (x) against ``resource`` (y, lut or dsp) as an SVG scatter plot: every
    configuration a dot (filled when it fits the part), the Pareto front a line, the
    part's limit a dashed line."""
    if resource not in ("lut", "dsp"):
        raise AcceleratorError(f"Pareto plot resource {resource!r}: choose lut or dsp")
    points = exploration.points
    part = exploration.points[0].fit.part
    capacity = getattr(part, resource) * exploration.limit
    xs = [p.latency_ms for p in points]
    ys = [getattr(p.fit.synthesis.resources, resource) for p in points]
    x_low, x_high = 0.0, max(xs) * 1.1
    y_low, y_high = 0.0, max(max(ys), capacity) * 1.1
    plot_w, plot_h = _WIDTH - 2 * _MARGIN, _HEIGHT - 2 * _MARGIN

    def sx(x: float) -> float:
        return _MARGIN + (x - x_low) / (x_high - x_low) * plot_w

    def sy(y: float) -> float:
        return _HEIGHT - _MARGIN - (y - y_low) / (y_high - y_low) * plot_h

    label = resource.upper()
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="{_WIDTH}" height="{_HEIGHT}" fill="white"/>',
           f'<text x="{_WIDTH / 2}" y="20" text-anchor="middle" font-size="14">'
           f'{exploration.model}: latency vs {label} on {part.name}</text>',
           f'<line x1="{_MARGIN}" y1="{_HEIGHT - _MARGIN}" x2="{_WIDTH - _MARGIN}" '
           f'y2="{_HEIGHT - _MARGIN}" stroke="black"/>',
           f'<line x1="{_MARGIN}" y1="{_MARGIN}" x2="{_MARGIN}" y2="{_HEIGHT - _MARGIN}" '
           f'stroke="black"/>',
           f'<text x="{_WIDTH / 2}" y="{_HEIGHT - 25}" text-anchor="middle">accelerator '
           f'latency (ms, timing model)</text>',
           f'<text x="18" y="{_HEIGHT / 2}" text-anchor="middle" transform="rotate(-90 18 '
           f'{_HEIGHT / 2})">{label} (Yosys)</text>']
    for tick in _ticks(x_low, x_high):
        out.append(f'<text x="{sx(tick):.1f}" y="{_HEIGHT - _MARGIN + 15}" '
                   f'text-anchor="middle">{tick:.0f}</text>')
    for tick in _ticks(y_low, y_high):
        out.append(f'<text x="{_MARGIN - 6}" y="{sy(tick) + 4:.1f}" '
                   f'text-anchor="end">{tick:,.0f}</text>')
    out.append(f'<line x1="{_MARGIN}" y1="{sy(capacity):.1f}" x2="{_WIDTH - _MARGIN}" '
               f'y2="{sy(capacity):.1f}" stroke="red" stroke-dasharray="6 4"/>')
    out.append(f'<text x="{_WIDTH - _MARGIN}" y="{sy(capacity) - 4:.1f}" text-anchor="end" '
               f'fill="red">{exploration.limit:.0%} of {part.name}</text>')
    front = pareto(points, resource)
    path = " ".join(f"{sx(p.latency_ms):.1f},{sy(getattr(p.fit.synthesis.resources, resource)):.1f}"
                    for p in front)
    out.append(f'<polyline points="{path}" fill="none" stroke="steelblue"/>')
    for point, x, y in zip(points, xs, ys):
        fill = "steelblue" if point.fit.fits else "white"
        out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="5" fill="{fill}" '
                   f'stroke="steelblue"><title>{point.config.name} at {point.config.clock_mhz}'
                   f' MHz</title></circle>')
        out.append(f'<text x="{sx(x) + 7:.1f}" y="{sy(y) - 6:.1f}">'
                   f'{_short_label(point.config)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _int_list(text: str | None) -> list[int]:
    return [int(item) for item in text.split(",")] if text else []


def explore_command(args, make_target: TargetFactory) -> int:
    """``heterocc accel explore MODEL``: the sweep the arguments name, printed as a
    table and written (table, JSON, Pareto SVG) to ``args.output``."""
    def say(line: str) -> None:  # progress on stderr, so the table alone is on stdout
        print(line, file=sys.stderr, flush=True)

    try:
        configs = sweep(args.gemm.split(","), _int_list(args.wgt_kib), _int_list(args.acc_kib),
                        _int_list(args.inp_kib), _int_list(args.clock_mhz))
    except ValueError as exc:
        raise AcceleratorError(f"accel explore: {exc}; lists are comma-separated integers") \
            from exc
    say(f"exploring {len(configs)} configurations of {args.model} for {args.part}")
    result = explore(args.model, configs, make_target, args.part, args.limit,
                     calibration=args.calibration, jobs=args.jobs,
                     progress=say)
    print(result.table())
    for path in result.write(Path(args.output), args.resource):
        print(f"wrote {path}")
    print(f"{len(configs)} configurations in {result.seconds:.0f} s")
    return 0
