"""The NodeSet controller through in-memory caches and fakes of its ports (R10.2, R10.4):
one slurmd Pod per selected Node, one NodeSet per Node, replicas bounded by what is
feasible, nodes that register right the first time, stale records cleaned before a Pod is
created, idle-only scale-in, and nothing removed while Slurm cannot be read."""

from __future__ import annotations

from sunk.kube.client import KubeError
from sunk.operator.nodeset import plan as p
from tests.fakes.operator_world import OperatorWorld


def world_with_nodes(count: int = 3, **node_kw: object) -> OperatorWorld:
    world = OperatorWorld()
    for i in range(1, count + 1):
        world.add_node(f"node-{i}", f"10.64.{i}.{i + 10}", labels={"pool": "gpu"}, **node_kw)  # type: ignore[arg-type]
    return world


def created(world: OperatorWorld) -> list[str]:
    return [c[1].split("/", 1)[1] for c in world.kube.calls if c[0] == "create_pod"]


async def test_r10_2_one_slurmd_pod_per_selected_node_like_a_daemonset() -> None:
    world = world_with_nodes(3)
    world.add_node("cpu-1", "10.64.9.9", labels={"pool": "cpu"})
    world.add_nodeset("gpu", nodeSelector={"pool": "gpu"})
    await world.reconcile("gpu")
    pods = world.members("gpu")
    assert sorted(pods) == ["gpu-001-011", "gpu-002-012", "gpu-003-013"]
    assert sorted(pod["spec"]["nodeName"] for pod in pods.values()) == ["node-1", "node-2", "node-3"]


async def test_r10_2_the_slurm_node_name_follows_the_machine_address() -> None:
    world = world_with_nodes(1)
    world.add_nodeset("a")
    await world.reconcile("a")
    [pod] = world.members("a").values()
    assert pod["metadata"]["name"] == "a-001-011"
    assert pod["spec"]["hostname"] == "a-001-011"
    assert pod["metadata"]["labels"]["sunk.coreweave.com/slurm-node"] == "a-001-011"
    assert pod["spec"]["containers"][0]["args"][2:7] == ["slurmd", "-D", "-Z", "-N", "a-001-011"]


async def test_r10_2_replicas_are_bounded_by_the_feasible_nodes_and_the_status_says_so() -> None:
    world = world_with_nodes(2)
    world.add_nodeset("a", replicas=5)
    await world.settle("a")
    status = world.status("a")
    assert (status["replicas"], status["feasible"]) == (2, 2)
    assert world.condition("a", "Feasible")["reason"] == "NotEnoughNodes"
    assert "NoFeasibleNodes" in world.kube.reasons()


async def test_r10_2_replicas_below_the_feasible_nodes_make_that_many_members() -> None:
    world = world_with_nodes(3)
    world.add_nodeset("a", replicas=2)
    await world.settle("a")
    assert len(world.members("a")) == 2
    assert world.status("a")["feasible"] == 3
    assert world.condition("a", "Feasible")["status"] == "True"


async def test_r10_2_a_node_held_by_another_nodeset_is_not_taken_and_it_says_so() -> None:
    world = world_with_nodes(1)
    world.add_nodeset("first", created="2026-01-01T00:00:00Z")
    world.add_nodeset("second", created="2026-02-01T00:00:00Z")
    await world.settle("first")
    await world.settle("second")
    assert list(world.members("first")) == ["first-001-011"]
    assert world.members("second") == {}
    [note] = world.kube.notes(p.HELD)
    assert "node-1" in note and "first" in note
    assert world.condition("second", "Feasible")["status"] == "False"


async def test_r10_2_a_held_node_is_reported_as_held_even_when_its_holder_fills_it() -> None:
    world = world_with_nodes(1, cpu="2")
    whole_node = {"requests": {"cpu": "2", "memory": "1Gi"}}
    world.add_nodeset("first", created="2026-01-01T00:00:00Z", resources=whole_node)
    world.add_nodeset("second", created="2026-02-01T00:00:00Z", resources=whole_node)
    await world.settle("first")
    await world.reconcile("second")
    message = world.condition("second", "Feasible")["message"]
    assert "node-1 is held by NodeSet first" in message, message


async def test_r10_2_the_older_nodeset_gets_a_free_node_whichever_is_reconciled_first() -> None:
    world = world_with_nodes(1)
    world.add_nodeset("young", created="2026-02-01T00:00:00Z")
    world.add_nodeset("old", created="2026-01-01T00:00:00Z")
    await world.reconcile("young")
    assert world.members() == {}
    await world.reconcile("old")
    assert list(world.members("old")) == ["old-001-011"]


async def test_r10_2_a_selection_matching_nothing_is_reported() -> None:
    world = world_with_nodes(2)
    world.add_nodeset("a", nodeSelector={"pool": "none"})
    await world.reconcile("a")
    assert world.members() == {}
    feasible = world.condition("a", "Feasible")
    assert feasible["reason"] == "NoFeasibleNodes"
    assert "does not match nodeSelector" in feasible["message"]


async def test_r10_2_untolerated_taints_and_cordons_and_full_nodes_are_not_selected() -> None:
    world = OperatorWorld()
    world.add_node("tainted", "10.0.0.1", taints=[{"key": "gpu", "value": "x", "effect": "NoSchedule"}])
    world.add_node("cordoned", "10.0.0.2", cordoned=True)
    world.add_node("small", "10.0.0.3", cpu="1")
    world.add_node("ok", "10.0.0.4")
    world.add_nodeset("a")
    await world.reconcile("a")
    assert [pod["spec"]["nodeName"] for pod in world.members().values()] == ["ok"]
    message = world.condition("a", "Feasible")["message"]
    assert world.status("a")["feasible"] == 1
    assert world.condition("a", "Feasible")["status"] == "True", message


async def test_r10_2_a_tolerated_taint_is_selected() -> None:
    world = OperatorWorld()
    world.add_node("tainted", "10.0.0.1", taints=[{"key": "gpu", "value": "x", "effect": "NoSchedule"}])
    world.add_nodeset("a", tolerations=[{"key": "gpu", "operator": "Exists"}])
    await world.reconcile("a")
    assert len(world.members()) == 1


async def test_r10_2_other_pods_on_a_node_count_against_its_free_room() -> None:
    world = world_with_nodes(1, cpu="3")
    world.pods.put(
        {
            "metadata": {"name": "web", "namespace": "apps", "labels": {}},
            "spec": {
                "nodeName": "node-1",
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}],
            },
            "status": {"phase": "Running"},
        }
    )
    world.add_nodeset("a")
    await world.reconcile("a")
    assert world.members("a") == {}
    assert "too little free cpu" in world.condition("a", "Feasible")["message"]


async def test_r10_4_cpus_memory_gres_and_features_are_set_before_the_pod_starts() -> None:
    world = OperatorWorld()
    world.add_node(
        "gpu-1",
        "10.0.0.1",
        labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        cpu="64",
        memory="512Gi",
        extra={"nvidia.com/gpu": "8"},
    )
    world.add_nodeset(
        "h100",
        partitions=["batch"],
        features=["ib"],
        resources={"limits": {"cpu": "32", "memory": "256Gi"}},
        memoryReserve="1Gi",
    )
    await world.reconcile("h100")
    [pod] = world.members().values()
    args = pod["spec"]["containers"][0]["args"]
    assert args[args.index("--conf") + 1] == (
        "CPUs=32 RealMemory=261120 Gres=gpu:nvidia-h100-80gb-hbm3:8 Features=part_batch,ib"
    )


async def test_r10_4_a_nodeset_without_limits_gives_slurm_the_nodes_allocatable() -> None:
    world = world_with_nodes(1, cpu="7500m", memory="4Gi")
    world.add_nodeset("a", resources={})
    await world.reconcile("a")
    [pod] = world.members().values()
    conf = pod["spec"]["containers"][0]["args"][-1]
    assert conf.startswith("CPUs=7 RealMemory=3840")


async def test_r10_2_the_member_pod_mounts_only_the_slurm_key_and_points_at_slurmctld() -> None:
    world = world_with_nodes(1)
    world.add_nodeset("a", template={"spec": {"priorityClassName": "slurm", "nodeName": "elsewhere"}})
    await world.reconcile("a")
    [pod] = world.members().values()
    spec = pod["spec"]
    assert spec["nodeName"] == "node-1"  # the template cannot move it
    assert spec["priorityClassName"] == "slurm"
    [volume] = spec["volumes"]
    assert volume["secret"] == {
        "secretName": "slurm-auth",
        "items": [{"key": "slurm.key", "path": "slurm.key"}],
        "defaultMode": 0o400,
    }
    args = spec["containers"][0]["args"]
    assert args[args.index("--conf-server") + 1] == "slurm-controller.slurm.svc.cluster.local:6817"
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "NodeSet"


async def test_r10_2_a_stale_record_with_the_members_name_is_deleted_before_its_pod_is_created() -> None:
    world = world_with_nodes(1)
    world.slurm.add_node("a-001-011", address="10.64.7.7")  # an earlier Pod's address
    world.add_nodeset("a")
    await world.reconcile("a")
    assert ("delete_node", "a-001-011") in world.slurm.calls
    assert world.kube.calls.index(("create_pod", "slurm/a-001-011")) >= 0
    assert "StaleSlurmNodeDeleted" in world.kube.reasons()


async def test_r10_2_a_stale_record_still_running_jobs_holds_back_the_new_pod() -> None:
    world = world_with_nodes(1)
    world.slurm.add_node("a-001-011")
    world.slurm.run_job("a-001-011")
    world.add_nodeset("a")
    await world.reconcile("a")
    assert created(world) == []
    assert ("delete_node", "a-001-011") not in world.slurm.calls
    assert "still runs jobs" in world.condition("a", "Ready")["message"]


async def test_r10_2_a_failed_record_delete_means_no_pod_is_created() -> None:
    world = world_with_nodes(1)
    world.slurm.add_node("a-001-011")
    world.slurm.fail("delete_node")
    world.add_nodeset("a")
    try:
        await world.reconcile("a")
    except Exception:
        pass
    assert created(world) == []


async def test_r10_2_slurm_unreachable_means_nothing_is_created_or_removed_and_the_status_says_so() -> None:
    world = world_with_nodes(2)
    world.add_nodeset("a", replicas=2)
    await world.settle("a")
    world.nodesets.get("slurm/a")["spec"]["replicas"] = 0  # type: ignore[index]
    world.slurm.fail("nodes", times=10)
    calls = len(world.kube.calls)
    await world.reconcile("a")
    assert [c for c in world.kube.calls[calls:] if c[0] != "patch_status"] == []
    assert world.condition("a", "SlurmReachable")["status"] == "False"
    assert "waiting for Slurm" in world.status("a")["summary"]
    assert len(world.members("a")) == 2


async def test_r10_2_scaling_down_drains_an_idle_member_then_deletes_its_pod_then_its_record() -> None:
    world = world_with_nodes(2)
    world.add_nodeset("a", replicas=2)
    await world.settle("a")
    world.nodesets.get("slurm/a")["spec"]["replicas"] = 1  # type: ignore[index]
    await world.reconcile("a")
    [(_, victim, reason)] = [c for c in world.slurm.calls if c[0] == "drain"]
    assert reason == "sunk: NodeSet a scales in"
    assert victim in world.members("a")  # drained first, not deleted yet
    await world.reconcile("a")
    assert victim not in world.members("a")
    await world.reconcile("a")
    assert ("delete_node", victim) in world.slurm.calls
    assert len(world.members("a")) == 1


async def test_r10_5_a_busy_member_is_kept_when_scaling_down_and_the_idle_one_goes() -> None:
    world = world_with_nodes(2)
    world.add_nodeset("a", replicas=2)
    await world.settle("a")
    world.slurm.run_job("a-001-011")
    world.nodesets.get("slurm/a")["spec"]["replicas"] = 1  # type: ignore[index]
    await world.settle("a")
    assert list(world.members("a")) == ["a-001-011"]
    assert not [c for c in world.slurm.calls if c[:2] == ("drain", "a-001-011")]


async def test_r10_5_busy_members_beyond_replicas_are_drained_and_stay_until_their_jobs_end() -> None:
    world = world_with_nodes(2)
    world.add_nodeset("a", replicas=2)
    await world.settle("a")
    first = world.slurm.run_job("a-001-011")
    world.slurm.run_job("a-002-012")
    world.spec("a")["replicas"] = 0
    await world.settle("a")
    assert len(world.members("a")) == 2
    assert {c[1] for c in world.slurm.calls if c[0] == "drain"} == {"a-001-011", "a-002-012"}
    assert f"member a-001-011 drains: waits for job {first}" in world.condition("a", "Ready")["message"]
    removal = world.status("a")["removals"][0]
    assert (removal["phase"], removal["jobs"], removal["cause"]) == ("Draining", [first], "scales in")
    world.slurm.end_jobs("a-001-011")
    await world.settle("a")
    assert list(world.members("a")) == ["a-002-012"]
    assert "a-001-011" not in world.slurm.raw_nodes


async def test_r10_5_scaling_back_up_lifts_our_drain_but_never_an_administrators() -> None:
    world = world_with_nodes(2)
    world.add_nodeset("a", replicas=2)
    await world.settle("a")
    world.slurm.drain_as_admin("a-002-012")
    world.nodesets.get("slurm/a")["spec"]["replicas"] = 1  # type: ignore[index]
    await world.reconcile("a")  # drains the first member
    assert [c[1] for c in world.slurm.calls if c[0] == "drain"] == ["a-001-011"]
    world.nodesets.get("slurm/a")["spec"]["replicas"] = 2  # type: ignore[index]
    await world.reconcile("a")
    assert [c[1] for c in world.slurm.calls if c[0] == "resume"] == ["a-001-011"]


async def test_r10_2_an_operator_restart_creates_no_duplicate_and_loses_no_member() -> None:
    world = world_with_nodes(3)
    world.add_nodeset("a")
    await world.settle("a")
    before = dict(world.members("a"))
    world.controller = world.new_controller()
    await world.settle("a")
    assert world.members("a").keys() == before.keys()
    assert len(created(world)) == 3


async def test_r10_2_a_create_the_cache_has_not_shown_yet_is_not_repeated() -> None:
    world = world_with_nodes(1)
    world.kube.hide_creates = True
    world.add_nodeset("a")
    await world.reconcile("a")
    await world.reconcile("a")
    assert created(world) == ["a-001-011"]


async def test_r10_2_a_record_registered_by_a_just_created_pod_is_not_taken_for_stale() -> None:
    world = world_with_nodes(1)
    world.kube.hide_creates = True
    world.add_nodeset("a")
    await world.reconcile("a")
    world.slurm.add_node("a-001-011")  # its slurmd registered before the watch showed the Pod
    await world.reconcile("a")
    assert ("delete_node", "a-001-011") not in world.slurm.calls


async def test_r10_2_a_record_without_a_pod_and_without_jobs_is_deleted() -> None:
    world = world_with_nodes(1, ready=False)
    world.slurm.add_node("a-009-009")
    world.add_nodeset("a")
    await world.reconcile("a")
    assert ("delete_node", "a-009-009") in world.slurm.calls


async def test_r10_2_records_of_other_nodesets_or_admins_are_left_alone() -> None:
    world = world_with_nodes(1)
    world.slurm.add_node("b-009-009")
    world.slurm.add_node("login-1")
    world.add_nodeset("a")
    await world.reconcile("a")
    assert not [c for c in world.slurm.calls if c[0] == "delete_node"]


async def test_r10_2_an_invalid_nodeset_gets_a_condition_and_an_event_naming_the_field_and_nothing_else() -> (
    None
):
    world = world_with_nodes(1)
    world.add_nodeset("a", replicas=-1, image="bad image!")
    await world.reconcile("a")
    assert world.members() == {}
    valid = world.condition("a", "Valid")
    assert valid["status"] == "False"
    assert "spec.replicas" in valid["message"] and "spec.image" in valid["message"]
    assert world.kube.reasons().count(p.INVALID) == 1
    await world.reconcile("a")
    assert world.kube.reasons().count(p.INVALID) == 1  # once per generation


async def test_r10_2_an_invalid_nodeset_keeps_its_members() -> None:
    world = world_with_nodes(1)
    world.add_nodeset("a")
    await world.settle("a")
    world.nodesets.get("slurm/a")["spec"]["resources"] = {"limits": {"cpu": "lots"}}  # type: ignore[index]
    await world.settle("a")
    assert list(world.members("a")) == ["a-001-011"]
    assert "spec.resources.limits.cpu" in world.condition("a", "Valid")["message"]


async def test_r10_3_an_unknown_partition_is_refused_naming_the_declared_ones() -> None:
    world = world_with_nodes(1)
    world.add_nodeset("a", partitions=["gpu"])
    await world.reconcile("a")
    assert world.members() == {}
    message = world.condition("a", "Valid")["message"]
    assert "'gpu'" in message and "batch" in message


async def test_r10_2_impossible_resources_are_reported_as_infeasible() -> None:
    world = world_with_nodes(2)
    world.add_nodeset("a", resources={"limits": {"cpu": "64", "memory": "1Ti"}})
    await world.reconcile("a")
    assert world.members() == {}
    assert world.condition("a", "Feasible")["reason"] == "NoFeasibleNodes"
    assert "too little free cpu" in world.condition("a", "Feasible")["message"]


async def test_r10_2_status_counts_members_by_their_slurm_state_like_sinfo() -> None:
    world = world_with_nodes(3)
    world.add_nodeset("a")
    await world.settle("a")
    world.slurm.run_job("a-001-011")
    world.slurm.drain_as_admin("a-002-012")
    await world.reconcile("a")
    status = world.status("a")
    assert status["slurm"] == {
        "idle": 1,
        "allocated": 1,
        "mixed": 0,
        "draining": 0,
        "drained": 1,
        "down": 0,
        "unknown": 0,
    }
    assert (status["replicas"], status["ready"], status["partitions"]) == (3, 3, "batch")
    assert status["selector"] == "app.kubernetes.io/instance=slurm,sunk.coreweave.com/nodeset=a"


async def test_r10_2_ready_once_every_member_runs_and_registered() -> None:
    world = world_with_nodes(2)
    world.add_nodeset("a")
    await world.reconcile("a")
    assert world.condition("a", "Ready")["status"] == "False"
    await world.settle("a")
    assert world.condition("a", "Ready")["status"] == "True"
    assert world.status("a")["summary"] == "Ready"


async def test_r10_2_a_member_that_cannot_pull_its_image_is_reported() -> None:
    world = world_with_nodes(1)
    world.add_nodeset("a")
    await world.reconcile("a")
    [pod] = world.members().values()
    pod["status"] = {
        "phase": "Pending",
        "containerStatuses": [
            {"name": "slurmd", "state": {"waiting": {"reason": "ErrImagePull", "message": "nope"}}}
        ],
    }
    await world.reconcile("a")
    ready = world.condition("a", "Ready")
    assert ready["reason"] == "MembersFailing" and "ErrImagePull" in ready["message"]


async def test_r10_2_a_member_the_kubelet_rejected_is_replaced() -> None:
    world = world_with_nodes(1)
    world.add_nodeset("a")
    await world.reconcile("a")
    [pod] = world.members().values()
    pod["status"] = {"phase": "Failed", "reason": "OutOfcpu", "message": "Node didn't have enough resource"}
    await world.reconcile("a")
    assert world.members() == {}
    await world.reconcile("a")
    assert list(world.members()) == ["a-001-011"]
    assert "FailedMember" in world.kube.reasons()


async def test_r10_2_an_unchanged_status_is_not_written_again() -> None:
    world = world_with_nodes(1)
    world.add_nodeset("a")
    await world.settle("a")
    writes = world.kube.calls.count(("patch_status", "a"))
    await world.reconcile("a")
    assert world.kube.calls.count(("patch_status", "a")) == writes


async def test_r10_2_a_create_that_fails_is_retried_by_the_next_pass() -> None:
    world = world_with_nodes(1)
    world.add_nodeset("a")
    world.kube.fail("create_pod", KubeError(500, "etcd timeout"))
    try:
        await world.reconcile("a")
    except KubeError:
        pass
    await world.reconcile("a")
    assert list(world.members()) == ["a-001-011"]
