"""What real Nodes change on the host is recorded before and undone after (issue 19: `sunk dev
down` leaves the host as it found it), and their addresses never collide."""

from __future__ import annotations

import ipaddress
import subprocess
from pathlib import Path

import pytest

from sunk_dev import ClusterSpec, DevCluster, hostnet, netpol, realcluster, slurmroot
from sunk_dev.errors import DevClusterError
from sunk_dev.layout import Layout, Ports
from sunk_dev.realnode import RealNode


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in /proc/sys and claim file; `ip`, `nft` and `iptables` calls are not run."""
    proc_sys = tmp_path / "sys"
    for name, value in {
        "vm/overcommit_memory": "0",
        "kernel/panic": "1",
        "kernel/panic_on_oops": "0",
        "net/ipv4/ip_forward": "0",
    }.items():
        (proc_sys / name).parent.mkdir(parents=True, exist_ok=True)
        (proc_sys / name).write_text(value + "\n")
    monkeypatch.setattr(hostnet, "PROC_SYS", proc_sys)
    monkeypatch.setattr(hostnet, "CLAIM", tmp_path / "run" / "claim.json")
    monkeypatch.setattr(hostnet, "run_ip", lambda *argv, check=True: None)
    monkeypatch.setattr(hostnet, "_nft", lambda script, check=True, stdin=False: None)
    monkeypatch.setattr(
        netpol, "iptables", lambda *argv, check=True: subprocess.CompletedProcess(argv, 1, "", "")
    )
    return proc_sys


def layout(tmp_path: Path, name: str = "a", offset: int = 0) -> Layout:
    return Layout(tmp_path / name, Ports().shifted(offset))


def test_down_restores_every_kernel_setting_the_kubelet_and_cni_changed(host: Path, tmp_path: Path) -> None:
    """Catches: the kubelet's overcommit/panic settings or CNI's forwarding left behind."""
    mine = layout(tmp_path)
    hostnet.claim(mine, [])
    for name, value in {
        "vm/overcommit_memory": "1",
        "kernel/panic": "10",
        "net/ipv4/ip_forward": "1",
    }.items():
        (host / name).write_text(value + "\n")
    assert set(hostnet.changed_sysctls()) == {"vm/overcommit_memory", "kernel/panic", "net/ipv4/ip_forward"}
    hostnet.release(mine)
    assert (host / "vm/overcommit_memory").read_text().strip() == "0"
    assert (host / "kernel/panic").read_text().strip() == "1"
    assert (host / "net/ipv4/ip_forward").read_text().strip() == "0"
    assert not hostnet.CLAIM.exists()


def test_a_claim_left_by_a_crash_keeps_the_settings_from_before_the_crash(host: Path, tmp_path: Path) -> None:
    """Catches: the next `up` recording the kubelet's values as the host's own."""
    mine = layout(tmp_path)
    hostnet.claim(mine, [])
    (host / "vm/overcommit_memory").write_text("1\n")  # changed, then the cluster crashed
    hostnet.claim(mine, [])
    hostnet.release(mine)
    assert (host / "vm/overcommit_memory").read_text().strip() == "0"


def test_a_second_dev_cluster_may_not_have_real_nodes_at_the_same_time(host: Path, tmp_path: Path) -> None:
    """Catches: two clusters restoring each other's settings and sharing one Service range."""
    hostnet.claim(layout(tmp_path, "a"), [])
    with pytest.raises(DevClusterError, match="only one may"):
        hostnet.claim(layout(tmp_path, "b", 1000), [])
    hostnet.release(layout(tmp_path, "b", 1000))  # not its claim: nothing happens
    assert hostnet.CLAIM.exists()


def test_directories_made_for_the_nodes_mounts_are_removed_and_existing_ones_kept(
    host: Path, tmp_path: Path
) -> None:
    """Catches: an empty /var/lib/kubelet left on the host, or the host's own removed."""
    existing, missing = tmp_path / "existing", tmp_path / "missing" / "deeper"
    existing.mkdir()
    mine = layout(tmp_path)
    hostnet.claim(mine, [str(existing), str(missing)])
    assert missing.is_dir()
    hostnet.release(mine)
    assert existing.is_dir() and not missing.exists()


def test_node_addresses_and_pod_ranges_are_distinct_and_inside_the_pod_network(tmp_path: Path) -> None:
    """Catches: two Nodes handing out the same Pod address, or a Node address in a Pod range."""
    net = hostnet.network_of(layout(tmp_path))
    seen: set[str] = {net.gateway}
    for number in range(1, hostnet.MAX_REAL_NODES + 1):
        first, last = net.pod_range(number)
        for address in (net.node_ip(number), first, last):
            assert net.contains(address) and address not in seen
            seen.add(address)
    network = ipaddress.ip_network(net.cidr)
    assert not network.overlaps(ipaddress.ip_network("10.128.0.0/9")), "kwok's fake Pod addresses"
    assert not network.overlaps(ipaddress.ip_network(hostnet.SERVICE_CIDR))


def test_dev_clusters_with_other_port_offsets_get_their_own_bridge_and_network(tmp_path: Path) -> None:
    """Catches: a second dev cluster (SUNK_DEV_PORT_OFFSET) reusing the first one's bridge."""
    a, b = hostnet.network_of(layout(tmp_path)), hostnet.network_of(layout(tmp_path, "b", 2000))
    assert a.bridge != b.bridge and a.cidr != b.cidr and a.nft_table != b.nft_table


def test_each_real_node_has_its_own_ports_and_cgroup_root(tmp_path: Path) -> None:
    """Catches: two kubelets binding the same port or sharing /kubepods."""
    nodes = [RealNode(layout(tmp_path), n) for n in range(1, 4)]
    ports = [p for node in nodes for p in (node.kubelet_port, node.kubelet_port + 1)]
    ports += [layout(tmp_path).ports.coredns, layout(tmp_path).ports.kube_proxy]
    assert len(set(ports)) == len(ports)
    assert len({node.cgroup_root for node in nodes}) == 3


def test_up_with_real_nodes_without_root_says_so_and_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Catches: a half-started cluster (or a claimed host) when real Nodes cannot run here."""
    monkeypatch.setattr(hostnet.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(hostnet, "CLAIM", tmp_path / "claim.json")
    cluster = DevCluster(Layout(tmp_path / "dev", Ports().shifted(7000)))
    with pytest.raises(DevClusterError, match="real Nodes need root"):
        cluster.up(ClusterSpec(nodes=1, real_nodes=1))
    assert not cluster.alive() and not hostnet.CLAIM.exists()


def test_real_nodes_are_validated_before_anything_starts() -> None:
    """Catches: real Nodes asked of the host's Slurm 22.05, for which no images are built."""
    with pytest.raises(DevClusterError, match=r"--slurm 24\.11"):
        ClusterSpec(real_nodes=1, slurm="22.05")
    with pytest.raises(DevClusterError, match="--real-nodes must be between"):
        ClusterSpec(real_nodes=hostnet.MAX_REAL_NODES + 1)


def node_with_files(tmp_path: Path) -> RealNode:
    node = RealNode(layout(tmp_path), 1)
    for rel in (
        "containerd/root/io.containerd.content.v1.content/blobs/sha256/ab12",
        "kubelet/pods/uid-1/volumes/kubernetes.io~empty-dir/data/x",
        "pod-logs/plat_slurm-controller-0_uid/slurmctld/0.log",
    ):
        (node.dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (node.dir / rel).write_text("x")
    (node.dir / "containerd.toml").write_text("version = 2\n")
    return node


def left_files(node: RealNode) -> list[str]:
    return [line for line in realcluster.host_leftovers(node.layout) if "'s files in " in line]


def test_down_deletes_each_real_nodes_images_and_pod_directories_and_keeps_their_logs(
    host: Path, tmp_path: Path
) -> None:
    """Issue #32: `down` left 2.2 GB of containerd content in the dev directory."""
    node = node_with_files(tmp_path)
    assert left_files(node) == [
        f"real-1's files in {node.dir / 'containerd'}",
        f"real-1's files in {node.dir / 'kubelet'}",
    ]
    node.remove_files()
    assert not (node.dir / "containerd").exists() and not (node.dir / "kubelet").exists()
    assert (node.dir / "pod-logs").is_dir() and (node.dir / "containerd.toml").exists()
    assert left_files(node) == []


def test_a_nodes_files_are_kept_while_anything_is_mounted_below_them(
    host: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = node_with_files(tmp_path)
    snapshot = str(node.dir / "containerd" / "root" / "snapshots" / "7" / "fs")
    monkeypatch.setattr(
        slurmroot, "mounts_under", lambda root: [snapshot] if root.name == "containerd" else []
    )
    with pytest.raises(DevClusterError, match="still mounted"):
        node.remove_files()
    assert (node.dir / "containerd" / "root").is_dir()
