"""The one-way pipeline: spec -> topology -> bill of materials -> metrics -> report (DESIGN section 2).

Each stage is a plain function; this module only chains them. No stage prints or writes files.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .catalog import Catalog
from .cost import Bom, bill_of_materials
from .errors import EngineRefused
from .flow import RouteRequest, select_engine
from .flow.bisection import Bisection, bisection, permutation_throughput
from .flow.metrics import evaluate_workload
from .generators import generate
from .spec import Design
from .topology import Topology


# beyond this, a random permutation under the generic ECMP engine takes minutes; the report says so
MAX_GENERIC_PERMUTATION_GPUS = 16_384


@dataclass
class Evaluation:
    design: Design
    topology: Topology
    bom: Bom
    bisection: Bisection
    collectives: list = field(default_factory=list)


def build(design: Design, catalog: Catalog) -> tuple[Topology, Bom]:
    """The first stages: the topology and its bill of materials (cheap; no routing)."""
    topology = generate(design, catalog)
    return topology, bill_of_materials(topology, design, catalog)


def evaluate(design: Design, catalog: Catalog, latency_scale: float = 1.0,
             built: tuple[Topology, Bom] | None = None) -> Evaluation:
    """Every stage for one design. ``latency_scale`` scales per-step latencies (0 for bandwidth only);
    ``built`` reuses the result of ``build`` (the optimizer prunes on it before routing)."""
    topology, bom = built or build(design, catalog)
    cut = bisection(topology)
    engine = "optimal" if design.routing.engine == "optimal" else "ecmp"
    try:
        if not select_engine(topology, RouteRequest(engine)).per_destination or \
                design.gpus <= MAX_GENERIC_PERMUTATION_GPUS:
            cut.permutation_gbps_per_gpu = permutation_throughput(topology, engine)
            if cut.permutation_gbps_per_gpu is None:
                cut.permutation_note = "some pairs of the permutation are unreachable"
        else:
            cut.permutation_note = (f"not computed: the generic ECMP engine beyond {MAX_GENERIC_PERMUTATION_GPUS:,} "
                                    "GPUs takes minutes")
        collectives = evaluate_workload(topology, design, catalog, latency_scale)
    except EngineRefused as err:
        raise design.infeasible("routing", str(err), "use routing: ecmp, which scales to any size") from None
    return Evaluation(design, topology, bom, cut, collectives)

