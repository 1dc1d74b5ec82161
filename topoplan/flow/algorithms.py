"""Collective algorithms: one table, ``ALGORITHMS``, maps (op, algorithm) to its planner, its nccl-tests
busbw factor, the fabrics it runs on and whether it is the op's default. The spec schema takes its allowed
values from this table, so adding an algorithm is one entry here plus its planner.

A planner ``(topology, design, collective, members, S) -> [Phase]`` compiles one collective for all its
groups at once (``members``: ``(groups, p)`` GPU node ids).

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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from ..topology import Topology
from .placement import group_gpus
from .traffic import BUSBW_FACTOR, CollectivePlan, Demand, Phase, chain_demand, merge, ring_demand, tree_demand

if TYPE_CHECKING:
    from ..spec import Collective, Design


@dataclass(frozen=True)
class Algorithm:
    op: str
    name: str
    plan: Callable                 # (topology, design, collective, members, S) -> list[Phase]
    default: bool = False          # the op's algorithm when the spec names none
    fabrics: tuple = ()            # fabric.topology values it runs on; () = every fabric
    fabric_error: str = ""         # the message and hint when it is asked for on another fabric
    fabric_hint: str = ""

    def busbw_factor(self, p: int) -> float:
        return BUSBW_FACTOR[self.op](p)


def ring_allreduce(topology, design, collective, members, S):
    p = members.shape[1]
    return [Phase("ring", ring_demand(members, 2 * (p - 1) / p * S), 2 * (p - 1))]


def tree_allreduce(topology, design, collective, members, S):
    p = members.shape[1]
    half = S / 2
    demand = merge([tree_demand(members, half), tree_demand(members, half, mirror=True)])
    return [Phase("double binary tree, reduce + broadcast pipelined", demand, 2 * math.ceil(math.log2(p)))]


def hierarchical_allreduce(topology: Topology, design: Design, collective: Collective, members: np.ndarray,
                           S: float) -> list[Phase]:
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


def ring_gather_scatter(topology, design, collective, members, S):
    p = members.shape[1]
    return [Phase("ring", ring_demand(members, (p - 1) / p * S), p - 1)]


def direct_alltoall(topology, design, collective, members, S):
    p = members.shape[1]
    return [Phase("direct", Demand(a2a_members=members, a2a_bytes=S / p), p - 1)]


def tree_rooted(topology, design, collective, members, S):
    """Broadcast from rank 0 down a binary tree, or reduce up it."""
    p = members.shape[1]
    demand = tree_demand(members, S, both_ways=False)
    if collective.op == "reduce":
        demand = Demand(demand.dst, demand.src, demand.bytes)
    return [Phase("binary tree, pipelined", demand, math.ceil(math.log2(p)))]


def chain_rooted(topology, design, collective, members, S):
    """Broadcast from rank 0 along a pipelined chain, or reduce towards it."""
    p = members.shape[1]
    return [Phase("pipelined chain", chain_demand(members, S, reverse=(collective.op == "reduce")), p - 1)]


def stage_to_stage(topology, design, collective, members, S):
    return [Phase("stage to next stage", chain_demand(members, S), 1)]


ALGORITHMS: tuple[Algorithm, ...] = (
    Algorithm("allreduce", "ring", ring_allreduce, default=True),
    Algorithm("allreduce", "tree", tree_allreduce),
    Algorithm("allreduce", "hierarchical", hierarchical_allreduce),
    Algorithm("allreduce", "grid", grid_allreduce, fabrics=("railx",),
              fabric_error="the grid algorithm runs on the rings of a RailX grid",
              fabric_hint="use ring, tree or hierarchical on switched fabrics"),
    Algorithm("allgather", "ring", ring_gather_scatter, default=True),
    Algorithm("reducescatter", "ring", ring_gather_scatter, default=True),
    Algorithm("alltoall", "direct", direct_alltoall, default=True),
    Algorithm("sendrecv", "direct", stage_to_stage, default=True),
    Algorithm("broadcast", "ring", chain_rooted, default=True),
    Algorithm("broadcast", "tree", tree_rooted),
    Algorithm("reduce", "ring", chain_rooted, default=True),
    Algorithm("reduce", "tree", tree_rooted),
)
BY_KEY = {(a.op, a.name): a for a in ALGORITHMS}
OPS = tuple(dict.fromkeys(a.op for a in ALGORITHMS))
NAMES = tuple(dict.fromkeys(a.name for a in ALGORITHMS))
DEFAULT = {a.op: a.name for a in ALGORITHMS if a.default}
FOR_OP = {op: tuple(a.name for a in ALGORITHMS if a.op == op) for op in OPS}


def plan_collective(topology: Topology, design: Design, collective: Collective) -> CollectivePlan:
    """The phases of one collective (the spec validator admits only the table's (op, algorithm) pairs)."""
    algorithm = BY_KEY[(collective.op, collective.algorithm)]
    members = group_gpus(topology, design, collective.group)
    groups, p = members.shape
    phases = algorithm.plan(topology, design, collective, members, float(collective.size_bytes))
    return CollectivePlan(collective, p, groups, algorithm.busbw_factor(p), phases)


def plan_workload(topology: Topology, design: Design) -> list[CollectivePlan]:
    return [plan_collective(topology, design, c) for c in design.workload.collectives]
