"""``optimal``: the routing of the switch fabric that minimizes the largest link utilization.

A multicommodity-flow linear program solved with OR-Tools (PDLP, GLOP as fallback), built from sparse
arrays in one call:

    minimize U
    subject to  for each commodity k and switch v:  out_k(v) - in_k(v) = supply_k(v)
                for each switch-to-switch arc a:    sum_k f_k(a) <= U * capacity(a)
                f >= 0

Commodities are aggregated by source leaf (all traffic entering the fabric at one leaf), which is exact
because a GPU reaches its leaf by one path (GPU - NIC - leaf, an equal share per plane): host links carry
the same bytes under every routing and are taken from ``ecmp``. Sinks are the destination leaves.
So ``optimal`` can only lower the fabric's utilization below ``ecmp``'s, never raise it.

For small and medium fabrics (the LP has commodities x fabric arcs variables); larger ones are refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import EngineRefused, Refusal
from ..topology import KIND, Topology
from . import clos
from .engine import Routed
from .traffic import Demand

if TYPE_CHECKING:
    import scipy.sparse as sp

MAX_VARIABLES = 3_000_000
_PDLP_PARAMETERS = ("termination_criteria { simple_optimality_criteria { eps_optimal_absolute: 1e-10 "
                    "eps_optimal_relative: 1e-10 } }")


def leaf_demands(topology: Topology, ix, demand: Demand) -> sp.csr_matrix:
    """``N x N`` sparse bytes from each source leaf to each destination leaf, over all planes."""
    import scipy.sparse as sp  # lazily: loading a spec or the CLI needs no scipy
    n = topology.num_nodes
    rows, cols, vals = [], [], []
    src, dst, size = demand.src, demand.dst, demand.bytes
    keep = src != dst
    a, b, w = src[keep], dst[keep], size[keep]
    nic_a, nic_b = ix.nic_of_gpu[a], ix.nic_of_gpu[b]
    fabric = ~((ix.nvlink[a] & (topology.server[a] == topology.server[b])) | (nic_a == nic_b))
    for plane in range(ix.planes):
        la, lb = ix.leaf_of_nic[plane, nic_a], ix.leaf_of_nic[plane, nic_b]
        cross = fabric & (la != lb)
        rows.append(la[cross])
        cols.append(lb[cross])
        vals.append(w[cross] / ix.planes)
    matrix = sp.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n, n))
    if demand.has_a2a:
        members = demand.a2a_members
        groups, p = members.shape
        for plane in range(ix.planes):
            leaves = ix.leaf_of_nic[plane, ix.nic_of_gpu[members]]
            counts = sp.csr_matrix((np.ones(members.size), (np.repeat(np.arange(groups), p), leaves.ravel())),
                                   shape=(groups, n))
            pairs = (counts.T @ counts).tocsr()
            pairs.setdiag(0)
            matrix = matrix + pairs * (demand.a2a_bytes / ix.planes)
    if ix.isolated_pods:  # no path between some pods (rail-only rails): clos.route counts those unreachable
        coo = matrix.tocoo()
        island = ix.pod_island[topology.pod]
        matrix = sp.csr_matrix((np.where(island[coo.row] == island[coo.col], coo.data, 0.0), (coo.row, coo.col)),
                               shape=(n, n))
    matrix.eliminate_zeros()
    return matrix


def refusal(topology: Topology) -> Refusal | None:
    """The LP aggregates commodities by leaf, which needs the folded-Clos access paths."""
    ix = clos.index_of(topology)
    return Refusal("optimal", f"optimal engine needs GPU-NIC-leaf access paths: {ix}") if isinstance(ix, str) else None


def route(topology: Topology, demand: Demand) -> Routed:
    import scipy.sparse as sp  # lazily: loading a spec or the CLI needs no scipy
    refused = refusal(topology)
    if refused is not None:
        raise EngineRefused(refused)
    ix = clos.index_of(topology)
    routed = clos.route(topology, demand)  # host links (and the ECMP fabric loads we replace)
    fabric_arcs = np.flatnonzero((topology.kind[topology.src] == KIND["switch"]) &
                                 (topology.kind[topology.dst] == KIND["switch"]))
    leaf_matrix = leaf_demands(topology, ix, demand)
    load = routed.load
    ecmp_fabric = load[fabric_arcs].copy()
    if leaf_matrix.nnz == 0 or fabric_arcs.size == 0:
        return routed
    sources = np.flatnonzero(np.asarray(leaf_matrix.sum(axis=1)).ravel() > 0)
    switches = np.flatnonzero(topology.kind == KIND["switch"])
    local = np.full(topology.num_nodes, -1, dtype=np.int64)
    local[switches] = np.arange(switches.size)
    # parallel arcs between the same two switches share one variable of their summed capacity, split in
    # proportion to capacity afterwards, so that every arc of the bundle runs at the bundle's utilization
    pair_key = topology.src[fabric_arcs].astype(np.int64) * topology.num_nodes + topology.dst[fabric_arcs]
    pairs, pair_of_arc = np.unique(pair_key, return_inverse=True)
    pair_capacity = np.bincount(pair_of_arc, weights=topology.capacity_gbps[fabric_arcs])
    pair_src, pair_dst = pairs // topology.num_nodes, pairs % topology.num_nodes
    k_count, v_count, a_count = sources.size, switches.size, pairs.size
    if k_count * a_count > MAX_VARIABLES:
        raise EngineRefused(Refusal("optimal", f"the optimal LP would have {k_count * a_count:,} variables "
                                    f"(more than {MAX_VARIABLES:,}); use ecmp at this scale"))
    scale = float(leaf_matrix.data.max())
    cap = pair_capacity / pair_capacity.max()
    tail, head = local[pair_src], local[pair_dst]

    # flow variables f[k, a] at column k * A + a, then U last
    k_index = np.repeat(np.arange(k_count), a_count)
    a_index = np.tile(np.arange(a_count), k_count)
    columns = k_index * a_count + a_index
    conservation_rows = np.concatenate([k_index * v_count + tail[a_index], k_index * v_count + head[a_index]])
    capacity_rows = k_count * v_count + a_index
    u_column = k_count * a_count
    rows = np.concatenate([conservation_rows, capacity_rows, k_count * v_count + np.arange(a_count)])
    cols = np.concatenate([columns, columns, columns, np.full(a_count, u_column)])
    vals = np.concatenate([np.ones(columns.size), -np.ones(columns.size), np.ones(columns.size), -cap])
    n_rows = k_count * v_count + a_count
    matrix = sp.csr_matrix((vals, (rows, cols)), shape=(n_rows, u_column + 1))
    supply = np.zeros((k_count, v_count))
    block = (leaf_matrix[sources] / scale).tocoo()
    np.add.at(supply, (block.row, local[block.col]), -block.data)
    supply[np.arange(k_count), local[sources]] += np.asarray(leaf_matrix[sources].sum(axis=1)).ravel() / scale
    lower = np.concatenate([supply.ravel(), np.full(a_count, -np.inf)])
    upper = np.concatenate([supply.ravel(), np.zeros(a_count)])
    values = _solve(matrix, lower, upper, u_column)
    flows = values[:u_column].reshape(k_count, a_count).sum(axis=0) * scale
    optimal = flows[pair_of_arc] * topology.capacity_gbps[fabric_arcs] / pair_capacity[pair_of_arc]
    # ECMP's routing is one feasible point of the LP: keep it if the solver's answer is no better
    # (first-order solvers end within a tolerance of the optimum)
    utilization = lambda x: float((x / topology.capacity_gbps[fabric_arcs]).max())
    if utilization(optimal) < utilization(ecmp_fabric):
        load[fabric_arcs] = optimal
    return routed


def _solve(matrix: sp.csr_matrix, lower: np.ndarray, upper: np.ndarray, u_column: int) -> np.ndarray:
    from ortools.linear_solver.python import model_builder_helper as mbh

    n_vars = matrix.shape[1]
    objective = np.zeros(n_vars)
    objective[u_column] = 1.0
    model = mbh.ModelBuilderHelper()
    model.fill_model_from_sparse_data(np.zeros(n_vars), np.full(n_vars, np.inf), objective, lower, upper,
                                      matrix.astype(np.float64))
    # PDLP (first-order) solves these flow LPs in a fraction of a second where GLOP's simplex takes
    # tens of seconds; GLOP is the fallback when PDLP does not reach optimality
    for name, params in (("pdlp", _PDLP_PARAMETERS), ("glop", "")):
        solver = mbh.ModelSolverHelper(name)
        solver.set_solver_specific_parameters(params)
        solver.solve(model)
        if solver.status() == mbh.SolveStatus.OPTIMAL:
            return np.maximum(np.asarray(solver.variable_values()), 0.0)
    raise RuntimeError(f"the optimal-routing LP did not solve: {solver.status_string() or solver.status()}")
