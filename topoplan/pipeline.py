"""The one-way pipeline: spec -> topology -> bill of materials -> metrics -> report (DESIGN section 2).

Each stage is a plain function; this module only chains them. No stage prints or writes files.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import training
from .catalog import Catalog
from .cost import Bom, bill_of_materials
from .errors import EngineRefused
from .flow import RouteRequest, ecmp, select_engine
from .flow.bisection import Bisection, bisection, permutation_throughput
from .flow.metrics import evaluate_workload
from .generators import generate
from .spec import Design
from .topology import Topology


# the random permutation is one extra figure of the report: under the engines that search per destination it
# is skipped past this many multiply-adds (about a minute), with a note, rather than slow every report
MAX_PERMUTATION_SEARCH_OPS = 30_000_000_000


@dataclass
class Evaluation:
    design: Design
    topology: Topology
    bom: Bom
    bisection: Bisection
    collectives: list = field(default_factory=list)
    training: object = None     # training.Step when the workload names a model
    price: object = None        # training.Price (the cluster's cost per hour) with it


def build(design: Design, catalog: Catalog) -> tuple[Topology, Bom]:
    """The first stages: the topology and its bill of materials (cheap; no routing)."""
    topology = generate(design, catalog)
    return topology, bill_of_materials(topology, design, catalog)


def evaluate(design: Design, catalog: Catalog, latency_scale: float = 1.0,
             built: tuple[Topology, Bom] | None = None, progress=None) -> Evaluation:
    """Every stage for one design. ``latency_scale`` scales per-step latencies (0 for bandwidth only);
    ``built`` reuses the result of ``build`` (the optimizer prunes on it before routing); ``progress``
    (optional) follows the routing (``flow.metrics.evaluate_workload``)."""
    topology, bom = built or build(design, catalog)
    cut = bisection(topology)
    engine = "optimal" if design.routing.engine == "optimal" else "ecmp"
    try:
        chosen = select_engine(topology, RouteRequest(engine))
        ops = ecmp.search_ops(topology, topology.gpus.size) if chosen.per_destination else 0
        if ops <= MAX_PERMUTATION_SEARCH_OPS:
            cut.permutation_gbps_per_gpu = permutation_throughput(topology, engine)
            if cut.permutation_gbps_per_gpu is None:
                cut.permutation_note = "some pairs of the permutation are unreachable"
        else:
            cut.permutation_note = (f"not computed: the {chosen.name} engine would search about {ops:.1g} "
                                    f"multiply-adds (about {ops / ecmp.MEASURED_OPS_PER_S / 60:,.0f} min)")
        collectives = evaluate_workload(topology, design, catalog, latency_scale, progress=progress)
        step = price = None
        if design.workload.training is not None:
            step = training.evaluate_step(topology, design, catalog, latency_scale)
            price = training.cluster_price(design, catalog, bom, design.workload.training.economics)
    except EngineRefused as err:
        hint = "use routing: ecmp, which scales to any size" if err.refusal.engine == "optimal" else ""
        raise design.infeasible("routing", str(err), hint) from None
    return Evaluation(design, topology, bom, cut, collectives, step, price)
