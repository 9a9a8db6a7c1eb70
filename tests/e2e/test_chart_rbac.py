"""R1.1: the chart's RBAC, applied to the real API server, is enough for the scheduler, and
every single rule in it is needed (dropping any one of them breaks a named step)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sunk_dev import DevCluster, topology
from sunk_dev.kubeapi import AdminKube, KubeError
from sunk_dev.slurmrun import run_cli
from tests.chart.conftest import render
from tests.e2e.conftest import delete_pods_and_wait_for_their_jobs
from tests.e2e.test_schedule_flow import P, create, get, job_of
from tests.support import SchedulerProcess, SlurmRest, condition, events_for, make_pod, wait_for

pytestmark = pytest.mark.e2e

RBAC = "/apis/rbac.authorization.k8s.io/v1"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
# The chart's admission policy (issue #38): every test here runs the scheduler under it too.
RBAC_KINDS = ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
POLICY_KINDS = {
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
}
# Every rule the chart renders in namespace scope, as "<role suffix>:<resources>:<verbs>".
# Each one with the step that must break without it (the first step of
# scheduler_does_its_job that fails): a rule whose loss broke something else, or nothing,
# would fail the test.
RULES = {
    "pods:pods:get,list,watch,patch,delete": "valid Pod bound",  # no Pod cache at all
    "pods:pods/binding:create": "valid Pod bound",
    "pods:pods/status:patch": "invalid Pod's condition",
    "pods:events:create": "Scheduled Event",
    "pods:podgroups:get": "PodGroup member bound",  # cannot read its group: waits
    "nodes:nodes:get,list,watch": "valid Pod bound",  # no Node cache: never ready to act
    "slurmd:pods:list,watch": "valid Pod bound",  # no Slurm node → Node map
    "leader:leases:create": "valid Pod bound",  # cannot make its Lease: never the leader
    "leader:leases:get,update": "valid Pod bound",  # cannot read or renew it (named: no other Lease)
    # The scheduler's own Pod lives in the release's namespace, which it never watches.
    "leader:pods:patch": "leader label on the scheduler's Pod",
}


def rule_id(role: dict[str, Any], rule: dict[str, Any]) -> str:
    suffix = role["metadata"]["name"].rsplit("-", 1)[1]
    return f"{suffix}:{','.join(rule['resources'])}:{','.join(rule['verbs'])}"


def collection(obj: dict[str, Any]) -> str:
    namespace = obj["metadata"].get("namespace")
    if obj["kind"] in POLICY_KINDS:
        return f"{ADMISSION}/{POLICY_KINDS[obj['kind']]}"
    plural = {"ServiceAccount": "serviceaccounts", "Role": "roles", "RoleBinding": "rolebindings"}
    if obj["kind"] == "ServiceAccount":
        return f"/api/v1/namespaces/{namespace}/serviceaccounts"
    if obj["kind"] in ("ClusterRole", "ClusterRoleBinding"):
        return f"{RBAC}/{obj['kind'].lower()}s"
    return f"{RBAC}/namespaces/{namespace}/{plural[obj['kind']]}"


@pytest.fixture
def keys(kube: AdminKube, namespace: str) -> Iterator[str]:
    """The release's namespace (the scheduler's account, Lease and own Pod): apart from the
    tenants' namespace its Pods are placed in, as the chart requires."""
    name = f"{namespace}-k"
    kube.create_namespace(name)
    yield name
    kube.delete(f"/api/v1/namespaces/{name}")


@pytest.fixture
def chart_rbac(helm: Path, namespace: str, keys: str, kube: AdminKube) -> Iterator[list[dict[str, Any]]]:
    objects = render(
        helm,
        "scheduler.scope.type=namespace",
        f"scheduler.scope.namespaces={namespace}",
        f"scheduler.slurmd.namespace={topology.SLURMD_NAMESPACE}",
        namespace=keys,
        release="rbac",
    )
    rbac = [
        o
        for o in objects
        if o["kind"]
        in ("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", *POLICY_KINDS)
        and not o["metadata"]["name"].endswith("-hooks-secret")  # the secret Job's own (test below)
    ]
    yield rbac
    for obj in rbac:
        kube.delete(f"{collection(obj)}/{obj['metadata']['name']}")


def apply(kube: AdminKube, objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        try:
            kube.create(collection(obj), obj)
        except KubeError as err:
            if err.status != 409:
                raise
            kube.request("PUT", f"{collection(obj)}/{obj['metadata']['name']}", obj)


def account_token(kube: AdminKube, namespace: str, account: str) -> str:
    """A fresh token of ServiceAccount `account`."""
    token: str = kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )["status"]["token"]
    return token


def kubeconfig_of(dev_cluster: DevCluster, kube: AdminKube, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig acting as ServiceAccount `account`: what its Pod would be allowed."""
    token = account_token(kube, namespace, account)
    cluster = {
        "server": dev_cluster.layout.apiserver_url,
        "certificate-authority": str(dev_cluster.layout.kube / "ca.crt"),
    }
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "dev", "cluster": cluster}],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "dev", "user": "sa"}}],
        "current-context": "sa",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def scheduler_name(keys: str) -> str:
    """The chart's default scheduler name: <release namespace>-<release>."""
    return f"{keys}-rbac"


def scheduler_as_serviceaccount(
    dev_cluster: DevCluster, kube: AdminKube, namespace: str, keys: str, tmp_path: Path
) -> SchedulerProcess:
    kubeconfig = kubeconfig_of(dev_cluster, kube, keys, "rbac-sunk-scheduler", tmp_path / "sa.kubeconfig")
    # A stand-in for the scheduler's own Pod, which the leader labels.
    create(kube, keys, make_pod("scheduler-self", "nobody"))
    return SchedulerProcess(
        dev_cluster,
        scheduler_name(keys),  # the chart's own: its admission policy names it
        f"--kubeconfig={kubeconfig}",
        f"--watch-namespace={namespace}",
        f"--slurmd-namespace={topology.SLURMD_NAMESPACE}",
        f"--ignore-namespace={keys}",
        "--leader-elect=true",
        f"--leader-election-namespace={keys}",
        # The chart names the Lease after its scheduler name, and its rule allows that
        # Lease only.
        f"--leader-election-id={scheduler_name(keys)}",
        env={"POD_NAME": "scheduler-self", "POD_NAMESPACE": keys},
    )


def scheduler_does_its_job(
    kube: AdminKube,
    slurm: SlurmRest,
    dev_cluster: DevCluster,
    namespace: str,
    keys: str,
    name: str,
    within: float,
) -> str | None:
    """None if every step works; otherwise the first step that did not."""
    create(kube, namespace, make_pod("valid", name))
    create(kube, namespace, make_pod("invalid", name, grace=30))
    kube.create(
        f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/podgroups",
        {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "g"}},
    )
    gang_member = make_pod("member", name)
    gang_member["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "g"}
    create(kube, namespace, gang_member)
    steps = {
        "valid Pod bound": lambda: (p := get(kube, namespace, "valid")) and p["spec"].get("nodeName"),
        "Scheduled Event": lambda: any(
            e["reason"] == "Scheduled" for e in events_for(kube, namespace, "valid")
        ),
        "invalid Pod's condition": lambda: (
            condition(get(kube, namespace, "invalid") or {}).get("reason") == "InvalidForSlurm"
        ),
        "leader label on the scheduler's Pod": lambda: (
            (get(kube, keys, "scheduler-self") or {})["metadata"]
            .get("labels", {})
            .get("sunk.coreweave.com/leader")
            == "true"
        ),
        "PodGroup member bound": lambda: (p := get(kube, namespace, "member")) and p["spec"].get("nodeName"),
    }
    deadline = time.monotonic() + within
    for step, probe in steps.items():
        while not probe():
            if time.monotonic() > deadline:
                return step
            time.sleep(0.1)
    for pod in ("valid", "member"):
        run_cli(dev_cluster.layout, "scancel", str(job_of(get(kube, namespace, pod) or {}, slurm)["job_id"]))
        while get(kube, namespace, pod) is not None:
            if time.monotonic() > deadline:
                return "Pod deleted after its job was cancelled"
            time.sleep(0.1)
    return None


def test_r1_1_the_chart_renders_exactly_the_rules_these_tests_cover(chart_rbac: list[dict[str, Any]]) -> None:
    roles = [o for o in chart_rbac if o["kind"] in ("Role", "ClusterRole")]
    assert sorted(rule_id(r, rule) for r in roles for rule in r["rules"]) == sorted(RULES)


def test_r1_1_the_scheduler_works_with_exactly_the_charts_rbac(
    kube: AdminKube,
    slurm: SlurmRest,
    dev_cluster: DevCluster,
    namespace: str,
    keys: str,
    chart_rbac: list[dict[str, Any]],
    tmp_path: Path,
) -> None:
    apply(kube, chart_rbac)
    proc = scheduler_as_serviceaccount(dev_cluster, kube, namespace, keys, tmp_path).start(wait=False)
    try:
        assert scheduler_does_its_job(kube, slurm, dev_cluster, namespace, keys, proc.name, within=30) is None
    finally:
        proc.stop()


@pytest.mark.parametrize("missing", RULES)
def test_r1_1_each_rbac_rule_is_needed(
    kube: AdminKube,
    slurm: SlurmRest,
    dev_cluster: DevCluster,
    namespace: str,
    keys: str,
    chart_rbac: list[dict[str, Any]],
    tmp_path: Path,
    missing: str,
) -> None:
    reduced = copy.deepcopy(chart_rbac)
    for obj in reduced:
        if obj["kind"] in ("Role", "ClusterRole"):
            obj["rules"] = [rule for rule in obj["rules"] if rule_id(obj, rule) != missing]
    apply(kube, reduced)
    proc = scheduler_as_serviceaccount(dev_cluster, kube, namespace, keys, tmp_path).start(wait=False)
    try:
        broken = scheduler_does_its_job(kube, slurm, dev_cluster, namespace, keys, proc.name, within=20)
    finally:
        proc.stop()
        # The Pods go first; then a healthy scheduler of the same name, on the same hooks
        # address, ends whatever jobs the crippled one left, as a fixed deployment would.
        # (Started while the Pods still existed, it would submit jobs of its own, and a wait
        # that found none yet would stop it with one just accepted and nobody to end it.)
        kube.request("DELETE", f"/api/v1/namespaces/{namespace}/pods")
        wait_for(
            lambda: not kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"],
            timeout=60,
            what="the test's Pods to be gone",
        )
        healthy = SchedulerProcess(
            dev_cluster, proc.name, f"--watch-namespace={namespace}", hooks_port=proc.hooks_port
        ).start()
        delete_pods_and_wait_for_their_jobs(kube, slurm, namespace)
        healthy.stop()
    assert broken == RULES[missing], f"without {missing} the step that broke was {broken!r}"
    print(f"\nwithout {missing}: {broken} fails")


def test_r12_4_the_hooks_secret_job_makes_the_secret_once_with_only_its_own_rights(
    helm: Path, kube: AdminKube, dev_cluster: DevCluster, namespace: str, tmp_path: Path
) -> None:
    """The chart renders no secret (so `helm template` is stable); its Job, with the Role the
    chart gives it, creates the Secret once and never changes it."""
    objects = render(helm, namespace=namespace, release="rbac")
    assert not [o for o in objects if o["kind"] == "Secret"]
    [job] = [o for o in objects if o["kind"] == "Job"]
    own = [o for o in objects if o["metadata"]["name"].endswith("-hooks-secret") and o["kind"] != "Job"]
    apply(kube, own)
    account = "rbac-sunk-scheduler-hooks-secret"
    kubeconfig = kubeconfig_of(dev_cluster, kube, namespace, account, tmp_path / "job.kubeconfig")
    argv = [sys.executable, "-m", "sunk.cli", *job["spec"]["template"]["spec"]["containers"][0]["args"]]
    try:
        first = subprocess.run([*argv, f"--kubeconfig={kubeconfig}"], capture_output=True, text=True)
        assert first.returncode == 0 and "created" in first.stdout, first.stderr
        made = kube.get(f"/api/v1/namespaces/{namespace}/secrets/rbac-sunk-scheduler-hooks")["data"]["secret"]
        second = subprocess.run(
            [*argv, f"--kubeconfig={kubeconfig}"], capture_output=True, text=True, check=True
        )
        assert "left as it is" in second.stdout
        assert (
            kube.get(f"/api/v1/namespaces/{namespace}/secrets/rbac-sunk-scheduler-hooks")["data"]["secret"]
            == made
        )
        assert render(helm, namespace=namespace, release="rbac") == objects  # the same on every render
    finally:
        for obj in own:
            kube.delete(f"{collection(obj)}/{obj['metadata']['name']}")


def refusal(call: Callable[[], object]) -> str | None:
    """The policy's words if the API server refused `call`, None if it was allowed."""
    try:
        call()
    except KubeError as err:
        assert err.status == 403, err
        return str(json.loads(err.body)["message"])
    return None


def test_issue38_the_schedulers_account_may_change_only_what_the_scheduler_changes(
    kube: AdminKube, dev_cluster: DevCluster, namespace: str, keys: str, chart_rbac: list[dict[str, Any]]
) -> None:
    """RBAC lets the account patch and delete Pods; the chart's admission policy narrows that
    to the scheduler's own writes, so a stolen token cannot touch other Pods or fields."""
    apply(kube, chart_rbac)
    ours, theirs = scheduler_name(keys), "nobody"
    create(kube, namespace, make_pod("ours", ours, annotations={"team": "a"}))
    create(kube, namespace, make_pod("theirs", theirs))
    account = AdminKube(dev_cluster.layout, token=account_token(kube, keys, "rbac-sunk-scheduler"))
    pods = f"/api/v1/namespaces/{namespace}/pods"

    def annotate(pod: str, annotations: dict[str, str | None]) -> object:
        return account.request("PATCH", f"{pods}/{pod}", {"metadata": {"annotations": annotations}})

    try:
        # The policy is enforced once the API server's informer has it: wait for a refusal.
        wait_for(
            lambda: refusal(lambda: annotate("theirs", {P + "job-id": "1"})), timeout=20, what="the policy"
        )
        assert refusal(lambda: annotate("ours", {P + "job-id": "7"})) is None
        assert refusal(lambda: annotate("ours", {P + "job-id": None})) is None
        refused = {
            "another annotation": refusal(lambda: annotate("ours", {"team": "b"})),
            "a label": refusal(
                lambda: account.request("PATCH", f"{pods}/ours", {"metadata": {"labels": {"x": "y"}}})
            ),
            "a finalizer": refusal(
                lambda: account.request("PATCH", f"{pods}/ours", {"metadata": {"finalizers": ["x.io/y"]}})
            ),
            "the Ready condition": refusal(
                lambda: account.request(
                    "PATCH",
                    f"{pods}/ours/status",
                    {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
                )
            ),
            "another scheduler's Pod deleted": refusal(lambda: account.request("DELETE", f"{pods}/theirs")),
        }
        assert all(refused.values()), refused
        assert "may change only the annotations under " + P in str(refused["another annotation"])
        assert "may only change Pods that name it" in str(refused["another scheduler's Pod deleted"])
        assert refusal(lambda: account.request("DELETE", f"{pods}/ours")) is None
    finally:
        account.close()
