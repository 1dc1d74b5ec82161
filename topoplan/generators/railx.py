"""RailX-style hybrid direct-indirect fabric (``fabric.topology: railx``). Our construction.

The RailX paper (Feng et al., arXiv 2507.18889) is available to us only as its abstract: chips inside a
node are wired directly, nodes and optical circuit switches are organized in 2D, and rail-based rings
are organized into an all-to-all topology by Hamiltonian decomposition. What follows is topoplan's own
construction consistent with that description, not the paper's:

* A node is one server of the catalog (``c`` chips, ``cluster.server``), its chips fully meshed by
  direct links of ``nvlink_gbps / (c - 1)`` each. Nodes sit on a ``columns x rows`` grid.
* Each chip has ``P`` external ports (the server's NIC entry: integrated chip I/O). Two ports of one
  chip form a rail; a node has ``c*P/2`` rails, split between row and column rails (by default evenly;
  ``row_rails`` / ``column_rails`` to choose). Row rail ``k`` follows ring ``k mod R`` of the row's R
  rings and sits on chip ``(k mod R + k div R) mod c``, so repeated rings spread over the chips; column
  rails are placed the same way, shifted by the number of row rails.
* In every row, rail ``k`` closes a ring through the row's ``n`` nodes, through the OCS of that row: a
  circuit is a direct chip-to-chip link in the graph (link tier ``ocs``). The rings come from Walecki's
  decomposition of K_n: for odd ``n``, ``(n-1)/2`` edge-disjoint Hamiltonian cycles; for even ``n``,
  ``(n-2)/2`` cycles plus a perfect matching (the odd decomposition of K_(n-1) with the new node inserted
  into the middle edge of each cycle; the broken edges and one new edge form the matching). With
  ``ceil((n-1)/2)`` rails the row is a full mesh; more rails repeat the rings (more bandwidth), fewer
  give a partial mesh. Columns likewise. ``ring_assignment: naive`` gives every rail the same ring
  (0, 1, ..., n-1), to show what the decomposition buys.
* Every circuit uses two OCS ports. Each row and each column gets ``ceil(ports used / OCS ports)``
  circuit switches of the chosen model (kind ``ocs``, counted and priced, not in any path).

The node graph is the Cartesian product of the row graph and the column graph, so the diameter in
inter-node hops is ``diam(row) + diam(column)``: 2 when both are full meshes.
Counts: chips ``columns*rows*c``; circuits per row ``sum over row rails of ring length`` (a ring has
``n`` links, a matching ``n/2``), times ``rows``; and the same for columns.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np

from ..catalog import Catalog
from ..hamilton import ring_decomposition
from ..layout import ALL_RELAY_KINDS, GridLayout, Layout
from ..spec import Design
from ..topology import Topology, TopologyBuilder
from .hosts import cable_latency_ns, check_fits_in_memory


def is_matching(n: int, index: int) -> bool:
    return n % 2 == 0 and index == math.ceil((n - 1) / 2) - 1


def ring_links(n: int, rails: int, assignment: str) -> list[tuple[np.ndarray, np.ndarray, int]]:
    """Per rail: (from positions, to positions, chip slot) of its links along a row of n nodes.

    Rail ``k`` takes ring ``k mod R`` (R rings in the decomposition); its chip slot is
    ``ring + k // R``, so the copies of one ring land on different chips."""
    if n <= 1 or rails == 0:
        return []
    if assignment == "naive":
        order = np.arange(n)
        a, b = (order, np.roll(order, -1)) if n > 2 else (order[:1], order[1:])
        return [(a, b, k) for k in range(rails)]
    rings = ring_decomposition(n)
    out = []
    for k in range(rails):
        index = k % len(rings)
        ring = np.asarray(rings[index])
        slot = index + k // len(rings)
        if is_matching(n, index) or n == 2:
            out.append((ring[0::2], ring[1::2], slot))
        else:
            out.append((ring, np.roll(ring, -1), slot))
    return out


def distinct_rings(n: int, rails: int, assignment: str) -> tuple:
    """Node orders (positions along a row or column of ``n`` nodes) of the distinct rings its rails follow;
    a perfect matching is not a ring and is left out."""
    if n <= 1 or rails == 0:
        return ()
    if assignment == "naive" or n == 2:
        return (tuple(range(n)),)
    rings = ring_decomposition(n)
    used = sorted({k % len(rings) for k in range(rails)})
    return tuple(tuple(rings[i]) for i in used if not is_matching(n, i))


def line_diameter(n: int, links) -> int | None:
    """Diameter of the graph the rails make along one row (None if disconnected)."""
    if n <= 1:
        return 0
    graph = nx.Graph()
    graph.add_nodes_from(range(n))
    for a, b, _ in links:
        graph.add_edges_from(zip(a.tolist(), b.tolist()))
    return nx.diameter(graph) if nx.is_connected(graph) else None


def grid_of(nodes: int, columns: int | None, rows: int | None) -> tuple[int, int]:
    """The grid's (columns, rows): as given; the other side from ``nodes`` when one is given; else the most
    nearly square factorization, columns >= rows (a prime node count gives a single row)."""
    if columns is not None and rows is not None:
        return columns, rows
    if columns is not None:
        return columns, max(1, nodes // columns)
    if rows is not None:
        return max(1, nodes // rows), rows
    rows = max(r for r in range(1, math.isqrt(max(nodes, 1)) + 1) if nodes % r == 0)
    return max(1, nodes // rows), rows


def generate(design: Design, catalog: Catalog) -> Topology:
    params = design.fabric.railx
    server = catalog.servers[design.cluster.server]
    chip_io = catalog.nics[server.nic]
    c = server.gpus
    columns, rows = grid_of(design.gpus // c, params["columns"], params["rows"])
    nodes = columns * rows
    if nodes * c != design.gpus:
        raise design.infeasible("fabric.railx", f"a {columns} x {rows} grid of {c}-chip nodes holds "
                                f"{nodes * c:,} chips, but the cluster has {design.gpus:,}",
                                f"use {design.gpus // c:,} nodes in all, e.g. columns x rows = {design.gpus // c:,}")
    ports_per_node = c * chip_io.ports
    rails = ports_per_node // 2
    row_rails = params["row_rails"] if params["row_rails"] is not None else rails // 2
    col_rails = params["column_rails"] if params["column_rails"] is not None else rails - row_rails
    if row_rails + col_rails > rails:
        raise design.infeasible("fabric.railx", f"{row_rails} row + {col_rails} column rails need "
                                f"{2 * (row_rails + col_rails)} ports per node, but a node has {ports_per_node} "
                                f"({c} chips x {chip_io.ports})", f"use at most {rails} rails in all")
    assignment = params["ring_assignment"]
    row_links = ring_links(columns, row_rails, assignment)
    col_links = ring_links(rows, col_rails, assignment)
    circuits = rows * sum(a.size for a, _, _ in row_links) + columns * sum(a.size for a, _, _ in col_links)
    arcs = 2 * (nodes * c * (c - 1) // 2 + circuits)
    check_fits_in_memory(design, arcs, "fabric.railx", "model a smaller grid")

    builder = TopologyBuilder(design.name)
    node = np.arange(nodes, dtype=np.int64)
    node_row, node_col = node // columns, node % columns
    chip_node = np.repeat(node, c)
    chips = builder.add_nodes("gpu", nodes * c, "chip", model=chip_io.id, server=chip_node,
                              rail=np.tile(np.arange(c, dtype=np.int32), nodes),
                              row=np.repeat(node_row, c), col=np.repeat(node_col, c))
    if c > 1:
        i, j = np.triu_indices(c, k=1)
        base = np.repeat(node * c, i.size)
        builder.add_links(base + np.tile(i, nodes), base + np.tile(j, nodes), server.nvlink_gbps / (c - 1),
                          0.0, "nvlink", "host")
    latency = 2 * cable_latency_ns(design.fabric.cabling["ocs"])
    for links, count, along_row in ((row_links, rows, True), (col_links, columns, False)):
        for a, b, slot in links:
            chip = (slot if along_row else row_rails + slot) % c
            lines = np.arange(count, dtype=np.int64)
            if along_row:  # position p in row y is node y*columns + p
                u = (lines[:, None] * columns + a[None, :]).ravel()
                v = (lines[:, None] * columns + b[None, :]).ravel()
            else:          # position p in column x is node p*columns + x
                u = (a[None, :] * columns + lines[:, None]).ravel()
                v = (b[None, :] * columns + lines[:, None]).ravel()
            builder.add_links(chips[u * c + chip], chips[v * c + chip], chip_io.port_speed_gbps, latency,
                              "circuit", "ocs")

    ocs = catalog.ocs[params["ocs"]]
    row_ports = 2 * sum(a.size for a, _, _ in row_links)
    col_ports = 2 * sum(a.size for a, _, _ in col_links)
    per_row = math.ceil(row_ports / ocs.ports) if row_ports else 0
    per_col = math.ceil(col_ports / ocs.ports) if col_ports else 0
    if per_row:
        builder.add_nodes("ocs", rows * per_row, "row-ocs", tier=3, model=ocs.id,
                          row=np.repeat(np.arange(rows, dtype=np.int32), per_row))
    if per_col:
        builder.add_nodes("ocs", columns * per_col, "column-ocs", tier=3, model=ocs.id,
                          col=np.repeat(np.arange(columns, dtype=np.int32), per_col))

    row_diameter, col_diameter = line_diameter(columns, row_links), line_diameter(rows, col_links)
    warnings = []
    if row_diameter is None or col_diameter is None:
        warnings.append("the rails do not connect every row or column: some chips cannot reach each other")
    full_row = math.ceil((columns - 1) / 2)
    full_col = math.ceil((rows - 1) / 2)
    if assignment == "walecki" and (row_rails < full_row or col_rails < full_col):
        warnings.append(f"a full mesh needs {full_row} row and {full_col} column rails; with {row_rails} and "
                        f"{col_rails} the rows and columns are partial meshes")
    grid = GridLayout(columns, rows, c, row_rails, col_rails, assignment, per_row, per_col,
                      row_rings=distinct_rings(columns, row_rails, assignment),
                      column_rings=distinct_rings(rows, col_rails, assignment))
    return builder.build(Layout(
        family="railx", tiers=1, planes=1, gpus_per_server=c, link_gbps=chip_io.port_speed_gbps,
        injection_gbps_per_gpu=chip_io.ports * chip_io.port_speed_gbps,
        diameter_hops=(row_diameter + col_diameter) if None not in (row_diameter, col_diameter) else -1,
        relay_kinds=ALL_RELAY_KINDS, warnings=tuple(warnings), grid=grid))
