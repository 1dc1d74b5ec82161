"""Exports other tools read, and fabrics read in: one registry, ``EXPORTERS``, one module per format.

An exporter is a pure function ``(topology, design, catalog, options) -> Export``: the files it would
write (name and bytes) and notes on what the format cannot say. It never writes; the CLI does, atomically.
Where a format cannot represent a design at all, the exporter raises ``InfeasibleDesign`` with the reason.

* ``slurm-tree``   Slurm ``topology.conf`` for the tree plugin (``slurm.py``)
* ``slurm-block``  Slurm ``topology.conf`` for the block plugin: NVLink racks or scalable units (``slurm.py``)
* ``astra-sim``    ASTRA-sim analytical network YAML, system JSON and remote-memory JSON (``astra.py``)
* ``simai``        SimAI topology file (``simai.py``)
* ``htsim``        htsim fat-tree ``.topo`` (``htsim.py``)
* ``infragraph``   InfraGraph infrastructure JSON or YAML (``infragraph.py``)
* ``ibnetdiscover`` the fabric as ``ibnetdiscover`` would print it, to diff against a real one (``ibnetdiscover.py``)

The other direction, fabrics read in (``ibnetdiscover`` output and topoplan's own columnar JSON), is the
``imported`` topology family (``generators/imported.py``), whose readers live here too.
To add a format: write its module with a ``write`` function and add one ``Exporter`` entry below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..catalog import Catalog
from ..spec import Design
from ..topology import Topology
from . import astra, htsim, ibnetdiscover, infragraph, simai, slurm
from .base import Export, ExportOptions


@dataclass(frozen=True)
class Exporter:
    name: str
    summary: str
    write: Callable               # (topology, design, catalog, options) -> Export
    directory: bool = False       # writes several files into a directory
    example: str = ""             # an output name for --help


EXPORTERS: dict[str, Exporter] = {e.name: e for e in (
    Exporter("slurm-tree", "Slurm topology.conf, tree plugin (switches and the nodes under each leaf)",
             slurm.write_tree, example="topology.conf"),
    Exporter("slurm-block", "Slurm topology.conf, block plugin (NVLink racks or scalable units)",
             slurm.write_block, example="topology.conf"),
    Exporter("astra-sim", "ASTRA-sim analytical network YAML, system JSON and remote-memory JSON (a directory)",
             astra.write, directory=True, example="astra/"),
    Exporter("simai", "SimAI topology file (GPUs, NVSwitches, switches, one link per line)", simai.write,
             example="topo.txt"),
    Exporter("htsim", "htsim fat-tree .topo (Clos fabrics)", htsim.write, example="fabric.topo"),
    Exporter("infragraph", "InfraGraph infrastructure (devices, links, instances, edges): .json or .yaml",
             infragraph.write, example="fabric.json"),
    Exporter("ibnetdiscover", "the fabric as ibnetdiscover prints it, to diff against the real one",
             ibnetdiscover.write, example="expected-fabric.txt"),
)}


def export(topology: Topology, design: Design, catalog: Catalog, fmt: str,
           options: ExportOptions = ExportOptions()) -> Export:
    """The files of ``topology`` in format ``fmt``; ``InfeasibleDesign`` where the format cannot hold it."""
    return EXPORTERS[fmt].write(topology, design, catalog, options)
