"""The trust policy on the real dev cluster (issues #12, #38): a namespace bounded to one
Slurm user and a priority range; what it may not do is refused with an Event naming the rule
and no job, a namespace the policy grants nothing (or a scheduler with no policy) gets
nothing, and a change to the policy file takes effect without a restart."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from sunk_dev import topology
from sunk_dev.kubeapi import AdminKube
from tests.e2e.test_lifecycle import reasons
from tests.e2e.test_schedule_flow import P, create, get, job_of, wait_bound
from tests.support import SchedulerProcess, SlurmRest, condition, make_pod, wait_for

pytestmark = pytest.mark.e2e
UID = topology.JOB_UID


def bounded(namespace: str, max_priority: int) -> str:
    return f"""
default: {{}}
namespaces:
  {namespace}:
    uids: [{UID}]
    gids: [{UID}]
    defaultUid: {UID}
    accounts: []
    partitions: [batch]
    qos: [normal]
    priority: {{min: 0, max: {max_priority}}}
"""


@pytest.fixture
def policy_file(tmp_path: Path, namespace: str) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(bounded(namespace, 1000))
    return path


@pytest.fixture
def bounded_scheduler(own_scheduler: Callable[..., SchedulerProcess], policy_file: Path) -> SchedulerProcess:
    return own_scheduler(f"--policy={policy_file}")


def refused(kube: AdminKube, slurm: SlurmRest, namespace: str, name: str) -> str:
    """Wait for the refusal; return its Event's note, after checking no job was submitted."""
    found = wait_for(
        lambda: (
            (pod := get(kube, namespace, name))
            and condition(pod).get("reason") == "ForbiddenByPolicy"
            and pod
        ),
        timeout=20,
        what=f"{name} to be refused by the policy",
    )
    assert slurm.jobs_of_pod(found["metadata"]["uid"]) == []
    return reasons(kube, namespace, name)["FailedScheduling"]


@pytest.mark.parametrize(
    ("annotations", "words"),
    [
        pytest.param({"user-id": "0"}, "may not run jobs as uid 0", id="root"),
        pytest.param({"account": "finance"}, 'may not use account "finance"', id="another_account"),
        pytest.param({"partition": "high"}, 'may not use partition "high"', id="a_preempting_partition"),
        pytest.param({"qos": "high"}, 'may not use qos "high"', id="a_high_priority_qos"),
        pytest.param({"priority": "100000"}, "may not set priority 100000", id="a_high_priority"),
        pytest.param({"required-nodes": "node-001"}, "may not set required-nodes", id="issue38_chosen_nodes"),
        pytest.param({"exclusive": "user"}, "may not set exclusive", id="issue38_whole_nodes"),
        pytest.param({"timeout": "100000"}, "may not set timeout", id="issue38_a_long_time_limit"),
    ],
)
def test_r12_1_a_pod_asking_more_than_its_namespace_allows_is_refused_and_no_job_is_submitted(
    kube: AdminKube,
    slurm: SlurmRest,
    namespace: str,
    bounded_scheduler: SchedulerProcess,
    annotations: dict[str, str],
    words: str,
) -> None:
    manifest = make_pod(
        "greedy", bounded_scheduler.name, annotations={P + k: v for k, v in annotations.items()}
    )
    create(kube, namespace, manifest)
    note = refused(kube, slurm, namespace, "greedy")
    assert words in note and f"namespaces.{namespace}." in note


def test_r12_1_a_pod_naming_no_identity_runs_as_its_namespaces_default_user(
    kube: AdminKube, slurm: SlurmRest, namespace: str, bounded_scheduler: SchedulerProcess
) -> None:
    create(kube, namespace, make_pod("plain", bounded_scheduler.name))
    job = job_of(wait_bound(kube, namespace, "plain"), slurm)
    assert (job["user_id"], job["group_id"]) == (UID, UID)


def test_r12_1_a_changed_policy_applies_to_the_next_pod_without_a_restart(
    kube: AdminKube, slurm: SlurmRest, namespace: str, bounded_scheduler: SchedulerProcess, policy_file: Path
) -> None:
    high = {P + "priority": "5000"}
    create(kube, namespace, make_pod("early", bounded_scheduler.name, annotations=high))
    refused(kube, slurm, namespace, "early")
    # Written as the kubelet updates a mounted ConfigMap: a new file swapped in.
    fresh = policy_file.with_suffix(".new")
    fresh.write_text(bounded(namespace, 10000))
    os.replace(fresh, policy_file)
    create(kube, namespace, make_pod("late", bounded_scheduler.name, annotations=high))
    job = job_of(wait_bound(kube, namespace, "late"), slurm)
    assert job["priority"] == 5000
    assert bounded_scheduler.alive()


@pytest.mark.parametrize(
    ("policy", "rule"),
    [
        pytest.param("namespaces: {someone-else: {defaultUid: 1001}}", "default.defaultUid", id="unlisted"),
        pytest.param(None, "default.defaultUid", id="no_policy_at_all"),
    ],
)
def test_issue38_a_namespace_granted_nothing_gets_no_job_and_an_event_naming_the_rule(
    kube: AdminKube,
    slurm: SlurmRest,
    namespace: str,
    own_scheduler: Callable[..., SchedulerProcess],
    tmp_path: Path,
    policy: str | None,
    rule: str,
) -> None:
    """Catches the old defaults: a namespace the policy does not list, or a scheduler given
    no policy, ran its Pods' jobs as root with any account."""
    if policy is None:
        scheduler = own_scheduler("--policy=")  # said empty: no file at all
    else:
        path = tmp_path / "policy.yaml"
        path.write_text(policy)
        scheduler = own_scheduler(f"--policy={path}")
    create(kube, namespace, make_pod("plain", scheduler.name))
    note = refused(kube, slurm, namespace, "plain")
    assert f"namespace {namespace} must name a user-id: {rule} is not set" in note
