"""Exports read back by parsers written here from each format's public definition (not topoplan's code),
and imported fabrics held to the generated designs they equal (issue 19)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from topoplan.cli import main
from topoplan.interop import ExportOptions, export
from topoplan.pipeline import build, evaluate
from topoplan.report import build_report
from topoplan.spec import design_from_data, load_design
from topoplan.topology import KIND, LINK_TIER

ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "tests/fixtures/ibnetdiscover/lab-2tier.txt"
# shipped designs small enough for the default suite (the 100k+ ones run in benchmarks/)
DESIGNS = ["fat-tree-1k", "fat-tree-16k", "fat-tree-k48", "rail-b200-16k", "rail-only-16k", "gb200-nvl72-4su",
           "superpod-h100-4su", "superpod-b300-xdr-8su", "hpn-pod-15k", "deepseek-v3-2048", "megatron-530b-2240",
           "gpt3-175b-12288"]


@pytest.fixture(scope="module")
def built(catalog):
    cache = {}

    def get(name):
        if name not in cache:
            design = load_design(str(ROOT / "designs" / f"{name}.yaml"), catalog)
            cache[name] = (design, build(design, catalog)[0])
        return cache[name]
    return get


def network_counts(topology):
    """(switches by tier, NIC-switch links, switch-switch links, total network Gb/s) from the arrays."""
    kind = topology.kind
    src, dst = topology.src[0::2], topology.dst[0::2]
    net = topology.link_tier[0::2] != LINK_TIER["host"]
    switches = np.bincount(topology.tier[kind == KIND["switch"]], minlength=3)
    to_nic = net & ((kind[src] == KIND["nic"]) | (kind[dst] == KIND["nic"]))
    return switches, int(to_nic.sum()), int((net & ~to_nic).sum()), float(topology.capacity_gbps[0::2][net].sum())


# ---------------------------------------------------------------- independent readers


def expand_hostlist(text: str) -> list[str]:
    """Slurm hostlist expression -> names (topology.conf(5): prefix[a-b,c] ...)."""
    names, depth, part = [], 0, ""
    for ch in text + ",":
        if ch == "," and depth == 0:
            match = re.fullmatch(r"(.*?)\[([^\]]+)\](.*)", part)
            if match:
                prefix, ranges, suffix = match.groups()
                for r in ranges.split(","):
                    lo, _, hi = r.partition("-")
                    for i in range(int(lo), int(hi or lo) + 1):
                        names.append(f"{prefix}{i:0{len(lo)}d}{suffix}")
            elif part:
                names.append(part)
            part = ""
            continue
        depth += ch == "["
        depth -= ch == "]"
        part += ch
    return names


def read_slurm(text: str) -> dict:
    entries = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        fields = dict(f.split("=", 1) for f in line.split())
        name = fields.get("SwitchName") or fields.get("BlockName") or "BlockSizes"
        entries[name] = fields
    return entries


def read_simai(text: str) -> dict:
    lines = text.splitlines()
    nodes, per_server, nvswitches, switches, links, gpu = lines[0].split()
    ids = [int(x) for x in lines[1].split()]
    rows = [line.split() for line in lines[2:]]
    assert all(re.fullmatch(r"[0-9.]+Gbps", r[2]) and re.fullmatch(r"[0-9.e-]+ms", r[3]) and r[4] == "0" for r in rows)
    return {"nodes": int(nodes), "per_server": int(per_server), "nvswitches": int(nvswitches),
            "switches": int(switches), "links": int(links), "gpu": gpu, "ids": ids,
            "pairs": [(int(r[0]), int(r[1]), float(r[2][:-4])) for r in rows]}


def read_htsim(text: str) -> dict:
    header, tiers, current = {}, [], None
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        assert len(words) == 2, line
        if words[0] == "Tier":
            current = {}
            tiers.append(current)
        elif current is None:
            header[words[0]] = int(words[1])
        else:
            current[words[0]] = float(words[1])
    return {"header": header, "tiers": tiers}


# ---------------------------------------------------------------- exports read back


@pytest.mark.parametrize("name", DESIGNS)
def test_slurm_tree_lists_every_node_once_under_a_leaf(built, catalog, name):
    design, topology = built(name)
    text = export(topology, design, catalog, "slurm-tree").files[0][1].decode()
    entries = read_slurm(text)
    nodes = [n for e in entries.values() if "Nodes" in e for n in expand_hostlist(e["Nodes"])]
    per_server = catalog.servers[design.cluster.server].gpus // 4 if catalog.servers[design.cluster.server].gpus > 8 \
        else 1
    assert len(nodes) == len(set(nodes)) == design.cluster.servers * per_server
    # the switches form trees: every switch but the roots is listed once under exactly one parent
    children = [c for e in entries.values() if "Switches" in e for c in expand_hostlist(e["Switches"])]
    assert len(children) == len(set(children)) and set(children) <= set(entries)
    assert all("Nodes" not in e or "Switches" not in e for e in entries.values())


@pytest.mark.parametrize("name", ["gb200-nvl72-4su", "rail-b200-16k", "fat-tree-1k"])
def test_slurm_block_partitions_the_nodes(built, catalog, name):
    design, topology = built(name)
    entries = read_slurm(export(topology, design, catalog, "slurm-block").files[0][1].decode())
    blocks = [expand_hostlist(e["Nodes"]) for k, e in entries.items() if k.startswith("block")]
    nodes = [n for b in blocks for n in b]
    assert len(nodes) == len(set(nodes))
    if name == "gb200-nvl72-4su":   # one block per NVL72 rack of 18 four-GPU trays
        assert len(blocks) == design.cluster.servers and {len(b) for b in blocks} == {18}
        assert entries["BlockSizes"]["BlockSizes"] == "18"
    if name == "rail-b200-16k":     # one block per scalable unit
        su = built(name)[1].layout.tree.scalable_unit
        assert {len(b) for b in blocks[:-1]} == {su}


def test_slurm_node_name_pattern_and_bad_patterns(built, catalog, tmp_path):
    design, topology = built("gb200-nvl72-4su")
    text = export(topology, design, catalog, "slurm-block", ExportOptions(node_names="gb-r{server:02d}-t{tray:02d}"))
    assert "gb-r00-t[00-17]" in text.files[0][1].decode()
    runner = CliRunner()
    for pattern, words in (("n{rack}", "bad node name pattern"), ("node", "the same name"), ("a b{node}", "space")):
        result = runner.invoke(main, ["export", str(ROOT / "designs/fat-tree-1k.yaml"), "--to", "slurm-tree",
                                      "-o", str(tmp_path / "t.conf"), "--node-names", pattern])
        assert result.exit_code == 2 and words in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("name", DESIGNS)
def test_simai_counts_read_back(built, catalog, name):
    design, topology = built(name)
    out = read_simai(export(topology, design, catalog, "simai").files[0][1].decode())
    switches, nic_links, switch_links, _ = network_counts(topology)
    server = catalog.servers[design.cluster.server]
    assert out["links"] == len(out["pairs"])
    assert out["nodes"] == design.gpus + out["nvswitches"] + out["switches"]
    assert out["switches"] == switches.sum() and out["per_server"] == server.gpus
    assert out["ids"] == list(range(design.gpus, out["nodes"]))
    gpu_links = [p for p in out["pairs"] if p[0] < design.gpus and p[1] >= design.gpus + out["nvswitches"]]
    # every NIC port becomes one link per GPU it serves, sharing its rate
    gpu_nics = np.asarray(server.gpu_nics)
    sharing = np.bincount(gpu_nics, minlength=server.nics)[gpu_nics]
    assert len(gpu_links) == nic_links * sharing[0]
    ends = topology.kind[topology.src[0::2]], topology.kind[topology.dst[0::2]]
    to_switch = ((ends[0] == KIND["nic"]) & (ends[1] == KIND["switch"])) | ((ends[1] == KIND["nic"]) & (ends[0] == KIND["switch"]))
    nic_gbps = float(topology.capacity_gbps[0::2][to_switch].sum())
    assert sum(p[2] for p in gpu_links) == pytest.approx(nic_gbps)
    assert len([p for p in out["pairs"] if p[0] >= design.gpus + out["nvswitches"]]) == switch_links


@pytest.mark.parametrize("name", ["fat-tree-1k", "fat-tree-16k", "fat-tree-k48", "rail-b200-16k", "gb200-nvl72-4su"])
def test_htsim_topo_holds_the_clos_counts(built, catalog, name):
    design, topology = built(name)
    out = read_htsim(export(topology, design, catalog, "htsim").files[0][1].decode())
    switches, nic_links, switch_links, _ = network_counts(topology)
    planes = topology.layout.planes
    nodes, tiers, pod = out["header"]["Nodes"], out["header"]["Tiers"], out["header"]["Podsize"]
    t = out["tiers"]
    assert nodes * planes == nic_links and tiers == len(t) == topology.layout.tiers and nodes % pod == 0
    leaves = nodes // int(t[0]["Radix_Down"])
    assert leaves * planes == switches[0]
    assert leaves * t[0]["Radix_Up"] * planes == (switch_links if tiers == 2 else switch_links / 2)
    spines = leaves * t[0]["Radix_Up"] / t[1]["Radix_Down"]
    assert spines * planes == switches[1]
    if tiers == 3:
        cores = spines * t[1]["Radix_Up"] / t[2]["Radix_Down"]
        assert cores * planes == switches[2]
    assert t[0]["Downlink_speed_Gbps"] == topology.layout.link_gbps


def test_htsim_and_astra_refuse_what_they_cannot_hold(built, catalog, make_design):
    design, topology = built("rail-only-16k")
    with pytest.raises(Exception, match="separate Clos per rail"):
        export(topology, design, catalog, "htsim")
    railx = make_design(cluster={"server": "railx-node-8", "servers": 64, "gpus": None},
                        fabric={"topology": "railx", "switch": None, "railx": {"columns": 8, "rows": 8,
                                                                              "ocs": "calient-s320"}})
    grid = build(railx, catalog)[0]
    for fmt, words in (("astra-sim", "several rings"), ("htsim", "not a folded Clos"), ("simai", "circuits"),
                       ("slurm-tree", "switched fabric")):
        with pytest.raises(Exception, match=words):
            export(grid, railx, catalog, fmt)
    edges = export(grid, railx, catalog, "infragraph").files[0][1]
    assert json.loads(edges)["edges"]


@pytest.mark.parametrize("name", ["fat-tree-1k", "gb200-nvl72-4su", "rail-only-16k", "hpn-pod-15k"])
def test_astra_sim_dimensions_multiply_to_the_gpus(built, catalog, name, tmp_path):
    design, topology = built(name)
    files = dict(export(topology, design, catalog, "astra-sim").files)
    network = yaml.safe_load(files["network.yml"])
    assert int(np.prod(network["npus_count"])) == design.gpus
    assert len(network["topology"]) == len(network["bandwidth"]) == len(network["latency"]) == len(network["npus_count"])
    assert network["bandwidth"][-1] == pytest.approx(topology.layout.injection_gbps_per_gpu / 8, abs=0.05)
    system = json.loads(files["system.json"])
    assert len(system["all-reduce-implementation"]) == len(network["npus_count"])
    assert json.loads(files["remote_memory.json"]) == {"memory-type": "NO_MEMORY_EXPANSION"}
    notes = files["NOTES.md"].decode()
    assert "rails" in notes
    if design.fabric.oversubscription["leaf"] > 1:
        assert "oversubscription" in notes


@pytest.mark.parametrize("name", DESIGNS)
def test_infragraph_counts_read_back(built, catalog, name):
    design, topology = built(name)
    data = json.loads(export(topology, design, catalog, "infragraph").files[0][1])
    switches, nic_links, switch_links, total_gbps = network_counts(topology)
    instances = {i["name"]: i for i in data["instances"]}
    devices = {d["name"]: d for d in data["devices"]}
    assert instances["server"]["count"] == design.cluster.servers
    for tier, name_ in enumerate(("leaf", "spine", "core")):
        assert instances.get(name_, {"count": 0})["count"] == switches[tier]
    assert len(data["edges"]) == nic_links + switch_links
    links = {link["name"]: link["physical"]["bandwidth"]["gigabits_per_second"] for link in data["links"]}
    assert sum(links[e["link"]] for e in data["edges"]) == pytest.approx(total_gbps)
    # every endpoint names an instance row and a component of its device that exist, each switch port once
    used = set()
    for edge in data["edges"]:
        for end in (edge["ep1"], edge["ep2"]):
            inst, row = re.fullmatch(r"(\w+)\[(\d+)\]", end["instance"]).groups()
            comp, index = re.fullmatch(r"(\w+)\[(\d+)\]", end["component"]).groups()
            assert int(row) < instances[inst]["count"]
            counts = {c["name"]: c["count"] for c in devices[instances[inst]["device"]]["components"]}
            assert int(index) < counts[comp]
            if inst != "server" or comp == "nicport":
                assert (inst, row, comp, index) not in used
                used.add((inst, row, comp, index))


def test_infragraph_yaml_and_the_sdk_schema(built, catalog):
    design, topology = built("fat-tree-1k")
    text = export(topology, design, catalog, "infragraph", ExportOptions(suffix=".yaml")).files[0][1]
    data = yaml.safe_load(text)
    assert len(data["edges"]) == 2048
    infragraph = pytest.importorskip("infragraph")   # optional: pip install 'topoplan[interop]'
    infrastructure = infragraph.Infrastructure()
    infrastructure.deserialize(text.decode())
    assert len(infrastructure.edges) == 2048


# ---------------------------------------------------------------- ibnetdiscover in


def test_hand_written_ibnetdiscover_fixture_reads_as_a_two_tier_tree(catalog):
    from topoplan.interop import ibnetdiscover

    found = ibnetdiscover.parse(LAB.read_text(), str(LAB))
    assert found.is_switch.sum() == 4 and (~found.is_switch).sum() == 8
    assert found.a.size == 16 and set(found.gbps.tolist()) == {400.0}
    data = {"name": "lab", "cluster": {"server": "generic-1gpu"},
            "fabric": {"topology": "imported", "file": str(LAB)},
            "workload": {"collectives": [{"name": "ar", "op": "allreduce", "group": "world", "size": "1GiB",
                                          "algorithm": "ring"}]}}
    evaluation = evaluate(design_from_data(data, catalog), catalog)
    report = build_report(evaluation)
    assert report["fabric"]["switches"]["by_tier"] == {"leaf": 2, "spine": 2}
    assert report["fabric"]["switches"]["by_model"] == {"nvidia-qm9700": 4}
    assert report["bisection"]["gbps"] == 1600 and report["diameter_hops"] == 4
    assert evaluation.topology.layout.family == "clos" and report["collectives"][0]["engine"] == "clos"


def test_report_fabric_cli_and_its_errors(tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["report", "--fabric", str(LAB), "--server", "generic-1gpu", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["fabric"]["links"]["total"] == 16
    wrong = runner.invoke(main, ["report", "--fabric", str(LAB), "--server", "dgx-h100"])
    assert wrong.exit_code == 2 and "has 1 HCA(s); a dgx-h100 has 8" in wrong.stderr
    missing = runner.invoke(main, ["report", "--fabric", str(LAB)])
    assert missing.exit_code == 2 and "--server" in missing.stderr


def _hostile(tmp_path, text, name="fabric.txt"):
    path = tmp_path / name
    path.write_text(text)
    result = CliRunner().invoke(main, ["report", "--fabric", str(path), "--server", "generic-1gpu"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    return result.stderr


def test_truncated_and_malformed_ibnetdiscover_give_file_line_errors(tmp_path):
    lines = LAB.read_text().splitlines()
    truncated = _hostile(tmp_path, "\n".join(lines[:60]))
    assert re.search(r"fabric\.txt:\d+: .*(truncated|does not list it back)", truncated)
    assert len(truncated.strip().splitlines()) > 1           # every problem at once
    garbled = lines[:]
    garbled[12] = "[1]\t\"S-fc6a1c0300a1b200\"[33]\t\t# no speed here"
    garbled[20] = "this is not ibnetdiscover"
    errors = _hostile(tmp_path, "\n".join(garbled))
    assert "fabric.txt:13: no active link width and speed" in errors and "fabric.txt:21: not an ibnetdiscover" in errors
    assert "no Switch or Ca block" in _hostile(tmp_path, "\n\n# nothing\n")
    binary = _hostile(tmp_path, "\x00\xff" * 100)
    assert "fabric.txt:1:" in binary
    nameless = LAB.read_text().replace('"node01 mlx5_0"', '"MT4129"')
    assert "not '<host> <hca>'" in _hostile(tmp_path, nameless)


def test_malformed_topology_json_gives_file_line_errors(tmp_path, catalog):
    design = load_design(str(ROOT / "designs/fat-tree-1k.yaml"), catalog)
    data = build(design, catalog)[0].to_json_dict()
    text = json.dumps(data, indent=1)
    assert "malformed JSON" in _hostile(tmp_path, text[: len(text) // 2], "fabric.json")
    data["links"]["src"] = data["links"]["src"][:-3]
    assert "rows, but links.src has" in _hostile(tmp_path, json.dumps(data), "fabric.json")


def test_spec_fabric_file_rules(tmp_path, catalog):
    from topoplan.errors import SpecError

    shutil.copy(LAB, tmp_path / "lab.txt")
    spec = tmp_path / "lab.yaml"
    spec.write_text("name: lab\ncluster: {server: generic-1gpu, servers: 4}\n"
                    "fabric: {topology: imported, file: ../lab.txt, tiers: 2}\n")
    with pytest.raises(SpecError) as err:
        load_design(str(spec), catalog)
    assert "climbs out of the spec's directory" in str(err.value) and "comes from its file" in str(err.value)
    spec.write_text("name: lab\ncluster: {server: generic-1gpu, servers: 4}\nfabric: {topology: imported, file: lab.txt}\n")
    with pytest.raises(SpecError, match="has 8 servers"):
        load_design(str(spec), catalog)
    spec.write_text("name: lab\ncluster: {server: generic-1gpu}\nfabric: {topology: imported, file: lab.txt}\n")
    assert load_design(str(spec), catalog).cluster.servers == 8


def _imported_twin(design_file: str, fabric: Path, catalog):
    data = yaml.safe_load(open(design_file))
    cabling = data["fabric"].get("cabling")
    data["fabric"] = {"topology": "imported", "file": str(fabric), **({"cabling": cabling} if cabling else {})}
    data["cluster"] = {"server": data["cluster"]["server"]}
    return design_from_data(data, catalog)


def _same_report(a: dict, b: dict) -> None:
    for key in ("switches", "links", "pods", "tiers", "injection_gbps_per_gpu", "link_gbps_by_tier"):
        assert a["fabric"][key] == b["fabric"][key], key
    assert a["bisection"]["gbps"] == b["bisection"]["gbps"]
    got, expected = a["bisection"]["permutation_per_gpu_gbps"], b["bisection"]["permutation_per_gpu_gbps"]
    assert (got is None and expected is None) or got == pytest.approx(expected, rel=1e-9)   # None: not computed
    assert a["bisection"]["permutation_note"] == b["bisection"]["permutation_note"]
    assert a["diameter_hops"] == b["diameter_hops"] and a["cost"]["total_usd"] == b["cost"]["total_usd"]
    assert len(a["collectives"]) == len(b["collectives"])
    for x, y in zip(a["collectives"], b["collectives"]):
        assert (x["name"], x["algorithm"], x["engine"]) == (y["name"], y["algorithm"], y["engine"])
        assert y["time_s"] == pytest.approx(x["time_s"], rel=1e-9)
        assert y["busbw_GBps"] == pytest.approx(x["busbw_GBps"], rel=1e-9)


@pytest.mark.parametrize("name", ["fat-tree-1k", "fat-tree-16k", "rail-b200-16k", "rail-only-16k", "gb200-nvl72-4su",
                                  "megatron-530b-2240", "hpn-pod-15k"])
def test_imported_ibnetdiscover_equals_the_generated_design(catalog, tmp_path, name):
    spec = str(ROOT / "designs" / f"{name}.yaml")
    design = load_design(spec, catalog)
    fabric = tmp_path / "fabric.txt"
    fabric.write_bytes(export(build(design, catalog)[0], design, catalog, "ibnetdiscover").files[0][1])
    twin = _imported_twin(spec, fabric, catalog)
    _same_report(build_report(evaluate(design, catalog)), build_report(evaluate(twin, catalog)))


def test_topoplan_json_reads_back_to_the_same_report(catalog, tmp_path):
    spec = str(ROOT / "designs/superpod-h100-4su.yaml")
    design = load_design(spec, catalog)
    fabric = tmp_path / "fabric.json"
    fabric.write_text(json.dumps(build(design, catalog)[0].to_json_dict()))
    _same_report(build_report(evaluate(design, catalog)), build_report(evaluate(_imported_twin(spec, fabric, catalog),
                                                                                   catalog)))


def test_a_miswired_fabric_falls_back_to_the_generic_engine(catalog, tmp_path):
    """A cable between the two leaves: no longer a tree, so the generic ecmp engine routes it."""
    text = LAB.read_text()
    for mine, other, lid in (("b200", "b300", 2), ("b300", "b200", 1)):
        header = f'"S-fc6a1c0300a1{mine}"\t\t# "MF0;lab-leaf0{3 - lid}:MQM9700/U1" enhanced port 0 lid {3 - lid} lmc 0'
        assert header in text
        text = text.replace(header, header + f'\n[40]\t"S-fc6a1c0300a1{other}"[40]\t\t# "MF0;lab-leaf0{lid}:MQM9700/U1" '
                            f"lid {lid} 4xNDR")
    (tmp_path / "miswired.txt").write_text(text)
    data = {"name": "lab", "cluster": {"server": "generic-1gpu"},
            "fabric": {"topology": "imported", "file": str(tmp_path / "miswired.txt")},
            "workload": {"collectives": [{"name": "ar", "op": "allreduce", "group": "world", "size": "1GiB"}]}}
    report = build_report(evaluate(design_from_data(data, catalog), catalog))
    assert report["collectives"][0]["engine"] == "ecmp"
    assert any("not a uniform tree" in w for w in report["warnings"])
    assert report["bisection"]["method"].startswith("upper bound")


def test_export_cli_writes_atomically_and_refuses_bad_outputs(tmp_path):
    runner = CliRunner()
    spec = str(ROOT / "designs/fat-tree-1k.yaml")
    ok = runner.invoke(main, ["export", spec, "--to", "astra-sim", "-o", str(tmp_path / "astra")])
    assert ok.exit_code == 0 and sorted(p.name for p in (tmp_path / "astra").iterdir()) == \
        ["NOTES.md", "network.yml", "remote_memory.json", "system.json"]
    again = runner.invoke(main, ["export", spec, "--to", "astra-sim", "-o", str(tmp_path / "astra")])
    assert again.exit_code == 2 and "not empty" in again.stderr
    into_spec = runner.invoke(main, ["export", spec, "--to", "simai", "-o", spec])
    assert into_spec.exit_code == 2 and "input" in into_spec.stderr
    unknown = runner.invoke(main, ["export", spec, "--to", "ns3", "-o", str(tmp_path / "x")])
    assert unknown.exit_code == 2
    helptext = runner.invoke(main, ["export", "--help"]).output
    assert "slurm-tree" in helptext and "--node-names" in helptext and "Examples" in helptext


def test_graphml_node_ids_are_readable_names(tmp_path):
    out = tmp_path / "f.graphml"
    result = CliRunner().invoke(main, ["build", str(ROOT / "designs/fat-tree-1k.yaml"), "-o", str(out)])
    assert result.exit_code == 0
    text = out.read_text()
    assert '<node id="p0.leaf0">' in text and '<node id="gpu0">' in text
