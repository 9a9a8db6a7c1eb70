"""`sunk demo`: the README's first command. Brings the dev cluster up if needed and shows
each Slurm node next to the Kubernetes Node that hosts it."""

from __future__ import annotations

from sunk.devcluster import ClusterSpec, DevCluster
from sunk.devcluster import topology as topo
from sunk.devcluster.kubeapi import AdminKube
from sunk.devcluster.slurmcluster import run_cli


def demo(cluster: DevCluster) -> int:
    from sunk.cli import print_status

    if cluster.is_running():
        print("reusing the dev cluster that is already running")
    else:
        seconds = cluster.up(ClusterSpec())
        print(f"dev cluster up in {seconds:.1f} s")
    print_status(cluster, cluster.status())
    print()
    admin = AdminKube(cluster.layout)
    try:
        pods = admin.get(f"/api/v1/namespaces/{topo.SLURMD_NAMESPACE}/pods")["items"]
        nodes = {n["metadata"]["name"]: n for n in admin.get("/api/v1/nodes")["items"]}
    finally:
        admin.close()
    states = dict(
        line.split() for line in run_cli(cluster.layout, "sinfo", "-h", "-N", "-o", "%N %T").splitlines()
    )
    row = "{:<10} {:<10} {:<12} {:<18} {:<10}"
    print(row.format("SLURM NODE", "STATE", "SLURMD POD", "NODE (GPU CLASS)", "POD PHASE"))
    for pod in sorted(pods, key=lambda p: p["metadata"]["labels"][topo.SLURM_NODE_LABEL]):
        slurm_node = pod["metadata"]["labels"][topo.SLURM_NODE_LABEL]
        node = pod["spec"]["nodeName"]
        gpu = nodes[node]["metadata"]["labels"]["gpu.nvidia.com/class"].split("_")[0]
        print(
            row.format(
                slurm_node,
                states.get(slurm_node, "?"),
                pod["metadata"]["name"][:12],
                f"{node} ({gpu})",
                pod["status"].get("phase", "?"),
            )
        )
    return 0
