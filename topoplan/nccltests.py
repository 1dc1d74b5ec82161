"""nccl-tests output in: the text tables of ``*_perf`` binaries and their JSON files (``-J``).

``read_log(path)`` returns an ``NcclLog``: the collective it ran (from the binary name, else from the
ratio of busbw to algbw), the ranks and hosts (from the ``#  Rank`` lines), and one ``LogRow`` per size.
Launcher prefixes (``0: ``, ``[1,0]<stdout>:``) and interleaved ``NCCL INFO`` lines are skipped. A log
that is not one, or is cut short, raises ``SpecError`` pointing at the line (``FILE:LINE``).

Format reference: NVIDIA/nccl-tests ``src/util.cu`` and ``src/common.cu`` (see
``../shared/fixtures/nccl-tests/README.md``): a data row is size, count, type, redop, root (absent in old
builds), then time / algbw / busbw / #wrong out-of-place and again in-place.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field

from .errors import Problem, SpecError

MAX_LOG_BYTES = 64 * 2**20  # nccl-tests logs are kilobytes; refuse anything far larger before reading it

# binary name -> topoplan op
BINARIES = {"all_reduce_perf": "allreduce", "all_gather_perf": "allgather", "reduce_scatter_perf": "reducescatter",
            "alltoall_perf": "alltoall", "broadcast_perf": "broadcast", "reduce_perf": "reduce",
            "sendrecv_perf": "sendrecv"}
_PREFIX = re.compile(r"^(?:\d+:\s|\[\d+,\d+\]<std(?:out|err)>:)")
_RANK = re.compile(r"#\s+Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s*(.*)$")
_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"


@dataclass(frozen=True)
class LogRow:
    size_bytes: int
    count: int
    dtype: str
    redop: str
    time_us: float            # out-of-place
    algbw_GBps: float
    busbw_GBps: float
    in_place_time_us: float | None
    in_place_busbw_GBps: float | None
    line: int


@dataclass
class NcclLog:
    path: str
    op: str | None                       # None when neither the binary nor the figures say
    ranks: int | None
    hosts: int | None
    gpu: str
    rows: list = field(default_factory=list)


def _fail(path: str, line: int, message: str, hint: str = "") -> SpecError:
    return SpecError([Problem(path, line, "", message, hint)])


def _float(text: str) -> float:
    if text in ("N/A", "nan", "-nan", "inf"):
        return math.nan
    return float(text)


def _data_row(fields: list[str], path: str, number: int, with_root: bool, half: int) -> LogRow:
    """size count type redop [root], then ``half`` columns out-of-place (time algbw busbw #wrong, plus
    i_min i_max i_p99 i_cv% under -I 1) and as many in-place."""
    base = 5 if with_root else 4
    if len(fields) < base + half:
        raise _fail(path, number, f"a result row with {len(fields)} fields, fewer than the {base + 2 * half} "
                    "the table header announces", "the log looks cut short; rerun or paste the whole table")
    try:
        size, count = int(fields[0]), int(fields[1])
        time_us, algbw, busbw = _float(fields[base]), _float(fields[base + 1]), _float(fields[base + 2])
        in_place = fields[base + half: base + half + 3]
        ip_time = _float(in_place[0]) if len(in_place) == 3 else None
        ip_busbw = _float(in_place[2]) if len(in_place) == 3 else None
    except ValueError:
        raise _fail(path, number, "a result row whose numbers do not parse",
                    "expected: size count type redop root time algbw busbw #wrong (out-of-place, then in-place)") \
            from None
    if not time_us > 0 or not math.isfinite(time_us):
        raise _fail(path, number, "a result row whose time is not a positive number")
    return LogRow(size, count, fields[2], fields[3], time_us, algbw, busbw, ip_time, ip_busbw, number)


def _infer_op(rows: list, ranks: int | None) -> str | None:
    """From busbw / algbw: 2(n-1)/n is AllReduce, (n-1)/n the gathers, 1 the rooted ones (ambiguous)."""
    if not ranks or ranks < 2:
        return None
    ratios = [r.busbw_GBps / r.algbw_GBps for r in rows if r.algbw_GBps >= 1.0]
    if not ratios:
        return None
    ratio = sorted(ratios)[len(ratios) // 2]
    if abs(ratio - 2 * (ranks - 1) / ranks) < 0.02:
        return "allreduce"
    return None


def read_log(path: str) -> NcclLog:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_LOG_BYTES + 1)   # bounded: /dev/zero or a huge file is never read whole
    except OSError as err:
        raise _fail(path, 0, f"cannot read the log: {err.strerror or err}") from None
    if len(data) > MAX_LOG_BYTES:
        raise _fail(path, 0, "more bytes than an nccl-tests log holds", "pass the log of one *_perf run")
    text = data.decode("utf-8", errors="replace")
    if text.lstrip().startswith("{"):
        return _read_json(path, text)
    op = None
    ranks: dict[int, str] = {}
    gpu = ""
    rows: list[LogRow] = []
    in_table, with_root, half = False, True, 4
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _PREFIX.sub("", raw).rstrip()
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            if "Collective test starting:" in stripped:
                binary = stripped.rsplit(":", 1)[1].strip().split("/")[-1]
                op = BINARIES.get(binary, op)
            match = _RANK.search(stripped)
            if match:
                ranks[int(match.group(1))] = match.group(2)
                gpu = gpu or match.group(3).strip()
            words = stripped.lstrip("#").split()
            if words[:3] == ["size", "count", "type"]:
                in_table, with_root = True, "root" in words
                half = 8 if "i_min" in words else 4
            continue
        fields = stripped.split()
        if not fields[0].isdigit() or (not in_table and len(fields) < 12):
            continue  # NCCL INFO / WARN lines, launcher chatter, anything before the table
        rows.append(_data_row(fields, path, number, with_root, half))
    if not rows:
        raise _fail(path, 0, "no nccl-tests result rows found",
                    "pass the text output of an nccl-tests binary such as all_reduce_perf")
    rank_count = max(ranks) + 1 if ranks else None
    hosts = len(set(ranks.values())) if ranks else None
    return NcclLog(path, op or _infer_op(rows, rank_count), rank_count, hosts, gpu, rows)


def _read_json(path: str, text: str) -> NcclLog:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise _fail(path, err.lineno, f"not valid JSON: {err.msg}") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise _fail(path, 1, "a JSON file without a 'results' list", "pass the file nccl-tests writes with -J")
    devices = (data.get("config") or {}).get("devices") or []
    ranks = len(devices) or None
    hosts = len({d.get("hostname") for d in devices if isinstance(d, dict)}) or None
    gpu = next((str(d.get("device_info", "")) for d in devices if isinstance(d, dict)), "")
    rows = []
    for index, item in enumerate(data["results"]):
        try:
            oop = item["out_of_place"]
            ip = item.get("in_place") or {}
            time_us = float(oop.get("time", oop.get("cpu_time")))
            rows.append(LogRow(int(item["size"]), int(item["count"]), str(item["type"]), str(item["redop"]),
                               time_us, float(oop["alg_bw"]), float(oop["bus_bw"]),
                               float(ip["time"]) if "time" in ip else None,
                               float(ip["bus_bw"]) if "bus_bw" in ip else None, 0))
        except (KeyError, TypeError, ValueError):
            raise _fail(path, 0, f"results[{index}] lacks size, count, type, redop or out_of_place figures") from None
    if not rows:
        raise _fail(path, 0, "no results in the JSON file")
    binary = next((a.split("/")[-1] for a in data.get("args") or [] if isinstance(a, str)
                   and a.split("/")[-1] in BINARIES), "")
    return NcclLog(path, BINARIES.get(binary) or _infer_op(rows, ranks), ranks, hosts, gpu, rows)
