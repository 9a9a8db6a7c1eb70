"""R2 (validation) and R3 (annotations → placeholder job), as pure functions."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from sunk.kube.quantity import QuantityError, parse_quantity
from sunk.scheduler.translate import (
    PodRef,
    Settings,
    job_name,
    pod_of_job_name,
    translate,
)
from sunk.slurm.request import Exclusive
from sunk.slurm.v0038 import V0038

P = "sunk.coreweave.com/"


def pod(annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "metadata": {
            "name": "web",
            "namespace": "ns",
            "uid": "u-1",
            "annotations": annotations or {},
        },
        "spec": {
            "schedulerName": "sunk",
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "main", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}],
        },
    }
    base["spec"].update(spec)
    return base


DEFAULTS = Settings()


def ok(manifest: dict[str, Any], settings: Settings = DEFAULTS) -> Any:
    result = translate(manifest, settings)
    assert not result.errors, result.errors
    assert result.job is not None
    return result.job


def errors(manifest: dict[str, Any], settings: Settings = DEFAULTS) -> list[str]:
    result = translate(manifest, settings)
    assert result.errors
    return result.errors


# -- quantities ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Decimal("0.5")),
        ("2", Decimal(2)),
        ("1.5", Decimal("1.5")),
        ("1Ki", Decimal(1024)),
        ("1Mi", Decimal(2**20)),
        ("2Gi", Decimal(2 * 2**30)),
        ("1k", Decimal(1000)),
        ("1M", Decimal(10**6)),
        ("1G", Decimal(10**9)),
        ("1e3", Decimal(1000)),
        ("1E-3", Decimal("0.001")),
        ("100u", Decimal("0.0001")),
        (3, Decimal(3)),
    ],
)
def test_r3_1_quantities_parse_like_the_api_server(text: object, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "1.2.3", "Gi", "1GB", "ten", "1e", True])
def test_r3_1_malformed_quantities_are_refused(text: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


# -- resources (R3.1, R2.1) ---------------------------------------------------------------


def test_r3_1_millicores_round_up_to_whole_cpus_and_memory_to_mib() -> None:
    manifest = pod()
    manifest["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1500m", "memory": "1000M"}
    job = ok(manifest)
    assert job.cpus == 2
    assert job.memory_mib == 954  # 10^9 bytes is 953.67 MiB, rounded up


def test_r3_1_requests_not_limits_size_the_job() -> None:
    manifest = pod()
    manifest["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "8", "memory": "64Gi"}
    job = ok(manifest)
    assert (job.cpus, job.memory_mib) == (1, 1024)


def test_r3_1_gpus_become_a_gres_count() -> None:
    manifest = pod()
    manifest["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "2"
    job = ok(manifest)
    assert job.gpus == 2
    assert V0038().submission(job.request, "#!/bin/sh", {}).body["job"]["gres"] == "gpu:2"


def test_r3_1_containers_are_summed() -> None:
    manifest = pod()
    manifest["spec"]["containers"].append(
        {"name": "side", "resources": {"requests": {"cpu": "1", "memory": "512Mi"}}}
    )
    job = ok(manifest)
    assert (job.cpus, job.memory_mib) == (2, 1536)


def test_r2_1_init_containers_count_by_their_peak_not_their_sum() -> None:
    manifest = pod()
    manifest["spec"]["initContainers"] = [
        {"name": "fetch", "resources": {"requests": {"cpu": "3", "memory": "256Mi"}}},
        {"name": "migrate", "resources": {"requests": {"cpu": "1", "memory": "4Gi"}}},
    ]
    job = ok(manifest)
    assert (job.cpus, job.memory_mib) == (3, 4096)


def test_r2_1_sidecars_run_alongside_the_app_and_add_up() -> None:
    manifest = pod()
    manifest["spec"]["initContainers"] = [
        {
            "name": "proxy",
            "restartPolicy": "Always",
            "resources": {"requests": {"cpu": "1", "memory": "256Mi"}},
        },
        {"name": "setup", "resources": {"requests": {"cpu": "2", "memory": "128Mi"}}},
    ]
    job = ok(manifest)
    # app 0.5 + sidecar 1 = 1.5 → 2 CPUs; init peak: sidecar 1 + setup 2 = 3 CPUs.
    assert job.cpus == 3
    assert job.memory_mib == 1024 + 256


def test_r2_1_init_containers_may_omit_requests() -> None:
    manifest = pod()
    manifest["spec"]["initContainers"] = [{"name": "fetch"}]
    ok(manifest)


def test_r2_1_pod_overhead_is_added() -> None:
    job = ok(pod(overhead={"cpu": "250m", "memory": "64Mi"}))
    assert (job.cpus, job.memory_mib) == (1, 1088)


def test_r2_1_missing_cpu_request_is_rejected() -> None:
    manifest = pod()
    manifest["spec"]["containers"][0]["resources"]["requests"].pop("cpu")
    [error] = errors(manifest)
    assert 'container "main": cpu request is missing' in error


def test_r2_1_zero_memory_request_is_rejected() -> None:
    manifest = pod()
    manifest["spec"]["containers"][0]["resources"]["requests"]["memory"] = "0"
    [error] = errors(manifest)
    assert 'container "main": memory request is zero' in error


def test_r2_1_a_container_without_any_resources_gets_both_errors() -> None:
    manifest = pod()
    manifest["spec"]["containers"].append({"name": "bare"})
    found = errors(manifest)
    assert len(found) == 2
    assert all('"bare"' in e for e in found)


def test_r2_1_a_sidecar_without_requests_is_rejected() -> None:
    manifest = pod()
    manifest["spec"]["initContainers"] = [{"name": "proxy", "restartPolicy": "Always"}]
    assert len(errors(manifest)) == 2


def test_r2_1_fractional_gpus_are_rejected() -> None:
    manifest = pod()
    manifest["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "500m"
    assert "whole number" in errors(manifest)[0]


def test_r2_1_a_malformed_quantity_is_named() -> None:
    manifest = pod()
    manifest["spec"]["containers"][0]["resources"]["requests"]["memory"] = "lots"
    assert any('"lots" is not a quantity' in e for e in errors(manifest))


# -- grace period (R2.2) ------------------------------------------------------------------


def test_r2_2_grace_period_24_at_kill_wait_30_is_accepted() -> None:
    ok(pod(terminationGracePeriodSeconds=24))


def test_r2_2_grace_period_too_long_is_rejected() -> None:
    [error] = errors(pod(terminationGracePeriodSeconds=25))
    assert "terminationGracePeriodSeconds is 25 but must be below 25" in error
    assert "24 or less" in error


def test_r2_2_default_grace_period_of_30_is_rejected() -> None:
    manifest = pod()
    manifest["spec"].pop("terminationGracePeriodSeconds")
    assert "terminationGracePeriodSeconds is 30" in errors(manifest)[0]


def test_r2_2_the_limit_follows_kill_wait() -> None:
    ok(pod(terminationGracePeriodSeconds=54), Settings(kill_wait_s=60))
    errors(pod(terminationGracePeriodSeconds=15), Settings(kill_wait_s=20))


# -- annotations (R2.3, R3) ---------------------------------------------------------------


def test_r3_every_string_annotation_reaches_the_job() -> None:
    job = ok(
        pod(
            {
                P + "account": "acct1",
                P + "comment": "A Kubernetes job",
                P + "constraints": "a100&zone_a",
                P + "partition": "high",
                P + "prefer": "h100",
                P + "qos": "high",
                P + "reservation": "k8s",
                P + "current-working-dir": "/srv",
            }
        )
    )
    body = V0038().submission(job.request, "#!/bin/sh", {}).body["job"]
    assert body["account"] == "acct1"
    assert body["comment"] == "A Kubernetes job"
    assert body["constraints"] == "a100&zone_a"
    assert body["partition"] == "high"
    assert body["prefer"] == "h100"
    assert body["qos"] == "high"
    assert body["reservation"] == "k8s"
    assert body["current_working_directory"] == "/srv"


def test_r3_integer_annotations_reach_the_job() -> None:
    job = ok(
        pod(
            {
                P + "priority": "100",
                P + "timeout": "90",
                P + "user-id": "1001",
                P + "group-id": "1002",
            }
        )
    )
    body = V0038().submission(job.request, "#!/bin/sh", {}).body["job"]
    assert body["priority"] == "100"
    assert body["time_limit"] == 90  # minutes
    assert (job.options.user_id, job.options.group_id) == (1001, 1002)


def test_r6_3_identity_defaults_to_root() -> None:
    job = ok(pod())
    assert (job.options.user_id, job.options.group_id) == (0, 0)


def test_r3_group_id_defaults_to_the_user_id() -> None:
    job = ok(pod({P + "user-id": "1001"}))
    assert job.options.group_id == 1001


@pytest.mark.parametrize("key", ["priority", "user-id", "group-id", "timeout"])
@pytest.mark.parametrize("value", ["high", "1.5", "", "0x10", "1e3"])
def test_r2_3_integer_annotations_must_be_integers(key: str, value: str) -> None:
    [error] = errors(pod({P + key: value}))
    assert f"{P}{key} must be an integer" in error


@pytest.mark.parametrize(("key", "value"), [("timeout", "0"), ("user-id", "-1"), ("priority", "99999999999")])
def test_r2_3_integer_annotations_must_be_in_range(key: str, value: str) -> None:
    assert f"{P}{key} must be between" in errors(pod({P + key: value}))[0]


@pytest.mark.parametrize(
    ("word", "expected", "rest"),
    [
        ("none", Exclusive.NONE, "exclusive"),
        ("ok", Exclusive.OK, "oversubscribe"),
        ("user", Exclusive.USER, "user"),
        ("mcs", Exclusive.MCS, "mcs"),
        ("true", Exclusive.NONE, "exclusive"),
        ("True", Exclusive.NONE, "exclusive"),
    ],
)
def test_r3_exclusive_values_map_to_slurm_sharing_modes(word: str, expected: Exclusive, rest: str) -> None:
    job = ok(pod({P + "exclusive": word}))
    assert job.options.exclusive is expected
    assert V0038().submission(job.request, "#!/bin/sh", {}).body["job"]["exclusive"] == rest


def test_r3_legacy_exclusive_false_means_slurms_default_sharing() -> None:
    job = ok(pod({P + "exclusive": "false"}))
    assert "exclusive" not in V0038().submission(job.request, "#!/bin/sh", {}).body["job"]


def test_r2_3_unknown_exclusive_value_is_rejected() -> None:
    assert "must be one of none, ok, user, mcs, topo" in errors(pod({P + "exclusive": "yes"}))[0]


def test_r3_5_exclusive_topo_is_refused_by_slurm_22_05() -> None:
    job = ok(pod({P + "exclusive": "topo"}))
    [problem] = V0038().unsupported(job.request)
    assert "topo" in problem and "22.05" in problem


def test_r3_node_lists_map_to_nodelist_and_exclude_nodes() -> None:
    job = ok(pod({P + "required-nodes": "sn-001", P + "excluded-nodes": "sn-002, sn-003"}))
    body = V0038().submission(job.request, "#!/bin/sh", {}).body["job"]
    assert body["nodelist"] == "sn-001"
    assert body["exclude_nodes"] == "sn-002,sn-003"


def test_r2_3_malformed_node_list_is_rejected() -> None:
    assert "comma-separated list" in errors(pod({P + "excluded-nodes": "a,,b"}))[0]


def test_r2_3_a_node_both_required_and_excluded_is_rejected() -> None:
    found = errors(pod({P + "required-nodes": "a", P + "excluded-nodes": "a"}))
    assert "both required and excluded" in found[0]


def test_r2_4_all_problems_are_reported_at_once() -> None:
    manifest = pod({P + "priority": "x", P + "exclusive": "maybe"}, terminationGracePeriodSeconds=60)
    manifest["spec"]["containers"][0]["resources"] = {}
    assert len(errors(manifest)) == 5


def test_r3_annotation_prefix_is_configurable() -> None:
    job = ok(pod({"example.com/partition": "high"}), Settings(annotation_prefix="example.com/"))
    assert job.options.partition == "high"


def test_r3_unknown_annotations_under_the_prefix_are_noted_not_fatal() -> None:
    result = translate(pod({P + "partion": "high"}), Settings())
    assert not result.errors
    assert any("partion" in note for note in result.notes)


def test_r3_4_job_name_carries_the_pods_identity() -> None:
    ref = PodRef("ns", "web", "0d7c-uid")
    assert pod_of_job_name(job_name(ref, "sunk"), "sunk") == ref
    assert pod_of_job_name("some-user-job", "sunk") is None


def test_r3_4_another_schedulers_jobs_are_not_ours() -> None:
    assert pod_of_job_name(job_name(PodRef("ns", "web", "u"), "other"), "sunk") is None


def test_placeholder_is_never_requeued_and_asks_for_one_node() -> None:
    body = V0038().submission(ok(pod()).request, "#!/bin/sh", {"A": "1"}).body["job"]
    assert body["requeue"] is False
    assert body["nodes"] == [1, 1]
    assert body["environment"] == {"A": "1"}


# -- devices: extended resources → GRES (issue #12) ------------------------------------------------
MIG = Settings(
    devices=(("nvidia.com/gpu", "gpu"), ("nvidia.com/mig-1g.10gb", "gpu:1g.10gb"), ("rdma/ib", ""))
)


def requesting(devices: dict[str, str], key: str = "requests") -> dict[str, Any]:
    manifest = pod()
    resources = manifest["spec"]["containers"][0]["resources"]
    resources.setdefault(key, {}).update(devices)
    return manifest


def test_r12_3_an_extended_resource_the_table_does_not_know_is_refused() -> None:
    result = translate(requesting({"example.com/fpga": "1"}), DEFAULTS)
    assert result.errors
    assert "example.com/fpga, which this scheduler does not map to a Slurm GRES" in result.errors[0]
    assert "nvidia.com/gpu" in result.errors[0] and "--device-gres" in result.errors[0]


def test_r12_3_rdma_is_allowed_without_a_gres() -> None:
    job = ok(requesting({"rdma/ib": "1"}))
    assert job.gres == () and job.gpus == 0


def test_r12_3_mig_slices_map_to_their_gres_type() -> None:
    job = ok(requesting({"nvidia.com/mig-1g.10gb": "2", "nvidia.com/gpu": "1"}), MIG)
    assert job.gres == (("gpu", 1), ("gpu:1g.10gb", 2)) and job.gpus == 3
    assert V0038().submission(job.request, "#!/bin/sh", {}).body["job"]["gres"] == "gpu:1,gpu:1g.10gb:2"


def test_r12_3_a_limit_only_device_counts_as_its_request() -> None:
    assert ok(requesting({"nvidia.com/gpu": "1"}, key="limits")).gres == (("gpu", 1),)


def test_r12_3_native_resources_are_not_devices() -> None:
    job = ok(requesting({"ephemeral-storage": "1Gi", "hugepages-2Mi": "2Mi", "kubernetes.io/example": "1"}))
    assert job.gres == ()


def test_r12_3_a_fractional_device_is_refused() -> None:
    result = translate(requesting({"rdma/ib": "500m"}), DEFAULTS)
    assert any("rdma/ib request must be a whole number" in e for e in result.errors)
