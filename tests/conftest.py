"""Fixtures shared by every suite. The dev cluster is brought up once per test session, or
reused when one is already running (`sunk dev up` beforehand keeps reruns fast)."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sunk.devcluster import ClusterSpec, DevCluster, procs
from sunk.devcluster.kubeapi import AdminKube
from sunk.devcluster.layout import cache_dir
from sunk.devcluster.prereqs import ensure_go_tools
from tests.support import SlurmRest

ACCOUNTING = os.environ.get("SUNK_TEST_CLUSTER") == "accounting"
# Which Slurm the suites run on (`sunk dev up --slurm`): the default, or one CI also covers.
SLURM = os.environ.get("SUNK_TEST_SLURM", "24.11")


def wanted_spec() -> ClusterSpec:
    """The default suite runs on a plain cluster; SUNK_TEST_CLUSTER=accounting selects the
    suite that needs slurmdbd (QoS preemption, PreemptMode=REQUEUE); SUNK_TEST_SLURM the
    Slurm version."""
    nodes = int(os.environ.get("SUNK_TEST_NODES", "4"))
    if ACCOUNTING:
        return ClusterSpec(nodes=nodes, accounting=True, preempt_mode="REQUEUE", slurm=SLURM)
    return ClusterSpec(nodes=nodes, slurm=SLURM)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        needs_accounting = item.get_closest_marker("accounting") is not None
        if needs_accounting != ACCOUNTING and item.get_closest_marker("unit") is None:
            if needs_accounting:
                item.add_marker(
                    pytest.mark.skip(reason="needs SUNK_TEST_CLUSTER=accounting (`make test` runs it)")
                )
            elif "unit" not in str(item.path):
                item.add_marker(pytest.mark.skip(reason="runs on the plain cluster, not the accounting one"))


@pytest.fixture(scope="session")
def dev_cluster() -> Iterator[DevCluster]:
    cluster = DevCluster()
    started_here = False
    wanted = wanted_spec()
    if cluster.is_running():
        status = cluster.status()
        spec = status.spec
        healthy = spec is not None and status.ready_nodes == spec.nodes and status.rest_ok
        if not healthy:
            pytest.fail(
                "a dev cluster is running but not healthy (see `sunk dev status`): "
                "restart it with `sunk dev down && sunk dev up`"
            )
        if spec is not None and (spec.accounting, spec.preempt_mode, spec.slurm) != (
            wanted.accounting,
            wanted.preempt_mode,
            wanted.slurm,
        ):
            pytest.fail(
                f"the running dev cluster (Slurm {spec.slurm}, accounting={spec.accounting}, preempt mode "
                f"{spec.preempt_mode}) is not the one this suite needs (Slurm {wanted.slurm}, "
                f"accounting={wanted.accounting}, {wanted.preempt_mode}): stop it with `sunk dev down` "
                "and run the tests again"
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
