"""The ``topoplan resilience`` report: an ``resilience.Assessment`` as a JSON-ready dict (contract keys
below), rendered by ``writers.render_resilience``.

Keys: ``design``, ``gpus``, ``engine``, ``healthy`` {bisection_gbps, collectives[{name, time_s,
busbw_GBps}]}, ``scenarios[]`` {name, fail, mode, elements, classes, runs, split_classes,
stop_fraction, worst_slowdown, outcomes[{label, weight, job_stops, stopped_gpus, degraded_servers,
worst_server_fraction, bisection_gbps, bisection_fraction, collectives[{name, time_s, busbw_GBps,
slowdown}]}]}, ``interruptions`` {per_day, mtbf_h, p_any_in_hour, p_any_in_day, rates, by_cause[{cause,
per_day}], stop_fractions {unit: share of its single failures that stop the job, where an exhaustive
scenario measured it; those causes are scaled by it}}, ``components`` (failure units counted), ``goodput`` {checkpoint_s, restart_s,
young_interval_s, daly_interval_s, waste_fraction, goodput, lost_gpu_hours_per_day, lost_usd_per_day}
or null, ``summary`` {interruptions_per_day, goodput, worst_single_failure_slowdown}.
"""

from __future__ import annotations

from dataclasses import asdict


def _num(x, digits: int = 9):
    return None if x is None else float(f"{x:.{digits}g}")


def _outcome(outcome, weight: int, healthy_bisection: float) -> dict:
    fraction = None if outcome.bisection_gbps is None or not healthy_bisection else \
        outcome.bisection_gbps / healthy_bisection
    return {
        "label": outcome.label, "weight": weight, "job_stops": outcome.job_stops,
        "stopped_gpus": outcome.stopped_gpus, "degraded_servers": outcome.degraded_servers,
        "worst_server_fraction": _num(outcome.worst_server_fraction), "bisection_gbps": _num(outcome.bisection_gbps),
        "bisection_fraction": _num(fraction),
        "collectives": [{"name": c.name, "time_s": _num(c.time_s), "busbw_GBps": _num(c.busbw_GBps),
                         "slowdown": _num(c.slowdown)} for c in outcome.collectives],
    }


def resilience_report(design, topology, assessment, engine: str) -> dict:
    healthy = assessment.healthy
    scenarios = []
    for r in assessment.scenarios:
        s = r.scenario
        scenarios.append({
            "name": s.name, "fail": s.element, "mode": s.mode, "elements": r.elements, "classes": r.classes,
            "runs": r.runs, "split_classes": r.split_classes, "stop_fraction": _num(r.stop_fraction),
            "worst_slowdown": _num(r.worst(lambda o: o.worst_slowdown)),
            "outcomes": [_outcome(o, w, healthy.bisection_gbps) for o, w in r.outcomes],
        })
    i = assessment.interruptions
    g = assessment.goodput
    return {
        "design": design.name,
        "gpus": int(topology.gpus.size),
        "engine": engine,
        "healthy": {"bisection_gbps": _num(healthy.bisection_gbps),
                    "collectives": [{"name": c.name, "time_s": _num(c.time_s), "busbw_GBps": _num(c.busbw_GBps)}
                                    for c in healthy.collectives]},
        "scenarios": scenarios,
        "interruptions": {"per_day": _num(i.per_day), "mtbf_h": _num(i.mtbf_h), "p_any_in_hour": _num(i.p_any_in_hour),
                          "p_any_in_day": _num(i.p_any_in_day), "rates": list(design.failures.rates),
                          "by_cause": [{"cause": cause, "per_day": _num(v)} for cause, v in i.by_cause_per_day],
                          "stop_fractions": {unit: _num(v) for unit, v in assessment.stop_fractions.items()}},
        "components": dict(assessment.counts),
        "goodput": None if g is None else {k: _num(v) for k, v in asdict(g).items()},
        "summary": summary(assessment),
    }


def summary(assessment) -> dict:
    """The figures ``check`` holds targets against (``metrics.py``: ``resilience.*``)."""
    g = assessment.goodput
    return {"interruptions_per_day": _num(assessment.interruptions.per_day),
            "goodput": _num(1.0 if g is None else g.goodput),
            "worst_single_failure_slowdown": _num(assessment.worst_single_failure_slowdown)}
