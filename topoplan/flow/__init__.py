"""The flow solver: route a training job's collective traffic over a topology.

One facade, ``route(topology, demand, engine)`` -> ``Routed`` (bytes per arc), over the engines of one
registry, ``ENGINES`` (the contract is in ``engine.py``):

* ``ecmp``       fractional ECMP on any graph (``ecmp.py``): ideal per-packet spraying, a lower bound;
* ``clos``       closed-form ECMP on folded-Clos fabrics (``clos.py``): stands in for ``ecmp`` where exact;
* ``clos-failed`` ECMP by destination classes on folded-Clos fabrics with failed network links or switches
                 (``degraded.py``): stands in for ``ecmp`` there;
* ``railx``      ECMP on RailX fabrics from the row x column structure (``railx.py``): stands in for ``ecmp``
                 where exact;
* ``ecmp-hash``  one path per flow or queue pair by a seeded hash (``hashed.py``), flows sharing links
                 max-min fairly (``fairshare.py``, through ``crowding.py``);
* ``optimal``    min-max-utilization multicommodity flow (``lp.py``, OR-Tools).

``select_engine`` is the one selection policy. ``traffic.py`` compiles collectives into phases of demands,
``metrics.py`` turns loads into times, bus bandwidth and utilization, ``bisection.py`` measures bisection
bandwidth. To add an engine: write its module and add one entry below.
"""

from __future__ import annotations

import numpy as np

from ..errors import EngineRefused, Refusal  # noqa: F401 - part of the facade
from ..topology import Topology
from . import clos, degraded, ecmp, hashed, lp, railx
from .engine import Engine, RouteRequest, Routed, no_failed_links
from .engine import select_engine as _select
from .traffic import Demand


def _closed_form(module, name: str):
    def refusal(topology: Topology, request: RouteRequest) -> Refusal | None:
        return no_failed_links(name, request) or module.refusal(topology)
    return refusal


# the fluid ECMP engines spread every flow over all its shortest paths, as only per-packet spraying can
SPRAYING = "ideal spraying, a lower bound"

# registry order matters only among engines that stand in for the same one: the first that accepts runs
ENGINES: dict[str, Engine] = {engine.name: engine for engine in (
    Engine("ecmp", "fractional ECMP over shortest paths, any graph",
           route=lambda t, d, r: ecmp.route(t, d, r.arc_mask), refusal=lambda t, r: None, per_destination=True,
           label=SPRAYING),
    Engine("clos", "closed-form ECMP per subtree on folded-Clos and rail fabrics",
           route=lambda t, d, r: clos.route(t, d), refusal=_closed_form(clos, "clos"), stands_in_for="ecmp",
           label=SPRAYING),
    Engine("clos-failed", "ECMP by destination classes on folded-Clos fabrics with failed links or switches",
           route=lambda t, d, r: degraded.route(t, d, r.arc_mask), refusal=lambda t, r: degraded.refusal(t, r.arc_mask),
           stands_in_for="ecmp", label=SPRAYING),
    Engine("railx", "ECMP from the row x column structure of RailX grids",
           route=lambda t, d, r: railx.route(t, d), refusal=_closed_form(railx, "railx"), stands_in_for="ecmp",
           label=SPRAYING),
    Engine("ecmp-hash", "one shortest path per flow or queue pair, by a seeded hash",
           route=lambda t, d, r: hashed.route(t, d, seed=r.seed, qps=r.qps, arc_mask=r.arc_mask),
           refusal=lambda t, r: None, seeded=True, per_destination=True,
           route_seeds=lambda t, d, r, seeds: hashed.route_seeds(t, d, seeds, r.qps, r.arc_mask),
           label="per-flow ECMP: hashed paths, max-min fair rates",
           flow_paths=lambda t, d, r: hashed.flow_paths(t, d, seed=r.seed, qps=r.qps, arc_mask=r.arc_mask)),
    Engine("optimal", "minimum max-utilization multicommodity flow (OR-Tools LP)",
           route=lambda t, d, r: lp.route(t, d), refusal=_closed_form(lp, "optimal"),
           label="optimal multicommodity flow, a lower bound"),
)}


def select_engine(topology: Topology, request: RouteRequest) -> Engine:
    """The engine that will run ``request`` on ``topology`` (see ``engine.select_engine``)."""
    return _select(ENGINES, topology, request)


def route(topology: Topology, demand: Demand, engine: str = "ecmp", *, seed: int = 0, qps: int = 1,
          arc_mask: np.ndarray | None = None) -> Routed:
    """Bytes per arc of ``demand`` under ``engine``; ``arc_mask`` marks the arcs that are up.

    >>> from topoplan.topology import TopologyBuilder
    >>> builder = TopologyBuilder("pair")
    >>> gpus = builder.add_nodes("gpu", 2, "gpu")
    >>> switch = builder.add_nodes("switch", 1, "leaf", tier=0)
    >>> builder.add_links(gpus, switch[0], 400, 0.0, "copper", "leaf")
    >>> route(builder.build(), Demand([0], [1], 1e9)).load.tolist()
    [1000000000.0, 0.0, 0.0, 1000000000.0]
    """
    request = RouteRequest(engine, seed, qps, arc_mask)
    return select_engine(topology, request).route(topology, demand, request)
