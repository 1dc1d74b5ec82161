"""Report metrics, declared once: where each sits in the JSON report, its unit, which way is better, how
it prints, whether a spec can set a target on it, whether ``compare`` / ``check --baseline`` diff it, and
whether the optimizer can rank on it. ``report``, ``review.py``, ``targets.py``, the spec schema and the
optimizer read this table; to add a metric, add its entry here and compute it in ``report/__init__.py``.

>>> metric("cost.per_gpu_usd").target
'max_cost_per_gpu_usd'
>>> [m.path for m in COLLECTIVE_METRICS if m.better]
['time_s', 'busbw_GBps', 'max_link_utilization']
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    path: str                 # dotted JSON path; for collective metrics, the key of a collectives[] entry
    unit: str                 # what the target lines print after the value
    better: str = ""          # "lower", "higher", or "" when a change is neither
    fmt: str = ",.6g"         # format spec for one value
    target: str = ""          # spec ``targets`` key, "" when none
    integer_target: bool = False  # the target takes a whole number
    compared: bool = True     # compare / check --baseline show and judge it
    objective: bool = False   # the optimizer ranks candidates on it (one design-wide, one per collective)

    @property
    def sense(self) -> str:
        """``max`` (a target is an upper limit) or ``min``."""
        return "max" if self.better == "lower" else "min"

    @property
    def key(self) -> str:
        """Its name as one key (``cost.per_gpu_usd`` -> ``cost_per_gpu_usd``), as the optimizer's figures use."""
        return self.path.replace(".", "_")

    def ranked(self, value: float) -> float:
        """``value`` turned so that lower ranks better."""
        return value if self.better == "lower" else -value

    def get(self, report: dict):
        value = report
        for part in self.path.split("."):
            if not isinstance(value, dict) or part not in value:
                return None
            value = value[part]
        return value


# design-wide metrics, in the order compare lists them
REPORT_METRICS: tuple[Metric, ...] = (
    Metric("cost.total_usd", "USD", "lower", target="max_cost_usd"),
    Metric("cost.per_gpu_usd", "USD per GPU", "lower", target="max_cost_per_gpu_usd", objective=True),
    Metric("power.total_w", "W", "lower", target="max_power_w"),
    Metric("fabric.switches.total", "switches"),
    Metric("fabric.links.total", "links"),
    Metric("bisection.gbps", "Gb/s", "higher"),
    Metric("bisection.per_gpu_gbps", "Gb/s per GPU", "higher", target="min_bisection_per_gpu_gbps"),
    Metric("bisection.permutation_per_gpu_gbps", "Gb/s per GPU", "higher"),
    Metric("diameter_hops", "hops", "lower", fmt=",d", target="max_diameter_hops", integer_target=True),
    Metric("cost.per_injection_gbps_usd", "USD per Gb/s", "lower"),
    Metric("cost.per_bisection_gbps_usd", "USD per Gb/s", "lower"),
    Metric("cost.per_gpu_bisection_gbps_usd", "USD per Gb/s per GPU", "lower"),
    # the training-step model (``training.py``), when the workload names a model
    Metric("training.step_time_s", "s per step", "lower", target="max_step_time_s"),
    Metric("training.mfu", "of the BF16 peak", "higher", fmt=".4f", target="min_mfu"),
    Metric("training.tokens_per_s", "tokens/s", "higher"),
    Metric("training.usd_per_mtok", "USD per million tokens", "lower", target="max_usd_per_mtok"),
    # from ``topoplan resilience`` (``report/resilience.py`` summary); ``check`` runs it when one is a target
    Metric("resilience.interruptions_per_day", "interruptions per day", "lower", target="max_interruptions_per_day",
           compared=False),
    Metric("resilience.goodput", "of wall-clock time training", "higher", target="min_goodput", compared=False),
    Metric("resilience.worst_single_failure_slowdown", "x healthy time", "lower",
           target="max_single_failure_slowdown", compared=False),
)

# per collective (keys of a ``collectives[]`` entry), in the order compare lists them
COLLECTIVE_METRICS: tuple[Metric, ...] = (
    Metric("time_s", "s", "lower", target="max_time_s", objective=True),
    Metric("busbw_GBps", "GB/s busbw", "higher", target="min_busbw_GBps"),
    Metric("max_link_utilization", "x injection", "lower"),
    Metric("bottleneck", ""),
)

# the report sections whose every key compare lists (counts and prices per tier, model or category)
COMPARED_SECTIONS = (("cost.by_category", "lower"), ("fabric.switches.by_tier", ""), ("fabric.links.by_tier", ""))


def metric(path: str) -> Metric:
    """The design-wide metric at ``path``."""
    for m in REPORT_METRICS:
        if m.path == path:
            return m
    raise KeyError(path)


def target_metrics() -> dict:
    """Spec target key -> (metric, per collective?), in table order."""
    out = {m.target: (m, False) for m in REPORT_METRICS if m.target}
    out.update({m.target: (m, True) for m in COLLECTIVE_METRICS if m.target})
    return out


def objectives() -> tuple[Metric, Metric]:
    """The optimizer's two axes: the design-wide objective metric, and the per-collective one (which the
    optimizer sums over the collectives with the space's weights)."""
    design = [m for m in REPORT_METRICS if m.objective]
    collective = [m for m in COLLECTIVE_METRICS if m.objective]
    assert len(design) == len(collective) == 1, "exactly one objective per table"
    return design[0], collective[0]
