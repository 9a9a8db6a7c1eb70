"""R10.4 (topology): topology.conf follows the members' Nodes' labels; a Node missing a
label keeps the last right file and says which Node and label."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from sunk.operator.config import topology_settings
from sunk.operator.topology import KEY, Member, TopologyWriter, members_of, render
from tests.fakes.operator_world import CONFIG, OperatorWorld

Json = dict[str, Any]
LEAF, SPINE = "example.com/leaf", "example.com/spine"


def member(name: str, **labels: str) -> Member:
    keys = {"leaf": LEAF, "spine": SPINE}
    return Member(name, "gpu", f"node-{name}", {keys[k]: v for k, v in labels.items()})


def body(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("#")]


def test_r10_4_a_tree_groups_members_under_their_leaf_and_leaves_under_their_spine() -> None:
    members = [
        member("n3", leaf="b", spine="s1"),
        member("n1", leaf="a", spine="s1"),
        member("n2", leaf="a", spine="s1"),
        member("n4", leaf="c", spine="s2"),
    ]
    assert body(render("tree", [LEAF, SPINE], members).text) == [
        "SwitchName=leaf-a Nodes=n1,n2",
        "SwitchName=leaf-b Nodes=n3",
        "SwitchName=leaf-c Nodes=n4",
        "SwitchName=spine-s1 Switches=leaf-a,leaf-b",
        "SwitchName=spine-s2 Switches=leaf-c",
    ]


def test_r10_4_a_block_topology_puts_members_in_the_block_of_their_label() -> None:
    members = [member("n2", leaf="x"), member("n1", leaf="x"), member("n3", leaf="y")]
    assert body(render("block", [LEAF], members).text) == [
        "BlockName=leaf-x Nodes=n1,n2",
        "BlockName=leaf-y Nodes=n3",
    ]


def test_r10_4_a_member_whose_node_lacks_a_label_is_named_and_no_file_is_made() -> None:
    rendered = render("tree", [LEAF, SPINE], [member("n1", leaf="a", spine="s"), member("n2", leaf="a")])
    assert rendered.text == ""
    assert [(gap.member.node, gap.label) for gap in rendered.missing] == [("node-n2", SPINE)]


def test_r10_4_label_values_become_safe_switch_names() -> None:
    assert body(render("block", [LEAF], [member("n1", leaf="rack 7/a")]).text) == [
        "BlockName=leaf-rack_7_a Nodes=n1"
    ]


class FakeKube:
    def __init__(self) -> None:
        self.data: dict[str, str] = {"slurm.conf": "x"}
        self.patches = 0

    async def get(self, path: str) -> Json:
        return {"data": dict(self.data)}

    async def patch_merge(self, path: str, patch: Json) -> Json:
        self.patches += 1
        self.data.update(patch["data"])
        return {}


def test_r10_4_the_writer_writes_only_changes_and_keeps_the_file_while_a_label_is_missing() -> None:
    kube = FakeKube()
    writer = TopologyWriter(kube, "plat", "slurm-slurm-config", "tree", [LEAF])
    asyncio.run(writer.step([member("n1", leaf="a")]))
    asyncio.run(writer.step([member("n1", leaf="a")]))
    assert kube.patches == 1 and "SwitchName=leaf-a Nodes=n1" in kube.data[KEY]
    before = kube.data[KEY]
    said = asyncio.run(writer.step([member("n1", leaf="a"), member("n2")]))
    assert "Node node-n2 has no label example.com/leaf" in said
    assert kube.data[KEY] == before and kube.patches == 1


def test_r10_4_members_are_the_releases_placed_slurmd_pods_with_their_nodes_labels() -> None:
    def pod(name: str, node: str | None, release: str = "slurm", namespace: str = "plat") -> Json:
        labels = {"app.kubernetes.io/instance": release, "sunk.coreweave.com/slurm-node": name}
        return {"metadata": {"namespace": namespace, "labels": labels}, "spec": {"nodeName": node}}

    nodes = {"real-1": {"metadata": {"labels": {LEAF: "a"}}}}
    pods = [pod("n1", "real-1"), pod("n2", None), pod("n3", "real-1", release="other"), pod("n4", "gone")]
    assert [(m.slurm_name, m.node_labels) for m in members_of(pods, nodes, "plat", "slurm")] == [
        ("n1", {LEAF: "a"})
    ]


@pytest.mark.parametrize(
    ("plugin", "labels", "configmap", "words"),
    [
        ("mesh", "a", "cm", "tree or block"),
        ("tree", "", "cm", "needs --topology-labels"),
        ("block", "a,b", "cm", "exactly one label"),
        ("tree", "a", "", "needs --slurm-configmap"),
    ],
)
def test_r10_4_a_wrong_topology_setting_stops_the_operator_at_start(
    plugin: str, labels: str, configmap: str, words: str
) -> None:
    with pytest.raises(ValueError, match=words):
        topology_settings(plugin, labels, configmap)


async def test_r10_4_a_members_node_without_a_topology_label_is_named_on_its_nodeset() -> None:
    world = OperatorWorld(config=dataclasses.replace(CONFIG, topology_labels=(LEAF,)))
    world.add_node("node-1", "10.64.1.11", labels={LEAF: "a"})
    world.add_node("node-2", "10.64.2.12")
    world.add_nodeset("gpu", replicas=2)
    await world.settle("gpu")
    assert len(world.members("gpu")) == 2  # members are made all the same
    labeled = world.condition("gpu", "TopologyLabeled")
    assert labeled["status"] == "False" and labeled["reason"] == "UnknownTopologyLabel"
    assert labeled["message"] == f"Node node-2 has no label {LEAF}, which slurm.topology.labels names"
    assert world.kube.reasons().count("UnknownTopologyLabel") == 1
    world.nodes.get("node-2")["metadata"]["labels"][LEAF] = "b"  # type: ignore[index]
    await world.settle("gpu")
    assert world.condition("gpu", "TopologyLabeled")["status"] == "True"
