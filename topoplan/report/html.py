"""HTML writer: a report, an optimize result or a comparison as one self-contained page.

Styles, the few lines of script (sorting and filtering tables) and the charts (hand-written SVG) are
inline; nothing is fetched. Pages come from Jinja2 templates in ``templates/`` with autoescaping on, so
every value from a spec or a catalog is escaped. The chart functions here only turn figures of the report
into coordinates; every number shown comes from the report dict, the optimize result or the comparison
(and, for the report page, ``page.page_extras``). Every number is in the page's tables, so it reads the
same with scripts off. Cells that tests and tools read carry ``data-value`` (the exact figure).
"""

from __future__ import annotations

import math

import jinja2

from .. import __version__
from ..units import format_bytes
from .writers import _change, _choice, _value, count, gbps, usd, watts

_ENVIRONMENT = None


def _environment() -> jinja2.Environment:
    global _ENVIRONMENT
    if _ENVIRONMENT is None:
        env = jinja2.Environment(loader=jinja2.PackageLoader("topoplan.report", "templates"),
                                 autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
                                 lstrip_blocks=True)
        env.filters.update(count=count, usd=usd, gbps=gbps, watts=watts, size=format_bytes, choice=_choice,
                           value=_value, change=_change, sig=_sig, ms=_ms, pct=_pct, raw=_raw)
        env.globals["version"] = __version__
        _ENVIRONMENT = env
    return _ENVIRONMENT


def _raw(x) -> str:
    """The exact figure for a ``data-value`` attribute (``repr`` of a float reads back equal)."""
    if x is None:
        return ""
    if isinstance(x, bool):
        return str(x).lower()
    return repr(float(x)) if isinstance(x, float) else str(x)


def _sig(x, digits: int = 4) -> str:
    """Four significant digits, thousands separated; '-' for None."""
    if x is None:
        return "-"
    x = float(x)
    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    if abs(x) >= 10 ** digits:
        return f"{x:,.0f}"
    return f"{x:,.{max(0, digits - 1 - math.floor(math.log10(abs(x))))}f}"


def _ms(seconds) -> str:
    return "unreachable" if seconds is None else _sig(seconds * 1e3)


def _pct(x, digits: int = 1) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def heat(utilization) -> str:
    """A cell's background for a link utilization: pale at 0, deep red at 1 and above."""
    u = max(0.0, min(1.0, float(utilization or 0.0)))
    return f"background-color: hsl({round(50 - 50 * u)}, 90%, {round(95 - 45 * u)}%)"


# ---- charts: coordinates only; the template draws them (every label is escaped there) ----

def _shape(tag: str, title: str | None = None, text: str | None = None, **attrs) -> dict:
    return {"tag": tag, "attrs": {k.replace("_", "-"): (round(v, 2) if isinstance(v, float) else v)
                                  for k, v in attrs.items()}, "title": title, "text": text}


def stacked_bars(rows: list, total_text, width: int = 600) -> dict:
    """Horizontal stacked bars: ``rows`` = [(label, [(value, css class, tooltip), ...])]; each bar ends with
    ``total_text(its total)``."""
    label_w, bar_h, gap, top = 120, 20, 7, 6
    total = max([sum(v for v, _, _ in parts) for _, parts in rows] + [1e-300])
    scale = (width - label_w - 110) / total
    shapes = []
    for i, (label, parts) in enumerate(rows):
        y = top + i * (bar_h + gap)
        shapes.append(_shape("text", text=label, x=label_w - 6, y=y + bar_h * 0.7, text_anchor="end",
                             **{"class": "label"}))
        x = float(label_w)
        for value, css, tip in parts:
            w = max(0.0, value * scale)
            shapes.append(_shape("rect", title=tip, x=x, y=float(y), width=w, height=float(bar_h),
                                 **{"class": css}))
            x += w
        shapes.append(_shape("text", text=total_text(sum(v for v, _, _ in parts)), x=x + 4,
                             y=y + bar_h * 0.7, **{"class": "value"}))
    height = top * 2 + len(rows) * (bar_h + gap)
    return {"width": width, "height": height, "shapes": shapes}


def histogram(shares: list, bands: list, title: str, width: int = 260, height: int = 110) -> dict:
    """Columns of the share of links per utilization band; the band above 1 drawn in red."""
    left, bottom, top = 6, 22, 8
    n = len(shares)
    col = (width - 2 * left) / n
    plot_h = height - bottom - top
    shapes = []
    for i, share in enumerate(shares):
        h = plot_h * share
        band = f"> {bands[-1]:g}" if i == n - 1 else f"{bands[i]:g}-{bands[i + 1]:g}"
        shapes.append(_shape("rect", title=f"{title}: utilization {band}: {100 * share:.1f}% of sampled links",
                             x=left + i * col + 1, y=top + plot_h - h, width=col - 2, height=h,
                             **{"class": "over" if i == n - 1 else "band"}))
    shapes.append(_shape("line", x1=left, y1=top + plot_h, x2=width - left, y2=top + plot_h, **{"class": "axis"}))
    for i, label in ((0, "0"), (n - 1, "1"), (n, ">1")):
        shapes.append(_shape("text", text=label, x=left + i * col - (col / 2 if i == n else 0), y=height - 6,
                             text_anchor="middle", **{"class": "tick"}))
    return {"width": width, "height": height, "shapes": shapes}


def _axis(values: list, log: bool):
    lo, hi = min(values), max(values)
    if log:
        lo, hi = math.log10(lo), math.log10(hi)
    if hi - lo < 1e-12:
        lo, hi = lo - 0.5, hi + 0.5
    pad = (hi - lo) * 0.08
    return lo - pad, hi + pad


def _ticks(lo: float, hi: float, log: bool) -> list:
    if log:
        return [(e, 10.0 ** e) for e in range(math.ceil(lo), math.floor(hi) + 1)] or [(lo, 10 ** lo), (hi, 10 ** hi)]
    step = 10 ** math.floor(math.log10((hi - lo) / 4)) if hi > lo else 1
    for mult in (1, 2, 5, 10):
        if (hi - lo) / (step * mult) <= 6:
            step *= mult
            break
    first = math.ceil(lo / step) * step
    return [(first + i * step, first + i * step) for i in range(int((hi - first) / step) + 1)]


def scatter(points: list, x_label: str, y_label: str, lines: list = (), width: int = 520, height: int = 340,
            x_log: bool | None = None, y_log: bool | None = None) -> dict:
    """Points ``{"x", "y", "class", "title"}`` on linear or log axes (log where a span passes 3x), with
    optional polylines ``[[(x, y), ...], css class]``."""
    left, right, top, bottom = 70, 16, 12, 44
    xs = [p["x"] for p in points] + [x for line, _ in lines for x, _ in line] or [1.0]
    ys = [p["y"] for p in points] + [y for line, _ in lines for _, y in line] or [1.0]
    positive_x, positive_y = all(x > 0 for x in xs), all(y > 0 for y in ys)
    x_log = positive_x and max(xs) > 3 * min(xs) if x_log is None else x_log and positive_x
    y_log = positive_y and max(ys) > 3 * min(ys) if y_log is None else y_log and positive_y
    (x0, x1), (y0, y1) = _axis(xs, x_log), _axis(ys, y_log)

    def px(x):
        v = math.log10(x) if x_log else x
        return left + (v - x0) / (x1 - x0) * (width - left - right)

    def py(y):
        v = math.log10(y) if y_log else y
        return height - bottom - (v - y0) / (y1 - y0) * (height - top - bottom)

    shapes = [_shape("rect", x=left, y=top, width=width - left - right, height=height - top - bottom,
                     **{"class": "frame"})]
    for at, value in _ticks(x0, x1, x_log):
        x = left + (at - x0) / (x1 - x0) * (width - left - right)
        shapes.append(_shape("line", x1=x, y1=top, x2=x, y2=height - bottom, **{"class": "grid"}))
        shapes.append(_shape("text", text=_sig(value, 3), x=x, y=height - bottom + 14, text_anchor="middle",
                             **{"class": "tick"}))
    for at, value in _ticks(y0, y1, y_log):
        y = height - bottom - (at - y0) / (y1 - y0) * (height - top - bottom)
        shapes.append(_shape("line", x1=left, y1=y, x2=width - right, y2=y, **{"class": "grid"}))
        shapes.append(_shape("text", text=_sig(value, 3), x=left - 4, y=y + 4, text_anchor="end",
                             **{"class": "tick"}))
    for line, css in lines:
        shapes.append(_shape("polyline", points=" ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in line),
                             **{"class": css}))
    for p in points:
        shapes.append(_shape("circle", title=p["title"], cx=px(p["x"]), cy=py(p["y"]), r=p.get("r", 5.0),
                             **{"class": p["class"]}))
    shapes.append(_shape("text", text=x_label + (" (log)" if x_log else ""), x=left + (width - left - right) / 2,
                         y=height - 8, text_anchor="middle", **{"class": "label"}))
    shapes.append(_shape("text", text=y_label + (" (log)" if y_log else ""), x=14, y=top + (height - top - bottom) / 2,
                         text_anchor="middle", transform=f"rotate(-90 14 {top + (height - top - bottom) / 2:.1f})",
                         **{"class": "label"}))
    return {"width": width, "height": height, "shapes": shapes}


# ---- pages ----

CATEGORY_CLASSES = ("switches", "nics", "transceivers", "cables", "ocs", "wan")


def _cost_chart(report: dict) -> dict:
    parts = [(v, f"cat-{k}" if k in CATEGORY_CLASSES else "cat-other", f"{k}: {usd(v)}")
             for k, v in report["cost"]["by_category"].items() if v]
    return stacked_bars([("network", parts)], usd)


def _collective_chart(report: dict) -> dict | None:
    rows = [c for c in report["collectives"] if c["time_s"] is not None]
    if not rows:
        return None
    bars = []
    for c in rows:
        latency = min(c["latency_s"] or 0.0, c["time_s"])
        bars.append((c["name"], [(latency * 1e3, "latency", f"{c['name']}: latency {_ms(latency)} ms"),
                                 ((c["time_s"] - latency) * 1e3, "bandwidth",
                                  f"{c['name']}: bandwidth {_ms(c['time_s'] - latency)} ms, "
                                  f"busbw {_sig(c['busbw_GBps'])} GB/s, bound by {c['bottleneck']}")]))
    return stacked_bars(bars, lambda ms: f"{_sig(ms)} ms")


def _wan_chart(report: dict) -> dict:
    need = report["wan_requirement"]
    x = need["curve"]["wan_gbps"]
    points, lines = [], []
    for i, (label, values) in enumerate(need["curve"]["utilization"].items()):
        pairs = [(g, 100 * u) for g, u in zip(x, values) if g and u is not None]
        lines.append((pairs, f"series s{i % 6}"))
        points += [{"x": g, "y": u, "class": f"dot s{i % 6}", "r": 2.5,
                    "title": f"{label}: {gbps(g)} WAN, utilisation {u:.1f}%"} for g, u in pairs]
    total, target = report["wan"]["total_gbps"], 100 * need["target_utilization"]
    if x and total:
        lines.append(([(total, 0.0), (total, 100.0)], "marker"))
        lines.append(([(min(x + [total]), target), (max(x + [total]), target)], "marker target"))
    chart = scatter(points, "total WAN bandwidth (Gb/s)", "utilisation (%)", lines, width=640, x_log=True,
                    y_log=False)
    chart["legend"] = [(label, f"s{i % 6}") for i, label in enumerate(need["curve"]["utilization"])]
    chart["caption"] = f"this design's WAN: {gbps(total)}; target {100 * need['target_utilization']:g}%"
    return chart


def _utilization_rows(report: dict) -> tuple[list, list]:
    tiers = [t for t in ("nvlink", "pcie", "leaf", "spine", "core", "ocs")
             if any(t in c["utilization_by_tier"] for c in report["collectives"])]
    rows = [{"name": c["name"], "bottleneck": c["bottleneck"],
             "cells": [(t, c["utilization_by_tier"].get(t)) for t in tiers]} for c in report["collectives"]]
    return tiers, rows


def _grid_picture(grid: dict, most: int = 16) -> dict:
    """The RailX grid: nodes as squares (at most ``most`` per side shown), one row ring and one column ring
    drawn through them."""
    cols, rows = min(grid["columns"], most), min(grid["rows"], most)
    cell, gap, pad = 16, 6, 8
    shapes = []
    for r in range(rows):
        for c in range(cols):
            shapes.append(_shape("rect", title=f"node ({r}, {c}): {grid['chips_per_node']} chips",
                                 x=pad + c * (cell + gap), y=pad + r * (cell + gap), width=cell, height=cell,
                                 **{"class": "node"}))
    mid = pad + cell / 2
    shapes.append(_shape("line", x1=mid, y1=mid, x2=pad + (cols - 1) * (cell + gap) + cell / 2, y2=mid,
                         **{"class": "ring-row"}))
    shapes.append(_shape("line", x1=mid, y1=mid, x2=mid, y2=pad + (rows - 1) * (cell + gap) + cell / 2,
                         **{"class": "ring-col"}))
    return {"width": 2 * pad + cols * (cell + gap), "height": 2 * pad + rows * (cell + gap), "shapes": shapes,
            "shown": (rows, cols)}


def render_report_html(report: dict, extras: dict | None = None) -> str:
    """A report dict (``build_report``) and, optionally, ``page.page_extras`` as one HTML page."""
    extras = extras or {"links": {"bands": [], "histograms": [], "hottest": []}, "structure": {}, "targets": []}
    tiers, utilization = _utilization_rows(report)
    links = extras["links"]
    histograms = [dict(h, chart=histogram(h["shares"], links["bands"], f"{h['collective']}, {h['tier']} links"))
                  for h in links["histograms"]]
    grids = {name: _grid_picture(s["grid"]) for name, s in extras["structure"].items() if s.get("grid")}
    missed = [t for t in extras["targets"] if t["evaluated"] and not t["ok"]]
    context = {
        "r": report, "multi": report["design"]["topology"] == "multi-site", "extras": extras,
        "cost_chart": _cost_chart(report), "collective_chart": _collective_chart(report),
        "wan_chart": _wan_chart(report) if "wan_requirement" in report else None,
        "tiers": tiers, "utilization": utilization, "histograms": histograms, "grids": grids,
        "targets_missed": missed, "heat": heat,
        "engine_labels": sorted({(x["engine"], x["engine_label"]) for x in report.get("collectives", [])}),
        "switch_bom": [b for b in report["bom"] if b["category"] in ("switches", "ocs")],
    }
    return _environment().get_template("report.html.j2").render(**context)


def _front_tooltip(c: dict, on_front: bool) -> str:
    spec = f"; spec {c['name']}.yaml (--emit-specs)" if on_front else "; dominated"
    return (f"{c['name']}: {c['topology']}, {c['switch']}, {c['oversubscription']:g}:1, {c['tiers']} tier(s); "
            f"{usd(c['cost_per_gpu_usd'])} per GPU, {_ms(c['time_s'])} ms{spec}")


MAX_DOMINATED_POINTS = 2000   # per GPU count; beyond it the dominated points are thinned evenly (said so)


def render_optimize_html(result: dict) -> str:
    front = set(result["pareto"])
    panels = []
    for gpus in sorted({c["gpus"] for c in result["candidates"]}):
        group = [c for c in result["candidates"] if c["gpus"] == gpus]
        best = sorted((c for c in group if c["name"] in front), key=lambda c: c["time_s"])
        dominated = [c for c in group if c["name"] not in front]
        stride = max(1, math.ceil(len(dominated) / MAX_DOMINATED_POINTS))
        shown = dominated[::stride]
        points = [{"x": c["time_s"] * 1e3, "y": c["cost_per_gpu_usd"], "class": "dominated",
                   "title": _front_tooltip(c, False)} for c in shown]
        points += [{"x": c["time_s"] * 1e3, "y": c["cost_per_gpu_usd"], "class": "front", "r": 6.5,
                    "title": _front_tooltip(c, True)} for c in best]
        lines = [([(c["time_s"] * 1e3, c["cost_per_gpu_usd"]) for c in best], "front-line")] if best else []
        chart = scatter(points, "completion time per step (ms)", "network cost per GPU (USD)", lines)
        panels.append({"gpus": gpus, "chart": chart, "candidates": len(group), "front": best,
                       "dominated_drawn": len(shown), "dominated": len(dominated)})
    by_name = {c["name"]: c for c in result["candidates"]}
    front_rows = sorted((by_name[n] for n in result["pareto"] if n in by_name),
                        key=lambda c: (c["gpus"], c["time_s"]))
    ranking = [(i, by_name[n]) for i, n in enumerate(result.get("ranking") or [], 1) if n in by_name]
    return _environment().get_template("optimize.html.j2").render(
        result=result, panels=panels, front_rows=front_rows, ranking=ranking)


def render_compare_html(comparison: dict, targets: list | None = None) -> str:
    """A ``compare`` result; ``targets`` (optional) are the head design's targets against its report, the
    missed ones listed first. Every metric row whose change the markdown form shows is marked changed."""
    rows = [dict(r, change=_change(r)) for r in comparison["metrics"]]
    ordered = [r for r in rows if r["regression"]] + [r for r in rows if not r["regression"]]
    targets = targets or []
    ordered_targets = [t for t in targets if t["evaluated"] and not t["ok"]] + \
        [t for t in targets if not (t["evaluated"] and not t["ok"])]
    return _environment().get_template("compare.html.j2").render(
        c=comparison, rows=ordered, changed=sum(1 for r in rows if r["change"]), targets=ordered_targets)
