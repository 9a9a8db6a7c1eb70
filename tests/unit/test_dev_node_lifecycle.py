"""Issue #51 point 6: a machine that goes down in the dev cluster. With real Nodes,
kube-controller-manager runs the node lifecycle (a stopped kubelet's Node goes Unknown,
is tainted, its Pods evicted) and kwok keeps Leases for its own Nodes so they are never
taken for lost; a kwok-only cluster (the benchmarks') runs neither."""

from __future__ import annotations

from pathlib import Path

from sunk_dev import kubecluster
from sunk_dev.layout import Layout


def _args(tmp_path: Path, node_lifecycle: bool) -> tuple[list[str], list[str]]:
    layout = Layout(tmp_path)
    kcm = kubecluster.controller_manager_args(layout, Path("kcm"), node_lifecycle=node_lifecycle)
    kwok = kubecluster.kwok_args(layout, Path("kwok"), tmp_path / "stages", node_lifecycle=node_lifecycle)
    return kcm, kwok


def _flag(args: list[str], name: str) -> str | None:
    return next((a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")), None)


def test_with_real_nodes_a_lost_machine_is_noticed_and_its_pods_evicted(tmp_path: Path) -> None:
    """Catches: a stopped machine's Node left Ready for ever (no lifecycle controller), Pods
    never evicted (taint eviction is its own controller since 1.29), or a grace period the
    e2e's 60 s for DOWN cannot fit."""
    kcm, _ = _args(tmp_path, True)
    controllers = (_flag(kcm, "controllers") or "").split(",")
    assert {"node-lifecycle-controller", "taint-eviction-controller"} <= set(controllers)
    assert set(kubecluster.CONTROLLERS) <= set(controllers)
    assert _flag(kcm, "node-monitor-grace-period") == "40s"


def test_with_real_nodes_kwok_nodes_renew_leases_well_inside_the_grace_period(tmp_path: Path) -> None:
    """Catches: kwok Nodes that never heartbeat (kwok only renews with a lease duration),
    all taken for lost, tainted and their Pods evicted once the lifecycle controller runs."""
    _, kwok = _args(tmp_path, True)
    lease_s = int(_flag(kwok, "node-lease-duration-seconds") or 0)
    assert 0 < lease_s / 4 < 30 / 3  # renewed every quarter of it; a few misses fit the grace


def test_a_kwok_only_cluster_runs_no_node_lifecycle(tmp_path: Path) -> None:
    """Catches: a loaded benchmark's kwok Nodes lost (and their Pods evicted) because a
    lifecycle controller ran where no machine can stop, or Lease renewals loading it."""
    kcm, kwok = _args(tmp_path, False)
    controllers = (_flag(kcm, "controllers") or "").split(",")
    assert "node-lifecycle-controller" not in controllers and _flag(kcm, "node-monitor-grace-period") is None
    assert _flag(kwok, "node-lease-duration-seconds") is None
