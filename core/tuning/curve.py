"""The tuning curve of a log as an SVG image (``heterocc tuning-curve LOG -o curve.svg``).

One line per task: the best cost found so far against the number of candidates measured
for that task, as a speed-up over the task's first working candidate (tasks differ in
cost by orders of magnitude, and the question a curve answers is whether the search is
still finding faster schedules). Written by hand, a few hundred bytes of SVG per task: a
plotting library is not worth a dependency for one kind of figure.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from html import escape

from ..errors import InputError
from .records import MeasureRecord

WIDTH, HEIGHT = 700, 400
MARGIN = {"left": 56, "right": 240, "top": 36, "bottom": 44}
#: line colours (colour-blind safe, Okabe-Ito), reused when there are more tasks
COLOURS = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442",
           "#000000")
#: tasks drawn: those with the most records
MAX_TASKS = 8


def best_so_far(records: Sequence[MeasureRecord]) -> dict[str, list[float]]:
    """For each task, in log order, the speed-up of the best working candidate so far over
    the first working one (candidates before the first working one are left out)."""
    curves: dict[str, list[float]] = {}
    first: dict[str, float] = {}
    best: dict[str, float] = {}
    for record in records:
        if not record.ok:
            if record.workload_key in best:
                curves[record.workload_key].append(first[record.workload_key]
                                                   / best[record.workload_key])
            continue
        task = record.workload_key
        first.setdefault(task, record.cost)
        best[task] = min(best.get(task, math.inf), record.cost)
        curves.setdefault(task, []).append(first[task] / best[task])
    return curves


def _ticks(high: float, count: int = 5) -> list[float]:
    """Round tick values from 0 (or 1) to about ``high``."""
    step = 10 ** math.floor(math.log10(max(high, 1e-9) / count))
    for factor in (1, 2, 5, 10):
        if high / (step * factor) <= count:
            step *= factor
            break
    return [i * step for i in range(int(high / step) + 2)]


def _short(task: str) -> str:
    """A task key for the legend: a JSON list key (``["conv2d_nchwc",1,3,...]``) as its
    name and numbers, anything else as it is (the full key is the entry's tooltip)."""
    try:
        parts = json.loads(task)
    except ValueError:
        return task
    if not isinstance(parts, list) or not parts:
        return task
    return " ".join(str(p) for p in parts if not isinstance(p, str) or p == parts[0])


def tuning_curve_svg(records: Sequence[MeasureRecord], title: str = "tuning curve") -> str:
    """The curves of :func:`best_so_far` as a standalone SVG document."""
    curves = best_so_far(records)
    if not curves:
        raise InputError("the tuning log has no working candidate to draw")
    tasks = sorted(curves, key=lambda t: -len(curves[t]))[:MAX_TASKS]
    x_max = max(len(curves[t]) for t in tasks)
    span = max(max(curves[t]) for t in tasks) - 1.0
    y_ticks = [1.0 + y for y in _ticks(max(span, 0.05))]
    y_lo, y_hi = 1.0, y_ticks[-1]
    x_ticks = [x for x in _ticks(x_max) if 0 < x <= x_max] or [x_max]
    plot_w = WIDTH - MARGIN["left"] - MARGIN["right"]
    plot_h = HEIGHT - MARGIN["top"] - MARGIN["bottom"]

    def px(x: float) -> float:
        return MARGIN["left"] + plot_w * (x - 1) / max(x_max - 1, 1)

    def py(y: float) -> float:
        return MARGIN["top"] + plot_h * (1 - (y - y_lo) / (y_hi - y_lo))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{WIDTH / 2 - MARGIN["right"] / 2}" y="20" text-anchor="middle" '
           f'font-size="14">{escape(title)}</text>']
    for y in y_ticks:
        out.append(f'<line x1="{MARGIN["left"]}" x2="{MARGIN["left"] + plot_w}" '
                   f'y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{MARGIN["left"] - 6}" y="{py(y) + 4:.1f}" '
                   f'text-anchor="end">{y:g}x</text>')
    for x in x_ticks:
        out.append(f'<text x="{px(x):.1f}" y="{MARGIN["top"] + plot_h + 16}" '
                   f'text-anchor="middle">{x:g}</text>')
    out.append(f'<rect x="{MARGIN["left"]}" y="{MARGIN["top"]}" width="{plot_w}" '
               f'height="{plot_h}" fill="none" stroke="#333"/>')
    out.append(f'<text x="{MARGIN["left"] + plot_w / 2}" y="{HEIGHT - 8}" '
               'text-anchor="middle">candidates measured (per task)</text>')
    out.append(f'<text transform="translate(14,{MARGIN["top"] + plot_h / 2}) rotate(-90)" '
               'text-anchor="middle">best so far, speed-up over the first</text>')
    for i, task in enumerate(tasks):
        colour = COLOURS[i % len(COLOURS)]
        points = " ".join(f"{px(k + 1):.1f},{py(v):.1f}" for k, v in enumerate(curves[task]))
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.8" '
                   f'points="{points}"/>')
        ly = MARGIN["top"] + 14 * i + 6
        lx = MARGIN["left"] + plot_w + 12
        label = f"{curves[task][-1]:.2f}x {_short(task)}"
        label = label if len(label) <= 28 else label[:27] + "…"
        out.append(f'<line x1="{lx}" x2="{lx + 16}" y1="{ly}" y2="{ly}" stroke="{colour}" '
                   'stroke-width="2"/>')
        out.append(f'<text x="{lx + 20}" y="{ly + 4}"><title>{escape(task)}</title>'
                   f'{escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
