"""The routing-engine contract: what an engine takes, what it returns, and how one is chosen.

An engine is an ``Engine`` entry in ``flow.ENGINES`` (see ``flow/__init__.py``): a name, a ``route``
function ``(topology, demand, request) -> Routed`` and a ``refusal`` function ``(topology, request) ->
Refusal | None`` that says, before any work, why it cannot route this topology (None: it can). An engine
may name another engine it ``stands_in_for``: where it accepts, it gives exactly that engine's loads,
faster (the closed forms ``clos`` and ``railx`` stand in for ``ecmp``). ``select_engine`` is the one
selection policy; the pipeline and the metrics only call it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import EngineRefused, Refusal


@dataclass
class Routed:
    """Bytes per arc, and what could not be routed: the flows that carry bytes and have no path (a flow of
    zero bytes needs none), counted per (source, destination) pair whatever the queue pairs, and their bytes."""

    load: np.ndarray
    unreachable_pairs: int = 0
    unreachable_bytes: float = 0.0


@dataclass(frozen=True, eq=False)
class RouteRequest:
    """What the caller asks for: an engine by name and its options. ``arc_mask`` marks the arcs that are up
    (None: all)."""

    engine: str = "ecmp"
    seed: int = 0
    qps: int = 1
    arc_mask: np.ndarray | None = None


@dataclass(frozen=True)
class Engine:
    name: str
    summary: str
    route: Callable          # (topology, demand, request) -> Routed
    refusal: Callable        # (topology, request) -> Refusal | None
    stands_in_for: str = ""  # gives this engine's loads exactly, where it accepts
    seeded: bool = False     # results depend on request.seed: the metrics run several seeds
    per_destination: bool = False  # cost grows with the destinations (a search per destination block)
    route_seeds: Callable | None = None  # seeded engines: (topology, demand, request, seeds) -> [Routed], at once
    label: str = ""          # what its times assume, as reports say it
    flow_paths: Callable | None = None   # (topology, demand, request) -> fairshare.FlowPaths: each flow's path


def select_engine(engines: dict, topology, request: RouteRequest) -> Engine:
    """The engine that will route ``request`` on ``topology``: an engine that stands in for the one asked
    for and accepts, else the one asked for; ``EngineRefused`` (with the typed reason) when it refuses."""
    asked = engines.get(request.engine)
    if asked is None:
        raise EngineRefused(Refusal(request.engine, f"unknown engine '{request.engine}'"))
    for engine in engines.values():
        if engine.stands_in_for == request.engine and engine.refusal(topology, request) is None:
            return engine
    refused = asked.refusal(topology, request)
    if refused is not None:
        raise EngineRefused(refused)
    return asked


def no_failed_links(name: str, request: RouteRequest) -> Refusal | None:
    """The refusal of an engine that assumes every link is up."""
    if request.arc_mask is not None and not np.asarray(request.arc_mask).all():
        return Refusal(name, f"the {name} engine does not take failed links")
    return None
