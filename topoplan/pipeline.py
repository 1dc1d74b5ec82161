"""The one-way pipeline: spec -> topology -> bill of materials -> metrics -> report (DESIGN section 2).

Each stage is a plain function; this module only chains them. No stage prints or writes files.
"""

from __future__ import annotations

from dataclasses import dataclass

from .catalog import Catalog, load_catalog
from .cost import Bom, bill_of_materials
from .generators import generate
from .spec import Design, load_design
from .topology import Topology


@dataclass
class Evaluation:
    design: Design
    topology: Topology
    bom: Bom


def evaluate(design: Design, catalog: Catalog) -> Evaluation:
    topology = generate(design, catalog)
    bom = bill_of_materials(topology, design, catalog)
    return Evaluation(design, topology, bom)


def evaluate_file(spec_file: str, catalog_files=()) -> Evaluation:
    catalog = load_catalog(catalog_files)
    return evaluate(load_design(spec_file, catalog), catalog)
