"""`sunk dev status`: the dev cluster in a few lines (shared by the CLI and the demo)."""

from __future__ import annotations

from sunk_dev import DevCluster, slurmroot
from sunk_dev.cluster import Status


def print_status(cluster: DevCluster, status: Status) -> None:
    if not status.running:
        print(f"no dev cluster is running (state dir {cluster.layout.root})")
        return
    spec = status.spec
    assert spec is not None
    print(
        f"dev cluster under {cluster.layout.root}: {spec.nodes} nodes, "
        f"accounting {'on' if spec.accounting else 'off'}, KillWait {spec.kill_wait}s"
    )
    release = f" ({status.slurm_release})" if status.slurm_release else ""
    where = "host packages" if status.slurm_version == slurmroot.HOST_VERSION else "Debian root"
    print(f"  {'Slurm':<24} {status.slurm_version or spec.slurm}{release}, {where}")
    print(f"  {'REST versions served':<24} {', '.join(status.rest_versions) or 'unknown'}")
    slurmds = [name for name in status.processes if name.startswith("slurmd-")]
    alive_slurmds = sum(status.processes[name] for name in slurmds)
    for name, alive in status.processes.items():
        if not name.startswith(("slurmd-", "containerd-real-", "kubelet-real-")):
            print(f"  {name:<24} {'running' if alive else 'STOPPED'}")
    print(f"  {'slurmd':<24} {alive_slurmds}/{len(slurmds)} running")
    print(f"  Kubernetes Nodes Ready   {status.ready_nodes}/{spec.nodes + spec.real_nodes}")
    for name, state in status.real_nodes.items():
        hint = "" if state == "Ready" else f" (`sunk dev node stop {name} && sunk dev node start {name}`)"
        print(f"  {'real Node ' + name:<24} {state}{hint}")
    if status.network_policies:
        print(f"  {'NetworkPolicies':<24} {status.network_policies}")
    print(f"  Slurm nodes idle         {status.idle_slurm_nodes}/{spec.nodes}")
    print(f"  slurmrestd               {'answers' if status.rest_ok else 'NOT ANSWERING'}")
    print(f"  API server               {cluster.layout.apiserver_url}")
    print(f"  Slurm REST               {cluster.layout.rest_url}")
    print('  use it:                  eval "$(sunk dev env)"')
