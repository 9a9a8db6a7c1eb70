"""Fixtures shared by every suite. The dev cluster is brought up once per test session, or
reused when one is already running (`sunk dev up` beforehand keeps reruns fast)."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator

import pytest

from sunk.devcluster import ClusterSpec, DevCluster
from sunk.devcluster.kubeapi import AdminKube
from tests.support import SlurmRest


@pytest.fixture(scope="session")
def dev_cluster() -> Iterator[DevCluster]:
    cluster = DevCluster()
    started_here = False
    if cluster.is_running():
        status = cluster.status()
        spec = status.spec
        healthy = spec is not None and status.ready_nodes == spec.nodes and status.rest_ok
        if not healthy:
            pytest.fail(
                "a dev cluster is running but not healthy (see `sunk dev status`): "
                "restart it with `sunk dev down && sunk dev up`"
            )
    else:
        cluster.up(ClusterSpec(nodes=int(os.environ.get("SUNK_TEST_NODES", "4"))))
        started_here = True
    yield cluster
    if started_here and not os.environ.get("SUNK_KEEP_CLUSTER"):
        cluster.down()
        assert not cluster.alive(), "dev cluster processes outlived `sunk dev down`"


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
    kube.create("/api/v1/namespaces", {"metadata": {"name": name}})
    yield name
    kube.delete(f"/api/v1/namespaces/{name}")
