"""The report of a multi-site design (``sites.SitesEvaluation``): the one-site report's keys for the whole
joined cluster, plus ``sites``, ``wan`` and ``training.cross_site`` / ``wan_requirement``."""

from __future__ import annotations

from .. import __version__
from ..cost import CATEGORIES
from ..sites import SCHEME_TEXT
from ..topology import LINK_TIERS
from . import _collective, _money, _num, _training, cost_section, switch_counts
from .writers import _heading, _training_text, count, gbps, table, usd, watts

CATEGORY_ORDER = CATEGORIES + ("wan",)
TIER_ORDER = LINK_TIERS


def build_sites_report(evaluation) -> dict:
    multi, topology, bom, cut = evaluation.design, evaluation.topology, evaluation.bom, evaluation.bisection
    layout = topology.layout
    links_by_tier = topology.links_by_tier()
    gpus = multi.gpus
    server_ids = sorted({s.design.cluster.server for s in multi.sites})
    servers_usd = sum(e.bom.server_price_usd * e.bom.servers for e in evaluation.sites)
    report = {
        "topoplan_version": __version__,
        "design": {"name": multi.name, "description": multi.description, "topology": "multi-site", "gpus": gpus,
                   "servers": multi.servers, "server": server_ids[0] if len(server_ids) == 1 else "mixed",
                   "sites": len(multi.sites)},
        "fabric": {
            "tiers": layout.tiers,
            "planes": layout.planes,
            "link_gbps": float(layout.link_gbps),
            "link_gbps_by_tier": topology.link_gbps_by_tier(),
            "injection_gbps_per_gpu": float(layout.injection_gbps_per_gpu),
            "switches": switch_counts(topology),
            "links": {"total": int(sum(links_by_tier.values())), "by_tier": links_by_tier},
        },
        "cost": cost_section(bom, gpus, layout.injection_gbps_per_gpu, cut.gbps, servers_usd,
                             "network only (the sites' switches, NICs, optics, cables, OCS; the border tier; "
                             "the WAN links as priced in the spec); prices are catalog estimates"),
        "power": {"total_w": round(bom.power_w, 1), "per_gpu_w": round(bom.power_w / gpus, 2)},
        "bisection": {"gbps": _num(cut.gbps), "per_gpu_gbps": _num(cut.gbps / (gpus / 2)), "method": cut.method,
                      "permutation_per_gpu_gbps": None, "permutation_note": cut.permutation_note},
        "diameter_hops": int(layout.diameter_hops),
        "routing": {"engine": multi.routing.engine},
        "collectives": _slowest_collectives(evaluation),
        "sites": [_site(site, e, border) for site, e, border in zip(multi.sites, evaluation.sites,
                                                                      evaluation.borders)],
        "wan": _wan(evaluation),
        "bom": [
            {"category": l.category, "item": l.item, "tier": l.tier, "quantity": l.quantity,
             "unit_price_usd": _money(l.unit_price_usd), "price_usd": _money(l.price_usd),
             "power_w": round(l.power_w, 1)}
            for l in sorted(bom.lines, key=lambda l: (CATEGORY_ORDER.index(l.category),
                                                      TIER_ORDER.index(l.tier) if l.tier in TIER_ORDER else -1,
                                                      l.item))
        ],
        "warnings": list(layout.warnings),
    }
    t = _training(evaluation)
    cross = evaluation.cross
    t["cross_site"] = {
        "crossing": cross.crossing, "scheme": cross.sync.scheme, "every": cross.sync.every,
        "pattern": cross.exchange.pattern, "bytes_per_site": _num(cross.exchange.bytes_per_site),
        "wan_s": _num(cross.wan_s), "wan_latency_s": _num(cross.exchange.latency_s),
        "exposed_s": _num(cross.exposed_s), "local_step_s": _num(cross.local_step_s),
        "utilization": _num(cross.utilization),
    }
    report["training"] = t
    report["wan_requirement"] = {
        "levels": sorted({float(u) for r in evaluation.requirements for u in r.needed_gbps}),
        "target_utilization": multi.wan.target_utilization,
        "schemes": [{"scheme": r.sync.scheme, "label": r.sync.label, "every": r.sync.every,
                     "utilization": _num(r.utilization),
                     "needed_gbps": {f"{u:g}": _num(g) for u, g in sorted(r.needed_gbps.items())}}
                    for r in evaluation.requirements],
        "curve": {"wan_gbps": [_num(g) for g in evaluation.curve[0]],
                  "utilization": {label: [_num(u) for u in values] for label, values in evaluation.curve[1].items()}},
    }
    for e, site in zip(evaluation.sites, multi.sites):
        if e.training is not None and not e.training.memory.fits:
            report["warnings"].append(f"{site.name}: the model does not fit in memory: {e.training.memory.describe()}")
    return report


def _slowest_collectives(evaluation) -> list:
    """Per collective name, the slowest site's row (in-site collectives run at every site)."""
    rows: dict = {}
    for e in evaluation.sites:
        for result in e.collectives:
            row = _collective(result)
            if row["name"] not in rows or (row["time_s"] or 0) > (rows[row["name"]]["time_s"] or 0):
                rows[row["name"]] = row
    return list(rows.values())


def _site(site, evaluation, border) -> dict:
    topology, bom = evaluation.topology, evaluation.bom
    return {
        "name": site.name, "gpus": site.design.gpus, "servers": site.design.cluster.servers,
        "server": site.design.cluster.server, "topology": site.design.fabric.topology,
        "tiers": topology.layout.tiers, "switches_by_tier": topology.switches_by_tier(),
        "network_usd": _money(bom.total_usd), "power_w": round(bom.power_w, 1),
        "bisection_gbps": _num(evaluation.bisection.gbps),
        "parallelism": dict(site.design.workload.parallelism),
        "step_time_s": _num(evaluation.training.step_s) if evaluation.training is not None else None,
        "border": {"switch": border.switch, "count": border.count, "wan_ports": border.wan_ports,
                   "down_links": border.down_links, "down_link_gbps": border.down_gbps},
    }


def _wan(evaluation) -> dict:
    multi = evaluation.design
    links = [{"between": [multi.sites[l.a].name, multi.sites[l.b].name], "link_gbps": l.link_gbps,
              "count": l.count, "goodput_gbps": _num(l.goodput_gbps), "capacity_gbps": _num(l.capacity_gbps),
              "latency_ms": _num(l.latency_s * 1e3), "distance_km": l.distance_km, "loss": l.loss,
              "price_usd": _money(l.price_usd)} for l in multi.wan.links]
    return {"links": links, "total_gbps": _num(evaluation.cross.wan_gbps), "crossing": multi.wan.crossing,
            "sync": multi.wan.sync.label, "border_switches": sum(b.count for b in evaluation.borders)}


def render_sites_text(r: dict, markdown: bool) -> str:
    d, f, c, t = r["design"], r["fabric"], r["cost"], r["training"]
    x = t["cross_site"]
    out = _heading(f"topoplan report: {d['name']}", markdown, 1)
    if d["description"]:
        out += [d["description"], ""]
    summary = [
        ("Sites", ", ".join(f"{s['name']} ({count(s['gpus'])} GPUs, {s['topology']})" for s in r["sites"])),
        ("GPUs", f"{count(d['gpus'])} on {count(d['servers'])} x {d['server']}"),
        ("Switches", f"{count(f['switches']['total'])} ("
         + ", ".join(f"{tier} {count(n)}" for tier, n in f["switches"]["by_tier"].items()) + ")"),
        ("Network links", f"{count(f['links']['total'])} ("
         + ", ".join(f"{tier} {count(n)}" for tier, n in f["links"]["by_tier"].items()) + ")"),
        ("WAN", f"{gbps(r['wan']['total_gbps'])} in {sum(l['count'] for l in r['wan']['links'])} link(s); "
         f"{r['wan']['crossing'].upper()} crosses sites; sync: {r['wan']['sync']}"),
        ("Network cost", f"{usd(c['total_usd'])} total, {usd(c['per_gpu_usd'])} per GPU"),
        ("Power", f"{watts(r['power']['total_w'])} ({r['power']['per_gpu_w']:,.0f} W per GPU)"),
        ("Bisection", f"{gbps(r['bisection']['gbps'])} ({r['bisection']['method']})"),
        ("Diameter", f"{r['diameter_hops']} network hops"),
    ]
    out += table(["Metric", "Value"], summary, markdown) + [""]
    out += _heading("Sites", markdown)
    rows = [(s["name"], count(s["gpus"]), s["topology"], ", ".join(f"{k} {count(v)}" for k, v in
                                                                     s["switches_by_tier"].items()),
             usd(s["network_usd"]), gbps(s["bisection_gbps"]), f"dp{s['parallelism']['dp']} x pp{s['parallelism']['pp']}",
             f"{count(s['border']['count'])} x {s['border']['switch']}, {count(s['border']['wan_ports'])} WAN ports, "
             f"{count(s['border']['down_links'])} links to the top tier")
            for s in r["sites"]]
    out += table(["Site", "GPUs", "Fabric", "Switches", "Network", "Bisection", "Share of the job", "Border"],
                 rows, markdown, right=(1, 4, 5)) + [""]
    out += _heading("WAN links", markdown)
    rows = [(" - ".join(l["between"]), f"{l['count']} x {l['link_gbps']:g}G", gbps(l["capacity_gbps"]),
             f"{l['latency_ms']:,.2f}", f"{l['distance_km']:,.0f}" if l["distance_km"] is not None else "-",
             f"{l['loss']:g}" if l["loss"] else "-", usd(l["price_usd"])) for l in r["wan"]["links"]]
    out += table(["Sites", "Links", "Capacity", "One-way ms", "km", "Loss", "USD"], rows, markdown,
                 right=(2, 3, 4, 6)) + [""]
    out += _heading("Cost by category", markdown)
    total = c["total_usd"] or 1.0
    rows = [(cat, usd(v), f"{100 * v / total:.1f}%") for cat, v in c["by_category"].items() if v]
    rows.append(("total", usd(c["total_usd"]), "100.0%"))
    out += table(["Category", "USD", "Share"], rows, markdown, right=(1, 2))
    out += ["", f"Servers, not included above: {usd(c['servers_usd'])}.", f"Note: {c['note']}.", ""]
    out += _training_text(t, markdown)
    out += _heading("Across the WAN", markdown)
    what = ("one replica's gradients all-reduced between the sites" if x["crossing"] == "dp"
            else "each micro-batch's activations and gradients sent across the stage boundary")
    out += [f"Crossing: {x['crossing'].upper()} ({what}); {x['pattern']} pattern; "
            f"{x['bytes_per_site'] / 1e9:,.1f} GB per site per exchange, {x['wan_s']:,.3f} s at the design's WAN "
            f"({x['wan_latency_s'] * 1e3:,.1f} ms of it latency). Scheme {r['wan']['sync']}: "
            f"{x['exposed_s']:,.3f} s per step exposed, utilisation {100 * x['utilization']:.1f}% of the "
            f"{x['local_step_s']:,.3f} s step with a free WAN.", ""]
    req = r["wan_requirement"]
    levels = [f"{u:g}" for u in req["levels"]]
    rows = [(s["label"], SCHEME_TEXT[s["scheme"]], f"{100 * s['utilization']:.1f}%")
            + tuple(gbps(s["needed_gbps"][u]) if s["needed_gbps"][u] is not None else "latency-bound"
                    for u in levels) for s in req["schemes"]]
    out += _heading("WAN bandwidth needed", markdown, 3)
    out += table(["Scheme", "What", "Utilisation now"] + [f"for {100 * float(u):g}%" for u in levels], rows,
                 markdown, right=tuple(range(2, 3 + len(levels))))
    out += ["", "Utilisation: the step's speed with this WAN over its speed with a free one. Gb/s: total WAN "
            "capacity, every link scaled alike.", ""]
    out += _heading("Bill of materials", markdown)
    rows = [(b["category"], b["item"], b["tier"] or "-", count(b["quantity"]), usd(b["unit_price_usd"]),
             usd(b["price_usd"]), watts(b["power_w"])) for b in r["bom"]]
    out += table(["Category", "Item", "Tier", "Qty", "Unit USD", "USD", "Power"], rows, markdown,
                 right=(3, 4, 5, 6))
    if r["warnings"]:
        out += [""] + _heading("Warnings", markdown) + [f"- {w}" for w in r["warnings"]]
    return "\n".join(out).rstrip() + "\n"
