"""Cluster specs: presets, YAML, topology arrays, and clear errors for specs that do not parse."""

from __future__ import annotations

import pytest

from scheduler.core.model import JobSpec, LinkKind, SpecError, parse_cluster


def test_dgx_preset_topology() -> None:
    c = parse_cluster("dgx-a100:256")
    assert (c.num_nodes, c.num_gpus, c.num_racks) == (256, 2048, 16)
    assert set(c.gpu_mem.tolist()) == {80.0}
    assert c.node_nvlink.all() and (c.node_socket == -1).all()
    nic = c.link_capacity[c.node_nic[0]]
    assert nic == pytest.approx(25.0)  # 200 Gb/s
    # Rack uplink: 16 NICs / oversubscription 2.
    assert c.link_capacity[c.rack_uplink[0]] == pytest.approx(16 * 25.0 / 2)
    # Every GPU has its own NVLink port.
    assert len(set(c.gpu_local_link.tolist())) == 2048
    assert all(c.link_kind[link] is LinkKind.NVLINK for link in c.gpu_local_link[:8])


def test_pcie_preset_has_two_switches_and_a_socket_link() -> None:
    c = parse_cluster("pcie-v100:2")
    assert c.num_gpus == 16 and set(c.gpu_mem.tolist()) == {32.0}
    switches = c.gpu_local_link[:8].tolist()
    assert switches == [switches[0]] * 4 + [switches[4]] * 4 and switches[0] != switches[4]
    assert c.link_kind[c.node_socket[0]] is LinkKind.SOCKET
    assert c.link_capacity[c.node_nic[1]] == pytest.approx(12.5)  # 100 Gb/s


def test_heterogeneous_spec_and_reference_gpu() -> None:
    c = parse_cluster("dgx-a100:1,pcie-v100:3")
    assert c.num_gpus == 32 and c.describe()["gpu_types"] == {"A100-80GB": 8, "V100-32GB": 24}
    assert c.reference_speed == 1.0  # the most common GPU: V100


def test_yaml_cluster(tmp_path) -> None:
    path = tmp_path / "lab.yaml"
    path.write_text(
        "nodes_per_rack: 2\noversubscription: 4\ngroups:\n"
        "  - preset: pcie-t4\n    count: 3\n"
        "  - count: 1\n    node: {gpu: H100-80GB, gpus_per_node: 4, interconnect: nvlink, nic_gbps: 400}\n"
    )
    c = parse_cluster(str(path))
    assert c.name == "lab" and c.num_nodes == 4 and c.num_racks == 2 and c.num_gpus == 16
    assert c.link_capacity[c.rack_uplink[0]] == pytest.approx(2 * 25 / 8 / 4)


@pytest.mark.parametrize(("text", "message"), [
    ("dgx:4", "unknown preset 'dgx'.*choose one of dgx-a100, pcie-v100"),
    ("dgx-a100", "needs a node count"),
    ("dgx-a100:x", "node count 'x'.*not an integer"),
    ("dgx-a100:0", "at least 1"),
    ("missing.yaml", "missing.yaml does not exist"),
])
def test_bad_cluster_specs_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_cluster(text)


@pytest.mark.parametrize(("body", "message"), [
    ("groups: []", "groups: List should have at least 1 item"),
    ("groups:\n  - count: 2", "groups.0: Value error, give exactly one of 'preset' or 'node'"),
    ("groups:\n  - {count: 1, preset: nope}", "unknown preset 'nope'"),
    ("groups:\n  - {count: 1, node: {gpu: Z80, gpus_per_node: 8, interconnect: nvlink}}", "unknown gpu 'Z80'"),
    ("groups:\n  - {count: 1, node: {gpu: T4, gpus_per_node: 3, interconnect: pcie, pcie_switches: 2}}",
     "split evenly"),
    ("oversubscription: 0.5\ngroups:\n  - {count: 1, preset: dgx-a100}", "oversubscription: Input should be greater"),
    ("groups: [", "not valid YAML"),
    ("- 1", "expected a mapping"),
])
def test_bad_yaml_names_the_field(tmp_path, body: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    with pytest.raises(SpecError, match=message) as info:
        parse_cluster(str(path))
    assert str(path) in str(info.value)


@pytest.mark.parametrize("gpus", [0, -1, 1.5, 2.25])
def test_job_spec_refuses_bad_gpu_counts(gpus: float) -> None:
    with pytest.raises(ValueError, match="num_gpus"):
        JobSpec("x", 0, gpus, 10, "A3C")


def test_job_spec_shape() -> None:
    assert JobSpec("x", 0, 0.25, 10, "A3C").workers == 1 and JobSpec("x", 0, 0.25, 10, "A3C").share == 0.25
    assert JobSpec("x", 0, 8, 10, "A3C").workers == 8 and JobSpec("x", 0, 8, 10, "A3C").share == 1.0
