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
from topoplan.scaling import scale_data, study_dict  # noqa: E402
from topoplan.spec import load_design  # noqa: E402

# published figure, what it measures, the design that sets the run up (training_and_resilience.md A7)
PUBLISHED = [
    ("megatron-530b-2240", "MFU", 0.542, "Korthikanti et al. MLSys'23 abstract"),
    ("gpt3-175b-12288", "MFU", 0.552, "MegaScale NSDI'24 abstract"),
    ("deepseek-v3-2048", "tokens/s per GPU", 1528.0, "DeepSeek-V3: 180K GPU-hours per trillion tokens"),
]
SIZES = [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
FAMILIES = [("fat-tree", "fat-tree", {}), ("fat-tree-2to1", "fat-tree", {"oversubscription": 2}),
            ("rail-optimized", "rail-optimized", {}), ("rail-only", "rail-only", {})]


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
    text = (ROOT / "docs" / "training_template.md").read_text()
    text = text.replace("{{VALIDATION}}", "\n".join(validation(catalog)))
    text = text.replace("{{EXAMPLE}}", "\n".join(_example(catalog)))
    text = text.replace("{{SCALING}}", "\n".join(_scaling_tables(studies)).strip())
    return text, plots.scale_figure(studies)


def main() -> None:
    text, fig = render(load_catalog())
    (ROOT / "docs" / "training_scaling.png").write_bytes(plots.to_bytes(fig, "png"))
    (ROOT / "docs" / "training.md").write_text(text)
    print("wrote docs/training.md and docs/training_scaling.png", file=sys.stderr)


if __name__ == "__main__":
    main()
