"""The trust policy (issue #12): what a Pod of each namespace may ask of Slurm."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from sunk.scheduler import policy
from sunk.scheduler.explain import explain
from sunk.scheduler.policy import PERMISSIVE, STEERING, PolicyError, PolicyFile, parse
from sunk.scheduler.translate import Settings, translate

P = "sunk.coreweave.com/"
STRICT = """
acknowledgeUnbounded: true  # namespace legacy keeps the reference behaviour
default:
  uids: [1001]
  defaultUid: 1001
  accounts: []
  partitions: [batch]
  qos: [normal]
  reservations: []
  priority: {min: 0, max: 100}
namespaces:
  training:
    uids: [1001, 1002]
    accounts: [training]
    qos: [normal, high]
  legacy:
    uids: ["*"]
    gids: ["*"]
    defaultUid: 0
"""


def pod(namespace: str = "inference", **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "web",
            "namespace": namespace,
            "uid": "uid-1",
            "annotations": {P + k.replace("_", "-"): v for k, v in annotations.items()},
        },
        "spec": {
            "terminationGracePeriodSeconds": 10,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
        },
    }


def judged(manifest: dict[str, Any], text: str = STRICT) -> tuple[Any, list[str]]:
    job = translate(manifest, Settings()).job
    assert job is not None
    return policy.check(parse(text), manifest, job, P)


CASES = [
    pytest.param(pod(), [], (1001, 1001), id="r12_1_a_pod_naming_no_identity_gets_the_namespace_default"),
    pytest.param(
        pod(user_id="0"), ["may not run jobs as uid 0"], None, id="r12_1_root_is_refused_where_not_allowed"
    ),
    pytest.param(
        pod(user_id="1001", group_id="0"),
        ["may not run jobs as gid 0"],
        None,
        id="issue38_gids_are_refused_unless_listed",
    ),
    pytest.param(
        pod(account="finance"),
        ['may not use account "finance"'],
        None,
        id="r12_1_an_account_not_listed_is_refused",
    ),
    pytest.param(
        pod(partition="gpu"),
        ['may not use partition "gpu"'],
        None,
        id="r12_1_a_partition_not_listed_is_refused",
    ),
    pytest.param(
        pod(qos="high"), ['may not use qos "high"'], None, id="r12_1_a_high_qos_is_refused_by_default"
    ),
    pytest.param(
        pod(reservation="maint"),
        ['may not use reservation "maint"'],
        None,
        id="r12_1_an_empty_list_allows_none",
    ),
    pytest.param(
        pod(priority="101"),
        ["may not set priority 101"],
        None,
        id="r12_1_priority_above_the_range_is_refused",
    ),
    pytest.param(
        pod(partition="batch", qos="normal", priority="100"),
        [],
        (1001, 1001),
        id="r12_1_allowed_choices_pass",
    ),
    pytest.param(
        pod("training", qos="high", account="training", user_id="1002"),
        [],
        (1002, 1002),
        id="r12_1_a_namespace_entry_overrides_the_default",
    ),
    pytest.param(
        pod("training", partition="gpu"),
        ['may not use partition "gpu"'],
        None,
        id="r12_1_keys_a_namespace_leaves_out_come_from_default",
    ),
    pytest.param(pod("legacy"), [], (0, 0), id="r12_1_a_namespace_may_keep_the_reference_behaviour"),
    pytest.param(
        pod(user_id="0", account="x", priority="500"),
        ["uid 0", 'account "x"', "priority 500"],
        None,
        id="r12_1_every_broken_rule_is_named_at_once",
    ),
]


@pytest.mark.parametrize(("manifest", "broken", "identity"), CASES)
def test_the_policy_of_a_namespace(
    manifest: dict[str, Any], broken: list[str], identity: tuple[int, int] | None
) -> None:
    job, problems = judged(manifest)
    assert len(problems) == len(broken), problems
    for words, problem in zip(broken, problems, strict=True):
        assert words in problem and problem.startswith(f"namespace {manifest['metadata']['namespace']} ")
    if identity is not None:
        assert (job.options.user_id, job.options.group_id) == identity


def test_r12_1_a_refusal_names_the_rule_and_what_it_allows() -> None:
    _, problems = judged(pod("training", qos="urgent"))
    assert problems == [
        'namespace training may not use qos "urgent" (namespaces.training.qos allows normal, high)'
    ]


def test_issue38_the_permissive_policy_allows_what_the_reference_did_and_is_flagged() -> None:
    manifest = pod(qos="high", account="any", priority="4000000000", required_nodes="n1", timeout="9")
    job = translate(manifest, Settings()).job
    assert job is not None
    judged_job, problems = policy.check(PERMISSIVE, manifest, job, P)
    assert problems == [] and judged_job.options.user_id == 0
    assert PERMISSIVE.permissive and PERMISSIVE.acknowledged


def test_issue38_without_a_policy_file_every_pod_is_refused_naming_the_rule() -> None:
    """Catches the built-in default granting anything (it was root and every account)."""
    manifest = pod()
    job = translate(manifest, Settings()).job
    assert job is not None
    _, problems = policy.check(PolicyFile(None).current(), manifest, job, P)
    assert problems == ["namespace inference must name a user-id: default.defaultUid is not set"]


def test_issue38_keys_a_policy_leaves_out_grant_nothing() -> None:
    """Catches left-out keys meaning "*" (they did): a namespace given only an identity
    gets no account, partition, QoS, reservation or priority."""
    text = "namespaces: {web: {defaultUid: 1001}}"
    manifest = pod("web", account="a", partition="p", qos="q", reservation="r", priority="1")
    job = translate(manifest, Settings()).job
    assert job is not None
    _, problems = policy.check(parse(text), manifest, job, P)
    assert [p.split(" (")[1] for p in problems] == [
        "namespaces.web.accounts allows none)",
        "namespaces.web.partitions allows none)",
        "namespaces.web.qos allows none)",
        "namespaces.web.reservations allows none)",
        "namespaces.web.priority is not set)",
    ]


def test_issue38_the_default_identity_may_also_be_named() -> None:
    _, problems = judged(pod("web", user_id="1001"), "namespaces: {web: {defaultUid: 1001}}")
    assert problems == []


STEERS = {
    "required-nodes": "node-001",
    "excluded-nodes": "node-002",
    "exclusive": "user",
    "constraints": "h100",
    "prefer": "h100",
    "timeout": "60",
    "current-working-dir": "/tmp",
}


@pytest.mark.parametrize("key", STEERING)
def test_issue38_an_annotation_steering_placement_or_time_needs_a_grant(key: str) -> None:
    """Catches the policy leaving out the annotations that pick whole nodes or drop the
    time limit: a Pod could hold chosen nodes for ever."""
    manifest = pod("web", **{key.replace("-", "_"): STEERS[key]})
    _, refused = judged(manifest, "namespaces: {web: {defaultUid: 1001}}")
    assert refused == [f"namespace web may not set {key} (namespaces.web.annotations allows none)"]
    _, granted = judged(manifest, f"namespaces: {{web: {{defaultUid: 1001, annotations: [{key}]}}}}")
    assert granted == []


UNBOUNDED = [
    pytest.param('default: {uids: ["*"], defaultUid: 5}', "default.uids", id="any_uid"),
    pytest.param("namespaces: {a: {uids: [0], defaultUid: 5}}", "namespaces.a.uids", id="root_listed"),
    pytest.param("namespaces: {a: {defaultUid: 0}}", "namespaces.a.defaultUid", id="root_by_default"),
    pytest.param("namespaces: {a: {defaultUid: 5, defaultGid: 0}}", "namespaces.a.defaultGid", id="gid_0"),
    pytest.param('namespaces: {a: {defaultUid: 5, qos: ["*"]}}', "namespaces.a.qos", id="any_qos"),
    pytest.param('namespaces: {a: {annotations: ["*"]}}', "namespaces.a.annotations", id="any_annotation"),
]


@pytest.mark.parametrize(("text", "key"), UNBOUNDED)
def test_issue38_root_or_a_wildcard_needs_the_acknowledgement(text: str, key: str) -> None:
    """Catches a policy that reopens root or "anything" without saying so."""
    with pytest.raises(PolicyError) as caught:
        parse(text)
    assert key in str(caught.value) and "acknowledgeUnbounded: true" in str(caught.value)
    assert parse("acknowledgeUnbounded: true\n" + text).unbounded() == [key]


BAD = [
    pytest.param("default: {uids: [root]}", "default.uids must be an integer", id="names_are_not_ids"),
    pytest.param("default: {accounts: a}", "must be a list", id="a_list_is_a_list"),
    pytest.param(
        "default: {qos: [normal], color: blue}", "unknown key(s) color", id="unknown_keys_are_named"
    ),
    pytest.param("defaults: {}", "unknown top-level key(s) defaults", id="a_misspelt_section"),
    pytest.param(
        "default: {annotations: [timeout, nodes]}", "nodes not among", id="an_unknown_steering_annotation"
    ),
    pytest.param("acknowledgeUnbounded: yes please", "true or false", id="an_acknowledgement_is_a_yes"),
    pytest.param("default: {priority: {min: 5, max: 1}}", "min is above max", id="an_empty_priority_range"),
    pytest.param("default: [", "not valid YAML", id="broken_yaml"),
]


@pytest.mark.parametrize(("text", "words"), BAD)
def test_r12_1_an_unusable_policy_says_where_and_why(text: str, words: str) -> None:
    with pytest.raises(PolicyError, match="policy") as caught:
        parse(text)
    assert words in str(caught.value)


def test_r12_1_the_policy_file_is_reread_when_it_changes_and_a_bad_change_keeps_the_old(
    tmp_path: Path,
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(STRICT)
    source = PolicyFile(str(path))
    assert source.current().rules_for("x").default_uid == 1001
    path.write_text(
        STRICT.replace("defaultUid: 1001", "defaultUid: 1002").replace("uids: [1001]", "uids: [1002]")
    )
    os.utime(path, ns=(1, 1))  # a new stamp even within the file system's time resolution
    assert source.current().rules_for("x").default_uid == 1002
    path.write_text("default: {uids: [oops]}")
    assert source.current().rules_for("x").default_uid == 1002
    assert source.problem is not None and "uids" in source.problem


def test_r12_1_explain_gives_the_schedulers_answer_offline() -> None:
    report = explain(pod(user_id="0"), Settings(), policy=parse(STRICT))
    assert not report["valid"] and any("uid 0" in e for e in report["errors"])
    allowed = explain(pod(), Settings(), policy=parse(STRICT))
    assert allowed["valid"] and allowed["policy"] == "default"
    assert "--uid=1001" in allowed["sbatch"]
