"""Fabric generators: pure functions ``(design, catalog) -> Topology``, one module per family."""

from __future__ import annotations

from ..catalog import Catalog
from ..spec import Design
from ..topology import Topology


def generate(design: Design, catalog: Catalog) -> Topology:
    """Build the topology the design's ``fabric.topology`` names."""
    from . import clos, imported, rail, railx

    families = {"fat-tree": clos.generate, "rail-optimized": rail.generate, "rail-only": rail.generate,
                "railx": railx.generate, "imported": imported.generate}
    try:
        family = families[design.fabric.topology]
    except KeyError:
        raise design.infeasible("fabric.topology", f"no generator for '{design.fabric.topology}' yet",
                                "use fat-tree") from None
    return family(design, catalog)
