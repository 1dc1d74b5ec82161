"""Slurm ``topology.conf`` for the tree and the block plugins (topology.conf(5)).

Tree plugin (``write_tree``): a strict tree of ``SwitchName=... Nodes=...`` and ``SwitchName=...
Switches=...`` lines, read off plane 0 (every plane of a multi-plane fabric is wired alike):

* a *leaf group* is the set of leaves that share servers (a server whose NICs reach several leaves ties
  them together): one leaf on a fat-tree whose servers each sit under one leaf, the rail leaves of a
  scalable unit on a rail-optimized fabric. Each lists its nodes with ``Nodes=``; every node is listed
  exactly once. Named after the leaf (``p0-leaf3``) when it is one leaf, else ``group<i>``;
* above them, one switch per pod (``pod<i>``: the leaf groups the spines join) and one per set of pods
  the cores join (``core<i>``); a fabric split into islands (rail-only) gives one tree per island, so Slurm
  never places a job across islands.

Block plugin (``write_block``): ``BlockName=... Nodes=...`` per NVLink rack (servers of more than 8
GPUs, each split into Slurm nodes of ``gpus_per_node`` GPUs, 4 by default: GB200 compute trays), else per
scalable unit of a rail fabric, else per leaf group. Hostlists are compressed (``node[00000-00031]``).
"""

from __future__ import annotations

import re

import numpy as np
from ..catalog import Catalog
from ..errors import Problem, SpecError
from ..spec import Design
from ..topology import KIND, Topology
from .base import Export, ExportOptions, components, leaf_groups, network_links, node_count_per_server, slurm_node_names

_NAME_FORBIDDEN = re.compile(r"[\s,=\[\]#]")


def _nodes(design: Design, catalog: Catalog, options: ExportOptions) -> tuple[list, int]:
    """Slurm node names (server-major) and nodes per server; ``SpecError`` for a bad name pattern."""
    server = catalog.servers[design.cluster.server]
    per_server = node_count_per_server(server.gpus, options.gpus_per_node)
    if options.gpus_per_node and server.gpus % options.gpus_per_node:
        raise SpecError([Problem("--gpus-per-node", 0, "", f"{server.gpus} GPUs per {server.id} do not split "
                                 f"into nodes of {options.gpus_per_node}", "use a divisor of the server's GPUs")])
    try:
        names = slurm_node_names(options.node_names, design.cluster.servers, per_server)
    except (KeyError, IndexError, ValueError) as err:
        raise SpecError([Problem("--node-names", 0, "", f"bad node name pattern '{options.node_names}': {err}",
                                 "use {node}, {server} and {tray} with format specs, e.g. gpu{node:04d}")]) from None
    bad = next((n for n in names if not n or _NAME_FORBIDDEN.search(n)), None)
    if bad is not None:
        raise SpecError([Problem("--node-names", 0, "", f"node name '{bad}' has a space, comma, '=', '#' or "
                                 "bracket, which Slurm hostlists cannot hold", "e.g. gpu{node:04d}")])
    if len(set(names)) != len(names):
        raise SpecError([Problem("--node-names", 0, "", f"the pattern '{options.node_names}' gives several nodes "
                                 "the same name", "include {node} (or {server} and {tray})")])
    return names, per_server


def hostlist(names: list[str]) -> str:
    """Slurm hostlist expression of ``names``: runs of names that differ only in a trailing number of one
    width become ``prefix[a-b,c]``; anything else is listed as is."""
    runs: dict = {}
    order = []
    for name in names:
        match = re.fullmatch(r"(.*?)(\d+)", name)
        key = (match.group(1), len(match.group(2))) if match else (name, -1)
        if key not in runs:
            runs[key] = []
            order.append(key)
        runs[key].append(int(match.group(2)) if match else None)
    parts = []
    for prefix, width in order:
        numbers = runs[(prefix, width)]
        if width < 0:
            parts.append(prefix)
            continue
        numbers = sorted(set(numbers))
        if len(numbers) == 1:
            parts.append(f"{prefix}{numbers[0]:0{width}d}")
            continue
        ranges, start = [], numbers[0]
        for previous, current in zip(numbers, numbers[1:] + [None]):
            if current != previous + 1:
                ranges.append(f"{start:0{width}d}" if start == previous else f"{start:0{width}d}-{previous:0{width}d}")
                start = current
        parts.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(parts)


def _header(design: Design, plugin: str, lines: list[str]) -> list[str]:
    return [f"# Slurm topology.conf ({plugin} plugin) for {design.name}, written by topoplan",
            "# TopologyPlugin=topology/" + plugin + " in slurm.conf; " + lines[0]] + [f"# {x}" for x in lines[1:]]


def write_tree(topology: Topology, design: Design, catalog: Catalog, options: ExportOptions) -> Export:
    """``topology.conf`` for ``topology/tree``: every node once under one leaf group, a strict tree above."""
    if not (topology.kind == KIND["switch"]).any():
        raise design.infeasible("fabric.topology", f"slurm-tree needs a switched fabric; {design.fabric.topology} "
                                "joins its nodes by circuits, with no switch to place jobs under",
                                "use slurm-block, or no topology plugin")
    names, per_server = _nodes(design, catalog, options)
    server_group, leaf_nodes, leaf_group = leaf_groups(topology)
    if (server_group < 0).any():
        missing = int(np.flatnonzero(server_group < 0)[0])
        raise design.infeasible("fabric", f"server {missing} reaches no leaf switch of plane 0", "")
    groups = int(leaf_group.max()) + 1
    single = np.bincount(leaf_group, minlength=groups) == 1
    group_name = [topology.node_name(int(leaf_nodes[np.flatnonzero(leaf_group == g)[0]])).replace(".", "-")
                  if single[g] else f"group{g}" for g in range(groups)]
    node_servers = np.repeat(np.arange(design.cluster.servers), per_server)
    lines = []
    order = np.argsort(server_group[node_servers], kind="stable")
    bounds = np.searchsorted(server_group[node_servers][order], np.arange(groups + 1))
    for g in range(groups):
        members = [names[i] for i in order[bounds[g]:bounds[g + 1]]]
        lines.append(f"SwitchName={group_name[g]} Nodes={hostlist(members)}")
    lines += _upper_levels(topology, leaf_nodes, leaf_group, group_name)
    notes = []
    if design.fabric.planes > 1:
        notes.append(f"plane 0 of {design.fabric.planes}: the other planes are wired alike")
    text = _header(design, "tree", [f"{len(names):,} nodes under {groups:,} leaf group(s)"] + notes) + lines
    return Export(files=(("", ("\n".join(text) + "\n").encode()),), notes=tuple(notes),
                  summary=f"{len(names):,} nodes, {len(lines):,} switches")


def _upper_levels(topology: Topology, leaf_nodes: np.ndarray, leaf_group: np.ndarray, group_name: list) -> list:
    """``SwitchName=pod<i> Switches=...`` over the leaf groups the spines join, then ``core<i>`` over the
    pods the cores join (plane 0)."""
    _, switch_links = network_links(topology)
    plane0 = topology.plane[switch_links.lower] == 0
    lower, upper = switch_links.lower[plane0], switch_links.upper[plane0]
    tier = topology.tier
    lines = []
    children, child_names, nodes_below = leaf_group, group_name, leaf_nodes  # unit of each lower switch
    for level, prefix in ((0, "pod"), (1, "core")):
        up = tier[lower] == level
        if not up.any():
            break
        below_index = np.searchsorted(nodes_below, lower[up])
        above_nodes, above = np.unique(upper[up], return_inverse=True)
        child = children[below_index]
        n_child = len(child_names)
        # vertices: child units 0..C-1, then the switches above
        labels = components(child, n_child + above, n_child + above_nodes.size)
        _, unit_of_child = np.unique(labels[:n_child], return_inverse=True)
        units = int(unit_of_child.max()) + 1
        unit_names = [f"{prefix}{u}" for u in range(units)]
        for u in range(units):
            lines.append(f"SwitchName={unit_names[u]} Switches={hostlist([child_names[c] for c in np.flatnonzero(unit_of_child == u)])}")
        # the next level's lower ends are these switches, each standing for its unit
        children = np.zeros(above_nodes.size, np.int64)
        children[above] = unit_of_child[child]
        child_names, nodes_below = unit_names, above_nodes
    return lines


def write_block(topology: Topology, design: Design, catalog: Catalog, options: ExportOptions) -> Export:
    """``topology.conf`` for ``topology/block``: one block per NVLink rack (servers of more than 8 GPUs),
    else per scalable unit (rail fabrics), else per leaf group; every node in exactly one block."""
    names, per_server = _nodes(design, catalog, options)
    server = catalog.servers[design.cluster.server]
    servers = design.cluster.servers
    tree = topology.layout.tree
    if server.gpus > 8 and server.nvlink_gbps > 0:
        block_of_server, what = np.arange(servers), f"NVLink rack ({server.gpus} GPUs, {per_server} nodes)"
    elif tree is not None and tree.scalable_unit:
        block_of_server = np.arange(servers) // tree.scalable_unit
        what = f"scalable unit ({tree.scalable_unit} servers)"
    elif (topology.kind == KIND["switch"]).any():
        block_of_server, _, _ = leaf_groups(topology)
        what = "leaf group (servers under the same leaves)"
        if (block_of_server < 0).any():
            raise design.infeasible("fabric", "some servers reach no leaf switch", "")
    else:
        raise design.infeasible("fabric.topology", f"slurm-block needs NVLink domains larger than a server or "
                                f"scalable units; this {design.fabric.topology} design has neither",
                                "use slurm-tree")
    node_block = np.repeat(block_of_server, per_server)
    blocks = int(node_block.max()) + 1
    sizes = np.bincount(node_block, minlength=blocks)
    lines = [f"BlockName=block{b} Nodes={hostlist([names[i] for i in np.flatnonzero(node_block == b)])}"
             for b in range(blocks)]
    notes = []
    if sizes.min() != sizes.max():
        notes.append(f"blocks differ in size ({sizes.min()} to {sizes.max()} nodes): the last is partial; Slurm's "
                     "base blocks should be equal, so set BlockSizes= yourself")
    else:
        lines.append(f"BlockSizes={int(sizes[0])}")
    text = _header(design, "block", [f"one block per {what}: {blocks:,} blocks of {int(sizes.max())} node(s)"]
                   + notes) + lines
    return Export(files=(("", ("\n".join(text) + "\n").encode()),), notes=tuple(notes),
                  summary=f"{len(names):,} nodes in {blocks:,} blocks")
