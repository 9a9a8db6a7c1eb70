"""Who wrote a Slurm node's reason, and the drain and down episodes found by comparing one
listing with the next (sunk.operator.metrics.episodes): pure, table-tested."""

from __future__ import annotations

import pytest

from sunk.operator.metrics.episodes import DOWN, DRAIN, Episode, advance, reason_owner
from sunk.operator.nodeset.removal import drain_reason
from sunk.slurm.models import SlurmNode


@pytest.mark.parametrize(
    ("reason", "owner"),
    [
        ("", "none"),
        ("   ", "none"),
        (drain_reason("gpu", "is scaled in"), "operator"),  # the operator's own drains
        ("sunk: Node n1 is cordoned in Kubernetes", "operator"),  # the scheduler's
        ("sunk: Pod a1 is being deleted", "operator"),  # a member's preStop
        ("sunk-hc: gpu-count: 7 of 8 GPUs", "health-check"),
        ("Not responding", "slurm"),
        ("Kill task failed", "slurm"),
        ("batch job complete failure", "slurm"),
        ("Prolog error", "slurm"),
        ("Node unexpectedly rebooted boot_time=1795319000 last response=1795318000", "slurm"),
        ("Low RealMemory (reported:1000 < 100.00% of configured:16000)", "slurm"),
        ("bad DIMM", "admin"),
        ("sunkist maintenance", "admin"),
    ],
)
def test_a_reason_is_owned_by_whoever_writes_that_kind(reason: str, owner: str) -> None:
    """Catches an operator drain counted as an admin's (the stuck-drain alert would miss it),
    a health check's taken for the operator's, or an empty reason owned by someone."""
    assert reason_owner(reason) == owner


def node(name: str, state: str = "idle", *flags: str, reason: str = "", changed_at: int = 0) -> SlurmNode:
    return SlurmNode(name, state, flags, reason, reason_changed_at=changed_at)


def test_what_is_out_of_use_at_the_first_listing_is_open_but_not_a_failure() -> None:
    """Catches every drained node counted as a new failure each time the operator restarts."""
    change = advance(None, {"a": node("a", "idle", "DRAIN", reason="bad DIMM", changed_at=900)}, 1000.0)
    assert change.open == {"a": Episode(DRAIN, "admin", 900.0)}
    assert change.started == () and change.ended == ()


def test_a_drain_seen_between_listings_is_a_failure_from_now() -> None:
    """Catches a drain dated by an old reason's time (a reason kept from an earlier drain)."""
    change = advance({}, {"a": node("a", "idle", "DRAIN", reason="Kill task failed", changed_at=10)}, 1000.0)
    assert change.started == (("a", Episode(DRAIN, "slurm", 1000.0)),)


def test_a_node_back_in_use_ends_its_drain_with_its_length() -> None:
    before = {"a": Episode(DRAIN, "operator", 400.0)}
    change = advance(before, {"a": node("a", "idle")}, 1000.0)
    assert change.open == {}
    assert [(x.node, x.episode.kind, x.seconds) for x in change.ended] == [("a", DRAIN, 600.0)]


def test_a_drained_node_that_stops_answering_ends_the_drain_and_starts_a_down() -> None:
    """Catches a node that failed while drained going uncounted."""
    before = {"a": Episode(DRAIN, "admin", 0.0)}
    change = advance(before, {"a": node("a", "idle", "DRAIN", "NOT_RESPONDING", reason="bad DIMM")}, 50.0)
    assert change.open["a"].kind == DOWN
    assert [x.episode.kind for x in change.ended] == [DRAIN]
    assert [name for name, _ in change.started] == ["a"]


def test_a_drain_still_under_way_is_neither_started_nor_ended_again() -> None:
    """Catches a failure counted once per listing instead of once per drain."""
    before = {"a": Episode(DRAIN, "admin", 100.0)}
    change = advance(before, {"a": node("a", "mixed", "DRAIN", reason="bad DIMM")}, 999.0)
    assert change.open == {"a": Episode(DRAIN, "admin", 100.0)}
    assert change.started == () and change.ended == ()


def test_a_node_no_longer_listed_ends_nothing() -> None:
    """Catches a removed member's drain observed as a repair time (it never came back)."""
    change = advance({"a": Episode(DRAIN, "operator", 0.0)}, {}, 1000.0)
    assert change.open == {} and change.ended == ()


def test_a_node_in_use_opens_nothing() -> None:
    change = advance({}, {"a": node("a", "allocated"), "b": node("b", "idle")}, 1.0)
    assert change.open == {} and change.started == ()


def test_a_wait_for_the_checks_clean_run_is_no_failure() -> None:
    """Catches every new member (it registers drained until its first clean health check
    run) counted as a health-check failure, and the operator's hand-over counted as a second
    failure after its own drain; a check that then fails is one."""
    waiting = "sunk-hc: verify: a new member; it takes jobs once every health check passes"
    change = advance({}, {"a": node("a", "idle", "DRAIN", reason=waiting)}, 1000.0)
    assert change.open == {} and change.started == ()
    handed = advance(
        {"b": Episode(DRAIN, "operator", 400.0)},
        {"b": node("b", "idle", "DRAIN", reason="sunk-hc: verify: NodeSet gpu wants it back; ...")},
        1000.0,
    )
    assert [(x.node, x.episode.owner, x.seconds) for x in handed.ended] == [("b", "operator", 600.0)]
    assert handed.open == {}
    failed = advance({}, {"a": node("a", "idle", "DRAIN", reason="sunk-hc: gpus: sees 7 of 8 GPUs")}, 1030.0)
    assert failed.started == (("a", Episode(DRAIN, "health-check", 1030.0)),)
