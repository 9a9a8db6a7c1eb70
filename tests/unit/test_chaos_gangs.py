"""The fault harness's PodGroup rules (tests/faults/gangs.py, rules 7 to 10): each test
names the scheduler bug the rule must report, and the legitimate state it must let pass."""

from __future__ import annotations

import threading
from collections import Counter
from types import SimpleNamespace
from typing import Any

from tests.faults.chaos import VIOLATION_KINDS, PodTrack
from tests.faults.gangs import (
    GANG_VIOLATION_KINDS,
    Gang,
    Gangs,
    MemberFate,
    MemberNow,
    Readoption,
    leader_of,
    not_together_problem,
    readoption_of,
    readoption_problems,
    split_problem,
    two_jobs_problem,
)


def job(job_id: int, leader: int = 0, state: str = "RUNNING") -> dict[str, Any]:
    return {"job_id": job_id, "het_job_id": leader, "job_state": state}


def fate(
    name: str,
    *,
    bound_at: float | None = 10.0,
    went_at: float | None = None,
    by_scheduler: bool = False,
    harness_at: float | None = None,
    readoptions: tuple[Readoption, ...] = (),
    leaders: frozenset[int] = frozenset(),
) -> MemberFate:
    return MemberFate(name, bound_at, went_at, by_scheduler, harness_at, readoptions, leaders)


def test_the_gang_kinds_are_in_the_report_table_after_the_six_single_pod_rules() -> None:
    kinds = list(VIOLATION_KINDS)
    assert (
        kinds[:6]
        == [
            "two-active-jobs",
            "job-without-pod",
            "deleted-job-alive",
            "deleted-no-event",
            "misplaced",
            "drained-no-event",
            "scheduler-exited",
        ][:6]
    )
    assert kinds[-4:] == list(GANG_VIOLATION_KINDS)
    assert all(len(text) <= 60 for text in VIOLATION_KINDS.values())  # the table's column


def test_a_plain_job_is_its_own_leader_and_a_component_names_its_group_job() -> None:
    assert leader_of(job(7)) == 7
    assert leader_of(job(8, leader=7)) == 7
    assert leader_of({"job_id": 9, "het_job_id": None}) == 9


# -- rule 7 ------------------------------------------------------------------------------------
def test_r7_a_group_bound_in_part_is_reported() -> None:
    # Bug: binding members one by one and stopping half-way (a scheduler killed between
    # two bindings, never finishing the group on restart).
    problem = split_problem(
        "ns/g1", [MemberNow("g1-0", "node-001", job(40, 40)), MemberNow("g1-1", None, job(41, 40, "RUNNING"))]
    )
    assert problem is not None and "1 of 2 live members bound" in problem and "g1-1 unbound" in problem


def test_r7_members_bound_on_two_different_group_jobs_are_reported() -> None:
    # Bug: the group submitted twice (an answer lost to a fault) and each half bound.
    problem = split_problem(
        "ns/g1", [MemberNow("g1-0", "node-001", job(40, 40)), MemberNow("g1-1", "node-002", job(51, 50))]
    )
    assert problem is not None and "2 different jobs" in problem


def test_r7_a_bound_member_on_a_job_of_its_own_is_reported() -> None:
    # Bug: a member placed "alone" (as one beyond minMember) though its group was whole.
    problem = split_problem(
        "ns/g1", [MemberNow("g1-0", "node-001", job(40, 40)), MemberNow("g1-1", "node-002", job(60))]
    )
    assert problem is not None and "no component of a group job" in problem


def test_r7_a_group_bound_whole_on_one_job_or_waiting_whole_passes() -> None:
    whole = [MemberNow("g1-0", "node-001", job(40, 40)), MemberNow("g1-1", "node-002", job(41, 40))]
    waiting = [MemberNow("g1-0", None, job(40, 40, "PENDING")), MemberNow("g1-1", None, None)]
    assert split_problem("ns/g1", whole) is None
    assert split_problem("ns/g1", waiting) is None
    assert split_problem("ns/g1", []) is None


# -- rule 8 ------------------------------------------------------------------------------------
def test_r8_two_active_jobs_for_one_group_are_reported() -> None:
    # Bug: a resubmission after a lost answer while the first job was still queued.
    problem = two_jobs_problem(
        "ns/g1", [job(40, 40, "PENDING"), job(41, 40, "PENDING"), job(50, 50, "PENDING")]
    )
    assert problem is not None and "2 active jobs [40, 50]" in problem


def test_r8_one_group_job_with_a_component_per_member_passes() -> None:
    assert two_jobs_problem("ns/g1", [job(40, 40), job(41, 40), job(42, 40)]) is None
    assert two_jobs_problem("ns/g1", []) is None


# -- rule 9 ------------------------------------------------------------------------------------
def test_r9_a_member_left_running_after_the_scheduler_deleted_its_sibling_is_reported() -> None:
    # Bug: the group's job ended, one member's pass deleted it, the other's never came.
    problem = not_together_problem(
        "ns/g1", [fate("g1-0", went_at=50.0, by_scheduler=True), fate("g1-1"), fate("g1-2", went_at=51.0)]
    )
    assert problem is not None and "deleted g1-0" in problem and "g1-1 still live" in problem


def test_r9_a_group_gone_whole_or_still_whole_passes() -> None:
    gone = [fate("g1-0", went_at=50.0, by_scheduler=True), fate("g1-1", went_at=50.5, by_scheduler=True)]
    assert not_together_problem("ns/g1", gone) is None
    assert not_together_problem("ns/g1", [fate("g1-0"), fate("g1-1")]) is None
    # The harness deleted one member (its group's deletion cut short): not the scheduler's doing.
    assert not_together_problem("ns/g1", [fate("g1-0", went_at=5.0, harness_at=4.0), fate("g1-1")]) is None


# -- rule 10 -----------------------------------------------------------------------------------
def test_r10_a_group_re_adopted_in_part_is_reported() -> None:
    # Bug: one member re-adopted into the group's new job while its sibling, judged on the
    # same loss, was deleted (or kept naming the lost component).
    members = [
        fate("g1-0", readoptions=(Readoption(100.0, 70),), leaders=frozenset({40, 70})),
        fate("g1-1", went_at=95.0, by_scheduler=True, leaders=frozenset({40})),
    ]
    [problem] = readoption_problems("ns/g1", members)
    assert "g1-0 re-adopted into job 70" in problem and "not g1-1 (went at 95.0)" in problem


def test_r10_a_member_re_adopted_alone_is_reported() -> None:
    # Bug: a member's lost component taken back as a single Pod's job, splitting the group.
    members = [fate("g1-0", readoptions=(Readoption(100.0, None),)), fate("g1-1")]
    [problem] = readoption_problems("ns/g1", members)
    assert "g1-0 was re-adopted alone" in problem


def test_r10_a_whole_re_adoption_passes_even_when_one_members_event_was_lost() -> None:
    # The second member's Event was never written (scheduler killed), but it names a
    # component of the new job: the group was taken back whole.
    members = [
        fate("g1-0", readoptions=(Readoption(100.0, 70),), leaders=frozenset({40, 70})),
        fate("g1-1", leaders=frozenset({40, 70})),
    ]
    assert readoption_problems("ns/g1", members) == []


def test_r10_members_gone_long_before_or_touched_by_the_harness_are_not_judged() -> None:
    members = [
        fate("g1-0", readoptions=(Readoption(100.0, 70),), leaders=frozenset({70})),
        fate("g1-1", went_at=20.0, by_scheduler=True),  # an earlier episode, long before
        fate("g1-2", harness_at=99.5),  # the harness deleted it just before
        fate("g1-3", bound_at=None),  # never bound
    ]
    assert readoption_problems("ns/g1", members) == []


def test_the_readopted_event_says_which_group_job_took_the_member_back() -> None:
    group_note = (
        "Slurm lost job 40 (slurmctld restarted without it) while this Pod ran; component 71 of "
        "its PodGroup ns/g1's new job 70 holds its resources on sn-2 again"
    )
    single_note = "Slurm lost job 40 (slurmctld restarted without it) while this Pod ran; job 71 holds its"
    assert readoption_of({"note": group_note}, 5.0) == Readoption(5.0, 70)
    assert readoption_of({"note": single_note}, 5.0) == Readoption(5.0, None)


# -- the population ----------------------------------------------------------------------------
class FakeKube:
    def __init__(self) -> None:
        self.deleted: list[str] = []

    def delete(self, path: str) -> None:
        self.deleted.append(path.rsplit("/", 1)[-1])


class FakeRun:
    """What Gangs uses of chaos.ChaosRun."""

    def __init__(self, tracks: list[PodTrack]) -> None:
        self.lock = threading.Lock()
        self.tracks = {t.uid: t for t in tracks}
        self.kube = FakeKube()
        self.namespace = "ns"
        self.counters: Counter[str] = Counter()
        self.actions: list[str] = []
        self.report = SimpleNamespace(rel=lambda at: f"+{at:.1f}s")

    def pod_path(self, name: str = "") -> str:
        return f"/api/v1/namespaces/ns/pods/{name}"

    def count(self, what: str, n: int = 1) -> None:
        self.counters[what] += n


def test_deleting_a_group_the_scheduler_already_ended_credits_the_harness_with_nothing() -> None:
    # Bug (seen in a run, seed 777): a group whose job the harness scancelled was deleted
    # 37 s later, after the scheduler had deleted its members; the harness then marked
    # those members as deleted by itself, and rules 3 and 9 never judged them.
    gone = PodTrack("u0", "g0001-0", 1.0, 2.0, gone_at=3.0, group="g0001")
    here = PodTrack("u1", "g0001-1", 1.0, 2.0, group="g0001")
    run = FakeRun([gone, here])
    gangs = Gangs(run, seed=1, transient=(OSError,))
    gangs.gangs["g0001"] = Gang("g0001", ["g0001-0", "g0001-1"], made=True, created={"g0001-0", "g0001-1"})
    gangs.delete(gangs.gangs["g0001"])
    assert gone.deleted_by_harness is None
    assert here.deleted_by_harness is not None
    assert run.kube.deleted == ["g0001-0", "g0001-1", "g0001"]


def test_a_group_whose_members_are_all_gone_is_never_chosen_for_deletion_or_scancel() -> None:
    run = FakeRun([PodTrack("u0", "g0001-0", 1.0, 2.0, gone_at=3.0, group="g0001")])
    gangs = Gangs(run, seed=1, transient=(OSError,))
    gangs.gangs["g0001"] = Gang("g0001", ["g0001-0"], made=True, created={"g0001-0"})
    for _ in range(50):
        gangs.act(room=0, create_chance=0.0, delete_chance=1.0, scancel_chance=1.0)
    assert run.kube.deleted == [] and not gangs.gangs["g0001"].deleting
