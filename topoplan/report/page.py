"""What the HTML report shows beside the report dict, read off the same evaluation (no new model figure):
per collective and link tier, the share of links in each utilization band (from the utilization samples the
flow stage keeps for the charts); the busiest links by name (kept by the flow stage per phase); the fabric's
structure (rails, scalable units, planes, the RailX grid) from the generator's layout; and the design's
targets held against the report (``targets.check_targets``, as ``topoplan check`` does).

``page_extras(evaluation, report)`` returns one plain dict; ``html.render_report_html`` renders it.
"""

from __future__ import annotations

import numpy as np

from ..flow.metrics import ARC_CLASSES, arc_classes
from ..targets import check_targets

# utilization bands of the histograms: [0, 0.1), ..., [0.9, 1.0], then above 1 (busier than the NICs)
BAND_EDGES = tuple(round(0.1 * i, 1) for i in range(11))
HOTTEST_PER_COLLECTIVE = 5


def page_extras(evaluation, report: dict) -> dict:
    return {"links": link_detail(evaluation), "structure": structure(evaluation),
            "targets": targets(evaluation, report)}


def _site_evaluations(evaluation):
    """(prefix, one-site evaluation) pairs: the evaluation itself, or each site of a multi-site design."""
    if hasattr(evaluation, "sites") and hasattr(evaluation, "borders"):
        return [(f"{site.name}: ", e) for site, e in zip(evaluation.design.sites, evaluation.sites)]
    return [("", evaluation)]


def _bands(values: np.ndarray) -> list:
    """Share of ``values`` in each band of BAND_EDGES, the last band (above 1) included."""
    if values.size == 0:
        return [0.0] * len(BAND_EDGES)
    counts, _ = np.histogram(np.clip(values, 0.0, 1.0), bins=BAND_EDGES)
    above = int((values > 1.0 + 1e-9).sum())
    counts[-1] -= above   # clipped values above 1 landed in the last band; count them apart
    shares = [float(c) / values.size for c in counts] + [above / values.size]
    return [round(s, 6) for s in shares]


def link_detail(evaluation) -> dict:
    """``{"histograms": [...], "hottest": [...]}``: per collective and tier the utilization bands of the
    sampled links, and each collective's busiest links (arc names, tier, utilization), busiest first."""
    histograms, hottest = [], []
    for prefix, one in _site_evaluations(evaluation):
        topology = one.topology
        classes = None
        for result in one.collectives:
            name = prefix + result.plan.collective.name
            phases = result.phases
            for tier in ARC_CLASSES:
                parts = [p.samples[tier] for p in phases if tier in p.samples]
                if not parts:
                    continue
                values = np.concatenate(parts)
                histograms.append({"collective": name, "tier": tier, "sampled_links": int(values.size),
                                   "max": float(values.max()) if values.size else 0.0, "shares": _bands(values)})
            busiest: dict = {}
            for phase in phases:
                for arc, utilization in getattr(phase, "hottest", ()):
                    if utilization > busiest.get(arc, (-1.0, ""))[0]:
                        busiest[arc] = (utilization, phase.label)
            if busiest and classes is None:
                classes = arc_classes(topology)
            for arc, (utilization, label) in sorted(busiest.items(), key=lambda kv: -kv[1][0])[:HOTTEST_PER_COLLECTIVE]:
                hottest.append({"collective": name, "phase": label,
                                "link": f"{topology.node_name(int(topology.src[arc]))} -> "
                                        f"{topology.node_name(int(topology.dst[arc]))}",
                                "tier": ARC_CLASSES[classes[arc]], "utilization": utilization})
    return {"bands": list(BAND_EDGES), "histograms": histograms, "hottest": hottest}


def structure(evaluation) -> dict:
    """Planes, rails and scalable units of a tree fabric; the grid of a RailX one (None where absent)."""
    out = {}
    for prefix, one in _site_evaluations(evaluation):
        layout = one.topology.layout
        entry = {"planes": layout.planes, "gpus_per_server": layout.gpus_per_server, "tree": None, "grid": None}
        if layout.tree is not None:
            tree = layout.tree
            entry["tree"] = {"rails": tree.rails, "scalable_unit": tree.scalable_unit,
                             "scalable_units": tree.scalable_units, "aggregation": tree.aggregation,
                             "switch_models": list(tree.switch_models)}
        if layout.grid is not None:
            grid = layout.grid
            entry["grid"] = {"columns": grid.columns, "rows": grid.rows, "chips_per_node": grid.chips_per_node,
                             "row_rails": grid.row_rails, "column_rails": grid.column_rails,
                             "ring_assignment": grid.ring_assignment, "ocs_per_row": grid.ocs_per_row,
                             "ocs_per_column": grid.ocs_per_column}
        out[prefix.rstrip(": ") or "fabric"] = entry
    return out


def targets(evaluation, report: dict) -> list:
    """Each spec target against the report: ok, missed, or not evaluated here (resilience targets need
    ``topoplan check``)."""
    declared = getattr(evaluation.design, "targets", None) or {}
    return [{"target": r.target, "limit": r.limit, "actual": r.actual, "ok": r.ok, "detail": r.detail,
             "evaluated": r.actual is not None} for r in check_targets(report, declared)]
