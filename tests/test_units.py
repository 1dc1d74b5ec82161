from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topoplan.units import format_bytes, parse_rate_gbps, parse_size


@pytest.mark.parametrize("text,value", [("1GiB", 2**30), ("256MiB", 256 * 2**20), ("4MB", 4_000_000),
                                        ("4096", 4096), (4096, 4096), ("1.5GiB", 3 * 2**29), ("8 KiB", 8192),
                                        ("1e3", 1000), ("2TiB", 2 * 2**40)])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("bad", ["1 gigabyte", "", "GiB", "-1GiB", 0, -5, True, 1.5, None, [1], "0.1B"])
def test_parse_size_rejects(bad):
    with pytest.raises(ValueError):
        parse_size(bad)


@pytest.mark.parametrize("text,value", [("400G", 400.0), ("1.6T", 1600.0), ("800Gbps", 800.0), (200, 200.0),
                                        ("100 Mbps", 0.1)])
def test_parse_rate(text, value):
    assert parse_rate_gbps(text) == pytest.approx(value)


@given(st.integers(min_value=1, max_value=2**50))
def test_format_then_parse_round_trips(size):
    assert parse_size(format_bytes(size)) == size
