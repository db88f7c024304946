"""A picture of a placement: the partitioned model as an SVG (or an HTML page holding
it) that a browser opens, one lane per device, one box per placement unit (a candidate
composite, or a node alone) in graph order, coloured by the device it went to, with its
estimated time there and on the other candidate; arrows are the tensors between
units, dashed where they cross between devices.
"""

from __future__ import annotations

import html

from .partition import PartitionReport

#: fill colours of the lanes, in the order targets first appear
PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756", "#72b7b2")
BOX_W, BOX_H, ROW, LANE, MARGIN, HEADER = 250, 34, 44, 330, 20, 84


def _units(report: PartitionReport) -> list[dict]:
    units: dict[int, dict] = {}
    for p in report.placements:
        unit = units.setdefault(p.unit, {"unit": p.unit, "target": p.target, "label":
                                         p.candidate or p.op, "first": p.node, "ops": 0,
                                         "estimates": {}, "macs": 0})
        unit["ops"] += 1
        unit["macs"] += p.macs
        unit["estimates"] = unit["estimates"] or p.estimates
    return list(units.values())


def _time(unit: dict) -> str:
    est = unit["estimates"]
    if unit["target"] not in est:
        return f"{unit['ops']} op(s)"
    own = est[unit["target"]]
    text = f"{own.total_s * 1e3:.3g} ms"
    if own.transfer_s or own.host_s:
        parts = [f"{own.transfer_s * 1e3:.2g} link"] if own.transfer_s else []
        parts += [f"{own.host_s * 1e3:.2g} host"] if own.host_s else []
        text += f" ({', '.join(parts)})"
    others = [f"{t} {e.total_s * 1e3:.3g}" for t, e in est.items() if t != unit["target"]]
    return text + (f" | {', '.join(others)}" if others else "")


def placement_svg(report: PartitionReport, title: str = "") -> str:
    """The placement as a self-contained SVG document."""
    units = _units(report)
    lanes: list[str] = []
    for u in units:
        if u["target"] not in lanes:
            lanes.append(u["target"])
    colour = {t: PALETTE[k % len(PALETTE)] for k, t in enumerate(lanes)}
    row = {u["unit"]: k for k, u in enumerate(units)}
    lane = {u["unit"]: lanes.index(u["target"]) for u in units}
    width = MARGIN * 2 + LANE * max(1, len(lanes))
    height = HEADER + ROW * len(units) + MARGIN

    def box_x(unit: int) -> int:
        return MARGIN + LANE * lane[unit]

    def box_y(unit: int) -> int:
        return HEADER + ROW * row[unit]

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
           '<rect width="100%" height="100%" fill="white"/>',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
           'markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/>'
           '</marker></defs>']
    heading = f"{title}: " if title else ""
    out.append(f'<text x="{MARGIN}" y="22" font-size="14" font-weight="bold">'
               f'{html.escape(heading + report.placement + " placement")}</text>')
    if report.plan is not None:
        names = {"chosen_ms": "this placement", "all_cpu_ms": "all on the CPU",
                 "greedy_ms": "greedy"}
        line = "estimated latency: " + ", ".join(
            f"{names[k]} {v:.4g} ms" for k, v in report.plan.totals().items())
        out.append(f'<text x="{MARGIN}" y="42">{html.escape(line)}</text>')
    for t in lanes:
        x = MARGIN + LANE * lanes.index(t)
        out.append(f'<text x="{x}" y="68" font-size="13" fill="{colour[t]}" '
                   f'font-weight="bold">{html.escape(t)}</text>')
    for source, target, nbytes in report.edges:
        if source not in row or target not in row:
            continue
        x1, y1 = box_x(source) + BOX_W // 2, box_y(source) + BOX_H
        x2, y2 = box_x(target) + BOX_W // 2, box_y(target)
        crossing = lane[source] != lane[target]
        if crossing:  # enter from the side so the arrow stays visible
            x1 = box_x(source) + (BOX_W if lane[source] < lane[target] else 0)
            y1 = box_y(source) + BOX_H // 2
        style = 'stroke="#d62728" stroke-dasharray="4 3"' if crossing else 'stroke="#888"'
        mid = (y1 + y2) / 2
        out.append(f'<path d="M{x1},{y1} C{x1},{mid} {x2},{mid} {x2},{y2}" fill="none" '
                   f'{style} marker-end="url(#arrow)"><title>{nbytes} bytes</title></path>')
    for u in units:
        x, y = box_x(u["unit"]), box_y(u["unit"])
        fill = colour[u["target"]]
        tip = html.escape(f"{u['first']} ({u['label']}, {u['macs']} MACs) on {u['target']}")
        out.append(f'<g><title>{tip}</title><rect x="{x}" y="{y}" width="{BOX_W}" '
                   f'height="{BOX_H}" rx="5" fill="{fill}" fill-opacity="0.85"/>'
                   f'<text x="{x + 6}" y="{y + 14}" fill="white" font-weight="bold">'
                   f'{html.escape(u["label"][:36])}</text>'
                   f'<text x="{x + 6}" y="{y + 28}" fill="white">'
                   f'{html.escape(_time(u)[:44])}</text></g>')
    out.append("</svg>")
    return "\n".join(out)


def placement_html(report: PartitionReport, title: str = "") -> str:
    """The picture in a self-contained HTML page, with the report's table under it."""
    heading = html.escape(title or "heterocc placement")
    return (f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{heading}</title>"
            "</head><body style='font-family:sans-serif'>"
            f"<h2>{heading}</h2>{placement_svg(report, title)}"
            f"<pre>{html.escape(report.format())}</pre></body></html>\n")
