"""Failure rates to interruptions, MTBF, checkpoint interval and goodput (issue 16, item 4).

Closed forms only; no topology or routing here. A cluster is a series system for a
synchronous job: any interrupting failure stops it, so interruption rates add and
the job's MTBF is the inverse of the summed rate. Arrivals are taken as Poisson,
so P(at least one interruption in t) = 1 - exp(-rate * t).

Units are in the names: ``*_per_day``, ``*_s``, ``*_h``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SECONDS_PER_DAY = 86_400.0
SECONDS_PER_HOUR = 3_600.0
DAYS_PER_MONTH = 365.25 / 12

# Llama 3 405B, 54 days on 16,384 H100 (2,048 hosts): unexpected interruptions by
# root cause ("The Llama 3 Herd of Models", arXiv 2407.21783, Table 5). The unit
# says which count a cause scales with when the cluster size changes.
LLAMA3_DAYS = 54
LLAMA3_GPUS = 16_384
LLAMA3_HOSTS = 2_048
LLAMA3_INTERRUPTIONS = (
    # (cause, unit, count in 54 days)
    ("faulty GPU (incl. NVLink)", "gpu", 148),
    ("GPU HBM3 memory", "gpu", 72),
    ("software bug", "gpu", 54),
    ("network switch/cable", "gpu", 35),
    ("host maintenance", "host", 32),
    ("GPU SRAM memory", "gpu", 19),
    ("GPU system processor", "gpu", 17),
    ("NIC", "host", 7),
    ("NCCL watchdog timeout", "gpu", 7),
    ("silent data corruption", "gpu", 6),
    ("GPU thermal interface and sensor", "gpu", 6),
    ("SSD", "host", 3),
    ("power supply", "host", 3),
    ("server chassis", "host", 2),
    ("IO expansion board", "host", 2),
    ("dependency", "gpu", 2),
    ("CPU", "host", 2),
    ("system memory", "host", 2),
)


@dataclass(frozen=True)
class ComponentRate:
    """One cause of interruptions: ``rate_per_unit_day`` events per ``unit`` per day."""

    cause: str
    unit: str  # a key of failures.component_counts: gpu | host | nic | nic_link | leaf_switch | switch | link
    rate_per_unit_day: float
    source: str


def llama3_rates() -> tuple[ComponentRate, ...]:
    """Per-unit daily rates from the Llama 3 table (count / (units * days))."""
    units = {"gpu": LLAMA3_GPUS, "host": LLAMA3_HOSTS}
    return tuple(
        ComponentRate(cause, unit, count / (units[unit] * LLAMA3_DAYS),
                      "Llama 3 Herd of Models, arXiv 2407.21783, Table 5")
        for cause, unit, count in LLAMA3_INTERRUPTIONS
    )


def llama3_non_network_rates() -> tuple[ComponentRate, ...]:
    """The Llama 3 rates without its network cause (switch/cable), to pair with per-element network rates
    (``hpn-network``) that an exhaustive scenario can scale by the failures that really stop the job."""
    return tuple(rate for rate in llama3_rates() if rate.cause != "network switch/cable")


def hpn_network_rates() -> tuple[ComponentRate, ...]:
    """Alibaba HPN (SIGCOMM'24): NIC-ToR link 0.057%/link/month, ToR 0.051%/switch/month."""
    source = "Alibaba HPN, SIGCOMM'24, doi 10.1145/3651890.3672265"
    return (
        ComponentRate("NIC-ToR link", "nic_link", 0.00057 / DAYS_PER_MONTH, source),
        ComponentRate("ToR switch", "leaf_switch", 0.00051 / DAYS_PER_MONTH, source),
    )


RATE_SETS = {"llama3": llama3_rates, "llama3-non-network": llama3_non_network_rates,
             "hpn-network": hpn_network_rates}  # the names a spec's failures.rates takes


@dataclass(frozen=True)
class Interruptions:
    """Expected interruptions of a synchronous job and the odds of one in an hour or a day."""

    per_day: float
    mtbf_h: float
    p_any_in_hour: float
    p_any_in_day: float
    by_cause_per_day: tuple[tuple[str, float], ...]


def interruptions(rates: tuple[ComponentRate, ...], counts: dict[str, int],
                  stop_fraction: dict[str, float] | None = None) -> Interruptions:
    """Sum ``rate * count[unit] * stop_fraction[unit]`` over causes; ``counts`` maps unit -> how many the
    cluster has, ``stop_fraction`` (default 1 for every unit) the share of that unit's failures that stop
    the job (a dual-homed host's lost port does not: the job runs on, slower).

    A unit with no count (a fabric without switches, say) contributes nothing; a
    negative count is a caller bug.
    """
    stop_fraction = stop_fraction or {}
    by_cause = []
    for rate in rates:
        count = counts.get(rate.unit, 0)
        if count < 0:
            raise ValueError(f"negative count for unit {rate.unit!r}: {count}")
        by_cause.append((rate.cause, rate.rate_per_unit_day * count * stop_fraction.get(rate.unit, 1.0)))
    per_day = sum(value for _, value in by_cause)
    mtbf_h = math.inf if per_day == 0 else 24.0 / per_day
    return Interruptions(
        per_day=per_day,
        mtbf_h=mtbf_h,
        p_any_in_hour=-math.expm1(-per_day / 24.0),
        p_any_in_day=-math.expm1(-per_day),
        by_cause_per_day=tuple(by_cause),
    )


def young_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Young (CACM 1974): T = sqrt(2 C M)."""
    _check_positive(checkpoint_s=checkpoint_s, mtbf_s=mtbf_s)
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def daly_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    """Daly (FGCS 2006): sqrt(2CM) [1 + sqrt(C/2M)/3 + (C/2M)/9] - C for C < 2M, else M."""
    _check_positive(checkpoint_s=checkpoint_s, mtbf_s=mtbf_s)
    if checkpoint_s >= 2.0 * mtbf_s:
        return mtbf_s
    ratio = checkpoint_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * checkpoint_s * mtbf_s) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - checkpoint_s


def waste_fraction(interval_s: float, checkpoint_s: float, mtbf_s: float, restart_s: float = 0.0) -> float:
    """First-order expected waste: C/T for writing checkpoints plus (T/2 + R)/M per failure.

    Capped at 1: past that the job makes no progress at all.
    """
    _check_positive(interval_s=interval_s, mtbf_s=mtbf_s)
    if checkpoint_s < 0 or restart_s < 0:
        raise ValueError("checkpoint and restart times must not be negative")
    return min(1.0, checkpoint_s / interval_s + (interval_s / 2.0 + restart_s) / mtbf_s)


def goodput(interval_s: float, checkpoint_s: float, mtbf_s: float, restart_s: float = 0.0) -> float:
    """Effective training time ratio (runtime goodput) = 1 - waste."""
    return 1.0 - waste_fraction(interval_s, checkpoint_s, mtbf_s, restart_s)


def _check_positive(**values: float) -> None:
    for name, value in values.items():
        if not value > 0:  # also refuses NaN
            raise ValueError(f"{name} must be > 0, got {value}")
