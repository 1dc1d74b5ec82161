"""A collective swept over sizes as nccl-tests runs it, and predictions held against real logs.

``sweep(design, catalog, op, group, sizes, algorithm)`` routes each candidate algorithm once (at the
largest size: every demand is proportional to the size) and returns one ``SweepRow`` per size with the
tuner's choice, in nccl-tests units. ``against_log(result, log)`` predicts at the log's own sizes and
puts measured beside predicted. Nothing here prints.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from .catalog import Catalog
from .errors import Problem, SpecError
from .flow.algorithms import FOR_OP, applicable, plan_collective
from .flow.metrics import CollectiveResult, evaluate_collective, timing_for
from .nccltests import BINARIES, NcclLog
from .spec import Collective, Design

TYPE_BYTES = 4  # nccl-tests' default type, float
MAX_SIZES = 64
# nccl-tests' names of topoplan's ops (all_reduce, ...), from the one table of binaries
TEST_NAMES = {binary.removesuffix("_perf"): op for binary, op in BINARIES.items()}
REDOP = {"allreduce": "sum", "reducescatter": "sum", "reduce": "sum", "sendrecv": "sum"}
ROOTED = ("broadcast", "reduce")
ERROR_FROM_BYTES = 2**20   # the summary's errors cover sizes from 1 MiB up


@dataclass(frozen=True)
class SweepRow:
    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int
    time_us: float | None
    algbw_GBps: float | None
    busbw_GBps: float | None
    algorithm: str
    protocol: str
    measured_busbw_GBps: float | None = None
    measured_line: int = 0

    @property
    def error(self) -> float | None:
        """(predicted - measured) / measured busbw."""
        measured = self.measured_busbw_GBps
        if measured is None or self.busbw_GBps is None or not math.isfinite(measured) or measured <= 0:
            return None
        return (self.busbw_GBps - self.measured_busbw_GBps) / self.measured_busbw_GBps


@dataclass
class Sweep:
    design: str
    op: str
    group: str
    group_size: int
    groups: int
    servers: int
    engine: str
    rows: list = field(default_factory=list)
    log: str = ""

    def summary(self, from_bytes: int = ERROR_FROM_BYTES) -> dict | None:
        """Median and worst |error| over sizes >= ``from_bytes`` (None without a log)."""
        errors = [abs(r.error) for r in self.rows if r.error is not None and r.size_bytes >= from_bytes]
        if not errors:
            return None
        return {"from_bytes": from_bytes, "sizes": len(errors), "median_abs_error": statistics.median(errors),
                "worst_abs_error": max(errors)}

    def to_json(self) -> dict:
        def num(x):
            return None if x is None or not math.isfinite(x) else float(f"{x:.6g}")

        rows = []
        for r in self.rows:
            row = {"size_bytes": r.size_bytes, "count": r.count, "type": r.dtype, "redop": r.redop, "root": r.root,
                   "time_us": num(r.time_us), "algbw_GBps": num(r.algbw_GBps), "busbw_GBps": num(r.busbw_GBps),
                   "algorithm": r.algorithm, "protocol": r.protocol}
            if self.log:
                row.update({"measured_busbw_GBps": num(r.measured_busbw_GBps), "error": num(r.error),
                            "log_line": r.measured_line})
            rows.append(row)
        summary = self.summary()
        return {"design": self.design, "op": self.op, "group": self.group, "group_size": self.group_size,
                "groups": self.groups, "servers_per_group": self.servers, "engine": self.engine, "log": self.log,
                "rows": rows, "summary": None if summary is None else {k: num(v) if isinstance(v, float) else v
                                                                     for k, v in summary.items()}}


def op_name(text: str) -> str | None:
    """topoplan's op for ``all_reduce``, ``all_reduce_perf`` or ``allreduce``."""
    key = text.lower().removesuffix("_perf")
    return TEST_NAMES.get(key) or (key if key in FOR_OP else None)


def sizes_from(begin: int, end: int, factor: int) -> list[int]:
    """nccl-tests' -b/-e/-f sizes."""
    if begin < 1 or end < begin:
        raise SpecError([Problem("-b/-e", 0, "", f"sizes from {begin:,} to {end:,} bytes are not a range",
                                 "give -b no larger than -e, both at least 1 byte")])
    if factor < 2:
        raise SpecError([Problem("-f", 0, "", f"step factor {factor} never grows the size", "use -f 2 or more")])
    sizes = [begin]
    while sizes[-1] * factor <= end and len(sizes) <= MAX_SIZES:
        sizes.append(sizes[-1] * factor)
    if len(sizes) > MAX_SIZES:
        raise SpecError([Problem("-b/-e/-f", 0, "", f"more than {MAX_SIZES} sizes", "use a larger -f or a narrower range")])
    return sizes


def _count(op: str, size: int, ranks: int) -> int:
    if op in ("allgather", "reducescatter", "alltoall"):
        return size // TYPE_BYTES // ranks
    return size // TYPE_BYTES


def evaluate_sweep(design: Design, catalog: Catalog, op: str, group: str, largest: int, algorithm: str = "auto",
                   topology=None) -> CollectiveResult:
    from .generators import generate

    topology = topology if topology is not None else generate(design, catalog)
    collective = Collective("sweep", op, group, int(largest), algorithm)
    plans = [plan_collective(topology, design, collective, a) for a in applicable(topology, design, collective)]
    routing = design.routing
    return evaluate_collective(topology, plans, timing_for(design, catalog, topology=topology), routing.engine, routing.seeds,
                               routing.qps)


def sweep(design: Design, catalog: Catalog, op: str, group: str, sizes: list, algorithm: str = "auto",
          topology=None, measured: dict | None = None, log: str = "") -> Sweep:
    """Predictions at ``sizes`` (and, when ``measured`` maps size -> (busbw, line), the measurement)."""
    result = evaluate_sweep(design, catalog, op, group, max(sizes), algorithm, topology)
    plan = result.plan
    out = Sweep(design.name, op, group, plan.group_size, plan.groups, plan.servers, result.engine, log=log)
    measured = measured or {}
    for size in sizes:
        choice, protocol, time_s = result.at(size)
        algbw = None if not time_s else size / time_s / 1e9
        busbw = None if algbw is None else algbw * plan.busbw_factor
        busbw_measured, line = measured.get(size, (None, 0))
        out.rows.append(SweepRow(size, _count(op, size, plan.group_size), "float", REDOP.get(op, "none"),
                                 0 if op in ROOTED else -1, None if time_s is None else time_s * 1e6, algbw, busbw,
                                 choice.algorithm.name, protocol, busbw_measured, line))
    return out


def against_log(design: Design, catalog: Catalog, op: str, group: str, log: NcclLog, algorithm: str = "auto",
                topology=None) -> Sweep:
    """Predict at every size the log measured (sizes 0 skipped), measured busbw beside (out-of-place)."""
    if log.op is not None and log.op != op:
        raise SpecError([Problem(log.path, 0, "", f"the log measured {log.op}, not {op}",
                                 f"run the sweep with --op {log.op}, or pass the {op} log")])
    measured = {r.size_bytes: (r.busbw_GBps, r.line) for r in log.rows if r.size_bytes > 0}
    if not measured:
        raise SpecError([Problem(log.path, 0, "", "the log has no row with a size above 0")])
    return sweep(design, catalog, op, group, sorted(measured), algorithm, topology, measured, log.path)


@dataclass(frozen=True)
class Fit:
    """Calibration of one server against one log: what to add per step and the bandwidth share reached."""

    server: str
    step_class: str                 # "network" or "intra": which step latency the log can tell apart
    network_step_extra_us: float
    intra_step_extra_us: float
    bandwidth_efficiency: float
    before: dict                    # summaries (from 1 MiB) before and after
    after: dict

    def override(self, catalog: Catalog, log: str) -> dict:
        """The catalog override file's data: the whole server entry with the fitted fields."""
        entry = {k: v for k, v in dataclasses.asdict(catalog.servers[self.server]).items() if v is not None}
        entry.update(network_step_extra_us=round(self.network_step_extra_us, 3),
                     intra_step_extra_us=round(self.intra_step_extra_us, 3),
                     bandwidth_efficiency=round(self.bandwidth_efficiency, 4))
        entry["gpu_nics"] = list(entry["gpu_nics"])
        entry["source"] = (f"{entry['source']}; calibrated by topoplan nccl --fit to {Path(log).name}: median "
                           f"busbw error {self.before['median_abs_error']:.1%} -> {self.after['median_abs_error']:.1%} "
                           "from 1 MiB")
        return {"servers": [entry]}


def fit_to_log(design: Design, catalog: Catalog, op: str, group: str, log: NcclLog, algorithm: str = "auto",
               topology=None) -> Fit:
    """Least squares (non-negative, relative to each measured time) for one extra latency per step and one
    bandwidth efficiency, holding the tuner's choice at each size: ``measured - predicted = extra x steps +
    (1 / efficiency - 1) x bandwidth time``. Multi-node logs fit the network step, single-node logs the
    intra-node step. A model already slower than the log fits nothing (zeros, efficiency unchanged)."""
    import numpy as np
    from scipy.optimize import nnls

    from .generators import generate

    topology = topology if topology is not None else generate(design, catalog)
    before = against_log(design, catalog, op, group, log, algorithm, topology)
    result = evaluate_sweep(design, catalog, op, group, max(r.size_bytes for r in before.rows), algorithm, topology)
    network = result.plan.servers > 1
    rows, rhs = [], []
    for row in before.rows:
        measured = next(r.time_us for r in log.rows if r.size_bytes == row.size_bytes) * 1e-6
        choice, protocol, predicted = result.at(row.size_bytes)
        if predicted is None:
            continue
        intra, inter = choice.steps()
        steps = inter if network else intra
        rows.append([steps * 1e-6 / measured, choice.bandwidth_s(protocol, row.size_bytes) / measured])
        rhs.append((measured - predicted) / measured)
    (extra_us, slowdown), _ = nnls(np.array(rows), np.array(rhs))
    extra_us, slowdown = float(extra_us), float(slowdown)
    server = catalog.servers[design.cluster.server]
    fitted = dataclasses.replace(
        server, bandwidth_efficiency=server.bandwidth_efficiency / (1.0 + slowdown),
        network_step_extra_us=server.network_step_extra_us + (extra_us if network else 0.0),
        intra_step_extra_us=server.intra_step_extra_us + (0.0 if network else extra_us))
    calibrated = dataclasses.replace(catalog, servers={**catalog.servers, server.id: fitted})
    after = against_log(design, calibrated, op, group, log, algorithm, topology)
    return Fit(server.id, "network" if network else "intra", fitted.network_step_extra_us,
               fitted.intra_step_extra_us, fitted.bandwidth_efficiency, before.summary(), after.summary())
