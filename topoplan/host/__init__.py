"""Host analysis: one server's PCIe/NVLink graph and what it implies.

* ``graph.py``      the HostGraph (path classes PIX ... SYS, NCCL-model bandwidths) and its solvers: GPU-NIC
                    assignment, injection under contention, the best intra-host ring;
* ``template.py``   host graphs from the catalog's server templates;
* ``nccl_xml.py``, ``nvidia_smi.py``  host graphs from real machines (``read_host`` tells them apart);
* ``analysis.py``   everything ``topoplan host`` reports, as one dict (``report/host.py`` formats it).
"""

from __future__ import annotations

from .graph import HostGraph


MAX_HOST_FILE_BYTES = 4 * 2**20  # topology dumps and nvidia-smi tables are kilobytes


def read_host(file: str) -> HostGraph:
    """A host graph from an NCCL topology XML file or an ``nvidia-smi topo -m`` text, told apart by content.
    Files past ``MAX_HOST_FILE_BYTES`` (or endless ones such as /dev/zero) are refused before parsing."""
    from ..errors import Problem, SpecError
    from . import nccl_xml, nvidia_smi

    try:
        with open(file, "rb") as handle:
            data = handle.read(MAX_HOST_FILE_BYTES + 1)
    except OSError as err:
        raise SpecError([Problem(file, 0, "", f"cannot read file: {err.strerror or err}", "check the path")]) from None
    if len(data) > MAX_HOST_FILE_BYTES:
        raise SpecError([Problem(file, 0, "", f"larger than {MAX_HOST_FILE_BYTES // 2**20} MiB, far more than one "
                                 "server's topology", "pass an NCCL_TOPO_DUMP_FILE dump or nvidia-smi topo -m text")])
    if data.decode("utf-8", errors="replace").lstrip().startswith("<"):
        return nccl_xml.read(file)
    return nvidia_smi.read(file)
