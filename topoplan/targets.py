"""Spec targets held against a report (``topoplan check``)."""

from __future__ import annotations

from dataclasses import dataclass

from .metrics import target_metrics


@dataclass(frozen=True)
class TargetResult:
    target: str
    limit: float
    actual: float | None
    ok: bool
    detail: str

    def line(self, design: str) -> str:
        status = "ok  " if self.ok else "MISS"
        return f"{status} {design}: {self.target}: {self.detail}"



def _judge(target: str, limit: float, actual, sense: str, unit: str) -> TargetResult:
    if actual is None:
        return TargetResult(target, limit, None, False, f"not evaluated (limit {limit:,.6g} {unit})")
    ok = actual <= limit if sense == "max" else actual >= limit
    relation = "<=" if sense == "max" else ">="
    verdict = "" if ok else " (missed)"
    return TargetResult(target, limit, actual, ok, f"{actual:,.6g} {unit}, target {relation} {limit:,.6g}{verdict}")


def check_targets(report: dict, targets: dict) -> list[TargetResult]:
    results = []
    declared = target_metrics()
    for key, limit in targets.items():
        metric, per_collective = declared[key]
        sense, unit = metric.sense, metric.unit
        if not per_collective:
            results.append(_judge(key, limit, metric.get(report), sense, unit))
            continue
        field = metric.path
        by_name = {c["name"]: c for c in report.get("collectives", [])}
        limits = limit if isinstance(limit, dict) else {name: limit for name in by_name}
        if not limits:
            results.append(_judge(key, limit, None, sense, unit))
        for name, value in limits.items():
            actual = by_name[name][field] if name in by_name else None
            results.append(_judge(f"{key}.{name}", value, actual, sense, unit))
    return results
