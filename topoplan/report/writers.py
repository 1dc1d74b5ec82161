"""Writers: a report dict as a terminal table, as markdown for a pull request, or as JSON.

Output is deterministic: fixed key order, fixed number formats, no timestamps or paths, so a report can
be committed next to its spec and diffed.
"""

from __future__ import annotations

import json

from ..flow import SPRAYING
from ..units import format_bytes

FORMATS = ("table", "markdown", "json")


def render(report: dict, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(report, indent=2, sort_keys=False) + "\n"
    if report["design"]["topology"] == "multi-site":
        from .sites import render_sites_text

        return render_sites_text(report, markdown=(fmt == "markdown"))
    return _text(report, markdown=(fmt == "markdown"))


def count(x) -> str:
    return f"{int(x):,}"


def usd(x) -> str:
    return f"${x:,.0f}"


def gbps(x) -> str:
    """Gb/s with a unit that keeps 3-4 significant digits."""
    if x >= 1e6:
        return f"{x / 1e6:,.3g} Pb/s"
    if x >= 1e4:
        return f"{x / 1e3:,.4g} Tb/s"
    return f"{x:,.4g} Gb/s"


def watts(x) -> str:
    return f"{x / 1e3:,.1f} kW" if x >= 1e4 else f"{x:,.0f} W"


def table(headers, rows, markdown: bool, right=()) -> list[str]:
    """Rows as an aligned plain-text table or a markdown table; ``right`` = indices of numeric columns."""
    if markdown:
        align = ["---:" if i in right else "---" for i in range(len(headers))]
        out = ["| " + " | ".join(headers) + " |", "| " + " | ".join(align) + " |"]
        out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
        return out
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h))
              for i, h in enumerate(headers)]

    def line(cells):
        return "  ".join(str(c).rjust(w) if i in right else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return [line(headers), line(["-" * w for w in widths])] + [line(r) for r in rows]


def _heading(text: str, markdown: bool, level: int = 2) -> list[str]:
    if markdown:
        return ["#" * level + " " + text, ""]
    return [text, "=" * len(text) if level == 1 else "-" * len(text)]


def _link_speeds(f: dict) -> str:
    """"400 Gb/s each", or the speed of each tier where they differ."""
    by_tier = f.get("link_gbps_by_tier") or {}
    if len(set(by_tier.values())) <= 1:
        return f"{gbps(f['link_gbps'])} each"
    return ", ".join(f"{tier} {gbps(speed)}" for tier, speed in by_tier.items())


def _text(r: dict, markdown: bool) -> str:
    d, f, c = r["design"], r["fabric"], r["cost"]
    out: list[str] = []
    out += _heading(f"topoplan report: {d['name']}", markdown, 1)
    if d["description"]:
        out += [d["description"], ""]
    plane_word = "plane" if f["planes"] == 1 else "planes"
    over = f["oversubscription"]
    ratio = ", ".join(f"{t} {v:g}:1" for t, v in over.items() if v != 1) or "non-blocking"
    pods = ""
    if f.get("pods"):
        per = "per plane, cores per rail" if f["pods"]["cores_per_rail"] else "per plane"
        pods = f", {count(f['pods']['count'])} pods of up to {count(f['pods']['leaves_per_pod'])} leaves {per}"
    summary = [
        ("Topology", f"{d['topology']}, {f['tiers']} tier(s), {f['planes']} {plane_word}, {ratio}{pods}"),
        ("GPUs", f"{count(d['gpus'])} on {count(d['servers'])} x {d['server']}"),
        ("Links", _link_speeds(f) + f"; {gbps(f['injection_gbps_per_gpu'])} injection per GPU"),
        ("Switches", f"{count(f['switches']['total'])} ("
         + ", ".join(f"{t} {count(n)}" for t, n in f["switches"]["by_tier"].items()) + ")"),
        ("Network links", f"{count(f['links']['total'])} ("
         + ", ".join(f"{t} {count(n)}" for t, n in f["links"]["by_tier"].items()) + ")"),
        ("Network cost", f"{usd(c['total_usd'])} total, {usd(c['per_gpu_usd'])} per GPU"),
        ("Cost per bandwidth", _per_gbps(c)),
        ("Power", f"{watts(r['power']['total_w'])} ({r['power']['per_gpu_w']:,.0f} W per GPU)"),
        ("Bisection", f"{gbps(r['bisection']['gbps'])} ({gbps(r['bisection']['per_gpu_gbps'])} per GPU)"),
        ("Random permutation", r["bisection"]["permutation_note"] if r["bisection"]["permutation_per_gpu_gbps"] is None
         else f"{gbps(r['bisection']['permutation_per_gpu_gbps'])} per GPU"),
        ("Routing", r["routing"]["engine"]),
        ("Diameter", f"{r['diameter_hops']} network hops"),
    ]
    out += table(["Metric", "Value"], summary, markdown)
    out.append("")

    out += _heading("Cost by category", markdown)
    total = c["total_usd"] or 1.0
    rows = [(cat, usd(v), f"{100 * v / total:.1f}%") for cat, v in c["by_category"].items() if v]
    rows.append(("total", usd(c["total_usd"]), "100.0%"))
    out += table(["Category", "USD", "Share"], rows, markdown, right=(1, 2))
    out += ["", f"Servers ({d['server']}), not included above: {usd(c['servers_usd'])}.",
            f"Note: {c['note']}.", ""]

    if r["collectives"]:
        out += _heading("Collectives", markdown)
        rows = [(x["name"], x["op"], _choice(x), count(x["group_size"]), count(x["groups"]),
                 _size(x["size_bytes"]), _fixed(x["time_s"], 1e3, 3), _fixed(x["algbw_GBps"]),
                 _fixed(x["busbw_GBps"]), f"{x['max_link_utilization']:.3f}", x["bottleneck"])
                for x in r["collectives"]]
        out += table(["Name", "Op", "Algorithm/protocol", "Ranks", "Groups", "Size", "Time ms", "algbw GB/s",
                      "busbw GB/s", "Max util", "Bottleneck"], rows, markdown, right=(3, 4, 5, 6, 7, 8, 9))
        out.append("")
        tiers = [t for t in ("nvlink", "pcie", "leaf", "spine", "core", "ocs")
                 if any(t in x["utilization_by_tier"] for x in r["collectives"])]
        out += _heading("Link utilization by tier (1.0 = as busy as the injection links)", markdown)
        rows = [[x["name"]] + [f"{x['utilization_by_tier'][t]:.3f}" if t in x["utilization_by_tier"] else "-"
                               for t in tiers] for x in r["collectives"]]
        out += table(["Collective"] + tiers, rows, markdown, right=tuple(range(1, len(tiers) + 1)))
        out.append("")
        out += _phases_text(r["collectives"], markdown)
        engines = sorted({(x["engine"], x["engine_label"]) for x in r["collectives"]})
        out += [f"Engine: {', '.join(f'{name} ({label})' for name, label in engines)}. Busbw uses nccl-tests "
                "factors; times include per-step latency.", ""]

    if r.get("training"):
        out += _training_text(r["training"], markdown)

    out += _heading("Bill of materials", markdown)
    rows = [(b["category"], b["item"], b["tier"] or "-", count(b["quantity"]), usd(b["unit_price_usd"]),
             usd(b["price_usd"]), watts(b["power_w"])) for b in r["bom"]]
    out += table(["Category", "Item", "Tier", "Qty", "Unit USD", "USD", "Power"], rows, markdown,
                 right=(3, 4, 5, 6))
    out.append("")
    if r["cabling"]:
        out += _heading("Links and cables", markdown)
        rows = [(x["tier"], f"{x['link_gbps']:g}", x["medium"], count(x["links"]), count(x["cables"]),
                 count(x["fibres"]) if x["fibres"] else "-", count(x["transceivers"]) if x["transceivers"] else "-")
                for x in r["cabling"]]
        out += table(["Tier", "Gb/s", "Medium", "Links", "Cables", "Fibres", "Transceivers"], rows, markdown,
                     right=(1, 3, 4, 5, 6))
        out += ["", "Cables as vendors count them: copper, one assembly per cage at the end with fewer "
                "(twin-port DACs, 1:2 splitters); optics, one per switch port as the vendor numbers them (or "
                "NIC cage) at the end with more. Fibres are priced one per link.", ""]
    out += [f"Bisection method: {r['bisection']['method']}."]
    if r["warnings"]:
        out += [""] + _heading("Warnings", markdown) + [f"- {w}" for w in r["warnings"]]
    return "\n".join(out).rstrip() + "\n"


def _phases_text(collectives: list, markdown: bool) -> list[str]:
    """Every phase: how crowded it is (network flows into one GPU, the oversubscription it climbs) and, under
    an engine with per-flow paths, its flows' fair-share completion times (bandwidth part)."""
    fair = any(p["flows"] for x in collectives for p in x["phases"])
    headers = ["Collective", "Phase", "Time ms", "Flows into a GPU", "Oversubscription"]
    if fair:
        headers += ["Flows", "Last ms", "Mean ms", "p50 ms", "p99 ms", "On hottest link"]
    rows = []
    for x in collectives:
        for p in x["phases"]:
            row = [x["name"], p["label"], _fixed(p["time_s"], 1e3, 3), count(p["flows_per_receiver"]),
                   f"{p['oversubscription']:g}:1"]
            if fair:
                f = p["flows"]
                row += ["-"] * 6 if f is None else \
                    [count(f["count"])] + [_fixed(f["completion_s"][k], 1e3, 3) for k in ("last_s", "mean_s", "p50_s",
                                                                                     "p99_s")] + [count(f["on_hottest_link"])]
            rows.append(row)
    out = _heading("Phases: crowding and flow completion", markdown)
    out += table(headers, rows, markdown, right=tuple(range(2, len(headers))))
    notes = [f"{x['name']}: over {len(x['seeds']['time_s'])} seeds the time is {_fixed(s['min'], 1e3, 3)} / "
             f"{_fixed(s['median'], 1e3, 3)} / {_fixed(s['max'], 1e3, 3)} ms (min / median / max)"
             for x in collectives if x.get("seeds") and (s := x["seeds"]["time_s_over_seeds"])]
    notes += [f"{x['name']}, {p['label']}: over seeds the mean flow ends at {_fixed(m['min'], 1e3, 3)} / "
              f"{_fixed(m['median'], 1e3, 3)} / {_fixed(m['max'], 1e3, 3)} ms, the last at {_fixed(last['min'], 1e3, 3)} / "
              f"{_fixed(last['median'], 1e3, 3)} / {_fixed(last['max'], 1e3, 3)} ms (bandwidth part)"
              for x in collectives for p in x["phases"]
              if p["flows"] and not p["flows"]["lockstep"] and p["flows"].get("over_seeds")
              and (m := p["flows"]["over_seeds"]["mean_s"]) and (last := p["flows"]["over_seeds"]["last_s"])]
    notes += [f"{x['name']}, {p['label']}: {p['flows_note']}" for x in collectives for p in x["phases"]
              if p["flows_note"]]
    if any(p["flows"] and p["flows"]["lockstep"] for x in collectives for p in x["phases"]):
        notes.append("Rings, chains and trees forward what they receive, so their flows end together with the last; "
                     "the flows of direct exchanges (all-to-all, send/receive) end as max-min fair sharing frees "
                     "links")
    optimistic = sorted({x["name"] for x in collectives if x["engine_label"] == SPRAYING
                         for p in x["phases"] if p["oversubscription"] > 1 or p["flows_per_receiver"] > 1})
    if optimistic:
        notes.append(f"Ideal spraying is a lower bound, most optimistic where a phase climbs oversubscribed tiers or "
                     f"several flows converge on one GPU: {', '.join(optimistic)}; `routing: ecmp-hash` shows "
                     "per-flow collisions")
    out += [""] + [f"- {n}." for n in notes] if notes else []
    return out + [""]


def _training_text(t: dict, markdown: bool) -> list[str]:
    par = t["parallelism"]
    layout = " x ".join(f"{d}{par[d]}" for d in ("tp", "cp", "pp", "dp") if par[d] > 1) or "one GPU"
    if par["ep"] > 1:
        layout += f" (ep{par['ep']})"
    step = t["step_time_s"] or 1.0
    out = _heading(f"Training step: {t['model']}", markdown)
    out += [f"{layout}; {count(t['global_batch'])} sequences per step in {count(t['microbatches'])} micro-batches "
            f"of {t['micro_batch']}; {t['schedule']} schedule"
            + (f" with {t['virtual_stages']} chunks" if t["virtual_stages"] > 1 else "")
            + f"; recompute {t['recompute']}; ZeRO-{t['zero']}; overlap: {', '.join(t['overlap']) or 'none'}.", ""]
    compute = "compute (per kernel)" if t["compute_model"] == "per-op" else "compute (flat matmul rate)"
    parts = [(compute, t["compute_s"]), ("pipeline bubble", t["bubble_s"])]
    parts += [(f"exposed {k.upper()}", v) for k, v in t["exposed_s"].items() if v or t["unoverlapped_s"][k]]
    parts += [("optimizer", t["optimizer_s"])] + ([("compression encode/decode", t["policy_compute_s"])]
                                                   if t["policy_compute_s"] else [])
    rows = [(name, f"{v:,.3f}", f"{100 * v / step:.1f}%") for name, v in parts] + \
        [("step", f"{t['step_time_s']:,.3f}", "100.0%")]
    out += table(["Part", "Seconds", "Share"], rows, markdown, right=(1, 2))
    summary = [
        ("MFU / HFU", f"{100 * t['mfu']:.1f}% / {100 * t['hfu']:.1f}% of the BF16 peak"),
        ("Tokens/s", f"{t['tokens_per_s']:,.0f} ({t['tokens_per_s_per_gpu']:,.0f} per GPU)"),
        ("Cost per million tokens", f"${t['usd_per_mtok']:,.4f} (cluster at {usd(t['usd_per_hour'])} per hour)"),
        ("Memory per GPU", f"{t['memory_gb']['total']:,.1f} GB of {t['memory_gb']['hbm']:,.0f} GB (parameters "
         f"{t['memory_gb']['parameters']:,.1f}, gradients {t['memory_gb']['gradients']:,.1f}, optimizer "
         f"{t['memory_gb']['optimizer']:,.1f}, activations {t['memory_gb']['activations']:,.1f})"),
    ]
    if t["time_to_train_days"] is not None:
        summary.insert(2, ("Time to train", f"{t['time_to_train_days']:,.1f} days"))
    out += [""] + table(["Metric", "Value"], summary, markdown)
    rows = [(x["class"], x["op"], x["choice"], _size(x["size_bytes"]), f"{x['runs']:,.4g} per {x['per']}",
             _fixed(x["time_s"], 1e3, 3)) for x in t["collectives"]]
    if rows:
        out += [""] + table(["Class", "Op", "Algorithm/protocol", "Size", "Runs", "Time ms"], rows, markdown,
                            right=(3, 5))
    return out + [""]


def _choice(collective: dict) -> str:
    """What ran: ``ring/Simple``, marked ``(auto)`` when NCCL's tuner picked it."""
    text = f"{collective['algorithm']}/{collective['protocol']}"
    return text + " (auto)" if collective.get("algorithm_requested") == "auto" else text


def _per_gbps(cost: dict) -> str:
    parts = [f"${cost[key]:,.2f} per Gb/s of {what}" for key, what in
             (("per_injection_gbps_usd", "injection"), ("per_bisection_gbps_usd", "bisection"))
             if cost.get(key) is not None]
    return "; ".join(parts) or "-"


def _fixed(value, scale: float = 1.0, digits: int = 2) -> str:
    return "unreachable" if value is None else f"{value * scale:,.{digits}f}"


def _size(size: int) -> str:
    return format_bytes(size)


def _value(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:,.6g}" if abs(x) < 1e6 else f"{x:,.0f}"
    return str(x)


def _change(row: dict) -> str:
    if row["delta"] is None:
        return "changed" if row["base"] != row["head"] else ""
    if row["delta"] == 0:
        return ""
    relative = f" ({row['relative'] * 100:+.1f}%)" if row["relative"] is not None else ""
    return f"{row['delta']:+,.6g}{relative}"


def render_compare(comparison: dict, fmt: str) -> str:
    """A ``compare`` result as a table, as markdown for a pull-request comment, or as JSON."""
    if fmt == "json":
        return json.dumps(comparison, indent=2) + "\n"
    markdown = fmt == "markdown"
    base, head = comparison["base"], comparison["head"]
    out = _heading(f"topoplan compare: {base['source']} -> {head['source']}", markdown, 2 if markdown else 1)
    changed = [r for r in comparison["metrics"] if _change(r)]
    headline = [f"{r['metric']} {_change(r)}" for r in changed if r["better"]][:6]
    out += [("**Summary:** " if markdown else "Summary: ") + ("; ".join(headline) if headline else "no metric changed"),
            ""]
    if comparison["regressions"]:
        out += [("**Regressions:** " if markdown else "Regressions: ") + ", ".join(comparison["regressions"]), ""]
    out += _heading("Spec changes", markdown, 3 if markdown else 2)
    if comparison["spec_changes"]:
        rows = [(f"`{c['path']}`" if markdown else c["path"], _value(c["base"]), _value(c["head"]))
                for c in comparison["spec_changes"]]
        out += table(["Field", "Base", "Head"], rows, markdown)
    else:
        out.append("none")
    out.append("")
    out += _heading("Metrics", markdown, 3 if markdown else 2)
    rows = [(r["metric"], _value(r["base"]), _value(r["head"]), _change(r), "REGRESSION" if r["regression"] else "")
            for r in comparison["metrics"]]
    out += table(["Metric", "Base", "Head", "Change", ""], rows, markdown, right=(1, 2, 3))
    return "\n".join(out).rstrip() + "\n"


def render_optimize(result: dict, fmt: str) -> str:
    """An ``optimize`` result: the Pareto designs first, then every candidate, then what was infeasible."""
    if fmt == "json":
        return json.dumps(result, indent=2) + "\n"
    markdown = fmt == "markdown"
    front = set(result["pareto"])
    out = _heading(f"topoplan optimize: {result['space']}", markdown, 1)
    infeasible = result["infeasible"]
    out += [f"{len(result['candidates'])} feasible candidates, {infeasible['count']} infeasible; "
            f"{len(front)} on the Pareto front (cost per GPU against completion time, per GPU count).", ""]
    rows = [(("**" + c["name"] + "**") if markdown and c["name"] in front else c["name"], count(c["gpus"]),
             c["topology"], c["switch"], f"{c['oversubscription']:g}:1", c["tiers"], usd(c["cost_per_gpu_usd"]),
             f"{c['time_s'] * 1e3:,.2f}", "yes" if c["name"] in front else "")
            for c in sorted(result["candidates"], key=lambda c: (c["gpus"], c["time_s"], c["cost_per_gpu_usd"]))]
    out += _heading("Candidates", markdown)
    out += table(["Design", "GPUs", "Topology", "Switch", "Oversub.", "Tiers", "USD/GPU", "Time ms", "Pareto"], rows,
                 markdown, right=(1, 5, 6, 7))
    if result.get("rank_by") and result.get("ranking"):
        by_name = {c["name"]: c for c in result["candidates"]}
        names = {"step_time_s": "step time", "mfu": "MFU", "tokens_per_s_per_musd": "tokens/s per million USD",
                 "usd_per_mtok": "cost per million tokens"}
        out += [""] + _heading(f"Ranked by {names[result['rank_by']]} (training-step model)", markdown)
        best = set(result.get("best_layouts", {}).values())
        rows = [(rank, name, count(by_name[name]["gpus"]), by_name[name]["layout"],
                 f"{by_name[name]['step_time_s']:,.3f}", f"{100 * by_name[name]['mfu']:.1f}%",
                 f"{by_name[name]['tokens_per_s_per_musd']:,.1f}", f"${by_name[name]['usd_per_mtok']:,.4f}",
                 "yes" if name in best else "")
                for rank, name in enumerate(result["ranking"], 1)]
        out += table(["Rank", "Design", "GPUs", "Layout", "Step s", "MFU", "Tokens/s per $M", "USD/Mtok",
                      "Best layout of its fabric"], rows, markdown, right=(0, 2, 4, 5, 6, 7))
    elif result.get("ranking"):
        by_name = {c["name"]: c for c in result["candidates"]}
        out += [""] + _heading("Ranked by goodput-adjusted throughput per dollar", markdown)
        out += ["Workload runs per second (1 / weighted completion time) times goodput, per million USD of "
                "cluster (servers and network); interruptions count NIC-link and ToR failures only where "
                "they stop the job.", ""]
        rows = []
        for rank, name in enumerate(result["ranking"], 1):
            c = by_name[name]
            rows.append((rank, name, count(c["gpus"]), c["planes"], f"{c['interruptions_per_day']:.3f}",
                         _percent(c["goodput"]), usd(c["cluster_usd"]), f"{c['time_s'] * 1e3:,.2f}",
                         f"{c['goodput_per_s_per_musd']:.4g}"))
        out += table(["Rank", "Design", "GPUs", "Planes", "Interruptions/day", "Goodput", "Cluster USD", "Time ms",
                      "Runs/s per $M"], rows, markdown, right=(0, 2, 3, 4, 5, 6, 7, 8))
    if infeasible["reasons"]:
        out += [""] + _heading("Infeasible", markdown)
        out += table(["Reason", "Candidates"], [(r, n) for r, n in infeasible["reasons"].items()], markdown, right=(1,))
    return "\n".join(out).rstrip() + "\n"


def render_sweep(result: dict, fmt: str) -> str:
    """A collective sweep in nccl-tests' own layout (``#`` header lines, one row per size), as a markdown
    table, or as JSON; with a log, measured busbw and the error beside, and a summary line."""
    if fmt == "json":
        return json.dumps(result, indent=2) + "\n"
    markdown = fmt == "markdown"
    measured = bool(result["log"])
    title = (f"topoplan nccl: {result['op']} over {result['group']} ({result['group_size']:,} ranks on "
             f"{result['servers_per_group']:,} servers, {result['groups']:,} group(s)) of {result['design']}, "
             f"engine {result['engine']}" + (f"; measured: {result['log']}" if measured else ""))

    def fx(x, digits=2):
        return "-" if x is None else f"{x:.{digits}f}"

    out = []
    if markdown:
        out += [f"**{title}**", ""]
        headers = ["size (B)", "count", "type", "redop", "root", "time (us)", "algbw (GB/s)", "busbw (GB/s)",
                   "algorithm", "protocol"] + (["measured busbw", "error"] if measured else [])
        rows = [[f"{r['size_bytes']:,}", f"{r['count']:,}", r["type"], r["redop"], r["root"], fx(r["time_us"]),
                 fx(r["algbw_GBps"]), fx(r["busbw_GBps"]), r["algorithm"], r["protocol"]]
                + ([fx(r["measured_busbw_GBps"]), "-" if r["error"] is None else f"{r['error'] * 100:+.1f}%"]
                   if measured else []) for r in result["rows"]]
        out += table(headers, rows, True, right=(0, 1, 4, 5, 6, 7, 10, 11))
    else:
        out.append(f"# {title}")
        head = f"#{'size':>11} {'count':>12} {'type':>8} {'redop':>6} {'root':>6} {'time':>8} {'algbw':>7} {'busbw':>7}"
        units = f"#{'(B)':>11} {'(elements)':>12} {'':>8} {'':>6} {'':>6} {'(us)':>8} {'(GB/s)':>7} {'(GB/s)':>7}"
        if measured:
            head += f" {'measured':>9} {'error':>7}"
            units += f" {'(GB/s)':>9} {'':>7}"
        out += [head + "  algorithm/protocol", units]
        for r in result["rows"]:
            line = (f"{r['size_bytes']:>12} {r['count']:>12} {r['type']:>8} {r['redop']:>6} {r['root']:>6} "
                    f"{fx(r['time_us']):>8} {fx(r['algbw_GBps']):>7} {fx(r['busbw_GBps']):>7}")
            if measured:
                error = "-" if r["error"] is None else f"{r['error'] * 100:+.1f}%"
                line += f" {fx(r['measured_busbw_GBps']):>9} {error:>7}"
            out.append(line + f"  {r['algorithm']}/{r['protocol']}")
    summary = result["summary"]
    if summary:
        out += ["", ("**Summary:** " if markdown else "# Summary: ") +
                f"over {summary['sizes']} sizes from {format_bytes(summary['from_bytes'])}, predicted busbw is off by "
                f"{summary['median_abs_error'] * 100:.1f}% (median) and {summary['worst_abs_error'] * 100:.1f}% "
                "(worst) against the log"]
    return "\n".join(out).rstrip() + "\n"


def _ratio(x) -> str:
    return "-" if x is None else f"{x:.3f}x"


def _percent(x, digits: int = 2) -> str:
    return "-" if x is None else f"{x * 100:.{digits}f}%"


def render_resilience(result: dict, fmt: str) -> str:
    """A ``resilience`` result: per scenario one row per symmetry class or explicit set (random samples
    summarised), then the interruption rates and goodput."""
    if fmt == "json":
        return json.dumps(result, indent=2) + "\n"
    markdown = fmt == "markdown"
    names = [c["name"] for c in result["healthy"]["collectives"]]
    out = _heading(f"topoplan resilience: {result['design']} ({count(result['gpus'])} GPUs)", markdown, 1)
    healthy = ", ".join(f"{c['name']} {_fixed(c['time_s'], 1e3, 3)} ms" for c in result["healthy"]["collectives"])
    out += [f"Healthy: bisection {gbps(result['healthy']['bisection_gbps'] or 0)}; {healthy or 'no collectives'}. "
            f"Degraded runs re-route every collective with the failed links masked (engine "
            f"{result['engine']}); slowdown = degraded time / healthy time.", ""]
    for s in result["scenarios"]:
        how = {"every": f"every single {s['fail']}: {count(s['elements'])} elements in {s['classes']} symmetry "
                        f"class(es), {s['runs']} runs" + (f", {s['split_classes']} class(es) not symmetric, run "
                                                           f"member by member" if s["split_classes"] else ""),
               "random": f"{len(s['outcomes'])} random sample(s) of {s['fail']} failures",
               "index": f"{s['fail']} {s['outcomes'][0]['label'] if s['outcomes'] else ''}"}[s["mode"]]
        out += _heading(f"{s['name']}: {how}", markdown, 2)
        headers = ["Failed", "Count", "Job", "GPUs stopped", "Worst host bw", "Bisection"] + \
                  [f"{n} slowdown" for n in names]
        rows = []
        outcomes = s["outcomes"]
        if s["mode"] == "random" and len(outcomes) > 1:
            out += [f"Job stops in {_percent(s['stop_fraction'], 1)} of the samples; slowdown of the others: "
                    "median / 95th percentile / worst.", ""]
            running = [o for o in outcomes if not o["job_stops"]]
            cells = []
            for i in range(len(names)):
                values = sorted(o["collectives"][i]["slowdown"] for o in running
                                if o["collectives"][i]["slowdown"] is not None)
                cells.append("-" if not values else " / ".join(
                    _ratio(values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))]) for q in (0.5, 0.95, 1.0)))
            bis = [o["bisection_fraction"] for o in running if o["bisection_fraction"] is not None]
            rows.append(("all samples", count(len(outcomes)), _percent(s["stop_fraction"], 1) + " stop",
                         count(max((o["stopped_gpus"] for o in outcomes), default=0)),
                         _percent(min((o["worst_server_fraction"] for o in outcomes), default=1.0)),
                         _percent(min(bis)) if bis else "-", *cells))
        else:
            for o in outcomes:
                rows.append((o["label"], count(o["weight"]), "stops" if o["job_stops"] else "runs",
                             count(o["stopped_gpus"]), _percent(o["worst_server_fraction"]),
                             _percent(o["bisection_fraction"]),
                             *[_ratio(c["slowdown"]) for c in o["collectives"]]))
        out += table(headers, rows, markdown, right=tuple(range(1, len(headers)))) + [""]
    i, g = result["interruptions"], result["goodput"]
    out += _heading("Interruptions and goodput", markdown, 2)
    out += [f"Rates: {', '.join(i['rates'])}; failure units: "
            + ", ".join(f"{count(v)} {k}" for k, v in result["components"].items() if v) + "."]
    if i.get("stop_fractions"):
        out += ["Failures of " + ", ".join(f"{unit} stop the job {_percent(v)} of the time"
                                          for unit, v in i["stop_fractions"].items())
                + " (from the exhaustive scenarios); their rates are scaled by it."]
    out += [""]
    rows = [("interruptions per day", f"{i['per_day']:,.3g}"), ("job MTBF", f"{i['mtbf_h']:,.3g} h"),
            ("P(at least one in an hour)", _percent(i["p_any_in_hour"], 1)),
            ("P(at least one in a day)", _percent(i["p_any_in_day"], 1))]
    if g is not None:
        rows += [("checkpoint write / restart", f"{g['checkpoint_s']:,.0f} s / {g['restart_s']:,.0f} s"),
                 ("checkpoint interval (Young / Daly)", f"{g['young_interval_s']:,.0f} s / {g['daly_interval_s']:,.0f} s"),
                 ("time wasted at Daly's interval", _percent(g["waste_fraction"])),
                 ("goodput", _percent(g["goodput"])),
                 ("GPU-hours lost per day", f"{g['lost_gpu_hours_per_day']:,.0f}")]
        if g["lost_usd_per_day"] is not None:
            rows.append(("lost per day", usd(g["lost_usd_per_day"])))
    out += table(["Figure", "Value"], rows, markdown, right=(1,))
    top = sorted(i["by_cause"], key=lambda c: -c["per_day"])[:5]
    if top:
        out += ["", "Largest causes: " + "; ".join(f"{c['cause']} {c['per_day']:,.3g}/day" for c in top) + "."]
    return "\n".join(out).rstrip() + "\n"


def render_scale(studies: list, fmt: str) -> str:
    """``topoplan scale``: per design, one row per GPU count."""
    if fmt == "json":
        return json.dumps({"studies": studies}, indent=2) + "\n"
    markdown = fmt == "markdown"
    out: list[str] = []
    out += _heading("topoplan scale", markdown, 1)
    for study in studies:
        out += _heading(f"{study['design']} ({study['topology']}, global batch {study['batch']})", markdown)
        rows = []
        for p in study["points"]:
            if p["infeasible"] and p["step_time_s"] is None:
                rows.append((count(p["gpus"]), "-", "-", "-", "-", "-", "-", "-", "infeasible: " + p["infeasible"]))
                continue
            rows.append((count(p["gpus"]), count(p["global_batch"]), f"{p['step_time_s']:,.3f}",
                         f"{100 * p['mfu']:.1f}%", f"{p['tokens_per_s'] / p['gpus']:,.0f}",
                         "-" if p["scaling_efficiency"] is None else f"{100 * p['scaling_efficiency']:.1f}%",
                         f"{100 * p['exposed_communication_share']:.1f}% / {100 * p['bubble_share']:.1f}%",
                         f"${p['usd_per_mtok']:,.4f}", p["infeasible"] or ""))
        out += table(["GPUs", "Batch", "Step s", "MFU", "Tokens/s/GPU", "Efficiency", "Comm / bubble", "USD/Mtok",
                      "Note"], rows, markdown, right=(0, 1, 2, 3, 4, 5, 6, 7))
        out.append("")
    out.append("Efficiency: tokens/s per GPU against the smallest size that ran. Comm: exposed communication "
               "share of the step; bubble: the pipeline's idle share.")
    return "\n".join(out) + "\n"
