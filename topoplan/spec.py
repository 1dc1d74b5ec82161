"""Design specs (schema version 1): load, validate, normalize and dump.

A spec is YAML a person writes and reviews in a pull request. ``load_design(file, catalog)`` checks it
all, collects every problem (``FILE:LINE: key.path: message (hint: ...)``), and returns a ``Design``:
plain frozen dataclasses the generators read. The schema below is also the source of the JSON Schema.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from . import yamlio
from .catalog import MODEL_FIELDS, Catalog
from .errors import InfeasibleDesign, SpecError, did_you_mean
from .schema import (MISSING, Bool, Context, Dict, Enum, Int, Key, List, Map, Num, Obj, OneOf, Parsed, Str,
                     has_missing)
from .flow import ENGINES
from .flow import algorithms as _algorithms
from .metrics import Metric, target_metrics
from .reliability import RATE_SETS
from .topology import SWITCH_TIERS
from .units import parse_size
from . import training as _training
from .compute import has_curves

SPEC_VERSION = 1
# Large enough for any cluster planned today (4M GPUs), small enough that a typo like 10**9 is refused
# before arrays of that size are allocated.
MAX_GPUS = 4_194_304

TOPOLOGIES = ("fat-tree", "rail-optimized", "rail-only", "railx", "imported")
TIER_NAMES = SWITCH_TIERS  # one vocabulary: topology.py defines the tiers
REACH_CLASSES = ("in-rack", "in-row", "cross-row")
ROUTINGS = tuple(name for name, engine in ENGINES.items() if not engine.stands_in_for)  # what a user may ask for
PARALLEL_GROUPS = ("tp", "cp", "dp", "pp", "ep", "world")  # (node group ids are topology.GROUPS)
PARALLEL_DIMS = ("tp", "cp", "dp", "pp", "ep")
ORDER_DIMS = ("tp", "cp", "dp", "pp")
# collective ops and algorithms come from the one table of ``flow/algorithms.py``
OPS, ALGORITHMS, DEFAULT_ALGORITHM, ALGORITHMS_FOR = (_algorithms.OPS, _algorithms.NAMES, _algorithms.DEFAULT,
                                                      _algorithms.FOR_OP)

_ID = Str(kebab=True)
_RATIO = Num(minimum=1, doc="oversubscription, down:up; 1 is non-blocking")

COLLECTIVE = Obj({
    "name": Key(_ID, True),
    "op": Key(Enum(OPS, doc="collective operation"), True),
    "group": Key(Enum(PARALLEL_GROUPS, doc="which parallel group runs it"), True),
    "size": Key(Parsed(parse_size, {"type": ["string", "integer"], "pattern": r"^\s*[0-9.]+\s*[A-Za-z]*\s*$"},
                       doc="bytes in the nccl-tests convention for the op, e.g. 1GiB",
                       hint="KiB/MiB/GiB are powers of 1024, KB/MB/GB powers of 1000"), True),
    "algorithm": Key(Enum(ALGORITHMS), False),
    "seed": Key(Int(minimum=0, maximum=2**32 - 1, doc="op: permutation only: the seed of the random permutation "
                    "(numpy default_rng; default 0)"), False),
    "senders": Key(Int(minimum=1, doc="op: incast only: how many ranks send to rank 0 (ranks 1..senders; "
                       "default all the group's others)"), False),
}, doc="one collective of the training step")
# keys that only one op takes: key -> op
OP_ONLY_KEYS = {"seed": "permutation", "senders": "incast"}

# what a failure scenario may fail: switches by tier, network links by the tier at their upper end
# ("leaf-link": a NIC port's link), and whole units
FAILURE_ELEMENTS = ("switch", "leaf", "spine", "core", "link", "leaf-link", "spine-link", "core-link", "nic",
                    "server", "plane", "ocs")
MAX_FAILURE_SAMPLES = 10_000

SCENARIO = Obj({
    "name": Key(_ID, True),
    "fail": Key(Enum(FAILURE_ELEMENTS, doc="what fails: a switch (of a tier), a network link (of a tier), a "
                     "NIC, a server, a plane or an OCS"), True),
    "index": Key(OneOf((Int(minimum=0), List(Int(minimum=0))),
                       doc="explicit: which of them (0-based, in the order `topoplan build` lists them)"), False),
    "every": Key(Bool(doc="every single one of them, evaluated once per symmetry class"), False, False),
    "random": Key(Obj({
        "count": Key(Int(minimum=1, maximum=4096, doc="elements failed at once"), False, 1),
        "samples": Key(Int(minimum=1, maximum=MAX_FAILURE_SAMPLES, doc="random sets to evaluate"), False, 1),
        "seed": Key(Int(minimum=0, maximum=2**32 - 1), False, 0),
    }, doc="random sets of elements"), False),
}, doc="one failure scenario: give exactly one of index, every or random")


def _target_schema(m: Metric, per_collective: bool):
    """A target's value: a positive limit (a whole number where the metric counts); per collective, one
    limit for all or ``{name: limit}``."""
    one = Int(minimum=1) if m.integer_target else Num(exclusive_minimum=0)
    return OneOf((one, Dict(one))) if per_collective else one


def _target_order(item):
    """Design-wide targets first, then per-collective ones, minimums before maximums."""
    key, (_m, per_collective) = item
    return (per_collective, per_collective and key.startswith("max"))


_MODEL_KEYS = {k: Key(v.schema, False) for k, v in MODEL_FIELDS.items() if k not in ("id", "description", "source")}
MODEL = OneOf((Str(kebab=True, doc="a model id from catalogs/models.yaml"), Obj({
    "preset": Key(Str(kebab=True, doc="start from this catalog model; the other keys change its fields"), False),
    **_MODEL_KEYS,
}, doc="a model architecture: a catalog preset and changes to it, or every field")),
    doc="the model being trained (catalogs/models.yaml)")
OVERLAP = OneOf((Enum(tuple(_training.POLICIES), doc="overlap or communication-efficiency policy"), Obj({
    "policy": Key(Enum(tuple(_training.POLICIES)), True),
    "fraction": Key(Num(minimum=0, maximum=1, doc="tp-slicing: share of a layer's compute that can hide its "
                                                  "TP collectives"), False),
    "every": Key(Int(minimum=1, maximum=1_000_000, doc="local-updates (H) / co2 (tau): steps between "
                                                      "synchronisations"), False),
    "ratio": Key(Num(minimum=1, maximum=1e6, doc="compression: how many times fewer DP bytes"), False),
    "flops_per_element": Key(Num(minimum=0, maximum=1e6, doc="compression: encode + decode FLOPs per gradient "
                                                             "element"), False),
}, doc="a policy with its parameters")))
TRAINING = Obj({
    "global_batch": Key(Int(minimum=1, maximum=1 << 40, doc="sequences per step"), False),
    "global_batch_tokens": Key(Int(minimum=1, maximum=1 << 50, doc="tokens per step (a whole number of "
                                                                    "sequences)"), False),
    "micro_batch": Key(Int(minimum=1, maximum=1 << 20, doc="sequences per micro-batch"), False, 1),
    "sequence_parallel": Key(Bool(doc="Megatron sequence parallelism (TP all-reduces become RS + AG)"), False, True),
    "recompute": Key(Enum(_training.RECOMPUTE, doc="activation recomputation"), False, "selective"),
    "schedule": Key(Enum(_training.SCHEDULES, doc="pipeline schedule"), False, "1f1b"),
    "virtual_stages": Key(Int(minimum=1, maximum=1024, doc="model chunks per GPU (interleaved schedule)"), False, 1),
    "zero": Key(Int(minimum=0, maximum=3, doc="ZeRO stage: 1 shards optimizer state, 2 gradients too, 3 "
                                              "parameters too (FSDP)"), False, 1),
    "compute_dtype": Key(Enum(_training.DTYPES, doc="the tensor-core type the GEMMs run in"), False, "bf16"),
    "activation_bytes": Key(Enum((1, 2, 4)), False, 2),
    "gradient_bytes": Key(Enum((1, 2, 4), doc="bytes per gradient element kept and reduced (Megatron: fp32)"),
                          False, 4),
    "parameter_bytes": Key(Enum((1, 2, 4)), False, 2),
    "compute_efficiency": Key(Num(exclusive_minimum=0, maximum=1, doc="share of the dense peak compute runs at; "
                                                                      "default the GPU's measured matmul share"),
                              False),
    "compute_model": Key(Enum(_training.COMPUTE_MODELS, doc="per-op: each kernel timed from its size on the "
                              "GPU's efficiency curves; flat: all FLOPs at the measured matmul share; auto: "
                              "per-op where the GPU has curves"), False, "auto"),
    "flash_attention": Key(Bool(doc="attention as one fused FlashAttention kernel (false: score matrices in "
                                    "HBM, as Megatron-LM before 2023)"), False, True),
    "overlap": Key(List(OVERLAP), False),
    "tokens": Key(Num(exclusive_minimum=0, maximum=1e18, doc="tokens to train, for the time to train"), False),
}, doc="how the model is trained: batch, schedule, memory savings and overlap")
ECONOMICS = Obj({
    "life_years": Key(Num(exclusive_minimum=0, maximum=100, doc="years servers and network are paid off over"),
                      False, 4.0),
    "usd_per_kwh": Key(Num(minimum=0, maximum=100), False, 0.10),
    "pue": Key(Num(minimum=1, maximum=10, doc="facility power / IT power"), False, 1.3),
}, doc="what the cluster costs per hour, for the cost per token")

DESIGN_SCHEMA = Obj({
    "version": Key(Enum((SPEC_VERSION,), doc="spec schema version"), False, SPEC_VERSION),
    "name": Key(Str(kebab=True, doc="design name, kebab-case"), True),
    "description": Key(Str(), False, ""),
    "cluster": Key(Obj({
        "server": Key(Str(kebab=True, doc="server id from catalogs/servers.yaml"), True),
        "gpus": Key(Int(minimum=1, maximum=MAX_GPUS, max_hint="split the cluster into several designs"), False),
        "servers": Key(Int(minimum=1, maximum=MAX_GPUS, max_hint="split the cluster into several designs"), False),
        "expand_hosts": Key(Bool(), False, False),
    }, doc="what is being connected: give exactly one of gpus or servers"), True),
    "fabric": Key(Obj({
        "topology": Key(Enum(TOPOLOGIES, doc="fabric family; imported: read from fabric.file"), True),
        "file": Key(Str(doc="imported: ibnetdiscover output or topoplan JSON, relative to the spec's directory"),
                    False),
        "switch": Key(OneOf((Str(kebab=True), Map(TIER_NAMES, Str(kebab=True))),
                            doc="switch id for every tier, or one per tier {leaf: ..., spine: ...}"), False),
        "tiers": Key(Int(minimum=1, maximum=3, doc="switch tiers; default the fewest that fit"), False),
        "oversubscription": Key(OneOf((_RATIO, Map(TIER_NAMES[:2], _RATIO))), False, 1),
        "planes": Key(Int(minimum=1, maximum=8, doc="parallel fabric planes, one NIC port each"), False, 1),
        "scalable_unit": Key(Int(minimum=1, doc="servers per scalable unit"), False),
        "leaf_uplinks": Key(Int(minimum=1, doc="up ports per leaf; the rest point down (overrides the ratio)"),
                            False),
        "aggregation": Key(Enum(("any-to-any", "same-rail")), False, "any-to-any"),
        "link_gbps": Key(Map(("spine", "core"), Int(minimum=1, maximum=1_000_000, doc="Gb/s"),
                             doc="speed of the links up from the leaves (spine) and from the spines (core), a "
                                 "whole multiple of the tier below; default the NIC links' speed"), False),
        "optics": Key(Enum(("dsp", "linear"), doc="pluggable optics: retimed (dsp, default) or linear-drive (LPO); "
                                                   "switches with co-packaged optics need none"), False, "dsp"),
        "pod": Key(Obj({
            "servers": Key(Int(minimum=1, maximum=MAX_GPUS, doc="servers per pod"), True),
        }, doc="pods of this many servers under a core tier (fat-tree, rail-optimized); default as large as "
               "the spines' down ports allow"), False),
        "cabling": Key(Map(TIER_NAMES + ("ocs",), Enum(REACH_CLASSES)), False),
        "railx": Key(Obj({
            "columns": Key(Int(minimum=1, maximum=4096, doc="nodes per row; with rows, default the most "
                                                           "nearly square grid of the cluster's nodes"), False),
            "rows": Key(Int(minimum=1, maximum=4096, doc="nodes per column"), False),
            "ring_assignment": Key(Enum(("walecki", "naive")), False, "walecki"),
            "row_rails": Key(Int(minimum=0), False),
            "column_rails": Key(Int(minimum=0), False),
            "ocs": Key(Str(kebab=True, doc="optical circuit switch id from catalogs/ocs.yaml"), True),
        }, doc="RailX grid: nodes of the server's chips on columns x rows, rails as rings per row and column"),
            False),
    }), True),
    "workload": Key(Obj({
        "parallelism": Key(Map(PARALLEL_DIMS, Int(minimum=1)), False),
        "order": Key(List(Enum(ORDER_DIMS)), False),
        "collectives": Key(List(COLLECTIVE), False),
        "model": Key(MODEL, False),
        "training": Key(TRAINING, False),
    }), False),
    "economics": Key(ECONOMICS, False),
    "routing": Key(OneOf((Enum(ROUTINGS, doc="routing engine"), Obj({
        "engine": Key(Enum(ROUTINGS), True),
        "seeds": Key(Int(minimum=1, maximum=64, doc="ecmp-hash: hash seeds to sample"), False, 8),
        "qps": Key(Int(minimum=1, maximum=256, doc="ecmp-hash: queue pairs per flow"), False, 1),
    }))), False, "ecmp"),
    "failures": Key(Obj({
        "scenarios": Key(List(SCENARIO), False),
        "rates": Key(List(Enum(tuple(RATE_SETS), doc="published failure-rate set")), False, ["llama3"]),
        "checkpoint_s": Key(Num(exclusive_minimum=0, maximum=1e7, doc="seconds to write a checkpoint"), False, 100),
        "restart_s": Key(Num(minimum=0, maximum=1e7, doc="seconds from an interruption to training again"), False,
                         600),
        "gpu_hour_usd": Key(Num(exclusive_minimum=0, maximum=1e6, doc="what a GPU-hour costs, for lost dollars"),
                            False),
    }, doc="what `topoplan resilience` evaluates: failure scenarios (default: every single switch and every "
           "single link), the failure rates and the checkpoint costs"), False),
    "targets": Key(Obj({key: Key(_target_schema(m, per_collective), False)
                        for key, (m, per_collective) in sorted(target_metrics().items(), key=_target_order)},
                       doc="limits checked by `topoplan check`"), False),
}, doc="topoplan design spec")

DEFAULT_CABLING = {"leaf": "in-row", "spine": "in-row", "core": "cross-row", "ocs": "in-row"}


@dataclass(frozen=True)
class Cluster:
    server: str
    gpus: int
    servers: int
    expand_hosts: bool = False


@dataclass(frozen=True)
class Fabric:
    topology: str
    switch: dict            # tier name -> switch id (all tiers filled)
    tiers: int | None       # None: the fewest that fit
    oversubscription: dict  # tier name -> ratio (leaf, spine)
    planes: int = 1
    scalable_unit: int | None = None
    leaf_uplinks: int | None = None
    aggregation: str = "any-to-any"
    cabling: dict = field(default_factory=lambda: dict(DEFAULT_CABLING))
    pod_servers: int | None = None  # servers per pod under the core (None: as many as the spines allow)
    link_gbps: dict = field(default_factory=dict)  # link tier (spine, core) -> Gb/s; missing: the tier below's
    optics: str = "dsp"  # pluggable transceivers: "dsp" (retimed) or "linear" (LPO)
    railx: dict | None = None
    file: str | None = None   # imported: the fabric file's path (resolved), and as the spec wrote it
    file_label: str = ""


@dataclass(frozen=True)
class Collective:
    name: str
    op: str
    group: str
    size_bytes: int
    algorithm: str
    seed: int = 0                # permutation: the random permutation's seed
    senders: int | None = None   # incast: ranks 1..senders send to rank 0 (None: all the group's others)


@dataclass(frozen=True)
class Workload:
    parallelism: dict       # dim -> degree, all of PARALLEL_DIMS present
    order: tuple            # innermost first
    collectives: tuple
    training: _training.Training | None = None   # the step model's input (workload.model given)


@dataclass(frozen=True)
class Routing:
    engine: str = "ecmp"
    seeds: int = 8      # ecmp-hash only
    qps: int = 1        # ecmp-hash only


@dataclass(frozen=True)
class Scenario:
    """A ``failures.scenarios`` entry: ``mode`` is ``index`` (explicit ``indices``), ``random`` (``samples``
    sets of ``count`` elements from ``seed``) or ``every`` (each single element, by symmetry class)."""

    name: str
    element: str
    mode: str
    indices: tuple = ()
    count: int = 1
    samples: int = 1
    seed: int = 0


@dataclass(frozen=True)
class FailurePolicy:
    """The spec's ``failures`` section (defaults when it is absent; no scenarios: the default ones)."""

    scenarios: tuple = ()
    rates: tuple = ("llama3",)
    checkpoint_s: float = 100.0
    restart_s: float = 600.0
    gpu_hour_usd: float | None = None


@dataclass(frozen=True)
class Design:
    name: str
    description: str
    cluster: Cluster
    fabric: Fabric
    workload: Workload
    routing: Routing
    targets: dict
    failures: FailurePolicy = FailurePolicy()
    file: str = "<spec>"
    lines: yamlio.LineMap = field(default_factory=yamlio.LineMap, compare=False, repr=False)

    @property
    def gpus(self) -> int:
        return self.cluster.gpus

    def infeasible(self, path: str, message: str, hint: str = "") -> InfeasibleDesign:
        """An ``InfeasibleDesign`` located at ``path`` (dotted) in this spec's file."""
        parts = tuple(int(p) if p.isdigit() else p for p in path.replace("[", ".").replace("]", "").split("."))
        return InfeasibleDesign(path, message, hint, file=self.file, line=self.lines.line_of(parts))


def load_design(file: str, catalog: Catalog) -> Design:
    """Read, validate and normalize a design spec file."""
    data, lines = yamlio.read(file)
    return design_from_data(data, catalog, str(file), lines)


def design_from_data(data, catalog: Catalog, file: str = "<spec>", lines=None) -> Design:
    """Validate already-parsed spec data; raise ``SpecError`` with every problem found."""
    lines = lines if lines is not None else yamlio.LineMap()
    ctx = Context(file, lines)
    if data is None:
        ctx.error((), "the spec is empty", "start from one of the files in designs/")
        raise SpecError(ctx.problems)
    if isinstance(data, dict) and "sites" in data:
        ctx.error(("sites",), "this command reads one-site designs, and this spec has sites",
                  "validate, report, check, compare and build read multi-site specs; run the others on one "
                  "site's own design")
        raise SpecError(ctx.problems)
    checked = DESIGN_SCHEMA.check(data, (), ctx)
    if checked is MISSING:
        raise SpecError(ctx.problems)
    design = _cross_check(checked, catalog, ctx)
    if ctx.problems:
        raise SpecError(ctx.problems)
    return Design(**design, file=file, lines=lines)


def _cross_check(c: dict, catalog: Catalog, ctx: Context) -> dict:
    """Checks that span several keys or need the catalog; returns Design keyword arguments."""
    cluster, fabric = c["cluster"], c["fabric"]
    server = None
    if cluster is not MISSING:
        sid = cluster["server"]
        if sid is not MISSING:
            server = catalog.servers.get(sid)
            if server is None:
                ctx.error(("cluster", "server"), f"unknown server '{sid}'", did_you_mean(sid, catalog.servers))
        gpus, servers = cluster["gpus"], cluster["servers"]
        if fabric is not MISSING and fabric["topology"] == "imported" and server is not None:
            gpus, servers = cluster["gpus"], cluster["servers"] = _imported_size(cluster, fabric, server, ctx)
        imported = fabric is not MISSING and fabric["topology"] == "imported"
        if gpus is None and servers is None and not imported:   # an imported fabric's size comes from its file
            ctx.error(("cluster",), "give the cluster size as gpus or as servers",
                      "add 'gpus: 1024' or 'servers: 128' under cluster")
        elif gpus is not None and servers is not None:
            ctx.error(("cluster", "servers"), "give gpus or servers, not both",
                      "remove one; the other follows from the server's GPU count")
        elif server is not None and gpus not in (None, MISSING) and gpus % server.gpus:
            ctx.error(("cluster", "gpus"), f"{gpus:,} GPUs is not a whole number of {sid} servers "
                      f"({server.gpus} GPUs each)", f"use {math.ceil(gpus / server.gpus) * server.gpus:,} or "
                      f"{max(1, gpus // server.gpus) * server.gpus:,}")
        if server is not None and servers not in (None, MISSING) and servers * server.gpus > MAX_GPUS:
            ctx.error(("cluster", "servers"), f"{servers:,} servers is {servers * server.gpus:,} GPUs, more "
                      f"than the {MAX_GPUS:,} topoplan can model", "split the cluster into several designs")

    switch_ids: dict = {}
    if fabric is not MISSING:
        switch = fabric["switch"]
        if switch is None and fabric["topology"] not in (MISSING, "railx", "imported"):
            ctx.error(("fabric",), "missing required key 'switch'", "name a switch id, e.g. switch: nvidia-qm9700")
        elif isinstance(switch, str):
            switch_ids = {tier: switch for tier in TIER_NAMES}
            if switch not in catalog.switches:
                ctx.error(("fabric", "switch"), f"unknown switch '{switch}'", did_you_mean(switch, catalog.switches))
        elif isinstance(switch, dict):
            for tier, sid in switch.items():
                if sid not in catalog.switches:
                    ctx.error(("fabric", "switch", tier), f"unknown switch '{sid}'",
                              did_you_mean(sid, catalog.switches))
            if "leaf" not in switch:  # an empty mapping too
                ctx.error(("fabric", "switch"), "per-tier switches must name the leaf switch",
                          "add 'leaf: <switch id>'")
            last = None
            for tier in TIER_NAMES:
                last = switch[tier] if tier in switch else last
                if last is not None:
                    switch_ids[tier] = last
        railx = fabric["railx"]
        if fabric["topology"] == "railx" and railx is None:
            ctx.error(("fabric",), "a railx fabric needs a 'railx' block (the ocs; columns and rows if not the "
                      "squarest grid)", "add railx: {ocs: calient-s320} or railx: {columns: 16, rows: 16, "
                      "ocs: calient-s320}")
        elif fabric["topology"] != "railx" and railx is not None:
            ctx.error(("fabric", "railx"), f"the railx block applies to topology: railx, not {fabric['topology']}",
                      "remove it or set topology: railx")
        elif isinstance(railx, dict) and railx.get("ocs") not in (None, MISSING) and railx["ocs"] not in catalog.ocs:
            ctx.error(("fabric", "railx", "ocs"), f"unknown optical circuit switch '{railx['ocs']}'",
                      did_you_mean(railx["ocs"], catalog.ocs))
        if fabric["file"] and fabric["topology"] not in (MISSING, "imported"):
            ctx.error(("fabric", "file"), f"a fabric file applies to topology: imported, not {fabric['topology']}",
                      "remove it or set topology: imported")
        if fabric["link_gbps"] and fabric["topology"] == "railx":
            ctx.error(("fabric", "link_gbps"), "link speeds per tier apply to switched fabrics; RailX circuits run "
                      "at the chips' port speed", "remove it")
        if fabric["pod"] is not None and fabric["topology"] not in ("fat-tree", "rail-optimized"):
            ctx.error(("fabric", "pod"), f"pods apply to fat-tree and rail-optimized fabrics, not {fabric['topology']}",
                      "remove it" + (" (a rail-only fabric's pods are its rails)" if fabric["topology"] == "rail-only"
                                     else ""))

    if ctx.problems or has_missing(c):
        return {}

    gpus = cluster["gpus"] if cluster["gpus"] is not None else cluster["servers"] * server.gpus
    servers = gpus // server.gpus
    over = fabric["oversubscription"]
    over = {"leaf": float(over), "spine": 1.0} if not isinstance(over, dict) else \
        {"leaf": float(over.get("leaf", 1)), "spine": float(over.get("spine", 1))}
    cabling = dict(DEFAULT_CABLING)
    cabling.update(fabric["cabling"] or {})
    fab = Fabric(topology=fabric["topology"], switch=switch_ids, tiers=fabric["tiers"], oversubscription=over,
                 planes=fabric["planes"], scalable_unit=fabric["scalable_unit"], leaf_uplinks=fabric["leaf_uplinks"],
                 aggregation=fabric["aggregation"], cabling=cabling, railx=fabric["railx"],
                 pod_servers=(fabric["pod"] or {}).get("servers"), link_gbps=dict(fabric["link_gbps"] or {}),
                 optics=fabric["optics"], file=_fabric_path(fabric, ctx), file_label=fabric["file"] or "")
    workload = _workload(c["workload"] or {}, gpus, ctx, c["fabric"]["topology"])
    training = _training_of(c["workload"] or {}, c["economics"], workload, catalog, server, ctx)
    if training is not None:
        workload = Workload(workload.parallelism, workload.order, workload.collectives, training)
    targets = c["targets"] or {}
    names = {col.name for col in workload.collectives}
    for key in (k for k, (_m, per_collective) in target_metrics().items() if per_collective):
        value = targets.get(key)
        if isinstance(value, dict):
            for name in value:
                if name not in names:
                    ctx.error(("targets", key, name), f"no collective named '{name}' in workload.collectives",
                              did_you_mean(name, names) if names else "add the collective under workload")
    targets = {k: v for k, v in targets.items() if v is not None}
    for key in ("max_step_time_s", "min_mfu", "max_usd_per_mtok"):
        if key in targets and workload.training is None:
            ctx.error(("targets", key), f"{key} needs the training-step model", "add workload.model and "
                      "workload.training (see designs/megatron-530b-2240.yaml)")
    routing = Routing(c["routing"]) if isinstance(c["routing"], str) else Routing(**c["routing"])
    return dict(name=c["name"], description=c["description"], routing=routing, targets=targets,
                failures=_failures(c["failures"], ctx),
                cluster=Cluster(server=server.id, gpus=gpus, servers=servers, expand_hosts=cluster["expand_hosts"]),
                fabric=fab, workload=workload)


def _fabric_path(fabric: dict, ctx: Context) -> str | None:
    """``fabric.file`` resolved against the spec's directory (as given for a spec built in memory)."""
    import os

    if not fabric.get("file"):
        return None
    if ctx.file == "<spec>" or os.path.isabs(fabric["file"]):
        return fabric["file"]
    return os.path.join(os.path.dirname(os.path.abspath(ctx.file)), fabric["file"])


def _imported_size(cluster: dict, fabric: dict, server, ctx: Context) -> tuple:
    """(gpus, servers) of an imported fabric, from its file; problems for a missing, unreadable or
    mismatching file, and for fabric keys the file decides. Reads the file once (``generators.imported``)."""
    import os

    from .errors import TopoplanError
    from .generators.imported import read_fabric, server_count

    given = cluster["gpus"], cluster["servers"]
    for key in ("tiers", "scalable_unit", "leaf_uplinks", "pod", "railx", "link_gbps"):
        if fabric.get(key) not in (None, MISSING):
            ctx.error(("fabric", key), f"an imported fabric's {key} comes from its file", "remove it")
    name = fabric.get("file")
    if name in (None, MISSING):
        ctx.error(("fabric",), "an imported fabric needs 'file'", "add file: fabric.txt (ibnetdiscover output) or "
                  "file: fabric.json (topoplan build -o)")
        return given
    if not os.path.isabs(name) and os.path.normpath(name).split(os.sep)[0] == "..":
        ctx.error(("fabric", "file"), f"'{name}' climbs out of the spec's directory", "put the fabric file next to "
                  "the spec (or below it), or give an absolute path")
        return given
    try:
        servers = server_count(read_fabric(_fabric_path(fabric, ctx), name), server)
    except TopoplanError as err:
        ctx.problems.extend(err.problems)
        return given
    if given[1] is not None and given[1] != servers or given[0] is not None and given[0] != servers * server.gpus:
        ctx.error(("cluster",), f"the fabric file has {servers:,} servers ({servers * server.gpus:,} GPUs), not "
                  f"{given[1] if given[1] is not None else given[0]:,}", "remove the size: it comes from the file")
    return None, servers


def _workload(w: dict, gpus: int, ctx: Context, topology: str) -> Workload:
    given = w.get("parallelism") or {}
    degrees = {dim: given.get(dim, 1) for dim in PARALLEL_DIMS}
    if "dp" not in given:
        others = degrees["tp"] * degrees["cp"] * degrees["pp"]
        degrees["dp"] = gpus // others if gpus % others == 0 else 0
    product = degrees["tp"] * degrees["cp"] * degrees["dp"] * degrees["pp"]
    if product != gpus:
        shown = " x ".join(f"{d}={degrees[d]}" for d in ("tp", "cp", "dp", "pp") if d in given or d == "dp")
        ctx.error(("workload", "parallelism"), f"{shown} is {product:,} ranks, but the cluster has {gpus:,} GPUs",
                  "make tp x cp x dp x pp equal the GPU count (ep is carved out of dp)")
    elif degrees["dp"] % degrees["ep"]:
        ctx.error(("workload", "parallelism", "ep"), f"ep={degrees['ep']} does not divide dp={degrees['dp']}",
                  "expert-parallel groups are carved out of the data-parallel group")
    order = tuple(w.get("order") or ORDER_DIMS)
    if sorted(order) != sorted(ORDER_DIMS):
        ctx.error(("workload", "order"), f"order must list each of {', '.join(ORDER_DIMS)} exactly once",
                  "innermost first, e.g. [tp, cp, dp, pp]")
    collectives = []
    seen = set()
    for index, col in enumerate(w.get("collectives") or []):
        path = ("workload", "collectives", index)
        if col["name"] in seen:
            ctx.error(path + ("name",), f"duplicate collective name '{col['name']}'", "names must be unique")
        seen.add(col["name"])
        algorithm = col["algorithm"] or DEFAULT_ALGORITHM[col["op"]]
        if algorithm not in ALGORITHMS_FOR[col["op"]]:
            ctx.error(path + ("algorithm",), f"{col['op']} has no '{algorithm}' algorithm",
                      "use one of: " + ", ".join(ALGORITHMS_FOR[col["op"]]))
        elif algorithm != _algorithms.AUTO and _algorithms.BY_KEY[(col["op"], algorithm)].fabrics and \
                topology not in _algorithms.BY_KEY[(col["op"], algorithm)].fabrics:
            entry = _algorithms.BY_KEY[(col["op"], algorithm)]
            ctx.error(path + ("algorithm",), entry.fabric_error, entry.fabric_hint)
        size = degrees[col["group"]] if col["group"] != "world" else gpus
        if size < 2:
            ctx.error(path + ("group",), f"the {col['group']} group has a single rank, so {col['op']} moves nothing",
                      f"set workload.parallelism.{col['group']} above 1 or drop this collective")
        for key, op in OP_ONLY_KEYS.items():
            if col.get(key) is not None and col["op"] != op:
                ctx.error(path + (key,), f"{key} is a key of op: {op}, not of {col['op']}",
                          f"remove {key}, or use op: {op}")
        if col["op"] == "incast" and col.get("senders") is not None and size >= 2 and col["senders"] > size - 1:
            ctx.error(path + ("senders",), f"{col['senders']:,} senders, but the {col['group']} group has {size:,} "
                      f"ranks: at most {size - 1:,} others send to rank 0",
                      f"use 1 to {size - 1:,}, or leave senders out for all of them")
        collectives.append(Collective(col["name"], col["op"], col["group"], col["size"], algorithm,
                                      col.get("seed") or 0, col.get("senders")))
    return Workload(parallelism=degrees, order=order, collectives=tuple(collectives))


def _training_of(w: dict, economics: dict | None, workload: Workload, catalog: Catalog, server, ctx: Context):
    """``workload.model`` + ``workload.training`` + ``economics`` as a ``training.Training`` (None without a
    model)."""
    model, given = w.get("model"), w.get("training") or {}
    if model is None:
        if w.get("training") is not None:
            ctx.error(("workload", "training"), "training settings need a model", "add workload.model: llama3-70b "
                      "(or another id from catalogs/models.yaml)")
        return None
    path = ("workload", "model")
    if isinstance(model, str):
        model = {"preset": model}
    preset = model.get("preset")
    fields = {}
    if preset is not None:
        if preset not in catalog.models:
            ctx.error(path + (() if isinstance(w["model"], str) else ("preset",)), f"unknown model '{preset}'",
                      did_you_mean(preset, catalog.models))
            return None
        import dataclasses
        fields = dataclasses.asdict(catalog.models[preset])
    changes = {k: v for k, v in model.items() if k != "preset" and v is not None}
    if preset is None:
        missing = [k for k, key in MODEL_FIELDS.items() if key.required and k not in ("id", "description", "source")
                   and k not in changes]
        if missing:
            ctx.error(path, "a model without a preset needs " + ", ".join(missing),
                      "or start from a catalog model: preset: llama3-70b")
            return None
        fields = {"id": "custom", "description": "", "source": "the spec"}
    fields.update(changes)
    if changes and preset is not None:
        fields["id"] = f"{preset}-modified"
    from .catalog import ModelArch
    arch = ModelArch(**fields)
    problems = _training.model_problems(arch)
    for key, message, hint in problems:
        ctx.error(path + ((key,) if key in model else ()), message, hint)
    gpu = _training.gpu_of(catalog, server)
    if gpu is None:
        ctx.error(("cluster", "server"), f"no compute figures for the {server.id}'s GPU '{server.gpu}' in the "
                  "catalog's gpus", f"add a gpus: entry with id '{server.gpu.lower()}' (see catalogs/gpus.yaml)")
    batch, batch_tokens = given.get("global_batch"), given.get("global_batch_tokens")
    tpath = ("workload", "training")
    if (batch is None) == (batch_tokens is None):
        ctx.error(tpath, "give the global batch as global_batch (sequences) or global_batch_tokens, one of them",
                  "e.g. global_batch: 2048")
        return None
    if batch is None:
        if batch_tokens % arch.seq_len:
            ctx.error(tpath + ("global_batch_tokens",), f"{batch_tokens:,} tokens is not a whole number of "
                      f"{arch.seq_len:,}-token sequences", f"use {max(1, batch_tokens // arch.seq_len) * arch.seq_len:,}")
            return None
        batch = batch_tokens // arch.seq_len
    if given.get("compute_dtype") == "fp8" and gpu is not None and not gpu.fp8_tflops:
        ctx.error(tpath + ("compute_dtype",), f"{gpu.id} has no FP8 tensor cores", "use compute_dtype: bf16")
    if given.get("compute_model") == "per-op" and gpu is not None and not has_curves(gpu):
        ctx.error(tpath + ("compute_model",), f"{gpu.id} has no efficiency curves for the per-operation model",
                  "use compute_model: flat, or add vector_tflops and the curves to its gpus entry (--catalog)")
    policies = []
    for index, entry in enumerate(given.get("overlap") or []):
        entry = {"policy": entry} if isinstance(entry, str) else entry
        name = entry["policy"]
        params = tuple((k, v) for k, v in entry.items() if k != "policy" and v is not None)
        allowed = _training.POLICY_PARAMS.get(name, ())
        for k, _v in params:
            if k not in allowed:
                ctx.error(tpath + ("overlap", index, k), f"{name} takes no '{k}'",
                          "it takes " + ", ".join(allowed) if allowed else f"{name} has no parameters")
        if any(p.name == name for p in policies):
            ctx.error(tpath + ("overlap", index), f"{name} is listed twice", "list each policy once")
        policies.append(_training.Policy(name, params))
    econ = economics or {}
    training = _training.Training(
        arch, batch, given["micro_batch"] if given else 1,
        given.get("sequence_parallel", True) if given else True, given.get("recompute") or "selective",
        given.get("schedule") or "1f1b", given.get("virtual_stages") or 1,
        given["zero"] if given.get("zero") is not None else 1, given.get("compute_dtype") or "bf16",
        given.get("activation_bytes") or 2, given.get("gradient_bytes") or 4, given.get("parameter_bytes") or 2,
        given.get("compute_efficiency"), given.get("compute_model") or "auto",
        given.get("flash_attention", True) if given else True, tuple(policies), given.get("tokens"),
        _training.Economics(**{k: float(v) for k, v in econ.items() if v is not None}))
    if problems or ctx.problems:
        return None
    for key, message, hint in _training.layout_problems(training, workload.parallelism):
        ctx.error(("workload",) + tuple(key.split(".")), message, hint)
    return training


def _failures(f: dict | None, ctx: Context) -> FailurePolicy:
    if not f:
        return FailurePolicy()
    scenarios, seen = [], set()
    for index, entry in enumerate(f.get("scenarios") or []):
        path = ("failures", "scenarios", index)
        if entry["name"] in seen:
            ctx.error(path + ("name",), f"duplicate scenario name '{entry['name']}'", "names must be unique")
        seen.add(entry["name"])
        given = [key for key, present in (("index", entry["index"] is not None), ("every", entry["every"] is True),
                                          ("random", entry["random"] is not None)) if present]
        if len(given) != 1:
            ctx.error(path, "give exactly one of index, every or random" + (f" (found {', '.join(given)})" if given
                                                                             else ""),
                      "index: 0 for one element, every: true for each single one, random: {count: 2, samples: 100}")
            continue
        if given[0] == "index":
            indices = entry["index"] if isinstance(entry["index"], list) else [entry["index"]]
            if not indices or len(set(indices)) != len(indices):
                ctx.error(path + ("index",), "list each element once, at least one", "e.g. index: [0, 3]")
                continue
            scenarios.append(Scenario(entry["name"], entry["fail"], "index", tuple(indices)))
        elif given[0] == "every":
            scenarios.append(Scenario(entry["name"], entry["fail"], "every"))
        else:
            r = entry["random"]
            scenarios.append(Scenario(entry["name"], entry["fail"], "random", count=r["count"],
                                      samples=r["samples"], seed=r["seed"]))
    return FailurePolicy(tuple(scenarios), tuple(dict.fromkeys(f["rates"])), float(f["checkpoint_s"]),
                         float(f["restart_s"]), f["gpu_hour_usd"])
