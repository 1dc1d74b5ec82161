"""Spec targets held against a report (``topoplan check``)."""

from __future__ import annotations

from dataclasses import dataclass


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


# target key -> (report lookup, comparison, unit label)
_SIMPLE = {
    "max_cost_usd": (lambda r: r["cost"]["total_usd"], "max", "USD"),
    "max_cost_per_gpu_usd": (lambda r: r["cost"]["per_gpu_usd"], "max", "USD per GPU"),
    "max_power_w": (lambda r: r["power"]["total_w"], "max", "W"),
    "min_bisection_per_gpu_gbps": (lambda r: r["bisection"]["per_gpu_gbps"], "min", "Gb/s per GPU"),
    "max_diameter_hops": (lambda r: r["diameter_hops"], "max", "hops"),
}
_PER_COLLECTIVE = {"min_busbw_GBps": ("busbw_GBps", "min", "GB/s busbw"), "max_time_s": ("time_s", "max", "s")}


def _judge(target: str, limit: float, actual, sense: str, unit: str) -> TargetResult:
    if actual is None:
        return TargetResult(target, limit, None, False, f"not evaluated (limit {limit:,.6g} {unit})")
    ok = actual <= limit if sense == "max" else actual >= limit
    relation = "<=" if sense == "max" else ">="
    verdict = "" if ok else " (missed)"
    return TargetResult(target, limit, actual, ok, f"{actual:,.6g} {unit}, target {relation} {limit:,.6g}{verdict}")


def check_targets(report: dict, targets: dict) -> list[TargetResult]:
    results = []
    for key, limit in targets.items():
        if key in _SIMPLE:
            lookup, sense, unit = _SIMPLE[key]
            results.append(_judge(key, limit, lookup(report), sense, unit))
            continue
        field, sense, unit = _PER_COLLECTIVE[key]
        by_name = {c["name"]: c for c in report.get("collectives", [])}
        limits = limit if isinstance(limit, dict) else {name: limit for name in by_name}
        if not limits:
            results.append(_judge(key, limit, None, sense, unit))
        for name, value in limits.items():
            actual = by_name[name][field] if name in by_name else None
            results.append(_judge(f"{key}.{name}", value, actual, sense, unit))
    return results
