"""Catalog: switches, NICs, transceivers, cables, optical circuit switches, servers, GPUs and model
architectures.

The shipped catalog is ``catalogs/*.yaml`` (inside the installed package as ``topoplan/catalogs``).
``load_catalog(extra_files)`` reads it, then each ``--catalog FILE`` in order: an entry whose id already
exists replaces it, a new id adds one. Units are in key names and every figure has a ``source``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from . import transport as _transport
from . import yamlio
from .errors import Problem, SpecError, did_you_mean
from .schema import Bool, Context, Enum, Int, Key, List, Num, Obj, Str, has_missing


def builtin_catalog_dir() -> Path:
    """The shipped catalogs: inside the installed package, or at the root of a source checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "catalogs", here.parent / "catalogs"):
        if candidate.is_dir() and any(candidate.glob("*.yaml")):
            return candidate
    raise FileNotFoundError("topoplan's catalogs/ directory is missing from this installation")


@dataclass(frozen=True)
class PortMode:
    ports: int
    port_speed_gbps: float


@dataclass(frozen=True)
class Switch:
    id: str
    vendor: str
    description: str
    ports: int
    port_speed_gbps: float
    cages: int
    form_factor: str
    breakouts: tuple
    latency_ns: float
    power_w: float
    price_usd: float
    source: str
    in_network_reduction: bool = False   # SHARP: NCCL's CollNet reduces in the switch
    co_packaged_optics: bool = False     # optics inside the switch (CPO): fibres plug in, no transceivers
    transport: str = "ideal"             # infiniband, ethernet (RoCEv2) or ideal: per-packet overhead (transport.py)

    def modes(self) -> list[PortMode]:
        """Native and breakout port modes, fastest first."""
        modes = [PortMode(self.ports, self.port_speed_gbps)] + list(self.breakouts)
        return sorted(modes, key=lambda m: -m.port_speed_gbps)

    @property
    def cage_gbps(self) -> float:
        """Capacity of one optics cage (one transceiver module)."""
        return self.ports * self.port_speed_gbps / self.cages

    def radix_at(self, link_gbps: float) -> tuple[int, float]:
        """Logical ports usable for links of ``link_gbps``, and the port speed they run at.

        The mode whose speed equals the link speed is used; otherwise the slowest mode that is still at
        least as fast (links then run below the port's speed); a link faster than every mode runs at the
        fastest mode's speed, which the caller reports.
        """
        modes = self.modes()
        exact = [m for m in modes if m.port_speed_gbps == link_gbps]
        if exact:
            return exact[0].ports, link_gbps
        faster = [m for m in modes if m.port_speed_gbps > link_gbps]
        if faster:
            return faster[-1].ports, faster[-1].port_speed_gbps
        return modes[0].ports, modes[0].port_speed_gbps


@dataclass(frozen=True)
class Nic:
    id: str
    vendor: str
    description: str
    ports: int
    port_speed_gbps: float
    cages: int
    form_factor: str
    pcie_gen: int
    pcie_lanes: int
    power_w: float
    price_usd: float
    source: str
    mtu_bytes: int = 4096                # RDMA MTU: payload per packet (transport.py)

    @property
    def cage_gbps(self) -> float:
        return self.ports * self.port_speed_gbps / self.cages


@dataclass(frozen=True)
class Transceiver:
    id: str
    vendor: str
    description: str
    form_factor: str
    speed_gbps: float
    media: str
    reach_m: float
    power_w: float
    price_usd: float
    source: str
    drive: str = "dsp"    # "dsp": retimed pluggable; "linear": linear-drive (LPO), no DSP, less power


@dataclass(frozen=True)
class Cable:
    id: str
    kind: str
    media: str
    description: str
    speed_gbps: float
    reach_m: float
    power_w: float
    price_usd: float
    source: str
    tails: int = 1   # connectors at the far end of one assembly: 1 straight, 2 or 4 a splitter (copper)


@dataclass(frozen=True)
class Ocs:
    id: str
    vendor: str
    description: str
    ports: int
    latency_ns: float
    power_w: float
    price_usd: float
    source: str


@dataclass(frozen=True)
class Server:
    id: str
    vendor: str
    description: str
    gpu: str
    gpus: int
    nvlink_gbps: float
    nic: str
    nics: int
    gpu_nics: tuple
    pcie_gen: int
    pcie_lanes: int
    power_w: float
    price_usd: float
    source: str
    host: dict | None = None   # PCIe layout template (sockets, switches), for host graphs
    nvls: bool = False         # its NVSwitch reduces in the switch (NVLink SHARP, Hopper and newer)
    # calibration against measured collectives (``topoplan nccl --fit`` writes these): microseconds added
    # to each of NCCL's network and intra-node steps, and the share of every link's rate collectives reach
    network_step_extra_us: float = 0.0
    intra_step_extra_us: float = 0.0
    bandwidth_efficiency: float = 1.0


@dataclass(frozen=True)
class Gpu:
    """A GPU's compute figures for the training-step model (``catalogs/gpus.yaml``)."""

    id: str
    description: str
    bf16_tflops: float
    fp8_tflops: float
    hbm_gb: float
    hbm_tbps: float
    matmul_efficiency: float
    fp8_matmul_efficiency: float
    source: str
    # the per-operation compute model (topoplan/compute.py); empty: the flat model at matmul_efficiency
    vector_tflops: float = 0.0
    matrix_efficiency_curve: tuple = ()   # ((GFLOP at least, share of peak), ...), largest first, down to 0
    vector_efficiency_curve: tuple = ()
    memory_efficiency_curve: tuple = ()   # ((MB at least, share of hbm_tbps), ...)
    curves_source: str = ""

    def peak_tflops(self, dtype: str) -> float:
        return self.fp8_tflops if dtype == "fp8" else self.bf16_tflops

    def efficiency(self, dtype: str) -> float:
        return self.fp8_matmul_efficiency if dtype == "fp8" else self.matmul_efficiency


@dataclass(frozen=True)
class ModelArch:
    """A transformer architecture (``catalogs/models.yaml``; fields explained there)."""

    id: str
    description: str
    layers: int
    hidden: int
    ffn: int
    heads: int
    vocab: int
    seq_len: int
    source: str
    kv_heads: int = 0         # 0: as heads
    head_dim: int = 0         # 0: hidden / heads
    gated_ffn: bool = False
    tied_embeddings: bool = False
    attention_params: int = 0  # 0: from heads, kv_heads, head_dim
    attention_dim: int = 0     # 0: heads x head_dim
    experts: int = 0
    top_k: int = 0
    shared_experts: int = 0
    expert_ffn: int = 0
    dense_layers: int = 0
    capacity_factor: float = 1.0


def pcie_gbps(gen: int, lanes: int) -> float:
    """Raw PCIe payload rate per direction in Gb/s (Gen3+ 128b/130b; Gen6 counted at its raw rate)."""
    gt_per_lane = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0, 7: 128.0}[gen]
    encoding = 0.8 if gen <= 2 else 128 / 130
    return gt_per_lane * lanes * encoding


_ID = Str(kebab=True, doc="catalog id, kebab-case")
_TEXT = Str()
_SOURCE = Str(doc="where each figure comes from; estimates say so")
_CURVE = List(List(Num(minimum=0, maximum=1e12), min_items=2),
              doc="[[size at least, share of the peak], ...], largest size first, the last size 0")
_POS = Num(exclusive_minimum=0)
_NONNEG = Num(minimum=0)
_COUNT = Int(minimum=1)
# per-step latencies before the NCCL model (flow/nccl.py); still accepted so that old override files load
_UNUSED = "ignored: NCCL's own per-protocol step latencies apply (see network_step_extra_us to calibrate)"

_SIZE = Int(minimum=1, maximum=10_000_000)
_ZERO_OR_SIZE = Int(minimum=0, maximum=10**13)
# a model architecture's fields: the catalog's ``models:`` entries and a spec's ``workload.model``
MODEL_FIELDS = {
    "id": Key(_ID, True), "description": Key(_TEXT, True),
    "layers": Key(Int(minimum=1, maximum=100_000, doc="transformer layers"), True),
    "hidden": Key(_SIZE, True), "ffn": Key(_SIZE, True),
    "heads": Key(Int(minimum=1, maximum=100_000), True),
    "vocab": Key(_SIZE, True), "seq_len": Key(Int(minimum=1, maximum=100_000_000, doc="tokens per sequence"), True),
    "source": Key(_SOURCE, True),
    "kv_heads": Key(Int(minimum=0, maximum=100_000, doc="0: as heads"), False, 0),
    "head_dim": Key(Int(minimum=0, maximum=1_000_000, doc="0: hidden / heads"), False, 0),
    "gated_ffn": Key(Bool(doc="SwiGLU-style feed-forward (three matrices)"), False, False),
    "tied_embeddings": Key(Bool(), False, False),
    "attention_params": Key(_ZERO_OR_SIZE, False, 0),
    "attention_dim": Key(Int(minimum=0, maximum=100_000_000), False, 0),
    "experts": Key(Int(minimum=0, maximum=1_000_000, doc="routed experts (0: dense)"), False, 0),
    "top_k": Key(Int(minimum=0, maximum=1_000_000), False, 0),
    "shared_experts": Key(Int(minimum=0, maximum=1_000), False, 0),
    "expert_ffn": Key(Int(minimum=0, maximum=10_000_000), False, 0),
    "dense_layers": Key(Int(minimum=0, maximum=100_000, doc="leading layers without experts"), False, 0),
    "capacity_factor": Key(Num(minimum=1, maximum=64), False, 1.0),
}

_SECTIONS = {
    "switches": (Switch, Obj({
        "id": Key(_ID, True), "vendor": Key(_TEXT, True), "description": Key(_TEXT, True),
        "ports": Key(_COUNT, True), "port_speed_gbps": Key(_POS, True), "cages": Key(_COUNT, True),
        "form_factor": Key(_TEXT, True),
        "breakouts": Key(List(Obj({"ports": Key(_COUNT, True), "port_speed_gbps": Key(_POS, True)})), True),
        "latency_ns": Key(_NONNEG, True), "power_w": Key(_NONNEG, True), "price_usd": Key(_NONNEG, True),
        "source": Key(_SOURCE, True),
        "in_network_reduction": Key(Bool(doc="SHARP in-network reduction (NCCL CollNet)"), False, False),
        "co_packaged_optics": Key(Bool(doc="optics co-packaged with the switch chip: its links take fibres but "
                                           "no transceivers (their power and price are the switch's)"),
                                  False, False),
        "transport": Key(Enum(_transport.TRANSPORTS, doc="what its links carry, for the per-packet overhead: "
                              "infiniband, ethernet (RoCEv2) or ideal (none)"), False, "ideal")})),
    "nics": (Nic, Obj({
        "id": Key(_ID, True), "vendor": Key(_TEXT, True), "description": Key(_TEXT, True),
        "ports": Key(_COUNT, True), "port_speed_gbps": Key(_POS, True), "cages": Key(_COUNT, True),
        "form_factor": Key(_TEXT, True), "pcie_gen": Key(Int(minimum=1, maximum=7), True),
        "pcie_lanes": Key(Enum((1, 2, 4, 8, 16, 32)), True),
        "alpha_us": Key(Num(minimum=0, doc=_UNUSED), False, 0.0),
        "power_w": Key(_NONNEG, True), "price_usd": Key(_NONNEG, True), "source": Key(_SOURCE, True),
        "mtu_bytes": Key(Enum((256, 512, 1024, 2048, 4096), doc="RDMA MTU, payload bytes per packet"), False,
                         4096)})),
    "transceivers": (Transceiver, Obj({
        "id": Key(_ID, True), "vendor": Key(_TEXT, True), "description": Key(_TEXT, True),
        "form_factor": Key(_TEXT, True), "speed_gbps": Key(_POS, True),
        "media": Key(Enum(("multimode", "singlemode")), True), "reach_m": Key(_POS, True),
        "power_w": Key(_NONNEG, True), "price_usd": Key(_NONNEG, True), "source": Key(_SOURCE, True),
        "drive": Key(Enum(("dsp", "linear"), doc="dsp: retimed pluggable; linear: linear-drive optics (LPO)"),
                     False, "dsp")})),
    "cables": (Cable, Obj({
        "id": Key(_ID, True), "kind": Key(Enum(("dac", "acc", "aec", "aoc", "fiber")), True),
        "media": Key(Enum(("copper", "multimode", "singlemode")), True),
        "description": Key(_TEXT, True), "speed_gbps": Key(_NONNEG, True), "reach_m": Key(_POS, True),
        "power_w": Key(_NONNEG, True), "price_usd": Key(_NONNEG, True), "source": Key(_SOURCE, True),
        "tails": Key(Enum((1, 2, 4), doc="connectors at the far end of one cable: 1 straight; 2 or 4 a "
                                         "splitter whose head fills one cage"), False, 1)})),
    "ocs": (Ocs, Obj({
        "id": Key(_ID, True), "vendor": Key(_TEXT, True), "description": Key(_TEXT, True),
        "ports": Key(_COUNT, True), "latency_ns": Key(_NONNEG, True), "power_w": Key(_NONNEG, True),
        "price_usd": Key(_NONNEG, True), "source": Key(_SOURCE, True)})),
    "servers": (Server, Obj({
        "id": Key(_ID, True), "vendor": Key(_TEXT, True), "description": Key(_TEXT, True),
        "gpu": Key(_TEXT, True), "gpus": Key(_COUNT, True), "nvlink_gbps": Key(_NONNEG, True),
        "nic": Key(_ID, True), "nics": Key(_COUNT, True), "gpu_nics": Key(List(Int(minimum=0)), True),
        "pcie_gen": Key(Int(minimum=1, maximum=7), True), "pcie_lanes": Key(Enum((1, 2, 4, 8, 16, 32)), True),
        "nvlink_alpha_us": Key(Num(minimum=0, doc=_UNUSED), False, 0.0),
        "pcie_alpha_us": Key(Num(minimum=0, doc=_UNUSED), False, 0.0),
        "power_w": Key(_NONNEG, True), "price_usd": Key(_NONNEG, True), "source": Key(_SOURCE, True),
        "nvls": Key(Bool(doc="NVSwitch with NVLink SHARP: NCCL's NVLS algorithms run on it"), False, False),
        "network_step_extra_us": Key(Num(minimum=0, maximum=1e6), False, 0.0),
        "intra_step_extra_us": Key(Num(minimum=0, maximum=1e6), False, 0.0),
        "bandwidth_efficiency": Key(Num(exclusive_minimum=0, maximum=1), False, 1.0),
        "host": Key(Obj({
            "sockets": Key(Int(minimum=1, maximum=8), True),
            "cpu": Key(Enum(("intel-skl", "intel-spr", "intel-emr", "amd")), True),
            "nvlinks": Key(Int(minimum=0), False, 0),
            "switches": Key(List(Obj({
                "socket": Key(Int(minimum=0), True),
                "gen": Key(Int(minimum=1, maximum=7), True),
                "lanes": Key(Enum((4, 8, 16, 32)), False, 16),
                "gpus": Key(List(Int(minimum=0)), False, []),
                "nics": Key(List(Int(minimum=0)), False, []),
            })), True),
        }, doc="PCIe layout: CPU sockets and the PCIe switches under them"), False)})),
    "gpus": (Gpu, Obj({
        "id": Key(_ID, True), "description": Key(_TEXT, True),
        "bf16_tflops": Key(Num(exclusive_minimum=0, maximum=1e6, doc="dense BF16 tensor peak, TFLOP/s"), True),
        "fp8_tflops": Key(Num(minimum=0, maximum=1e6, doc="dense FP8 tensor peak, TFLOP/s (0: none)"), True),
        "hbm_gb": Key(Num(exclusive_minimum=0, maximum=1e6, doc="GPU memory, GB"), True),
        "hbm_tbps": Key(Num(exclusive_minimum=0, maximum=1e4, doc="memory bandwidth, TB/s"), True),
        "matmul_efficiency": Key(Num(exclusive_minimum=0, maximum=1, doc="share of the BF16 peak a matmul "
                                     "reaches (measured)"), True),
        "fp8_matmul_efficiency": Key(Num(minimum=0, maximum=1), True),
        "source": Key(_SOURCE, True),
        "vector_tflops": Key(Num(minimum=0, maximum=1e6, doc="non-tensor (vector) BF16 peak, TFLOP/s: the "
                                                             "per-operation compute model"), False, 0.0),
        "matrix_efficiency_curve": Key(_CURVE, False, []),
        "vector_efficiency_curve": Key(_CURVE, False, []),
        "memory_efficiency_curve": Key(_CURVE, False, []),
        "curves_source": Key(_TEXT, False, "")})),
    "models": (ModelArch, Obj(MODEL_FIELDS)),
}
SECTIONS = tuple(_SECTIONS)


@dataclass
class Catalog:
    """All entries by section and id, plus where each entry was defined (for error messages)."""

    switches: dict
    nics: dict
    transceivers: dict
    cables: dict
    ocs: dict
    servers: dict
    gpus: dict
    models: dict
    origin: dict  # (section, id) -> "file:line"
    overrides: list = dataclasses.field(default_factory=list)  # (section, id, where, where it replaced)

    def section(self, name: str) -> dict:
        return getattr(self, name)

    def find(self, entry_id: str):
        """(section, entry) for an id in any section, or (None, None)."""
        for name in SECTIONS:
            if entry_id in self.section(name):
                return name, self.section(name)[entry_id]
        return None, None

    def ids(self) -> list[tuple[str, str]]:
        return [(name, entry_id) for name in SECTIONS for entry_id in sorted(self.section(name))]


def _raw(entry) -> dict:
    """An entry as the plain data its YAML held (tuples as lists), for merging a partial override."""
    def plain(value):
        if isinstance(value, (list, tuple)):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value
    return {k: plain(v) for k, v in dataclasses.asdict(entry).items() if v is not None}


def _entry(cls, data: dict):
    names = {f.name for f in dataclasses.fields(cls)}
    values = {k: v for k, v in data.items() if k in names}  # drops the ignored keys (``_UNUSED``)
    if cls is Switch:
        values["breakouts"] = tuple(PortMode(b["ports"], float(b["port_speed_gbps"])) for b in data["breakouts"])
    if cls is Gpu:
        for name in ("matrix_efficiency_curve", "vector_efficiency_curve", "memory_efficiency_curve"):
            values[name] = tuple(tuple(float(x) for x in pair) for pair in data.get(name) or ())  # shape checked later
    if cls is Server:
        values["gpu_nics"] = tuple(data["gpu_nics"])
    for f in dataclasses.fields(cls):
        if f.type == "float":
            values[f.name] = float(values[f.name])
    return cls(**values)


def _read_file(file: str, catalog: Catalog, problems: list, seen_in_file: dict) -> None:
    try:
        data, lines = yamlio.read(file)
    except SpecError as err:
        problems.extend(err.problems)
        return
    ctx = Context(str(file), lines)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        ctx.error((), "a catalog file is a mapping of sections (switches:, nics:, ...)",
                  "start the file with one of: " + ", ".join(SECTIONS))
        problems.extend(ctx.problems)
        return
    for name, items in data.items():
        if name not in _SECTIONS:
            ctx.error((name,), f"unknown catalog section '{name}'", did_you_mean(name, SECTIONS))
            continue
        cls, schema = _SECTIONS[name]
        if not isinstance(items, list):
            ctx.error((name,), f"expected a list of {name} entries (lines starting with '- ')")
            continue
        for index, item in enumerate(items):
            path = (name, index)
            before = len(ctx.problems)
            existing = catalog.section(name).get(item.get("id")) if isinstance(item, dict) else None
            if existing is not None:  # an override names only the fields it changes
                item = {**_raw(existing), **item}
            values = schema.check(item, path, ctx)
            if len(ctx.problems) > before or has_missing(values):
                continue
            entry_id = values["id"]
            if (name, entry_id) in seen_in_file:
                ctx.error(path + ("id",), f"id '{entry_id}' appears twice in this file "
                          f"(first at line {seen_in_file[(name, entry_id)]})", "ids must be unique")
                continue
            seen_in_file[(name, entry_id)] = lines.line_of(path)
            elsewhere = [other for other in SECTIONS if other != name and entry_id in catalog.section(other)]
            if elsewhere:
                ctx.error(path + ("id",), f"id '{entry_id}' is already a {elsewhere[0][:-1]} "
                          f"({catalog.origin[(elsewhere[0], entry_id)]})", "ids are unique across sections")
                continue
            where = f"{file}:{lines.line_of(path)}"
            if existing is not None:
                catalog.overrides.append((name, entry_id, where, catalog.origin[(name, entry_id)]))
            catalog.section(name)[entry_id] = _entry(cls, values)
            catalog.origin[(name, entry_id)] = where
    problems.extend(ctx.problems)


def curve_problem(curve: tuple) -> str | None:
    """Why an efficiency curve cannot be read (``None`` when it can)."""
    if any(len(pair) != 2 for pair in curve):
        return "each point is [size, share]"
    sizes = [size for size, _ in curve]
    if any(a <= b for a, b in zip(sizes, sizes[1:])) or sizes[-1] != 0:
        return "sizes must fall strictly, largest first, down to 0"
    if any(not 0 < share <= 1 for _, share in curve):
        return "each share must be in (0, 1]"
    return None


def _cross_check(catalog: Catalog, problems: list) -> None:
    for gid, gpu in catalog.gpus.items():
        file, _, line = catalog.origin[("gpus", gid)].rpartition(":")
        curves = ("matrix_efficiency_curve", "vector_efficiency_curve", "memory_efficiency_curve")
        for name in curves:
            curve = getattr(gpu, name)
            why = curve_problem(curve) if curve else None
            if why:
                problems.append(Problem(file, int(line), f"gpus[{gid}].{name}", why,
                                        "e.g. [[128, 0.95], [16, 0.9], [1, 0.6], [0, 0.1]]"))
        given = [bool(getattr(gpu, name)) for name in curves] + [bool(gpu.vector_tflops)]
        if any(given) and not all(given):
            problems.append(Problem(file, int(line), f"gpus[{gid}]", "the per-operation model needs "
                                    "vector_tflops and all three efficiency curves",
                                    "give all four, or none (the flat model)"))
    for sid, server in catalog.servers.items():
        where = catalog.origin[("servers", sid)]
        file, _, line = where.rpartition(":")
        if server.nic not in catalog.nics:
            problems.append(Problem(file, int(line), f"servers[{sid}].nic", f"unknown NIC '{server.nic}'",
                                    did_you_mean(server.nic, catalog.nics)))
        if len(server.gpu_nics) != server.gpus:
            problems.append(Problem(file, int(line), f"servers[{sid}].gpu_nics",
                                    f"lists {len(server.gpu_nics)} NICs for {server.gpus} GPUs",
                                    "give one NIC index per GPU"))
        elif any(n >= server.nics for n in server.gpu_nics):
            problems.append(Problem(file, int(line), f"servers[{sid}].gpu_nics",
                                    f"NIC index out of range (the server has {server.nics} NICs)",
                                    f"use indices 0..{server.nics - 1}"))
        elif len(set(server.gpu_nics)) != server.nics:
            problems.append(Problem(file, int(line), f"servers[{sid}].gpu_nics",
                                    f"only {len(set(server.gpu_nics))} of the {server.nics} NICs serve a GPU",
                                    "every compute NIC must serve at least one GPU"))
        if server.nvls:
            from .flow.nccl import NVLS_EFFICIENCY, gpu_arch

            if gpu_arch(server.gpu) not in NVLS_EFFICIENCY:
                problems.append(Problem(file, int(line), f"servers[{sid}].nvls",
                                        f"NVLS needs a Hopper or newer GPU; '{server.gpu}' is not one NCCL runs "
                                        "NVLS on", "remove nvls: true, or name the GPU model (H100, B200, ...)"))
        host = server.host
        if host:
            for index, switch in enumerate(host["switches"]):
                bad = ([f"socket {switch['socket']}"] if switch["socket"] >= host["sockets"] else []) + \
                      [f"GPU {g}" for g in switch["gpus"] if g >= server.gpus] + \
                      [f"NIC {n}" for n in switch["nics"] if n >= server.nics]
                if bad:
                    problems.append(Problem(file, int(line), f"servers[{sid}].host.switches[{index}]",
                                            f"refers to {', '.join(bad)}, which the server does not have",
                                            f"sockets 0..{host['sockets'] - 1}, GPUs 0..{server.gpus - 1}, "
                                            f"NICs 0..{server.nics - 1}"))
    for sid, switch in catalog.switches.items():
        if (switch.ports % switch.cages) != 0:
            file, _, line = catalog.origin[("switches", sid)].rpartition(":")
            problems.append(Problem(file, int(line), f"switches[{sid}].cages",
                                    f"{switch.ports} ports do not split evenly over {switch.cages} cages",
                                    "cages is the number of optics cages; ports must be a multiple of it"))


def load_catalog(extra_files=()) -> Catalog:
    """The shipped catalog plus ``extra_files`` in order; raises ``SpecError`` listing every problem."""
    catalog = Catalog(**{name: {} for name in SECTIONS}, origin={})
    problems: list[Problem] = []
    builtin = sorted(builtin_catalog_dir().glob("*.yaml"))
    for file in builtin:
        _read_file(str(file), catalog, problems, {})
    for file in extra_files:
        _read_file(str(file), catalog, problems, {})
    if not problems:
        _cross_check(catalog, problems)
    if problems:
        raise SpecError(problems)
    return catalog
