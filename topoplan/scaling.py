"""Scaling study: one design's fabric regenerated at several GPU counts, its training step modelled at each.

``scale_design(file, catalog, gpus)`` reads the spec once, then for each size writes the cluster size
into it, lets dp follow (tp, cp and pp stay), scales or keeps the global batch, and runs the whole
pipeline on the result. A size the fabric or the layout cannot reach is an outcome ("infeasible", with the
reason), not an error. Scaling efficiency is per-GPU throughput against the smallest size that ran.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

from . import yamlio
from .catalog import Catalog
from .errors import TopoplanError
from .spec import design_from_data

BATCH_MODES = ("fixed", "per-gpu")
MAX_SIZES = 64


@dataclass
class ScalePoint:
    gpus: int
    global_batch: int | None = None
    step_s: float | None = None
    mfu: float | None = None
    tokens_per_s: float | None = None
    usd_per_mtok: float | None = None
    network_usd_per_gpu: float | None = None
    exposed_share: float | None = None     # exposed communication / step
    bubble_share: float | None = None
    efficiency: float | None = None        # per-GPU throughput / that of the smallest size that ran
    infeasible: str = ""


@dataclass
class ScaleStudy:
    design: str
    file: str
    topology: str
    batch: str
    points: list


def _sized(data: dict, gpus: int, server_gpus: int, base_gpus: int, batch_mode: str):
    """The spec's data at ``gpus`` GPUs (None and the reason when it cannot be written)."""
    if gpus % server_gpus:
        return None, f"{gpus:,} GPUs is not a whole number of {server_gpus}-GPU servers"
    out = copy.deepcopy(data)
    out["cluster"] = {k: v for k, v in out["cluster"].items() if k not in ("gpus", "servers")}
    out["cluster"]["servers"] = gpus // server_gpus
    fabric = out.get("fabric") or {}
    for key in ("pod", "scalable_unit", "tiers"):   # re-sized: the fewest tiers that hold each size
        fabric.pop(key, None)
    workload = out.get("workload") or {}
    parallelism = dict(workload.get("parallelism") or {})
    parallelism.pop("dp", None)
    workload["parallelism"] = parallelism
    training = workload.get("training") or {}
    if batch_mode == "per-gpu":
        for key in ("global_batch", "global_batch_tokens"):
            if training.get(key) is not None:
                scaled = training[key] * gpus / base_gpus
                if scaled != int(scaled) or scaled < 1:
                    return None, f"the global batch does not scale to a whole number at {gpus:,} GPUs"
                training[key] = int(scaled)
    for key in ("targets", "failures"):
        out.pop(key, None)
    return out, ""


def scale_design(file: str, catalog: Catalog, gpus: list[int], batch_mode: str = "fixed",
                 progress=None, executor=None, cache=None) -> ScaleStudy:
    """The training step of ``file``'s design at each GPU count (the spec must name a model)."""
    return scale_designs([file], catalog, gpus, batch_mode, progress, executor, cache)[0]


def scale_data(data: dict, catalog: Catalog, gpus: list[int], batch_mode: str = "fixed", progress=None,
               file: str = "<spec>", lines=None, executor=None, cache=None) -> ScaleStudy:
    """``scale_design`` on already-read spec data."""
    return _scale([(data, str(file), lines)], catalog, gpus, batch_mode, progress, executor, cache)[0]


def scale_designs(files, catalog: Catalog, gpus: list[int], batch_mode: str = "fixed", progress=None,
                  executor=None, cache=None, stats=None) -> list[ScaleStudy]:
    """``scale_design`` of several spec files in one sweep: every (spec, size) point is one task on
    ``executor`` (``topoplan/executors.py``; default: this process), cached by content with ``cache``."""
    sources = []
    for file in files:
        data, lines = yamlio.read(file)
        sources.append((data, str(file), lines))
    return _scale(sources, catalog, gpus, batch_mode, progress, executor, cache, stats)


def evaluate_point(catalog: Catalog, arg) -> ScalePoint:
    """One size of one spec through the pipeline (a task of the sweep)."""
    from .pipeline import evaluate

    n, sized, file = arg
    point = ScalePoint(n)
    try:
        evaluation = evaluate(design_from_data(sized, catalog, file), catalog)
    except TopoplanError as err:
        point.infeasible = "; ".join(p.message for p in err.problems)
    else:
        _fill(point, evaluation)
    return point


def _scale(sources, catalog, gpus, batch_mode, progress, executor, cache, stats=None) -> list[ScaleStudy]:
    from .cache import EntryDigests, content_key, entries_used
    from .executors import ProcessExecutor, Task, run_tasks

    bases, points, tasks = [], {}, []
    digests = EntryDigests(catalog)
    for s, (data, file, lines) in enumerate(sources):
        base = design_from_data(data, catalog, file, lines)
        if base.workload.training is None:
            raise base.infeasible("workload", "a scaling study needs the training-step model",
                                  "add workload.model and workload.training")
        bases.append(base)
        server_gpus = catalog.servers[base.cluster.server].gpus
        for i, n in enumerate(gpus):
            sized, why = _sized(data, n, server_gpus, base.gpus, batch_mode)
            if sized is None:
                points[(s, i)] = ScalePoint(n, infeasible=why)
                continue
            key = content_key("scale-point", {"gpus": n, "spec": sized, "file": file},
                              digests(entries_used(sized, None, catalog)))
            tasks.append(Task(s * len(gpus) + i, key, f"{base.name} at {n:,} GPUs", (n, sized, file)))
    for point in points.values():
        if progress is not None:
            progress(point)

    def step(task, ok):
        if progress is not None and ok:
            progress(points[divmod(task.index, len(gpus))])

    def collect():
        for task, ok, value in run_tasks(executor, evaluate_point, catalog, iter(tasks), cache,
                                         dataclasses.asdict, lambda d: ScalePoint(**d), None, stats):
            if not ok:
                failures.append((task.index, task.label, value))
                continue
            points[divmod(task.index, len(gpus))] = value
            step(task, ok)

    failures: list = []
    executor = executor if executor is not None else ProcessExecutor(1)
    with executor:
        collect()
    studies = []
    for s, base in enumerate(bases):
        study_points = [points.get((s, i), ScalePoint(n, infeasible="the evaluation failed (see the error)"))
                        for i, n in enumerate(gpus)]
        ran = [p for p in study_points if not p.infeasible]
        if ran:
            reference = min(ran, key=lambda p: p.gpus)
            for p in ran:
                p.efficiency = (p.tokens_per_s / p.gpus) / (reference.tokens_per_s / reference.gpus)
        studies.append(ScaleStudy(base.name, sources[s][1], base.fabric.topology, batch_mode, study_points))
    if failures:
        raise SweepFailed(sorted(failures, key=lambda f: f[0]), studies)
    return studies


class SweepFailed(Exception):
    """Some points raised (bugs): ``failures`` as (index, label, executors.TaskError), and the studies of
    the rest."""

    def __init__(self, failures, studies):
        super().__init__(f"{len(failures)} point(s) failed")
        self.failures, self.studies = failures, studies


def _fill(point: ScalePoint, evaluation) -> None:
    step, price = evaluation.training, evaluation.price
    point.global_batch = evaluation.design.workload.training.global_batch
    point.step_s = step.step_s
    point.mfu = step.mfu
    point.tokens_per_s = step.tokens_per_s
    point.usd_per_mtok = price.usd_per_hour / 3600 / step.tokens_per_s * 1e6
    point.network_usd_per_gpu = evaluation.bom.total_usd / evaluation.design.gpus
    point.exposed_share = step.exposed_total_s / step.step_s
    point.bubble_share = step.bubble_s / step.step_s
    if not step.memory.fits:
        point.infeasible = f"does not fit in memory: {step.memory.describe()}"


def capital_usd(data: dict, catalog: Catalog, gpus: int) -> float:
    """Servers plus network (catalog prices) of the spec's fabric built at ``gpus`` GPUs, no flows solved."""
    from .pipeline import build
    from .training import capital_usd as cluster_capital_usd

    server = catalog.servers[data["cluster"]["server"]]
    sized, why = _sized(data, gpus, server.gpus, gpus, "fixed")
    if sized is None:
        raise ValueError(why)
    sized.pop("workload", None)     # what the cluster costs does not depend on the job
    design = design_from_data(sized, catalog)
    _topology, bom = build(design, catalog)
    return cluster_capital_usd(design, catalog, bom)


def largest_within_budget(data: dict, catalog: Catalog, budget_usd: float, sizes: list[int],
                          resize=None, known: dict | None = None) -> tuple[int, float] | None:
    """The largest of ``sizes`` (ascending) whose cluster costs at most ``budget_usd``, and its cost; None
    when even the smallest costs more. Bisects, so it assumes the cost grows with the GPU count (it does,
    stepwise, for every generator here); the size returned always fits the budget. ``resize(data, gpus)``
    rewrites family-specific size fields (e.g. a RailX grid) first. ``known``: costs by size of this same
    ``data``, read and filled, so that several budgets share the sizes their bisections visit."""
    known = {} if known is None else known

    def cost(n):
        if n not in known:
            known[n] = capital_usd(resize(data, n) if resize else data, catalog, n)
        return known[n]

    low, high, best = 0, len(sizes) - 1, None
    while low <= high:
        middle = (low + high) // 2
        usd = cost(sizes[middle])
        if usd <= budget_usd:
            best, low = (sizes[middle], usd), middle + 1
        else:
            high = middle - 1
    return best


def parse_gpu_list(text: str) -> list[int]:
    """``1024,2048,4096`` or a doubling range ``1024..131072``."""
    text = text.replace("_", "").replace(" ", "")
    if ".." in text:
        low, _, high = text.partition("..")
        start, stop = int(low), int(high)
        if start < 1 or stop < start:
            raise ValueError("a range runs from a positive count up, e.g. 1024..131072")
        sizes = []
        while start <= stop and len(sizes) <= MAX_SIZES:
            sizes.append(start)
            start *= 2
    else:
        sizes = [int(x) for x in text.split(",") if x]
    if not sizes or any(n < 1 for n in sizes):
        raise ValueError("give positive GPU counts, e.g. 1024,2048,4096 or 1024..131072")
    if len(sizes) > MAX_SIZES:
        raise ValueError(f"at most {MAX_SIZES} sizes")
    return sorted(dict.fromkeys(sizes))


def study_dict(study: ScaleStudy) -> dict:
    def num(x):
        return None if x is None else float(f"{x:.9g}")
    return {"design": study.design, "file": study.file, "topology": study.topology, "batch": study.batch,
            "points": [{"gpus": p.gpus, "global_batch": p.global_batch, "step_time_s": num(p.step_s),
                        "mfu": num(p.mfu), "tokens_per_s": num(p.tokens_per_s),
                        "scaling_efficiency": num(p.efficiency), "usd_per_mtok": num(p.usd_per_mtok),
                        "network_usd_per_gpu": num(p.network_usd_per_gpu),
                        "exposed_communication_share": num(p.exposed_share), "bubble_share": num(p.bubble_share),
                        "infeasible": p.infeasible or None} for p in study.points]}
