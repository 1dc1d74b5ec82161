"""Writes docs/training.md and docs/training_scaling.png: the training-step model, the published runs
against it, a worked example, and MFU and scaling efficiency of a 405B-class job from 1k to 131k GPUs on
four fabrics. Every number in the document comes from running topoplan here.

Run from the repository root: python docs/training_study.py  (a few seconds)
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from topoplan import yamlio  # noqa: E402
from topoplan.catalog import load_catalog  # noqa: E402
from topoplan.pipeline import evaluate  # noqa: E402
from topoplan.report import plots  # noqa: E402
from topoplan.scaling import capital_usd, largest_within_budget, scale_data, study_dict  # noqa: E402
from topoplan.spec import design_from_data, load_design  # noqa: E402

# published figure, what it measures, the design that sets the run up (training_and_resilience.md A7)
PUBLISHED = [
    ("megatron-530b-2240", "MFU", 0.542, "Korthikanti et al. MLSys'23 abstract"),
    ("gpt3-175b-12288", "MFU", 0.552, "MegaScale NSDI'24 abstract"),
    ("deepseek-v3-2048", "tokens/s per GPU", 1528.0, "DeepSeek-V3: 180K GPU-hours per trillion tokens"),
]
SIZES = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
FAMILIES = [("fat-tree", "fat-tree", {}), ("fat-tree-2to1", "fat-tree", {"oversubscription": 2}),
            ("rail-optimized", "rail-optimized", {}), ("rail-only", "rail-only", {})]


# equal-budget study: B200-class chips on every fabric; RailX nodes are the same chip directly wired
BUDGET_FABRICS = [
    ("fat-tree", "dgx-b200", {"topology": "fat-tree", "switch": "nvidia-sn5600"}),
    ("rail-optimized", "dgx-b200", {"topology": "rail-optimized", "switch": "nvidia-sn5600"}),
    ("rail-only", "dgx-b200", {"topology": "rail-only", "switch": "nvidia-sn5600"}),
    ("railx", "railx-node-8", {"topology": "railx", "railx": {"ocs": "polatis-7000-384"}}),
]
MODEL_PARALLEL = 128            # tp8 x pp16 of the 405B job: every size is a whole number of pipelines
RAILX_MAX_SIDE = 145            # 72 rails per side (8 chips x 36 ports / 4) keep a row of up to 145 a full mesh


def _sizes_for(topology: str, top: int) -> list[int]:
    """GPU counts a fabric can be bought in: whole pipelines; for RailX, whole grids no more than 2:1."""
    if topology != "railx":
        return list(range(MODEL_PARALLEL, top + 1, MODEL_PARALLEL))
    sizes = {8 * rows * columns for rows in range(1, RAILX_MAX_SIDE + 1)
             for columns in range(rows, min(2 * rows, RAILX_MAX_SIDE) + 1)
             if (8 * rows * columns) % MODEL_PARALLEL == 0 and 8 * rows * columns <= top}
    return sorted(sizes)


def _railx_grid(data: dict, gpus: int) -> dict:
    """The spec with the squarest RailX grid that is no more than 2:1 (``_sizes_for`` guarantees one)."""
    out = copy.deepcopy(data)
    if out["fabric"]["topology"] == "railx":
        nodes = gpus // 8
        rows = max(r for r in range(1, RAILX_MAX_SIDE + 1) if nodes % r == 0 and r <= nodes // r <= 2 * r)
        out["fabric"]["railx"] = {**out["fabric"]["railx"], "columns": nodes // rows, "rows": rows}
    return out


def equal_budget(catalog) -> list[dict]:
    """For each budget (the fat-tree's capital cost at each study size), the GPUs every fabric buys with it
    and the 405B step there, the global batch kept at the multiple of dp nearest 16,384 sequences."""
    base, _lines = yamlio.read(ROOT / "designs" / "llama3-405b-131k.yaml")
    base.pop("targets", None)
    reference = None
    studies = []
    for label, server, fabric in BUDGET_FABRICS:
        data = copy.deepcopy(base)
        data["name"] = f"llama3-405b-{label}"
        data["cluster"] = {"server": server, "gpus": SIZES[0]}
        data["fabric"] = copy.deepcopy(fabric)
        if reference is None:
            reference = [capital_usd(data, catalog, n) for n in SIZES]
        sizes = _sizes_for(fabric["topology"], 2 * SIZES[-1])
        points, known = [], {}
        for budget in reference:
            bought = largest_within_budget(data, catalog, budget, sizes, resize=_railx_grid, known=known)
            if bought is None:
                points.append({"budget_usd": budget, "gpus": None})
                continue
            gpus, capital = bought
            sized = _railx_grid(data, gpus)
            sized["cluster"] = {"server": server, "gpus": gpus}
            dp = gpus // MODEL_PARALLEL
            training = sized["workload"]["training"]
            training["global_batch"] = max(1, round(training["global_batch"] / dp)) * dp
            sized["workload"]["parallelism"] = {"tp": 8, "pp": 16, "dp": dp}
            evaluation = evaluate(design_from_data(sized, catalog), catalog)
            step = evaluation.training
            points.append({"budget_usd": budget, "capital_usd": capital, "gpus": gpus,
                           "global_batch": training["global_batch"], "mfu": step.mfu,
                           "tokens_per_s": step.tokens_per_s,
                           "network_usd_per_gpu": evaluation.bom.total_usd / gpus,
                           "usd_per_mtok": evaluation.price.usd_per_hour / 3600 / step.tokens_per_s * 1e6})
        first = next(p for p in points if p["gpus"])
        for p in points:
            if p["gpus"]:
                p["scaling_efficiency"] = (p["tokens_per_s"] / p["gpus"]) / (first["tokens_per_s"] / first["gpus"])
        studies.append({"design": data["name"], "topology": fabric["topology"], "points": points})
    return studies


def _budget_table(studies) -> list[str]:
    head = "| budget (servers + network) | " + " | ".join(s["topology"] for s in studies) + " |"
    out = [head, "|---:|" + "---:|" * len(studies)]
    for i, budget in enumerate(p["budget_usd"] for p in studies[0]["points"]):
        cells = []
        for study in studies:
            p = study["points"][i]
            cells.append("cannot buy one pipeline" if not p["gpus"] else
                         f"{p['gpus']:,} GPUs, MFU {100 * p['mfu']:.1f}%, {p['tokens_per_s'] / 1e6:.2f} Mtok/s")
        out.append(f"| ${budget / 1e6:,.0f}M | " + " | ".join(cells) + " |")
    return out


def validation(catalog) -> list[str]:
    rows = ["| design | published | model | miss | where the time goes (model) |", "|---|---|---|---|---|"]
    for name, what, published, source in PUBLISHED:
        step = evaluate(load_design(ROOT / "designs" / f"{name}.yaml", catalog), catalog).training
        value = step.mfu if what == "MFU" else step.tokens_per_s / step.gpus
        shares = ", ".join(f"{k} {100 * v / step.step_s:.1f}%" for k, v in
                           [("compute", step.compute_s), ("bubble", step.bubble_s)] + list(step.exposed_s.items())
                           if v > 0)
        if what == "MFU":
            text = (f"{100 * published:.1f}% MFU ({source})", f"{100 * value:.1f}%",
                    f"{100 * (value - published):+.1f} points")
        else:
            text = (f"{published:,.0f} {what} ({source})", f"{value:,.0f}", f"{100 * (value / published - 1):+.0f}%")
        rows.append(f"| {name} | {text[0]} | {text[1]} | {text[2]} | {shares} |")
    return rows


def scaling(catalog) -> list[dict]:
    data, _lines = yamlio.read(ROOT / "designs" / "llama3-405b-131k.yaml")
    studies = []
    for label, topology, extra in FAMILIES:
        variant = copy.deepcopy(data)
        variant["name"] = f"llama3-405b-{label}"
        variant["fabric"] = {"topology": topology, "switch": "nvidia-sn5600", **extra}
        variant.pop("targets", None)
        studies.append(study_dict(scale_data(variant, catalog, SIZES, "fixed")))
    return studies


def _scaling_tables(studies) -> list[str]:
    out = []
    for study in studies:
        out += ["", f"**{study['design']}** ({study['topology']})", "",
                "| GPUs | dp | micro-batches | MFU | scaling efficiency | exposed comm | bubble | network $/GPU | $/Mtok |",
                "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for p in study["points"]:
            if p["step_time_s"] is None:
                out.append(f"| {p['gpus']:,} | | | infeasible: {p['infeasible']} | | | | | |")
                continue
            dp = p["gpus"] // 128
            out.append(f"| {p['gpus']:,} | {dp:,} | {p['global_batch'] // dp:,} | {100 * p['mfu']:.1f}% | "
                       f"{100 * (p['scaling_efficiency'] or 0):.1f}% | {100 * p['exposed_communication_share']:.1f}% | "
                       f"{100 * p['bubble_share']:.1f}% | {p['network_usd_per_gpu']:,.0f} | {p['usd_per_mtok']:.3f} |")
    return out


def _example(catalog) -> list[str]:
    from topoplan.report import build_report
    from topoplan.report.writers import render

    design = load_design(ROOT / "designs" / "llama3-405b-131k.yaml", catalog)
    text = render(build_report(evaluate(design, catalog)), "markdown")
    section = text[text.index("## Training step"):text.index("## Bill of materials")].strip()
    return ["```", "topoplan report designs/llama3-405b-131k.yaml --format markdown", "```", "",
            section.replace("## Training step", "#### Training step")]


def render(catalog):
    """(the text of docs/training.md, the scaling figure)."""
    studies = scaling(catalog)
    budget = equal_budget(catalog)
    text = (ROOT / "docs" / "training_template.md").read_text()
    text = text.replace("{{VALIDATION}}", "\n".join(validation(catalog)))
    text = text.replace("{{EXAMPLE}}", "\n".join(_example(catalog)))
    text = text.replace("{{SCALING}}", "\n".join(_scaling_tables(studies)).strip())
    text = text.replace("{{BUDGET}}", "\n".join(_budget_table(budget)))
    return text, plots.scale_figure(studies), plots.budget_figure(budget)


def main() -> None:
    text, scaling_fig, budget_fig = render(load_catalog())
    (ROOT / "docs" / "training_scaling.png").write_bytes(plots.to_bytes(scaling_fig, "png"))
    (ROOT / "docs" / "training_budget.png").write_bytes(plots.to_bytes(budget_fig, "png"))
    (ROOT / "docs" / "training.md").write_text(text)
    print("wrote docs/training.md, docs/training_scaling.png and docs/training_budget.png", file=sys.stderr)


if __name__ == "__main__":
    main()
