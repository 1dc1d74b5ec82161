"""The columnar Topology: typed node and arc arrays, the core data structure of topoplan.

At 100k GPUs a fabric has ~10^5-10^6 nodes and links, so there are no Python objects per element:

* nodes ``0..N-1`` are rows of numpy arrays: ``kind`` (index into ``NODE_KINDS``), ``tier`` (switch tier,
  0 = leaf, 1 = spine, 2 = core; -1 elsewhere), ``model`` (index into ``models``, the catalog ids; -1 for
  none) and group ids ``server``, ``rail``, ``plane``, ``pod``, ``row``, ``col`` (-1 where they do not
  apply). Names are derived on demand from ``blocks`` and never stored per node.
* links are directed arcs: ``src``, ``dst``, ``capacity_gbps``, ``latency_ns``, ``medium`` (index into
  ``MEDIA``) and ``link_tier`` (index into ``LINK_TIERS``). A full-duplex link is the arc pair
  ``(2i, 2i+1)``, so the reverse of arc ``a`` is ``a ^ 1``.
* ``layout`` is the typed ``Layout`` a generator attaches (``layout.py``: family, tiers, planes, which node
  kinds relay, and the tree or grid structure) that lets the flow engines and reports use closed forms.

``to_networkx()`` gives a ``networkx.MultiDiGraph`` for interop (GraphML/GEXF), small-scale algorithms
and test oracles; it is not the hot path.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from .layout import Layout

NODE_KINDS = ("gpu", "nic", "switch", "ocs", "cpu", "pcie_switch", "nvswitch")
MEDIA = ("nvlink", "pcie", "copper", "optical", "circuit", "wan")
# "host" links are inside a server (GPU-NIC, NVLink); the others are network links named after the
# tier of the switch at their upper end ("leaf" = NIC to leaf), or "ocs" for circuits between nodes; a
# multi-site topology (sites.py) adds "border" (a site's top tier to its border switches) and "wan".
LINK_TIERS = ("host", "leaf", "spine", "core", "ocs", "border", "wan")
SWITCH_TIERS = ("leaf", "spine", "core")
NODE_TIERS = SWITCH_TIERS + ("border",)   # the fabric tiers, and the border switches joining sites
GROUPS = ("server", "rail", "plane", "pod", "row", "col")

KIND = {name: i for i, name in enumerate(NODE_KINDS)}
MEDIUM = {name: i for i, name in enumerate(MEDIA)}
LINK_TIER = {name: i for i, name in enumerate(LINK_TIERS)}


@dataclass
class Topology:
    name: str
    kind: np.ndarray
    tier: np.ndarray
    model: np.ndarray
    server: np.ndarray
    rail: np.ndarray
    plane: np.ndarray
    pod: np.ndarray
    row: np.ndarray
    col: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    capacity_gbps: np.ndarray
    latency_ns: np.ndarray
    medium: np.ndarray
    link_tier: np.ndarray
    models: tuple = ()
    layout: Layout = field(default_factory=Layout)
    blocks: tuple = ()  # (first node, count, label) per block of nodes added together

    @property
    def num_nodes(self) -> int:
        return int(self.kind.size)

    @property
    def num_arcs(self) -> int:
        return int(self.src.size)

    @property
    def num_links(self) -> int:
        return self.num_arcs // 2

    @staticmethod
    def reverse(arcs):
        """The reverse arc(s) of ``arcs``."""
        return np.asarray(arcs) ^ 1

    def nodes_of(self, kind: str) -> np.ndarray:
        return np.flatnonzero(self.kind == KIND[kind])

    @property
    def gpus(self) -> np.ndarray:
        return self.nodes_of("gpu")

    def node_name(self, node: int) -> str:
        starts = [b[0] for b in self.blocks]
        index = bisect.bisect_right(starts, node) - 1
        start, _count, label = self.blocks[index]
        return f"{label}{node - start}"

    def model_of(self, node: int) -> str:
        m = int(self.model[node])
        return self.models[m] if m >= 0 else ""

    def links_by_tier(self) -> dict:
        """Number of full-duplex network links per link tier (host links excluded)."""
        counts = np.bincount(self.link_tier[0::2], minlength=len(LINK_TIERS))
        return {name: int(counts[i]) for i, name in enumerate(LINK_TIERS) if name != "host" and counts[i]}

    def link_gbps_by_tier(self) -> dict:
        """The fastest link of each network link tier, Gb/s (host links excluded)."""
        tiers, capacity = self.link_tier[0::2], self.capacity_gbps[0::2]
        fastest = np.zeros(len(LINK_TIERS))
        np.maximum.at(fastest, tiers, capacity)
        return {name: float(fastest[i]) for i, name in enumerate(LINK_TIERS) if name != "host" and fastest[i] > 0}

    def switches_by_tier(self) -> dict:
        """Packet switches per tier, and optical circuit switches under ``ocs``."""
        is_switch = self.kind == KIND["switch"]
        counts = np.bincount(self.tier[is_switch], minlength=len(NODE_TIERS))
        out = {name: int(counts[i]) for i, name in enumerate(NODE_TIERS) if counts[i]}
        circuit = int((self.kind == KIND["ocs"]).sum())
        if circuit:
            out["ocs"] = circuit
        return out

    def check(self) -> list[str]:
        """Structural invariants; returns what is wrong (empty when the topology is well formed)."""
        wrong = []
        n, m = self.num_nodes, self.num_arcs
        for name in ("tier", "model") + GROUPS:
            if getattr(self, name).size != n:
                wrong.append(f"node array {name} has {getattr(self, name).size} rows, expected {n}")
        for name in ("dst", "capacity_gbps", "latency_ns", "medium", "link_tier"):
            if getattr(self, name).size != m:
                wrong.append(f"arc array {name} has {getattr(self, name).size} rows, expected {m}")
        if m % 2:
            wrong.append("odd number of arcs: every link must be a pair of arcs")
        if m and (self.src.min() < 0 or self.dst.max() >= n or self.dst.min() < 0 or self.src.max() >= n):
            wrong.append("arc endpoint out of range")
        if m and not (np.array_equal(self.src[0::2], self.dst[1::2]) and np.array_equal(self.dst[0::2], self.src[1::2])):
            wrong.append("arc 2i+1 is not the reverse of arc 2i")
        if m and not np.array_equal(self.capacity_gbps[0::2], self.capacity_gbps[1::2]):
            wrong.append("the two directions of a link differ in capacity")
        if m and (self.capacity_gbps <= 0).any():
            wrong.append("non-positive capacity")
        if m and (self.src == self.dst).any():
            wrong.append("self-loop")
        return wrong

    def to_networkx(self):
        """A ``networkx.MultiDiGraph``: node attributes kind/tier/model/name and groups, one edge per arc
        (key = arc index) with capacity_gbps, latency_ns, medium and tier."""
        import networkx as nx

        graph = nx.MultiDiGraph(name=self.name)
        for node in range(self.num_nodes):
            attrs = {"name": self.node_name(node), "kind": NODE_KINDS[self.kind[node]],
                     "tier": int(self.tier[node]), "model": self.model_of(node)}
            for group in GROUPS:
                attrs[group] = int(getattr(self, group)[node])
            graph.add_node(node, **attrs)
        for arc in range(self.num_arcs):
            graph.add_edge(int(self.src[arc]), int(self.dst[arc]), key=arc,
                           capacity_gbps=float(self.capacity_gbps[arc]), latency_ns=float(self.latency_ns[arc]),
                           medium=MEDIA[self.medium[arc]], tier=LINK_TIERS[self.link_tier[arc]])
        return graph

    def to_json_dict(self) -> dict:
        """Columnar JSON: one list per array, names derived from blocks."""
        nodes = {"kind": [NODE_KINDS[k] for k in self.kind], "tier": self.tier.tolist(),
                 "model": [self.models[m] if m >= 0 else None for m in self.model]}
        for group in GROUPS:
            nodes[group] = getattr(self, group).tolist()
        links = {"src": self.src[0::2].tolist(), "dst": self.dst[0::2].tolist(),
                 "capacity_gbps": self.capacity_gbps[0::2].tolist(), "latency_ns": self.latency_ns[0::2].tolist(),
                 "medium": [MEDIA[x] for x in self.medium[0::2]], "tier": [LINK_TIERS[x] for x in self.link_tier[0::2]]}
        return {"name": self.name, "format": "topoplan-topology-1", "layout": self.layout.to_json(),
                "blocks": [list(b) for b in self.blocks], "nodes": nodes, "links": links}


class TopologyBuilder:
    """Collects blocks of nodes and links as arrays, then concatenates them once into a Topology."""

    def __init__(self, name: str):
        self.name = name
        self.models: list[str] = []
        self._node_blocks: list[dict] = []
        self._link_blocks: list[tuple] = []
        self._blocks: list[tuple] = []
        self.num_nodes = 0

    def model_index(self, model_id: str | None) -> int:
        if not model_id:
            return -1
        if model_id not in self.models:
            self.models.append(model_id)
        return self.models.index(model_id)

    def add_nodes(self, kind: str, count: int, label: str, *, tier: int = -1, model: str | None = None,
                  **groups) -> np.ndarray:
        """Add ``count`` nodes; groups are scalars or arrays of length ``count``. Returns their ids."""
        unknown = set(groups) - set(GROUPS)
        if unknown:
            raise ValueError(f"unknown group(s) {sorted(unknown)}")
        start = self.num_nodes
        block = {"kind": np.full(count, KIND[kind], np.int8), "tier": np.full(count, tier, np.int8),
                 "model": np.full(count, self.model_index(model), np.int16)}
        for group in GROUPS:
            value = groups.get(group, -1)
            block[group] = np.broadcast_to(np.asarray(value, dtype=np.int32), (count,))
        self._node_blocks.append(block)
        self._blocks.append((start, count, label))
        self.num_nodes += count
        return np.arange(start, start + count, dtype=np.int64)

    def add_links(self, a, b, capacity_gbps, latency_ns, medium: str, tier: str) -> None:
        """Full-duplex links between node arrays ``a`` and ``b`` (broadcast together)."""
        a, b = np.broadcast_arrays(np.asarray(a, dtype=np.int32), np.asarray(b, dtype=np.int32))
        count = a.size
        capacity = np.broadcast_to(np.asarray(capacity_gbps, dtype=np.float64), (count,))
        latency = np.broadcast_to(np.asarray(latency_ns, dtype=np.float32), (count,))
        self._link_blocks.append((a.ravel(), b.ravel(), capacity.ravel(), latency.ravel(),
                                  MEDIUM[medium], LINK_TIER[tier]))

    def build(self, layout: Layout | None = None) -> Topology:
        nodes = {key: np.concatenate([blk[key] for blk in self._node_blocks]) if self._node_blocks
                 else np.zeros(0, np.int32) for key in ("kind", "tier", "model") + GROUPS}
        total = sum(blk[0].size for blk in self._link_blocks)
        src = np.empty(2 * total, np.int32)
        dst = np.empty(2 * total, np.int32)
        capacity = np.empty(2 * total, np.float64)
        latency = np.empty(2 * total, np.float32)
        medium = np.empty(2 * total, np.int8)
        link_tier = np.empty(2 * total, np.int8)
        at = 0
        for a, b, cap, lat, med, tier in self._link_blocks:
            end = at + 2 * a.size
            src[at:end:2], src[at + 1:end:2] = a, b
            dst[at:end:2], dst[at + 1:end:2] = b, a
            capacity[at:end:2] = capacity[at + 1:end:2] = cap
            latency[at:end:2] = latency[at + 1:end:2] = lat
            medium[at:end] = med
            link_tier[at:end] = tier
            at = end
        return Topology(name=self.name, src=src, dst=dst, capacity_gbps=capacity, latency_ns=latency,
                        medium=medium, link_tier=link_tier, models=tuple(self.models),
                        layout=layout or Layout(), blocks=tuple(self._blocks), **nodes)
