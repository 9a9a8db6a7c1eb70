"""What real kubelet Nodes cost on this machine: Pod start, slurmd registration, memory.

Needs a running dev cluster with real Nodes (`sunk dev up --real-nodes 3`). Prints, for
the same run: Pod create -> container running on real Nodes against Pod create -> Running
on kwok Nodes (the baseline: the API path alone, no container), slurmd Pod create -> Slurm
node idle, and the resident memory of each real Node's kubelet, containerd and shims.

    .venv/bin/python -m bench.real_nodes [--pods 6] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from pathlib import Path

from tests.e2e.slurm_in_pods import SlurmInPods, containers_running, delete_namespace

from sunk_dev import DevCluster, images, procs
from sunk_dev.kubeapi import AdminKube
from sunk_dev.realnode import nodes_of
from sunk_dev.topology import KWOK_NODE_LABEL


def _start_pods(kube: AdminKube, namespace: str, nodes: list[str], count: int, image: str) -> list[float]:
    """Create `count` Pods spread over `nodes`; seconds from each create to seen running."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    created: dict[str, float] = {}
    for i in range(count):
        name = f"p{i}"
        kube.create(
            path,
            {
                "metadata": {"name": name},
                "spec": {
                    "nodeName": nodes[i % len(nodes)],
                    "terminationGracePeriodSeconds": 1,
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "c",
                            "image": image,
                            "imagePullPolicy": "Never",
                            "command": ["sleep", "3600"],
                        }
                    ],
                },
            },
        )
        created[name] = time.monotonic()
    took: dict[str, float] = {}
    deadline = time.monotonic() + 120
    while len(took) < count and time.monotonic() < deadline:
        for pod in kube.get(path)["items"]:
            name = pod["metadata"]["name"]
            if name not in took and containers_running(pod):
                took[name] = time.monotonic() - created[name]
        time.sleep(0.02)
    if len(took) < count:
        raise SystemExit(f"only {len(took)} of {count} Pods ran within 120 s")
    return sorted(took.values())


def _rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _memory(cluster: DevCluster, count: int) -> list[tuple[str, float, float, float, int]]:
    rows = []
    for node in nodes_of(cluster.layout, count):
        kubelet = procs.load(cluster.layout.pids, node.kubelet_proc)
        containerd = procs.load(cluster.layout.pids, node.containerd_proc)
        shims = procs.leftovers_by_argv(f"-address {node.socket}")
        rows.append(
            (
                node.name,
                _rss_mib(kubelet.pid) if kubelet else 0.0,
                _rss_mib(containerd.pid) if containerd else 0.0,
                sum(_rss_mib(pid) for pid in shims),
                len(shims),
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=6, help="Pods per measurement (6)")
    parser.add_argument("--runs", type=int, default=3, help="repetitions (3)")
    args = parser.parse_args()
    cluster = DevCluster()
    spec = cluster.require_running()
    if not spec.real_nodes:
        raise SystemExit("the running dev cluster has no real Nodes: `sunk dev up --real-nodes 3`")
    built = images.ensure_images(spec.slurm, cluster.layout.logs / "images.log")
    kube = AdminKube(cluster.layout)
    real = [node.name for node in nodes_of(cluster.layout, spec.real_nodes)]
    kwok = [
        n["metadata"]["name"]
        for n in kube.get("/api/v1/nodes", labelSelector=f"{KWOK_NODE_LABEL}=true")["items"]
    ]
    real_times: list[float] = []
    kwok_times: list[float] = []
    idle_times: list[float] = []
    all_times: list[float] = []
    try:
        for run in range(args.runs):
            for nodes, into in ((real, real_times), (kwok, kwok_times)):
                namespace = f"bench-real-{uuid.uuid4().hex[:6]}"
                kube.create_namespace(namespace)
                into += _start_pods(kube, namespace, nodes, args.pods, built["slurmd"].tag)
                if nodes is real and run == args.runs - 1:
                    memory = _memory(cluster, spec.real_nodes)
                delete_namespace(kube, namespace)
            namespace = f"bench-slurm-{uuid.uuid4().hex[:6]}"
            kube.create_namespace(namespace)
            pods = SlurmInPods(cluster, kube, namespace, real, {k: b.tag for k, b in built.items()})
            started = time.monotonic()
            pods.create()
            pods.wait_idle(len(real), timeout=120)
            all_times.append(time.monotonic() - started)
            started = time.monotonic()
            pods.add_slurmd("compute-extra", real[0])
            pods.wait_idle(len(real) + 1, timeout=120)
            idle_times.append(time.monotonic() - started)
            delete_namespace(kube, namespace)
    finally:
        kube.close()

    def line(label: str, values: list[float]) -> str:
        return (
            f"{label:<44} median {statistics.median(values):6.2f} s   max {max(values):6.2f} s   "
            f"(n={len(values)})"
        )

    print(f"{spec.real_nodes} real Nodes, {len(kwok)} kwok Nodes, Slurm {spec.slurm}, {args.runs} runs")
    print(line("Pod create -> container running (real)", real_times))
    print(line("Pod create -> Running (kwok, no container)", kwok_times))
    ratio = statistics.median(real_times) / statistics.median(kwok_times)
    print(f"{'ratio real / kwok (median)':<44} {ratio:.1f}x")
    print(line("slurmctld + slurmd Pods created -> all idle", all_times))
    print(line("one more slurmd Pod created -> its node idle", idle_times))
    print("memory with the bench Pods running (RSS, MiB): node, kubelet, containerd, shims (count)")
    for name, kubelet, containerd, shims, count in memory:
        print(f"  {name:<8} {kubelet:7.1f} {containerd:7.1f} {shims:7.1f} ({count})")


if __name__ == "__main__":
    main()
