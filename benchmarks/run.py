"""Performance budgets of DESIGN section 11, measured side by side in one run.

    python benchmarks/run.py                 all cases, a table on stdout
    python benchmarks/run.py --markdown F    also write the table and the machine to F (docs/performance.md)
    python benchmarks/run.py --case NAME     one case in this process (used internally)

Each case runs in a fresh subprocess so that its peak memory (max RSS, imports included) is its own.
Budgets are checked here, never in the test suite: machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _load(spec: str):
    from topoplan.catalog import load_catalog
    from topoplan.spec import load_design

    catalog = load_catalog()
    return load_design(str(ROOT / spec), catalog), catalog


def case_generate_bom_131k():
    """Generate + bill of materials: 131,072 GPUs, two planes of three-tier fat-tree, 64x800G switches run as 128x400G."""
    from topoplan.cost import bill_of_materials
    from topoplan.generators import generate

    design, catalog = _load("designs/fat-tree-131k-twin-plane.yaml")
    start = time.perf_counter()
    topology = generate(design, catalog)
    bom = bill_of_materials(topology, design, catalog)
    elapsed = time.perf_counter() - start
    return elapsed, {"gpus": design.gpus, "nodes": topology.num_nodes, "links": topology.num_links,
                     "switches": bom.quantity("switches"), "cost_per_gpu_usd": round(bom.total_usd / design.gpus)}


CASES = {
    "generate-bom-131k": (case_generate_bom_131k, 2.0, 1024),
}


def run_case(name: str) -> dict:
    func, budget_s, budget_mib = CASES[name]
    elapsed, figures = func()
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"case": name, "doc": func.__doc__.strip(), "seconds": elapsed, "peak_mib": peak_mib,
            "budget_s": budget_s, "budget_mib": budget_mib, "figures": figures,
            "ok": elapsed <= budget_s and (budget_mib is None or peak_mib <= budget_mib)}


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()} {platform.release()}"


def table(results: list[dict]) -> str:
    lines = ["| case | budget | measured | peak memory | figures | within budget |",
             "| --- | ---: | ---: | ---: | --- | --- |"]
    for r in results:
        budget = f"<= {r['budget_s']:g} s" + (f", <= {r['budget_mib']:,} MiB" if r["budget_mib"] else "")
        figures = ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in r["figures"].items())
        lines.append(f"| {r['doc']} | {budget} | {r['seconds']:.2f} s | {r['peak_mib']:,.0f} MiB | {figures} | "
                     f"{'yes' if r['ok'] else 'NO'} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", choices=sorted(CASES))
    parser.add_argument("--markdown", metavar="FILE")
    args = parser.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case)))
        return 0
    results = []
    for name in CASES:
        done = subprocess.run([sys.executable, __file__, "--case", name], capture_output=True, text=True)
        if done.returncode:
            print(done.stderr, file=sys.stderr)
            return 1
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    text = table(results)
    print(text)
    print(f"\nmachine: {machine()}")
    if args.markdown:
        Path(args.markdown).write_text(
            "# Performance\n\nMeasured by `python benchmarks/run.py --markdown docs/performance.md` "
            f"on {time.strftime('%Y-%m-%d')}.\n\nMachine: {machine()}.\n\n{text}\n\n"
            "Peak memory is the process's maximum resident set size, Python and library imports included.\n")
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
