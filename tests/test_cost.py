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


def _cheapest_cable(catalog, kinds, reach, speed=0):
    parts = [c for c in catalog.cables.values() if c.kind in kinds and c.reach_m >= reach and c.speed_gbps >= speed]
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


def test_in_rack_copper_has_no_transceivers(make_design, catalog):
    design = make_design(cluster={"gpus": 64}, fabric={"cabling": {"leaf": "in-rack"}})
    bom = bill_of_materials(generate(design, catalog), design, catalog)
    assert bom.quantity("transceivers") == 0
    dac = _cheapest_cable(catalog, ("dac", "acc", "aec"), REACH_REQUIRED_M["in-rack"], 400)
    assert [(l.item, l.quantity) for l in bom.lines if l.category == "cables"] == [(dac.id, 64)]


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
