"""Importers: host graphs from real machines (NCCL topology XML, ``nvidia-smi topo -m`` text)."""

from __future__ import annotations

from ..hostgraph import HostGraph


def read_host(file: str) -> HostGraph:
    """A host graph from an NCCL topology XML file or an ``nvidia-smi topo -m`` text, told apart by content."""
    from . import nccl_xml, nvidia_smi

    try:
        with open(file, encoding="utf-8", errors="replace") as handle:
            start = handle.read(256).lstrip()
    except OSError:
        start = ""
    if start.startswith("<"):
        return nccl_xml.read(file)
    return nvidia_smi.read(file)
