"""Bill of materials, price and power of a topology's network.

Counted from the topology's arrays (vectorized, no per-element Python):

* switches and optical circuit switches by tier and model; compute NICs by model;
* per network link tier, the reach class from ``fabric.cabling`` decides the medium. An ``in-rack`` tier
  is copper: one cable assembly per cage at the end whose cages carry the most links (a twin-port DAC
  joins two twin-port cages; a 1:2 splitter joins one twin-port cage to two single-port NICs). An
  ``in-row`` or ``cross-row`` tier is optical: a transceiver module in a cage at each end and one fibre
  per link. A module fills one cage and serves the cage's logical ports (a twin-port 800G OSFP on a
  64x400G switch serves two 400G links), so modules per device model = ceil(link ends / ports per cage).
  The cheapest part of the cage's form factor, at least the cage's capacity and reaching far enough is
  used, multimode where both ends have one, else single-mode, with a fibre of that media.
* per link tier and speed, the links and the cables as vendors count them (``Bom.links``): one cable
  per connector at the end with fewer connectors for copper (a cage), and per connector at the end with
  more for optics, a connector being a switch port as the vendor numbers its ports (a QM9700's 400G
  port; an SN5600's 800G port, even when it runs as 2 x 400G) or a NIC cage. NVIDIA's SuperPOD tables
  count this way: 256 leaf-spine cables per H100 SU of 256 links at 400G, 512 per B300 SU of 1,024
  400G links on 800G ports.

Network cost excludes the servers (their price is reported apart, for scale). Prices are catalog
estimates; the report says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

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


@dataclass(frozen=True)
class LinkLine:
    """One link tier at one speed: its links, and its cables as vendors count them."""

    tier: str
    link_gbps: float
    links: int
    cables: int
    medium: str        # "copper" or "optical"
    fibres: int        # priced fibres (one per link; two per circuit through an OCS); 0 for copper


@dataclass
class Bom:
    lines: list = field(default_factory=list)
    links: list = field(default_factory=list)   # LinkLine per tier and speed
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
        for line in self.lines:   # a multi-site bill adds "wan" (sites.py)
            out[line.category] = out.get(line.category, 0.0) + line.price_usd
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


def connector_ports(node_kind: int, model_id: str, link_gbps: float, catalog: Catalog,
                    medium: str) -> tuple[int, int]:
    """(numerator, denominator) of the links one connector of a device carries, the unit a cable is
    counted on: a copper assembly fills a cage (``radix / cages`` on a switch), a fibre one switch port as
    the vendor numbers them (``radix / ports``), and on a NIC either fills a cage (``ports / cages``).
    Never below one link per connector."""
    if node_kind == KIND["switch"]:
        switch = catalog.switches[model_id]
        numerator = switch.radix_at(link_gbps)[0]
        denominator = switch.cages if medium == "copper" else switch.ports
    else:
        nic = catalog.nics[model_id]
        numerator, denominator = nic.ports, nic.cages
    return (numerator, denominator) if numerator >= denominator else (1, 1)


def copper_assembly(catalog: Catalog, need_m: float, link_gbps: float, sides: list):
    """(cable, tails) joining two link ends of ``sides`` ((numerator, denominator) of links per connector
    each): the head is the end whose connectors carry the most links; ``tails`` connectors at the other
    end hang off each head (1: a straight cable, 2 or 4: a splitter). The cable is the cheapest copper
    part of that fan-out carrying the head's links at ``link_gbps`` and reaching ``need_m``; None if the
    ratio is not whole or the catalog has no such part."""
    per = sorted(Fraction(num, den) for num, den in sides)
    ratio = per[-1] / per[0]
    if ratio.denominator != 1:
        return None, int(math.ceil(ratio))
    tails = int(ratio)
    head_gbps = float(per[-1]) * link_gbps
    return cheapest([c for c in catalog.cables.values() if c.media == "copper" and c.tails == tails
                     and c.speed_gbps >= head_gbps - 1e-9 and c.reach_m >= need_m]), tails


def _connectors(topology: Topology, nodes: np.ndarray, speed: float, catalog: Catalog, medium: str) -> tuple:
    """(connectors the links ending at ``nodes`` use, the widest (numerator, denominator) among their
    models); connectors are counted per device model, as transceiver modules are."""
    total, widest = 0, (1, 1)
    for kind, model, n in _pair_counts(topology.kind[nodes], topology.model[nodes]):
        num, den = connector_ports(kind, topology.models[model], speed, catalog, medium)
        total += -(-n * den // num)
        widest = max(widest, (num, den), key=lambda p: Fraction(*p))
    return total, widest


def _link_sides(topology: Topology) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) end of every link: the NIC (or chip) below the leaf below the spine below the core;
    the source end when both are of one rank."""
    src, dst = topology.src[0::2], topology.dst[0::2]
    rank = np.where(topology.kind == KIND["switch"], topology.tier.astype(np.int64), -1)
    rank = np.where(topology.kind == KIND["ocs"], len(SWITCH_TIERS), rank)
    swap = rank[src] > rank[dst]
    return np.where(swap, dst, src), np.where(swap, src, dst)


def _add_cabling(bom: Bom, topology: Topology, design: Design, catalog: Catalog) -> None:
    src, dst = topology.src[0::2], topology.dst[0::2]
    lower, upper = _link_sides(topology)
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
        medium = "copper" if reach == "in-rack" else "optical"
        for speed in np.unique(capacity[mask]):
            links = mask & (capacity == speed)
            count = int(links.sum())
            (low, low_widest), (up, up_widest) = (_connectors(topology, side[links], float(speed), catalog, medium)
                                                  for side in (lower, upper))
            if medium == "copper":
                cable, tails = copper_assembly(catalog, need_m, float(speed), [low_widest, up_widest])
                if cable is None:
                    fan = "straight copper cable" if tails == 1 else f"1:{tails} copper splitter"
                    raise design.infeasible(f"fabric.cabling.{tier}", f"the catalog has no {fan} for "
                                            f"{speed:g} Gb/s links of {need_m:g} m between these cages",
                                            "add one with --catalog FILE, or cable this tier in-row")
                cables = min(low, up)
                bom.links.append(LinkLine(tier, float(speed), count, cables, medium, 0))
                bom.lines.append(BomLine("cables", cable.id, tier, cables, cable.price_usd, cable.power_w))
                continue
            # a circuit's two fibres each plug one OCS port: one cable per fibre
            cables = fibres_per_link * count if tier == "ocs" else max(low, up)
            bom.links.append(LinkLine(tier, float(speed), count, cables, medium, fibres_per_link * count))
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
