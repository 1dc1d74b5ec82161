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

Cost: a fill visits each flow's entries once (when it freezes) and each saturated arc's flows once, plus
a few passes over the arcs per fill level; the arc-major copy of the entries is built once per call (a
counting sort). Equal flows that start together (a collective's phase) need that one fill and nothing
more: each ends at its size over its rate. Otherwise events at which no rate changes (the flows that end
were faster than every flow left) are processed in one batch, sorted by finish time, and unequal sizes
or staggered starts need a fill of the affected flows at each event that changes rates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_TIE = 1e-9   # relative: arcs within this of the smallest fill level fill together; flows finish together

# Flow x arc entries (each flow's arcs, summed over flows) past which fair sharing should be refused.
# Measured on benchmarks/run.py fairshare-a2a-4k (125.5 million entries, 16.8 million flows): 1,448-1,459
# MiB peak resident memory for listing the paths (hashed.flow_paths, as padded rows) and solving them
# (``solve``) in one process, Python and imports included: about 12 bytes per entry (the int32 rows, their
# arc-major copy, per-flow float64 state). MAX_ENTRIES keeps that under 2 GiB, below the 2.2 GB that
# hashed.route's loads of the same flows take first. The time grows about linearly with the entries:
# 17.8-21.1 s for those 125.5 million on this 2-core VM, of which about 7 s of user CPU and the rest the
# kernel's first-touch page faults (docs/performance.md); the estimate takes 2e-7 s each.
PEAK_BYTES_PER_ENTRY = 12
MAX_ENTRIES = 160_000_000
MEASURED_S_PER_ENTRY = 2.0e-7   # listing and solving, per entry: 21-25 s / 125.5 million, rounded up (the estimate's rate)


@dataclass
class FlowPaths:
    """Each flow's arcs and bytes, in one of two layouts. CSR: flow ``i`` crosses
    ``arcs[arc_ptr[i]:arc_ptr[i + 1]]``. Rows (where padding costs at most as many entries as the paths,
    ``compact_rows``): row ``i`` of ``rows`` (flows x longest path) lists flow ``i``'s arcs, then
    ``num_arcs`` (padding) to the end: the layout the solver reads, so paths listed this way are not copied
    (a world all-to-all on 4k GPUs has 125 million entries). Arcs in path order, each at most once a flow.
    ``bytes`` may be a read-only broadcast of one value (equal flows: ``Demand.pairs(compact=True)``)."""

    bytes: np.ndarray
    num_arcs: int
    arc_ptr: np.ndarray | None = None
    arcs: np.ndarray | None = None
    rows: np.ndarray | None = None

    @property
    def num_flows(self) -> int:
        return self.bytes.size

    @property
    def num_entries(self) -> int:
        """Flow x arc entries (padding not counted)."""
        return int(self.arcs.size) if self.rows is None else int(self.lengths().sum(dtype=np.int64))

    def lengths(self) -> np.ndarray:
        """Arcs per flow."""
        if self.rows is None:
            return np.diff(self.arc_ptr)
        return self.rows.shape[1] - (self.rows == self.num_arcs).sum(axis=1)

    def moving(self) -> np.ndarray:
        """Flows with at least one arc (a row's padding only follows its arcs)."""
        if self.rows is None:
            return np.diff(self.arc_ptr) > 0
        return self.rows[:, 0] != self.num_arcs if self.rows.shape[1] else np.zeros(self.num_flows, dtype=bool)

    def blocks(self, flows_at_once: int = 1 << 20):
        """``(first flow, end flow, their entries, entries per flow)`` a block of flows at a time, padding
        (``num_arcs``) included in the rows layout: no copy of all the entries at once."""
        for f0 in range(0, self.num_flows, flows_at_once):
            f1 = min(self.num_flows, f0 + flows_at_once)
            if self.rows is None:
                yield f0, f1, self.arcs[self.arc_ptr[f0]:self.arc_ptr[f1]], np.diff(self.arc_ptr[f0:f1 + 1])
            else:
                yield f0, f1, self.rows[f0:f1].ravel(), self.rows.shape[1]

    def arc_bytes(self) -> np.ndarray:
        """Bytes per arc, summed over the flows crossing it."""
        total = np.zeros(self.num_arcs + 1)
        for f0, f1, on, per_flow in self.blocks():
            total += np.bincount(on, weights=np.repeat(self.bytes[f0:f1], per_flow), minlength=self.num_arcs + 1)
        return total[:self.num_arcs]

    def flows_on(self, arc: int) -> int:
        """How many flows cross ``arc``."""
        return sum(int(np.count_nonzero(on == arc)) for _, _, on, _ in self.blocks())


def compact_rows(flows: int, width: int, entries: int) -> bool:
    """Whether ``flows`` rows of ``width`` hold ``entries`` with at most as much padding as entries."""
    return width > 0 and flows * width <= 2 * entries


@dataclass
class FlowTimes:
    """Per flow, when it completes (seconds; 0 for flows with no bytes or no arcs), and what the solver did."""

    completion_s: np.ndarray
    events: int = 0
    rounds: int = 0


@dataclass
class Incidence:
    """Which flow crosses which arc, both ways: CSR by flow (``flow_ptr``, ``arc``; None when built from
    rows) and CSR by arc (``arc_ptr``, ``arc_flow``: the flows crossing each arc, ascending). Indices are
    int32 where they fit. ``dense`` (when padding costs at most the entries themselves, ``compact_rows``):
    each flow's arcs as a row of a flows x longest-path matrix, padded with ``num_arcs`` (an arc of no
    capacity use and infinite level), so that a flow's arcs are one row read, not a CSR gather."""

    flow_ptr: np.ndarray | None
    arc: np.ndarray | None
    arc_ptr: np.ndarray
    arc_flow: np.ndarray
    num_arcs: int
    dense: np.ndarray | None = None

    @property
    def num_flows(self) -> int:
        return self.flow_ptr.size - 1 if self.flow_ptr is not None else self.dense.shape[0]

    @classmethod
    def of(cls, arc_ptr: np.ndarray, arcs: np.ndarray, num_arcs: int) -> "Incidence":
        """From CSR paths in which every flow crosses at least one arc."""
        arc_ptr, arcs = _index(np.asarray(arc_ptr)), _index(np.asarray(arcs))
        by_arc_ptr, arc_flow = _arc_major(arc_ptr, arcs, num_arcs)
        return cls(arc_ptr, arcs, by_arc_ptr, arc_flow, num_arcs, _dense(arc_ptr, arcs, num_arcs))

    @classmethod
    def of_rows(cls, rows: np.ndarray, num_arcs: int) -> "Incidence":
        """From paths as rows (``FlowPaths.rows``: padded with ``num_arcs``), each with at least one arc. The
        rows are kept as ``dense``, not copied; the padding is sorted to a column of its own, past the arcs."""
        flows, width = rows.shape
        ptr_type = np.int32 if flows * width < 2**31 else np.int64
        by_arc_ptr, arc_flow = _arc_major(np.arange(flows + 1, dtype=ptr_type) * ptr_type(width), rows.reshape(-1),
                                          num_arcs + 1)
        return cls(None, None, by_arc_ptr[:num_arcs + 1], arc_flow, num_arcs, rows)

    def arc_sums(self, flows: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
        """Per arc, how many of ``flows`` cross it (or the sum of their ``weights``)."""
        if self.dense is not None:
            on = self.dense[flows].ravel()
            w = None if weights is None else np.repeat(weights, self.dense.shape[1])
        else:
            entries, lengths = _entries(self.flow_ptr, flows)
            on = self.arc[entries]
            w = None if weights is None else np.repeat(weights, lengths)
        return np.bincount(on, weights=w, minlength=self.num_arcs + 1)[:self.num_arcs]

    def subset(self, flows: np.ndarray) -> "Incidence":
        """The entries of ``flows`` (ascending flow ids), renumbered ``0..len(flows)-1``."""
        if self.flow_ptr is None:
            return Incidence.of_rows(np.take(self.dense, flows, axis=0), self.num_arcs)
        entries, lengths = _entries(self.flow_ptr, flows)
        return Incidence.of(np.concatenate([[0], np.cumsum(lengths)]), self.arc[entries], self.num_arcs)


def _dense(arc_ptr: np.ndarray, arcs: np.ndarray, num_arcs: int) -> np.ndarray | None:
    """Rows of arcs padded with ``num_arcs`` (see ``Incidence``), or None when padding would double the
    entries."""
    lengths = np.diff(arc_ptr)
    width = int(lengths.max(initial=0))
    if not compact_rows(lengths.size, width, arcs.size):
        return None
    flows = lengths.size
    if (lengths == width).all():
        return arcs.reshape(flows, width)   # every path as long: the entries are the rows already
    dense = np.full((flows, width), num_arcs, dtype=np.int32 if num_arcs < 2**31 - 1 else np.int64)
    chunk = 1 << 20
    for f0 in range(0, flows, chunk):   # the entries fill the rows in order: a mask of the first length slots
        f1 = min(flows, f0 + chunk)
        dense[f0:f1][np.arange(width) < lengths[f0:f1, None]] = arcs[arc_ptr[f0]:arc_ptr[f1]]
    return dense


def _arc_major(flow_ptr: np.ndarray, arcs: np.ndarray, columns: int) -> tuple[np.ndarray, np.ndarray]:
    """The flows crossing each of ``columns`` arcs, ascending (CSR by arc), from CSR by flow: scipy's
    CSR -> CSC conversion, a counting sort in O(entries + arcs)."""
    import scipy.sparse as sp  # lazily, as the engines do

    matrix = sp.csr_matrix((np.ones(arcs.size, dtype=np.int8), arcs, flow_ptr), shape=(flow_ptr.size - 1, columns))
    by_arc = matrix.tocsc()
    del matrix
    return _index(by_arc.indptr), _index(by_arc.indices)


def _index(a: np.ndarray) -> np.ndarray:
    """int32 if every value fits (indices and offsets), else int64."""
    if a.dtype == np.int32 or a.size == 0:
        return a.astype(np.int32, copy=False) if a.size == 0 else a
    return a.astype(np.int32) if int(a.max()) < 2**31 and int(a.min()) >= 0 else a.astype(np.int64)


def _entries(ptr: np.ndarray, flows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the entries of ``flows`` in CSR ``ptr`` (flow by flow, in order), and each flow's length."""
    begin = ptr[flows].astype(np.int64)
    lengths = ptr[flows + 1] - begin
    total = int(lengths.sum())
    offsets = np.cumsum(lengths) - lengths
    return np.repeat(begin - offsets, lengths) + np.arange(total), lengths


def max_min_rates(paths: Incidence, capacity: np.ndarray, active: np.ndarray) -> tuple[np.ndarray, int]:
    """Max-min fair rates of the ``active`` flows (0 for the others) on arcs of ``capacity``, and the number
    of filling rounds. Every flow crosses at least one arc, of positive capacity."""
    rate, rounds, _order, _used = _fill(paths, capacity, active)
    return rate, rounds


def _fill(paths: Incidence, capacity: np.ndarray, active: np.ndarray, keep_order: bool = True):
    """Progressive filling, arc by arc: the arcs at the lowest fill level (capacity left by frozen flows
    over unfrozen flows, within ``_TIE``) saturate; their unfrozen flows freeze at the lowest level on
    their paths; the other arcs of those flows give up the flows and take their rates. An arc's level
    only rises as flows on it freeze (each freezes at no more than that arc's level), so the levels of
    successive rounds rise by more than the tie and each flow's rate is the level of the first of its
    arcs to saturate.

    Every arc's level is kept in one array, recomputed whole each round (a few passes over the arcs cost
    less than gathering the live ones); arcs no unfrozen flow crosses, and the padding arc, are at
    infinity. Where one arc saturates alone (nearly every round), its flows freeze at its level exactly:
    it is the lowest of all, so of each of their paths.

    Returns the rates, the rounds, the frozen flows in ascending order of rate (empty unless
    ``keep_order``), and their rates summed per arc."""
    flows, m = paths.num_flows, paths.num_arcs
    rate = np.zeros(flows)
    unfrozen = np.asarray(active, dtype=bool).copy()
    count = np.full(m + 1, 1e300)                # unfrozen flows per arc (the last, the padding arc: never 0)
    if unfrozen.all():
        count[:m] = np.diff(paths.arc_ptr)
    else:
        count[:m] = paths.arc_sums(np.flatnonzero(unfrozen))
    given = np.asarray(capacity, dtype=np.float64)
    left = np.full(m + 1, np.inf)                # the padding arc never fills
    left[:m] = given
    left[:m][count[:m] == 0] = np.inf           # crossed by no flow (perhaps of no capacity): never fills
    level = np.empty(m + 1)
    saturated = []   # (arcs, capacity left): a full arc's left is set to inf for the levels, put back at the end
    stamp = np.zeros(flows, dtype=np.int32)
    order = []
    rounds = 0
    dense = paths.dense
    with np.errstate(divide="ignore", invalid="ignore"):
        while True:
            # no flow left: x / 0 = inf (x > 0: see ``saturated``); a level below 0 (rounding) counts as 0
            np.divide(left, count, out=level)
            lowest_arc = int(level.argmin())
            lowest = max(float(level[lowest_arc]), 0.0)
            if lowest == np.inf:
                break
            rounds += 1
            level[lowest_arc] = np.inf   # is another arc as low? (a second minimum costs less than a comparison)
            if float(level.min()) <= lowest * (1 + _TIE):
                level[lowest_arc] = lowest
                full = np.flatnonzero(level <= lowest * (1 + _TIE))
            else:
                full = np.array([lowest_arc])
            if full.size == 1:
                crossing = paths.arc_flow[paths.arc_ptr[lowest_arc]:paths.arc_ptr[lowest_arc + 1]]
                crossing = crossing[np.take(unfrozen, crossing)]
            else:
                begin, end = paths.arc_ptr[full].astype(np.int64), paths.arc_ptr[full + 1].astype(np.int64)
                size = end - begin
                crossing = paths.arc_flow[np.repeat(begin - (np.cumsum(size) - size), size) + np.arange(int(size.sum()))]
                crossing = crossing[unfrozen[crossing]]
                # once each (a flow may cross several of these arcs): the one position its stamp kept
                stamp[crossing] = np.arange(crossing.size, dtype=np.int32)
                crossing = crossing[stamp[crossing] == np.arange(crossing.size)]
            if dense is not None:
                rows = np.take(dense, crossing, axis=0)   # ~8x faster than dense[crossing] (numpy 2.4)
                on, width = rows.ravel(), rows.shape[1]
            else:
                entries, width = _entries(paths.flow_ptr, crossing)
                on = paths.arc[entries]
                del entries
            if full.size == 1:
                frozen_at = None
            elif dense is not None:
                frozen_at = np.maximum(level[rows].min(axis=1), lowest)
            else:
                frozen_at = np.maximum(np.minimum.reduceat(level[on], np.cumsum(width) - width), lowest) \
                    if on.size else np.zeros(0)
            np.put(unfrozen, crossing, False)
            np.subtract.at(count, on, 1.0)   # scattered over the entries: cheaper than a pass over the arcs
            if frozen_at is None or frozen_at.min() == frozen_at.max():   # all at the lowest level exactly
                at = lowest if frozen_at is None else float(frozen_at[0])
                np.put(rate, crossing, at)
                np.subtract.at(left, on, at)
            else:
                rate[crossing] = frozen_at
                np.subtract.at(left, on, np.repeat(frozen_at, width))
                crossing = crossing[np.argsort(frozen_at, kind="stable")]
            saturated.append((full, left[full]))
            left[full] = np.inf
            if keep_order:
                order.append(crossing)
    for full, was in saturated:
        left[full] = was
    used = given - np.where(np.isinf(left[:m]), given, left[:m])
    return rate, rounds, np.concatenate(order) if order else np.zeros(0, dtype=np.int64), used


def completion_times(arc_ptr: np.ndarray, arcs: np.ndarray, size_bytes: np.ndarray, capacity_Bps: np.ndarray,
                     start_s: np.ndarray | None = None) -> FlowTimes:
    """``solve`` of CSR paths: flow ``i`` crosses ``arcs[arc_ptr[i]:arc_ptr[i + 1]]``, ``capacity_Bps`` per arc.

    >>> # one link of 1 byte/s shared by flows of 1 and 2 bytes: both at 1/2, then the larger alone
    >>> completion_times(np.array([0, 1, 2]), np.array([0, 0]), np.array([1.0, 2.0]), np.array([1.0])).completion_s
    array([2., 3.])
    """
    capacity = np.asarray(capacity_Bps, dtype=np.float64)
    paths = FlowPaths(np.asarray(size_bytes, dtype=np.float64), capacity.size, np.asarray(arc_ptr), np.asarray(arcs))
    return solve(paths, capacity, start_s)


def solve(paths: FlowPaths, capacity_Bps: np.ndarray, start_s: np.ndarray | None = None) -> FlowTimes:
    """Completion time of every flow of ``paths`` under max-min fair sharing, rates recomputed at every event.

    ``capacity_Bps`` per arc (bytes per second, > 0 on every arc a flow crosses); ``start_s`` per flow
    (default: all start at 0). A flow with no bytes or no arcs completes at its start."""
    size = np.asarray(paths.bytes, dtype=np.float64)
    flows = size.size
    start = np.zeros(flows) if start_s is None else np.asarray(start_s, dtype=np.float64)
    moves = paths.moving()
    moves &= size > 0
    if not moves.any():
        return FlowTimes(start.copy())
    capacity = np.asarray(capacity_Bps, dtype=np.float64)
    moving = None if moves.all() else np.flatnonzero(moves)
    if paths.rows is not None:
        incidence = Incidence.of_rows(paths.rows if moving is None else np.take(paths.rows, moving, axis=0),
                                      capacity.size)
    elif moving is None:
        incidence = Incidence.of(paths.arc_ptr, paths.arcs, capacity.size)
    else:
        lengths = np.diff(paths.arc_ptr)
        keep = np.repeat(moves, lengths)
        incidence = Incidence.of(np.concatenate([[0], np.cumsum(lengths[moving])]), np.asarray(paths.arcs)[keep],
                                 capacity.size)
        del keep, lengths
    del moves
    if moving is not None:
        size, start = size[moving], start[moving]
    if start_s is None and size.min() == size.max():
        # equal flows started together: the fastest finish first and free capacity only where every flow
        # left is bottlenecked elsewhere, at a lower rate (see ``_events``), so one fill gives every time
        rate, rounds, _order, _used = _fill(incidence, capacity, np.ones(size.size, dtype=bool), keep_order=False)
        finish, events = np.divide(size, rate, out=rate), rounds   # one finish instant per fill level
    else:
        finish, events, rounds = _events(incidence, capacity, size, start, start_s is None)
    if moving is None:
        completion = finish
    else:
        completion = np.array(start_s, dtype=np.float64) if start_s is not None else np.zeros(flows)
        completion[moving] = finish
    return FlowTimes(completion, events, rounds)


def _events(paths: Incidence, capacity: np.ndarray, size: np.ndarray, start: np.ndarray, together: bool):
    """The event sequence: fill, advance to the next flow end (or start), repeat. Flows slower than every
    flow that just ended keep their rates (filling up to that level is what it was: an ended flow froze no
    arc below its own rate); arrivals change every level. While the flows that end are faster than every
    flow left, nothing is filled again, so those events are taken in one batch in order of finish time.

    The rates of the active flows summed per arc are kept up to date lazily (the flows that ended since
    the last fill are taken off when a fill needs what the kept flows use), so a fill of a few flows
    costs their entries, not every flow's."""
    flows = size.size
    remaining = size.copy()
    finish = np.zeros(flows)
    waiting = np.ones(flows, dtype=bool)   # not started yet
    active = np.zeros(flows, dtype=bool)
    rate = np.zeros(flows)
    on_arc = np.zeros(paths.num_arcs)      # rates of the active flows (and of those in ``ended``) per arc
    ended = []                             # flows ended since on_arc was last brought up to date
    now = float(start.min())
    events = rounds = 0
    floor = 0.0   # the lowest rate among the flows that ended at the last event
    ascending = None   # the active flows by ascending rate, when one fill gave every rate
    carried = None     # the active flows by finish time, as the last batch left them
    while True:
        if waiting.any():
            arrived = waiting & (start <= now * (1 + _TIE)) if not together else waiting
            if arrived.any():
                active |= arrived
                waiting &= ~arrived
                floor = 0.0
                carried = None
        if not active.any():
            if not waiting.any():
                break
            now = float(start[waiting].min())   # idle until the next flow starts
            continue
        kept = active & (rate < floor * (1 - _TIE))
        solve = active & ~kept
        merge = None
        if solve.any():
            solving = np.flatnonzero(solve)
            if kept.any():
                if ended:
                    gone = np.concatenate(ended)
                    on_arc -= paths.arc_sums(gone, rate[gone])
                    ended = []
                on_arc -= paths.arc_sums(solving, rate[solving])
                solved, filled, order, used = _fill(paths, capacity - on_arc, solve)
                on_arc += used
                ascending = None
                merge = solving
            else:
                solved, filled, order, used = _fill(paths, capacity, solve)
                on_arc, ended = used, []
                ascending = order
            rate[solving] = solved[solving]
            rounds += filled
        index = np.flatnonzero(active)
        next_start = float(start[waiting].min()) - now if waiting.any() else np.inf
        sequence = None
        if ascending is not None and ascending.size == index.size and \
                (remaining.min() == remaining.max() if index.size == flows else
                 remaining[index].min() == remaining[index].max()):
            sequence = ascending[::-1]          # equal bytes left: the fastest finish first
        elif merge is not None and carried is not None and merge.size * 4 < index.size:
            # the kept flows keep their order; the few filled again are sorted and merged in
            kept_order = carried[kept[carried]]
            kept_ends = remaining[kept_order] / rate[kept_order]
            if kept_order.size + merge.size == index.size and (np.diff(kept_ends) >= 0).all():
                merge_ends = remaining[merge] / rate[merge]
                by_end = np.argsort(merge_ends, kind="stable")
                at = np.searchsorted(kept_ends, merge_ends[by_end], side="right")
                sequence = np.insert(kept_order, at, merge[by_end])
        if sequence is None:
            to_finish = remaining[index] / rate[index]
            sequence = index[np.argsort(to_finish, kind="stable")]
        ascending = None
        rates = rate[sequence]
        ends = remaining[sequence] / rates      # from now, if no rate changes
        faster_left = np.maximum.accumulate(rates[::-1])[::-1]   # the fastest flow from here on
        elapsed, i, n = 0.0, 0, sequence.size
        while i < n:
            step = float(ends[i]) - elapsed
            arrival = next_start - elapsed < step
            if arrival:
                step = next_start - elapsed
            j = int(np.searchsorted(ends, elapsed + step * (1 + _TIE), side="right"))
            elapsed += step
            events += 1
            if j > i:
                finish[sequence[i:j]] = now + elapsed
                floor = float(rates[i:j].min())
            i = j
            if arrival or (i < n and faster_left[i] >= floor * (1 - _TIE)):
                break
        done, carried = sequence[:i], sequence[i:]
        remaining[carried] -= rates[i:] * elapsed
        remaining[done] = 0.0
        active[done] = False
        ended.append(done)
        now += elapsed
        if not active.any() and not waiting.any():
            break
    return finish, events, rounds


def entries_estimate(topology, demand, qps: int = 1) -> int:
    """Flow x arc entries that fair sharing of ``demand``'s hashed flows would hold, counted without
    listing any pair: pairs inside one server at 4 arcs (NVLink: GPU, NVSwitch, GPU; else GPU, NIC, leaf,
    NIC, GPU), other pairs at the fabric's diameter (``Layout.diameter_hops`` network links) plus the
    two GPU-NIC arcs. An upper bound on generated fabrics, whose diameter is known; all-to-all groups
    are counted from their members' servers (``p * (p - 1)`` pairs a group)."""
    server = topology.server
    layout = topology.layout
    far = (layout.diameter_hops if layout.diameter_hops > 0 else 2 * max(layout.tiers, 1)) + 2
    same = int(((server[demand.src] == server[demand.dst]) & (demand.src != demand.dst)).sum())
    other = int((server[demand.src] != server[demand.dst]).sum())
    if demand.has_a2a:
        groups, p = demand.a2a_members.shape
        for members in demand.a2a_members:
            per_server = np.unique(server[members], return_counts=True)[1].astype(np.int64)
            inside = int((per_server * (per_server - 1)).sum())
            same += inside
            other += p * (p - 1) - inside
    return (same * 4 + other * far) * qps


def summary(completion_s: np.ndarray) -> dict:
    """The distribution a report shows: last, mean, median and 99th percentile, in seconds."""
    if completion_s.size == 0:
        return {"last_s": 0.0, "mean_s": 0.0, "p50_s": 0.0, "p99_s": 0.0}
    return {"last_s": float(completion_s.max()), "mean_s": float(completion_s.mean()),
            "p50_s": float(np.percentile(completion_s, 50)), "p99_s": float(np.percentile(completion_s, 99))}
