"""What a Helm chart's workloads need from the dev cluster with real Nodes, checked on real
containers: the default scheduler (on real Nodes only), PersistentVolumeClaims of the
default StorageClass that outlive their Pods, and the two images that are not Slurm's:
MariaDB (with slurmdbd in front of it) and sunk itself.

Runs on the dev cluster with real Nodes (`SUNK_TEST_CLUSTER=real`, which `make test` runs).
"""

from __future__ import annotations

import base64
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sunk_dev import DevCluster, fileserver, images, storage
from sunk_dev.images import Built
from sunk_dev.kubeapi import AdminKube
from sunk_dev.layout import cache_dir
from sunk_dev.realnode import REAL_NODE_LABEL
from tests.conftest import SLURM
from tests.e2e.slurm_in_pods import containers_running, delete_namespace
from tests.support import condition, pod_story, wait_for

pytestmark = pytest.mark.real_nodes

ON_REAL_NODES = {REAL_NODE_LABEL: "true"}
MARIADB_UID = 999


@pytest.fixture(scope="module")
def built(dev_cluster: DevCluster) -> dict[str, Built]:
    """The images the real Nodes hold (what `up` imported), by name."""
    found = images.read_manifest(dev_cluster.layout.images_file)
    assert set(found) == set(images.IMAGES), "every image ensure_images makes is in every real Node"
    assert found["slurmd"].tag.endswith(f":{SLURM}")
    return found


def kubectl(
    cluster: DevCluster, namespace: str, *argv: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    command = [
        str(cache_dir() / "bin" / "kubectl"),
        f"--kubeconfig={cluster.layout.kubeconfig}",
        "-n",
        namespace,
    ]
    return subprocess.run([*command, *argv], capture_output=True, text=True, timeout=timeout)


def in_pod(cluster: DevCluster, namespace: str, pod: str, script: str) -> str:
    """`sh -c script` in the Pod's first container, through the API server and its kubelet."""
    done = kubectl(cluster, namespace, "exec", pod, "--", "sh", "-c", script)
    assert done.returncode == 0, f"in {pod}: {script!r} failed: {done.stderr.strip()}"
    return done.stdout


def pod(kube: AdminKube, namespace: str, name: str) -> dict[str, Any]:
    return kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")


def running(kube: AdminKube, namespace: str, name: str) -> dict[str, Any] | None:
    found = kube.find(f"/api/v1/namespaces/{namespace}/pods/{name}")
    return found if found and containers_running(found) else None


def sleeper(name: str, image: str, **spec: Any) -> dict[str, Any]:
    """A Pod (or a Pod template, for a controller) that sleeps in `image`, labelled app=name."""
    return {
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "infinity"],
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                }
            ],
            **spec,
        },
    }


# -- the default scheduler -----------------------------------------------------------------------
def test_the_default_scheduler_places_deployments_on_real_nodes_and_never_on_kwok_nodes(
    kube: AdminKube, namespace: str, built: dict[str, Built]
) -> None:
    image = built["slurm-base"].tag
    template = sleeper("web", image, nodeSelector=ON_REAL_NODES)
    kube.create(
        f"/apis/apps/v1/namespaces/{namespace}/deployments",
        {
            "metadata": {"name": "web"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": template},
        },
    )
    pods = f"/api/v1/namespaces/{namespace}/pods"
    kube.create(pods, sleeper("no-selector", image))
    kube.create(pods, sleeper("wants-kwok", image, nodeSelector={"sunk.dev/kwok": "true"}))

    def web_running() -> list[dict[str, Any]] | None:
        found = kube.get(pods, labelSelector="app=web")["items"]
        return found if len(found) == 2 and all(containers_running(p) for p in found) else None

    for placed in wait_for(web_running, timeout=60, what="the Deployment's two Pods to run"):
        assert placed["spec"]["nodeName"].startswith("real-"), placed["spec"]["nodeName"]
    no_selector = wait_for(
        lambda: running(kube, namespace, "no-selector"), timeout=60, what="no-selector to run"
    )
    assert no_selector["spec"]["nodeName"].startswith("real-"), (
        "a Pod without a selector must land on a real Node"
    )
    refused = wait_for(
        lambda: (
            condition(pod(kube, namespace, "wants-kwok")).get("reason") == "Unschedulable"
            and pod(kube, namespace, "wants-kwok")
        ),
        timeout=30,
        what="the Pod asking for a kwok Node to be found unschedulable",
    )
    assert not refused["spec"].get("nodeName")
    assert "scheduler-enforced node affinity" in condition(refused)["message"]


# -- volumes --------------------------------------------------------------------------------------
def statefulset(name: str, image: str, script: str, uid: int) -> dict[str, Any]:
    """One replica running `script` as `uid`, its `data` volume from a claim of the default class."""
    template = sleeper(name, image, nodeSelector=ON_REAL_NODES)
    template["spec"]["securityContext"] = {"runAsUser": uid, "runAsGroup": uid, "runAsNonRoot": True}
    main = template["spec"]["containers"][0]
    main["command"] = ["sh", "-c", script]
    main["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    return {
        "metadata": {"name": name},
        "spec": {
            "serviceName": name,
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": template,
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
                }
            ],
        },
    }


def test_a_statefulsets_volume_keeps_its_data_when_the_statefulset_is_deleted_and_created_again(
    dev_cluster: DevCluster, kube: AdminKube, namespace: str, built: dict[str, Built]
) -> None:
    """A non-root Pod writes to its claimed volume; the StatefulSet goes and comes back (its
    Pod may land on another real Node) and finds the file. The volume is the dev file server's:
    the Pod sees a GlusterFS mount, and the file lies on the server's brick with the Pod's
    user as owner. Deleting the claim then removes the volume and its data."""
    layout = dev_cluster.layout
    token = secrets.token_hex(8)
    sets = f"/apis/apps/v1/namespaces/{namespace}/statefulsets"
    write = f"test -e /data/token || echo {token} > /data/token; exec sleep infinity"
    started = time.monotonic()
    kube.create(sets, statefulset("keeper", built["slurm-base"].tag, write, uid=4242))
    claim_path = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/data-keeper-0"
    claim = wait_for(
        lambda: (
            (kube.find(claim_path) or {}).get("status", {}).get("phase") == "Bound" and kube.get(claim_path)
        ),
        timeout=30,
        what="the StatefulSet's claim to be bound",
    )
    print(f"claim bound {time.monotonic() - started:.2f} s after the StatefulSet was created")
    assert claim["spec"]["storageClassName"] == storage.STORAGE_CLASS  # the default class
    volume = kube.get(f"/api/v1/persistentvolumes/{claim['spec']['volumeName']}")
    data = Path(volume["spec"]["hostPath"]["path"])
    assert data.parent == layout.volumes
    # 120 s: in `make test` this runs beside the kwok lane on the same 2 cores, and 60 s ran
    # out once (2026-11-29, claim bound at once; where the Pod's start waited was not found).
    wait_for(lambda: running(kube, namespace, "keeper-0"), timeout=120, what="keeper-0 to run")
    assert in_pod(dev_cluster, namespace, "keeper-0", "cat /data/token").strip() == token
    mounts = in_pod(dev_cluster, namespace, "keeper-0", "grep ' /data ' /proc/mounts")
    assert mounts.split()[2] == fileserver.FSTYPE, mounts
    served = fileserver.on_server(layout, data)
    assert (served / "token").read_text().strip() == token, "the write did not reach the file server"
    assert (served / "token").stat().st_uid == 4242, "written by the Pod's non-root user"
    assert not data.exists(), "the host itself never mounts the shared volume"

    kube.delete(f"{sets}/keeper")
    wait_for(
        lambda: kube.find(f"/api/v1/namespaces/{namespace}/pods/keeper-0") is None or None,
        timeout=60,
        what="keeper-0 to be gone",
    )
    kube.create(sets, statefulset("keeper", built["slurm-base"].tag, "exec sleep infinity", uid=4242))
    wait_for(lambda: running(kube, namespace, "keeper-0"), timeout=60, what="the new keeper-0 to run")
    assert in_pod(dev_cluster, namespace, "keeper-0", "cat /data/token").strip() == token

    kube.delete(f"{sets}/keeper")
    kube.delete(claim_path)  # held by pvc-protection until keeper-0 is gone
    wait_for(
        lambda: kube.find(f"/api/v1/persistentvolumes/{volume['metadata']['name']}") is None or None,
        timeout=60,
        what="the Released volume to be deleted",
    )
    assert not served.exists(), "the deleted claim's data is still on the file server"


# -- MariaDB and slurmdbd -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mariadb(dev_cluster: DevCluster, kube: AdminKube, built: dict[str, Built]) -> Iterator[str]:
    """The mariadb image as a chart would run it: a StatefulSet on a claimed volume, the
    password from a Secret mounted as a file, a Service in front. Yields the namespace."""
    namespace = kube.create_namespace(f"mariadb-{secrets.token_hex(3)}")
    password = f"pw'\"\\{secrets.token_hex(8)}"  # quotes and a backslash: the SQL must escape them
    kube.create(
        f"/api/v1/namespaces/{namespace}/secrets",
        {"metadata": {"name": "db"}, "data": {"password": base64.b64encode(password.encode()).decode()}},
    )
    template = sleeper("mariadb", built["mariadb"].tag, nodeSelector=ON_REAL_NODES)
    template["spec"]["terminationGracePeriodSeconds"] = 10
    template["spec"]["securityContext"] = {"runAsNonRoot": True, "fsGroup": MARIADB_UID}
    template["spec"]["volumes"] = [{"name": "secret", "secret": {"secretName": "db", "defaultMode": 0o440}}]
    main = template["spec"]["containers"][0]
    del main["command"]
    main["env"] = [
        {"name": "MARIADB_DATABASE", "value": "slurm_acct_db"},
        {"name": "MARIADB_USER", "value": "slurm"},
        {"name": "MARIADB_PASSWORD_FILE", "value": "/etc/mariadb-secret/password"},
    ]
    main["ports"] = [{"containerPort": 3306, "name": "mysql"}]
    # As the container's own user through the socket: the image's passwordless admin account.
    main["readinessProbe"] = {"exec": {"command": ["mariadb", "-e", "select 1"]}, "periodSeconds": 1}
    main["volumeMounts"] = [
        {"name": "data", "mountPath": "/var/lib/mysql"},
        {"name": "secret", "mountPath": "/etc/mariadb-secret", "readOnly": True},
    ]
    claim = {"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
    claim["spec"]["resources"] = {"requests": {"storage": "2Gi"}}
    kube.create(
        f"/apis/apps/v1/namespaces/{namespace}/statefulsets",
        {
            "metadata": {"name": "mariadb"},
            "spec": {
                "serviceName": "mariadb",
                "replicas": 1,
                "selector": {"matchLabels": {"app": "mariadb"}},
                "template": template,
                "volumeClaimTemplates": [claim],
            },
        },
    )
    kube.create(
        f"/api/v1/namespaces/{namespace}/services",
        {
            "metadata": {"name": "mariadb"},
            "spec": {"selector": {"app": "mariadb"}, "ports": [{"port": 3306}]},
        },
    )
    wait_for(
        lambda: _ready(kube, namespace, "mariadb-0"),
        timeout=90,
        what="MariaDB to be ready",
        explain=lambda: pod_story(kube, namespace, "mariadb-0"),
    )
    # Ready is the Pod's own view; the Service answers once kube-proxy has its endpoint.
    wait_for(
        lambda: _through_service(dev_cluster, namespace),
        timeout=60,
        what="MariaDB to answer through its Service",
        every=1,
    )
    yield namespace
    delete_namespace(kube, namespace)


def _through_service(cluster: DevCluster, namespace: str) -> bool:
    probe = SQL_AS_SLURM.replace("mariadb -N", "mariadb --connect-timeout=3 -N").format("'select 1'")
    return kubectl(cluster, namespace, "exec", "mariadb-0", "--", "sh", "-c", probe).returncode == 0


def _ready(kube: AdminKube, namespace: str, name: str) -> bool:
    found = kube.find(f"/api/v1/namespaces/{namespace}/pods/{name}")
    return bool(found) and condition(found or {}, "Ready").get("status") == "True"


SQL_AS_SLURM = (
    'MYSQL_PWD="$(cat /etc/mariadb-secret/password)" '
    "mariadb -N -h mariadb -u slurm slurm_acct_db -e {}"  # through the Service, as slurmdbd connects
)


def test_mariadb_initialises_its_volume_and_its_user_can_create_tables_and_keep_them(
    dev_cluster: DevCluster, kube: AdminKube, mariadb: str
) -> None:
    ns = mariadb
    create = SQL_AS_SLURM.format("'create table t (n int); insert into t values (42)'")
    assert in_pod(dev_cluster, ns, "mariadb-0", f"id -u; {create}").split() == [str(MARIADB_UID)]
    owner = in_pod(dev_cluster, ns, "mariadb-0", "ls -ln /var/lib/mysql/ibdata1").split()[2]
    assert owner == str(MARIADB_UID)
    ask = SQL_AS_SLURM.format("'select @@innodb_snapshot_isolation, @@innodb_lock_wait_timeout'")
    assert in_pod(dev_cluster, ns, "mariadb-0", ask).split() == ["0", "900"], "what slurmdbd needs"
    wrong = kubectl(
        dev_cluster, ns, "exec", "mariadb-0", "--", "mariadb", "-h", "mariadb", "-u", "slurm", "-pno"
    )
    assert wrong.returncode != 0 and "Access denied" in wrong.stderr

    password = in_pod(dev_cluster, ns, "mariadb-0", "cat /etc/mariadb-secret/password")
    log = kubectl(dev_cluster, ns, "logs", "mariadb-0").stdout
    assert "initialising the empty data directory" in log and password not in log

    # A restart finds the data directory initialised: nothing is made again, nothing is lost.
    restart_mariadb(kube, ns)
    assert in_pod(dev_cluster, ns, "mariadb-0", SQL_AS_SLURM.format("'select n from t'")).split() == ["42"]
    again = kubectl(dev_cluster, ns, "logs", "mariadb-0").stdout
    assert "initialising" not in again and password not in again


def restart_mariadb(kube: AdminKube, namespace: str) -> None:
    """Delete mariadb-0 and wait for its successor (a new uid) to be ready."""
    old = pod(kube, namespace, "mariadb-0")["metadata"]["uid"]
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/mariadb-0")

    def successor_ready() -> bool:
        found = kube.find(f"/api/v1/namespaces/{namespace}/pods/mariadb-0")
        return bool(found) and found["metadata"]["uid"] != old and _ready(kube, namespace, "mariadb-0")

    wait_for(successor_ready, timeout=90, what="the restarted MariaDB to be ready")


def test_slurmdbd_creates_its_tables_in_mariadb(
    dev_cluster: DevCluster, kube: AdminKube, mariadb: str, built: dict[str, Built]
) -> None:
    """The slurmdbd image against the mariadb image, as the chart will pair them. First the
    user's password is rotated (a new Secret, a restart): slurm.conf-style files cannot carry
    the quotes and backslash the first one had."""
    ns = mariadb
    password = secrets.token_hex(12)
    kube.patch(f"/api/v1/namespaces/{ns}/secrets/db", {"stringData": {"password": password}})
    restart_mariadb(kube, ns)
    assert in_pod(dev_cluster, ns, "mariadb-0", SQL_AS_SLURM.format("'select 1'")).split() == ["1"]
    conf = "\n".join(
        [
            "AuthType=auth/slurm",
            "DbdHost=slurmdbd",
            "SlurmUser=slurm",
            "StorageType=accounting_storage/mysql",
            f"StorageHost=mariadb.{ns}.svc.cluster.local",
            "StorageUser=slurm",
            f"StoragePass={password}",
            "StorageLoc=slurm_acct_db",
            "PidFile=/run/slurmdbd/slurmdbd.pid",
            "",
        ]
    )
    keys = {"slurmdbd.conf": conf.encode(), "slurm.key": secrets.token_bytes(1024)}
    kube.create(
        f"/api/v1/namespaces/{ns}/secrets",
        {
            "metadata": {"name": "slurmdbd"},
            "data": {k: base64.b64encode(v).decode() for k, v in keys.items()},
        },
    )
    dbd = sleeper("slurmdbd", built["slurmdbd"].tag, nodeSelector=ON_REAL_NODES)
    dbd["spec"]["securityContext"] = {"runAsNonRoot": True, "runAsUser": 64030, "fsGroup": 64030}
    dbd["spec"]["volumes"] = [
        {"name": "conf", "secret": {"secretName": "slurmdbd", "defaultMode": 0o440}},
        {"name": "etc", "emptyDir": {}},
    ]
    main = dbd["spec"]["containers"][0]
    # slurmdbd wants slurmdbd.conf owned by SlurmUser and mode 0600, which a Secret volume
    # cannot give: copy it (and the key) into an emptyDir first.
    copy = "cp /conf/slurmdbd.conf /conf/slurm.key /etc/slurm/ && chmod 600 /etc/slurm/*"
    main["command"] = ["tini", "--", "sh", "-c", f"{copy} && exec slurmdbd -D"]
    main["volumeMounts"] = [
        {"name": "conf", "mountPath": "/conf"},
        {"name": "etc", "mountPath": "/etc/slurm"},
    ]
    kube.create(f"/api/v1/namespaces/{ns}/pods", dbd)

    # slurmdbd makes its tables one after another: wait for the last ones looked at, not the
    # first (a loaded machine caught it between cluster_table and user_table).
    wanted = {"cluster_table", "acct_table", "qos_table", "user_table"}

    def tables() -> set[str] | None:
        out = set(in_pod(dev_cluster, ns, "mariadb-0", SQL_AS_SLURM.format("'show tables'")).split())
        return out if wanted <= out else None

    wait_for(tables, timeout=120, what=f"slurmdbd to make {', '.join(sorted(wanted))}", every=1)

    def started_log() -> str | None:
        """The container's log once it shows slurmdbd's start (the kubelet can answer a
        moment before its copy holds the first lines, or fail a request on a busy machine)."""
        done = kubectl(dev_cluster, ns, "logs", "slurmdbd")
        return done.stdout if done.returncode == 0 and "slurmdbd version" in done.stdout else None

    log = wait_for(started_log, timeout=30, what="slurmdbd's start in its log", every=1)
    assert "not recommended" not in log, log  # the image's InnoDB settings are those slurmdbd checks


# -- sunk -----------------------------------------------------------------------------------------
def test_the_sunk_image_runs_sunk_as_a_non_root_user(
    dev_cluster: DevCluster, kube: AdminKube, namespace: str, built: dict[str, Built]
) -> None:
    spec = {
        "restartPolicy": "Never",
        "nodeSelector": ON_REAL_NODES,
        "automountServiceAccountToken": False,
        # The kubelet refuses to start the container if the image's user is root or a name.
        "securityContext": {"runAsNonRoot": True},
        "containers": [
            {
                "name": "sunk",
                "image": built["sunk"].tag,
                "imagePullPolicy": "Never",
                "args": ["--help"],
                "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False},
            }
        ],
    }
    kube.create(f"/api/v1/namespaces/{namespace}/pods", {"metadata": {"name": "sunk-help"}, "spec": spec})
    done = wait_for(
        lambda: (
            pod(kube, namespace, "sunk-help")["status"].get("phase") in ("Succeeded", "Failed")
            and pod(kube, namespace, "sunk-help")
        ),
        timeout=60,
        what="sunk --help to finish",
    )
    log = kubectl(dev_cluster, namespace, "logs", "sunk-help").stdout
    assert done["status"]["phase"] == "Succeeded", log
    assert "usage: sunk" in log and "scheduler" in log
