"""Host graphs from real files: NCCL topology XML (Azure ND A100 v4 / ND H100 v5) and nvidia-smi topo -m."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from topoplan.cli import main
from topoplan.errors import SpecError
from topoplan.host.graph import HostGraph, assign_nics
from topoplan.host import nccl_xml, nvidia_smi, read_host

ROOT = Path(__file__).resolve().parent.parent
NCCL = ROOT / "tests" / "fixtures" / "nccl"
SMI = ROOT / "tests" / "fixtures" / "nvidia-smi"


def _by_label(graph):
    return {graph.label[i]: i for i in range(len(graph.kind))}


@pytest.mark.parametrize("file,cpus,switches,gbps,inter", [("azure-ndv4-topo.xml", 4, 4, 24.0, 16.0),
                                                            ("azure-ndv5-topo.xml", 2, 8, 48.0, 22.0)])
def test_azure_topology_files(file, cpus, switches, gbps, inter):
    """8 GPUs and 8 NICs; NUMA nodes and switches as in the file; GPU-NIC under one switch PIX; across
    sockets SYS; PCIe by NCCL's rule (Gen4 x16 24 GB/s, Gen5 x16 48 GB/s); AMD 16 / Sapphire Rapids 22."""
    graph = nccl_xml.read(str(NCCL / file))
    assert len(graph.gpus()) == 8 and len(graph.nics()) == 8
    assert len(graph.of_kind("cpu")) == cpus and len(graph.of_kind("pci")) == switches
    for gpu in graph.gpus():
        siblings = [n for n in graph.nics() if graph.parent[n] == graph.parent[gpu]]
        assert siblings and all(graph.path_class(gpu, n) == "PIX" for n in siblings)
        assert graph.path_GBps(gpu, siblings[0]) == gbps
        other_socket = [n for n in graph.nics() if graph.chain(n)[-1] != graph.chain(gpu)[-1]]
        assert all(graph.path_class(gpu, n) == "SYS" for n in other_socket)
        assert graph.path_GBps(gpu, other_socket[0]) == min(gbps, inter)
    assert graph.inter_cpu_GBps == inter
    assignment = assign_nics(graph)
    assert all(graph.path_class(g, n) == "PIX" for g, n in assignment.items())
    assert len(set(assignment.values())) == 8


def test_nccl_pcie_bandwidth_rule():
    """formats_and_user_asks.md 4.2: width x lane speed / 80; unknown speed -> Gen3, width 0 -> 16."""
    assert nccl_xml.pci_GBps("16.0 GT/s PCIe", "16") == 24.0
    assert nccl_xml.pci_GBps("32.0 GT/s PCIe", "16") == 48.0
    assert nccl_xml.pci_GBps("8 GT/s", "8") == 6.0
    assert nccl_xml.pci_GBps("weird", "0") == 12.0


def test_nvlink_and_nic_speed_from_a_bare_metal_dump(tmp_path):
    xml = tmp_path / "dgx.xml"
    xml.write_text("""<system version="1">
  <cpu numaid="0" vendor="AuthenticAMD" familyid="143" modelid="49">
    <pci busid="0000:01:00.0" class="0x060400" link_speed="16.0 GT/s PCIe" link_width="16">
      <pci busid="0000:07:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16">
        <gpu dev="0" sm="80" rank="0" gdr="1"><nvlink target="0000:c7:00.0" count="12" tclass="0x068000"/></gpu>
      </pci>
      <pci busid="0000:61:00.0" class="0x020700" link_speed="16.0 GT/s PCIe" link_width="16" newattr="kept">
        <nic><net name="mlx5_4" dev="4" speed="200000" port="1"/></nic>
      </pci>
      <pci busid="0000:08:00.0" class="0x030200" link_speed="16.0 GT/s PCIe" link_width="16">
        <gpu dev="1" sm="80" rank="1" gdr="1"><nvlink target="0000:c7:00.0" count="12" tclass="0x068000"/></gpu>
      </pci>
    </pci>
  </cpu>
</system>
""")
    graph = nccl_xml.read(str(xml))
    labels = _by_label(graph)
    a, b, nic = labels["0000:07:00.0"], labels["0000:08:00.0"], labels["mlx5_4"]
    assert graph.path_class(a, b) == "NV12"
    assert graph.path_GBps(a, b) == 12 * 20.0
    assert graph.path_class(a, nic) == "PIX"
    assert graph.path_GBps(a, nic) == 24.0  # the NIC's 200G (25 GB/s) is above the Gen4 x16 link
    assert graph.attributes[nic]["newattr"] == "kept"  # unknown attributes are kept, not fatal


DGX_CLOSEST = {"GPU0": "mlx5_0", "GPU1": "mlx5_3", "GPU2": "mlx5_4", "GPU3": "mlx5_5", "GPU4": "mlx5_6",
               "GPU5": "mlx5_9", "GPU6": "mlx5_10", "GPU7": "mlx5_11"}


@pytest.mark.parametrize("file", ["dgx-h100.txt", "dgx-h100-lost-tabs.txt", "dgx-h100-old-driver.txt"])
def test_dgx_h100_nvidia_smi(file):
    graph = nvidia_smi.read(str(SMI / file))
    assert not graph.has_bandwidth
    labels = _by_label(graph)
    gpus = [labels[f"GPU{i}"] for i in range(8)]
    assert all(graph.path_class(a, b) == "NV18" for a in gpus for b in gpus if a != b)
    assignment = assign_nics(graph)
    assert {graph.label[g]: graph.label[n] for g, n in assignment.items()} == DGX_CLOSEST
    assert graph.path_class(labels["GPU0"], labels["mlx5_6"]) == "SYS"
    if "old-driver" not in file:
        assert graph.affinity[labels["GPU5"]] == {"cpus": "56-111,168-223", "numa": "1"}


def test_assignment_never_doubles_up_while_a_nic_is_idle():
    """A PCIe-only host: 8 GPUs, 4 NICs, every GPU closest to NIC 0. The assignment uses all 4 NICs,
    two GPUs each, and prefers the closer NIC within that rule."""
    graph = HostGraph(source="synthetic", has_bandwidth=False)
    gpus = [graph.add("gpu", f"GPU{i}", -1, None) for i in range(8)]
    nics = [graph.add("nic", f"NIC{i}", -1, None) for i in range(4)]
    for g in gpus:
        for j, n in enumerate(nics):
            graph.classes[(g, n)] = "PIX" if j == 0 else "NODE" if j < 3 else "SYS"
    assignment = assign_nics(graph)
    counts = [list(assignment.values()).count(n) for n in nics]
    assert counts == [2, 2, 2, 2]


@pytest.mark.parametrize("file,message", [
    ("empty.txt", "the matrix has a header but no rows"),
    ("mismatched-columns.txt", "is not a path class"),
    ("unknown-token.txt", "'NVX' is not a path class"),
])
def test_bad_matrices_exit_2_with_line(in_root, file, message):
    result = CliRunner().invoke(main, ["host", f"tests/fixtures/nvidia-smi/{file}"], catch_exceptions=False)
    assert result.exit_code == 2
    assert message in result.stderr and f"{file}:" in result.stderr and "Traceback" not in result.stderr


def test_malformed_xml_exit_2_with_line(in_root):
    result = CliRunner().invoke(main, ["host", "tests/fixtures/bad-topo.xml"], catch_exceptions=False)
    assert result.exit_code == 2
    assert result.stderr.startswith("tests/fixtures/bad-topo.xml:4: malformed XML")


def test_no_matrix_at_all(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("this is not nvidia-smi output\n")
    with pytest.raises(SpecError):
        read_host(str(text))


def test_host_command_formats():
    for fmt in ("table", "markdown", "json"):
        result = CliRunner().invoke(main, ["host", str(NCCL / "azure-ndv4-topo.xml"), "--format", fmt])
        assert result.exit_code == 0
    report = json.loads(result.output)
    assert report["gpus"] == 8 and report["cpus"] == 4
    assert any("cross the CPU sockets" in w for w in report["warnings"])


# --- templates and ring analysis ----------------------------------------------------------------------

def _template(catalog, server_id, **host):
    import dataclasses

    from topoplan.host.template import host_graph

    server = catalog.servers[server_id]
    if host:
        server = dataclasses.replace(server, host={**server.host, **host})
    return host_graph(server, catalog)


@pytest.mark.parametrize("server_id,sockets,switches,gpu_nic_gbps,gpu_gpu", [
    ("dgx-h100", 2, 4, 48.0, "NV18"), ("hgx-a100", 2, 4, 24.0, "NV12"), ("pcie-8gpu-l40s", 2, 2, 24.0, "PIX")])
def test_templates(catalog, server_id, sockets, switches, gpu_nic_gbps, gpu_gpu):
    graph = _template(catalog, server_id)
    assert len(graph.of_kind("cpu")) == sockets and len(graph.of_kind("pci")) == switches
    gpus, nics = graph.gpus(), graph.nics()
    assert len(gpus) == 8 and len(nics) == catalog.servers[server_id].nics
    assignment = assign_nics(graph)
    assert all(graph.path_class(g, n) == "PIX" and graph.path_GBps(g, n) == gpu_nic_gbps
               for g, n in assignment.items())
    assert graph.path_class(gpus[0], gpus[1]) == gpu_gpu
    assert graph.path_class(gpus[0], gpus[7]) == ("SYS" if gpu_gpu == "PIX" else gpu_gpu)


def test_pcie_only_ring_and_shared_nics(catalog):
    """PCIe-only, 4 GPUs and 2 NICs per Gen4 switch, one switch per socket: any ring crosses the sockets
    once each way, so busbw is the inter-socket 22 GB/s (Sapphire Rapids in NCCL's model), at least the
    naive order's; two GPUs share each NIC's x16 link when all send at once: 12 GB/s each."""
    from topoplan.host.graph import best_ring, concurrent_GBps, ring_busbw

    graph = _template(catalog, "pcie-8gpu-l40s")
    naive, why = ring_busbw(graph, graph.gpus())
    order, best, best_why = best_ring(graph)
    assert naive == 22.0 and "inter-socket" in why
    assert best >= naive and "share" in best_why
    rates, load_why = concurrent_GBps(graph, list(assign_nics(graph).items()))
    assert rates == [12.0] * 8 and "2 transfer(s)" in load_why


def test_ring_search_beats_a_bad_naive_order(catalog):
    """GPUs interleaved over the sockets: the naive ring crosses them on every hop (4 transfers each way
    on a 22 GB/s link: 5.5 GB/s); the search finds the order that crosses twice (22 GB/s)."""
    from topoplan.host.graph import best_ring, ring_busbw

    graph = _template(catalog, "pcie-8gpu-l40s", switches=[
        {"socket": 0, "gen": 4, "lanes": 16, "gpus": [0, 2, 4, 6], "nics": [0, 1]},
        {"socket": 1, "gen": 4, "lanes": 16, "gpus": [1, 3, 5, 7], "nics": [2, 3]}])
    assert ring_busbw(graph, graph.gpus())[0] == pytest.approx(5.5)
    order, best, _ = best_ring(graph)
    assert best == pytest.approx(22.0)
    labels = [graph.label[g] for g in order]
    crossings = sum(1 for a, b in zip(labels, labels[1:] + labels[:1]) if int(a[3]) % 2 != int(b[3]) % 2)
    assert crossings == 2


def test_host_command_on_a_spec(in_root):
    result = CliRunner().invoke(main, ["host", "designs/fat-tree-1k.yaml", "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0
    report = json.loads(result.output)
    assert report["ring"]["best_busbw_GBps"] == 450.0  # NVLink4: 450 GB/s per direction
    assert {a["nic"] for a in report["assignment"]} == {f"NIC{i}" for i in range(8)}


def test_expand_hosts_puts_the_pcie_tree_in_the_fabric(make_design, catalog):
    """PCIe-only servers, 2 GPUs per NIC: flat, the two share the NIC's 400G port (200 Gb/s each); with
    expand_hosts they also share the NIC's Gen4 x16 link (NCCL 24 GB/s = 192 Gb/s): 96 Gb/s each."""
    import numpy as np

    from topoplan.flow import route
    from topoplan.flow.metrics import arc_classes, phase_result
    from topoplan.flow.traffic import Demand
    from topoplan.generators import generate

    rates = {}
    for expand in (False, True):
        design = make_design(cluster={"server": "pcie-8gpu-l40s", "gpus": 64, "expand_hosts": expand})
        topology = generate(design, catalog)
        assert topology.check() == []
        gpus = topology.gpus
        load = route(topology, Demand(gpus, np.roll(gpus, 8), 1e9)).load
        seconds = (load / (topology.capacity_gbps * 1e9 / 8)).max()
        rates[expand] = 8 / seconds
        result = phase_result(topology, arc_classes(topology), load, "p", 1, 0)
        assert result.bottleneck == ("pcie" if expand else "leaf")
    assert rates == {False: pytest.approx(200.0), True: pytest.approx(96.0)}


def test_ring_search_beyond_exact_uses_routing(catalog):
    """16 GPUs interleaved over two sockets (too many for the exact search): routing plus 2-opt still
    finds a ring that crosses the sockets only twice."""
    import dataclasses

    from topoplan.host.template import host_graph
    from topoplan.host.graph import best_ring, ring_busbw

    base = catalog.servers["pcie-8gpu-l40s"]
    server = dataclasses.replace(base, gpus=16, gpu_nics=tuple(i // 4 for i in range(16)), host={
        **base.host, "switches": [{"socket": 0, "gen": 4, "lanes": 16, "gpus": list(range(0, 16, 2)), "nics": [0, 1]},
                                  {"socket": 1, "gen": 4, "lanes": 16, "gpus": list(range(1, 16, 2)), "nics": [2, 3]}]})
    graph = host_graph(server, catalog)
    naive = ring_busbw(graph, graph.gpus())[0]
    _order, best, _why = best_ring(graph)
    assert naive == pytest.approx(22.0 / 8)
    assert best == pytest.approx(22.0)


def test_nvidia_smi_borrows_bandwidths_from_a_template(in_root):
    """Without --server the matrix has no speeds; with it, each pair takes the template's bandwidth for
    the nearest path class from the same GPU (DGX H100: PXB to its NIC ~ the template's PIX, Gen5 48 GB/s)."""
    plain = json.loads(CliRunner().invoke(main, ["host", "tests/fixtures/nvidia-smi/dgx-h100.txt",
                                                 "--format", "json"]).output)
    assert all(a["GBps"] is None for a in plain["assignment"])
    borrowed = json.loads(CliRunner().invoke(main, ["host", "tests/fixtures/nvidia-smi/dgx-h100.txt", "--server",
                                                    "dgx-h100", "--format", "json"]).output)
    assert all(a["GBps"] == 48.0 for a in borrowed["assignment"])
    assert any("bandwidths by path class" in w for w in borrowed["warnings"])
    bad = CliRunner().invoke(main, ["host", "tests/fixtures/nvidia-smi/dgx-h100.txt", "--server", "dgx-h10"])
    assert bad.exit_code == 2 and "did you mean 'dgx-h100'" in bad.stderr


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_mangled_nvidia_smi_text_is_read_or_refused(data):
    """Random cuts, duplications and stray tokens in a real matrix: a host graph or a SpecError, never
    anything else."""
    lines = (SMI / "dgx-h100.txt").read_text().splitlines()
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(lines) - 1))
        action = data.draw(st.sampled_from(["drop", "dup", "cut", "token", "tabs"]))
        if action == "drop":
            del lines[index]
        elif action == "dup":
            lines.insert(index, lines[index])
        elif action == "cut":
            lines[index] = lines[index][: data.draw(st.integers(0, max(0, len(lines[index]))))]
        elif action == "token":
            lines[index] += "\t" + data.draw(st.sampled_from(["NV4", "FOO", "X", "PIX", "", "GPU9"]))
        else:
            lines[index] = lines[index].replace("\t", " ")
        if not lines:
            break
    try:
        nvidia_smi.parse("\n".join(lines), "mangled.txt")
    except SpecError as err:
        assert all(str(p).startswith("mangled.txt") for p in err.problems)


@settings(max_examples=80, deadline=None)
@given(cut=st.integers(0, 3000))
def test_truncated_nccl_xml_is_read_or_refused(tmp_path_factory, cut):
    text = (NCCL / "azure-ndv5-topo.xml").read_text()[:cut]
    path = tmp_path_factory.mktemp("xml") / "topo.xml"
    path.write_text(text)
    try:
        nccl_xml.read(str(path))
    except SpecError as err:
        assert all(str(p).startswith(str(path)) for p in err.problems)
