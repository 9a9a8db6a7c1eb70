"""Slurm accounts kept from the directory's groups (issue #35) against the real thing: the
dev cluster's slurmdbd and slurmctld, its kube-apiserver holding the people ConfigMap and
the Events. The account sync runs here, one pass at a time, with the operator's own
adapters; a job submitted as the person's UID runs under her group's account, and Slurm
itself refuses whoever has no association. A last test runs `sunk operator` itself with the
chart's flags against the dev cluster's directory (slapd), so its wiring is proven too."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from sunk.kube.client import KubeClient
from sunk.kube.events import Recorder
from sunk.operator.accounts.mapping import GroupMapping
from sunk.operator.accounts.sync import AccountSync
from sunk.slurm.accounts import SlurmAccounts
from sunk.slurm.client import SlurmClient
from sunk.slurm.tokens import TokenSource
from sunk_dev import DevCluster, directory, topology
from sunk_dev.kubeapi import AdminKube
from sunk_dev.slurmrun import run_cli
from tests.conftest import SLURM
from tests.e2e.test_lifecycle import job_state
from tests.support import OperatorProcess, SlurmRest, wait_for

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.accounting,
    pytest.mark.skipif(SLURM == "22.05", reason="accounts are not kept over 22.05's REST v0.0.38"),
]

CLUSTER = "sunkdev"
GROUP, ACCOUNT = "ml-e2e", "mle2e"
HER, HER_UID = topology.JOB_USER, topology.JOB_UID  # a name slurmctld's host resolves
REFUSED = "Invalid account or account/partition combination specified"
FIX = "(add it with sacctmgr, or fix the mapping)"
GOOD = GroupMapping(GROUP, ACCOUNT, ("low", "normal"), "normal", "root")


def people(*members: str) -> dict[str, str]:
    return {
        "passwd": f"{HER}:*:{HER_UID}:{HER_UID}::/tmp:/bin/sh\nbob:*:20002:20002::/tmp:/bin/sh\n",
        "group": f"{GROUP}:x:30001:{','.join(members)}\nvisitors:x:30002:bob\n",
    }


def sync(
    cluster: DevCluster,
    namespace: str,
    *mappings: GroupMapping,
    configmap: str = "people",
    release: str = "e2e",
) -> None:
    async def once() -> None:
        kube = await KubeClient.connect(str(cluster.layout.kubeconfig))
        slurm = await SlurmClient.connect(
            cluster.layout.rest_url, TokenSource(path=cluster.layout.slurm_token)
        )
        try:
            accounts = AccountSync(
                kube,
                SlurmAccounts(slurm, CLUSTER),
                Recorder(kube, "sunk-operator", "e2e"),
                mappings,
                namespace=namespace,
                configmap=configmap,
                release=release,
                interval_s=30,
            )
            await accounts.sync_once()
        finally:
            await slurm.aclose()
            await kube.close()

    asyncio.run(once())


def associations(cluster: DevCluster, **where: str) -> set[str]:
    query = [f"{k}={v}" for k, v in where.items()]
    out = run_cli(cluster.layout, "sacctmgr", "-n", "-P", "show", "assoc", *query, "format=account,user,qos")
    return {line for line in out.splitlines() if line}


def submit_as(slurm: SlurmRest, uid: int, account: str) -> dict[str, Any]:
    body = slurm.job_body("#!/bin/sh\ntrue\n", user_id=str(uid), group_id=str(uid), account=account)
    return slurm.post_job(body)


def test_a_groups_member_gets_its_account_and_loses_it_when_she_leaves(
    dev_cluster: DevCluster, kube: AdminKube, slurm: SlurmRest, namespace: str
) -> None:
    by_hand = associations(dev_cluster, user=HER)  # acct1 and acct2, made with sacctmgr
    assert {a.split("|")[0] for a in by_hand} == {"acct1", "acct2"}
    configmaps = f"/api/v1/namespaces/{namespace}/configmaps"
    kube.create(configmaps, {"metadata": {"name": "people"}, "data": people(HER)})
    try:
        sync(dev_cluster, namespace, GOOD)
        assert associations(dev_cluster, account=ACCOUNT, user=HER) == {f"{ACCOUNT}|{HER}|low,normal"}

        # Her job runs under her group's account, and sacct says so.
        answer = submit_as(slurm, HER_UID, ACCOUNT)
        assert answer.get("job_id") and not answer.get("errors"), answer
        job_id = int(answer["job_id"])
        wait_for(lambda: job_state(slurm, job_id) == "COMPLETED", timeout=30, what="her job to complete")
        sacct = wait_for(
            lambda: run_cli(
                dev_cluster.layout, "sacct", "-n", "-P", "-X", "-j", str(job_id), "-o", "user,account"
            ),
            timeout=15,
            what="sacct to list her job",
        )
        assert sacct.split() == [f"{HER}|{ACCOUNT}"]

        # Bob is in no mapped group: Slurm itself refuses him.
        assert REFUSED in str(submit_as(slurm, 20002, ACCOUNT)["errors"])

        # A mapping naming a QoS slurmdbd lacks: a Warning Event, and nothing removed, even
        # though the group is empty now.
        kube.patch(f"{configmaps}/people", {"data": people()})
        sync(dev_cluster, namespace, GroupMapping(GROUP, ACCOUNT, ("gold",), "", "root"))
        assert associations(dev_cluster, account=ACCOUNT, user=HER) == {f"{ACCOUNT}|{HER}|low,normal"}
        events = kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
        told = [e.get("note", "") for e in events if e["reason"] == "AccountMappingInvalid"]
        assert told == [f"group {GROUP} -> account {ACCOUNT}: slurmdbd has no QoS gold {FIX}"]

        # With the mapping right again, her leaving the group removes her association; the
        # associations made by hand stay as they were, and Slurm now refuses her there.
        sync(dev_cluster, namespace, GOOD)
        assert associations(dev_cluster, account=ACCOUNT, user=HER) == set()
        assert associations(dev_cluster, user=HER) == by_hand
        assert REFUSED in str(submit_as(slurm, HER_UID, ACCOUNT)["errors"])

        # No mapping left: sunk's account goes.
        sync(dev_cluster, namespace)
        assert ACCOUNT not in run_cli(
            dev_cluster.layout, "sacctmgr", "-n", "-P", "show", "account", "format=account"
        )
    finally:
        if ACCOUNT in run_cli(
            dev_cluster.layout, "sacctmgr", "-n", "-P", "show", "account", "format=account"
        ):
            run_cli(dev_cluster.layout, "sacctmgr", "-i", "delete", "account", ACCOUNT)


NODESET_CRD = Path(__file__).resolve().parents[2] / "charts" / "slurm" / "files" / "nodeset-crd.yaml"


def serve_nodesets(kube: AdminKube) -> None:
    """The chart's NodeSet CRD, which the operator watches before it does anything (the dev
    cluster serves only the scheduler's PodGroup)."""
    kube.serve_crd(yaml.safe_load(NODESET_CRD.read_text()))


def test_the_operator_process_keeps_a_directory_groups_account_from_the_charts_flags(
    dev_cluster: DevCluster, kube: AdminKube, namespace: str
) -> None:
    """alice is in the directory's group ml, bob is not: with ml mapped to an account, the
    operator reads the directory, writes the people, and gives alice (new to Slurm) that
    account as her default with the mapping's QoS; bob gets nothing."""
    layout, release, account = dev_cluster.layout, "acctop", "opml"
    mapping = [{"group": "ml", "account": account, "qos": ["low", "normal"], "defaultQos": "normal"}]
    serve_nodesets(kube)
    operator = OperatorProcess(
        dev_cluster,
        namespace,
        release,
        f"--directory-uri={directory.uri(layout)}",
        f"--directory-bind-dn={directory.READER}",
        f"--directory-password-file={directory.reader_password_file(layout)}",
        f"--directory-user-base={directory.PEOPLE}",
        f"--directory-group-base={directory.GROUPS}",
        f"--accounts-from-directory={json.dumps(mapping)}",
        f"--slurm-cluster={CLUSTER}",
        "--accounts-interval=1s",
    )
    try:
        operator.start()
        wait_for(
            lambda: associations(dev_cluster, account=account, user="alice"),
            timeout=30,
            what=f"alice's association with {account}",
        )
        assert associations(dev_cluster, account=account, user="alice") == {f"{account}|alice|low,normal"}
        assert associations(dev_cluster, user="bob") == set()
        default = run_cli(layout, "sacctmgr", "-n", "-P", "show", "user", "alice", "format=defaultaccount")
        assert default.split() == [account]
        events = kube.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
        synced = [e["note"] for e in events if e["reason"] == "AccountsSynced"]
        assert f"add user alice (new Slurm user) to account {account} with QoS low,normal" in synced[0]
        assert "accounts: add account" in operator.output()
    finally:
        operator.stop()
        # The mapping gone, sunk's own sync takes its account, alice's association and her
        # Slurm user away again, as the operator would.
        sync(dev_cluster, namespace, configmap=f"{release}-people", release=release)
    assert account not in run_cli(layout, "sacctmgr", "-n", "-P", "show", "account", "format=account")
    assert "alice" not in run_cli(layout, "sacctmgr", "-n", "-P", "show", "user", "format=user")
