"""Placement: which GPU runs which rank, and the parallel groups as arrays.

Ranks ``0..W-1`` take the topology's GPUs in order (server by server, GPU index inside the server), so
the innermost parallel dimension lands inside a server. ``workload.order`` lists the dimensions innermost
first (default ``tp, cp, dp, pp``): rank ``r`` has coordinates ``r = tp_i + tp*(cp_i + cp*(dp_i + dp*pp_i))``.
A group of dimension ``X`` is the set of ranks that differ only in ``X``; expert-parallel groups are carved
out of the data-parallel dimension (consecutive ``ep`` data-parallel ranks). Groups are ``(groups, size)``
integer arrays of GPU node ids, never lists of lists.
"""

from __future__ import annotations

import numpy as np

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..spec import Design
from ..topology import Topology


def rank_gpus(topology: Topology) -> np.ndarray:
    """GPU node id of each rank."""
    return topology.gpus


def group_ranks(design: Design, group: str) -> np.ndarray:
    """``(num_groups, group_size)`` array of ranks for ``group`` (tp, cp, dp, pp, ep or world)."""
    world = design.gpus
    if group == "world":
        return np.arange(world, dtype=np.int64).reshape(1, world)
    degrees = design.workload.parallelism
    order = list(design.workload.order)  # innermost first
    shape = []
    for dim in reversed(order):  # numpy axes run outermost to innermost
        if dim == "dp" and group == "ep":
            shape += [("dp-outer", degrees["dp"] // degrees["ep"]), ("ep", degrees["ep"])]
        else:
            shape.append((dim, degrees[dim]))
    names = [name for name, _ in shape]
    ranks = np.arange(world, dtype=np.int64).reshape([size for _, size in shape])
    axis = names.index(group)
    return np.moveaxis(ranks, axis, -1).reshape(-1, shape[axis][1])


def group_gpus(topology: Topology, design: Design, group: str) -> np.ndarray:
    """``(num_groups, group_size)`` array of GPU node ids."""
    return rank_gpus(topology)[group_ranks(design, group)]
