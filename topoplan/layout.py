"""The typed layout a generator attaches to its Topology: what the flow engines, bisection and reports
may rely on besides the node and arc arrays.

``Layout`` holds the facts every fabric has; ``tree`` (folded-Clos and rail fabrics) and ``grid`` (RailX)
hold what one family's closed forms need. Readers use fields, never string keys, so a misspelt name is
an ``AttributeError`` instead of a silent default. A topology built without a generator (a test, an
import) has the empty ``Layout()``: no family, nothing relays but switches and host devices.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

# node kinds that forward other nodes' traffic on switched fabrics: every kind but the GPU
SWITCHED_RELAY_KINDS = ("nic", "switch", "ocs", "cpu", "pcie_switch", "nvswitch")
ALL_RELAY_KINDS = ("gpu",) + SWITCHED_RELAY_KINDS


@dataclass(frozen=True)
class ClosPlan:
    """Sizes of one plane of a folded Clos. Counts are per plane; ``max_endpoints`` is the plane's limit at
    these tiers."""

    tiers: int
    endpoints: int
    radix: tuple          # logical ports per tier (leaf, spine, core) at the link speed
    down: tuple           # ports down per tier
    up: tuple             # ports up per tier (0 at the top)
    leaves: int
    leaves_per_pod: int
    pods: int
    spines: int
    spines_per_pod: int   # 3 tiers; for 2 tiers all spines are shared
    leaf_spine_links: int  # parallel links between a leaf and each spine it reaches
    cores: int
    cores_per_group: int
    spine_core_links: int
    max_endpoints: int
    core_islands: int = 1  # disjoint sets of cores (rail-only: one per rail), each over pods / core_islands pods

    @property
    def switches(self) -> int:
        return self.leaves + self.spines + self.cores


@dataclass(frozen=True)
class TreeLayout:
    """A folded-Clos or rail fabric: every plane is built from ``plan``."""

    plan: ClosPlan
    switch_models: tuple           # catalog id per tier present (leaf, spine, core)
    rails: int = 0                 # rail fabrics: rails per plane (0 for a fat-tree)
    scalable_unit: int = 0         # servers per SU
    scalable_units: int = 0
    aggregation: str = ""          # any-to-any | same-rail | rail-only ("" for a fat-tree)


@dataclass(frozen=True)
class GridLayout:
    """A RailX grid of ``columns x rows`` nodes of ``chips_per_node`` chips, with the rings its rails follow."""

    columns: int
    rows: int
    chips_per_node: int
    row_rails: int
    column_rails: int
    ring_assignment: str           # walecki | naive
    ocs_per_row: int
    ocs_per_column: int
    row_rings: tuple = ()          # distinct rings the row rails follow (node positions), matchings left out
    column_rings: tuple = ()


@dataclass(frozen=True)
class Layout:
    family: str = ""               # "clos" (fat-tree and rail fabrics) | "railx" | "" (no generator)
    tiers: int = 0                 # switch tiers (1 for RailX's circuit layer)
    planes: int = 1
    gpus_per_server: int = 0
    link_gbps: float = 0.0         # rate of a network link
    injection_gbps_per_gpu: float = 0.0
    diameter_hops: int = 0         # -1 when some GPUs cannot reach each other
    relay_kinds: tuple = SWITCHED_RELAY_KINDS  # node kinds that forward others' traffic
    pxn: bool = False              # cross-rail flows move over NVLink first (NCCL PXN on rail fabrics)
    nvls: bool = False             # the servers' NVSwitch reduces in the switch (NCCL's NVLS algorithms)
    in_network_reduction: bool = False  # every fabric switch reduces in the switch (SHARP: NCCL's CollNet)
    bisection_gbps: float | None = None        # analytic value, where the generator knows it
    bisection_method: str = ""
    warnings: tuple = ()
    tree: TreeLayout | None = None
    grid: GridLayout | None = None

    @property
    def gpus_relay(self) -> bool:
        """Direct-connect fabrics (RailX): chips forward traffic, and routes count inter-node hops first."""
        return "gpu" in self.relay_kinds

    def to_json(self) -> dict:
        return asdict(self)
