"""topoplan's own columnar topology JSON (``topoplan build -o fabric.json``, format ``topoplan-topology-1``)
read back: every node and link array checked (lengths, vocabularies, ranges), every problem listed as
``FILE:LINE: key.path: message``. The stored layout is not trusted: the ``imported`` family infers it
again from the arrays, as it does for any imported fabric.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from ..errors import Problem, SpecError
from ..topology import GROUPS, LINK_TIERS, MEDIA, NODE_KINDS

FORMAT = "topoplan-topology-1"
NODE_COLUMNS = ("kind", "tier", "model") + GROUPS
LINK_COLUMNS = ("src", "dst", "capacity_gbps", "latency_ns", "medium", "tier")


@dataclass
class Columnar:
    """The arrays of a topology JSON: node columns (codes as in ``topology.py``) and one row per link."""

    file: str
    name: str
    kind: np.ndarray
    tier: np.ndarray
    model: np.ndarray       # index into models, -1 for none
    models: tuple
    groups: dict            # group name -> array
    src: np.ndarray
    dst: np.ndarray
    capacity_gbps: np.ndarray
    latency_ns: np.ndarray
    medium: np.ndarray
    link_tier: np.ndarray


def looks_like_json(head: bytes) -> bool:
    return head.lstrip()[:1] == b"{"


def parse(text: str, file: str) -> Columnar:
    """Check and convert a topology JSON; ``SpecError`` with every problem found."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise SpecError([Problem(file, err.lineno, "", f"malformed JSON: {err.msg} (column {err.colno})",
                                 "is the file complete? topoplan build -o fabric.json writes it")]) from None
    problems: list[Problem] = []

    def bad(path: str, message: str, hint: str = "") -> None:
        if len(problems) < 50:
            problems.append(Problem(file, 1, path, message, hint))

    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise SpecError([Problem(file, 1, "format", f"not a topoplan topology (format '{FORMAT}' expected)",
                                 "write one with topoplan build SPEC -o fabric.json, or give ibnetdiscover output")])
    nodes, links = data.get("nodes"), data.get("links")
    if not isinstance(nodes, dict) or not isinstance(links, dict):
        raise SpecError([Problem(file, 1, "nodes" if not isinstance(nodes, dict) else "links",
                                 "missing or not a mapping of columns", "the file may be truncated")])
    columns = {}
    for section, names, table in (("nodes", NODE_COLUMNS, nodes), ("links", LINK_COLUMNS, links)):
        for name in names:
            value = table.get(name)
            if not isinstance(value, list):
                bad(f"{section}.{name}", "missing or not a list")
                continue
            columns[(section, name)] = value
    if problems:
        raise SpecError(problems)
    n = len(columns[("nodes", "kind")])
    m = len(columns[("links", "src")])
    for (section, name), value in columns.items():
        if len(value) != (n if section == "nodes" else m):
            bad(f"{section}.{name}", f"{len(value):,} rows, but {section}.{'kind' if section == 'nodes' else 'src'} "
                f"has {n if section == 'nodes' else m:,}", "the file may be truncated or edited by hand")
    if problems:
        raise SpecError(problems)
    kind = _codes(columns[("nodes", "kind")], NODE_KINDS, "nodes.kind", bad)
    medium = _codes(columns[("links", "medium")], MEDIA, "links.medium", bad)
    link_tier = _codes(columns[("links", "tier")], LINK_TIERS, "links.tier", bad)
    models_list = columns[("nodes", "model")]
    if any(x is not None and not isinstance(x, str) for x in models_list):
        bad("nodes.model", "model ids must be strings or null")
    models = tuple(sorted({x for x in models_list if isinstance(x, str)}))
    index = {mid: i for i, mid in enumerate(models)}
    model = np.asarray([index.get(x, -1) if isinstance(x, str) else -1 for x in models_list], np.int16)
    ints = {name: _integers(columns[("nodes", name)], f"nodes.{name}", bad, -1) for name in ("tier",) + GROUPS}
    src = _integers(columns[("links", "src")], "links.src", bad, 0, n - 1)
    dst = _integers(columns[("links", "dst")], "links.dst", bad, 0, n - 1)
    capacity = _numbers(columns[("links", "capacity_gbps")], "links.capacity_gbps", bad, positive=True)
    latency = _numbers(columns[("links", "latency_ns")], "links.latency_ns", bad, positive=False)
    if not problems and (src == dst).any():
        bad(f"links.src[{int(np.flatnonzero(src == dst)[0])}]", "a link from a node to itself")
    if problems:
        raise SpecError(problems)
    return Columnar(file, str(data.get("name", "")), kind, ints["tier"].astype(np.int8), model, models,
                    {g: ints[g].astype(np.int32) for g in GROUPS}, src, dst, capacity, latency, medium, link_tier)


def _codes(values: list, vocabulary: tuple, path: str, bad) -> np.ndarray:
    index = {name: i for i, name in enumerate(vocabulary)}
    out = np.zeros(len(values), np.int8)
    for i, value in enumerate(values):
        code = index.get(value) if isinstance(value, str) else None
        if code is None:
            bad(f"{path}[{i}]", f"unknown value {value!r}", "one of: " + ", ".join(vocabulary))
            return out
        out[i] = code
    return out


def _integers(values: list, path: str, bad, low: int, high: int | None = None) -> np.ndarray:
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        at = next(i for i, v in enumerate(values) if not isinstance(v, int) or isinstance(v, bool))
        bad(f"{path}[{at}]", f"not an integer: {values[at]!r}")
        return np.zeros(len(values), np.int64)
    out = np.asarray(values, np.int64)
    wrong = (out < low) | ((out > high) if high is not None else False)
    if wrong.any():
        at = int(np.flatnonzero(wrong)[0])
        bad(f"{path}[{at}]", f"{values[at]} is out of range" + (f" (0 to {high})" if high is not None else ""))
    return out


def _numbers(values: list, path: str, bad, positive: bool) -> np.ndarray:
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        at = next(i for i, v in enumerate(values) if not isinstance(v, (int, float)) or isinstance(v, bool))
        bad(f"{path}[{at}]", f"not a number: {values[at]!r}")
        return np.ones(len(values))
    out = np.asarray(values, float)
    wrong = ~np.isfinite(out) | ((out <= 0) if positive else (out < 0))
    if wrong.any():
        at = int(np.flatnonzero(wrong)[0])
        bad(f"{path}[{at}]", f"{values[at]} is not {'positive' if positive else 'a non-negative number'}")
    return out
