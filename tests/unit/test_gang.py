"""R9.1: reading PodGroups and deciding when a gang may ask Slurm for its nodes."""

from __future__ import annotations

from typing import Any

import pytest

from sunk.scheduler.translate import gang

NOW = 1_800_000_000.0


def podgroup(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": "ml", "name": "train"}, "spec": spec}


def test_r9_1_a_podgroup_reads_min_member_and_timeout() -> None:
    group, problem = gang.parse(podgroup(minMember=4, scheduleTimeoutSeconds=30))
    assert problem is None and group == gang.PodGroup("ml", "train", 4, 30)


def test_r9_1_a_podgroup_without_a_timeout_gets_the_coscheduling_default() -> None:
    group, _ = gang.parse(podgroup(minMember=2))
    assert group is not None and group.timeout_s == gang.DEFAULT_TIMEOUT_S


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        pytest.param({"minMember": 0}, "minMember", id="r9_1_zero_members_is_refused"),
        pytest.param({"minMember": "4"}, "minMember", id="r9_1_a_member_count_as_text_is_refused"),
        pytest.param(
            {"minMember": 2, "scheduleTimeoutSeconds": -1}, "scheduleTimeoutSeconds", id="r9_1_bad_timeout"
        ),
    ],
)
def test_r9_1_a_bad_podgroup_is_named_with_the_field_at_fault(spec: dict[str, Any], words: str) -> None:
    group, problem = gang.parse(podgroup(**spec))
    assert group is None and problem is not None and "ml/train" in problem and words in problem


def test_r9_1_a_pod_joins_the_group_its_label_names() -> None:
    assert gang.group_of({"metadata": {"labels": {gang.GROUP_LABEL: "train"}}}) == "train"
    assert gang.group_of({"metadata": {"labels": {"app": "web"}}}) is None


def test_r9_1_fewer_members_than_min_member_wait_and_say_how_many() -> None:
    group = gang.PodGroup("ml", "train", 3, 60)
    message = gang.waiting_for_members(group, ["train-1", "train-0"])
    assert message is not None and "needs 3 members" in message and "2 waiting (train-0, train-1)" in message
    assert gang.waiting_for_members(group, ["a", "b", "c"]) is None


def test_r9_1_a_group_times_out_only_after_its_own_timeout() -> None:
    group = gang.PodGroup("ml", "train", 3, 60)
    assert not gang.timed_out(group, int(NOW) - 59, NOW)
    assert gang.timed_out(group, int(NOW) - 60, NOW)
    assert not gang.timed_out(group, 0, NOW)  # Slurm gave no submit time: never judged


def test_r9_1_members_asking_for_different_slurm_users_cannot_share_one_job() -> None:
    group = gang.PodGroup("ns", "g", 2, 60)
    assert gang.identity_problem(group, [(1000, 1000), (1000, 1000)]) is None
    message = gang.identity_problem(group, [(1000, 1000), (0, 0)])
    assert message is not None
    assert "uid 0 gid 0, uid 1000 gid 1000" in message
    assert "give them the same user-id and group-id annotations" in message


def step(**kw: Any) -> gang.SubmitStep:
    base: dict[str, Any] = {
        "placed": False,
        "retry_in": 0.0,
        "unanswered": False,
        "wait_s": 5.0,
    }
    return gang.next_submit_step(
        gang.PodGroup("ns", "g", 2, 60), kw.pop("waiting", ["a", "b"]), **{**base, **kw}
    )


def test_r9_1_a_complete_group_is_submitted() -> None:
    assert step() == gang.SubmitStep("submit")


def test_r9_1_a_member_beyond_a_group_already_placed_goes_alone() -> None:
    assert step(placed=True, waiting=["c"]) == gang.SubmitStep("alone")


def test_r9_1_a_group_short_of_members_waits_saying_so() -> None:
    got = step(waiting=["a"])
    assert (got.kind, got.after) == ("wait", 5.0)
    assert "needs 2 members" in got.message


def test_r9_1_a_group_timed_out_waits_out_its_timeout_before_a_new_job() -> None:
    assert step(retry_in=42.0) == gang.SubmitStep("wait", 42.0)


def test_r8_2_a_group_whose_submission_got_no_answer_waits_for_a_listing_that_could_show_it() -> None:
    assert step(unanswered=True) == gang.SubmitStep("wait", 1.0)
