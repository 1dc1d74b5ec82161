"""``ecmp-hash``: every flow (or each of its ``qps`` queue pairs) takes ONE shortest path, picked hop by
hop by a seeded hash, as switches hash a flow's header onto one member of the ECMP group.

Same shortest-path next hops as ``ecmp`` (weighted hops included); where ``ecmp`` splits a flow evenly,
here the whole flow (or its queue pair's share) lands on one next hop, so flows collide. Over many queue
pairs the load tends to the ``ecmp`` split; over seeds it shows the spread real fabrics see. The hash is
a deterministic function of (seed, flow, queue pair, hop), so results repeat exactly for a given seed.
"""

from __future__ import annotations

import numpy as np

from ..errors import EngineRefused, Refusal
from ..topology import Topology
from .ecmp import distances_to, routing_graph, search_ops, too_much_search
from .engine import Routed
from .fairshare import FlowPaths, compact_rows
from .traffic import Demand

MAX_FLOWS = 20_000_000
_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer: a well-spread 64-bit hash of uint64 values."""
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK64
    x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK64
    x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK64
    return x ^ (x >> np.uint64(31))


def route(topology: Topology, demand: Demand, seed: int = 0, qps: int = 1,
          arc_mask: np.ndarray | None = None) -> Routed:
    return route_seeds(topology, demand, [seed], qps, arc_mask)[0]


def flow_paths(topology: Topology, demand: Demand, seed: int = 0, qps: int = 1,
               arc_mask: np.ndarray | None = None) -> FlowPaths:
    """Each flow's hashed path, as the fair-share solver takes it (``fairshare.solve``): flow ``i`` (queue
    pairs listed one after another per pair, in the order of ``demand.pairs()``) crosses its arcs in path
    order; unreachable flows have no arcs. As rows (``FlowPaths.rows``) where padding to the longest path
    costs at most the entries (``fairshare.compact_rows``: every fabric's own flows), else as CSR. Arcs are
    int32 (int64 past 2^31 arcs), ``arc_ptr`` int32 while the entries fit, else int64.

    Each flow's hop count is known from the distances before it moves (its distance, or for weighted hops
    its distance split into the weights it is made of), so the layout is known first and the flows are
    walked a chunk at a time, each chunk's arcs copied to their place: no per-hop lists, no sort, no
    temporaries the size of all flows. The arcs are the same as ``route`` follows."""
    setup = _setup(topology, demand, qps, arc_mask)
    src, dst, size = setup.pairs
    flows = src.size * qps
    bytes_ = np.repeat(size / qps, qps) if qps > 1 else size   # a fresh array of demand.pairs()
    index_type = np.int32 if topology.num_arcs < 2**31 else np.int64
    if flows == 0:
        return FlowPaths(bytes_, topology.num_arcs, np.zeros(1, dtype=np.int32), np.zeros(0, dtype=index_type))
    flow_src, flow_dst = (src, dst) if qps == 1 else (np.repeat(src, qps), np.repeat(dst, qps))
    del src, dst, setup.pairs   # no second reference to the pairs: freed as soon as the walks are done
    blocks = list(setup.blocks(flow_dst, 1024 * 2**20))
    del flow_dst   # the blocks hold what the walks need of it
    whole = len(blocks) == 1    # one block of all flows: no copies of their arrays
    lengths = None if whole else np.zeros(flows, dtype=np.int32)
    kept = None
    for targets, mine, col in blocks:
        dist = _distances(setup.graph, targets)
        hops = _hop_counts(dist[flow_src if whole else flow_src[mine], col], setup.weight_set, topology.num_nodes)
        if whole:
            lengths, kept = hops.astype(np.int32, copy=False), dist
        else:
            lengths[mine] = hops
        del dist, hops
    total = int(lengths.sum(dtype=np.int64))
    width = int(lengths.max())
    if compact_rows(flows, width, total):
        paths = FlowPaths(bytes_, topology.num_arcs, rows=np.empty((flows, width), dtype=index_type))
        out, where = paths.rows, None
    else:
        arc_ptr = np.zeros(flows + 1, dtype=np.int32 if total < 2**31 else np.int64)
        np.cumsum(lengths, out=arc_ptr[1:])
        paths = FlowPaths(bytes_, topology.num_arcs, arc_ptr, np.empty(total, dtype=index_type))
        out, where = paths.arcs, arc_ptr[:-1]
    for targets, mine, col in blocks:
        dist = kept if whole else _distances(setup.graph, targets)
        next_hops = _NextHops(topology, setup, dist)
        del dist
        kept = None
        if whole:   # flows that do not move (unreachable) are walked too, and list nothing
            _walk(topology, next_hops, flow_src, col, None, seed, lengths, out=out, pos=where)
        else:
            _walk(topology, next_hops, flow_src[mine], col, mine.view(np.uint64), seed, lengths[mine], out=out,
                  pos=mine if where is None else where[mine])
    return paths


_SEARCH_COLUMNS = 128   # destinations searched at once by ``_distances``


def _distances(graph, targets: np.ndarray) -> np.ndarray:
    """``ecmp.distances_to``'s distances (``N x B`` int32, -1 unreachable), searched for
    ``_SEARCH_COLUMNS`` destinations at a time: the destinations are independent, and the search's
    matrices then stay in cache instead of being faulted in at ``N x B`` every level."""
    dist = np.empty((graph.num_nodes, targets.size), dtype=np.int32)
    for c0 in range(0, targets.size, _SEARCH_COLUMNS):
        dist[:, c0:c0 + _SEARCH_COLUMNS] = distances_to(graph, targets[c0:c0 + _SEARCH_COLUMNS])[0]
    return dist


def _hop_counts(dist: np.ndarray, weight_set: tuple, n: int) -> np.ndarray:
    """Arcs on a shortest path of weighted distance ``dist`` (0 where unreachable): the distance itself
    when every arc weighs 1; with arcs of 1 and ``W`` (``ecmp.arc_weights``: ``W`` is the number of nodes,
    more than any path's arcs of weight 1), ``dist // W + dist % W``. Overwrites ``dist``."""
    dist = np.maximum(dist, 0, out=dist)
    if weight_set == (1,):
        return dist
    if len(weight_set) == 2 and weight_set[0] == 1 and weight_set[1] >= n:
        big = weight_set[1]
        return dist // big + dist % big
    raise ValueError(f"hop counts of arc weights {weight_set} are not known from distances")


class _Setup:
    """What every walk of one (topology, demand, qps, arc mask) shares: the pairs, the routing graph, the
    out-arcs of every node as CSR, and the arc weights."""

    def __init__(self, topology: Topology, demand: Demand, qps: int, arc_mask):
        self.pairs = demand.pairs(compact=True)
        n, m = topology.num_nodes, topology.num_arcs
        usable = np.ones(m, dtype=bool) if arc_mask is None else arc_mask
        self.graph = routing_graph(topology, usable)
        self.relay = self.graph.relay
        self.weight = np.zeros(m, dtype=np.int64)
        self.weight[self.graph.arcs] = self.graph.weight
        self.weight_set = tuple(sorted({int(w) for w in np.unique(self.graph.weight)})) or (1,)
        arcs = self.graph.arcs
        order = np.argsort(topology.src[arcs], kind="stable")
        self.out_arcs = arcs[order]
        self.indptr = np.concatenate([[0], np.cumsum(np.bincount(topology.src[self.out_arcs], minlength=n))])
        self.num_nodes = n

    def blocks(self, flow_dst: np.ndarray, budget_bytes: int = 256 * 2**20):
        """Blocks of destinations whose distance matrices (int32 and float32 per node and destination) fit
        ``budget_bytes``: ``(targets, flows to them (None: all), their column)``."""
        n = self.num_nodes
        present = np.zeros(n, dtype=bool)
        present[flow_dst] = True
        targets_all = np.flatnonzero(present)    # np.unique(flow_dst), without sorting the flows
        block = max(1, min(targets_all.size, budget_bytes // (n * 8)))
        col_of = np.full(n, -1, dtype=np.int32 if n < 2**31 else np.int64)
        if block >= targets_all.size:
            col_of[targets_all] = np.arange(targets_all.size)
            yield targets_all, None, col_of[flow_dst]
            return
        for start in range(0, targets_all.size, block):
            targets = targets_all[start:start + block]
            col_of[targets] = np.arange(targets.size)
            mine = np.flatnonzero(col_of[flow_dst] >= 0)
            yield targets, mine, col_of[flow_dst[mine]]
            col_of[targets] = -1


def _setup(topology: Topology, demand: Demand, qps: int, arc_mask) -> _Setup:
    pairs = int((demand.src != demand.dst).sum())
    if demand.has_a2a:
        groups, p = demand.a2a_members.shape
        pairs += groups * p * (p - 1)
    flows = pairs * qps   # counted before any pair is listed: a 16k-GPU all-to-all has 268 million
    if flows > MAX_FLOWS:
        raise EngineRefused(Refusal("ecmp-hash", f"ecmp-hash would follow {flows:,} flows (more than {MAX_FLOWS:,}); "
                         "use ecmp for this workload or fewer queue pairs"))
    refused = too_much_search("ecmp-hash", search_ops(topology, demand.destinations().size, arc_mask, push=False))
    if refused is not None:
        raise EngineRefused(refused)
    return _Setup(topology, demand, qps, arc_mask)


def route_seeds(topology: Topology, demand: Demand, seeds, qps: int = 1,
                arc_mask: np.ndarray | None = None) -> list[Routed]:
    """One ``Routed`` per seed. The distances to each block of destinations do not depend on the seed, so
    they are computed once for all seeds (the search is most of the work)."""
    setup = _setup(topology, demand, qps, arc_mask)
    src, dst, size = setup.pairs
    m = topology.num_arcs
    routed = [Routed(np.zeros(m)) for _ in seeds]
    if src.size == 0:
        return routed
    flows = src.size * qps
    flow_src, flow_dst = (src, dst) if qps == 1 else (np.repeat(src, qps), np.repeat(dst, qps))
    flow_bytes = np.repeat(size / qps, qps) if qps > 1 else np.ascontiguousarray(size)
    del src, dst, size, setup.pairs
    for targets, mine, col in setup.blocks(flow_dst):
        dist = _distances(setup.graph, targets)
        to_go = dist[flow_src if mine is None else flow_src[mine], col]
        lost = to_go < 0
        if mine is None and not lost.any():   # every flow, all reachable: no copies of their arrays
            here, hops = flow_src, _hop_counts(to_go, setup.weight_set, topology.num_nodes)
            ids, weights = np.arange(flows, dtype=np.uint64), flow_bytes
        else:
            mine = np.arange(flows) if mine is None else mine
            go = mine[~lost]
            here, col, hops = flow_src[go], col[~lost], _hop_counts(to_go[~lost], setup.weight_set, topology.num_nodes)
            ids, weights = go.astype(np.uint64), flow_bytes[go]
        del to_go
        next_hops = _NextHops(topology, setup, dist)
        del dist
        for seed, out in zip(seeds, routed):
            if lost.any():
                out.unreachable_pairs += int(lost.sum()) // qps
                out.unreachable_bytes += float(flow_bytes[mine][lost].sum())
            _walk(topology, next_hops, here, col, ids, seed, hops, load=out.load, flow_bytes=weights)
    return routed


_CHUNK = 2**17   # flows walked together by ``flow_paths``: their temporaries stay a few MB, in cache
_BLOCK_ENTRIES = 2**20   # (node, destination) pairs examined at once by ``_NextHops``


class _NextHops:
    """ECMP groups: for every (node, destination column) ``node * b + column``, the next hops of a switch's
    forwarding table, as ``table`` entries ``start << shift | count`` (``shift`` bits hold the largest
    out-degree; int32 while it fits, else int64): the group is ``pool[start:start + count]``, its out-arcs
    that step one level closer, in out-arc order. ``pool`` begins with every arc id (``pool[a] = a``), so a
    group of one arc starts at that arc; the groups of several arcs follow, each listed once per node."""

    def __init__(self, topology, setup: _Setup, dist: np.ndarray):
        n, b = dist.shape
        m = topology.num_arcs
        self.b = b
        self.shift = shift = max(1, int(np.diff(setup.indptr).max(initial=1)).bit_length())
        dmax = int(dist.max(initial=0))
        wmax = int(setup.weight.max(initial=1))
        if dmax < 127 and wmax < 127:   # exact in int8: fewer bytes to compare
            kind = np.int8
        else:                           # as before: int16 when the distances fit, else int32
            kind = np.int16 if dmax < 2**15 else dist.dtype
        by_node = dist.astype(kind)     # n x b
        entry_type = np.int32 if m << shift < 2**31 else np.int64
        table = np.zeros((n, b), dtype=entry_type)
        degree = np.diff(setup.indptr)
        multi = ([], [], [], [])        # per block: table index, node, out-arcs as bits, count
        # Nodes of one out-degree d at a time, a block of nodes at a time, one out-arc slot j at a time:
        # every operand is a (nodes x destinations) plane.
        for d in np.unique(degree[degree > 0]).tolist():
            nodes_d = np.flatnonzero(degree == d)
            arcs_d = setup.out_arcs[setup.indptr[nodes_d][:, None] + np.arange(d)]   # k x d, out-arc order
            step = max(1, _BLOCK_ENTRIES // (b * -(-d // 32)))   # fewer at a time past 32 out-arcs: d / 8 bytes of bits a pair
            for r0 in range(0, nodes_d.size, step):
                nodes, arcs = nodes_d[r0:r0 + step], arcs_d[r0:r0 + step]
                here = by_node[nodes]
                leaves = here > 0       # neither the destination nor cut off from it
                count = np.zeros(here.shape, dtype=np.uint8 if d < 256 else np.int32)
                only = np.zeros(here.shape, dtype=entry_type)   # the arc, where it is the only one
                bits = np.zeros((here.shape[0], (d + 7) // 8, b), dtype=np.uint8)
                weights = setup.weight[arcs].astype(kind)
                same_weight = (weights == weights.flat[0]).all()
                if same_weight:
                    target = here - weights.flat[0]
                for j in range(d):
                    arc, head = arcs[:, j], topology.dst[arcs[:, j]]
                    there = by_node[head]
                    good = there == (target if same_weight else here - weights[:, j, None])
                    forwards = setup.relay[head]
                    if not forwards.all():
                        good &= forwards[:, None] | (there == 0)
                    good &= leaves
                    count += good
                    np.copyto(only, arc[:, None].astype(entry_type), where=good)
                    bits[:, j // 8] |= good.view(np.uint8) << (j % 8)
                table[nodes] = np.where(count == 1, (only << shift) | 1, 0)
                row, column = np.nonzero(count > 1)
                if row.size:
                    multi[0].append(nodes[row].astype(np.int64) * b + column)
                    multi[1].append(nodes[row])
                    multi[2].append(bits[row, :, column])
                    multi[3].append(count[row, column])
        self.table, self.pool = table.ravel(), np.arange(m, dtype=np.int64)
        if multi[0]:
            self._add_groups(setup, m, *multi)

    def _add_groups(self, setup, m, at_parts, node_parts, bit_parts, count_parts):
        """Groups of several next hops: each (node, set of its out-arcs) listed once in ``pool``, after the
        arc ids; their table entries."""
        shift = self.shift
        pools, places, base = [self.pool], [], m
        for width in sorted({bits.shape[1] for bits in bit_parts}):
            parts = [i for i, bits in enumerate(bit_parts) if bits.shape[1] == width]
            at, node, bits, count = (np.concatenate([arrays[i] for i in parts])
                                     for arrays in (at_parts, node_parts, bit_parts, count_parts))
            if width <= 8:   # sets as one uint64 each: quicker to tell apart than bytes
                words = np.zeros((bits.shape[0], 8), dtype=np.uint8)
                words[:, :width] = bits
                words = words.view(np.uint64).ravel()
            else:
                words = np.ascontiguousarray(bits).view(np.dtype((np.void, width))).ravel()
            sets, set_id = np.unique(words, return_inverse=True)
            _, first, group = np.unique(node.astype(np.int64) * sets.size + set_id.ravel(), return_index=True,
                                        return_inverse=True)
            g, slot = np.nonzero(np.unpackbits(bits[first], axis=1, bitorder="little"))   # by group, out-arc order
            pools.append(setup.out_arcs[setup.indptr[node[first][g]] + slot])
            sizes = count[first].astype(np.int64)
            starts = base + np.cumsum(sizes) - sizes
            places.append((at, (starts[group.ravel()] << shift) | count))
            base += int(sizes.sum())
        self.pool = np.concatenate(pools)
        if self.table.dtype == np.int32 and base << shift >= 2**31:
            self.table = self.table.astype(np.int64)
        for at, entry in places:
            self.table[at] = entry


def _walk(topology, hops_table: _NextHops, here, col, flow_id, seed, hops, load=None, flow_bytes=None,
          out=None, pos=None) -> None:
    """Move every flow ``hops`` arcs (0 for flows that do not move) hop by hop along one hashed
    shortest-path next hop: ``load`` (optional) gets its bytes on every arc it takes, ``out[pos + hop]``
    (optional) the arc it takes at each hop. ``flow_id`` (uint64; None: the flows' positions) seeds each
    flow's hash.

    The next hops of a flow depend only on where it is and where it goes, so they come from a table per
    (node, destination) (``_NextHops``), and each flow picks one of its group's by the hash: the
    same pick as examining every flow's out-arcs, without a flows x degree matrix. Only flows with more
    than one next hop are hashed (the pick of one is that one).

    ``out``: the flows are walked ``_CHUNK`` at a time, all hops of a chunk before the next, so every
    temporary is small and stays in cache; ``out`` is CSR entries (``pos``: where each flow's first arc
    goes) or rows (2-D, padded with the number of arcs; ``pos``: each flow's row, None: flow ``i``'s is row
    ``i``). ``load``: all flows at once, so that each hop adds one ``bincount`` over all flows in flow
    order (the same float sums as before chunking)."""
    step = _CHUNK if out is not None else max(1, here.size)
    salt = np.uint64(seed) * np.uint64(0x100000001B3)
    key_of_pool = topology.dst[hops_table.pool].astype(np.int64) * hops_table.b   # table row a pick leads to
    for c0 in range(0, here.size, step):
        c1 = min(c0 + step, here.size)
        ids = np.arange(c0, c1, dtype=np.uint64) if flow_id is None else flow_id[c0:c1]
        lengths = hops[c0:c1]
        listed = _walk_chunk(topology, hops_table, key_of_pool, here[c0:c1], col[c0:c1], ids, salt, lengths,
                             load, None if flow_bytes is None else flow_bytes[c0:c1],
                             None if out is None else out.dtype, None if out is None or out.ndim == 1 else out.shape[1])
        if out is not None and out.ndim == 2:
            out[slice(c0, c1) if pos is None else pos[c0:c1]] = listed.reshape(c1 - c0, out.shape[1])
        elif out is not None:
            first, last = int(pos[c0]), int(pos[c1 - 1]) + int(lengths[-1])
            if last - first == listed.size:
                out[first:last] = listed
            else:   # flows of one block of destinations: their arcs are not together in ``out``
                starts = np.cumsum(lengths, dtype=np.int64) - lengths
                out[np.repeat(pos[c0:c1] - starts, lengths) + np.arange(listed.size)] = listed


def _walk_chunk(topology, hops_table: _NextHops, key_of_pool, here, col, flow_id, salt, hops, load, flow_bytes,
                listing, width=None):
    """One chunk of ``_walk``; ``listing`` (None, or the dtype of the arcs): return the arcs taken, flow by
    flow in path order (``width``: in rows of ``width``, padded with the number of arcs). Flows that arrived
    keep walking (from the destination, whose table entry is empty, their arcs written to a spare last cell
    and their bytes weighing 0) until a quarter of those still walked are done; then the rest are
    compacted, so few are walked for nothing."""
    table, pool, shift = hops_table.table, hops_table.pool, hops_table.shift
    low = (1 << shift) - 1
    m = topology.num_arcs
    steps = int(hops.max(initial=0))
    walking = hops.size - np.cumsum(np.bincount(hops, minlength=steps + 1))   # walking at each hop
    if listing is not None and width is not None:
        start = np.arange(hops.size, dtype=np.int64) * width
        spare = hops.size * width
        listed = np.full(spare + 1, m, dtype=listing)
    elif listing is not None:
        start = np.cumsum(hops, dtype=np.int64) - hops
        spare = int(hops.sum(dtype=np.int64))
        listed = np.empty(spare + 1, dtype=listing)
    key = here.astype(np.int64) * hops_table.b + col
    base = salt ^ (flow_id << np.uint64(8))
    for hop in range(steps):
        entry = table[key]
        pick = (entry >> shift).astype(np.int64)
        choices = entry & low
        multi = np.flatnonzero(choices > 1)
        if multi.size:
            hashed = base[multi]
            hashed ^= np.uint64(hop)
            _mix_in_place(hashed)
            hashed %= choices[multi].astype(np.uint64)
            pick[multi] += hashed.astype(np.int64)
        chosen = pool[pick]
        arrived = None if walking[hop] == hops.size else hops <= hop
        if load is not None:
            load += np.bincount(chosen, weights=flow_bytes if arrived is None else np.where(arrived, 0.0, flow_bytes),
                                minlength=m)
        if listing is not None:
            listed[start + hop if arrived is None else np.where(arrived, spare, start + hop)] = chosen
        key = key_of_pool[pick]
        key += col
        if hop + 1 < steps and 4 * (hops.size - walking[hop + 1]) >= hops.size:
            keep = np.flatnonzero(hops > hop + 1)
            key, col, base, hops = key[keep], col[keep], base[keep], hops[keep]
            if load is not None:
                flow_bytes = flow_bytes[keep]
            if listing is not None:
                start = start[keep]
    return listed[:-1] if listing is not None else None


def _mix_in_place(x: np.ndarray) -> None:
    """``_mix`` on a uint64 array, overwriting it (uint64 array arithmetic wraps modulo 2^64)."""
    x += np.uint64(0x9E3779B97F4A7C15)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
