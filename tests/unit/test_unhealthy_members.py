"""Issue #51 points 2 and 4, the operator's side: a member a failing health check drained is
seen by Kubernetes (an Event on its Pod once per drain, the NodeSet's `unhealthy` count,
each member's `unhealthySince`, the Healthy condition), and one the checks keep drained is
replaced through the job-safe path, only while it runs no job and never more than
maxUnavailable members of a NodeSet away at once."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import pytest

from sunk.operator.config import OperatorConfig, from_args
from sunk.operator.nodeset import health_checks as hc
from sunk.operator.nodeset import unhealthy as u
from sunk.runtime.actions import Event
from sunk.runtime.controller import DONE
from sunk.slurm.models import SlurmNode
from tests.fakes.operator_world import CONFIG, NOW_S, OperatorWorld
from tests.unit.test_health_check_mounts import _args
from tests.unit.test_nodeset_plan import listed as listing_of

GPUS = "sunk-hc: gpus: sees 7 of 8 GPUs (/dev/nvidiaN devices)"
MOUNTS = "sunk-hc: mounts: /shared is not writable (Read-only file system)"
CHECKS = replace(CONFIG, health_checks_configmap="r1-health-checks", health_replace_after_s=1800)
FIRST, SECOND, THIRD = "a-001-011", "a-002-012", "a-003-013"


def at(seconds_after_now: int) -> str:
    return dt.datetime.fromtimestamp(NOW_S + seconds_after_now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def world(members: int = 1, config: OperatorConfig = CHECKS) -> OperatorWorld:
    w = OperatorWorld(config=config)
    for i in range(1, members + 1):
        w.add_node(f"node-{i}", f"10.64.{i}.1{i}")
    w.add_nodeset("a", replicas=members)
    await w.settle("a")
    assert sorted(w.members("a")) == [FIRST, SECOND, THIRD][:members]
    return w


def check_drains(w: OperatorWorld, name: str, reason: str, seconds_after_now: int = 0) -> None:
    """What the runner does (scontrol update state=drain): Slurm stamps the reason's time."""
    record = w.slurm.record(name)
    flags = record.flags if "DRAIN" in record.flags else (*record.flags, "DRAIN")
    w.slurm.update_node(name, flags=flags, reason=reason, reason_changed_at=NOW_S + seconds_after_now)


def check_lifts(w: OperatorWorld, name: str) -> None:
    record = w.slurm.record(name)
    w.slurm.update_node(name, flags=tuple(f for f in record.flags if f != "DRAIN"), reason="")


def pod_events(w: OperatorWorld, reason: str) -> list[tuple[str, str]]:
    return [(e["regarding"]["kind"], e["regarding"]["name"]) for e in w.kube.events if e["reason"] == reason]


def entry(w: OperatorWorld, name: str) -> dict[str, object]:
    return next(e for e in w.status("a")["members"] if e["slurmNode"] == name)


def deleted(w: OperatorWorld) -> list[str]:
    return [c[1].split("/", 1)[1] for c in w.kube.calls if c[0] == "delete_pod"]


# -- seen by Kubernetes ------------------------------------------------------------------------


async def test_issue51_a_check_drain_is_told_on_the_member_pod_once_and_counted() -> None:
    """Catches: a drain that stays inside Slurm (no Event, no count, no condition), an Event
    on the NodeSet where `kubectl describe pod` does not show it, or one per pass."""
    w = await world()
    check_drains(w, FIRST, GPUS)
    await w.reconcile("a")
    await w.reconcile("a")
    assert pod_events(w, u.FAILED) == [("Pod", FIRST)]
    [note] = w.kube.notes(u.FAILED)
    assert FIRST in note and GPUS in note
    assert w.status("a")["unhealthy"] == 1
    assert entry(w, FIRST)["reason"] == GPUS and entry(w, FIRST)[u.SINCE] == at(0)
    healthy = w.condition("a", u.HEALTHY)
    assert healthy["status"] == "False" and FIRST in healthy["message"] and GPUS in healthy["message"]


async def test_issue51_a_lifted_drain_says_the_member_returned() -> None:
    """Catches: a member the checks returned still counted, or returning silently."""
    w = await world()
    check_drains(w, FIRST, GPUS)
    await w.reconcile("a")
    check_lifts(w, FIRST)
    await w.reconcile("a")
    await w.reconcile("a")
    assert pod_events(w, u.PASSED) == [("Pod", FIRST)]
    assert w.status("a")["unhealthy"] == 0 and u.SINCE not in entry(w, FIRST)
    assert w.condition("a", u.HEALTHY)["status"] == "True"


async def test_issue51_another_check_taking_over_is_told_and_keeps_the_drain_start() -> None:
    """Catches: a second failing check going unsaid, or its new reason time (Slurm restamps
    it) restarting the clock that replacement counts from."""
    w = await world(config=replace(CHECKS, health_replace_after_s=0))
    check_drains(w, FIRST, GPUS)
    await w.reconcile("a")
    w.now = at(600)
    check_drains(w, FIRST, MOUNTS, 600)
    await w.reconcile("a")
    assert pod_events(w, u.FAILED) == [("Pod", FIRST), ("Pod", FIRST)]
    assert entry(w, FIRST)[u.SINCE] == at(0)


def test_issue51_a_drain_the_status_already_shows_is_not_told_again() -> None:
    """Catches: an Event written every pass, kept from piling up only by its name, which
    the API server forgets when the Event expires (an hour): "new" is read from the status."""
    record = SlurmNode(FIRST, "idle", ("DRAIN",), GPUS, reason_changed_at=NOW_S)
    pod = {"metadata": {"name": FIRST, "uid": "u1"}, "spec": {"nodeName": "node-1"}}
    told = {"slurmNode": FIRST, "reason": GPUS, u.SINCE: at(0)}
    obj = {"metadata": {"name": "a"}, "status": {"members": [told]}}
    assert u.review(obj, [pod], [], 0, listing_of((record,)), CHECKS, at(60)).actions == ()
    fresh = {"metadata": {"name": "a"}, "status": {}}
    [told_now] = u.review(fresh, [pod], [], 0, listing_of((record,)), CHECKS, at(60)).actions
    assert isinstance(told_now, Event) and told_now.reason == u.FAILED


@pytest.mark.parametrize(
    ("reason", "counted"),
    [
        (GPUS, True),
        (hc.verify_reason("a"), False),  # the operator's hand-over, waiting for a clean run
        ("bad DIMM, ticket 42", False),  # an administrator's
        ("sunk: NodeSet a scales in", False),  # the operator's own removal
        ("Not responding", False),  # Slurm's
    ],
)
def test_issue51_only_a_failing_checks_drain_is_unhealthy(reason: str, counted: bool) -> None:
    """Catches: the verify hand-over (or anyone else's drain) reported as a failing check."""
    assert u.failing(SlurmNode(FIRST, "idle", ("DRAIN",), reason)) is counted


async def test_issue51_slurm_unreachable_keeps_what_was_last_seen() -> None:
    """Catches: Healthy turning True, and the count dropping, because Slurm cannot be asked."""
    w = await world()
    check_drains(w, FIRST, GPUS)
    await w.reconcile("a")
    w.slurm.fail("nodes")
    await w.reconcile("a")
    assert w.condition("a", "SlurmReachable")["status"] == "False"
    assert w.status("a")["unhealthy"] == 1 and entry(w, FIRST)[u.SINCE] == at(0)
    assert w.condition("a", u.HEALTHY)["status"] == "False"


def test_issue51_a_drain_an_earlier_pod_left_dates_from_this_pod() -> None:
    """Catches: a new member replaced at once because its record, left by the Pod it
    replaced, carries the old drain's time."""
    record = SlurmNode(FIRST, "idle", ("DRAIN",), GPUS, reason_changed_at=NOW_S - 7200)
    pod = {
        "metadata": {"name": FIRST, "uid": "u1", "creationTimestamp": at(-60)},
        "spec": {"nodeName": "node-1"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    obj = {"metadata": {"name": "a"}, "status": {}}
    found = u.review(obj, [pod], [], 0, listing_of((record,)), CHECKS, at(0))
    assert found.since == {FIRST: at(-60)}
    assert found.leaving == () and found.due


# -- replaced when it keeps failing ------------------------------------------------------------


async def test_issue51_a_member_drained_past_the_delay_is_replaced_when_idle() -> None:
    """Catches: a member the checks keep drained left out of service for ever, or replaced
    before the delay (the checks had no chance to return it)."""
    w = await world()
    check_drains(w, FIRST, GPUS)
    w.now = at(1799)
    await w.reconcile("a")  # writes the status
    assert await w.reconcile("a") != DONE  # and looks again: the delay runs out with nothing changing
    assert deleted(w) == []
    w.now = at(1801)
    await w.reconcile("a")
    assert deleted(w) == [FIRST]
    assert pod_events(w, u.REPLACING) == [("NodeSet", "a")]
    [removal] = w.status("a")["removals"]
    assert removal["slurmNode"] == FIRST and "health checks have drained for over 30m" in removal["cause"]
    assert [
        c for c in w.slurm.calls if c[0] in ("drain", "resume", "cancel")
    ] == []  # the checks' reason stays
    await w.settle("a")
    assert list(w.members("a")) == [FIRST]  # a new Pod, and a new record without the drain
    assert w.slurm.record(FIRST).reason == "" and w.status("a")["unhealthy"] == 0


async def test_issue51_a_busy_member_is_replaced_only_after_its_jobs_end() -> None:
    """Catches: a replacement that kills or cuts short a job (the drain is the checks', so
    nothing may cancel for it), or one that never comes once the job ends."""
    w = await world()
    job = w.slurm.run_job(FIRST)
    check_drains(w, FIRST, GPUS)
    w.now = at(7200)
    await w.settle("a")
    assert deleted(w) == [] and w.slurm.raw_jobs[job]["job_state"] == ["RUNNING"]
    assert not [c for c in w.slurm.calls if c[0] == "cancel"]
    assert f"{FIRST} is replaced once its jobs end" in w.condition("a", u.HEALTHY)["message"]
    w.slurm.end_jobs(FIRST)
    await w.reconcile("a")
    assert deleted(w) == [FIRST]


async def test_issue51_a_check_failing_everywhere_replaces_one_member_at_a_time() -> None:
    """Catches: a bad check or a storage outage emptying the NodeSet: at most maxUnavailable
    members away at once, the next one only after the last replacement is ready."""
    w = await world(3)
    for name in (FIRST, SECOND, THIRD):
        check_drains(w, name, MOUNTS)
    w.now = at(3600)
    await w.reconcile("a")
    assert deleted(w) == [FIRST]
    await w.reconcile("a")  # the new member is made...
    await w.reconcile("a")  # ...and is not ready yet
    assert deleted(w) == [FIRST]
    assert "(maxUnavailable 1)" in w.condition("a", u.HEALTHY)["message"]
    w.kubelet()
    w.slurmd()
    await w.reconcile("a")
    assert deleted(w) == [FIRST, SECOND]


async def test_issue51_no_replacement_without_a_delay_or_without_room() -> None:
    """Catches: replacing although replacement is off (no delay given, or maxUnavailable 0)."""
    for config in (
        replace(CHECKS, health_replace_after_s=0),
        replace(CHECKS, health_replace_max_unavailable=0),
    ):
        w = await world(config=config)
        check_drains(w, FIRST, GPUS)
        w.now = at(86400)
        await w.reconcile("a")  # writes the status
        assert await w.reconcile("a") == DONE  # nothing to wait for
        assert deleted(w) == [] and w.status("a")["unhealthy"] == 1


async def test_issue51_a_drain_the_checks_lifted_since_the_last_listing_keeps_its_member() -> None:
    """Catches: deleting on the poller's older listing a member the checks have returned
    meanwhile, on which a job may have started: the pass lists Slurm again first."""
    w = await world()
    check_drains(w, FIRST, GPUS)
    await w.poll()  # the poller's listing: drained and idle
    check_lifts(w, FIRST)
    w.slurm.run_job(FIRST)
    w.now = at(3600)
    await w.controller.reconcile("slurm/a")
    assert w.refreshes == 1 and deleted(w) == []


# -- the operator's flags ----------------------------------------------------------------------


def test_issue51_the_replacement_flags_are_read_and_checked() -> None:
    """Catches: the chart's `1800s` misread, replacement asked for without checks, or a
    budget that is not a number taken as some default."""
    cfg = from_args(
        _args(
            "--health-checks-configmap=r1-health-checks",
            "--health-replace-after=1800s",
            "--health-replace-max-unavailable=2",
        )
    )
    assert (cfg.health_replace_after_s, cfg.health_replace_max_unavailable) == (1800, 2)
    assert from_args(_args()).health_replace_after_s == 0
    with pytest.raises(ValueError, match="--health-checks-configmap"):
        from_args(_args("--health-replace-after=30m"))
    with pytest.raises(ValueError, match="--health-replace-max-unavailable"):
        from_args(_args("--health-checks-configmap=r1", "--health-replace-max-unavailable=one"))


def test_issue51_the_plan_says_what_it_replaces_in_typed_actions() -> None:
    """Catches: a replacement written other than as the removal path's DeletePod, with the
    member's Pod as the only thing it touches."""
    record = SlurmNode(FIRST, "idle", ("DRAIN",), GPUS, reason_changed_at=NOW_S)
    pod = {
        "metadata": {"name": FIRST, "uid": "u1"},
        "spec": {"nodeName": "node-1"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    obj = {"metadata": {"name": "a"}, "status": {}}
    found = u.review(obj, [pod], [], 0, listing_of((record,)), CHECKS, at(3600))
    [member] = found.leaving
    assert (member.slurm_name, member.node) == (FIRST, "node-1")
    assert [type(x) for x in found.actions] == [Event, Event]  # HealthCheckFailed, Replacing


# -- checks that cannot run --------------------------------------------------------------------


async def test_issue51_a_check_script_that_cannot_run_is_named_on_the_nodeset_and_drains_nothing() -> None:
    """Catches: a missing or non-executable site script told only in slurmd's log (the
    runner's comment on the node unread), or taken for a failing member."""
    w = await world(members=2)
    problem = "check script 10-ib (ConfigMap site-checks) is not an executable file; it was not run"
    w.slurm.update_node(SECOND, comment=hc.CONFIG_PREFIX + problem)
    await w.reconcile("a")
    configured = w.condition("a", hc.CONFIGURED)
    assert configured["status"] == "False" and configured["reason"] == "ChecksMisconfigured"
    assert configured["message"] == f"member {SECOND}: {problem}"
    assert w.status("a")["unhealthy"] == 0 and w.condition("a", u.HEALTHY)["status"] == "True"
    w.slurm.update_node(SECOND, comment="")  # the runner clears it once fixed
    await w.reconcile("a")
    assert w.condition("a", hc.CONFIGURED)["status"] == "True"


async def test_issue51_without_checks_the_nodeset_has_no_configured_condition() -> None:
    """Catches: a condition about checks on a NodeSet whose members run none."""
    w = await world(config=CONFIG)
    assert hc.CONFIGURED not in [c["type"] for c in w.status("a")["conditions"]]
