"""Traffic: collectives compiled into phases of demands (fluid model, bytes per flow).

All groups of a collective run at once, so their demands add up in one phase. Within a phase every flow
runs concurrently; phases run one after another. Sizes follow nccl-tests (``S`` below):

==============  ===================  =========================================  =================  ========
op              algorithm            phase demands (per group of p ranks)       latency steps      busbw x
==============  ===================  =========================================  =================  ========
allreduce       ring                 rank -> next: 2(p-1)/p * S                 2(p-1)             2(p-1)/p
allreduce       tree                 double binary tree (heap layout and its    2*ceil(log2 p)     2(p-1)/p
                                     mirror), every edge both ways: S/2 per tree
allreduce       hierarchical         1) ring reduce-scatter inside each server  g-1, 2(m-1), g-1   2(p-1)/p
                                     (g local ranks): (g-1)/g * S; 2) one ring
                                     per local index across m servers on S/g:
                                     2(m-1)/m * S/g; 3) all-gather as in 1)
allreduce       grid (RailX)         1) as hierarchical; then per local index   g-1, C-1, 2(R-1),  2(p-1)/p
                                     on the C x R grid, over the K rings of     C-1, g-1
                                     each row (column) at once, S/K each:
                                     2) row reduce-scatter (C-1)/C * S/(gK);
                                     3) column allreduce on S/(gC);
                                     4) row all-gather; 5) all-gather as 1)
allgather,      ring                 rank -> next: (p-1)/p * S (S = total)      p-1                (p-1)/p
reducescatter
alltoall        direct               every ordered pair: S/p                    p-1                (p-1)/p
broadcast,      ring                 pipelined chain from rank 0 (to rank 0     p-1                1
reduce                               for reduce): S per link
broadcast,      tree                 binary tree from rank 0: S per edge        ceil(log2 p)       1
reduce
sendrecv        direct               stage i -> stage i+1: S                    1                  1
==============  ===================  =========================================  =================  ========

A ``Demand`` holds explicit flows (``src``, ``dst``, ``bytes``) and, for all-to-all, whole groups
(``a2a_members``, every ordered pair sending ``a2a_bytes``), so that engines can aggregate instead of
enumerating p^2 pairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..spec import Collective, Design
from ..topology import Topology
from .placement import group_gpus

_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass
class Demand:
    src: np.ndarray = field(default_factory=lambda: _EMPTY)
    dst: np.ndarray = field(default_factory=lambda: _EMPTY)
    bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))
    a2a_members: np.ndarray | None = None  # (groups, p) GPU node ids
    a2a_bytes: float = 0.0                 # bytes from every member to every other member of its group

    def __post_init__(self):
        self.src = np.asarray(self.src, dtype=np.int64)
        self.dst = np.asarray(self.dst, dtype=np.int64)
        self.bytes = np.broadcast_to(np.asarray(self.bytes, dtype=np.float64), self.src.shape).copy()

    @property
    def has_a2a(self) -> bool:
        return self.a2a_members is not None and self.a2a_bytes > 0 and self.a2a_members.shape[1] > 1

    def pairs(self):
        """All flows as explicit ``(src, dst, bytes)`` arrays (expands all-to-all groups; for small cases)."""
        src, dst, size = [self.src], [self.dst], [self.bytes]
        if self.has_a2a:
            groups, p = self.a2a_members.shape
            a = np.repeat(self.a2a_members, p, axis=1).ravel()
            b = np.tile(self.a2a_members, (1, p)).ravel()
            keep = a != b
            src.append(a[keep])
            dst.append(b[keep])
            size.append(np.full(int(keep.sum()), self.a2a_bytes))
        src, dst, size = np.concatenate(src), np.concatenate(dst), np.concatenate(size)
        keep = (src != dst) & (size > 0)
        return src[keep], dst[keep], size[keep]

    def scaled(self, factor: float) -> "Demand":
        return Demand(self.src, self.dst, self.bytes * factor, self.a2a_members, self.a2a_bytes * factor)

    def destinations(self) -> np.ndarray:
        parts = [self.dst[self.src != self.dst]]
        if self.has_a2a:
            parts.append(self.a2a_members.ravel())
        return np.unique(np.concatenate(parts))


@dataclass
class Phase:
    label: str
    demand: Demand
    steps: int


@dataclass
class CollectivePlan:
    collective: Collective
    group_size: int
    groups: int
    busbw_factor: float
    phases: list


BUSBW_FACTOR = {
    "allreduce": lambda p: 2 * (p - 1) / p,
    "allgather": lambda p: (p - 1) / p,
    "reducescatter": lambda p: (p - 1) / p,
    "alltoall": lambda p: (p - 1) / p,
    "broadcast": lambda p: 1.0,
    "reduce": lambda p: 1.0,
    "sendrecv": lambda p: 1.0,
}


def ring_demand(members: np.ndarray, size: float) -> Demand:
    """Each member sends ``size`` bytes to the next member of its row (the ring closes)."""
    return Demand(members.ravel(), np.roll(members, -1, axis=1).ravel(), size)


def chain_demand(members: np.ndarray, size: float, reverse: bool = False) -> Demand:
    """Member i sends to member i+1 (or i-1 when ``reverse``): a pipelined chain, not closed."""
    a, b = members[:, :-1].ravel(), members[:, 1:].ravel()
    return Demand(b, a, size) if reverse else Demand(a, b, size)


def tree_demand(members: np.ndarray, size: float, both_ways: bool = True, mirror: bool = False) -> Demand:
    """Edges of a binary tree over each row, heap layout (position i's parent is (i-1)//2, root 0);
    ``mirror`` builds it over the reversed row, so that the two trees of a double binary tree have
    complementary interior nodes. ``size`` bytes each way (or parent to child only)."""
    p = members.shape[1]
    rows = members[:, ::-1] if mirror else members
    child = np.arange(1, p)
    parent = (child - 1) // 2
    a, b = rows[:, child].ravel(), rows[:, parent].ravel()
    if both_ways:
        return Demand(np.concatenate([a, b]), np.concatenate([b, a]), size)
    return Demand(b, a, size)  # parent -> child (broadcast direction)


def merge(demands) -> Demand:
    demands = list(demands)
    a2a = [d for d in demands if d.has_a2a]
    if len(a2a) > 1:
        raise ValueError("one phase holds at most one all-to-all")
    return Demand(np.concatenate([d.src for d in demands]), np.concatenate([d.dst for d in demands]),
                  np.concatenate([d.bytes for d in demands]),
                  a2a[0].a2a_members if a2a else None, a2a[0].a2a_bytes if a2a else 0.0)


def plan_collective(topology: Topology, design: Design, collective: Collective) -> CollectivePlan:
    members = group_gpus(topology, design, collective.group)
    groups, p = members.shape
    S = float(collective.size_bytes)
    op, algorithm = collective.op, collective.algorithm
    phases: list[Phase] = []
    if op == "allreduce" and algorithm == "hierarchical":
        phases = _hierarchical_allreduce(topology, members, S)
    elif op == "allreduce" and algorithm == "grid":
        phases = _grid_allreduce(topology, design, collective, members, S)
    elif op == "allreduce" and algorithm == "tree":
        half = S / 2
        demand = merge([tree_demand(members, half), tree_demand(members, half, mirror=True)])
        phases = [Phase("double binary tree, reduce + broadcast pipelined", demand, 2 * math.ceil(math.log2(p)))]
    elif op == "allreduce":
        phases = [Phase("ring", ring_demand(members, 2 * (p - 1) / p * S), 2 * (p - 1))]
    elif op in ("allgather", "reducescatter"):
        phases = [Phase("ring", ring_demand(members, (p - 1) / p * S), p - 1)]
    elif op == "alltoall":
        phases = [Phase("direct", Demand(a2a_members=members, a2a_bytes=S / p), p - 1)]
    elif op in ("broadcast", "reduce") and algorithm == "tree":
        demand = tree_demand(members, S, both_ways=False)
        if op == "reduce":
            demand = Demand(demand.dst, demand.src, demand.bytes)
        phases = [Phase("binary tree, pipelined", demand, math.ceil(math.log2(p)))]
    elif op in ("broadcast", "reduce"):
        phases = [Phase("pipelined chain", chain_demand(members, S, reverse=(op == "reduce")), p - 1)]
    elif op == "sendrecv":
        phases = [Phase("stage to next stage", chain_demand(members, S), 1)]
    else:  # the spec validator allows only the combinations above
        raise ValueError(f"no traffic model for {op}/{algorithm}")
    return CollectivePlan(collective, p, groups, BUSBW_FACTOR[op](p), phases)


def _hierarchical_allreduce(topology: Topology, members: np.ndarray, S: float) -> list[Phase]:
    """Intra-server reduce-scatter, one inter-server ring per local index, intra-server all-gather.

    Needs every server to hold the same number g of each group's ranks; otherwise (or when g == 1 or all
    ranks share one server) it is the flat ring."""
    groups, p = members.shape
    servers = topology.server[members]                       # (groups, p)
    order = np.argsort(servers, axis=1, kind="stable")
    members = np.take_along_axis(members, order, axis=1)
    servers = np.take_along_axis(servers, order, axis=1)
    first = servers[:, :1]
    g = int((servers == first).sum(axis=1).min())
    uniform = p % g == 0 and (servers.reshape(groups, p // g, g) == servers.reshape(groups, p // g, g)[:, :, :1]).all()
    if g == 1 or g == p or not uniform:
        return [Phase("ring (hierarchy degenerate)", ring_demand(members, 2 * (p - 1) / p * S), 2 * (p - 1))]
    m = p // g
    blocks = members.reshape(groups, m, g)
    local = blocks.reshape(groups * m, g)                    # rows: the g ranks of a group on one server
    rails = blocks.transpose(0, 2, 1).reshape(groups * g, m)  # rows: one local index across m servers
    intra = ring_demand(local, (g - 1) / g * S)
    inter = ring_demand(rails, 2 * (m - 1) / m * S / g)
    return [Phase("intra-server reduce-scatter", intra, g - 1),
            Phase("inter-server ring per local rank", inter, 2 * (m - 1)),
            Phase("intra-server all-gather", intra, g - 1)]


# all-to-all groups are expanded into pairs for PXN up to this many pairs
MAX_PXN_PAIRS = 40_000_000


def apply_pxn(topology: Topology, demand: Demand) -> Demand:
    """NCCL's PXN on rail fabrics: a flow between servers whose GPUs sit on different rails first moves
    over NVLink to the GPU of the source's server on the destination's rail, then crosses the fabric on
    that rail. Servers without NVLink, and flows already on one rail, are left as they are."""
    from ..topology import KIND

    gpus = topology.gpus
    server, rail = topology.server, topology.rail
    nvlink = np.zeros(topology.num_nodes, dtype=bool)
    nvlink[topology.src[topology.kind[topology.dst] == KIND["nvswitch"]]] = True
    rails = int(rail[gpus].max()) + 1
    relay_of = np.full((int(server[gpus].max()) + 1) * rails, -1, dtype=np.int64)
    relay_of[(server[gpus] * rails + rail[gpus])[::-1]] = gpus[::-1]  # first GPU of each (server, rail)
    if demand.has_a2a:
        members = demand.a2a_members
        pairs = Demand(demand.src, demand.dst, demand.bytes)
        if (rail[members] == rail[members][:, :1]).all():
            return merge([apply_pxn(topology, pairs), Demand(a2a_members=members, a2a_bytes=demand.a2a_bytes)])
        whole = _pxn_whole_servers(topology, members, demand.a2a_bytes, nvlink)
        if whole is not None:
            return merge([apply_pxn(topology, pairs), whole])
        if members.size * members.shape[1] > MAX_PXN_PAIRS:
            return merge([apply_pxn(topology, pairs), Demand(a2a_members=members, a2a_bytes=demand.a2a_bytes)])
        demand = Demand(*demand.pairs())
    a, b, w = demand.src, demand.dst, demand.bytes
    move = (server[a] != server[b]) & (rail[a] != rail[b]) & nvlink[a]
    if not move.any():
        return demand
    relay = relay_of[server[a[move]] * rails + rail[b[move]]]
    return Demand(np.concatenate([a[~move], a[move], relay]), np.concatenate([b[~move], relay, b[move]]),
                  np.concatenate([w[~move], w[move], w[move]]))


def _pxn_whole_servers(topology: Topology, members: np.ndarray, size: float, nvlink: np.ndarray) -> Demand | None:
    """PXN of all-to-all groups made of whole NVLink servers with one GPU per rail, without listing pairs.

    With ``k`` GPUs per server and ``m`` servers per group, a GPU sends ``size`` to every other member.
    Under PXN the flows to rail ``r`` of other servers gather on the source server's GPU of rail ``r``:
    * over NVLink, each member sends ``m * size`` to each other GPU of its server: ``size`` of its own
      plus ``(m - 1) * size`` for that GPU to forward;
    * across the fabric, the GPUs of one rail form an all-to-all of ``k * size`` per pair: the relay's own
      flow plus the ``k - 1`` it forwards.
    Returns None when the groups are not of that shape (the caller then lists pairs)."""
    server, rail = topology.server, topology.rail
    groups, p = members.shape
    k = int(np.bincount(server[topology.gpus]).max())
    if p % k or not nvlink[members].all():
        return None
    order = np.argsort(server[members].astype(np.int64) * k + rail[members], axis=1, kind="stable")
    by_server = np.take_along_axis(members, order, axis=1).reshape(groups, p // k, k)
    servers = server[by_server]
    if not ((servers == servers[:, :, :1]).all() and (rail[by_server] == np.arange(k)).all()):
        return None  # not whole servers, or not one GPU per rail
    if np.unique(servers[:, :, 0]).size != groups * (p // k):
        return None  # a server split across groups
    m = p // k
    local = by_server.reshape(-1, k)               # (groups * m, k): the GPUs of one server, by rail
    src = np.repeat(local, k, axis=1).ravel()
    dst = np.tile(local, (1, k)).ravel()
    keep = src != dst
    per_rail = by_server.transpose(0, 2, 1).reshape(groups * k, m)  # one row per (group, rail)
    return Demand(src[keep], dst[keep], m * size, a2a_members=per_rail if m > 1 else None,
                  a2a_bytes=k * size if m > 1 else 0.0)


def _grid_allreduce(topology: Topology, design: Design, collective: Collective, members: np.ndarray,
                    S: float) -> list[Phase]:
    """AllReduce on a RailX grid along its rails: inside each node as ``hierarchical``, then for each local
    index a 2D allreduce over the C x R grid of nodes, every ring of a row (column) carrying 1/K of it."""
    layout = topology.layout.grid
    columns, rows = layout.columns, layout.rows
    nodes = columns * rows
    groups, p = members.shape
    node = topology.row[members].astype(np.int64) * columns + topology.col[members]
    order = np.argsort(node * topology.num_nodes + members, axis=1, kind="stable")
    members, node = np.take_along_axis(members, order, axis=1), np.take_along_axis(node, order, axis=1)
    g = p // nodes
    if p % nodes or not (node.reshape(groups, nodes, g) == np.arange(nodes)[:, None]).all():
        index = design.workload.collectives.index(collective)
        raise design.infeasible(f"workload.collectives.{index}.group",
                                f"the grid algorithm needs every node of the {columns} x {rows} grid to hold the "
                                f"same number of the {collective.group} group's ranks",
                                "use it on a group that spans the grid, e.g. dp with tp inside a node")
    blocks = members.reshape(groups, nodes, g)
    phases = []
    if g > 1:
        intra = ring_demand(blocks.reshape(-1, g), (g - 1) / g * S)
        phases.append(Phase("intra-node reduce-scatter", intra, g - 1))
    grid = blocks.transpose(0, 2, 1).reshape(groups * g, rows, columns)  # per local index: [row, column]
    share = S / g
    row_rings = [np.asarray(ring) for ring in layout.row_rings]
    col_rings = [np.asarray(ring) for ring in layout.column_rings]
    for n, rings, what in ((columns, row_rings, "row"), (rows, col_rings, "column")):
        if n > 1 and not rings:
            raise design.infeasible("fabric.railx", f"the grid algorithm needs {what} rails, and there are none",
                                    f"give the {what}s rails or use the ring algorithm")
    row_phase = None
    if columns > 1:
        row_phase = merge(ring_demand(grid[:, :, ring].reshape(-1, columns), (columns - 1) / columns * share
                                      / len(row_rings)) for ring in row_rings)
        phases.append(Phase(f"row reduce-scatter on {len(row_rings)} rings", row_phase, columns - 1))
        share /= columns
    if rows > 1:
        by_column = grid.transpose(0, 2, 1)  # [local index, column, row]
        col_phase = merge(ring_demand(by_column[:, :, ring].reshape(-1, rows), 2 * (rows - 1) / rows * share
                                      / len(col_rings)) for ring in col_rings)
        phases.append(Phase(f"column allreduce on {len(col_rings)} rings", col_phase, 2 * (rows - 1)))
    if row_phase is not None:
        phases.append(Phase(f"row all-gather on {len(row_rings)} rings", row_phase, columns - 1))
    if g > 1:
        phases.append(Phase("intra-node all-gather", intra, g - 1))
    return phases


def plan_workload(topology: Topology, design: Design) -> list[CollectivePlan]:
    return [plan_collective(topology, design, c) for c in design.workload.collectives]
