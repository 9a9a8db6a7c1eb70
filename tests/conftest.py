"""Fixtures shared by every suite. The dev cluster is brought up once per test session, or
reused when one is already running (`sunk dev up` beforehand keeps reruns fast)."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sunk_dev import ClusterSpec, DevCluster, hostnet, procs, realcluster, slurmroot, topology
from sunk_dev.kubeapi import AdminKube
from sunk_dev.layout import cache_dir
from sunk_dev.prereqs import ensure_go_tools
from tests.support import SlurmRest

# Which kind of dev cluster this session runs on: plain, accounting (slurmdbd) or real
# (three real kubelet Nodes next to the kwok ones). Each test runs on exactly one kind.
CLUSTER = os.environ.get("SUNK_TEST_CLUSTER") or "plain"
ACCOUNTING = CLUSTER == "accounting"
REAL_NODES = 3 if CLUSTER == "real" else 0
# Which Slurm the suites run on (`sunk dev up --slurm`): the default, or one CI also covers.
SLURM = os.environ.get("SUNK_TEST_SLURM", "24.11")


def wanted_spec() -> ClusterSpec:
    """The default suite runs on a plain cluster; SUNK_TEST_CLUSTER=accounting selects the
    suite that needs slurmdbd (QoS preemption, PreemptMode=REQUEUE), SUNK_TEST_CLUSTER=real
    the one with real Nodes; SUNK_TEST_SLURM the Slurm version."""
    nodes = int(os.environ.get("SUNK_TEST_NODES", "4"))
    if ACCOUNTING:
        # With the directory (slapd): accounts follow its groups (tests/e2e/test_account_sync.py).
        return ClusterSpec(nodes=nodes, accounting=True, preempt_mode="REQUEUE", slurm=SLURM, directory=True)
    return ClusterSpec(nodes=nodes, slurm=SLURM, real_nodes=REAL_NODES)


def _kind(item: pytest.Item) -> str:
    if item.get_closest_marker("accounting") is not None:
        return "accounting"
    return "real" if item.get_closest_marker("real_nodes") is not None else "plain"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        kind = _kind(item)
        if kind == CLUSTER or item.get_closest_marker("unit") is not None or "unit" in str(item.path):
            continue
        if kind == "plain":
            reason = f"runs on the plain cluster, not the {CLUSTER} one"
        else:
            reason = f"needs SUNK_TEST_CLUSTER={kind} (`make test` runs it)"
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def dev_cluster() -> Iterator[DevCluster]:
    cluster = DevCluster()
    started_here = False
    wanted = wanted_spec()
    host_before = hostnet.current_sysctls()
    if cluster.is_running():
        status = cluster.status()
        spec = status.spec
        healthy = spec is not None and status.ready_nodes == spec.nodes + spec.real_nodes and status.rest_ok
        if not healthy:
            pytest.fail(
                "a dev cluster is running but not healthy (see `sunk dev status`): "
                "restart it with `sunk dev down && sunk dev up`"
            )
        if spec is not None and (
            spec.accounting,
            spec.preempt_mode,
            spec.slurm,
            spec.real_nodes,
            spec.runs_directory,
        ) != (wanted.accounting, wanted.preempt_mode, wanted.slurm, wanted.real_nodes, wanted.runs_directory):
            pytest.fail(
                f"the running dev cluster (Slurm {spec.slurm}, accounting={spec.accounting}, preempt mode "
                f"{spec.preempt_mode}, {spec.real_nodes} real Nodes, directory={spec.runs_directory}) is "
                f"not the one this suite needs (Slurm {wanted.slurm}, accounting={wanted.accounting}, "
                f"{wanted.preempt_mode}, {wanted.real_nodes} real Nodes, directory={wanted.runs_directory}): "
                "stop it with `sunk dev down` and run the tests again"
            )
        admin = AdminKube(cluster.layout)
        try:
            current = admin.find(f"/api/v1/namespaces/{topology.SLURMD_NAMESPACE}") is not None
        finally:
            admin.close()
        if not current:
            pytest.fail(
                f"the running dev cluster keeps its stand-in slurmd Pods outside namespace "
                f"{topology.SLURMD_NAMESPACE} (an older sunk started it): restart it with "
                "`sunk dev down && sunk dev up`"
            )
    else:
        cluster.up(wanted)
        started_here = True
    yield cluster
    if started_here and not os.environ.get("SUNK_KEEP_CLUSTER"):
        cluster.down()
        assert not cluster.alive(), "dev cluster processes outlived `sunk dev down`"
        strays = procs.leftovers(f"SLURM_CONF={cluster.layout.slurm_conf}")
        assert not strays, f"job processes outlived `sunk dev down`: {strays}"
        if wanted.real_nodes:
            left = realcluster.host_leftovers(cluster.layout) + slurmroot.mounts_under(cluster.layout.root)
            assert not left, f"`sunk dev down` did not give the host back: {left}"
            assert hostnet.current_sysctls() == host_before, "kernel settings were not restored"


@pytest.fixture(scope="session")
def helm() -> Path:
    """The real helm binary, built from its Go module like the other upstream tools."""
    return ensure_go_tools(cache_dir() / "helm-build.log", ("helm",))["helm"]


@pytest.fixture(scope="session")
def kube(dev_cluster: DevCluster) -> Iterator[AdminKube]:
    client = AdminKube(dev_cluster.layout)
    yield client
    client.close()


@pytest.fixture(scope="session")
def slurm(dev_cluster: DevCluster) -> Iterator[SlurmRest]:
    client = SlurmRest(dev_cluster.layout)
    yield client
    client.close()


@pytest.fixture
def namespace(kube: AdminKube, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (the namespace controller empties it)."""
    base = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:40].strip("-")
    name = f"{base}-{uuid.uuid4().hex[:5]}"
    kube.create_namespace(name)
    yield name
    kube.delete(f"/api/v1/namespaces/{name}")
