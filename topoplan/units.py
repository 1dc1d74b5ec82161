"""Sizes and rates: the one place where text like ``"1GiB"`` or ``"400G"`` becomes a number.

Inside topoplan sizes are bytes (int) and link rates are Gb/s (float, one direction).
Reports convert to GB/s (1e9 bytes per second) for busbw and algbw, as nccl-tests does.
"""

from __future__ import annotations

import math
import re

_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_RATE_UNITS = {"": 1.0, "g": 1.0, "gb/s": 1.0, "gbps": 1.0, "gbit/s": 1.0,
               "m": 1e-3, "mbps": 1e-3, "mb/s": 1e-3, "t": 1e3, "tbps": 1e3, "tb/s": 1e3}
_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z/]*)\s*$")



MAX_SIZE_BYTES = 2**50          # 1 PiB: no collective buffer comes near it; larger is a typo
MAX_RATE_GBPS = 1e6             # 1 Pb/s per link or port


def parse_size(value) -> int:
    """See ``_parse_size``; sizes above ``MAX_SIZE_BYTES`` are refused."""
    size = _parse_size(value)
    if size > MAX_SIZE_BYTES:
        raise ValueError(f"size {value} is more than 1 PiB; collectives move bytes to gigabytes")
    return size


def _parse_size(value) -> int:
    """Bytes from an int or a string such as ``"256MiB"``, ``"1GB"``, ``"4096"``.

    Binary prefixes (KiB, MiB, GiB, TiB) are powers of 1024, decimal ones (K, KB, M, MB, ...) powers of
    1000. (nccl-tests' own -b/-e arguments read a bare K, M or G as a power of 1024: see
    ``parse_test_size``.) Raises ``ValueError`` with the reason.
    """
    if isinstance(value, bool):
        raise ValueError("expected a size like 1GiB or 268435456, got a boolean")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"size must be positive, got {value}")
        return value
    if isinstance(value, float):
        if not math.isfinite(value) or value <= 0 or value != int(value):
            raise ValueError(f"size must be a positive whole number of bytes, got {value}")
        return int(value)
    if not isinstance(value, str):
        raise ValueError(f"expected a size like 1GiB, got {type(value).__name__}")
    match = _NUMBER.match(value)
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"cannot read '{value}' as a size; write it like 1GiB, 256MiB, 4MB or 4096")
    number = float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
    if number < 1:
        raise ValueError(f"size must be at least one byte, got '{value}'")
    return int(round(number))


def parse_test_size(value: str) -> int:
    """Bytes from an nccl-tests -b/-e argument: a bare K, M, G or T suffix is a power of 1024 there (its
    ``-e 8G`` is 8,589,934,592 bytes); anything else as ``parse_size``."""
    match = _NUMBER.match(value) if isinstance(value, str) else None
    if match and match.group(2).lower() in ("k", "m", "g", "t"):
        return parse_size(f"{match.group(1)}{match.group(2).upper()}iB")
    return parse_size(value)


def parse_rate_gbps(value) -> float:
    """Gb/s from a number (already Gb/s) or a string such as ``"400G"``, ``"1.6T"``, ``"800Gbps"``."""
    if isinstance(value, bool):
        raise ValueError("expected a rate like 400G, got a boolean")
    if isinstance(value, (int, float)):
        rate = float(value)
    elif isinstance(value, str):
        match = _NUMBER.match(value)
        if not match or match.group(2).lower() not in _RATE_UNITS:
            raise ValueError(f"cannot read '{value}' as a rate; write it like 400G or 1.6T")
        rate = float(match.group(1)) * _RATE_UNITS[match.group(2).lower()]
    else:
        raise ValueError(f"expected a rate like 400G, got {type(value).__name__}")
    if not 0 < rate <= MAX_RATE_GBPS:
        raise ValueError(f"rate must be positive and at most 1 Pb/s, got {value}")
    return rate


def format_bytes(size: int) -> str:
    """Short binary form for reports: 1073741824 -> '1GiB', 1500 -> '1500B'."""
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size}B"
