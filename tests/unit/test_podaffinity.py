"""R9.3: Pod affinity, anti-affinity and topology spread as Slurm nodes to avoid."""

from __future__ import annotations

from typing import Any

import pytest

from sunk.scheduler.translate import podaffinity

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def node(name: str, zone: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {HOST: name, ZONE: zone}}}


NODES = {
    n["metadata"]["name"]: n for n in (node("n1", "a"), node("n2", "a"), node("n3", "b"), node("n4", "b"))
}
CANDIDATES = list(NODES.values())


def pod(
    name: str = "new", on: str | None = None, app: str = "web", namespace: str = "ns", **spec: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": name, "labels": {"app": app}},
        "spec": {**({"nodeName": on} if on else {}), **spec},
    }


def apart(key: str = HOST, **term: Any) -> dict[str, Any]:
    required = [{"topologyKey": key, "labelSelector": {"matchLabels": {"app": "web"}}, **term}]
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}


def together(key: str = ZONE, app: str = "db") -> dict[str, Any]:
    required = [{"topologyKey": key, "labelSelector": {"matchLabels": {"app": app}}}]
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}


def spread(key: str = ZONE, skew: int = 1, when: str = "DoNotSchedule") -> list[dict[str, Any]]:
    return [
        {
            "maxSkew": skew,
            "topologyKey": key,
            "whenUnsatisfiable": when,
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]


CASES = [
    pytest.param(
        pod(affinity=apart()),
        "n1",
        [pod("a", "n1")],
        "shares kubernetes.io/hostname=n1",
        id="r9_3_anti_affinity_keeps_a_replica_off_a_taken_host",
    ),
    pytest.param(
        pod(affinity=apart()), "n2", [pod("a", "n1")], None, id="r9_3_anti_affinity_allows_another_host"
    ),
    pytest.param(
        pod(affinity=apart(ZONE)),
        "n2",
        [pod("a", "n1")],
        "shares topology.kubernetes.io/zone=a",
        id="r9_3_zone_anti_affinity_keeps_the_whole_zone",
    ),
    pytest.param(
        pod(affinity=apart()),
        "n1",
        [pod("a", "n1", app="other")],
        None,
        id="r9_3_anti_affinity_counts_only_matching_pods",
    ),
    pytest.param(
        pod(affinity=apart()),
        "n1",
        [pod("a", "n1", namespace="elsewhere")],
        None,
        id="r9_3_anti_affinity_counts_the_pods_namespace_only",
    ),
    pytest.param(
        pod(affinity=apart(namespaces=["elsewhere"])),
        "n1",
        [pod("a", "n1", namespace="elsewhere")],
        "shares",
        id="r9_3_listed_namespaces_count",
    ),
    pytest.param(
        pod(affinity=together()),
        "n3",
        [pod("d", "n1", app="db")],
        "no Pod the Pod's required affinity",
        id="r9_3_affinity_needs_its_partner_in_the_zone",
    ),
    pytest.param(
        pod(affinity=together()),
        "n2",
        [pod("d", "n1", app="db")],
        None,
        id="r9_3_affinity_is_met_in_the_partners_zone",
    ),
    pytest.param(
        pod(affinity=together(app="web")),
        "n4",
        [],
        None,
        id="r9_3_the_first_of_a_group_that_wants_itself_goes_anywhere",
    ),
    pytest.param(
        pod(affinity=together(app="db")),
        "n4",
        [],
        "no Pod",
        id="r9_3_affinity_to_pods_that_do_not_exist_cannot_be_met",
    ),
    pytest.param(
        pod(topologySpreadConstraints=spread()),
        "n1",
        [pod("a", "n2")],
        "maxSkew 1",
        id="r9_3_spread_refuses_the_fuller_zone",
    ),
    pytest.param(
        pod(topologySpreadConstraints=spread()),
        "n3",
        [pod("a", "n2")],
        None,
        id="r9_3_spread_allows_the_emptier_zone",
    ),
    pytest.param(
        pod(topologySpreadConstraints=spread(skew=2)),
        "n1",
        [pod("a", "n2")],
        None,
        id="r9_3_spread_allows_up_to_max_skew",
    ),
    pytest.param(
        pod(topologySpreadConstraints=spread(when="ScheduleAnyway")),
        "n1",
        [pod("a", "n2")],
        None,
        id="r9_3_schedule_anyway_is_not_a_rule",
    ),
]


@pytest.mark.parametrize(("the_pod", "target", "placed", "words"), CASES)
def test_required_inter_pod_rules(
    the_pod: dict[str, Any], target: str, placed: list[dict[str, Any]], words: str | None
) -> None:
    found = podaffinity.problem(the_pod, NODES[target], NODES, placed, CANDIDATES)
    if words is None:
        assert found is None
    else:
        assert found is not None and words in found


def test_r9_3_spread_domains_are_the_nodes_the_pod_could_use() -> None:
    """A zone with no usable Node is no domain: it would hold the minimum at 0 for ever."""
    only_zone_a = [NODES["n1"], NODES["n2"]]
    the_pod = pod(topologySpreadConstraints=spread())
    assert podaffinity.problem(the_pod, NODES["n1"], NODES, [pod("a", "n2")], only_zone_a) is None


def test_r9_3_what_is_not_applied_is_named() -> None:
    the_pod = pod(
        affinity={
            "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}]},
            **apart(namespaceSelector={}),
        },
        topologySpreadConstraints=spread(when="ScheduleAnyway"),
    )
    ignored = podaffinity.not_honoured(the_pod)
    assert any("preferred podAffinity" in i for i in ignored)
    assert any("namespaceSelector" in i for i in ignored)
    assert any("ScheduleAnyway" in i for i in ignored)
    assert podaffinity.not_honoured(pod(affinity=apart())) == []
