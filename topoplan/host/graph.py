"""Host graphs: the PCIe tree inside one server, and the path classes between its devices.

A ``HostGraph`` is a tree per CPU socket (NUMA node): CPU -> PCIe bridges/switches (nested) -> GPUs and
NICs, plus the inter-socket link and the GPUs' NVLink connections. Bandwidths follow NCCL's model
(``src/graph/topo.cc``), per direction, in GB/s: PCIe ``width * gen_speed / 80`` (Gen4 x16 = 24, Gen5
x16 = 48), NIC ``speed_Mbps / 8000``, NVLink ``count * per-link``, inter-socket by CPU vendor/model.

Path classes, as ``nvidia-smi topo -m`` names them: ``NV#`` (NVLink), ``PIX`` (at most one PCIe bridge),
``PXB`` (several bridges, no host bridge), ``PHB`` (through the CPU's host bridge), ``NODE`` (between
host bridges of one NUMA node), ``SYS`` (across the inter-socket link). Host graphs are tens of nodes,
so plain Python lists serve; they are not a hot path.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CLASS_ORDER = ("NV", "PIX", "PXB", "PHB", "NODE", "SYS")  # closest first


def class_rank(path_class: str) -> int:
    return 0 if path_class.startswith("NV") else CLASS_ORDER.index(path_class)


@dataclass
class HostGraph:
    """Devices of one host. ``parent[i]`` is the tree parent (-1 for CPUs); ``up_GBps[i]`` the bandwidth
    of the link from node i to its parent (None when the input does not say)."""

    source: str
    kind: list = field(default_factory=list)      # "cpu", "pci" (bridge/switch), "gpu", "nic"
    label: list = field(default_factory=list)     # bus id, NIC name, "cpu0"
    parent: list = field(default_factory=list)
    up_GBps: list = field(default_factory=list)
    inter_cpu_GBps: float | None = None
    nvlink: dict = field(default_factory=dict)    # (gpu, gpu) -> links, for GPU pairs joined by NVLink
    nvlink_GBps: dict = field(default_factory=dict)  # gpu -> NVLink GB/s to its peers or switch
    nic_GBps: dict = field(default_factory=dict)  # nic -> network speed GB/s
    has_bandwidth: bool = True
    classes: dict = field(default_factory=dict)   # (a, b) -> class, when read directly (nvidia-smi)
    affinity: dict = field(default_factory=dict)  # gpu -> {"cpus": "0-55,112-167", "numa": "0"} (nvidia-smi)
    attributes: dict = field(default_factory=dict)  # node -> the input's attributes, unknown ones included
    borrowed: dict = field(default_factory=dict)    # (a, b) -> GB/s taken from a template by path class
    notes: list = field(default_factory=list)

    def add(self, kind: str, label: str, parent: int, up_GBps: float | None) -> int:
        self.kind.append(kind)
        self.label.append(label)
        self.parent.append(parent)
        self.up_GBps.append(up_GBps)
        return len(self.kind) - 1

    def of_kind(self, kind: str) -> list[int]:
        return [i for i, k in enumerate(self.kind) if k == kind]

    def chain(self, node: int) -> list[int]:
        """node, its parent, ... up to its CPU."""
        out = [node]
        while self.parent[out[-1]] >= 0:
            out.append(self.parent[out[-1]])
        return out

    def path_class(self, a: int, b: int) -> str:
        if (a, b) in self.classes:
            return self.classes[(a, b)]
        if (a, b) in self.nvlink:
            return f"NV{self.nvlink[(a, b)]}"
        up_a, up_b = self.chain(a), self.chain(b)
        if up_a[-1] != up_b[-1]:
            return "SYS"
        common = next(n for n in up_a if n in up_b)
        if self.kind[common] == "pci":
            return "PIX" if self.parent[a] == common and self.parent[b] == common else "PXB"
        # through the CPU: between two host bridges (root ports) is NODE, a device on the CPU itself PHB
        return "NODE" if self.parent[a] != common and self.parent[b] != common else "PHB"

    def path_GBps(self, a: int, b: int) -> float | None:
        """Bottleneck bandwidth of the path from a to b on its own (NCCL model), or None if unknown."""
        if not self.has_bandwidth:
            return self.borrowed.get((a, b))
        if (a, b) in self.nvlink:
            return min(self.nvlink_GBps.get(a, 0.0), self.nvlink_GBps.get(b, 0.0))
        up_a, up_b = self.chain(a), self.chain(b)
        links = []
        common = next((n for n in up_a if n in up_b), None)
        for chain in (up_a, up_b):
            for node in chain:
                if node == common:
                    break
                links.append(self.up_GBps[node])
        if common is None:
            links.append(self.inter_cpu_GBps)
        for end in (a, b):
            if end in self.nic_GBps:
                links.append(self.nic_GBps[end])
        known = [x for x in links if x is not None]
        return min(known) if known else None

    def borrow_bandwidths(self, template: "HostGraph") -> None:
        """Path classes without speeds (nvidia-smi) take bandwidths from a template of the same server:
        a pair gets the template's bandwidth for a pair of the same class from the same GPU (by index)."""
        t_gpus = template.gpus()
        by_class: dict = {}
        for i, g in enumerate(t_gpus):
            for other in t_gpus + template.nics():
                if other != g:
                    kind = template.kind[other]
                    by_class.setdefault((i, kind, template.path_class(g, other)), template.path_GBps(g, other))
        self.borrowed = {}
        for i, g in enumerate(self.gpus()):
            for other in self.gpus() + self.nics():
                if other == g:
                    continue
                wanted = class_rank(self.path_class(g, other))
                candidates = [(abs(class_rank(c) - wanted), class_rank(c), bw)
                              for (j, kind, c), bw in by_class.items() if j == i and kind == self.kind[other]]
                self.borrowed[(g, other)] = min(candidates)[2] if candidates else None
        self.notes = [n for n in self.notes if "no link speeds" not in n]
        self.notes.append(f"bandwidths by path class from {template.source} (the nearest class where the template "
                          "has no pair of the same class); nvidia-smi gives no link speeds")

    def gpus(self) -> list[int]:
        return self.of_kind("gpu")

    def nics(self) -> list[int]:
        return self.of_kind("nic")


def path_links(graph: HostGraph, a: int, b: int) -> list[tuple]:
    """The directed links a transfer from a to b uses, as (key, GB/s); NVLink through a non-blocking
    domain counts as the two GPUs' own NVLink ports."""
    if (a, b) in graph.nvlink:
        return [(("nvlink-out", a), graph.nvlink_GBps.get(a)), (("nvlink-in", b), graph.nvlink_GBps.get(b))]
    up_a, up_b = graph.chain(a), graph.chain(b)
    common = next((n for n in up_a if n in up_b), None)
    links = []
    for node in up_a:
        if node == common:
            break
        if graph.parent[node] >= 0:
            links.append(((node, "up"), graph.up_GBps[node]))
    if common is None:
        links.append((("sockets", up_a[-1], up_b[-1]), graph.inter_cpu_GBps))
    for node in up_b:
        if node == common:
            break
        if graph.parent[node] >= 0:
            links.append(((node, "down"), graph.up_GBps[node]))
    for end, direction in ((a, "out"), (b, "in")):
        if end in graph.nic_GBps:
            links.append((("network", end, direction), graph.nic_GBps[end]))
    return links


def concurrent_GBps(graph: HostGraph, pairs: list[tuple[int, int]]) -> tuple[list, str]:
    """Each pair's bandwidth when all transfer at once (every link shared equally by the transfers
    crossing it), and the busiest link as a sentence."""
    flows: dict = {}
    paths = [path_links(graph, a, b) for a, b in pairs]
    for path in paths:
        for key, _bw in path:
            flows[key] = flows.get(key, 0) + 1
    rates = []
    worst, worst_key = None, None
    for path in paths:
        rate = None
        for key, bw in path:
            if bw is None:
                continue
            share = bw / flows[key]
            if rate is None or share < rate:
                rate = share
            if worst is None or share < worst:
                worst, worst_key = share, key
        rates.append(rate)
    return rates, (_describe(graph, worst_key, flows[worst_key], worst) if worst_key else "")


def _describe(graph: HostGraph, key: tuple, flows: int, share: float) -> str:
    if key[0] == "sockets":
        what = "the inter-socket link"
    elif key[0] in ("nvlink-out", "nvlink-in"):
        what = f"{graph.label[key[1]]}'s NVLink"
    elif key[0] == "network":
        what = f"{graph.label[key[1]]}'s network port"
    else:
        what = f"the PCIe link {'above' if key[1] == 'up' else 'down to'} {graph.label[key[0]]}"
    return f"{flows} transfer(s) share {what}: {share:g} GB/s each"


def ring_busbw(graph: HostGraph, order: list[int]) -> tuple[float | None, str]:
    """Bus bandwidth of a ring AllReduce in this order (each GPU sends to the next at once): the slowest
    per-transfer share of any link, which is what nccl-tests' busbw measures for a ring."""
    pairs = [(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]
    rates, why = concurrent_GBps(graph, pairs)
    known = [r for r in rates if r is not None]
    return (min(known) if known else None), why


def _routing_order(graph: HostGraph, gpus: list[int]) -> list[int]:
    """A short ring by OR-Tools routing, each hop costing the inverse of its bandwidth alone (plus a
    little per link, so that of equal paths the shorter wins)."""
    from ortools.constraint_solver import pywrapcp, routing_enums_pb2

    n = len(gpus)
    cost = [[0 if i == j else int(1000 / (graph.path_GBps(gpus[i], gpus[j]) or 1)) +
             len(path_links(graph, gpus[i], gpus[j])) for j in range(n)] for i in range(n)]
    manager = pywrapcp.RoutingIndexManager(n, 1, 0)
    routing = pywrapcp.RoutingModel(manager)
    callback = routing.RegisterTransitCallback(lambda a, b: cost[manager.IndexToNode(a)][manager.IndexToNode(b)])
    routing.SetArcCostEvaluatorOfAllVehicles(callback)
    params = pywrapcp.DefaultRoutingSearchParameters()
    params.first_solution_strategy = routing_enums_pb2.FirstSolutionStrategy.PATH_CHEAPEST_ARC
    params.time_limit.FromSeconds(2)
    solution = routing.SolveWithParameters(params)
    if solution is None:
        return gpus
    order, index = [], routing.Start(0)
    while not routing.IsEnd(index):
        order.append(gpus[manager.IndexToNode(index)])
        index = solution.Value(routing.NextVar(index))
    return order


def best_ring(graph: HostGraph, exact_up_to: int = 10):
    """(order, busbw, why) of the best ring found: every order for up to ``exact_up_to`` GPUs (rotations
    and reflections skipped); beyond, OR-Tools routing for a short ring, then 2-opt on the bottleneck.
    Never worse than the naive order, which is the starting point."""
    import itertools

    gpus = graph.gpus()
    if len(gpus) < 2 or not graph.has_bandwidth:
        return gpus, None, ""
    best = (gpus, *ring_busbw(graph, gpus))
    if len(gpus) <= exact_up_to:
        first, rest = gpus[0], gpus[1:]
        for perm in itertools.permutations(rest):
            if perm[0] > perm[-1]:
                continue  # the reflection of an order already seen
            order = [first, *perm]
            value, why = ring_busbw(graph, order)
            if value is not None and value > best[1] + 1e-12:
                best = (order, value, why)
        return best
    routed = _routing_order(graph, gpus)
    value, why = ring_busbw(graph, routed)
    if value is not None and value > best[1] + 1e-12:
        best = (routed, value, why)
    improved = True
    while improved:
        improved = False
        for i in range(1, len(gpus) - 1):
            for j in range(i + 1, len(gpus)):
                order = best[0][:i] + best[0][i:j + 1][::-1] + best[0][j + 1:]
                value, why = ring_busbw(graph, order)
                if value is not None and value > best[1] + 1e-12:
                    best, improved = (order, value, why), True
    return best


def assign_nics(graph: HostGraph) -> dict:
    """GPU -> NIC: closest path class first, then bandwidth; every NIC serves a GPU before any NIC serves
    two (a GPU never shares a NIC while another NIC is idle)."""
    import numpy as np
    from scipy.optimize import linear_sum_assignment

    gpus, nics = graph.gpus(), graph.nics()
    if not gpus or not nics:
        return {}
    copies = -(-len(gpus) // len(nics))
    big = 1e6
    cost = np.zeros((len(gpus), len(nics) * copies))
    for i, g in enumerate(gpus):
        for j, n in enumerate(nics):
            bandwidth = graph.path_GBps(g, n) or 0.0
            for c in range(copies):
                cost[i, c * len(nics) + j] = c * big * 10 + class_rank(graph.path_class(g, n)) * big - bandwidth
    rows, cols = linear_sum_assignment(cost)
    return {gpus[r]: nics[c % len(nics)] for r, c in zip(rows, cols)}
