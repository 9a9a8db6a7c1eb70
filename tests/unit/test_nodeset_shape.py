"""What a member's Slurm node is called and what it registers with (R10.2, R10.4), and the
NodeSet fields checked before anything is made."""

from __future__ import annotations

import pytest

from sunk.operator.nodeset.hardware import gres_type, slurm_node_name
from sunk.operator.nodeset.spec import Invalid, NodeSet, parse
from tests.fakes.operator_world import node, nodeset


@pytest.mark.parametrize(
    ("address", "name"),
    [("10.174.12.2", "gpu-012-002"), ("192.168.0.255", "gpu-000-255"), ("fd00::1", None), ("bad", None)],
)
def test_r10_2_member_names_come_from_the_last_two_octets(address: str, name: str | None) -> None:
    assert slurm_node_name("gpu", node("n", address)) == name


@pytest.mark.parametrize(
    ("label", "kind"),
    [("NVIDIA-H100-80GB-HBM3", "nvidia-h100-80gb-hbm3"), ("Tesla T4", "tesla_t4"), ("", "")],
)
def test_r10_4_a_gpu_product_label_becomes_a_gres_type(label: str, kind: str) -> None:
    assert gres_type(label) == kind


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"replicas": -1}, "spec.replicas"),
        ({"partitions": ["a,b"]}, "spec.partitions[0]"),
        ({"features": "ib"}, "spec.features"),
        ({"image": "Bad Image"}, "spec.image"),
        ({"resources": {"limits": {"cpu": "500m"}}}, "spec.resources"),
        (
            {"resources": {"limits": {"memory": "1Gi"}, "requests": {"memory": "2Gi"}}},
            "spec.resources.requests.memory",
        ),
        ({"memoryReserve": "lots"}, "spec.memoryReserve"),
        ({"template": {"spec": {"containers": [{"image": "x"}]}}}, "spec.template.spec.containers[0]"),
    ],
)
def test_r10_2_a_bad_field_is_named(spec: dict[str, object], field: str) -> None:
    parsed = parse(nodeset("a", **spec), "slurmd:24.11")
    assert isinstance(parsed, Invalid)
    assert any(problem.startswith(field) for problem in parsed.problems), parsed.problems


def test_r10_2_a_name_too_long_for_member_hostnames_is_refused() -> None:
    parsed = parse(nodeset("x" * 56), "slurmd:24.11")
    assert isinstance(parsed, Invalid) and parsed.problems[0].startswith("metadata.name")


def test_r10_2_a_nodeset_without_an_image_takes_the_operators_default() -> None:
    parsed = parse(nodeset("a"), "registry/slurmd:24.11")
    assert isinstance(parsed, NodeSet) and parsed.image == "registry/slurmd:24.11"
