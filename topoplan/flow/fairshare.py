"""Max-min fair rates and flow completion times for flows with known paths (flow-level model).

Input: each flow's arcs (CSR: ``arc_ptr``, ``arcs``), its bytes, optionally its start time, and each arc's
capacity in bytes per second. Output: when each flow completes.

Rates are max-min fair (progressive filling, also called water-filling): every unfrozen flow's rate rises
by the same increment until some arc is full; the flows crossing a full arc freeze; repeat until every
flow is frozen. Each flow then sits on at least one full arc where no flow has a higher rate (its
bottleneck). Between events the rates stay constant; at each event (a flow finishes, or one starts) they
are computed again: the classic flow-level event sequence. All flows finishing within a relative
``1e-9`` of the same instant finish in one event.

What this leaves out: packets, queues, PFC pauses and head-of-line blocking, congestion-control
dynamics, retransmission. It is a fluid model: a flow's rate changes the instant another flow ends.

Cost: one round of filling is a few passes over the flow x arc entries (``max_min_rates`` freezes every
local bottleneck in one round); an event takes a handful of rounds. Equal flows that start together need few events (one per distinct bottleneck
count); thousands of distinct sizes need thousands of events.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_TIE = 1e-9   # relative: arcs within this of the smallest fill level fill together; flows finish together


@dataclass
class FlowTimes:
    """Per flow, when it completes (seconds; 0 for flows with no bytes or no arcs), and what the solver did."""

    completion_s: np.ndarray
    events: int = 0
    rounds: int = 0


@dataclass
class Incidence:
    """Which flow crosses which arc, as the solver walks it: entries in flow order (``flow``, ``arc``) and a
    permutation of them into arc order (``by_arc``, with ``arc_starts`` the first entry of each arc that
    has one, ``arc_ids`` those arcs)."""

    flow: np.ndarray
    arc: np.ndarray
    flow_starts: np.ndarray
    by_arc: np.ndarray
    arc_starts: np.ndarray
    arc_ids: np.ndarray
    num_arcs: int

    @classmethod
    def of(cls, arc_ptr: np.ndarray, arcs: np.ndarray, num_arcs: int) -> "Incidence":
        """From CSR paths in which every flow crosses at least one arc."""
        flow = np.repeat(np.arange(arc_ptr.size - 1), np.diff(arc_ptr))
        by_arc = np.argsort(arcs, kind="stable")
        sorted_arcs = arcs[by_arc]
        first = np.flatnonzero(np.r_[True, sorted_arcs[1:] != sorted_arcs[:-1]])
        return cls(flow, arcs, arc_ptr[:-1], by_arc, first, sorted_arcs[first], num_arcs)

    def subset(self, flows: np.ndarray) -> "Incidence":
        """The entries of ``flows`` (ascending flow ids), renumbered ``0..len(flows)-1``."""
        lengths = np.diff(np.r_[self.flow_starts, self.flow.size])[flows]
        entries = np.repeat(self.flow_starts[flows] - np.r_[0, np.cumsum(lengths)[:-1]], lengths) + \
            np.arange(int(lengths.sum()))
        return Incidence.of(np.r_[0, np.cumsum(lengths)], self.arc[entries], self.num_arcs)


def max_min_rates(paths: Incidence, capacity: np.ndarray, active: np.ndarray) -> tuple[np.ndarray, int]:
    """Max-min fair rates of the ``active`` flows (0 for the others) on arcs of ``capacity``, and the number
    of filling rounds. Every flow crosses at least one arc, of positive capacity.

    Progressive filling, several bottlenecks per round: an arc's fill level (its capacity left by frozen
    flows over its unfrozen flows) only rises as other arcs freeze flows below it, so an arc whose level is
    the lowest among every arc it shares an unfrozen flow with saturates at exactly that level. Each round
    freezes the flows of all such arcs at once; the global minimum is always one of them."""
    rate = np.zeros(active.size)
    unfrozen = active.copy()
    used = np.zeros(paths.num_arcs)
    count = np.bincount(paths.arc, weights=unfrozen[paths.flow], minlength=paths.num_arcs)
    rounds = 0
    while unfrozen.any():
        rounds += 1
        with np.errstate(divide="ignore", invalid="ignore"):
            level = np.where(count > 0.5, np.maximum(capacity - used, 0.0) / count, np.inf)
        entry_level = np.where(unfrozen[paths.flow], level[paths.arc], np.inf)
        flow_level = np.minimum.reduceat(entry_level, paths.flow_starts)     # the lowest arc on each path
        lowest_nearby = np.full(paths.num_arcs, np.inf)
        lowest_nearby[paths.arc_ids] = np.minimum.reduceat(
            np.where(unfrozen[paths.flow], flow_level[paths.flow], np.inf)[paths.by_arc], paths.arc_starts)
        local = (count > 0.5) & (level <= lowest_nearby * (1 + _TIE))
        hit = np.zeros(active.size, dtype=bool)
        hit[paths.flow[local[paths.arc]]] = True
        stopped = unfrozen & hit
        rate[stopped] = flow_level[stopped]
        unfrozen &= ~stopped
        on_entry = stopped[paths.flow]
        used += np.bincount(paths.arc, weights=np.where(on_entry, rate[paths.flow], 0.0), minlength=paths.num_arcs)
        count -= np.bincount(paths.arc, weights=on_entry, minlength=paths.num_arcs)
    return rate, rounds


def completion_times(arc_ptr: np.ndarray, arcs: np.ndarray, size_bytes: np.ndarray, capacity_Bps: np.ndarray,
                     start_s: np.ndarray | None = None) -> FlowTimes:
    """Completion time of every flow under max-min fair sharing, rates recomputed at every event.

    ``arc_ptr``/``arcs``: flow ``i`` crosses ``arcs[arc_ptr[i]:arc_ptr[i + 1]]`` (each arc once);
    ``size_bytes`` per flow; ``capacity_Bps`` per arc (bytes per second, > 0 on every arc a flow crosses);
    ``start_s`` per flow (default: all start at 0). A flow with no bytes or no arcs completes at its start.

    >>> # one link of 1 byte/s shared by flows of 1 and 2 bytes: both at 1/2, then the larger alone
    >>> completion_times(np.array([0, 1, 2]), np.array([0, 0]), np.array([1.0, 2.0]), np.array([1.0])).completion_s
    array([2., 3.])
    """
    size = np.asarray(size_bytes, dtype=np.float64)
    flows = size.size
    start = np.zeros(flows) if start_s is None else np.asarray(start_s, dtype=np.float64)
    completion = start.copy()
    moves = (size > 0) & (np.diff(arc_ptr) > 0)
    if not moves.any():
        return FlowTimes(completion)
    arc_ptr = np.asarray(arc_ptr)
    moving = np.flatnonzero(moves)
    lengths = np.diff(arc_ptr)[moving]
    keep = np.repeat(moves, np.diff(arc_ptr))
    paths = Incidence.of(np.concatenate([[0], np.cumsum(lengths)]), np.asarray(arcs)[keep], capacity_Bps.size)
    size, start = size[moving], start[moving]
    flows = moving.size
    remaining = size.copy()
    finish = np.zeros(flows)
    waiting = np.ones(flows, dtype=bool)   # not started yet
    active = np.zeros(flows, dtype=bool)
    now = float(start.min())
    events = rounds = 0
    rate = np.zeros(flows)
    floor = 0.0   # the lowest rate among the flows that ended at the last event
    while waiting.any() or active.any():
        arrived = waiting & (start <= now * (1 + _TIE))
        active |= arrived
        waiting &= ~arrived
        if arrived.any():
            floor = 0.0
        if not active.any():          # idle until the next flow starts
            now = float(start[waiting].min())
            continue
        # flows slower than every flow that just ended keep their rates: filling up to that level is what
        # it was (an ended flow froze no arc below its own rate); arrivals change every level
        kept = active & (rate < floor * (1 - _TIE))
        solve = np.flatnonzero(active & ~kept)
        if solve.size:
            left = capacity_Bps - np.bincount(paths.arc, weights=np.where(kept[paths.flow], rate[paths.flow], 0.0),
                                              minlength=paths.num_arcs)
            rate[solve], filled = max_min_rates(paths.subset(solve), left, np.ones(solve.size, dtype=bool))
            rounds += filled
        events += 1
        index = np.flatnonzero(active)
        to_finish = remaining[index] / rate[index]
        step = float(to_finish.min())
        if waiting.any():
            step = min(step, float(start[waiting].min()) - now)
        now += step
        done = to_finish <= step * (1 + _TIE)
        remaining[index] -= rate[index] * step
        finish[index[done]] = now
        if done.any():
            floor = float(rate[index[done]].min())
        remaining[index[done]] = 0.0
        active[index[done]] = False
    completion[moving] = finish
    return FlowTimes(completion, events, rounds)


def summary(completion_s: np.ndarray) -> dict:
    """The distribution a report shows: last, mean, median and 99th percentile, in seconds."""
    if completion_s.size == 0:
        return {"last_s": 0.0, "mean_s": 0.0, "p50_s": 0.0, "p99_s": 0.0}
    return {"last_s": float(completion_s.max()), "mean_s": float(completion_s.mean()),
            "p50_s": float(np.percentile(completion_s, 50)), "p99_s": float(np.percentile(completion_s, 99))}
