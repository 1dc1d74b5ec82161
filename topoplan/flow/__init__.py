"""The flow solver: route a training job's collective traffic over a topology.

One facade, ``route(topology, demand, engine)`` -> ``Routed`` (bytes per arc), over pluggable engines:

* ``clos``       closed-form ECMP on folded-Clos fabrics (``clos.py``), exact where it accepts;
* ``railx``      ECMP on RailX fabrics from the row x column structure (``railx.py``), exact where it accepts;
* ``ecmp``       fractional ECMP on any graph (``ecmp.py``); the facade uses ``clos`` or ``railx`` when
                 one applies;
* ``ecmp-hash``  one path per flow or queue pair by a seeded hash (``hashed.py``);
* ``optimal``    min-max-utilization multicommodity flow (``lp.py``, OR-Tools).

``traffic.py`` compiles collectives into phases of demands, ``metrics.py`` turns loads into times, bus
bandwidth and utilization, ``bisection.py`` measures bisection bandwidth.
"""

from __future__ import annotations

import numpy as np

from ..topology import Topology


class EngineRefused(ValueError):
    """An engine cannot route this topology or workload (too large, or not the structure it needs)."""


from . import clos, ecmp, hashed, lp, railx  # noqa: E402 - the engines raise EngineRefused
from .ecmp import Routed  # noqa: E402
from .traffic import Demand  # noqa: E402

ENGINES = ("ecmp", "ecmp-hash", "optimal", "clos", "railx")


def engine_for(topology: Topology, engine: str, arc_mask: np.ndarray | None = None) -> str:
    """The engine that will actually run: ``ecmp`` becomes ``clos`` or ``railx`` where one applies."""
    if engine == "ecmp" and arc_mask is None:
        if clos.accepts(topology) == "":
            return "clos"
        if railx.accepts(topology) == "":
            return "railx"
    return engine


def route(topology: Topology, demand: Demand, engine: str = "ecmp", *, seed: int = 0, qps: int = 1,
          arc_mask: np.ndarray | None = None) -> Routed:
    """Bytes per arc of ``demand`` under ``engine``; ``arc_mask`` marks the arcs that are up."""
    engine = engine_for(topology, engine, arc_mask)
    if engine == "clos":
        return clos.route(topology, demand)
    if engine == "railx":
        return railx.route(topology, demand)
    if engine == "ecmp":
        return ecmp.route(topology, demand, arc_mask)
    if engine == "ecmp-hash":
        return hashed.route(topology, demand, seed=seed, qps=qps, arc_mask=arc_mask)
    if engine == "optimal":
        if arc_mask is not None:
            raise EngineRefused("the optimal engine does not take failed links")
        return lp.route(topology, demand)
    raise EngineRefused(f"unknown engine '{engine}'")
