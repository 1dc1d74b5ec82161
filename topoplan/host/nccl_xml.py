"""NCCL topology XML (``NCCL_TOPO_DUMP_FILE`` output, or a file injected with ``NCCL_TOPO_FILE``) into a
``HostGraph``.

Reads ``<system>``, ``<cpu numaid vendor familyid modelid>``, nested ``<pci busid class link_speed
link_width>`` (class 0x0604xx bridge, 0x03xxxx GPU, 0x02xxxx NIC, 0x068000 NVSwitch), ``<gpu>`` with
``<nvlink target count>``, and ``<nic>``/``<net speed>``. Unknown elements and attributes are kept out of
the way, not fatal; VM files with synthetic bus ids (``ffff:ff:01.0``) read like any other.
Bandwidths by NCCL's rules: PCIe ``width * speed / 80`` GB/s with speed per lane from ``link_speed``,
NIC ``speed / 8000``, NVLink ``count * per-link`` by SM version, inter-socket by CPU.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ..errors import Problem, SpecError
from .graph import HostGraph

# "x GT/s" -> NCCL's per-lane figure (units of 100 Mb/s), from topo.cc
_LANE = {"2.5": 15, "5": 30, "5.0": 30, "8": 60, "8.0": 60, "16": 120, "16.0": 120, "32": 240, "32.0": 240,
         "64": 480, "64.0": 480}
# NVLink GB/s per link by SM major version (NCCL: SM60 18, SM70/80 20, SM86 12, SM90 20.6, SM100 40.1)
_NVLINK_PER_LINK = {6: 18.0, 7: 20.0, 8: 20.0, 9: 20.6, 10: 40.1}


def pci_GBps(link_speed: str | None, link_width: str | None) -> float:
    """NCCL's PCIe bandwidth: unknown speed counts as Gen3 (60), width 0 as 16."""
    speed = (link_speed or "").split()[0] if link_speed else ""
    lane = _LANE.get(speed, 60)
    width = int(link_width) if link_width and link_width.isdigit() and int(link_width) > 0 else 16
    return width * lane / 80


def inter_cpu_GBps(cpu: ET.Element) -> float:
    """NCCL's inter-socket bandwidth for GPU traffic: AMD 16; Intel SKL 10, SRP 22, ERP 40; others 6."""
    vendor = cpu.get("vendor", "")
    if vendor == "AuthenticAMD":
        return 16.0
    if vendor == "GenuineIntel":
        model = int(cpu.get("modelid", "0"), 0) if cpu.get("modelid", "0").strip().lstrip("-").isdigit() else 0
        return 40.0 if model >= 0xCF else 22.0 if model >= 0x8F else 10.0 if model >= 0x55 else 6.0
    return 6.0


def _pci_kind(element: ET.Element) -> str:
    cls = element.get("class", "0x060400").lower()
    if element.find("gpu") is not None or cls.startswith("0x03"):
        return "gpu"
    if element.find("nic") is not None or cls.startswith("0x02"):
        return "nic"
    if cls.startswith("0x0680"):
        return "nvswitch"
    return "pci"


def read(file: str) -> HostGraph:
    try:
        tree = ET.parse(file)
    except ET.ParseError as err:
        line = err.position[0] if getattr(err, "position", None) else 0
        raise SpecError([Problem(file, line, "", f"malformed XML: {err}",
                                 "check that every element is closed; compare with an NCCL_TOPO_DUMP_FILE dump")]) from None
    except OSError as err:
        raise SpecError([Problem(file, 0, "", f"cannot read file: {err}", "check the path")]) from None
    root = tree.getroot()
    if root.tag != "system":
        raise SpecError([Problem(file, 1, "", f"the root element is <{root.tag}>, not <system>",
                                 "an NCCL topology file starts with <system version=\"1\">")])
    graph = HostGraph(source=file)
    cpus = root.findall("cpu")
    if not cpus:
        raise SpecError([Problem(file, 1, "", "no <cpu> element", "an NCCL topology lists devices under <cpu>")])
    bandwidths = []
    nvlinks: list[tuple[int, str, int, float]] = []  # gpu node, target busid, count, GB/s per link
    by_busid: dict[str, int] = {}
    try:
        for index, cpu in enumerate(cpus):
            node = graph.add("cpu", f"cpu{cpu.get('numaid', index)}", -1, None)
            graph.attributes[node] = dict(cpu.attrib)
            bandwidths.append(inter_cpu_GBps(cpu))
            for pci in cpu.findall("pci"):
                _walk(graph, pci, node, by_busid, nvlinks)
    except _BadValue as err:
        raise SpecError([Problem(file, 0, "", str(err), "compare with an NCCL_TOPO_DUMP_FILE dump")]) from None
    except (RecursionError, ValueError) as err:
        what = "PCI elements nested too deeply" if isinstance(err, RecursionError) else f"a value NCCL never writes ({err})"
        raise SpecError([Problem(file, 0, "", f"not an NCCL topology: {what}",
                                 "compare with an NCCL_TOPO_DUMP_FILE dump")]) from None
    if not graph.gpus():
        raise SpecError([Problem(file, 0, "", "no GPU in this topology file",
                                 "pass the NCCL_TOPO_DUMP_FILE of a GPU server")])
    graph.inter_cpu_GBps = min(bandwidths) if len(cpus) > 1 else None
    if not nvlinks and graph.gpus():
        graph.notes.append("the file lists no NVLink: on VMs NCCL cannot see NVSwitches, so GPU pairs show their "
                           "PCIe path only")
    for gpu, target, count, per_link in nvlinks:
        graph.nvlink_GBps[gpu] = graph.nvlink_GBps.get(gpu, 0.0) + count * per_link
        peer = by_busid.get(target)
        if peer is not None and graph.kind[peer] == "gpu":
            graph.nvlink[(gpu, peer)] = graph.nvlink.get((gpu, peer), 0) + count
    # GPUs on NVSwitches reach each other through them: NV<links to the switches>
    switched = {g: 0 for g, t, c, _ in nvlinks if by_busid.get(t) is None or graph.kind[by_busid[t]] == "nvswitch"}
    for g, t, c, _ in nvlinks:
        if g in switched and (by_busid.get(t) is None or graph.kind[by_busid[t]] == "nvswitch"):
            switched[g] += c
    for a in switched:
        for b in switched:
            if a != b:
                graph.nvlink[(a, b)] = min(switched[a], switched[b])
    return graph


class _BadValue(ValueError):
    pass


def _count(element: ET.Element, name: str, default: int) -> int:
    """A whole, non-negative attribute, or ``_BadValue`` naming the element."""
    text = element.get(name)
    if text in (None, ""):
        return default
    try:
        value = int(text, 0)
    except ValueError:
        raise _BadValue(f"<{element.tag} busid='{element.get('busid', '?')}'> {name}='{text[:40]}' is not a whole "
                        "number") from None
    if value < 0:
        raise _BadValue(f"<{element.tag}> {name}={value} is negative")
    return value


def _walk(graph: HostGraph, element: ET.Element, parent: int, by_busid: dict, nvlinks: list) -> None:
    kind = _pci_kind(element)
    busid = element.get("busid", "?")
    width = element.get("link_width")
    if width and not width.strip().isdigit():
        graph.notes.append(f"bus id {busid}: link_width '{width[:20]}' is not a number; counted as x16, as NCCL does")
    up = pci_GBps(element.get("link_speed"), width)
    label = busid
    if kind == "nic":
        nets = element.findall("nic/net")
        if nets:
            label = nets[0].get("name", busid)
    node = graph.add("pci" if kind == "nvswitch" else kind, label, parent, up)
    graph.attributes[node] = dict(element.attrib)
    if busid.lower() in by_busid and busid != "?":
        graph.notes.append(f"bus id {busid} appears twice in the file; NVLinks to it go to the last one")
    by_busid[busid.lower()] = node
    if kind == "nic":
        nets = element.findall("nic/net")
        speeds = [_count(n, "speed", 0) for n in nets]
        total = sum(s if s > 0 else 10000 for s in speeds)
        if nets:
            graph.nic_GBps[node] = total / 8000
    if kind == "gpu":
        gpu = element.find("gpu")
        if gpu is not None:
            sm = _count(gpu, "sm", 0)
            per_link = _NVLINK_PER_LINK.get(sm // 10, 20.0)
            for link in gpu.findall("nvlink"):
                nvlinks.append((node, link.get("target", "").lower(), _count(link, "count", 1), per_link))
    for child in element.findall("pci"):
        _walk(graph, child, node, by_busid, nvlinks)
