"""Bill of materials, price and power of a topology's network.

Counted from the topology's arrays (vectorized, no per-element Python):

* switches and optical circuit switches by tier and model; compute NICs by model;
* per network link tier, the reach class from ``fabric.cabling`` decides the medium: an ``in-rack`` link
  is one copper cable; an ``in-row`` or ``cross-row`` link is one fibre plus a transceiver module in a
  cage at each end. A module fills one cage and serves the cage's logical ports (a twin-port 800G OSFP
  on a 64x400G switch serves two 400G links), so modules per device model = ceil(link ends / ports per
  cage). The cheapest part of the cage's form factor, at least the cage's capacity and reaching far
  enough is used, multimode where both ends have one, else single-mode, with a fibre of that media.

Network cost excludes the servers (their price is reported apart, for scale). Prices are catalog
estimates; the report says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .catalog import Catalog
from .spec import Design
from .topology import KIND, LINK_TIERS, SWITCH_TIERS, Topology

REACH_REQUIRED_M = {"in-rack": 3.0, "in-row": 50.0, "cross-row": 500.0}
CATEGORIES = ("switches", "nics", "transceivers", "cables", "ocs")


@dataclass(frozen=True)
class BomLine:
    category: str
    item: str          # catalog id
    tier: str          # leaf/spine/core/ocs, or "" for NICs
    quantity: int
    unit_price_usd: float
    unit_power_w: float

    @property
    def price_usd(self) -> float:
        return self.quantity * self.unit_price_usd

    @property
    def power_w(self) -> float:
        return self.quantity * self.unit_power_w


@dataclass
class Bom:
    lines: list = field(default_factory=list)
    gpus: int = 0
    servers: int = 0
    server_price_usd: float = 0.0

    @property
    def total_usd(self) -> float:
        return sum(line.price_usd for line in self.lines)

    @property
    def power_w(self) -> float:
        return sum(line.power_w for line in self.lines)

    def by_category(self) -> dict:
        out = {c: 0.0 for c in CATEGORIES}
        for line in self.lines:
            out[line.category] += line.price_usd
        return out

    def quantity(self, category: str, tier: str | None = None) -> int:
        return sum(l.quantity for l in self.lines if l.category == category and (tier is None or l.tier == tier))


def bill_of_materials(topology: Topology, design: Design, catalog: Catalog) -> Bom:
    server = catalog.servers[design.cluster.server]
    bom = Bom(gpus=design.gpus, servers=design.cluster.servers, server_price_usd=server.price_usd)
    models = topology.models
    for kind, category in (("switch", "switches"), ("ocs", "ocs")):
        mask = topology.kind == KIND[kind]
        if not mask.any():
            continue
        for tier, model, count in _pair_counts(topology.tier[mask], topology.model[mask]):
            entry = catalog.section(category)[models[model]]
            tier_name = SWITCH_TIERS[tier] if kind == "switch" else "ocs"
            bom.lines.append(BomLine(category, entry.id, tier_name, int(count), entry.price_usd, entry.power_w))
    nic_mask = topology.kind == KIND["nic"]
    models_used, counts = np.unique(topology.model[nic_mask], return_counts=True)
    for model, count in zip(models_used, counts):
        entry = catalog.nics[models[model]]
        bom.lines.append(BomLine("nics", entry.id, "", int(count), entry.price_usd, entry.power_w))
    _add_cabling(bom, topology, design, catalog)
    return bom


def _pair_counts(first: np.ndarray, second: np.ndarray) -> list[tuple[int, int, int]]:
    """(a, b, count) for each distinct pair of small non-negative codes, in (a, b) order; O(n) by bincount."""
    span = int(second.max()) + 1
    counts = np.bincount(first.astype(np.int64) * span + second, minlength=0)
    return [(int(k // span), int(k % span), int(counts[k])) for k in np.flatnonzero(counts)]


def cage_of(node_kind: int, model_id: str, link_gbps: float, catalog: Catalog) -> tuple[float, float, str]:
    """(logical ports one module serves, module capacity in Gb/s, form factor) of a device at a link speed."""
    if node_kind == KIND["switch"]:
        switch = catalog.switches[model_id]
        radix, _speed = switch.radix_at(link_gbps)
        return radix / switch.cages, switch.cage_gbps, switch.form_factor
    nic = catalog.nics[model_id]  # a NIC, or a chip whose integrated ports are catalogued as one (RailX)
    return nic.ports / nic.cages, nic.cage_gbps, nic.form_factor


def cheapest(items):
    return min(items, key=lambda x: (x.price_usd, x.id)) if items else None


def _transceiver(catalog: Catalog, gbps: float, form_factor: str, need_m: float, media: str, drive: str = "dsp"):
    return cheapest([t for t in catalog.transceivers.values() if t.speed_gbps >= gbps and t.form_factor == form_factor
                      and t.reach_m >= need_m and t.media == media and t.drive == drive])


def choose_optics(catalog: Catalog, need_m: float, cages: list, drive: str = "dsp") -> tuple | None:
    """(fibre, one transceiver per cage kind) for fibre links reaching ``need_m`` between devices with
    ``cages`` ((ports per cage, cage Gb/s, form factor) each), or None if the catalog has none. One media
    for the whole link, so both ends and the fibre match: multimode when it reaches, else single-mode.
    ``drive`` picks retimed (dsp) or linear-drive (LPO) pluggables."""
    for media in ("multimode", "singlemode"):
        parts = [_transceiver(catalog, gbps, ff, need_m, media, drive) for _p, gbps, ff in cages]
        fibre = cheapest([c for c in catalog.cables.values()
                           if c.kind == "fiber" and c.media == media and c.reach_m >= need_m])
        if all(parts) and fibre:
            return fibre, parts
    return None


def _add_cabling(bom: Bom, topology: Topology, design: Design, catalog: Catalog) -> None:
    src, dst = topology.src[0::2], topology.dst[0::2]
    capacity, link_tier = topology.capacity_gbps[0::2], topology.link_tier[0::2]
    for tier_index, tier in enumerate(LINK_TIERS):
        if tier == "host":
            continue
        # a circuit runs chip -> OCS -> chip: two fibres; the OCS adds no transceiver
        fibres_per_link = 2 if tier == "ocs" else 1
        mask = link_tier == tier_index
        if not mask.any():
            continue
        reach = design.fabric.cabling[tier]
        need_m = REACH_REQUIRED_M[reach]
        for speed in np.unique(capacity[mask]):
            links = mask & (capacity == speed)
            count = int(links.sum())
            if reach == "in-rack":
                cable = cheapest([c for c in catalog.cables.values()
                                   if c.media == "copper" and c.speed_gbps >= speed and c.reach_m >= need_m])
                if cable is None:
                    raise design.infeasible(f"fabric.cabling.{tier}", f"the catalog has no copper cable for "
                                            f"{speed:g} Gb/s links of {need_m:g} m",
                                            "add one with --catalog FILE, or cable this tier in-row")
                bom.lines.append(BomLine("cables", cable.id, tier, count, cable.price_usd, cable.power_w))
                continue
            ends = np.concatenate([src[links], dst[links]])
            cages = [(topology.models[model], n, cage_of(kind, topology.models[model], float(speed), catalog))
                     for kind, model, n in _pair_counts(topology.kind[ends], topology.model[ends])
                     if not (kind == KIND["switch"] and catalog.switches[topology.models[model]].co_packaged_optics)]
            drive = design.fabric.optics
            chosen = choose_optics(catalog, need_m, [cage for _m, _n, cage in cages], drive)
            if chosen is None:
                missing = [f"{gbps:g} Gb/s {ff} (for {model})" for model, _n, (_p, gbps, ff) in cages
                           if not any(_transceiver(catalog, gbps, ff, need_m, m, drive)
                                      for m in ("multimode", "singlemode"))]
                kind_word = "linear-drive transceiver" if drive == "linear" else "transceiver"
                raise design.infeasible(f"fabric.cabling.{tier}", f"the catalog has no {kind_word} reaching "
                                        f"{need_m:g} m for " + (", ".join(missing) or "both ends in one media"),
                                        "add one with --catalog FILE, or choose another reach class for this tier"
                                        + (", or optics: dsp" if drive == "linear" else ""))
            fibre, parts = chosen
            bom.lines.append(BomLine("cables", fibre.id, tier, fibres_per_link * count, fibre.price_usd,
                                     fibre.power_w))
            modules: dict[str, int] = {}
            for part, (_model, n_ends, (per_cage, _gbps, _ff)) in zip(parts, cages):
                modules[part.id] = modules.get(part.id, 0) + math.ceil(n_ends / per_cage)
            for part_id in sorted(modules):
                part = catalog.transceivers[part_id]
                bom.lines.append(BomLine("transceivers", part.id, tier, modules[part_id], part.price_usd, part.power_w))
