"""The trust policy (issue #12): what a Pod of each namespace may ask of Slurm."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from sunk.scheduler import policy
from sunk.scheduler.explain import explain
from sunk.scheduler.policy import PERMISSIVE, PolicyError, PolicyFile, parse
from sunk.scheduler.translate import Settings, translate

P = "sunk.coreweave.com/"
STRICT = """
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
    pytest.param(pod(user_id="1001", group_id="0"), [], (1001, 0), id="r12_1_gids_unbounded_unless_listed"),
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


def test_r12_1_without_a_file_the_reference_behaviour_holds_and_is_flagged() -> None:
    job = translate(pod(qos="high", account="any", priority="4000000000"), Settings()).job
    assert job is not None
    judged_job, problems = policy.check(PERMISSIVE, pod(), job, P)
    assert problems == [] and judged_job.options.user_id == 0
    assert (
        PERMISSIVE.permissive
        and not parse(
            STRICT.replace('uids: ["*"]', "uids: [5]").replace("defaultUid: 0", "defaultUid: 5")
        ).permissive
    )


BAD = [
    pytest.param("default: {uids: [root]}", "default.uids must be an integer", id="names_are_not_ids"),
    pytest.param("default: {accounts: a}", "must be a list", id="a_list_is_a_list"),
    pytest.param(
        "default: {qos: [normal], color: blue}", "unknown key(s) color", id="unknown_keys_are_named"
    ),
    pytest.param("defaults: {}", "unknown top-level key(s) defaults", id="a_misspelt_section"),
    pytest.param(
        "default: {uids: [1001]}",
        "default identity 0:0 is not among",
        id="the_default_identity_must_be_allowed",
    ),
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
