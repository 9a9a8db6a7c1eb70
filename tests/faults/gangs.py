"""PodGroups (gangs) in the fault harness's population, and the rules a gang keeps.

A PodGroup's members share one heterogeneous Slurm job, one component per member, and are
placed whole or not at all (docs/lifecycle.md, "Gangs"). The single-Pod rules of
chaos.py already hold per member (each component is named after its member's UID); what
they cannot see is the group: members bound in part, two jobs for one group, a member
outliving the job that ended its siblings, a re-adoption that took back only some members.
The rule functions here are pure (data in, messages out) so that tests/unit can pin each
one to the bug it catches; `Gangs` is the population side, driven by chaos.ChaosRun.
"""

from __future__ import annotations

import datetime as dt
import random
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sunk.slurm.models import ACTIVE_STATES
from sunk_dev.kubeapi import KubeError
from sunk_dev.slurmrun import run_cli
from tests.support import make_pod

Json = dict[str, Any]

# The coscheduling plugin's API, as users write it (sunk.scheduler.translate.gang reads it).
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
GROUP_API = "scheduling.x-k8s.io/v1alpha1"
# Long enough that a group never times out in a run (the cluster has room for every group);
# a timed-out group waits without a job, which the settling would read as not at rest.
GROUP_TIMEOUT_S = 600
# A member deleted by the scheduler shortly before a re-adoption of its group was part of
# the same loss: the group should have been taken back whole or not at all.
READOPT_WINDOW_S = 30.0

GANG_VIOLATION_KINDS = {
    "group-split": "7  a PodGroup bound in part, or on different jobs",
    "group-two-jobs": "8  a PodGroup with more than one active job",
    "group-not-together": "9  a PodGroup member outliving its group's end",
    "group-readopted-in-part": "10 a PodGroup re-adopted in part",
}


def leader_of(job: Json) -> int:
    """The heterogeneous job a component belongs to (its own ID for a plain job)."""
    return int(job.get("het_job_id") or 0) or int(job["job_id"])


# -- the rules (pure) ----------------------------------------------------------------------
@dataclass(frozen=True)
class MemberNow:
    """A live member (existing, not terminating) after settling."""

    name: str
    node: str | None  # the Node it is bound to
    job: Json | None  # the active job it names (its own component), None when it names none


def split_problem(group: str, members: list[MemberNow]) -> str | None:
    """Rule 7: the live members of a group are bound all or none, and every bound one names
    a component of one and the same heterogeneous job. Catches a group bound member by
    member on separate jobs, or some members bound while the others wait or have no job."""
    bound = [m for m in members if m.node]
    if not bound:
        return None
    words = "; ".join(
        f"{m.name} {'on ' + m.node if m.node else 'unbound'}, "
        + (f"job {m.job['job_id']} of {leader_of(m.job)}" if m.job else "no active job")
        for m in sorted(members, key=lambda m: m.name)
    )
    if len(bound) != len(members):
        return f"PodGroup {group}: {len(bound)} of {len(members)} live members bound ({words})"
    if any(m.job is None or not m.job.get("het_job_id") for m in members):
        return f"PodGroup {group}: a bound member names no component of a group job ({words})"
    leaders = {leader_of(m.job) for m in members if m.job is not None}
    if len(leaders) > 1:
        return f"PodGroup {group}: bound members on {len(leaders)} different jobs ({words})"
    return None


def two_jobs_problem(group: str, active: list[Json]) -> str | None:
    """Rule 8: at most one active Slurm job per group: every active job of its members'
    UIDs is a component of one heterogeneous job. Catches a group submitted twice (a
    submission whose answer was lost by a fault, then sent again) or a member given a job
    of its own."""
    leaders = sorted({leader_of(j) for j in active})
    if len(leaders) <= 1:
        return None
    words = ", ".join(f"job {j['job_id']} of {leader_of(j)} {j['job_state']}" for j in active)
    return f"PodGroup {group} has {len(leaders)} active jobs {leaders} after settling: {words}"


@dataclass(frozen=True)
class Readoption:
    """A `PlaceholderReadopted` Event on a member: when, and into which group job (None:
    the member was re-adopted alone, as a single Pod)."""

    at: float
    leader: int | None


@dataclass(frozen=True)
class MemberFate:
    """What became of one member over the run."""

    name: str
    bound_at: float | None
    went_at: float | None  # when it went, None if it is still here
    by_scheduler: bool  # it went and the harness had neither deleted it nor scancelled its job
    harness_at: float | None  # when the harness first deleted it or scancelled its job
    readoptions: tuple[Readoption, ...] = ()
    leaders: frozenset[int] = frozenset()  # the group jobs it named at some time


def not_together_problem(group: str, members: list[MemberFate]) -> str | None:
    """Rule 9: a group's members go together: when the scheduler deleted one (its job
    ended), no other member is still here after settling. Catches a member left running
    (holding a node in Kubernetes) after the heterogeneous job that placed it ended."""
    deleted = [m for m in members if m.by_scheduler]
    left = [m for m in members if m.went_at is None]
    if not deleted or not left:
        return None
    return (
        f"PodGroup {group}: the scheduler deleted {', '.join(sorted(m.name for m in deleted))}, "
        f"yet {', '.join(sorted(m.name for m in left))} still live after settling"
    )


def readoption_problems(
    group: str, members: list[MemberFate], rel: Callable[[float], str] = str
) -> list[str]:
    """Rule 10: a group is re-adopted whole or not at all. For each new group job a member
    was re-adopted into, every member bound before it and not gone more than
    READOPT_WINDOW_S earlier (nor deleted or scancelled by the harness by then) must have
    been re-adopted into it too, by its Event or by the component it named. A member
    re-adopted alone (a single Pod's new job) is a breach too."""
    out = [
        f"PodGroup {group}: member {m.name} was re-adopted alone (a job of its own) at {rel(r.at)}"
        for m in members
        for r in m.readoptions
        if r.leader is None
    ]
    first: dict[int, float] = {}
    for m in members:
        for r in m.readoptions:
            if r.leader is not None:
                first[r.leader] = min(first.get(r.leader, r.at), r.at)
    for leader, at in sorted(first.items()):
        judged = [
            m
            for m in members
            if m.bound_at is not None
            and m.bound_at <= at
            and (m.harness_at is None or m.harness_at > at + 1.0)
            and (m.went_at is None or m.went_at >= at - READOPT_WINDOW_S)
        ]
        taken = [m for m in judged if leader in m.leaders or any(r.leader == leader for r in m.readoptions)]
        missed = [m for m in judged if m not in taken]
        if missed:
            fates = ", ".join(
                f"{m.name} ({'went at ' + rel(m.went_at) if m.went_at is not None else 'still here'})"
                for m in sorted(missed, key=lambda m: m.name)
            )
            out.append(
                f"PodGroup {group}: {', '.join(sorted(m.name for m in taken))} re-adopted into job "
                f"{leader} at {rel(at)}, but not {fates}"
            )
    return out


def readoption_of(event: Json, at: float) -> Readoption:
    """Read a `PlaceholderReadopted` Event's note: a group's says "of its PodGroup … new
    job <leader>", a single Pod's "job <id> holds its resources"."""
    note = str(event.get("note") or "")
    found = re.search(r"PodGroup \S+'s new job (\d+)", note)
    return Readoption(at, int(found[1]) if found else None)


# -- the population --------------------------------------------------------------------------
@dataclass
class Gang:
    """One PodGroup the harness made: its object and its members, by Pod name."""

    name: str
    members: list[str]
    made: bool = False  # the PodGroup object exists
    created: set[str] = field(default_factory=set)  # members the API server took
    deleting: bool = False
    deleted: set[str] = field(default_factory=set)  # members whose DELETE went through

    @property
    def complete(self) -> bool:
        return self.made and len(self.created) == len(self.members)


class Gangs:
    """Makes, deletes and scancels PodGroups for a chaos run. Every request a fault may cut
    short is tried again on the next tick (creating the missing members, deleting those
    not yet deleted): a group left short of minMember would wait for ever without a job,
    and one deleted in part would lose its other members to the scheduler, not the harness.
    `ops` is the run (chaos.ChaosRun): its API client, lock, tracks and tally."""

    def __init__(self, ops: Any, seed: int, transient: tuple[type[BaseException], ...]) -> None:
        self.ops = ops
        self.transient = transient
        self.rng = random.Random(f"{seed}:groups")
        self.gangs: dict[str, Gang] = {}
        self.cpus: dict[str, str] = {}  # member → its CPU request (members differ: a heterogeneous job)
        self.leaders: dict[int, int] = {}  # component job ID → group job (from the listings)
        # Member name → when the harness first asked for its deletion: a member whose creation
        # answer a fault lost has no track yet, and must not be blamed on the scheduler when
        # a listing first shows it terminating.
        self.deleted_at: dict[str, float] = {}

    def group_path(self, name: str = "") -> str:
        base = f"/apis/{GROUP_API}/namespaces/{self.ops.namespace}/podgroups"
        return f"{base}/{name}" if name else base

    def members_of(self) -> dict[str, str]:
        """Member Pod name → its group."""
        return {m: g.name for g in self.gangs.values() for m in g.members}

    def observe_jobs(self, jobs: Iterable[Json]) -> None:
        for job in jobs:
            if job.get("het_job_id"):
                self.leaders[int(job["job_id"])] = leader_of(job)

    # -- acting, one tick at a time ------------------------------------------------------------
    def act(self, room: int, create_chance: float, delete_chance: float, scancel_chance: float) -> int:
        """Now and then a new group (when the population is `room` Pods short of its
        target), a group deleted whole, a running group's job scancelled. Returns how many
        Pods it made."""
        made = 0
        size = self.rng.choice((2, 2, 3))
        if room >= 1 and self.rng.random() < create_chance:  # a group may overshoot the target by 2
            self.start(size)
            made = size
        self.finish()
        # Only groups with a member still here: one the scheduler already ended is not
        # deleted again (that would credit the harness with the scheduler's deletions).
        live = [g for g in self.gangs.values() if g.complete and not g.deleting and self._here(g)]
        if live and self.rng.random() < delete_chance:
            self.delete(self.rng.choice(live))
        if live and self.rng.random() < scancel_chance:
            running = [g for g in live if self.running_leader(g) is not None]
            if running:
                self.scancel(self.rng.choice(running))
        return made

    def start(self, size: int) -> None:
        name = f"g{len(self.gangs) + 1:04d}"
        cpus = [self.rng.choice(["250m", "500m", "1"]) for _ in range(size)]
        gang = self.gangs[name] = Gang(name, [f"{name}-{i}" for i in range(size)])
        self.ops.count("groups created")
        self.cpus.update(zip(gang.members, cpus, strict=True))
        self.finish()

    def finish(self) -> None:
        """Carry on what a fault cut short: the PodGroup object and members not yet made,
        members of a deleted group not yet deleted."""
        for gang in self.gangs.values():
            if gang.deleting:
                for member in gang.members:
                    if member not in gang.deleted and self._delete(member):
                        gang.deleted.add(member)
                continue
            if not gang.made:
                body = {
                    "apiVersion": GROUP_API,
                    "kind": "PodGroup",
                    "metadata": {"name": gang.name},
                    "spec": {"minMember": len(gang.members), "scheduleTimeoutSeconds": GROUP_TIMEOUT_S},
                }
                gang.made = self._create(self.group_path(), body) is not None
                if not gang.made:
                    continue
            for member in gang.members:
                if member not in gang.created and self._create_member(gang, member):
                    gang.created.add(member)

    def _create(self, path: str, body: Json) -> Json | None:
        """The created object; {} when it was there already (an earlier try went through)."""
        try:
            created: Json = self.ops.kube.create(path, body)
            return created
        except KubeError as err:
            if err.status == 409:
                return {}
            self.ops.count("group creations failed")
        except self.transient:
            self.ops.count("group creations failed")
        return None

    def _create_member(self, gang: Gang, member: str) -> bool:
        pod = make_pod(member, self.ops.name, cpu=self.cpus.get(member, "500m"), memory="128Mi")
        pod["metadata"]["labels"] = {GROUP_LABEL: gang.name}
        created = self._create(self.ops.pod_path(), pod)
        if created is None:
            return False
        if created:  # else an earlier try went through: the listing tracks it
            self.ops.track_created(created["metadata"]["uid"], member, gang.name)
        self.ops.count("group members created")
        return True

    def delete(self, gang: Gang) -> None:
        """Delete every member (recorded before each request, as a single Pod's deletion
        is), then the PodGroup object."""
        gang.deleting = True
        self.ops.count("groups deleted by the harness")
        with self.ops.lock:
            self.ops.actions.append(f"{self.ops.report.rel(time.time())} delete PodGroup {gang.name}")
        for member in gang.members:
            if self._delete(member):
                gang.deleted.add(member)
        try:
            self.ops.kube.delete(self.group_path(gang.name))
        except self.transient:
            pass  # the namespace's deletion at the end takes it

    def _delete(self, member: str) -> bool:
        now = time.time()
        with self.ops.lock:
            self.deleted_at.setdefault(member, now)
            for track in self.ops.tracks.values():
                # A member already gone went by the scheduler's hand, not this request.
                if track.name == member and track.deleted_by_harness is None and not track.went:
                    track.deleted_by_harness = now
        try:
            self.ops.kube.delete(self.ops.pod_path(member))
        except self.transient:
            self.ops.count("group member deletions failed")
            return False
        self.ops.count("group members deleted by the harness")
        return True

    def running_leader(self, gang: Gang) -> int | None:
        """The group's job, when every member's component is RUNNING in the last listing."""
        uids = self._uids(gang)
        with self.ops.lock:
            mine = [j for j in (self.ops.jobs_now or {}).values() if j["name"].rsplit(":", 1)[-1] in uids]
        active = [j for j in mine if j["job_state"] in ACTIVE_STATES]
        leaders = {leader_of(j) for j in active}
        if (
            len(active) != len(gang.members)
            or len(leaders) != 1
            or any(j["job_state"] != "RUNNING" for j in active)
        ):
            return None
        leader = leaders.pop()
        return None if leader in self.ops.scancels else leader

    def _here(self, gang: Gang) -> bool:
        """Some member exists and is not going (as the last listing showed)."""
        with self.ops.lock:
            return any(
                t.name in gang.members and not t.went and t.deleted_by_harness is None
                for t in self.ops.tracks.values()
            )

    def _uids(self, gang: Gang) -> set[str]:
        with self.ops.lock:
            return {uid for uid, t in self.ops.tracks.items() if t.name in gang.members}

    def scancel(self, gang: Gang) -> None:
        """scancel the group's job (its leader: Slurm ends every component). Each member's
        component is recorded as scancelled by the harness, before the command."""
        leader = self.running_leader(gang)
        if leader is None:
            return
        uids, now = self._uids(gang), time.time()
        with self.ops.lock:
            for job in (self.ops.jobs_now or {}).values():
                if leader_of(job) == leader and job["name"].rsplit(":", 1)[-1] in uids:
                    self.ops.scancels[int(job["job_id"])] = (job["name"].rsplit(":", 1)[-1], now)
            self.ops.actions.append(
                f"{self.ops.report.rel(now)} scancel job {leader} of PodGroup {gang.name}"
            )
        try:
            run_cli(self.ops.layout, "scancel", str(leader), timeout=5)
        except self.transient:
            self.ops.count("group scancels failed")
            return
        self.ops.count("group jobs scancelled")

    # -- the rules, after settling --------------------------------------------------------------
    def check(self, events: list[Json], now: float) -> None:
        """Rules 7 to 10 on every group, and the groups' part of the tally."""
        ops = self.ops
        pods, jobs = ops.pods_now or {}, ops.jobs_now or {}
        with ops.lock:
            tracks = {uid: t for uid, t in ops.tracks.items() if t.group}
            scancelled: dict[str, float] = {}
            for uid, at in ops.scancels.values():
                scancelled[uid] = min(at, scancelled.get(uid, at))
        readopted: dict[str, list[Readoption]] = {}
        for event in events:
            uid = (event.get("regarding") or {}).get("uid") or ""
            if event.get("reason") == "PlaceholderReadopted" and uid in tracks:
                at = _timestamp(event.get("eventTime")) or now
                readopted.setdefault(uid, []).append(readoption_of(event, at))
        ops.count("group members bound", sum(1 for t in tracks.values() if t.bound_at is not None))
        ops.count("group members re-adopted", sum(len(r) for r in readopted.values()))
        for group in sorted({t.group for t in tracks.values() if t.group}):
            mine = {uid: t for uid, t in tracks.items() if t.group == group}
            names = tuple(t.name for t in mine.values())
            live = [
                MemberNow(
                    t.name, (pods[uid].get("spec") or {}).get("nodeName"), _named_job(pods[uid], uid, jobs)
                )
                for uid, t in mine.items()
                if uid in pods and not pods[uid]["metadata"].get("deletionTimestamp")
            ]
            if problem := split_problem(group, live):
                ops.violation("group-split", problem, at=now, needles=names, pod=names[0])
            active = [j for j in jobs.values() if j["job_state"] in ACTIVE_STATES and _uid(j) in mine]
            if problem := two_jobs_problem(group, active):
                needles = (*names, *(f"job {j['job_id']}" for j in active))
                ops.violation("group-two-jobs", problem, at=now, needles=needles, pod=names[0])
            fates = []
            for uid, t in mine.items():
                harness = [at for at in (t.deleted_by_harness, scancelled.get(uid)) if at is not None]
                fates.append(
                    MemberFate(
                        t.name,
                        t.bound_at,
                        (t.deleting_since or t.gone_at) if t.went else None,
                        t.went and t.deleted_by_harness is None,
                        min(harness) if harness else None,
                        tuple(readopted.get(uid, [])),
                        frozenset(self.leaders[j] for j in t.job_ids if j in self.leaders),
                    )
                )
            if problem := not_together_problem(group, fates):
                ops.violation("group-not-together", problem, at=now, needles=names, pod=names[0])
            for problem in readoption_problems(group, fates, ops.report.rel):
                ops.violation("group-readopted-in-part", problem, at=now, needles=names, pod=names[0])


def _uid(job: Json) -> str:
    return str(job.get("name", "")).rsplit(":", 1)[-1]


def _named_job(pod: Json, uid: str, jobs: dict[int, Json]) -> Json | None:
    """The active job a Pod names in its job-id annotation, if it is that Pod's."""
    raw = str(((pod["metadata"].get("annotations") or {}).get("sunk.coreweave.com/job-id")) or "")
    job = jobs.get(int(raw)) if raw.isdigit() else None
    return job if job is not None and _uid(job) == uid and job["job_state"] in ACTIVE_STATES else None


def _timestamp(value: Any) -> float | None:
    if not value:
        return None
    return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
