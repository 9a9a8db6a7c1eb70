"""Real kubelet Nodes next to the kwok ones, and what makes Services work for their Pods.

`sunk dev up --real-nodes N` adds N Nodes that run real containers (see `realnode`), one
kube-proxy for all of them (they share the host's network namespace, so one set of
nftables rules serves every Node) and CoreDNS answering cluster names behind the usual
`kube-dns` Service. Both run as host processes like the rest of the control plane, built
from their Go modules; CoreDNS listens only on the host's bridge address. Right after
kube-proxy comes one NetworkPolicy enforcer for all of them (`netpol`), for the same reason.

It also starts what Deployments and StatefulSets on real Nodes need: kube-scheduler (the
default scheduler, which only ever picks real Nodes: kwok's belong to sunk's scheduler),
and a default StorageClass with its provisioner (`storage`), whose volumes live on the
cluster's network file server (`fileserver`), mounted by every Node.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import yaml

from sunk_dev import fileserver, hostnet, netpol, pki, procs, storage
from sunk_dev.errors import DevClusterError
from sunk_dev.kubeapi import AdminKube, is_ready
from sunk_dev.kubecluster import create_once, write_kubeconfig
from sunk_dev.layout import HOST, Layout, cache_dir
from sunk_dev.realnode import BULKY_DIRS, PRIVATE_DIRS, REAL_NODE_LABEL, RealNode, nodes_of

TOOLS = ("kubelet", "kube-proxy", "kubectl", "coredns", "kube-scheduler", netpol.TOOL)
DNS_NAMESPACE = "kube-system"


def check_machine() -> None:
    """Stop with one sentence when this machine cannot run real Nodes."""
    reason = hostnet.unusable_reason()
    if reason:
        raise DevClusterError(reason)


def prepare_host(layout: Layout, count: int) -> None:
    """Before the API server starts: claim the host, make the bridge it will listen on."""
    hostnet.claim(layout, PRIVATE_DIRS)
    net = hostnet.prepare(layout, count)
    netpol.remove_rules(net.bridge)  # a crashed run's: they would drop Pod traffic until netpol starts
    layout.kube.mkdir(parents=True, exist_ok=True)
    (layout.kube / "api-host").write_text(net.gateway + "\n")


def start(
    layout: Layout, count: int, sandbox_image: str, load_images: Callable[[RealNode], None]
) -> list[RealNode]:
    """Start the Nodes (each gets the images from `load_images` before its kubelet asks for
    them), kube-proxy, the NetworkPolicy enforcer and CoreDNS; return once every Node is
    Ready."""
    nodes = nodes_of(layout, count)
    for node in nodes:
        node.write_config(sandbox_image)
    fileserver.start_server(layout)
    for node in nodes:
        node.start()
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        list(pool.map(load_images, nodes))
    _start_kube_proxy(layout, nodes[0])
    netpol.start(layout)
    _start_dns(layout)
    scheduler = _start_scheduler(layout)
    storage.start(layout)
    admin = AdminKube(layout)
    try:
        names = [name for n in nodes for name in (n.containerd_proc, n.kubelet_proc)]
        watch = [t for t in (procs.load(layout.pids, name) for name in names) if t]
        procs.wait_until(
            lambda: {n.name for n in nodes} <= set(admin.ready_nodes()),
            timeout=90,
            interval=0.25,
            what=f"{count} real Nodes to become Ready",
            watch=watch,
            log_dir=layout.logs,
        )
    finally:
        admin.close()
    healthz = f"https://{HOST}:{layout.ports.kube_scheduler}/healthz"
    ca = str(layout.kube / "ca.crt")
    procs.wait_until(
        lambda: httpx.get(healthz, verify=ssl.create_default_context(cafile=ca), timeout=2).text == "ok",
        timeout=30,
        what="kube-scheduler to be healthy",
        watch=[scheduler],
        log_dir=layout.logs,
    )
    return nodes


SCHEDULER = "kube-scheduler"


def scheduler_config(layout: Layout) -> dict[str, Any]:
    """kube-scheduler's configuration: the default profile, told to consider real Nodes only.

    NodeAffinity's `addedAffinity` is ANDed with every Pod's own affinity, so a Pod without
    a nodeSelector still lands on a real Node, and one that asks for a kwok Node stays
    Pending: kwok's Nodes run no containers, and only sunk's scheduler (or `nodeName`)
    places Pods there."""
    only_real = {"key": REAL_NODE_LABEL, "operator": "In", "values": ["true"]}
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(layout.kubeconfig)},
        "leaderElection": {"leaderElect": False},
        "profiles": [
            {
                "schedulerName": "default-scheduler",
                "pluginConfig": [
                    {
                        "name": "NodeAffinity",
                        "args": {
                            "addedAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": {
                                    "nodeSelectorTerms": [{"matchExpressions": [only_real]}]
                                }
                            }
                        },
                    }
                ],
            }
        ],
    }


def _start_scheduler(layout: Layout) -> procs.Tracked:
    out = layout.kube
    config = out / "kube-scheduler.yaml"
    config.write_text(yaml.safe_dump(scheduler_config(layout)))
    # A serving certificate from the dev CA, so its health can be checked without turning
    # verification off (it would make a throwaway self-signed one otherwise).
    pki.issue_serving(out, out, "kube-scheduler-serving", SCHEDULER, [HOST], [])
    return procs.spawn(
        SCHEDULER,
        [
            str(cache_dir() / "bin" / "kube-scheduler"),
            f"--config={config}",
            f"--tls-cert-file={out / 'kube-scheduler-serving.crt'}",
            f"--tls-private-key-file={out / 'kube-scheduler-serving.key'}",
            # No --authentication/authorization-kubeconfig: /healthz is open without them,
            # and with them it logs, every few seconds, that the API server has no
            # request-header CA (this one has no front proxy).
            f"--bind-address={HOST}",
            f"--secure-port={layout.ports.kube_scheduler}",
            "--v=1",
        ],
        layout.pids,
        layout.logs,
    )


def _start_kube_proxy(layout: Layout, node: RealNode) -> None:
    out = layout.kube
    pki.issue_client(out, out, "kube-proxy", "system:kube-proxy")
    write_kubeconfig(layout, out / "kube-proxy.kubeconfig", out / "kube-proxy")
    net = hostnet.network_of(layout)
    ports = layout.ports
    procs.spawn(
        "kube-proxy",
        [
            str(cache_dir() / "bin" / "kube-proxy"),
            f"--kubeconfig={out / 'kube-proxy.kubeconfig'}",
            "--proxy-mode=nftables",
            f"--cluster-cidr={net.cidr}",
            f"--hostname-override={node.name}",
            f"--healthz-bind-address=127.0.0.1:{ports.kube_proxy}",
            f"--metrics-bind-address=127.0.0.1:{ports.kube_proxy + 1}",
            f"--nodeport-addresses={net.cidr}",
            # Leave the host's conntrack table size and timeouts as they are.
            "--conntrack-max-per-core=0",
            "--conntrack-tcp-timeout-established=0",
            "--conntrack-tcp-timeout-close-wait=0",
            "--v=1",
        ],
        layout.pids,
        layout.logs,
    )


def _start_dns(layout: Layout) -> None:
    out = layout.kube
    net = hostnet.network_of(layout)
    port = layout.ports.coredns
    pki.issue_client(out, out, "coredns", "system:coredns")
    write_kubeconfig(layout, out / "coredns.kubeconfig", out / "coredns")
    corefile = out / "Corefile"
    # Cluster names only: nothing is forwarded, so Pods cannot resolve (or reach) the world.
    corefile.write_text(
        f"{hostnet.CLUSTER_DOMAIN}:{port} in-addr.arpa:{port} ip6.arpa:{port} {{\n"
        f"  bind {net.gateway}\n"
        "  errors\n"
        f"  kubernetes {hostnet.CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{\n"
        f"    kubeconfig {out / 'coredns.kubeconfig'} sunk-dev\n"
        "    pods insecure\n"
        "  }\n"
        "  cache 5\n"
        "}\n"
        f".:{port} {{\n"
        f"  bind {net.gateway}\n"
        "  template ANY ANY {\n"
        "    rcode NXDOMAIN\n"
        "  }\n"
        "}\n"
    )
    admin = AdminKube(layout)
    try:
        _apply_dns_objects(admin, net.gateway, port)
    finally:
        admin.close()
    dns = procs.spawn(
        "coredns",
        [str(cache_dir() / "bin" / "coredns"), "-conf", str(corefile)],
        layout.pids,
        layout.logs,
    )
    procs.wait_until(
        lambda: _answers(net.gateway, port),
        timeout=30,
        what="CoreDNS to answer",
        watch=[dns],
        log_dir=layout.logs,
    )


def _answers(address: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1)
        return sock.connect_ex((address, port)) == 0


COREDNS_RULES = [
    {
        "apiGroups": [""],
        "resources": ["endpoints", "services", "pods", "namespaces"],
        "verbs": ["list", "watch"],
    },
    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
]


def _apply_dns_objects(admin: AdminKube, gateway: str, port: int) -> None:
    """RBAC for CoreDNS, and the kube-dns Service pointing at it (selectorless: CoreDNS is
    not a Pod here, so its EndpointSlice is written by hand)."""
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    _create(admin, f"{rbac}/clusterroles", {"metadata": {"name": "sunk-dev:coredns"}, "rules": COREDNS_RULES})
    _create(
        admin,
        f"{rbac}/clusterrolebindings",
        {
            "metadata": {"name": "sunk-dev:coredns"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "sunk-dev:coredns",
            },
            "subjects": [{"kind": "User", "name": "system:coredns", "apiGroup": "rbac.authorization.k8s.io"}],
        },
    )
    ports = [
        {"name": "dns", "port": 53, "targetPort": port, "protocol": "UDP"},
        {"name": "dns-tcp", "port": 53, "targetPort": port, "protocol": "TCP"},
    ]
    _create(
        admin,
        f"/api/v1/namespaces/{DNS_NAMESPACE}/services",
        {
            "metadata": {"name": "kube-dns", "labels": {"k8s-app": "kube-dns"}},
            "spec": {"clusterIP": hostnet.DNS_SERVICE_IP, "ports": ports},
        },
    )
    _create(
        admin,
        f"/apis/discovery.k8s.io/v1/namespaces/{DNS_NAMESPACE}/endpointslices",
        {
            "metadata": {
                "name": "kube-dns-host",
                "labels": {
                    "kubernetes.io/service-name": "kube-dns",
                    "endpointslice.kubernetes.io/managed-by": "sunk-dev",
                },
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [gateway], "conditions": {"ready": True}}],
            "ports": [{"name": p["name"], "port": port, "protocol": p["protocol"]} for p in ports],
        },
    )


def _create(admin: AdminKube, path: str, body: dict[str, Any]) -> None:
    """Create once: a restarted DNS finds its objects in place (a Service's fixed cluster
    IP would be refused as taken, not as a conflict)."""
    if admin.find(f"{path}/{body['metadata']['name']}") is None:
        create_once(admin, path, body)


def stop(layout: Layout, count: int) -> list[str]:
    """Stop kube-scheduler, the volume provisioner, CoreDNS, the NetworkPolicy enforcer and
    kube-proxy (and remove their rules), every Node and the file server; remove the volumes'
    data; give the host back."""
    stopped = []
    if netpol.stop(layout):  # its rules go first: without it they drop new connections
        stopped.append(netpol.PROCESS)
    if storage.stop(layout):
        stopped.append(storage.PROCESS)
    for name in (SCHEDULER, "coredns", "kube-proxy"):
        tracked = procs.load(layout.pids, name)
        if tracked is not None:
            procs.stop(tracked, layout.pids)
            stopped.append(name)
    kube_proxy = cache_dir() / "bin" / "kube-proxy"
    if kube_proxy.exists():
        subprocess.run([str(kube_proxy), "--cleanup"], capture_output=True)
    subprocess.run(["nft", "delete", "table", "ip", "kube-proxy"], capture_output=True)
    subprocess.run(["nft", "delete", "table", "ip6", "kube-proxy"], capture_output=True)
    nodes = nodes_of(layout, count)
    for node in nodes:
        node.stop()
        stopped.append(node.name)
    if fileserver.stop_server(layout):
        stopped.append(fileserver.SERVER)
    # Every container is gone now: nothing uses the volumes, images or Pod directories.
    removals: list[Callable[[], None]] = [
        lambda: storage.remove_data(layout, layout.volumes),
        lambda: fileserver.remove_data(layout),
    ]
    removals += [node.remove_files for node in nodes]
    for remove in removals:
        try:
            remove()
        except DevClusterError as err:  # give the host back all the same; host_leftovers tells
            print(f"sunk: {err}", file=sys.stderr)
    hostnet.release(layout)
    return stopped


def host_leftovers(layout: Layout) -> list[str]:
    """What real Nodes of this cluster left on the host; empty after a clean `down`."""
    net = hostnet.network_of(layout)
    found = []
    if Path("/sys/class/net", net.bridge).exists():
        found.append(f"bridge {net.bridge}")
    tables = ""
    if shutil.which("nft"):
        tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    # kube-proxy's tables are machine-wide: they are ours unless another cluster holds the host.
    theirs = hostnet.read_claim() is not None and not hostnet.owned_by(layout)
    found += [
        line
        for line in tables.splitlines()
        if net.nft_table in line.split() or ("kube-proxy" in line.split() and not theirs)
    ]
    found += netpol.leftovers(layout, shared=not theirs)
    prefix = f"sunk-{net.index}-real-"
    found += [str(p) for h in hostnet.hierarchies() for p in h.glob(f"{prefix}*")]
    if hostnet.owned_by(layout):
        found.append(f"the claim {hostnet.CLAIM}")
    if layout.volumes.exists():
        found.append(f"volume data in {layout.volumes}")
    found += fileserver.leftovers(layout)
    for node in nodes_of(layout, configured_nodes(layout)):
        found += [
            f"{node.name}'s files in {node.dir / sub}" for sub in BULKY_DIRS if (node.dir / sub).exists()
        ]
    return found


def node_states(admin: AdminKube, layout: Layout) -> dict[str, str]:
    """Each real Node's condition as the API server and this machine see it."""
    nodes = nodes_of(layout, configured_nodes(layout))
    found = {n["metadata"]["name"]: n for n in admin.get("/api/v1/nodes")["items"]}
    states = {}
    for node in nodes:
        down = [name.split("-")[0] for name, alive in node.processes().items() if not alive]
        if down:
            states[node.name] = f"{' and '.join(down)} NOT RUNNING"
            continue
        if node.name not in found:
            states[node.name] = "not registered"
        else:
            states[node.name] = "Ready" if is_ready(found[node.name]) else "NotReady"
    return states


def configured_nodes(layout: Layout) -> int:
    """How many real Nodes this cluster was started with (their directories say)."""
    base: Path = layout.nodes
    return len(list(base.glob("real-*"))) if base.is_dir() else 0
