"""NCCL's cost model: protocols, per-step latencies and bandwidth factors, as NCCL's tuner has them.

Restated from NVIDIA/nccl ``src/graph/tuning.cc`` (see ``../shared/reference/nccl_model.md``); these
are NCCL's model constants, not measurements. topoplan keeps NCCL's latency terms and protocol
factors and takes the bandwidth from routed link loads instead of NCCL's nominal per-channel figure, so
on a non-blocking fabric the two agree and congestion still slows a collective down:

    time(algorithm, protocol) = latency_us * 1e-6 + max(T_loads / factor, bus_bytes / (channels * cap))

``T_loads`` is the time the most loaded link needs for the collective's bytes (Simple protocol);
``factor`` and ``cap`` are NCCL's protocol refinements. The tuner takes the (algorithm, protocol) with the
lowest time.

Latency in microseconds for a group of ``ranks`` ranks on ``nodes`` servers (``ppn`` ranks each):

* ring: ``base + (steps - inter) * intra_lat + inter * inter_lat``, with ``steps`` = 2(n-1) for
  AllReduce, n-1 for AllGather and ReduceScatter, n for Broadcast and Reduce, and ``inter`` the same
  counts over nodes. Across nodes an intra-node step costs at least the network overhead (1 us, 3 us
  for Simple), and with one rank per node the network step takes the tree's network value.
* tree (AllReduce): ``base + 2 * ((ppn - 1) * intra_lat + floor(log2 nodes) * inter_lat)``.
* point-to-point (all-to-all, send/recv; NCCL's tuner does not time these): ``base`` plus one step of
  the slowest link the pattern crosses, since NCCL progresses all peers at once.
* NVLS, NVLS-Tree and CollNet Direct: see their constants below (Simple protocol only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PROTOCOLS = ("LL", "LL128", "Simple")
FAMILIES = ("ring", "tree")

# tuning.cc baseLat and hwLat, microseconds, in PROTOCOLS order
BASE_US = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4)}
STEP_US = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4)},
    "pcie": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0)},
}
NET_OVERHEAD_US = 1.0          # the least an intra-node step of a multi-node ring costs (x3 for Simple)

# bandwidth refinements
LL_FACTOR = 0.5                # ring LL moves 8 bytes of payload per 16 on the wire
LL128_FACTOR = 120 / 128       # LL128: 120 bytes of payload per 128-byte line
RING_LL128_FACTOR = 0.92
TREE_FACTOR = 0.92
TREE_LL_DIVISOR = 3.8
TREE_LL128_ONE_NODE = 7 / 9
# per-channel maximum of ring LL128, GB/s, by GPU architecture (others: no cap is applied)
RING_LL128_MAX_GBPS_PER_CHANNEL = {"hopper": 36.7, "blackwell": 40.0}

# NVLS (NVLink SHARP: the NVSwitch reduces), Simple protocol only. Latencies: one NVLink NVLS step (25 us),
# plus the network's (18 us) when the domain spans nodes; NVLS-Tree adds 2 log2(nodes) network steps of
# 20.9 us. NCCL's tuner adds no base latency to them. Bandwidth: NCCL's NVLS busbw is the NVLink bandwidth
# x efficiency x (channels - 1) / channels x 2 (AllReduce pipelines its reduce and broadcast), converted
# to algbw by ranks / (2 (ranks - 1)).
NVLS_STEP_US = {"nvlink": 25.0, "net": 18.0}
NVLS_TREE_STEP_US = {"nvlink": 25.0, "net": 20.9}
NVLS_EFFICIENCY = {"hopper": 0.85, "blackwell": 0.74}

# NVLink bandwidth NCCL's topology model assumes per link and direction (src/graph/topo.h SM80/SM90/SM100
# _NVLINK_BW, GB/s), against the raw per-link rate of that NVLink generation (NVLink3/4 25 GB/s, NVLink5
# 50 GB/s): NCCL plans intra-node rings at about 80% of the raw rate
NCCL_NVLINK_GBPS = {"ampere": 20.0, "hopper": 20.6, "blackwell": 40.1}
RAW_NVLINK_GBPS = {"ampere": 25.0, "hopper": 25.0, "blackwell": 50.0}

ARCH_OF_GPU = (("GB200", "blackwell"), ("GB300", "blackwell"), ("B200", "blackwell"), ("B300", "blackwell"),
               ("H100", "hopper"), ("H200", "hopper"), ("H800", "hopper"), ("H20", "hopper"),
               ("A100", "ampere"), ("A800", "ampere"))


def gpu_arch(gpu_model: str) -> str:
    """NCCL's architecture class of a catalog GPU model name ("other" when unknown)."""
    for prefix, arch in ARCH_OF_GPU:
        if gpu_model.upper().startswith(prefix):
            return arch
    return "other"


def nvlink_efficiency(arch: str) -> float:
    """The share of raw NVLink bandwidth NCCL's model counts on (1.0 for architectures it does not list)."""
    return NCCL_NVLINK_GBPS[arch] / RAW_NVLINK_GBPS[arch] if arch in NCCL_NVLINK_GBPS else 1.0


@dataclass(frozen=True)
class GroupShape:
    """What NCCL's model needs to know about a communicator: ranks, servers, ranks per server, how ranks
    inside a server talk (``nvlink`` or ``pcie``), the channel count and the GPU architecture."""

    ranks: int
    nodes: int
    intra: str = "nvlink"
    channels: int = 2
    arch: str = "other"

    @property
    def ppn(self) -> int:
        return max(1, self.ranks // max(1, self.nodes))


def ring_steps(op: str, ranks: int, nodes: int) -> tuple[int, int]:
    """(steps, steps that cross the network) of one ring collective."""
    if op == "allreduce":
        return 2 * (ranks - 1), 2 * (nodes - 1)
    if op in ("allgather", "reducescatter"):
        return ranks - 1, nodes - 1
    return ranks, nodes  # broadcast, reduce


def _lats(shape: GroupShape, family: str, protocol: str) -> tuple[float, float, float]:
    """(base, intra step, network step) in microseconds, with NCCL's multi-node adjustments."""
    p = PROTOCOLS.index(protocol)
    base = BASE_US[family][p]
    intra = STEP_US[shape.intra][family][p]
    inter = STEP_US["net"][family][p]
    if family == "ring" and shape.nodes > 1:
        intra = max(intra, NET_OVERHEAD_US * (3 if protocol == "Simple" else 1))
        if shape.ppn == 1:
            inter = STEP_US["net"]["tree"][p]
    return base, intra, inter


def ring_latency_us(op: str, protocol: str, shape: GroupShape) -> float:
    steps, inter_steps = ring_steps(op, shape.ranks, shape.nodes)
    base, intra, inter = _lats(shape, "ring", protocol)
    return base + (steps - inter_steps) * intra + inter_steps * inter


def tree_latency_us(protocol: str, shape: GroupShape) -> float:
    base, intra, inter = _lats(shape, "tree", protocol)
    levels = int(math.floor(math.log2(shape.nodes))) if shape.nodes > 1 else 0
    return base + 2 * ((shape.ppn - 1) * intra + levels * inter)


def phased_latency_us(family: str, protocol: str, shape: GroupShape, intra_steps: int, inter_steps: int) -> float:
    """A plan whose steps topoplan counts itself (hierarchical, grid, rooted trees, point-to-point)."""
    base, intra, inter = _lats(shape, family, protocol)
    return base + intra_steps * intra + inter_steps * inter


# pipelined multi-phase plans (hierarchical, grid) move data in chunks of this many bytes per channel
# (NCCL's Simple protocol: a 4 MiB buffer in 8 slots); the stages other than the slowest add one chunk each
PIPELINE_CHUNK_BYTES = 512 * 1024


def pipelined_s(stage_s: list[float], size_bytes: float, channels: int) -> float:
    """Time of stages that overlap by chunks: the slowest stage, plus the others' share of one chunk each
    (pipeline fill and drain)."""
    if not stage_s:
        return 0.0
    chunks = max(1.0, size_bytes / (channels * PIPELINE_CHUNK_BYTES))
    slowest = max(stage_s)
    return slowest + (sum(stage_s) - slowest) / chunks


# CollNet Direct (SHARP in the InfiniBand switches), Simple only: per-rank intra step (NVLink or PCIe) and
# the network's aggregation step, no base; Hopper and newer reach 0.85 of the bandwidth
COLLNET_INTRA_US = 3.7
COLLNET_NET_US = 31.0
COLLNET_RANK_US = 0.4
COLLNET_EFFICIENCY = {"hopper": 0.85, "blackwell": 0.85}


def collnet_latency_us(shape: GroupShape) -> float:
    """``2 (min(1, ppn - 1) intra + (ppn - 1) 0.4) + network``."""
    rpn = shape.ppn
    return 2 * (min(1, rpn - 1) * COLLNET_INTRA_US + (rpn - 1) * COLLNET_RANK_US) + COLLNET_NET_US


def nvls_latency_us(shape: GroupShape) -> float:
    return NVLS_STEP_US["nvlink"] + (NVLS_STEP_US["net"] if shape.nodes > 1 else 0.0)


def nvls_tree_latency_us(shape: GroupShape) -> float:
    levels = int(math.floor(math.log2(shape.nodes))) if shape.nodes > 1 else 0
    return NVLS_TREE_STEP_US["nvlink"] + 2 * levels * NVLS_TREE_STEP_US["net"]


def nvls_factor(shape: GroupShape, ranks: int) -> float:
    """NVLS's share of the bandwidth of its pattern (each GPU sends and receives the whole buffer once over
    NVLink), so that ``time = T_loads / factor`` is NCCL's ``size / algbw`` over ``ranks`` NVLink peers."""
    efficiency = NVLS_EFFICIENCY.get(shape.arch, 0.0)
    channels = max(2, shape.channels)
    return efficiency * (channels - 1) / channels * ranks / (ranks - 1) if ranks > 1 else 1.0


def bandwidth_factor(family: str, protocol: str, shape: GroupShape) -> float:
    """The share of the Simple-protocol bandwidth a protocol reaches (NCCL's refinements)."""
    if family == "nvls":
        return nvls_factor(shape, shape.ppn if shape.nodes > 1 else shape.ranks)
    if family == "collnet":
        return COLLNET_EFFICIENCY.get(shape.arch, 1.0)
    if family == "nvls_tree_net":
        # NVLS-Tree's network stage: NCCL's algbw is the nodes' network bandwidth x ranks / (2 (ranks - 1)),
        # the double binary tree of shards moves 2 x size per node: the ratio of the two
        return shape.ranks / (shape.ranks - 1) if shape.ranks > 1 else 1.0
    if family == "tree":
        if protocol == "Simple":
            return TREE_FACTOR
        if protocol == "LL":
            return TREE_FACTOR / TREE_LL_DIVISOR
        return TREE_FACTOR * (TREE_LL128_ONE_NODE if shape.nodes == 1 else LL128_FACTOR)
    if protocol == "LL":
        return LL_FACTOR
    if protocol == "LL128":
        return RING_LL128_FACTOR
    return 1.0


def bandwidth_cap_GBps(family: str, protocol: str, shape: GroupShape) -> float | None:
    """NCCL's cap on bus bandwidth for this protocol (None: none modelled)."""
    if family == "ring" and protocol == "LL128" and shape.arch in RING_LL128_MAX_GBPS_PER_CHANNEL:
        return shape.channels * RING_LL128_MAX_GBPS_PER_CHANNEL[shape.arch]
    return None


def nccl_model_time_s(op: str, family: str, protocol: str, shape: GroupShape, size_bytes: float,
                      bus_GBps: float) -> float:
    """NCCL's own prediction, with its nominal bus bandwidth ``bus_GBps`` (``nChannels x bw``): the oracle
    topoplan is held to on non-blocking fabrics. Ring: algbw = busbw * ranks / steps; tree: busbw / 2."""
    if family == "tree":
        latency = tree_latency_us(protocol, shape)
        bus = bus_GBps * bandwidth_factor("tree", protocol, shape)
        algbw = bus * 0.5
    else:
        latency = ring_latency_us(op, protocol, shape)
        bus = bus_GBps * bandwidth_factor("ring", protocol, shape)
        cap = bandwidth_cap_GBps("ring", protocol, shape)
        bus = min(bus, cap) if cap is not None else bus
        steps, _ = ring_steps(op, shape.ranks, shape.nodes)
        algbw = bus * shape.ranks / steps
    return latency * 1e-6 + size_bytes / (algbw * 1e9)
