"""Bill of materials against counts derived by hand from the fabric's construction."""

from __future__ import annotations

import math

import pytest

from topoplan.cost import REACH_REQUIRED_M, bill_of_materials
from topoplan.generators import generate


def _cheapest_transceiver(catalog, speed, reach, drive="dsp", form_factor="OSFP"):
    parts = [t for t in catalog.transceivers.values() if t.speed_gbps == speed and t.reach_m >= reach
             and t.drive == drive and t.form_factor == form_factor]
    return min(parts, key=lambda t: (t.price_usd, t.id))


def _cheapest_cable(catalog, kinds, reach, speed=0, tails=1):
    parts = [c for c in catalog.cables.values() if c.kind in kinds and c.reach_m >= reach and c.speed_gbps >= speed
             and c.tails == tails]
    return min(parts, key=lambda c: (c.price_usd, c.id))


def test_two_tier_1024_gpu_bom_by_hand(make_design, catalog):
    """1,024 DGX H100 GPUs, QM9700 (32 twin-port 800G cages = 64 x 400G), two tiers, all in-row optics:
    32 leaves + 16 spines; 1,024 NIC links and 1,024 leaf-spine links; 1,024 single 400G modules at the
    NICs, (1,024 + 2,048) / 2 = 1,536 twin-port 800G modules at the switches, 2,048 fibres."""
    design = make_design(cluster={"gpus": 1024}, fabric={"cabling": {"leaf": "in-row", "spine": "in-row"}})
    topology = generate(design, catalog)
    bom = bill_of_materials(topology, design, catalog)
    switch = catalog.switches["nvidia-qm9700"]
    nic = catalog.nics["nvidia-connectx-7"]
    t400 = _cheapest_transceiver(catalog, 400, REACH_REQUIRED_M["in-row"])
    t800 = _cheapest_transceiver(catalog, 800, REACH_REQUIRED_M["in-row"])
    fibre = _cheapest_cable(catalog, ("fiber",), REACH_REQUIRED_M["in-row"])
    assert bom.quantity("switches") == 48
    assert bom.quantity("switches", "leaf") == 32 and bom.quantity("switches", "spine") == 16
    assert bom.quantity("nics") == 1024
    assert bom.quantity("cables") == 2048
    expected = {t400.id: 1024, t800.id: 1536}
    got = {}
    for line in bom.lines:
        if line.category == "transceivers":
            got[line.item] = got.get(line.item, 0) + line.quantity
    assert got == expected
    price = (48 * switch.price_usd + 1024 * nic.price_usd + 1024 * t400.price_usd + 1536 * t800.price_usd
             + 2048 * fibre.price_usd)
    power = (48 * switch.power_w + 1024 * nic.power_w + 1024 * t400.power_w + 1536 * t800.power_w
             + 2048 * fibre.power_w)
    assert bom.total_usd == pytest.approx(price, rel=1e-12)
    assert bom.power_w == pytest.approx(power, rel=1e-12)
    by_category = bom.by_category()
    assert sum(by_category.values()) == pytest.approx(bom.total_usd)
    assert by_category["ocs"] == 0


def test_in_rack_copper_is_splitters_and_twin_port_cables(make_design, catalog):
    """64 DGX H100 GPUs on QM9700s (twin-port 800G cages), leaf and spine tiers in the rack: no
    transceivers; each leaf cage takes a 1:2 splitter to two single-port 400G NICs (64 links, 32 cables),
    and each leaf-spine cage pair a straight twin-port DAC (64 links at 400G, 32 cables)."""
    design = make_design(cluster={"gpus": 64}, fabric={"tiers": 2, "cabling": {"leaf": "in-rack", "spine": "in-rack"}})
    bom = bill_of_materials(generate(design, catalog), design, catalog)
    assert bom.quantity("transceivers") == 0
    splitter = _cheapest_cable(catalog, ("dac", "acc"), REACH_REQUIRED_M["in-rack"], 800, tails=2)
    twin = _cheapest_cable(catalog, ("dac", "acc"), REACH_REQUIRED_M["in-rack"], 800, tails=1)
    assert [(l.item, l.tier, l.quantity) for l in bom.lines if l.category == "cables"] == [
        (splitter.id, "leaf", 32), (twin.id, "spine", 32)]
    assert [(l.tier, l.links, l.cables, l.medium, l.fibres) for l in bom.links] == [
        ("leaf", 64, 32, "copper", 0), ("spine", 64, 32, "copper", 0)]


def test_in_rack_copper_without_a_splitter_is_refused(make_design, tmp_path):
    """Without a 1:2 copper part a twin-port cage cannot reach two single-port NICs in the rack."""
    from topoplan.catalog import load_catalog
    from topoplan.errors import InfeasibleDesign

    catalog = load_catalog()
    splitters = [c for c in catalog.cables.values() if c.media == "copper" and c.tails == 2]
    override = tmp_path / "no-splitters.yaml"
    override.write_text("cables:\n" + "".join(
        f"  - {{id: {c.id}, kind: {c.kind}, media: copper, tails: 2, description: gone, speed_gbps: 800,"
        " reach_m: 0.01, power_w: 0, price_usd: 1, source: test}\n" for c in splitters))
    catalog = load_catalog([override])
    from topoplan.spec import design_from_data
    from conftest import spec_data
    design = design_from_data(spec_data(cluster={"gpus": 64}, fabric={"cabling": {"leaf": "in-rack"}}), catalog)
    with pytest.raises(InfeasibleDesign, match="1:2 copper splitter"):
        bill_of_materials(generate(design, catalog), design, catalog)


# NVIDIA DGX SuperPOD reference architectures, "compute fabric component counts" (topologies.md §B4; the
# B300 and B300-XDR RAs' Table 3): (SU, leaves, spines, node-leaf cables, leaf-spine cables)
B300_TWIN_PLANE = [(1, 16, 8, 512, 512), (2, 32, 16, 1024, 1024), (4, 64, 32, 2048, 2048),
                   (8, 128, 64, 4096, 4096), (16, 256, 128, 8192, 8192)]
B300_XDR = [(1, 8, 4, 576, 576), (2, 16, 8, 1152, 1152), (4, 32, 18, 2304, 2304), (8, 64, 36, 4608, 4608)]


@pytest.mark.parametrize("su, leaves, spines, node_leaf, leaf_spine", B300_TWIN_PLANE)
def test_cables_as_nvidia_counts_them_b300_twin_plane(make_design, catalog, su, leaves, spines, node_leaf,
                                                     leaf_spine):
    """DGX B300 on Spectrum-X: each GPU's 800G CX-8 cage runs 2 x 400G into two planes; SN5600 ports
    are 800G run as 2 x 400G. NVIDIA counts one cable per GPU and per 800G leaf uplink port: half the
    400G links of each tier."""
    design = make_design(cluster={"server": "hgx-b300", "gpus": 512 * su},
                         fabric={"topology": "rail-optimized", "planes": 2, "scalable_unit": 64,
                                 "switch": "nvidia-sn5600", "tiers": 2})
    bom = bill_of_materials(generate(design, catalog), design, catalog)
    assert (bom.quantity("switches", "leaf"), bom.quantity("switches", "spine")) == (leaves, spines)
    by_tier = {line.tier: line for line in bom.links}
    assert (by_tier["leaf"].cables, by_tier["spine"].cables) == (node_leaf, leaf_spine)
    assert (by_tier["leaf"].links, by_tier["spine"].links) == (2 * node_leaf, 2 * leaf_spine)


@pytest.mark.parametrize("su, leaves, spines, node_leaf, leaf_spine", B300_XDR)
def test_cables_as_nvidia_counts_them_b300_xdr(make_design, catalog, su, leaves, spines, node_leaf, leaf_spine):
    """DGX B300 on Quantum-X800 XDR: single-port 800G CX-8s, 800G Q3400 ports in twin-port cages; one
    cable per 800G link (each twin-port module has two fibre connectors)."""
    design = make_design(cluster={"server": "dgx-b300-xdr", "gpus": 576 * su},
                         fabric={"topology": "rail-optimized", "scalable_unit": 72, "switch": "nvidia-q3400",
                                 "tiers": 2})
    bom = bill_of_materials(generate(design, catalog), design, catalog)
    assert (bom.quantity("switches", "leaf"), bom.quantity("switches", "spine")) == (leaves, spines)
    assert [(l.tier, l.links, l.cables) for l in bom.links] == [("leaf", node_leaf, node_leaf),
                                                               ("spine", leaf_spine, leaf_spine)]


def test_cables_as_nvidia_counts_them_h100_4su(catalog):
    """H100 SuperPOD, 4 SUs of QM9700 (400G ports in twin-port cages): 1,024 leaf-spine cables; 1,020
    compute + UFM cables, of which topoplan models the 127 nodes' 1,016 (not UFM's 4)."""
    from topoplan.spec import load_design

    from conftest import ROOT

    design = load_design(ROOT / "designs" / "superpod-h100-4su.yaml", catalog)
    bom = bill_of_materials(generate(design, catalog), design, catalog)
    assert [(l.tier, l.links, l.cables) for l in bom.links] == [("leaf", 1016, 1020 - 4), ("spine", 1024, 1024)]


def test_cost_scales_with_links(make_design, catalog):
    """Twice the GPUs at the same tier count never costs less, and cost per GPU stays within the
    divisor rule's rounding."""
    small = make_design(cluster={"gpus": 1024}, fabric={"tiers": 2})
    large = make_design(cluster={"gpus": 2048}, fabric={"tiers": 2})
    cost_small = bill_of_materials(generate(small, catalog), small, catalog).total_usd
    cost_large = bill_of_materials(generate(large, catalog), large, catalog).total_usd
    assert cost_large > cost_small
    assert math.isclose(cost_large / 2048, cost_small / 1024, rel_tol=0.05)


def test_override_catalog_price_changes_cost(tmp_path, catalog):
    from topoplan.catalog import load_catalog
    from topoplan.pipeline import evaluate
    from topoplan.spec import design_from_data
    from conftest import spec_data

    base = catalog.switches["nvidia-qm9700"]
    override = tmp_path / "prices.yaml"
    override.write_text(
        "switches:\n"
        f"  - {{id: nvidia-qm9700, vendor: NVIDIA, description: cheaper, ports: 64, port_speed_gbps: 400, cages: 32,"
        " form_factor: OSFP,"
        f" breakouts: [], latency_ns: 200, power_w: {base.power_w}, price_usd: {base.price_usd - 1000},"
        " source: negotiated quote}\n")
    cheap = load_catalog([override])
    data = spec_data()
    before = evaluate(design_from_data(data, catalog), catalog).bom.total_usd
    after = evaluate(design_from_data(data, cheap), cheap).bom.total_usd
    assert before - after == pytest.approx(48 * 1000)


# --- optics options (issue 14, item 7) ------------------------------------------------------------------

def _modules(bom):
    got = {}
    for line in bom.lines:
        if line.category == "transceivers":
            got[line.item] = got.get(line.item, 0) + line.quantity
    return got


def test_linear_drive_optics_replace_the_pluggables_one_for_one(make_design, catalog):
    """optics: linear takes the cheapest linear-drive part of each cage instead: the same 1,024 + 1,536
    modules and 2,048 fibres as the hand count above, at the LPO parts' power and price."""
    cabling = {"cabling": {"leaf": "in-row", "spine": "in-row"}}
    design = make_design(cluster={"gpus": 1024}, fabric={**cabling, "optics": "linear"})
    bom = bill_of_materials(generate(design, catalog), design, catalog)
    t400 = _cheapest_transceiver(catalog, 400, REACH_REQUIRED_M["in-row"], "linear")
    t800 = _cheapest_transceiver(catalog, 800, REACH_REQUIRED_M["in-row"], "linear")
    assert _modules(bom) == {t400.id: 1024, t800.id: 1536} and bom.quantity("cables") == 2048
    dsp = make_design(cluster={"gpus": 1024}, fabric=cabling)
    retimed = bill_of_materials(generate(dsp, catalog), dsp, catalog)
    saved_w = retimed.power_w - bom.power_w
    d400 = _cheapest_transceiver(catalog, 400, REACH_REQUIRED_M["in-row"])
    d800 = _cheapest_transceiver(catalog, 800, REACH_REQUIRED_M["in-row"])
    assert saved_w == pytest.approx(1024 * (d400.power_w - t400.power_w) + 1536 * (d800.power_w - t800.power_w))


def test_co_packaged_switches_take_fibres_but_no_transceivers(make_design, catalog):
    """Leaves and spines with co-packaged optics (Q3450-LD): only the NICs' 1,024 modules are bought;
    every link still has its fibre."""
    design = make_design(cluster={"gpus": 1024}, fabric={"switch": "nvidia-q3450-ld",
                                                          "cabling": {"leaf": "in-row", "spine": "in-row"}})
    topology = generate(design, catalog)
    bom = bill_of_materials(topology, design, catalog)
    links = topology.links_by_tier()
    assert sum(_modules(bom).values()) == 1024 and bom.quantity("transceivers", "spine") == 0
    assert bom.quantity("cables") == links["leaf"] + links["spine"]


def test_linear_drive_without_a_part_is_refused_with_a_hint(make_design, catalog):
    from topoplan.errors import InfeasibleDesign

    """The HPN host's dual-port 200G NICs have QSFP112 cages, for which the catalog has no linear part."""
    design = make_design(cluster={"server": "hpn-h800-dual-port", "gpus": 64},
                         fabric={"switch": "broadcom-th5-64x800g", "planes": 2, "optics": "linear",
                                 "cabling": {"leaf": "in-row"}})
    with pytest.raises(InfeasibleDesign, match=r"no linear-drive transceiver .* optics: dsp"):
        bill_of_materials(generate(design, catalog), design, catalog)
