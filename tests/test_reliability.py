"""Rates to interruptions, MTBF and checkpoint intervals, against the published Llama 3 and HPN figures."""

import math

import pytest
from hypothesis import given, strategies as st

from topoplan import reliability as rel


def _llama(gpus):
    return rel.interruptions(rel.llama3_rates(), {"gpu": gpus, "host": gpus // 8})


def test_llama3_table_sums_to_419_and_reproduces_its_run():
    assert sum(count for _, _, count in rel.LLAMA3_INTERRUPTIONS) == 419
    run = _llama(rel.LLAMA3_GPUS)
    assert run.per_day * rel.LLAMA3_DAYS == pytest.approx(419)
    assert run.per_day == pytest.approx(7.76, abs=0.005)
    assert run.mtbf_h == pytest.approx(3.09, abs=0.005)
    assert run.p_any_in_hour == pytest.approx(0.276, abs=0.0005)
    # The GPU causes alone (148+72+19+17+6+6) are 64.0% of the total.
    gpu_hw = {"faulty GPU (incl. NVLink)", "GPU HBM3 memory", "GPU SRAM memory",
              "GPU system processor", "silent data corruption", "GPU thermal interface and sensor"}
    share = sum(v for cause, v in run.by_cause_per_day if cause in gpu_hw) / run.per_day
    assert share == pytest.approx(268 / 419)


# Each printed figure must hold to half a unit of its last printed digit.
@pytest.mark.parametrize("gpus, per_day, per_day_digit, mtbf_h, mtbf_digit, p_hour, p_day", [
    (1_024, 0.48, 0.01, 49.5, 0.1, 0.020, 0.384),
    (8_192, 3.88, 0.01, 6.19, 0.01, 0.149, 0.979),
    (32_768, 15.5, 0.1, 1.55, 0.01, 0.476, None),
    (100_000, 47.4, 0.1, 0.51, 0.01, 0.861, None),
])
def test_poisson_table(gpus, per_day, per_day_digit, mtbf_h, mtbf_digit, p_hour, p_day):
    run = _llama(gpus)
    assert run.per_day == pytest.approx(per_day, abs=per_day_digit / 2)
    assert run.mtbf_h == pytest.approx(mtbf_h, abs=mtbf_digit / 2)
    assert run.p_any_in_hour == pytest.approx(p_hour, abs=0.0005)
    if p_day is not None:
        assert run.p_any_in_day == pytest.approx(p_day, abs=0.0005)
    else:
        assert run.p_any_in_day > 0.999


def test_hpn_segment_link_failures_per_month():
    # A 1,024-GPU segment has 2,048 NIC-ToR links: about 1.17 link failures a month.
    link_rate = rel.hpn_network_rates()[0]
    run = rel.interruptions((link_rate,), {"nic_link": 2_048})
    assert run.per_day * rel.DAYS_PER_MONTH == pytest.approx(1.17, abs=0.005)


def test_young_and_daly_worked_example():
    mtbf_s = 54 * 24 / 419 * 3600  # Llama 3's 3.09 h
    for checkpoint_s, young_min, waste, daly_s in [(30, 13.6, 0.073, 797), (100, 24.9, 0.134, 1426),
                                                   (300, 43.1, 0.232, 2389)]:
        young = rel.young_interval_s(checkpoint_s, mtbf_s)
        assert young / 60 == pytest.approx(young_min, abs=0.05)
        assert rel.waste_fraction(young, checkpoint_s, mtbf_s) == pytest.approx(waste, abs=0.0005)
        assert rel.daly_interval_s(checkpoint_s, mtbf_s) == pytest.approx(daly_s, abs=0.5)


def test_daly_beyond_twice_mtbf_is_mtbf_and_waste_caps_at_one():
    assert rel.daly_interval_s(500, 100) == 100
    assert rel.waste_fraction(10, 500, 100, restart_s=1_000) == 1.0
    assert rel.goodput(10, 500, 100) == 0.0


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan])
def test_nonpositive_inputs_are_refused(bad):
    with pytest.raises(ValueError):
        rel.young_interval_s(bad, 100)
    with pytest.raises(ValueError):
        rel.daly_interval_s(100, bad)


def test_no_components_means_no_interruptions():
    run = rel.interruptions(rel.llama3_rates(), {})
    assert run.per_day == 0 and math.isinf(run.mtbf_h) and run.p_any_in_day == 0


@given(checkpoint_s=st.floats(1, 3_600), mtbf_s=st.floats(3_600, 1e7))
def test_young_minimises_first_order_waste(checkpoint_s, mtbf_s):
    # sqrt(2CM) is the stationary point of C/T + T/2M: nudging T either way wastes more.
    best = rel.young_interval_s(checkpoint_s, mtbf_s)
    at_best = rel.waste_fraction(best, checkpoint_s, mtbf_s)
    for factor in (0.9, 1.1):
        assert rel.waste_fraction(best * factor, checkpoint_s, mtbf_s) >= at_best - 1e-12


@given(gpus=st.integers(8, 200_000))
def test_interruptions_scale_linearly_with_gpus(gpus):
    gpus -= gpus % 8
    one, double = _llama(gpus), _llama(2 * gpus)
    assert double.per_day == pytest.approx(2 * one.per_day)
    assert double.mtbf_h == pytest.approx(one.mtbf_h / 2)


def test_stop_fractions_scale_only_their_units_and_non_network_drops_llama3s_network_cause():
    counts = {"gpu": 16_384, "host": 2_048, "nic_link": 16_384}
    full = rel.interruptions(rel.llama3_rates() + rel.hpn_network_rates(), counts)
    halved = rel.interruptions(rel.llama3_rates() + rel.hpn_network_rates(), counts, {"nic_link": 0.5})
    link = 16_384 * 0.00057 / rel.DAYS_PER_MONTH
    assert full.per_day - halved.per_day == pytest.approx(link / 2)
    assert rel.interruptions(rel.llama3_non_network_rates(), counts).per_day == pytest.approx((419 - 35) / 54)
