"""The dev cluster's pure parts: its topology, its slurm.conf, its refusal to double-start."""

from __future__ import annotations

import argparse
import json
import os
import socket
from pathlib import Path

import pytest

from sunk.kube import noderoom
from sunk.scheduler.config import add_arguments, parse_job_id_range
from sunk_dev import ClusterSpec, DevCluster, DevClusterError, Layout, topology
from sunk_dev.kubecluster import node_manifest, slurmd_pod_manifest
from sunk_dev.layout import Ports
from sunk_dev.platform import Platform
from sunk_dev.prereqs import check_ports_free
from sunk_dev.procs import start_time
from sunk_dev.slurmcluster import SlurmSpec, render_slurm_conf


def test_slurm_nodes_and_nodes_have_different_names_and_a_one_to_one_mapping() -> None:
    nodes = topology.plan(64)
    assert len({n.node for n in nodes}) == 64
    assert len({n.slurm_node for n in nodes}) == 64
    assert all(n.node.split("-")[1] != n.slurm_node.split("-")[1] for n in nodes[:10])
    assert {n.gpu_class for n in nodes} == set(topology.GPU_CLASSES)


def test_the_stand_in_slurmd_pods_keep_out_of_the_namespace_the_docs_install_the_chart_in() -> None:
    """Issue #32: `kubectl -n slurm get pods` mixed these with the chart's Pods."""
    [node] = topology.plan(1)
    namespace = slurmd_pod_manifest(node)["metadata"]["namespace"]  # type: ignore[index]
    assert namespace == "sunk-dev-slurmd"
    docs = (Path(__file__).resolve().parents[2] / "docs" / "platform.md").read_text()
    assert "--namespace slurm " in docs and Platform.namespace == "slurm"
    assert namespace not in docs


def test_slurm_features_follow_the_hosting_nodes_gpu_class() -> None:
    for node in topology.plan(6):
        assert node.slurm_features[0] == node.gpu_class.split("_")[0].lower()


def test_slurm_conf_declares_every_node_with_its_own_port_and_the_kill_wait(
    tmp_path: Path,
) -> None:
    layout = Layout(tmp_path)
    spec = SlurmSpec(topology.plan(3), kill_wait=17)
    conf = render_slurm_conf(spec, layout, "host")
    assert "KillWait=17" in conf
    assert "SlurmctldHost=host(127.0.0.1)" in conf
    for node in spec.nodes:
        assert f"NodeName={node.slurm_node} " in conf
        assert f"Port={layout.ports.slurmd(node.index)} " in conf
    assert "accounting_storage/none" in conf


def test_slurm_conf_with_accounting_uses_slurmdbd_and_qos_preemption(tmp_path: Path) -> None:
    conf = render_slurm_conf(SlurmSpec(topology.plan(2), accounting=True), Layout(tmp_path), "host")
    assert "AccountingStorageType=accounting_storage/slurmdbd" in conf
    assert "PreemptType=preempt/qos" in conf


def test_a_taken_port_is_reported_in_one_actionable_sentence(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        # Port 0 binds anywhere free, so only the held port can clash.
        ports = Ports(etcd_client=0, etcd_peer=0, apiserver=taken, slurmctld=0, slurmrestd=0)
        with pytest.raises(DevClusterError, match=rf"port {taken} .*kube-apiserver.*in use"):
            check_ports_free(Layout(tmp_path, ports=ports), nodes=0, accounting=False)


def test_up_refuses_while_a_previous_cluster_is_still_running(tmp_path: Path) -> None:
    layout = Layout(tmp_path / "dev")
    layout.pids.mkdir(parents=True)
    me = os.getpid()
    (layout.pids / "etcd.json").write_text(json.dumps({"pid": me, "started": start_time(me)}))
    with pytest.raises(DevClusterError, match=r"already running.*sunk dev down"):
        DevCluster(layout).up(ClusterSpec(nodes=1))
    assert (layout.pids / "etcd.json").exists(), "the running cluster's records were touched"


def test_a_stale_pid_file_of_a_reused_pid_does_not_count_as_running(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    layout.pids.mkdir(parents=True)
    (layout.pids / "etcd.json").write_text(json.dumps({"pid": os.getpid(), "started": 1}))
    assert not DevCluster(layout).is_running()


def test_cluster_size_is_validated() -> None:
    with pytest.raises(DevClusterError, match="--nodes"):
        ClusterSpec(nodes=0)


@pytest.mark.parametrize(("version", "legacy_lines"), [("22.05", True), ("24.11", False), ("26.05", False)])
def test_slurm_conf_keeps_lines_only_the_versions_that_accept_them(
    tmp_path: Path, version: str, legacy_lines: bool
) -> None:
    """24.11 and later refuse SwitchType and JobCompType=jobcomp/none; 22.05 wants them."""
    conf = render_slurm_conf(SlurmSpec(topology.plan(2), version=version), Layout(tmp_path), "host")
    assert ("SwitchType=switch/none" in conf) is legacy_lines
    assert ("JobCompType=jobcomp/none" in conf) is legacy_lines


@pytest.mark.parametrize("version", ["23.02", "25.05", "latest", ""])
def test_an_unsupported_slurm_version_is_named_with_the_supported_ones(version: str) -> None:
    with pytest.raises(DevClusterError, match=r"choose one of .*24\.11.*26\.05.*22\.05"):
        ClusterSpec(slurm=version)


def test_slurm_conf_tracks_processes_with_the_plugin_the_cluster_was_asked_for(tmp_path: Path) -> None:
    """The benchmark's --proctrack pgid must reach slurm.conf; linuxproc stays the default."""
    default = render_slurm_conf(SlurmSpec(topology.plan(2)), Layout(tmp_path), "host")
    pgid = render_slurm_conf(SlurmSpec(topology.plan(2), proctrack="pgid"), Layout(tmp_path), "host")
    assert "ProctrackType=proctrack/linuxproc" in default.splitlines()
    assert "ProctrackType=proctrack/pgid" in pgid.splitlines()


def test_issue53_slurms_counter_stops_below_the_schedulers_default_job_id_range(tmp_path: Path) -> None:
    """Catches: the dev cluster's Slurm counter free to walk into the job IDs the scheduler
    asks for by default (its --job-id-range), which the e2e tests run against."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    default = parse_job_id_range(parser.parse_args([]).job_id_range)
    assert default is not None
    conf = render_slurm_conf(SlurmSpec(topology.plan(2)), Layout(tmp_path), "host")
    assert f"MaxJobId={default[0]}" in conf.splitlines()


def test_an_unknown_proctrack_plugin_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(DevClusterError, match="linuxproc, pgid"):
        ClusterSpec(proctrack="cgroup")


@pytest.mark.parametrize("cpus", [topology.CPUS_PER_NODE, 64, 200])
def test_a_kwok_node_holds_its_slurmd_stand_in_and_everything_slurm_hands_out(
    cpus: int, tmp_path: Path
) -> None:
    """The scheduler checks the kubelet's count before it binds (sunk.kube.noderoom). If a
    Node's allocatable were only what Slurm hands out, the stand-in slurmd Pod's own request
    would leave no room for a whole-node Pod, nor for the last of one Pod per CPU, and the
    e2e suites' Pods would wait forever."""
    [plan] = topology.plan(1, cpus=cpus)
    node, slurmd = node_manifest(plan), slurmd_pod_manifest(plan)
    conf = render_slurm_conf(SlurmSpec([plan]), Layout(tmp_path), "host")
    memory_mib = topology.MEMORY_MIB_PER_NODE
    assert f"CPUs={cpus} RealMemory={memory_mib} Gres=gpu:{plan.gpus} " in conf
    whole = {"cpu": str(cpus), "memory": f"{memory_mib}Mi", "nvidia.com/gpu": str(plan.gpus)}
    there = noderoom.tally([slurmd])
    assert noderoom.shortfall(node, noderoom.requests_of(pod_asking(whole)), there) is None
    one_cpu = noderoom.requests_of(pod_asking({"cpu": "1", "memory": f"{memory_mib // cpus}Mi"}))
    for _ in range(cpus):
        assert noderoom.shortfall(node, one_cpu, there) is None
        there.add(one_cpu)
    assert noderoom.shortfall(node, one_cpu, there) is not None  # and no more than Slurm has


def pod_asking(requests: dict[str, str]) -> dict[str, object]:
    return {"spec": {"containers": [{"name": "main", "resources": {"requests": requests}}]}}
