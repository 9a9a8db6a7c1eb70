"""R9.4: Nodes that are going away, or that would refuse the Pod, are never chosen."""

from __future__ import annotations

from typing import Any

import pytest

from sunk.kube.nodefilter import why_not
from sunk.scheduler.cluster import ClusterView


def node(*taints: dict[str, str], cordoned: bool = False) -> dict[str, Any]:
    return {
        "metadata": {"name": "n1", "labels": {}},
        "spec": {"unschedulable": cordoned, "taints": list(taints)},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


AUTOSCALER = {"key": "ToBeDeletedByClusterAutoscaler", "value": "1700000000", "effect": "NoSchedule"}
UNSCHEDULABLE = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("the_node", "tolerations", "words"),
    [
        pytest.param(node(cordoned=True), [], "is cordoned", id="r9_4_a_cordoned_node"),
        pytest.param(
            node(AUTOSCALER), [], "ToBeDeletedByClusterAutoscaler", id="r9_4_a_node_the_autoscaler_removes"
        ),
        pytest.param(
            node(UNSCHEDULABLE),
            [],
            "node.kubernetes.io/unschedulable",
            id="r9_4_a_node_tainted_unschedulable",
        ),
        pytest.param(
            node({"key": "gpu", "value": "yes", "effect": "NoSchedule"}),
            [{"key": "gpu", "operator": "Equal", "value": "yes"}],
            None,
            id="r3_2_a_tolerated_taint_is_no_obstacle",
        ),
        pytest.param(
            node({"key": "x", "effect": "PreferNoSchedule"}), [], None, id="r3_2_a_soft_taint_is_no_obstacle"
        ),
    ],
)
def test_which_nodes_a_pod_may_use(
    the_node: dict[str, Any], tolerations: list[dict[str, str]], words: str | None
) -> None:
    found = why_not({"tolerations": tolerations}, the_node)
    assert found is None if words is None else (found is not None and words in found)


class Store:
    """What ClusterView reads of an informer: its store, and get()."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.store = {o["metadata"]["name"]: o for o in objects}

    def get(self, key: str) -> dict[str, Any] | None:
        return self.store.get(key)


def slurmd(node_name: str, *, terminating: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": f"slurmd-{node_name}",
        "labels": {"sunk.coreweave.com/slurm-node": "sn-1"},
    }
    if terminating:
        meta["deletionTimestamp"] = "2026-11-23T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node_name}}


def test_r9_4_a_slurm_node_whose_slurmd_pod_is_terminating_is_never_chosen() -> None:
    view = ClusterView(
        Store([node()]), Store([slurmd("n1", terminating=True)]), "sunk.coreweave.com/slurm-node"
    )  # type: ignore[arg-type]
    view.slurm_nodes = {"sn-1"}
    assert "no slurmd Pod" in view.excluded_for({"metadata": {}, "spec": {}}, None)["sn-1"]
    live = ClusterView(Store([node()]), Store([slurmd("n1")]), "sunk.coreweave.com/slurm-node")  # type: ignore[arg-type]
    live.slurm_nodes = {"sn-1"}
    assert live.excluded_for({"metadata": {}, "spec": {}}, None) == {}
