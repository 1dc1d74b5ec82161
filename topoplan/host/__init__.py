"""Host analysis: one server's PCIe/NVLink graph and what it implies.

* ``graph.py``      the HostGraph (path classes PIX ... SYS, NCCL-model bandwidths) and its solvers: GPU-NIC
                    assignment, injection under contention, the best intra-host ring;
* ``template.py``   host graphs from the catalog's server templates;
* ``nccl_xml.py``, ``nvidia_smi.py``  host graphs from real machines (``read_host`` tells them apart);
* ``analysis.py``   everything ``topoplan host`` reports, as one dict (``report/host.py`` formats it).
"""

from __future__ import annotations

from .graph import HostGraph


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
