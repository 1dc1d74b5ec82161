"""``railx``: exact ECMP on RailX fabrics from their row x column structure, with no search per destination.

Routing semantics are ``ecmp``'s for direct-connect fabrics (see ``ecmp.py``): a path is shortest in
circuits between nodes first, then in links inside nodes, and traffic splits equally over next-hop arcs.
When every row and every column of the grid is a full mesh, a flow from chip ``i`` of node ``a`` to chip
``j`` of node ``b`` visits only ``a``, ``b`` and the two corners ``P = (column of b, row of a)`` and
``Q = (column of a, row of b)``, with one circuit per dimension in which ``a`` and ``b`` differ. Which
chips it uses depends only on the circuits' chips between the two columns (the row multiplicity vector:
how many circuits each chip holds between them), the same between the two rows, and ``i`` and ``j``.

So the engine
1. computes, once per class (row type, column type, i, j), the fraction of a unit of flow on every arc of
   that four-node gadget. A *type* is one distinct multiplicity vector, or *none* when ``a`` and ``b``
   share the column (row). The gadget has eight blocks: links inside ``a``, ``P``, ``Q`` and ``b``; the row
   and the column circuits out of ``a``; the column circuits out of ``P``; the row circuits out of ``Q``;
2. aggregates the demand by (where a block lands, class) and multiplies by the class fractions. Explicit
   flows aggregate through a sparse matrix; an all-to-all group made of whole nodes aggregates in closed
   form from per-row and per-column counts, so a world all-to-all never enumerates chip pairs.

It accepts a topology only where this is exact (RailX, full-mesh rows and columns that are alike, one
link between every two chips of a node, circuits between same-index chips, all links up); ``refusal``
says why not, and the facade then uses ``ecmp``. Tests hold it equal to ``ecmp`` on small grids.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import EngineRefused, Refusal
from ..topology import Topology
from .engine import Routed
from .traffic import Demand

_FAR = 1 << 20  # "no exit here" in local-hop counts
_BLOCKS = ("local_a", "row_a", "col_a", "local_p", "col_p", "local_q", "row_q", "local_b")
# explicit flows are aggregated this many at a time (bounds the sparse matrices' memory)
_PAIR_CHUNK = 4_000_000


@dataclass
class RailxIndex:
    columns: int
    rows: int
    chips: int                 # per node
    row_types: np.ndarray      # (types, chips) circuit multiplicity per chip between two columns
    col_types: np.ndarray
    row_type_of: np.ndarray    # (columns, columns) type index; len(row_types) on the diagonal (none)
    col_type_of: np.ndarray    # (rows, rows)
    row_mult: np.ndarray       # (columns, columns, chips)
    col_mult: np.ndarray       # (rows, rows, chips)
    gpu_node: np.ndarray       # per topology node: grid node (row * columns + column), -1 if not a chip
    gpu_chip: np.ndarray       # per topology node: chip index within its node
    local_arc: np.ndarray      # (nodes, chips, chips) arc id, -1 on the diagonal
    row_arcs: np.ndarray       # row circuit arc ids, and their bundle key ((row * C + u) * C + v) * chips + x
    row_keys: np.ndarray
    col_arcs: np.ndarray       # column circuit arc ids, key ((column * R + r) * R + r') * chips + x
    col_keys: np.ndarray


def _types(mult: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct multiplicity vectors between two lines, and the type index of every pair (none on the
    diagonal)."""
    n, _, chips = mult.shape
    off = ~np.eye(n, dtype=bool)
    types, inverse = np.unique(mult[off].reshape(-1, chips), axis=0, return_inverse=True)
    type_of = np.full((n, n), len(types), dtype=np.int64)
    type_of[off] = inverse.ravel()
    return types, type_of


def _index(topology: Topology) -> RailxIndex | str:
    grid = topology.layout.grid
    if grid is None:
        return f"fabric family '{topology.layout.family}' is not RailX"
    columns, rows, chips = grid.columns, grid.rows, grid.chips_per_node
    gpus = topology.gpus
    node = np.full(topology.num_nodes, -1, dtype=np.int64)
    chip = np.full(topology.num_nodes, -1, dtype=np.int64)
    node[gpus] = topology.row[gpus].astype(np.int64) * columns + topology.col[gpus]
    chip[gpus] = topology.rail[gpus]
    src, dst = topology.src, topology.dst
    if (node[src] < 0).any() or (node[dst] < 0).any():
        return "a link ends outside the chips"
    nodes = columns * rows
    if np.bincount(node[gpus] * chips + chip[gpus], minlength=nodes * chips).max(initial=0) != 1:
        return "the chips do not fill the grid one per (node, chip index)"
    local = node[src] == node[dst]
    row_s, row_d = node[src] // columns, node[dst] // columns
    col_s, col_d = node[src] % columns, node[dst] % columns
    along_row = ~local & (row_s == row_d)
    along_col = ~local & (col_s == col_d)
    if not (local | along_row | along_col).all():
        return "a circuit joins nodes in different rows and columns"
    if (chip[src][~local] != chip[dst][~local]).any():
        return "a circuit joins chips of different indices"

    local_key = (node[src[local]] * chips + chip[src[local]]) * chips + chip[dst[local]]
    counts = np.bincount(local_key, minlength=nodes * chips * chips).reshape(nodes, chips, chips)
    if not np.array_equal(counts, np.broadcast_to(1 - np.eye(chips, dtype=np.int64), counts.shape)):
        return "the chips of a node are not joined by exactly one link each"
    local_arc = np.full(nodes * chips * chips, -1, dtype=np.int64)
    local_arc[local_key] = np.flatnonzero(local)

    row_arcs = np.flatnonzero(along_row)
    row_keys = ((row_s[row_arcs] * columns + col_s[row_arcs]) * columns + col_d[row_arcs]) * chips + chip[src[row_arcs]]
    col_arcs = np.flatnonzero(along_col)
    col_keys = ((col_s[col_arcs] * rows + row_s[col_arcs]) * rows + row_d[col_arcs]) * chips + chip[src[col_arcs]]
    mults = []
    for keys, lines, n, what in ((row_keys, rows, columns, "row"), (col_keys, columns, rows, "column")):
        mult = np.bincount(keys, minlength=lines * n * n * chips).reshape(lines, n, n, chips)
        if not (mult == mult[:1]).all():
            return f"the {what}s are not wired alike"
        mult = mult[0]
        if n > 1 and (mult.sum(axis=2) + np.eye(n, dtype=np.int64) == 0).any():
            return f"the {what}s are not full meshes (partial mesh or naive rings)"
        mults.append(mult)
    row_types, row_type_of = _types(mults[0])
    col_types, col_type_of = _types(mults[1])
    return RailxIndex(columns, rows, chips, row_types, col_types, row_type_of, col_type_of, mults[0], mults[1],
                      node, chip, local_arc.reshape(nodes, chips, chips), row_arcs, row_keys, col_arcs, col_keys)


_CACHE: dict = {}


def index_of(topology: Topology) -> RailxIndex | str:
    """The index (cached for the last topology seen), or the reason the engine does not apply."""
    cached = _CACHE.get(id(topology))
    if cached is None or cached[0] is not topology:
        _CACHE.clear()
        _CACHE[id(topology)] = (topology, _index(topology))
    return _CACHE[id(topology)][1]


def refusal(topology: Topology) -> Refusal | None:
    """None if the engine is exact on ``topology``, else the reason it is not."""
    index = index_of(topology)
    return Refusal("railx", f"the railx engine does not apply: {index}") if isinstance(index, str) else None


def _stage(inflow: np.ndarray, exits: list) -> tuple:
    """One node of the gadget, for K classes at once. ``inflow`` (K, c): flow arriving on each chip;
    ``exits``: per kind of circuit leaving the node, (multiplicity (K, c), local hops still needed after
    taking it (K, c)). Returns the local hops to go from each chip (K, c), the flow on local links
    (K, c, c) from chip y to chip z, and per exit kind the flow leaving on each chip's circuits (K, c).

    Every chip can exit where it is or take one local link first (the node is a full mesh), so its hops
    to go are min(direct exit, 1 + the best direct exit in the node); chips that forward locally hand
    flow only to chips that exit directly, so two passes push it all."""
    direct = np.full(inflow.shape, _FAR, dtype=np.int64)
    for mult, cost in exits:
        direct = np.minimum(direct, np.where(mult > 0, cost, _FAR))
    togo = np.minimum(direct, direct.min(axis=1, keepdims=True) + 1)
    exit_arcs = [np.where((mult > 0) & (cost == togo), mult, 0) for mult, cost in exits]
    local = togo[:, None, :] == togo[:, :, None] - 1          # [k, y, z]: link y -> z is on a shortest path
    arcs_out = sum(exit_arcs) + local.sum(axis=2)
    per_arc = np.divide(inflow, arcs_out, out=np.zeros(inflow.shape), where=arcs_out > 0)
    local_flow = per_arc[:, :, None] * local
    arrived = inflow + local_flow.sum(axis=1)
    per_arc = np.divide(arrived, arcs_out, out=np.zeros(inflow.shape), where=arcs_out > 0)
    return togo, local_flow, [per_arc * e for e in exit_arcs]


def class_fractions(index: RailxIndex) -> dict:
    """Per class (row type or none, column type or none, i, j), the flow of one unit on each gadget block:
    arrays of shape (row types + 1, column types + 1, c, c, ...) keyed by ``_BLOCKS``."""
    c = index.chips
    n_row, n_col = len(index.row_types), len(index.col_types)
    t_row, t_col, i, j = (a.ravel() for a in np.meshgrid(np.arange(n_row + 1), np.arange(n_col + 1),
                                                          np.arange(c), np.arange(c), indexing="ij"))
    row_m = np.vstack([index.row_types, np.zeros((1, c), dtype=np.int64)])[t_row]
    col_m = np.vstack([index.col_types, np.zeros((1, c), dtype=np.int64)])[t_col]
    chip = np.arange(c)
    source = (chip[None, :] == i[:, None]).astype(np.float64)
    target = (chip[None, :] == j[:, None]).astype(np.int64)
    has_row, has_col = t_row < n_row, t_col < n_col

    # hops to go, from the destination backwards
    togo_b = 1 - target
    togo_p, _, _ = _stage(np.zeros(source.shape), [(col_m, togo_b)])
    togo_q, _, _ = _stage(np.zeros(source.shape), [(row_m, togo_b)])
    # push one unit, from the source forwards; the source sits at a, P (same column), Q (same row) or b
    both = (has_row & has_col)[:, None]
    _, local_a, (row_a, col_a) = _stage(source * both, [(row_m, togo_p), (col_m, togo_q)])
    only_col = (~has_row & has_col)[:, None]
    _, local_p, (col_p,) = _stage(row_a + source * only_col, [(col_m, togo_b)])
    only_row = (has_row & ~has_col)[:, None]
    _, local_q, (row_q,) = _stage(col_a + source * only_row, [(row_m, togo_b)])
    same_node = (~has_row & ~has_col & (i != j))[:, None]
    _, local_b, _ = _stage(col_p + row_q + source * same_node, [(target, np.zeros_like(target))])
    shape = (n_row + 1, n_col + 1, c, c)
    blocks = dict(zip(_BLOCKS, (local_a, row_a, col_a, local_p, col_p, local_q, row_q, local_b)))
    return {name: block.reshape(shape + block.shape[1:]) for name, block in blocks.items()}


class _Loads:
    """Bytes on local links (nodes, c, c) and on row and column circuit bundles (summed over parallel
    circuits), filled block by block."""

    def __init__(self, index: RailxIndex):
        C, R, c = index.columns, index.rows, index.chips
        self.index = index
        self.local = np.zeros((R * C, c, c))
        self.row = np.zeros(R * C * C * c)
        self.col = np.zeros(C * R * R * c)

    def to_arcs(self, num_arcs: int) -> np.ndarray:
        index, load = self.index, np.zeros(num_arcs)
        arcs = index.local_arc >= 0
        load[index.local_arc[arcs]] = self.local[arcs]
        for arcs, keys, bundle, mult, n in ((index.row_arcs, index.row_keys, self.row, index.row_mult, index.columns),
                                            (index.col_arcs, index.col_keys, self.col, index.col_mult, index.rows)):
            parallel = mult.ravel()[keys % (n * n * index.chips)]
            load[arcs] = bundle[keys] / parallel
        return load


def _add_pairs(loads: _Loads, fractions: dict, src_node, src_chip, dst_node, dst_chip, size):
    """Explicit flows: aggregate bytes by (landing key, class), then multiply by the class fractions."""
    import scipy.sparse as sp  # lazily: loading a spec or the CLI needs no scipy
    index = loads.index
    C, R, c = index.columns, index.rows, index.chips
    ca, ra, cb, rb = src_node % C, src_node // C, dst_node % C, dst_node // C
    n_row, n_col = len(index.row_types) + 1, len(index.col_types) + 1
    klass = ((index.row_type_of[ca, cb] * n_col + index.col_type_of[ra, rb]) * c + src_chip) * c + dst_chip
    classes = n_row * n_col * c * c
    p_node, q_node = ra * C + cb, rb * C + ca
    landing = {
        "local_a": (loads.local, src_node), "local_p": (loads.local, p_node),
        "local_q": (loads.local, q_node), "local_b": (loads.local, dst_node),
        "row_a": (loads.row, (ra * C + ca) * C + cb), "row_q": (loads.row, (rb * C + ca) * C + cb),
        "col_a": (loads.col, (ca * R + ra) * R + rb), "col_p": (loads.col, (cb * R + ra) * R + rb),
    }
    for name, (target, key) in landing.items():
        block = fractions[name].reshape(classes, -1)
        used, row = np.unique(key, return_inverse=True)
        matrix = sp.csr_matrix((size, (row.ravel(), klass)), shape=(used.size, classes))
        width = block.shape[1]
        flat = target.reshape(-1, width)
        flat[used] += matrix @ block


def _add_whole_node_alltoall(loads: _Loads, fractions: dict, member: np.ndarray, size: float):
    """An all-to-all group made of whole nodes, ``size`` bytes per ordered chip pair, in closed form.
    ``member`` (columns, rows): 1.0 where the node is in the group.

    Flows between two member nodes cover every chip pair alike, so each block's fractions are summed
    over (i, j), and what remains is how many member pairs of each class land on each node or bundle.
    With ``oh_row[u, v, t]`` = [columns u, v have row type t] and ``oh_col`` likewise:
      row_count[r, x, t] = sum_u member[u, r] oh_row[u, x, t]   (members of row r, seen from column x)
      col_count[x, r, t] = sum_s member[x, s] oh_col[r, s, t]   (members of column x, seen from row r)
    A corner (x, r) is reached from row_count[r, x, .] sources and serves col_count[x, r, .] destinations;
    a node's pairs as a source (or destination) are sum over columns of oh_row x col_count."""
    index = loads.index
    C, R, c = index.columns, index.rows, index.chips
    n_row, n_col = len(index.row_types) + 1, len(index.col_types) + 1
    summed = {name: fractions[name].sum(axis=(2, 3)) * size for name in _BLOCKS}  # (n_row, n_col, ...)
    oh_row = (index.row_type_of[:, :, None] == np.arange(n_row)).astype(np.float64)  # (C, C, n_row)
    oh_col = (index.col_type_of[:, :, None] == np.arange(n_col)).astype(np.float64)  # (R, R, n_col)
    row_count = np.einsum("ur,uxt->rxt", member, oh_row, optimize=True)        # (R, C, n_row)
    col_count = np.einsum("xs,rst->xrt", member, oh_col, optimize=True)        # (C, R, n_col)
    # (C, R, n_row, n_col), a node's pairs by class: as a source, and (types are symmetric) as a destination
    node_pairs = np.einsum("uxt,xrs->urts", oh_row, col_count, optimize=True)
    corner_pairs = row_count.transpose(1, 0, 2)[:, :, :, None] * col_count[:, :, None, :]  # (C, R, n_row, n_col)

    def local(pairs, name, weight):
        per_node = np.tensordot(pairs * weight[:, :, None, None], summed[name], axes=([2, 3], [0, 1]))
        loads.local += per_node.transpose(1, 0, 2, 3).reshape(R * C, c, c)  # (C, R, ...) -> node r * C + x

    local(node_pairs, "local_a", member)
    local(node_pairs, "local_b", member)
    local(corner_pairs, "local_p", np.ones_like(member))
    local(corner_pairs, "local_q", np.ones_like(member))

    # row bundles (r, u, v): out of a = (u, r) towards column v, or out of Q = (u, r) into b = (v, r);
    # column bundles (x, r, s): out of a = (x, r) towards row s, or out of P = (x, r) into b = (x, s)
    for name, towards_far_end in (("row_a", True), ("row_q", False)):
        loads.row += _bundle_loads(col_count.transpose(1, 0, 2), summed[name], index.row_type_of, member.T,
                                   towards_far_end)
    for name, towards_far_end in (("col_a", True), ("col_p", False)):
        loads.col += _bundle_loads(row_count.transpose(1, 0, 2), summed[name].transpose(1, 0, 2),
                                   index.col_type_of, member, towards_far_end)


def _bundle_loads(counts, fractions, type_of, member, towards_far_end: bool) -> np.ndarray:
    """Loads of one dimension's circuit bundles (line, u, v, chip), flattened, for a whole-node group.

    ``counts[line, position, t]``: member nodes of class t in the other dimension, seen from a position of
    the line; ``fractions[t_line, t_other, chip]``: a block's summed fractions; ``member[line, position]``.
    A bundle u -> v is the first circuit of pairs leaving a member at u (``towards_far_end``: counted from
    v's side) or the last circuit of pairs arriving at a member at v (counted from u's side)."""
    per_type = np.einsum("lpt,Ttk->lpTk", counts, fractions, optimize=True)  # (lines, n, line types, chips)
    u, v = np.meshgrid(np.arange(type_of.shape[0]), np.arange(type_of.shape[0]), indexing="ij")
    seen, end = (v, u) if towards_far_end else (u, v)
    return (per_type[:, seen, type_of[u, v], :] * member[:, end][..., None]).ravel()


def route(topology: Topology, demand: Demand) -> Routed:
    """Bytes per arc under ECMP, from the row x column structure."""
    index = index_of(topology)
    if isinstance(index, str):
        raise EngineRefused(refusal(topology))
    fractions = class_fractions(index)
    loads = _Loads(index)
    keep = (demand.src != demand.dst) & (demand.bytes > 0)
    flows = [(demand.src[keep], demand.dst[keep], demand.bytes[keep])]
    if demand.has_a2a:
        C, R, c = index.columns, index.rows, index.chips
        # the closed form costs about this many multiply-adds whatever the group's size
        closed_form_cost = C * R * (C + R) * (len(index.row_types) + 1) * (len(index.col_types) + 1)
        for members in demand.a2a_members:
            nodes = index.gpu_node[members]
            per_node = np.bincount(nodes, minlength=C * R)
            if members.size ** 2 * 64 > closed_form_cost and (per_node[nodes] == c).all():
                member = (per_node == c).astype(np.float64).reshape(R, C).T
                _add_whole_node_alltoall(loads, fractions, member, demand.a2a_bytes)
            else:
                a = np.repeat(members, members.size)
                b = np.tile(members, members.size)
                pair = a != b
                flows.append((a[pair], b[pair], np.full(int(pair.sum()), demand.a2a_bytes)))
    src = np.concatenate([f[0] for f in flows])
    dst = np.concatenate([f[1] for f in flows])
    size = np.concatenate([f[2] for f in flows])
    for lo in range(0, src.size, _PAIR_CHUNK):
        s, d = src[lo:lo + _PAIR_CHUNK], dst[lo:lo + _PAIR_CHUNK]
        _add_pairs(loads, fractions, index.gpu_node[s], index.gpu_chip[s], index.gpu_node[d],
                   index.gpu_chip[d], size[lo:lo + _PAIR_CHUNK])
    return Routed(loads.to_arcs(topology.num_arcs))
