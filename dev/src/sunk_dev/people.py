"""Logging in as the dev directory's people (alice, bob, carol) on a Slurm chart installed
with `directory_values`: what the real-Node suites, the benchmarks and the demo share."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from sunk_dev import directory, hostnet, procs
from sunk_dev.cluster import DevCluster
from sunk_dev.errors import DevClusterError
from sunk_dev.kubeapi import AdminKube
from sunk_dev.kubecluster import create_once
from sunk_dev.platform import Platform

PEOPLE_ACCOUNT = {"group": "people", "account": "people", "qos": ["normal"]}


def directory_values(cluster: DevCluster) -> dict[str, Any]:
    """Values that point the chart at the dev cluster's directory (its reader's password in
    the Secret `ldap-reader`, its CA in `ldap-ca`, both made by `prepare_namespace`), over
    StartTLS. A directory started before it offered StartTLS is named over plain LDAP, and
    the values then say out loud that directory passwords would cross the bridge in clear
    (the chart refuses password logins over plain LDAP without it)."""
    gateway = hostnet.network_of(cluster.layout).gateway
    tls: dict[str, Any] = {"startTLS": True, "caSecret": {"name": "ldap-ca", "key": "ca.crt"}}
    plain = {"login": {"acknowledgePasswordsInClear": True}}
    encrypted = directory.serves_tls(cluster.layout)
    return {
        "slurm": {"partitions": [{"name": "main", "default": True}]},
        "directory": {
            "uri": directory.uri(cluster.layout, gateway),
            "bindDN": directory.READER,
            "bindPasswordSecret": {"name": "ldap-reader", "key": "password"},
            "userBase": directory.PEOPLE,
            "groupBase": directory.GROUPS,
            "interval": "10s",
            **(tls if encrypted else {}),
        },
        **({} if encrypted else plain),
        # Everyone in the directory's `people` group may run jobs, in the Slurm account
        # `people` the operator keeps for it (issue #35): accounting enforces associations.
        "accounting": {"fromDirectory": {"enabled": True, "groups": [PEOPLE_ACCOUNT]}},
    }


def prepare_namespace(cluster: DevCluster, kube: AdminKube, namespace: str) -> None:
    """The namespace with the reader's Secret in it, once the directory is known to answer
    on the Nodes' bridge (a namespace prepared before is kept as it is)."""
    layout = cluster.layout
    gateway = hostnet.network_of(layout).gateway
    try:
        socket.create_connection((gateway, layout.ports.ldap), timeout=2).close()
    except OSError:
        raise DevClusterError(
            "the dev cluster's directory does not answer on the Nodes' bridge: a cluster started "
            "before real Nodes got one; restart it (`sunk dev down && sunk dev up --real-nodes 3`)"
        ) from None
    kube.create_namespace(namespace)
    password = directory.reader_password_file(layout).read_text()
    create_once(
        kube,
        f"/api/v1/namespaces/{namespace}/secrets",
        {"metadata": {"name": "ldap-reader"}, "stringData": {"password": password}},
    )
    if directory.serves_tls(layout):
        create_once(
            kube,
            f"/api/v1/namespaces/{namespace}/secrets",
            {
                "metadata": {"name": "ldap-ca"},
                "stringData": {"ca.crt": directory.ca_file(layout).read_text()},
            },
        )


def login_address(kube: AdminKube, namespace: str) -> str | None:
    pods = kube.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector="app.kubernetes.io/name=login")[
        "items"
    ]
    ready = [
        p for p in pods if (p.get("status") or {}).get("podIP") and not p["metadata"].get("deletionTimestamp")
    ]
    return ready[0]["status"]["podIP"] if ready else None


def ssh(
    cluster: DevCluster,
    kube: AdminKube,
    namespace: str,
    user: str,
    command: str,
    *,
    key_of: str | None = None,
    identity: Path | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """`command` in a login shell of `user` on the login Pod, logged in over SSH with the
    private half of the key the directory holds for them (or for `key_of`), or with the
    private key file `identity` (a copy kept of a removed person's, say)."""
    address = login_address(kube, namespace)
    assert address is not None, "no login Pod has an address"
    options = ["BatchMode=yes", "StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null"]
    options += ["LogLevel=ERROR", "ConnectTimeout=5"]
    return subprocess.run(
        [
            "ssh",
            "-i",
            str(identity or directory.private_key(cluster.layout, key_of or user)),
            *(arg for option in options for arg in ("-o", option)),
            f"{user}@{address}",
            command,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def ssh_with_password(
    cluster: DevCluster,
    kube: AdminKube,
    namespace: str,
    user: str,
    command: str,
    *,
    password_of: str | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """`command` run by `user` logged in over SSH with the password the directory holds for
    them (or for `password_of`), typed by an askpass program that reads it from its file:
    no key is offered, and the password is never on a command line."""
    address = login_address(kube, namespace)
    assert address is not None, "no login Pod has an address"
    secret = directory.password_file(cluster.layout, password_of or user)
    with tempfile.TemporaryDirectory() as scratch:
        askpass = Path(scratch) / "askpass"
        askpass.write_text(f"#!/bin/sh\nexec cat {shlex.quote(str(secret))}\n")
        askpass.chmod(0o700)
        options = ["StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null", "LogLevel=ERROR"]
        options += ["ConnectTimeout=5", "PubkeyAuthentication=no", "PreferredAuthentications=password"]
        options += ["NumberOfPasswordPrompts=1", "IdentitiesOnly=yes"]
        return subprocess.run(
            ["ssh", *(arg for option in options for arg in ("-o", option)), f"{user}@{address}", command],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "SSH_ASKPASS": str(askpass), "SSH_ASKPASS_REQUIRE": "force", "DISPLAY": ":0"},
        )


def as_user(
    cluster: DevCluster, kube: AdminKube, namespace: str, user: str, command: str, *, within: float = 180
) -> str:
    """The output of `command` run by `user` once it succeeds (the people reach the login
    Pod when the kubelet next syncs its ConfigMap, up to a minute or two)."""

    said: list[str] = []
    output: list[str] = []

    def attempt() -> bool:
        done = ssh(cluster, kube, namespace, user, command)
        said[:] = [f"exit {done.returncode}: {done.stderr.strip()[-300:]}"]
        output[:] = [done.stdout]
        return done.returncode == 0

    try:
        procs.wait_until(attempt, timeout=within, what=f"{user} running {command!r} over SSH", interval=3)
    except DevClusterError as err:
        raise DevClusterError(f"{err}; the last try said {said}") from None
    return output[0]


def wait_associated(plat: Platform, *users: str, account: str = str(PEOPLE_ACCOUNT["account"])) -> None:
    """Accounting enforces associations (issue #38): people run jobs once the operator has
    given their directory group's Slurm account (`account`) to them (issue #35)."""

    def associated(user: str) -> bool:
        done = plat.login(f"sacctmgr -nP show associations user={user} format=account")
        return done.returncode == 0 and account in done.stdout.split()

    procs.wait_until(
        lambda: all(associated(user) for user in users),
        timeout=90,
        what=f"the operator giving {', '.join(users)} the Slurm account {account}",
        interval=1,
    )
