"""Traffic: the demands collectives compile into (fluid model, bytes per flow), and the building blocks of
the planners in ``algorithms.py`` (rings, chains, trees, NCCL's PXN rewrite).

All groups of a collective run at once, so their demands add up in one phase. Within a phase every flow
runs concurrently; phases run one after another.

A ``Demand`` holds explicit flows (``src``, ``dst``, ``bytes``) and, for all-to-all, whole groups
(``a2a_members``, every ordered pair sending ``a2a_bytes``), so that engines can aggregate instead of
enumerating p^2 pairs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from typing import TYPE_CHECKING

from ..topology import Topology

if TYPE_CHECKING:
    from ..spec import Collective

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

    def pairs(self, compact: bool = False):
        """All flows as explicit ``(src, dst, bytes)`` arrays (expands all-to-all groups). ``compact`` (for
        walks over millions of pairs): where the all-to-all is the whole demand, node ids as int32 when they
        fit and its equal sizes as one read-only value broadcast over the pairs (a 4k-GPU world all-to-all
        has 16.8 million pairs: 134 MB an array saved each)."""
        src, dst, size = [self.src], [self.dst], [self.bytes]
        compact = compact and self.src.size == 0
        if self.has_a2a:
            groups, p = self.a2a_members.shape
            members = self.a2a_members
            if compact and members.size and 0 <= members.min() and members.max() < 2**31:
                members = members.astype(np.int32)
            if (np.diff(np.sort(members, axis=1), axis=1) != 0).all():
                # distinct members: every (i, j) with i != j, listed without the p x p expansion
                a = np.repeat(members, p - 1, axis=1).ravel()
                b = np.broadcast_to(members[:, None, :], (groups, p, p))[:, ~np.eye(p, dtype=bool)].ravel()
            else:
                a = np.repeat(members, p, axis=1).ravel()
                b = np.tile(members, (1, p)).ravel()
                keep = a != b
                a, b = a[keep], b[keep]
            src.append(a)
            dst.append(b)
            size.append(np.broadcast_to(np.float64(self.a2a_bytes), a.shape) if compact else np.full(a.size, self.a2a_bytes))
        if self.src.size == 0 and len(src) == 2 and np.issubdtype(self.a2a_members.dtype, np.signedinteger):
            # the all-to-all alone: its arrays as they are, not concatenated copies (16.8M pairs at 4k GPUs)
            src, dst = (src[1], dst[1]) if compact else (src[1].astype(np.int64, copy=False), dst[1].astype(np.int64, copy=False))
            size = size[1].astype(np.float64, copy=False)
        else:
            src, dst, size = np.concatenate(src), np.concatenate(dst), np.concatenate(size)
        keep = (src != dst) & (size > 0)
        if keep.all():
            return src, dst, size
        return src[keep], dst[keep], size[keep]

    def aggregated(self) -> "Demand":
        """The same traffic with each (source, destination) pair listed once, bytes summed: channel rings
        repeat most of their pairs (every rotation of a server's ranks has the same neighbours)."""
        if self.src.size < 2:
            return self
        key = self.src * (int(max(self.src.max(), self.dst.max())) + 1) + self.dst
        unique, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        if unique.size == key.size:
            return self
        return Demand(self.src[first], self.dst[first], np.bincount(inverse, weights=self.bytes),
                      self.a2a_members, self.a2a_bytes)

    def scaled(self, factor: float) -> "Demand":
        return Demand(self.src, self.dst, self.bytes * factor, self.a2a_members, self.a2a_bytes * factor)

    def destinations(self) -> np.ndarray:
        parts = [self.dst[self.src != self.dst]]
        if self.has_a2a:
            parts.append(self.a2a_members.ravel())
        return np.unique(np.concatenate(parts))


@dataclass
class Phase:
    """One stage of a collective: its flows, and its latency steps inside a server and across the network
    (the step counts of NCCL's latency model)."""

    label: str
    demand: Demand
    intra_steps: int
    inter_steps: int = 0
    family: str = ""   # NCCL constants for this phase's bandwidth, when not the algorithm's own
    load: np.ndarray | None = None  # bytes per arc given in closed form (the engine is not asked)

    @property
    def steps(self) -> int:
        return self.intra_steps + self.inter_steps


@dataclass
class CollectivePlan:
    """One algorithm's phases for a collective over all its groups; ``servers``: servers one group spans."""

    collective: Collective
    group_size: int
    groups: int
    busbw_factor: float
    phases: list
    algorithm: str = ""
    servers: int = 1


BUSBW_FACTOR = {
    "allreduce": lambda p: 2 * (p - 1) / p,
    "allgather": lambda p: (p - 1) / p,
    "reducescatter": lambda p: (p - 1) / p,
    "alltoall": lambda p: (p - 1) / p,
    "broadcast": lambda p: 1.0,
    "reduce": lambda p: 1.0,
    "sendrecv": lambda p: 1.0,
    "permutation": lambda p: 1.0,   # no nccl-tests binary: algbw (each rank sends and receives S)
    "incast": lambda p: 1.0,        # no nccl-tests binary: algbw with S per sender
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
