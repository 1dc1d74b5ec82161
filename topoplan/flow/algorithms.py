"""Collective algorithms: one table, ``ALGORITHMS``, maps (op, algorithm) to its planner, its nccl-tests
busbw factor, the fabrics it runs on, the NCCL constants it is timed with (``family``), whether NCCL's
tuner considers it under ``algorithm: auto`` (the default), and where it refuses to run. The spec schema
takes its allowed values from this table, so adding an algorithm is one entry here plus its planner.

A planner ``(topology, design, collective, members, S) -> [Phase]`` compiles one collective for all its
groups at once (``members``: ``(groups, p)`` GPU node ids; ``g`` ranks on each of ``m`` servers).

All groups of a collective run at once, so their demands add up in one phase. Within a phase every flow
runs concurrently; phases run one after another, or overlap by chunks where the entry says ``pipelined``.
Channels: where a group spans servers, a ring is ``g`` channel rings, each entering every server at a
different local rank (``channel_rings``), so every GPU's NIC carries an equal share. Sizes follow
nccl-tests (``S`` below); steps are (intra-node, network) for NCCL's latency model:

==============  ==============  ============================================  ====================  ========
op              algorithm       phase demands (per group)                     steps                 busbw x
==============  ==============  ============================================  ====================  ========
allreduce       ring            channel rings, rank -> next: 2(p-1)/p * S     2(p-1) in all,        2(p-1)/p
                                                                              2(m-1) network
allreduce       tree            per channel a chain inside each server and    2(g-1),               2(p-1)/p
                                a binary tree of channel heads across         2 floor(log2 m)
                                servers (half the channels on the mirror
                                tree), every edge both ways: S / 2g each
allreduce       nvls            NVSwitch reduces: S up and down per GPU       NVLS constants        2(p-1)/p
allreduce       nvls-tree       NVLS per server, then a double binary tree    NVLS-Tree constants   2(p-1)/p
                                of 1/g shards per local index; pipelined
allreduce       collnet         reduce-scatter inside servers, 1/g shards     CollNet constants     2(p-1)/p
                                through each NIC into SHARP switches and
                                back (closed-form NIC loads), all-gather
allreduce       hierarchical    1) ring reduce-scatter inside each server     g-1, 2(m-1), g-1      2(p-1)/p
                                (g-1)/g * S; 2) one ring per local index
                                across servers on S/g; 3) all-gather; piped
allreduce       grid (RailX)    as hierarchical, then per local index a 2D    g-1, C-1, 2(R-1),     2(p-1)/p
                                allreduce over the rings of the C x R grid    C-1, g-1
allgather,      ring            channel rings: (p-1)/p * S (S = total)        p-1 (m-1 network)     (p-1)/p
reducescatter
alltoall        direct          every ordered pair at once: S/p               1 (+1 PXN relay)      (p-1)/p
broadcast,      ring            pipelined chain from rank 0 per channel (to   p (m network)         1
reduce                          rank 0 for reduce): S / channels per link
broadcast,      tree            binary tree from rank 0: S per edge           ceil(log2 p)          1
reduce
sendrecv        direct          stage i -> stage i+1: S                       1                     1
permutation     direct          every rank -> one other rank of its group,    1                     1 (*)
                                a derangement drawn by default_rng(seed): S
incast          direct          ranks 1..senders -> rank 0 at once: S each    1                     1 (*)
==============  ==============  ============================================  ====================  ========

(*) Stress cases with no nccl-tests binary and no NCCL tuner: busbw = algbw = S / time, with ``S`` the bytes
each sender sends (an incast's root receives ``senders x S``: its ingress rate is ``senders x`` algbw).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from ..hamilton import ring_decomposition
from ..topology import KIND, Topology
from .nccl import ring_steps
from .placement import group_gpus
from .traffic import BUSBW_FACTOR, CollectivePlan, Demand, Phase, chain_demand, merge, ring_demand, tree_demand

if TYPE_CHECKING:
    from ..spec import Collective, Design


@dataclass(frozen=True)
class Algorithm:
    op: str
    name: str
    plan: Callable                 # (topology, design, collective, members, S) -> list[Phase]
    default: bool = False          # the op's algorithm when the spec names none (besides ``auto``)
    fabrics: tuple = ()            # fabric.topology values it runs on; () = every fabric
    fabric_error: str = ""         # the message and hint when it is asked for on another fabric
    fabric_hint: str = ""
    family: str = "ring"           # NCCL's latency and protocol constants it takes: ring or tree
    nccl: bool = False             # one of NCCL's own algorithms: NCCL's latency formula, not its phases' steps
    auto: bool = False             # a candidate when the spec says ``algorithm: auto`` (NCCL's tuner picks)
    protocols: tuple = ("LL", "LL128", "Simple")
    pipelined: bool = False        # its phases overlap by chunks (time: the slowest stage plus fill)
    refusal: Callable | None = None  # (topology, members) -> why it cannot run there, or "" / None when it can

    def busbw_factor(self, p: int) -> float:
        return BUSBW_FACTOR[self.op](p)


def by_server(topology: Topology, members: np.ndarray) -> tuple[np.ndarray, int, int]:
    """Each group's members ordered by server (stable), the ranks per server ``g`` when every server of
    every group holds the same number (0 otherwise), and the servers the first group spans ``m``."""
    groups, p = members.shape
    servers = topology.server[members]
    order = np.argsort(servers, axis=1, kind="stable")
    members = np.take_along_axis(members, order, axis=1)
    servers = np.take_along_axis(servers, order, axis=1)
    g = int((servers == servers[:, :1]).sum(axis=1).min())
    uniform = p % g == 0 and bool((servers.reshape(groups, p // g, g) ==
                                   servers.reshape(groups, p // g, g)[:, :, :1]).all())
    return members, (g if uniform else 0), int(np.unique(servers[0]).size)


def channel_rings(members: np.ndarray, g: int) -> list[np.ndarray]:
    """NCCL's ring channels over servers of ``g`` ranks each (members ordered by server): channel ``k``
    enters every server at its local rank ``k`` and leaves from local rank ``k - 1``, so each channel
    crosses the network through a different GPU's NIC and all of a server's NICs carry traffic (on rail
    fabrics PXN turns the hop into NVLink plus the rail of rank ``k``). With one rank per server, or an
    irregular group, there is one ring in the given order."""
    if g <= 1:
        return [members]
    groups, p = members.shape
    blocks = members.reshape(groups, p // g, g)
    return [np.roll(blocks, -k, axis=2).reshape(groups, p) for k in range(g)]


def mesh_rings(members: np.ndarray) -> list[np.ndarray]:
    """Ring channels inside one directly meshed node (RailX chips, no switch): the edge-disjoint
    Hamiltonian cycles of K_p (Walecki), each run in both directions, so a ring of p ranks drives 2 of its
    p-1 links per cycle instead of one link per rank. p - 1 directed rings for odd p, p - 2 for even p
    (the decomposition's perfect matching is no ring and stays idle): NCCL's search builds one ring per
    channel over distinct links the same way on a mesh. Fewer than 3 ranks: the one ring."""
    p = members.shape[1]
    cycles = ring_decomposition(p) if p >= 3 else []
    cycles = cycles[:-1] if p % 2 == 0 else cycles   # even p: the last entry is the matching
    if not cycles:
        return [members]
    rings = []
    for cycle in cycles:
        rings += [members[:, cycle], members[:, cycle[::-1]]]
    return rings


# bytes each ring link carries, per byte of the collective's size S (nccl-tests conventions)
RING_SHARE = {"allreduce": lambda p: 2 * (p - 1) / p, "allgather": lambda p: (p - 1) / p,
              "reducescatter": lambda p: (p - 1) / p}


def ring_plan(topology, members, op: str, S: float, label: str = "ring") -> list[Phase]:
    """A ring collective split over channels (``channel_rings``), each carrying an equal share."""
    members, g, m = by_server(topology, members)
    p = members.shape[1]
    if m == 1 and topology.layout.family == "railx":
        rings = mesh_rings(members)
    else:
        rings = channel_rings(members, g if m > 1 else 1)
    demand = merge(ring_demand(ring, RING_SHARE[op](p) * S / len(rings)) for ring in rings).aggregated()
    steps, inter = ring_steps(op, p, m)
    what = f"{label} on {len(rings)} channels" if len(rings) > 1 else label
    return [Phase(what, demand, steps - inter, inter)]


def ring_allreduce(topology, design, collective, members, S):
    return ring_plan(topology, members, "allreduce", S)


def tree_allreduce(topology, design, collective, members, S):
    """NCCL's tree: inside each server a chain from the channel's head rank, across servers a binary tree
    of heads; reduce up and broadcast down, pipelined, so every edge carries the channel's bytes both ways.
    Channels rotate the head over the server's ranks (each leaves through a different NIC), and as in
    NCCL the first half of the channels takes one tree and the duplicated second half its mirror, so each
    NIC carries one channel of each tree (the double binary tree)."""
    members, g, m = by_server(topology, members)
    groups, p = members.shape
    if g == 0:
        g, m = 1, p  # irregular group: a tree over ranks
    blocks = members.reshape(groups, m, g)
    channels = 2 * g
    share = S / channels
    parts = []
    for k in range(g):
        chain = np.roll(blocks, -k, axis=2)                 # head first
        if g > 1:  # channels k and k + g share this chain
            up = chain_demand(chain.reshape(groups * m, g), 2 * share, reverse=True)
            parts += [up, Demand(up.dst, up.src, up.bytes)]
        if m > 1:
            parts += [tree_demand(chain[:, :, 0], share), tree_demand(chain[:, :, 0], share, mirror=True)]
    levels = math.floor(math.log2(m)) if m > 1 else 0
    return [Phase(f"double binary tree on {channels} channels, reduce + broadcast pipelined", merge(parts).aggregated(),
                  2 * (g - 1), 2 * levels)]


def _nvls_refusal(topology: Topology, members: np.ndarray) -> str:
    if not topology.layout.nvls:
        return "NVLS needs an NVSwitch that reduces in the switch (catalog: nvls: true, Hopper and newer)"
    if by_server(topology, members)[2] > 1:
        return "NVLS alone runs inside one NVLink domain; across servers NCCL uses NVLS-Tree"
    return ""


def _nvls_tree_refusal(topology: Topology, members: np.ndarray) -> str:
    if not topology.layout.nvls:
        return "NVLS-Tree needs an NVSwitch that reduces in the switch (catalog: nvls: true)"
    _, g, m = by_server(topology, members)
    if m < 2:
        return "NVLS-Tree joins several servers; inside one NVLink domain NCCL uses NVLS"
    if g == 0:
        return "NVLS-Tree needs the same number of the group's ranks on every server"
    return ""


def nvls_allreduce(topology, design, collective, members, S):
    """NVLS: every GPU writes its buffer into the NVSwitch, which reduces, and reads the result back: each
    GPU's NVLink carries the whole buffer once each way (a ring of S per member has exactly those loads)."""
    return [Phase("NVLS: reduce and multicast in the NVSwitch", ring_demand(members, S), 1, 0, "nvls")]


def nvls_tree_allreduce(topology, design, collective, members, S):
    """NVLS-Tree: NVLS inside each server leaves every GPU with its 1/g shard reduced; the shards of one
    local index form a double binary tree across servers (each GPU's NIC carries its shard's tree), and
    NVLS multicasts the result back. The two stages pipeline."""
    members, g, m = by_server(topology, members)
    groups = members.shape[0]
    blocks = members.reshape(groups, m, g)
    intra = ring_demand(blocks.reshape(groups * m, g), S)
    rails = blocks.transpose(0, 2, 1).reshape(groups * g, m)   # one row per local index
    half = S / g / 2
    inter = merge([tree_demand(rails, half), tree_demand(rails, half, mirror=True)])
    levels = math.floor(math.log2(m))
    return [Phase("NVLS inside each server", intra, 1, 0, "nvls"),
            Phase(f"double binary tree of 1/{g} shards across servers", inter, 0, 2 * levels, "nvls_tree_net")]


def _gpu_nic(topology: Topology) -> np.ndarray:
    """Per node, the NIC a GPU links to directly (-1: none)."""
    kind = topology.kind
    direct = (kind[topology.src] == KIND["gpu"]) & (kind[topology.dst] == KIND["nic"])
    nic = np.full(topology.num_nodes, -1, dtype=np.int64)
    nic[topology.src[direct]] = topology.dst[direct]
    return nic


def _collnet_refusal(topology: Topology, members: np.ndarray) -> str:
    if not topology.layout.in_network_reduction:
        return "CollNet needs switches that reduce in the network (catalog: in_network_reduction, SHARP)"
    _, g, m = by_server(topology, members)
    if m < 2 or g == 0:
        return "CollNet joins several servers holding the same number of the group's ranks"
    if (_gpu_nic(topology)[members] < 0).any():
        return "CollNet's closed form needs each GPU linked to its NIC (not through expanded PCIe switches)"
    return ""


def collnet_allreduce(topology, design, collective, members, S):
    """CollNet Direct (SHARP): reduce-scatter inside each server, then every GPU sends its 1/g shard into the
    switches' aggregation tree through its own NIC and gets the reduced shard back, then all-gather inside
    the server; the stages pipeline. The network stage's loads are closed-form: each member's GPU-NIC and
    NIC-switch links carry its shard each way (shared by the GPUs of one NIC, split over planes); the
    aggregation tree above the NICs carries one reduced stream per switch, which is not routed."""
    members, g, m = by_server(topology, members)
    groups = members.shape[0]
    local = members.reshape(groups, m, g).reshape(groups * m, g)
    shard = S / g
    nic_of = _gpu_nic(topology)
    flat = members.ravel()
    per_nic = np.bincount(nic_of[flat], minlength=topology.num_nodes) * shard
    kind, src, dst = topology.kind, topology.src, topology.dst
    load = np.zeros(topology.num_arcs)
    member = np.zeros(topology.num_nodes, dtype=bool)
    member[flat] = True
    gpu_nic = (kind[src] == KIND["gpu"]) & (kind[dst] == KIND["nic"]) & member[src]
    nic_gpu = (kind[src] == KIND["nic"]) & (kind[dst] == KIND["gpu"]) & member[dst]
    load[gpu_nic | nic_gpu] = shard
    up = (kind[src] == KIND["nic"]) & (kind[dst] == KIND["switch"])
    down = (kind[src] == KIND["switch"]) & (kind[dst] == KIND["nic"])
    uplinks = np.bincount(src[up], minlength=topology.num_nodes)
    load[up] = per_nic[src[up]] / uplinks[src[up]]
    load[down] = per_nic[dst[down]] / uplinks[dst[down]]
    phases = [Phase("intra-server reduce-scatter", ring_demand(local, (g - 1) / g * S), g - 1)] if g > 1 else []
    phases.append(Phase(f"1/{g} shards reduced in the switches (SHARP)", Demand(), 0, 1, "collnet", load))
    if g > 1:
        phases.append(Phase("intra-server all-gather", ring_demand(local, (g - 1) / g * S), g - 1))
    return phases


def hierarchical_allreduce(topology: Topology, design: Design, collective: Collective, members: np.ndarray,
                           S: float) -> list[Phase]:
    """Intra-server reduce-scatter, one inter-server ring per local index, intra-server all-gather; the
    three stages overlap by chunks.

    Needs every server to hold the same number g of each group's ranks; otherwise (or when g == 1 or all
    ranks share one server) it is the flat ring."""
    members, g, m = by_server(topology, members)
    groups, p = members.shape
    if g <= 1 or g == p:
        return ring_plan(topology, members, "allreduce", S, "ring (hierarchy degenerate)")
    blocks = members.reshape(groups, m, g)
    local = blocks.reshape(groups * m, g)                    # rows: the g ranks of a group on one server
    rails = blocks.transpose(0, 2, 1).reshape(groups * g, m)  # rows: one local index across m servers
    intra = ring_demand(local, (g - 1) / g * S)
    inter = ring_demand(rails, 2 * (m - 1) / m * S / g)
    return [Phase("intra-server reduce-scatter", intra, g - 1),
            Phase("inter-server ring per local rank", inter, 0, 2 * (m - 1)),
            Phase("intra-server all-gather", intra, g - 1)]


def grid_allreduce(topology: Topology, design: Design, collective: Collective, members: np.ndarray,
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
        raise design.infeasible(f"workload.collectives[{index}].group",
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
        phases.append(Phase(f"row reduce-scatter on {len(row_rings)} rings", row_phase, 0, columns - 1))
        share /= columns
    if rows > 1:
        by_column = grid.transpose(0, 2, 1)  # [local index, column, row]
        col_phase = merge(ring_demand(by_column[:, :, ring].reshape(-1, rows), 2 * (rows - 1) / rows * share
                                      / len(col_rings)) for ring in col_rings)
        phases.append(Phase(f"column allreduce on {len(col_rings)} rings", col_phase, 0, 2 * (rows - 1)))
    if row_phase is not None:
        phases.append(Phase(f"row all-gather on {len(row_rings)} rings", row_phase, 0, columns - 1))
    if g > 1:
        phases.append(Phase("intra-node all-gather", intra, g - 1))
    return phases


def ring_gather_scatter(topology, design, collective, members, S):
    return ring_plan(topology, members, collective.op, S)


def _crosses_servers(topology, members) -> bool:
    return bool((topology.server[members] != topology.server[members][:, :1]).any())


def _pxn_relays(topology, members) -> bool:
    """PXN will move some of this group's flows over NVLink to another rail's GPU first."""
    rail = topology.rail[members]
    return topology.layout.pxn and _crosses_servers(topology, members) and bool((rail != rail[:, :1]).any())


def direct_alltoall(topology, design, collective, members, S):
    """Every ordered pair at once; NCCL progresses all peers together, so the latency is one step (plus
    one NVLink step where PXN relays through another rail's GPU)."""
    p = members.shape[1]
    network = _crosses_servers(topology, members)
    return [Phase("direct, all peers at once", Demand(a2a_members=members, a2a_bytes=S / p),
                  (0 if network else 1) + _pxn_relays(topology, members), 1 if network else 0)]


def tree_rooted(topology, design, collective, members, S):
    """Broadcast from rank 0 down a binary tree, or reduce up it."""
    p = members.shape[1]
    demand = tree_demand(members, S, both_ways=False)
    if collective.op == "reduce":
        demand = Demand(demand.dst, demand.src, demand.bytes)
    levels = math.ceil(math.log2(p))
    return [Phase("binary tree, pipelined", demand, *((0, levels) if _crosses_servers(topology, members)
                                                      else (levels, 0)))]


def chain_rooted(topology, design, collective, members, S):
    """Broadcast from rank 0 along a pipelined ring (NCCL's ring broadcast), or reduce towards it, one
    chain per channel."""
    members, g, m = by_server(topology, members)
    chains = channel_rings(members, g if m > 1 else 1)
    reverse = collective.op == "reduce"
    demand = merge(chain_demand(chain, S / len(chains), reverse=reverse) for chain in chains).aggregated()
    p = members.shape[1]
    label = "pipelined chain" + (f" on {len(chains)} channels" if len(chains) > 1 else "")
    steps, inter = ring_steps(collective.op, p, m if m > 1 else 0)
    return [Phase(label, demand, steps - inter, inter)]


def stage_to_stage(topology, design, collective, members, S):
    network = _crosses_servers(topology, members)
    return [Phase("stage to next stage", chain_demand(members, S), 0 if network else 1, 1 if network else 0)]


def _one_step(topology: Topology, demand: Demand) -> tuple[int, int]:
    """(intra, network) steps of a one-phase direct exchange: one network step when some flow leaves its
    server (plus one NVLink step where PXN relays a flow through another rail's GPU), else one step inside."""
    server, rail = topology.server, topology.rail
    leaves = server[demand.src] != server[demand.dst]
    if not leaves.any():
        return 1, 0
    relays = topology.layout.pxn and bool((leaves & (rail[demand.src] != rail[demand.dst])).any())
    return int(relays), 1


def derangements(groups: int, p: int, seed: int) -> np.ndarray:
    """``(groups, p)`` positions: row ``k`` maps rank ``i`` of group ``k`` to the rank it sends to, a uniformly
    random permutation without fixed points (rejection: rows with a fixed point are redrawn, each row is one
    with probability about 1/e), drawn by ``numpy.random.default_rng(seed)``, so one seed gives one answer."""
    if p < 2:
        raise ValueError("a derangement needs at least two ranks")
    rng = np.random.default_rng(seed)
    out = np.argsort(rng.random((groups, p)), axis=1, kind="stable")
    bad = np.flatnonzero((out == np.arange(p)).any(axis=1))
    while bad.size:
        out[bad] = np.argsort(rng.random((bad.size, p)), axis=1, kind="stable")
        bad = bad[(out[bad] == np.arange(p)).any(axis=1)]
    return out


def random_permutation(topology, design, collective, members, S):
    """Every rank sends ``S`` bytes to one other rank of its group, all at once: a random derangement per
    group (``derangements``, the collective's ``seed``), so every GPU sends and receives exactly ``S``."""
    groups, p = members.shape
    target = np.take_along_axis(members, derangements(groups, p, collective.seed), axis=1)
    demand = Demand(members.ravel(), target.ravel(), S)
    return [Phase(f"random permutation (seed {collective.seed})", demand, *_one_step(topology, demand))]


def incast_plan(topology, design, collective, members, S):
    """N to 1: ranks 1..N of each group (``senders``, default all others) send ``S`` bytes each to rank 0 at
    once, so rank 0 receives ``N x S``."""
    groups, p = members.shape
    n = collective.senders or p - 1
    if not 1 <= n <= p - 1:
        index = design.workload.collectives.index(collective) if collective in design.workload.collectives else 0
        raise design.infeasible(f"workload.collectives[{index}].senders",
                                f"{n} senders, but a {collective.group} group of {p} ranks has {p - 1} others",
                                f"use 1 to {p - 1}, or leave senders out for all of them")
    demand = Demand(members[:, 1:n + 1].ravel(), np.repeat(members[:, 0], n), S)
    return [Phase(f"incast, {n} to 1", demand, *_one_step(topology, demand))]


ALGORITHMS: tuple[Algorithm, ...] = (
    Algorithm("allreduce", "ring", ring_allreduce, default=True, nccl=True, auto=True),
    Algorithm("allreduce", "tree", tree_allreduce, family="tree", nccl=True, auto=True),
    Algorithm("allreduce", "nvls", nvls_allreduce, family="nvls", nccl=True, auto=True, protocols=("Simple",),
              refusal=_nvls_refusal),
    Algorithm("allreduce", "nvls-tree", nvls_tree_allreduce, family="nvls_tree", nccl=True, auto=True,
              protocols=("Simple",), pipelined=True, refusal=_nvls_tree_refusal),
    Algorithm("allreduce", "collnet", collnet_allreduce, family="collnet", nccl=True, auto=True,
              protocols=("Simple",), pipelined=True, refusal=_collnet_refusal),
    Algorithm("allreduce", "hierarchical", hierarchical_allreduce, protocols=("Simple",), pipelined=True),
    Algorithm("allreduce", "grid", grid_allreduce, fabrics=("railx",),
              fabric_error="the grid algorithm runs on the rings of a RailX grid",
              fabric_hint="use ring, tree or hierarchical on switched fabrics", protocols=("Simple",),
              pipelined=True),
    Algorithm("allgather", "ring", ring_gather_scatter, default=True, nccl=True, auto=True),
    Algorithm("reducescatter", "ring", ring_gather_scatter, default=True, nccl=True, auto=True),
    Algorithm("alltoall", "direct", direct_alltoall, default=True, auto=True, protocols=("Simple",)),
    Algorithm("sendrecv", "direct", stage_to_stage, default=True, auto=True, protocols=("Simple",)),
    Algorithm("broadcast", "ring", chain_rooted, default=True, nccl=True, auto=True),
    Algorithm("broadcast", "tree", tree_rooted, family="tree", protocols=("Simple",)),
    Algorithm("reduce", "ring", chain_rooted, default=True, nccl=True, auto=True),
    Algorithm("reduce", "tree", tree_rooted, family="tree", protocols=("Simple",)),
    # stress cases, not NCCL collectives: ``auto`` is the one direct entry (no tuner chooses among several)
    Algorithm("permutation", "direct", random_permutation, default=True, auto=True, protocols=("Simple",)),
    Algorithm("incast", "direct", incast_plan, default=True, auto=True, protocols=("Simple",)),
)
AUTO = "auto"  # the spec's default: the candidates below, the fastest (algorithm, protocol) taken
BY_KEY = {(a.op, a.name): a for a in ALGORITHMS}
OPS = tuple(dict.fromkeys(a.op for a in ALGORITHMS))
NAMES = (AUTO,) + tuple(dict.fromkeys(a.name for a in ALGORITHMS))
DEFAULT = {a.op: AUTO for a in ALGORITHMS}
FOR_OP = {op: (AUTO,) + tuple(a.name for a in ALGORITHMS if a.op == op) for op in OPS}
CANDIDATES = {op: tuple(a for a in ALGORITHMS if a.op == op and a.auto) for op in OPS}


def candidates(collective: Collective) -> tuple[Algorithm, ...]:
    """The algorithms a collective is timed with: the one it names, or under ``auto`` the tuner's set."""
    if collective.algorithm == AUTO:
        return CANDIDATES[collective.op]
    return (BY_KEY[(collective.op, collective.algorithm)],)


def why_not(algorithm: Algorithm, topology: Topology, members: np.ndarray) -> str:
    """Why ``algorithm`` cannot run this group on this fabric ("" when it can)."""
    return (algorithm.refusal(topology, members) or "") if algorithm.refusal else ""


def plan_collective(topology: Topology, design: Design, collective: Collective,
                    algorithm: Algorithm | None = None) -> CollectivePlan:
    """The phases of one collective under ``algorithm`` (default: its first candidate)."""
    algorithm = algorithm or candidates(collective)[0]
    members = group_gpus(topology, design, collective.group)
    why = why_not(algorithm, topology, members)
    if why:
        index = design.workload.collectives.index(collective) if collective in design.workload.collectives else 0
        raise design.infeasible(f"workload.collectives[{index}].algorithm", why,
                                "use algorithm: auto, which takes what this fabric supports")
    groups, p = members.shape
    servers = int(np.unique(topology.server[members[0]]).size)
    phases = algorithm.plan(topology, design, collective, members, float(collective.size_bytes))
    return CollectivePlan(collective, p, groups, algorithm.busbw_factor(p), phases, algorithm.name, servers)


def applicable(topology: Topology, design: Design, collective: Collective) -> tuple[Algorithm, ...]:
    """The candidates that can run this collective's group here (under ``auto``, the others are skipped)."""
    chosen = candidates(collective)
    if collective.algorithm != AUTO:
        return chosen
    members = group_gpus(topology, design, collective.group)
    return tuple(a for a in chosen if not why_not(a, topology, members))


def plan_workload(topology: Topology, design: Design) -> list[list[CollectivePlan]]:
    """Per collective, one plan per candidate algorithm that applies."""
    return [[plan_collective(topology, design, c, a) for a in applicable(topology, design, c)]
            for c in design.workload.collectives]
