"""How crowded a phase is, and how its flows share the links: what tells a reader whether a fluid answer holds.

* ``flows_per_receiver``: the most flows that cross the network into one GPU (incast degree);
* ``oversubscription_crossed``: the highest down-to-up capacity ratio of the switch tiers whose uplinks the
  phase loads (1.0 when it climbs only non-blocking tiers or stays under one switch);
* ``fair_share``: under an engine that yields each flow's path (``ecmp-hash``), every flow's completion
  time by max-min fair sharing (``fairshare.py``), and how many flows cross the hottest arc.

The fluid engines (``ecmp`` and the closed forms standing in for it) spread every flow over all its shortest
paths, which a packet network only approaches with ideal per-packet spraying: their time is a lower bound,
most optimistic where a phase crosses an oversubscribed tier or many flows converge on one receiver.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..topology import KIND, Topology
from . import fairshare
from .traffic import Demand

@dataclass(frozen=True)
class FlowStats:
    """Fair-share completion times of one phase's flows (seconds, from the phase's start, bandwidth only: no
    per-step latency), at the plan's size, before NCCL's protocol factor."""

    flows: int
    last_s: float
    mean_s: float
    p50_s: float
    p99_s: float
    on_hottest_arc: int        # flows whose path crosses the arc that drains last
    lockstep: bool = False     # the flows relay each other's data (rings, chains, trees): all end with the last

    def scaled(self, factor: float) -> dict:
        """The distribution at another size or protocol (every flow scales alike), for a report."""
        return {"last_s": self.last_s * factor, "mean_s": self.mean_s * factor, "p50_s": self.p50_s * factor,
                "p99_s": self.p99_s * factor}


def flow_count(demand: Demand, qps: int = 1) -> int:
    """Flows of ``demand`` (queue pairs counted), without listing the all-to-all pairs."""
    explicit = int(((demand.src != demand.dst) & (demand.bytes > 0)).sum())
    if demand.has_a2a:
        groups, p = demand.a2a_members.shape
        explicit += groups * p * (p - 1)
    return explicit * qps


def flows_per_receiver(topology: Topology, demand: Demand) -> int:
    """The most flows that enter one node from another server (a flow inside a server is no incast)."""
    server = topology.server
    move = (server[demand.src] != server[demand.dst]) & (demand.bytes > 0)
    into = np.bincount(demand.dst[move], minlength=topology.num_nodes)
    if demand.has_a2a:
        members = demand.a2a_members
        groups, p = members.shape
        # members of a row on the same server as each member: (row, server) keys counted
        keys = np.arange(groups)[:, None] * (int(server.max()) + 1) + server[members]
        _, inverse, counts = np.unique(keys.ravel(), return_inverse=True, return_counts=True)
        into += np.bincount(members.ravel(), weights=p - counts[inverse], minlength=topology.num_nodes).astype(np.int64)
    return int(into.max()) if into.size else 0


_OVERSUBSCRIPTION: dict = {}


def _uplink_ratio(topology: Topology) -> np.ndarray:
    """Per arc, the oversubscription of the switch it leaves when it climbs to a higher tier (0 otherwise):
    the capacity entering that switch from below over the capacity leaving it upward. Cached per topology."""
    cached = _OVERSUBSCRIPTION.get(id(topology))
    if cached is not None and cached[0] is topology:
        return cached[1]
    switch = topology.kind == KIND["switch"]
    src, dst, capacity = topology.src, topology.dst, topology.capacity_gbps
    up = switch[src] & switch[dst] & (topology.tier[dst] > topology.tier[src])
    from_below = switch[dst] & (~switch[src] | (topology.tier[src] < topology.tier[dst]))
    down_capacity = np.bincount(dst[from_below], weights=capacity[from_below], minlength=topology.num_nodes)
    up_capacity = np.bincount(src[up], weights=capacity[up], minlength=topology.num_nodes)
    ratio = np.zeros(topology.num_arcs)
    ratio[up] = down_capacity[src[up]] / up_capacity[src[up]]
    _OVERSUBSCRIPTION.clear()
    _OVERSUBSCRIPTION[id(topology)] = (topology, ratio)
    return ratio


def oversubscription_crossed(topology: Topology, load: np.ndarray) -> float:
    """The highest oversubscription among the switches whose uplinks carry some of ``load`` (1.0: none)."""
    ratio = _uplink_ratio(topology)[load > 0]
    return float(max(1.0, ratio.max())) if ratio.size else 1.0


def fair_share(paths: fairshare.FlowPaths, capacity_gbps: np.ndarray, lockstep: bool = False) -> FlowStats:
    """Completion times of flows with known ``paths`` on arcs of ``capacity_gbps``.

    ``lockstep``: the flows are the hops of pipelines (NCCL's rings, chains and trees forward each chunk they
    receive), so no flow finishes before the slowest: the distribution collapses to the last flow. Sharing
    is still solved as if the flows were independent, which for equal flows started together gives that
    same last flow (the hottest arc's drain time)."""
    times = fairshare.solve(paths, capacity_gbps * 1e9 / 8).completion_s
    times = times[paths.moving() & (paths.bytes > 0)]
    if times.size == 0:
        return FlowStats(0, 0.0, 0.0, 0.0, 0.0, 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        drained = paths.arc_bytes() / (capacity_gbps * 1e9 / 8)
    hottest = int(np.argmax(drained))
    summary = fairshare.summary(np.full(times.size, times.max()) if lockstep else times)
    return FlowStats(int(times.size), summary["last_s"], summary["mean_s"], summary["p50_s"], summary["p99_s"],
                     paths.flows_on(hottest), lockstep)
