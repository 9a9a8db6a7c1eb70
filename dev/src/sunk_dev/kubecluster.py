"""The Kubernetes half of the dev cluster: etcd, kube-apiserver, kube-controller-manager's
workload controllers (Deployment, ReplicaSet, StatefulSet, Job...; with real Nodes also its
node lifecycle), kwok as the kubelets, and the Nodes and slurmd Pods."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path

import httpx
import yaml

from sunk_dev import procs, topology
from sunk_dev.kubeapi import AdminKube, KubeError
from sunk_dev.layout import HOST, Layout
from sunk_dev.pki import make_pki

SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
CONTROLLERS = (
    "namespace",
    "serviceaccount",
    "garbagecollector",
    "deployment",
    "replicaset",
    "statefulset",
    "job",
    "cronjob",
    "disruption",
    "ttl-after-finished",
    "podgc",
    # For Pods on real Nodes: the CA bundle every ServiceAccount token mount needs, and the
    # endpoints behind Services.
    "root-ca-cert-publisher",
    "endpointslice",
    # PersistentVolumeClaims: the binder matches claims and volumes (and hands claims of an
    # external provisioner's class to it: `storage`); the protection controllers lift the
    # finalizers the API server puts on every claim and volume, without which deleting a
    # claim (or its namespace) would hang for ever. On a cluster with no claims (kwok only)
    # they have nothing to do. No attach/detach controller: hostPath volumes attach nothing.
    "persistentvolume-binder",
    "pvc-protection",
    "pv-protection",
)
# With real Nodes only: a stopped machine's Node goes Unknown once its kubelet stops
# renewing its Lease, gets the unreachable taints, and its Pods are evicted when their
# toleration runs out (300 s, DefaultTolerationSeconds, per Pod), as on a real cluster.
# The kwok Nodes there keep Leases of their own (KWOK_LEASE_S) so they are never lost.
NODE_LIFECYCLE_CONTROLLERS = ("node-lifecycle-controller", "taint-eviction-controller")
# A kubelet renews its Lease every 10 s: 40 s (Kubernetes' own default before 1.32) is four
# missed renewals, so a 2-core machine running two test lanes does not lose a Node that
# lives, and a lost one is Unknown within about 42 s (the operator then marks its member
# DOWN: the e2e allows 60 s). The monitor looks every 2 s.
NODE_LIFECYCLE_FLAGS = ("--node-monitor-grace-period=40s", "--node-monitor-period=2s")
KWOK_LEASE_S = 20  # kwok renews every quarter of it: 5 s, well inside the grace period


def controller_manager_args(layout: Layout, binary: Path, *, node_lifecycle: bool) -> list[str]:
    """kube-controller-manager's command line; `node_lifecycle`: the cluster has real Nodes."""
    controllers = CONTROLLERS + (NODE_LIFECYCLE_CONTROLLERS if node_lifecycle else ())
    return [
        str(binary),
        f"--kubeconfig={layout.kubeconfig}",
        # The workload controllers users deploy inference and batch with, and what keeps
        # namespaces and owners tidy; the node lifecycle only next to real Nodes: on kwok
        # alone it has nothing to watch, and a loaded benchmark's kwok would lose Nodes.
        "--controllers=" + ",".join(controllers),
        *(NODE_LIFECYCLE_FLAGS if node_lifecycle else ()),
        "--leader-elect=false",
        f"--bind-address={HOST}",
        "--secure-port=0",
        f"--root-ca-file={layout.kube / 'ca.crt'}",
        "--v=1",
    ]


def kwok_args(layout: Layout, binary: Path, stages: Path, *, node_lifecycle: bool) -> list[str]:
    """kwok's command line: with the node lifecycle controller running, its Nodes hold
    Leases (without, kwok neither renews one nor updates their status after the first)."""
    return [
        str(binary),
        f"--kubeconfig={layout.kubeconfig}",
        f"--config={stages}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-label-selector={topology.KWOK_NODE_LABEL}=true",
        "--cidr=10.128.0.0/9",
        f"--node-ip={HOST}",
        *((f"--node-lease-duration-seconds={KWOK_LEASE_S}",) if node_lifecycle else ()),
    ]


def write_kubeconfig(layout: Layout, path: Path | None = None, cert: Path | None = None) -> None:
    """A kubeconfig for the dev API server: the admin's (the default), or one at `path` for
    the client certificate `cert`.{crt,key} (a kubelet, kube-proxy, CoreDNS)."""
    kube = layout.kube
    cert = cert or kube / "admin"
    user = "sunk-dev-admin" if cert == kube / "admin" else cert.name
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "sunk-dev",
                "cluster": {
                    "server": layout.apiserver_url,
                    "certificate-authority": str(kube / "ca.crt"),
                },
            }
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate": f"{cert}.crt", "client-key": f"{cert}.key"},
            }
        ],
        "contexts": [{"name": "sunk-dev", "context": {"cluster": "sunk-dev", "user": user}}],
        "current-context": "sunk-dev",
    }
    target = path or layout.kubeconfig
    target.write_text(yaml.safe_dump(config))
    target.chmod(0o600)


def start(layout: Layout, tools: dict[str, Path], *, node_lifecycle: bool = False) -> None:
    """Start etcd, kube-apiserver, kube-controller-manager and kwok; return when ready.
    `node_lifecycle`: the cluster has real Nodes, whose machines may stop (see above)."""
    ports, kube = layout.ports, layout.kube
    host = layout.api_host
    make_pki(kube, api_ips=(host,) if host != HOST else ())
    write_kubeconfig(layout)
    dirs = (layout.pids, layout.logs)

    etcd_url = f"http://{HOST}:{ports.etcd_client}"
    peer_url = f"http://{HOST}:{ports.etcd_peer}"
    etcd = procs.spawn(
        "etcd",
        [
            str(tools["etcd"]),
            "--name=sunk-dev",
            f"--data-dir={layout.root / 'etcd'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=sunk-dev={peer_url}",
            "--unsafe-no-fsync",
            "--quota-backend-bytes=4294967296",
            "--log-level=warn",
        ],
        *dirs,
    )
    procs.wait_until(
        lambda: httpx.get(f"{etcd_url}/health", timeout=2).json()["health"] == "true",
        timeout=30,
        what="etcd to become healthy",
        watch=[etcd],
        log_dir=layout.logs,
    )

    apiserver = procs.spawn(
        "kube-apiserver",
        [
            str(tools["kube-apiserver"]),
            f"--etcd-servers={etcd_url}",
            f"--bind-address={host}",
            f"--advertise-address={host}",
            f"--secure-port={ports.apiserver}",
            f"--tls-cert-file={kube / 'apiserver.crt'}",
            f"--tls-private-key-file={kube / 'apiserver.key'}",
            f"--client-ca-file={kube / 'ca.crt'}",
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-account-key-file={kube / 'sa.pub'}",
            f"--service-account-signing-key-file={kube / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            # kubectl logs/exec on real Nodes: dial the kubelet at its address on the bridge.
            f"--kubelet-client-certificate={kube / 'kubelet-client.crt'}",
            f"--kubelet-client-key={kube / 'kubelet-client.key'}",
            f"--kubelet-certificate-authority={kube / 'ca.crt'}",
            "--kubelet-preferred-address-types=InternalIP",
            # Without real Nodes nothing runs the node-lifecycle controller that lifts the
            # not-ready taint this plugin puts on new Nodes; kwok keeps the Nodes Ready.
            "--disable-admission-plugins=TaintNodesByCondition",
            "--profiling=false",
            "--v=1",
        ],
        *dirs,
    )
    admin = AdminKube(layout)
    try:
        procs.wait_until(
            admin.ready,
            timeout=90,
            interval=0.25,
            what="kube-apiserver to become ready",
            watch=[apiserver],
            log_dir=layout.logs,
        )
    finally:
        admin.close()

    procs.spawn(
        "kube-controller-manager",
        controller_manager_args(layout, tools["kube-controller-manager"], node_lifecycle=node_lifecycle),
        *dirs,
    )
    stages = layout.kube / "kwok-stages.yaml"
    stages.write_text(resources.files("sunk_dev").joinpath("kwok-stages.yaml").read_text())
    procs.spawn("kwok", kwok_args(layout, tools["kwok"], stages, node_lifecycle=node_lifecycle), *dirs)


def node_manifest(node: topology.NodePlan) -> dict[str, object]:
    capacity = node.allocatable  # no system or kube reserve: kwok runs nothing
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.node,
            "labels": {
                "kubernetes.io/hostname": node.node,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "gpu.nvidia.com/class": node.gpu_class,
                "gpu.nvidia.com/model": node.gpu_class,
                "topology.kubernetes.io/zone": node.zone,
                topology.KWOK_NODE_LABEL: "true",
            },
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def slurmd_pod_manifest(node: topology.NodePlan) -> dict[str, object]:
    """The stand-in for a SUNK slurmd Pod: bound to its Node from the start."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"slurmd-{node.slurm_node}",
            "namespace": topology.SLURMD_NAMESPACE,
            "labels": {
                "app.kubernetes.io/name": "slurmd",
                topology.SLURM_NODE_LABEL: node.slurm_node,
            },
        },
        "spec": {
            "nodeName": node.node,
            "hostname": node.slurm_node,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "slurmd",
                    "image": "sunk.dev/slurmd:22.05",
                    "resources": {
                        "requests": {
                            "cpu": f"{topology.SLURMD_CPU_REQUEST_M}m",
                            "memory": f"{topology.SLURMD_MEMORY_REQUEST_MIB}Mi",
                        }
                    },
                }
            ],
        },
    }


# The chart's PodGroup CRD (gangs, R9.1): the dev cluster serves it like a cluster where
# scheduler-plugins or the chart installed it.
PODGROUP_CRD = (
    Path(__file__).resolve().parents[3] / "charts" / "sunk-scheduler" / "files" / "podgroup-crd.yaml"
)
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def _install_podgroup_crd(admin: AdminKube) -> None:
    crd = yaml.safe_load(PODGROUP_CRD.read_text())
    create_once(admin, CRDS, crd)

    def established() -> bool:
        found = admin.find(f"{CRDS}/{crd['metadata']['name']}") or {}
        conditions = (found.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

    procs.wait_until(established, timeout=30, interval=0.2, what="the PodGroup CRD to be served")


def populate(layout: Layout, nodes: list[topology.NodePlan]) -> None:
    """Create the Nodes and slurmd Pods, then wait until kwok reports them Ready/Running."""
    admin = AdminKube(layout)
    try:
        _install_podgroup_crd(admin)
        admin.create_namespace(topology.SLURMD_NAMESPACE)
        pods_path = f"/api/v1/namespaces/{topology.SLURMD_NAMESPACE}/pods"
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda n: create_once(admin, "/api/v1/nodes", node_manifest(n)), nodes))
            list(pool.map(lambda n: create_once(admin, pods_path, slurmd_pod_manifest(n)), nodes))
        kwok = procs.load(layout.pids, "kwok")
        procs.wait_until(
            lambda: len(admin.ready_nodes()) >= len(nodes),
            timeout=60 + len(nodes) / 4,
            interval=0.25,
            what=f"{len(nodes)} Nodes to become Ready under kwok",
            watch=[kwok] if kwok else [],
            log_dir=layout.logs,
        )
        procs.wait_until(
            lambda: _running_pods(admin, pods_path) >= len(nodes),
            timeout=60 + len(nodes) / 4,
            interval=0.25,
            what="the slurmd Pods to run",
            watch=[kwok] if kwok else [],
            log_dir=layout.logs,
        )
    finally:
        admin.close()


def _running_pods(admin: AdminKube, path: str) -> int:
    pods = admin.get(path)["items"]
    return sum(1 for p in pods if p.get("status", {}).get("phase") == "Running")


def create_once(admin: AdminKube, path: str, body: dict[str, object]) -> None:
    """Create; an object that already exists (409) is left as it is."""
    try:
        admin.create(path, body)
    except KubeError as err:
        if err.status != 409:
            raise
