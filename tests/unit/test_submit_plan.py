"""The submission planner, called directly: from what was read about a Pod without a job,
its next step; and from Slurm's answer, what follows. One row per case; its id says what
it checks, and what bug it catches is in the row's comment."""

from __future__ import annotations

from typing import Any

import pytest

from sunk.kube import events as ev
from sunk.runtime.actions import Event
from sunk.scheduler import policy
from sunk.scheduler.decide.actions import AdoptJob, Attempt, Plan, RecordJob, SetCondition, SubmitPod
from sunk.scheduler.decide.packing import Packing
from sunk.scheduler.decide.submit_plan import (
    NO_NODE_RECHECK_S,
    ORPHANED,
    NewJobFacts,
    SubmitInputs,
    SubmitRules,
    answered,
    for_new_job,
)
from sunk.scheduler.translate import Settings, translate
from sunk.slurm.models import SlurmNode
from tests.fakes.scheduler_world import PREFIX, pod

SETTINGS = Settings(PREFIX, 30, "sunk")
OPEN = policy.parse(policy.PERMISSIVE_YAML)
NODES = frozenset({"sn-1", "sn-2"})
RULES = SubmitRules(PREFIX, lambda _request: [], refuse_static_cpu=False, pack=False)
PACK = SubmitRules(PREFIX, lambda _request: [], refuse_static_cpu=False, pack=True)


def facts(
    the_pod: dict[str, Any] | None = None,
    *,
    adoptable: int | None = None,
    unanswered: bool = False,
    rules: policy.Policy = OPEN,
    excluded: dict[str, str] | None = None,
    avoid: tuple[str, ...] = (),
    usage: tuple[SlurmNode, ...] = (),
) -> NewJobFacts:
    the_pod = the_pod or pod()
    inputs = SubmitInputs(translate(the_pod, SETTINGS), rules, excluded or {}, NODES, lambda: "sn-1", usage)
    return NewJobFacts(the_pod, avoid, adoptable, unanswered, inputs)


def kinds(result: Plan[Any]) -> list[str]:
    return [type(action).__name__ for action in result.actions]


def node(name: str, *, alloc_cpus: int) -> SlurmNode:
    return SlurmNode(
        name=name,
        state="mixed" if alloc_cpus else "idle",
        flags=(),
        reason="",
        cpus=8,
        alloc_cpus=alloc_cpus,
        memory_mib=32768,
        alloc_memory_mib=0,
        partitions=("batch",),
    )


NEW_JOB = [
    # Catches a second job for one Pod after a crash between the submission and its record.
    pytest.param(facts(adoptable=41), ["AdoptJob", "Event"], None, id="r8_2_a_job_slurm_holds_is_adopted"),
    # Catches a second submission while slurmrestd may still act on one that got no answer.
    pytest.param(facts(unanswered=True), [], 1, id="r8_2_after_no_answer_the_pod_waits_for_a_listing"),
    # Catches an invalid Pod submitted anyway, or refused without its metric and condition.
    pytest.param(
        facts(pod(cpu="lots")),
        ["Attempt", "Event", "SetCondition"],
        None,
        id="r2_4_an_invalid_pod_is_refused_for_good",
    ),
    # Catches the trust policy skipped: the closed policy grants nothing.
    pytest.param(
        facts(rules=policy.CLOSED),
        ["Attempt", "Event", "SetCondition"],
        None,
        id="r12_1_a_pod_the_policy_forbids_is_refused_for_good",
    ),
    # Catches a job submitted although every node is ruled out, or a Pod never looked at again.
    pytest.param(
        facts(excluded={"sn-1": "tainted", "sn-2": "cordoned"}),
        ["SetCondition", "Event"],
        NO_NODE_RECHECK_S,
        id="r4_3_no_node_can_take_it_says_why_and_looks_again",
    ),
    pytest.param(facts(), ["SubmitPod"], None, id="r2_1_a_valid_pod_is_submitted"),
]


@pytest.mark.parametrize(("given", "expected", "after"), NEW_JOB)
def test_a_pod_without_a_job(given: NewJobFacts, expected: list[str], after: float | None) -> None:
    result = for_new_job(given, RULES)
    assert kinds(result) == expected
    assert result.after == after


def test_r8_2_the_adopted_job_is_named_with_the_nodes_the_pod_avoids() -> None:
    """Catches an adopted job recorded without the Pod's avoided nodes (it would lose them)."""
    result = for_new_job(facts(adoptable=41, avoid=("sn-2",)), RULES)
    assert result.actions[0] == AdoptJob(41, ("sn-2",))


def test_r2_4_a_refusal_counts_as_refused_and_says_every_problem() -> None:
    result = for_new_job(facts(rules=policy.CLOSED), RULES)
    attempt, event, condition = result.actions
    assert attempt == Attempt("refused")
    assert isinstance(event, Event) and event.warning and event.reason == ev.FAILED_SCHEDULING
    assert isinstance(condition, SetCondition) and condition.reason == ev.FORBIDDEN
    assert condition.message == event.note


def test_r4_3_a_pod_told_already_why_no_node_fits_is_not_told_again() -> None:
    """Catches an Event and a condition write on every pass of a Pod that waits for a node."""
    first = for_new_job(facts(excluded={"sn-1": "tainted", "sn-2": "cordoned"}), RULES)
    condition = first.actions[0]
    assert isinstance(condition, SetCondition)
    waiting = pod()
    waiting["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": condition.reason, "message": condition.message}
    ]
    again = for_new_job(facts(waiting, excluded={"sn-1": "tainted", "sn-2": "cordoned"}), RULES)
    assert again == Plan(after=NO_NODE_RECHECK_S)


def test_r4_3_the_job_leaves_out_what_the_pod_avoids_and_its_constraints_rule_out() -> None:
    """Catches a job Slurm may start on a node the Pod can never run on."""
    result = for_new_job(facts(excluded={"sn-1": "tainted"}, avoid=("sn-9",)), RULES)
    (submit,) = result.actions
    assert isinstance(submit, SubmitPod)
    assert set(submit.job.excluded_nodes) == {"sn-1", "sn-9"}
    assert submit.avoid == ("sn-9",)


def test_r9_2_pack_leaves_idle_nodes_out_when_a_partly_used_one_has_room() -> None:
    """Catches --placement=pack ignored (the idle node not left out)."""
    usage = (node("sn-1", alloc_cpus=2), node("sn-2", alloc_cpus=0))
    (submit,) = for_new_job(facts(usage=usage), PACK).actions
    assert isinstance(submit, SubmitPod)
    assert submit.packing == Packing(left_out=("sn-2",), towards=("sn-1",))
    assert submit.job.packed_away == ("sn-2",)


class Answer:
    def __init__(self, job_id: int, warning: str | None = None) -> None:
        self.job_id = job_id
        self.warning = warning


def submitted() -> SubmitPod:
    (submit,) = for_new_job(facts(avoid=("sn-9",)), RULES).actions
    assert isinstance(submit, SubmitPod)
    return submit


def test_r2_1_a_job_id_is_recorded_on_the_pod_and_cancelled_should_the_pod_be_gone() -> None:
    """Catches a submitted job not recorded (a second one next pass) or left without its Pod."""
    the_pod = pod()
    then = answered(the_pod, submitted(), Answer(50), pack_on=False)
    assert then == (RecordJob(the_pod, 50, ("sn-9",), orphan_why=ORPHANED), Attempt("submitted"))


def test_r2_1_a_slurm_warning_is_told_and_the_pod_not_refused() -> None:
    then = answered(pod(), submitted(), Answer(50, "no node in partition now"), pack_on=False)
    assert [type(a).__name__ for a in then] == ["RecordJob", "Attempt", "Event"]
    assert isinstance(then[2], Event) and then[2].reason == ev.SLURM_WARNING


def test_r2_4_a_submission_slurm_refuses_refuses_the_pod_for_good() -> None:
    """Catches a Pod submitted again and again that Slurm will never take."""
    then = answered(pod(), submitted(), "invalid partition", pack_on=False)
    assert then[0] == Attempt("rejected_by_slurm")
    assert isinstance(then[2], SetCondition) and then[2].reason == ev.REJECTED_BY_SLURM
