"""``ibnetdiscover`` topology files (infiniband-diags / rdma-core): read one, or write what a design's
fabric would print.

The format, as ibnetdiscover(8) describes it: blocks separated by blank lines, each starting with
``vendid=``, ``devid=``, ``sysimgguid=`` and ``switchguid=`` / ``caguid=`` lines, then the node line

    Switch  64 "S-<guid>"   # "<NodeDescription>" enhanced port 0 lid 5 lmc 0
    Ca      1 "H-<guid>"    # "<NodeDescription>"

and one line per connected port. A switch's ports name the peer and its port (a CA peer with its port
GUID in parentheses); a CA's ports give their own port GUID first:

    [3]     "H-<guid>"[1](<portguid>)   # "node001 mlx5_0" lid 12 4xNDR
    [1](<portguid>)  "S-<guid>"[3]      # lid 12 lmc 0 "MF0;leaf01:MQM9700/U1" lid 5 4xNDR

ending with the active width and speed (``4xNDR``: 4 lanes of NDR, 400 Gb/s). Every link appears from
both ends. ``parse`` checks that it does (a truncated file does not), collects every problem as
``FILE:LINE: message`` and returns a ``Discovered`` fabric: columnar nodes and links. Lines it does not
need (``Chassis``, ``Non-Chassis Nodes``, comments) are skipped; a router (``Rt``) is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..catalog import Catalog
from ..errors import Problem, SpecError
from ..spec import Design
from ..topology import KIND, Topology
from .base import Export, ExportOptions, slurm_node_names

# Gb/s per lane of each InfiniBand speed (data rate, as NCCL and vendors quote 4x links: NDR 4x = 400)
LANE_GBPS = {"SDR": 2.5, "DDR": 5.0, "QDR": 10.0, "FDR10": 10.0, "FDR": 14.0, "EDR": 25.0, "HDR": 50.0,
             "NDR": 100.0, "XDR": 200.0}
WIDTHS = (1, 2, 4, 8, 12)
MAX_PROBLEMS = 50

_NODE = re.compile(r'^(Switch|Ca|Rt)\s+(\d+)\s+"([SHR])-([0-9a-fA-F]+)"\s*(?:#\s*"([^"]*)"(.*))?$')
_PORT = re.compile(r'^\[(\d+)\](?:\(([0-9a-fA-F]+)\))?\s+"([SHR])-([0-9a-fA-F]+)"\[(\d+)\](?:\(([0-9a-fA-F]+)\))?'
                   r'\s*(?:#(.*))?$')
_SPEED = re.compile(r"\b(\d+)x(SDR|DDR|QDR|FDR10|FDR|EDR|HDR|NDR|XDR)\b")
_ATTRIBUTE = re.compile(r"^(vendid|devid|sysimgguid|switchguid|caguid|routerguid)=\S+$")
_SKIP = re.compile(r"^(#|Non-Chassis Nodes\s*$|Chassis\b)")


@dataclass
class Discovered:
    """An ibnetdiscover file, columnar. Nodes: ``guid``, ``is_switch``, ``ports`` (declared), ``description``,
    ``line`` (of the node line). Links, once each: ``a``/``b`` (node rows), ``a_port``/``b_port``,
    ``gbps``, ``line`` (where it is first listed)."""

    file: str
    guid: list
    is_switch: np.ndarray
    ports: np.ndarray
    description: list
    line: np.ndarray
    a: np.ndarray
    b: np.ndarray
    a_port: np.ndarray
    b_port: np.ndarray
    gbps: np.ndarray
    link_line: np.ndarray

    @property
    def switches(self) -> np.ndarray:
        return np.flatnonzero(self.is_switch)

    @property
    def cas(self) -> np.ndarray:
        return np.flatnonzero(~self.is_switch)


class _Problems:
    def __init__(self, file: str):
        self.file, self.items, self.more = file, [], 0

    def add(self, line: int, message: str, hint: str = "") -> None:
        if len(self.items) < MAX_PROBLEMS:
            self.items.append(Problem(self.file, line, "", message, hint))
        else:
            self.more += 1

    def raise_if_any(self) -> None:
        if self.items:
            if self.more:
                self.items.append(Problem(self.file, self.items[-1].line, "", f"... and {self.more:,} more problem(s)",
                                          "fix the ones above first"))
            raise SpecError(self.items)


def parse(text: str, file: str = "<ibnetdiscover>") -> Discovered:
    """Parse ibnetdiscover output (see the module docstring)."""
    problems = _Problems(file)
    guid, is_switch, ports, description, node_line = [], [], [], [], []
    row_of: dict[str, int] = {}
    # port records: (node row, port, peer guid, peer port, gbps, line)
    rec_node, rec_port, rec_peer, rec_peer_port, rec_gbps, rec_line = [], [], [], [], [], []
    current = -1
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or _SKIP.match(line):
            continue
        if _ATTRIBUTE.match(line):
            current = -1          # a new block starts
            continue
        if line[0] in "SCR":
            match = _NODE.match(line)
            if match is None:
                problems.add(number, f"not an ibnetdiscover node line: {_short(line)}",
                             'expected Switch N "S-<guid>" # "<description>" ... or Ca N "H-<guid>" # "<description>"')
                current = -1
                continue
            kind, count, letter, node_guid, desc = match.group(1), int(match.group(2)), match.group(3), \
                match.group(4).lower(), match.group(5)
            if kind == "Rt":
                problems.add(number, "a router: topoplan models one subnet of switches and HCAs",
                             "discover each subnet on its own")
                current = -1
                continue
            if letter != ("S" if kind == "Switch" else "H"):
                problems.add(number, f'a {kind} named "{letter}-...": the letter does not match the node type', "")
            if node_guid in row_of:
                problems.add(number, f"node {letter}-{node_guid} is described twice (first on line "
                             f"{node_line[row_of[node_guid]]})", "each node has one block")
                current = -1
                continue
            current = row_of[node_guid] = len(guid)
            guid.append(node_guid)
            is_switch.append(kind == "Switch")
            ports.append(count)
            description.append(desc if desc is not None else "")
            node_line.append(number)
            continue
        if line[0] == "[":
            match = _PORT.match(line)
            if match is None:
                problems.add(number, f"not an ibnetdiscover port line: {_short(line)}",
                             'expected [port] "S-<guid>"[port] # ... 4xNDR')
                continue
            if current < 0:
                problems.add(number, "a port line outside a Switch or Ca block", "is the node line above it missing?")
                continue
            port, peer_guid, peer_port = int(match.group(1)), match.group(4).lower(), int(match.group(5))
            if port < 1 or port > ports[current]:
                problems.add(number, f"port {port} of a node that declares {ports[current]} port(s)", "")
                continue
            speed = _SPEED.findall(match.group(7) or "")
            if not speed:
                problems.add(number, "no active link width and speed at the end of the line",
                             "ibnetdiscover ends each port line with e.g. 4xNDR")
                continue
            width, name = int(speed[-1][0]), speed[-1][1]
            if width not in WIDTHS:
                problems.add(number, f"link width {width}x is not an InfiniBand width", "1x, 2x, 4x, 8x or 12x")
                continue
            rec_node.append(current)
            rec_port.append(port)
            rec_peer.append(peer_guid)
            rec_peer_port.append(peer_port)
            rec_gbps.append(width * LANE_GBPS[name])
            rec_line.append(number)
            continue
        problems.add(number, f"not an ibnetdiscover line: {_short(line)}",
                     "is this the output of ibnetdiscover (without -p, -l or -g)?")
    if not guid and not problems.items:
        problems.add(1, "no Switch or Ca block: not ibnetdiscover output, or empty",
                     "run ibnetdiscover > fabric.txt on a host of the fabric")
    links = _pair_ports(problems, guid, row_of, node_line, rec_node, rec_port, rec_peer, rec_peer_port, rec_gbps,
                        rec_line)
    problems.raise_if_any()
    return Discovered(file, guid, np.asarray(is_switch, bool), np.asarray(ports, np.int64), description,
                      np.asarray(node_line, np.int64), *links)


def _short(line: str) -> str:
    return line if len(line) <= 80 else line[:77] + "..."


def _pair_ports(problems, guid, row_of, node_line, rec_node, rec_port, rec_peer, rec_peer_port, rec_gbps, rec_line):
    """Match every port record with the one from the other end; one link per pair."""
    by_end: dict[tuple, int] = {}
    for i, (node, port) in enumerate(zip(rec_node, rec_port)):
        if (node, port) in by_end:
            problems.add(rec_line[i], f"port {port} of {_name(guid, node)} is listed twice "
                         f"(first on line {rec_line[by_end[(node, port)]]})", "")
            continue
        by_end[(node, port)] = i
    keep = []
    for i in range(len(rec_node)):
        peer = row_of.get(rec_peer[i])
        if peer is None:
            problems.add(rec_line[i], f"the peer {rec_peer[i]} is never described: the file may be truncated",
                         "capture the whole output of ibnetdiscover")
            continue
        back = by_end.get((peer, rec_peer_port[i]))
        if back is None or row_of.get(rec_peer[back]) != rec_node[i] or rec_peer_port[back] != rec_port[i]:
            problems.add(rec_line[i], f"port {rec_port[i]} of {_name(guid, rec_node[i])} leads to port "
                         f"{rec_peer_port[i]} of {_name(guid, peer)} (line {node_line[peer]}), which does not list "
                         "it back", "the file may be truncated or edited by hand")
            continue
        if rec_gbps[back] != rec_gbps[i]:
            problems.add(rec_line[i], f"the two ends of this link report different speeds ({rec_gbps[i]:g} and "
                         f"{rec_gbps[back]:g} Gb/s, line {rec_line[back]})", "")
            continue
        if (rec_node[i], rec_port[i]) < (peer, rec_peer_port[i]):
            keep.append((i, peer))
    if not keep:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, empty, np.zeros(0), empty
    index = np.asarray([k for k, _ in keep], np.int64)
    return (np.asarray(rec_node, np.int64)[index], np.asarray([p for _, p in keep], np.int64),
            np.asarray(rec_port, np.int64)[index], np.asarray(rec_peer_port, np.int64)[index],
            np.asarray(rec_gbps, float)[index], np.asarray(rec_line, np.int64)[index])


def _name(guid: list, row: int) -> str:
    return f"node {guid[row]}"


# ---------------------------------------------------------------- writing


def width_and_speed(gbps: float) -> str | None:
    """The ``4xNDR``-style label of a link rate (4 lanes preferred), or None if InfiniBand has none."""
    for width in (4, 2, 1, 8, 12):
        for name in ("NDR", "HDR", "XDR", "EDR", "FDR", "QDR", "DDR", "SDR"):
            if abs(width * LANE_GBPS[name] - gbps) < 1e-9:
                return f"{width}x{name}"
    return None


def part_number(model_id: str) -> str:
    """A vendor-style part number for a catalog switch id (nvidia-qm9700 -> MQM9700)."""
    vendor, _, tail = model_id.partition("-")
    tail = (tail or vendor).upper()
    return "M" + tail if vendor == "nvidia" else tail


def write(topology: Topology, design: Design, catalog: Catalog, options: ExportOptions) -> Export:
    """What ``ibnetdiscover`` would print for this fabric: one block per switch and per NIC, GUIDs derived
    from node ids, NIC descriptions ``<host> mlx5_<i>`` with host names from the node-name pattern."""
    kind = topology.kind
    network = (kind[topology.src[0::2]] != KIND["gpu"]) & (kind[topology.dst[0::2]] != KIND["gpu"]) & \
        ((kind[topology.src[0::2]] == KIND["switch"]) | (kind[topology.dst[0::2]] == KIND["switch"]))
    if not network.any():
        raise design.infeasible("fabric.topology", "ibnetdiscover lists switches and HCAs; this fabric has no switch",
                                "")
    a = topology.src[0::2][network].astype(np.int64)
    b = topology.dst[0::2][network].astype(np.int64)
    gbps = topology.capacity_gbps[0::2][network]
    labels = {}
    for rate in np.unique(gbps).tolist():
        labels[rate] = width_and_speed(rate)
        if labels[rate] is None:
            raise design.infeasible("fabric", f"{rate:g} Gb/s links have no InfiniBand width and speed",
                                    "ibnetdiscover describes InfiniBand fabrics (100, 200, 400, 800 Gb/s ...)")
    ends = np.concatenate([a, b])
    order = np.argsort(ends, kind="stable")
    first = np.searchsorted(ends[order], ends[order], side="left")
    port = np.empty(ends.size, np.int64)
    port[order] = np.arange(ends.size) - first + 1
    nodes = np.unique(ends)
    lid = np.zeros(topology.num_nodes, np.int64)
    switches = nodes[kind[nodes] == KIND["switch"]]
    cas = nodes[kind[nodes] == KIND["nic"]]
    lid[switches] = np.arange(1, switches.size + 1)
    lid[cas] = switches.size + 1 + np.arange(cas.size)
    base = 0xb8cef60300000000   # GUIDs: an NVIDIA-style prefix plus the node id
    server = catalog.servers[design.cluster.server]
    try:
        hosts = slurm_node_names(options.node_names, design.cluster.servers, 1)
    except (KeyError, IndexError, ValueError) as err:
        raise SpecError([Problem("--node-names", 0, "", f"bad node name pattern '{options.node_names}': {err}",
                                 "e.g. gpu{server:04d}")]) from None
    nic_nodes = topology.nodes_of("nic")
    local_nic = np.zeros(topology.num_nodes, np.int64)
    local_nic[nic_nodes] = np.arange(nic_nodes.size) % server.nics

    def desc(node: int) -> str:
        if kind[node] == KIND["switch"]:
            return f"MF0;{topology.node_name(node).replace('.', '-')}:{part_number(topology.model_of(node))}/U1"
        return f"{hosts[int(topology.server[node])]} mlx5_{int(local_nic[node])}"

    # per node, its link ends in port order: (port, peer, peer port, label)
    peer = np.concatenate([b, a])
    peer_port = np.concatenate([port[a.size:], port[:a.size]])
    rate = np.concatenate([gbps, gbps])
    by_node = order  # ends sorted by node, stable in link order (ports ascending)
    starts = np.searchsorted(ends[by_node], nodes, side="left")
    stops = np.searchsorted(ends[by_node], nodes, side="right")
    descriptions = {int(n): desc(int(n)) for n in nodes.tolist()}
    port, peer, peer_port, lid = port.tolist(), peer.tolist(), peer_port.tolist(), lid.tolist()
    out = ["#", f"# Topology file: written by topoplan for design {design.name} (what ibnetdiscover should print)",
           "#", ""]
    for n, start, stop in zip(nodes.tolist(), starts.tolist(), stops.tolist()):
        node_guid = f"{base + n:016x}"
        if kind[n] == KIND["switch"]:
            entry = catalog.switches.get(topology.model_of(n))
            declared = max(stop - start, entry.radix_at(float(rate[by_node[start]]))[0] if entry else 0)
            out += ["vendid=0x2c9", "devid=0xd2f0", f"sysimgguid=0x{node_guid}", f"switchguid=0x{node_guid}({node_guid})",
                    f'Switch\t{declared} "S-{node_guid}"\t\t# "{descriptions[n]}" enhanced port 0 lid {lid[n]} lmc 0']
            for e in by_node[start:stop].tolist():
                q, qp = peer[e], peer_port[e]
                label = labels[float(rate[e])]
                if kind[q] == KIND["switch"]:
                    out.append(f'[{port[e]}]\t"S-{base + q:016x}"[{qp}]\t\t# "{descriptions[q]}" lid {lid[q]} {label}')
                else:
                    out.append(f'[{port[e]}]\t"H-{base + q:016x}"[{qp}]({base + q + qp - 1:x})\t\t# "{descriptions[q]}" '
                               f"lid {lid[q]} {label}")
        else:
            out += ["vendid=0x2c9", "devid=0x1021", f"sysimgguid=0x{node_guid}", f"caguid=0x{node_guid}",
                    f'Ca\t{stop - start} "H-{node_guid}"\t\t# "{descriptions[n]}"']
            for e in by_node[start:stop].tolist():
                q, qp = peer[e], peer_port[e]
                out.append(f'[{port[e]}]({base + n + port[e] - 1:x})\t"S-{base + q:016x}"[{qp}]\t\t# lid {lid[n]} lmc 0 '
                           f'"{descriptions[q]}" lid {lid[q]} {labels[float(rate[e])]}')
        out.append("")
    return Export(files=(("", "\n".join(out).encode()),),
                  summary=f"{switches.size:,} switches, {cas.size:,} HCAs, {a.size:,} links")
