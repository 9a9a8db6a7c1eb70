"""examples/train-and-serve on the dev cluster's real Nodes, one step at a time, for
`sunk demo`; and `release`, what `sunk dev release` (the README's step 2) runs.

The steps a person takes with the example (build the image, install the chart with the
example's values, apply its NodeSet, train with its batch script, serve with its Deployment),
done with the example's own files; only the names differ from the README's: the demo's own
namespace, its serving namespace and scheduler in place of `tns`, `tns-apps` and
`tns-slurm`. The README's own commands are what tests/e2e/test_train_and_serve.py runs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from sunk_dev import directory_admin, procs, registry
from sunk_dev.cluster import DevCluster
from sunk_dev.errors import DevClusterError
from sunk_dev.kubeapi import AdminKube
from sunk_dev.people import directory_values, prepare_namespace, ssh, wait_associated
from sunk_dev.platform import Platform, merge_values, nodeset

Json = dict[str, Any]
# dev/src/sunk_dev/story.py -> the checkout's examples/ (the dev package runs from a checkout).
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "train-and-serve"
MEMBERS = 3
WORKDIR = "/shared/train-and-serve"
PERSON = "alice"
# The README's release namespace; its serving namespace is `tns-apps`.
README_NAMESPACE = "tns"
# Who the serving Pods' Slurm jobs run as (values.yaml's policy): a service user of the
# directory in the group `inference`, whose Slurm account of that name the operator keeps.
SERVICE_USER, SERVICE_UID = "serving", 20100
SERVICE_GROUP, SERVICE_GID = "inference", 30100


def example(name: str) -> list[Json]:
    """The documents of one of the example's YAML files."""
    return [doc for doc in yaml.safe_load_all((EXAMPLE / name).read_text()) if doc]


def build_image(cluster: DevCluster) -> str:
    """The example's image, FROM the slurmd image the Nodes run, in the dev registry."""
    return registry.build_from_slurmd(cluster.layout, EXAMPLE / "image", "train-and-serve")


def release(cluster: DevCluster, kube: AdminKube, namespace: str, *extra: Json) -> tuple[Platform, float]:
    """`sunk dev release`: the chart as release `slurm` in `namespace` with the dev values,
    the dev directory's (its people, their `people` account) and the dev registry, and then
    `extra` on top, as helm merges `-f` files (maps key by key, lists whole); the Platform
    and the seconds the install took."""
    prepare_namespace(cluster, kube, namespace)
    plat = Platform(cluster, namespace=namespace, release="slurm")
    values = directory_values(cluster)
    values["slurm"]["containers"] = {"insecureRegistries": [registry.running_address(cluster.layout)]}
    for more in extra:
        values = merge_values(values, more)
    return plat, plat.install(values)


def service_user(cluster: DevCluster) -> None:
    """The example's service user and group in the dev directory (README, step platform),
    unless they are there already."""
    known = directory_admin.snapshot(cluster.layout)
    if not any(g.name == SERVICE_GROUP for g in known.groups):
        directory_admin.add_group(cluster.layout, SERVICE_GROUP, gid=SERVICE_GID)
    if not any(u.name == SERVICE_USER for u in known.users):
        directory_admin.add_person(cluster.layout, SERVICE_USER, uid=SERVICE_UID, groups=[SERVICE_GROUP])


def example_values(namespace: str) -> Json:
    """values.yaml for a release in `namespace` rather than the README's `tns`: the serving
    namespace it names (in the scheduler's scope and policy) becomes `<namespace>-apps`."""
    values: Json = yaml.safe_load((EXAMPLE / "values.yaml").read_text())
    scheduler = values["scheduler"]["scheduler"]
    scheduler["scope"]["namespaces"] = f"{namespace}-apps"
    rules = scheduler["policy"]["namespaces"]
    rules[f"{namespace}-apps"] = rules.pop(f"{README_NAMESPACE}-apps")
    return values


def install(cluster: DevCluster, kube: AdminKube, namespace: str) -> Platform:
    """The chart with the directory's people and the example's values, the example's
    NodeSet, its members idle and the person's Slurm account made."""
    service_user(cluster)
    plat, _ = release(cluster, kube, namespace, example_values(namespace))
    [members] = example("nodeset.yaml")
    spec = members["spec"]
    plat.apply_nodeset(
        kube, nodeset("compute", spec["partitions"], replicas=MEMBERS, resources=spec["resources"])
    )
    procs.wait_until(
        lambda: plat.login("sinfo -h -p train -t idle -o %D").stdout.strip() == str(MEMBERS),
        timeout=240,
        what=f"{MEMBERS} members idle (kubectl -n {namespace} get nodesets,pods)",
        interval=1,
    )
    wait_associated(plat, PERSON)
    wait_associated(plat, SERVICE_USER, account=SERVICE_GROUP)
    return plat


def train(plat: Platform, kube: AdminKube, image: str, options: str = "", args: str = "") -> str:
    """The person submits the example's batch script from the shared directory (with sbatch
    `options`, and `args` for train.py); returns the job id."""
    script = (EXAMPLE / "train.sbatch").read_text()
    command = (
        f"mkdir -p {WORKDIR} && cd {WORKDIR} && cat > train.sbatch <<'SCRIPT'\n{script}SCRIPT\n"
        f"IMAGE={image} sbatch --parsable {options} train.sbatch {args}"
    )
    done = ssh(plat.cluster, kube, plat.namespace, PERSON, command, timeout=300)
    if done.returncode:
        raise DevClusterError(f"sbatch as {PERSON} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip()


def job_record(plat: Platform, job: str) -> dict[str, str]:
    """What accounting says of the job: State, Partition, Submit, Start, End, NodeList."""
    fields = ["State", "Partition", "Submit", "Start", "End", "NodeList"]
    said = plat.login(f"sacct -nPX -j {job} -o {','.join(fields)}").stdout.strip()
    return dict(zip(fields, said.split("|"), strict=True)) if said else {}


def job_output(plat: Platform, job: str) -> str:
    return plat.login(f"cat {WORKDIR}/slurm-{job}.out").stdout


def wait_completed(plat: Platform, job: str, timeout: float) -> dict[str, str]:
    """The job's record once it ended COMPLETED; its output in the error otherwise."""
    record: dict[str, str] = {}

    def ended() -> bool:
        record.update(job_record(plat, job))
        return bool(record) and record["State"] not in ("PENDING", "RUNNING", "COMPLETING")

    procs.wait_until(ended, timeout=timeout, what=f"job {job} to end (squeue on the login Pod)", interval=2)
    if record["State"] != "COMPLETED":
        raise DevClusterError(f"job {job} ended {record}:\n{job_output(plat, job)}")
    return record


ADMISSION = "/apis/admissionregistration.k8s.io/v1"


def read_only_policy(plat: Platform) -> str:
    """The name of storage.yaml's policy (and its binding) for the release's serving namespace."""
    return f"{plat.tenants}-checkpoints-read-only"


def serving_volume(plat: Platform, kube: AdminKube) -> None:
    """storage.yaml, filled in as the README fills it in: a second volume on the checkpoints'
    directory inside the one the provisioner made for the chart's claim (on the dev file
    server's volume, which every Node mounts), for the release's serving namespace, and the
    policy that lets its Pods mount it read-only only."""
    claim = kube.get(f"/api/v1/namespaces/{plat.namespace}/persistentvolumeclaims/slurm-checkpoints")
    source = kube.get(f"/api/v1/persistentvolumes/{claim['spec']['volumeName']}")["spec"]
    volume, serving_claim, policy, binding = example("storage.yaml")
    volume["metadata"]["name"] = f"{plat.tenants}-checkpoints"
    volume["spec"]["claimRef"]["namespace"] = plat.tenants
    published = WORKDIR.removeprefix("/shared/")  # the claim is mounted at /shared
    volume["spec"]["hostPath"]["path"] = f"{source['hostPath']['path']}/{published}/checkpoints"
    serving_claim["metadata"]["namespace"] = plat.tenants
    serving_claim["spec"]["volumeName"] = volume["metadata"]["name"]
    policy["metadata"]["name"] = binding["metadata"]["name"] = read_only_policy(plat)
    binding["spec"]["policyName"] = read_only_policy(plat)
    selector = policy["spec"]["matchConstraints"]["namespaceSelector"]["matchLabels"]
    selector["kubernetes.io/metadata.name"] = plat.tenants
    for path, body in (
        (f"{ADMISSION}/validatingadmissionpolicies", policy),
        (f"{ADMISSION}/validatingadmissionpolicybindings", binding),
    ):
        if kube.find(f"{path}/{body['metadata']['name']}") is None:
            kube.create(path, body)
    kube.create("/api/v1/persistentvolumes", volume)
    kube.create(f"/api/v1/namespaces/{plat.tenants}/persistentvolumeclaims", serving_claim)


def delete_read_only_policy(plat: Platform, kube: AdminKube) -> None:
    kube.delete(f"{ADMISSION}/validatingadmissionpolicybindings/{read_only_policy(plat)}")
    kube.delete(f"{ADMISSION}/validatingadmissionpolicies/{read_only_policy(plat)}")


def serve(plat: Platform, kube: AdminKube, image: str) -> None:
    """The claim, the example's Deployment (placed by the release's scheduler, the image
    filled in) and Service."""
    serving_volume(plat, kube)
    deployment, service = example("serve.yaml")
    pod = deployment["spec"]["template"]["spec"]
    pod["schedulerName"] = f"{plat.namespace}-{plat.release}"
    pod["containers"][0]["image"] = image
    kube.create(f"/apis/apps/v1/namespaces/{plat.tenants}/deployments", deployment)
    kube.create(f"/api/v1/namespaces/{plat.tenants}/services", service)


def serve_pods(plat: Platform, kube: AdminKube) -> list[Json]:
    """The Deployment's Pods that are not being deleted."""
    path = f"/api/v1/namespaces/{plat.tenants}/pods"
    pods = kube.get(path, labelSelector="app.kubernetes.io/name=serve")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def ready(pod: Json) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def wait_serving(plat: Platform, kube: AdminKube, timeout: float) -> None:
    replicas = example("serve.yaml")[0]["spec"]["replicas"]
    procs.wait_until(
        lambda: len([p for p in serve_pods(plat, kube) if ready(p)]) == replicas,
        timeout=timeout,
        what=f"{replicas} inference Pods ready (kubectl -n {plat.tenants} get pods)",
        interval=1,
    )


def ask(plat: Platform, kube: AdminKube, x: float, y: float) -> Json:
    """A prediction through the Service, asked from inside a slurmd Pod (which has curl)."""
    members = kube.get(
        f"/api/v1/namespaces/{plat.namespace}/pods", labelSelector="sunk.coreweave.com/nodeset=compute"
    )["items"]
    url = f"http://serve.{plat.tenants}.svc.cluster.local/predict?x={x}&y={y}"
    done = plat.kubectl("exec", members[0]["metadata"]["name"], "-c", "slurmd", "--", "curl", "-sf", url)
    if done.returncode:
        raise DevClusterError(f"curl {url}: exit {done.returncode} {done.stderr.strip()}")
    return dict(json.loads(done.stdout))


def reset(plat: Platform, kube: AdminKube) -> None:
    """What an earlier telling left, gone, while the release and its members stay, and with
    them the image each node has cached for the person: the Deployment, its Service and
    serving volume, the person's jobs and their files."""
    claim = f"/api/v1/namespaces/{plat.tenants}/persistentvolumeclaims/checkpoints"
    volume = f"/api/v1/persistentvolumes/{plat.tenants}-checkpoints"
    for path in (
        f"/apis/apps/v1/namespaces/{plat.tenants}/deployments/serve",
        f"/api/v1/namespaces/{plat.tenants}/services/serve",
        claim,  # held by pvc-protection until the Deployment's Pods are gone
        volume,
    ):
        kube.delete(path)
    plat.login(f"scancel -u {PERSON}")
    ssh(plat.cluster, kube, plat.namespace, PERSON, f"rm -rf {WORKDIR}", timeout=120)
    procs.wait_until(
        lambda: kube.find(claim) is None and kube.find(volume) is None,
        timeout=180,
        what=f"the serving Pods and their volume in {plat.tenants} to go",
        interval=1,
    )


def remove(plat: Platform, kube: AdminKube) -> None:
    """The Deployment, the release, the serving volume and its policy go (the chart keeps
    its claim)."""
    kube.delete(f"/apis/apps/v1/namespaces/{plat.tenants}/deployments/serve")
    plat.uninstall()
    kube.delete(f"/api/v1/persistentvolumes/{plat.tenants}-checkpoints")
    delete_read_only_policy(plat, kube)
