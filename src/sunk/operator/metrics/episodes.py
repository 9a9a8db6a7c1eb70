"""Who took a Slurm node out of use, and for how long: the drain and down episodes the
metrics count, found by comparing one node listing with the next.

Pure: `advance` takes the episodes open after the last listing and the new listing, and
returns the episodes open now with those that began and ended in between. The poller's
metrics (sunk.operator.metrics.slurm_metrics) turn them into a failure counter and duration
histograms; an alert on "drained with no known reason" reads `reason_owner`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sunk.operator.nodeset import health_checks as hc
from sunk.operator.nodeset.removal import DRAIN_PREFIX
from sunk.operator.nodeset.view import slurm_state
from sunk.slurm.models import SlurmNode

# Reasons sunk's components write all start "sunk:" (the operator's NodeSet drains, a
# member's drain as its Pod stops, the scheduler's drains of cordoned Nodes and of Pods
# still running at KillWait). Health checks will write "sunk-hc: <check>: <message>".
SUNK_PREFIX = DRAIN_PREFIX.split(" ", 1)[0]  # "sunk:"
HEALTH_CHECK_PREFIX = "sunk-hc:"
# Reasons slurmctld and slurmd set themselves, matched at the start and ignoring case: a
# node that stopped answering, a job or script that failed on it, or registration finding
# less than slurm.conf promises.
SLURM_REASONS = (
    "not responding",
    "kill task failed",
    "batch job complete failure",
    "prolog error",
    "epilog error",
    "node unexpectedly rebooted",
    "low realmemory",
    "low tmpdisk",
    "low socket*core*thread count",
    "low cpus",
    "gres/",
    "no network address found",
    "slurmdspooldir is full",
    "duplicate jobid",
)
OWNERS = ("operator", "health-check", "slurm", "admin", "none")
DRAIN, DOWN = "drain", "down"


def reason_owner(reason: str) -> str:
    """Who wrote `reason`: operator (sunk), health-check, slurm (Slurm's own words), admin
    (anything else: a person or another tool), or none (no reason at all)."""
    text = reason.strip()
    if not text:
        return "none"
    if text.startswith(HEALTH_CHECK_PREFIX):
        return "health-check"
    if text.startswith(SUNK_PREFIX):
        return "operator"
    if text.lower().startswith(SLURM_REASONS):
        return "slurm"
    return "admin"


def out_of_use(record: SlurmNode) -> str | None:
    """DOWN (not answering counts as down, as sinfo shows it), DRAIN (drained or draining),
    or None for a node in use or ready for it. Down wins over a drain. A drain that only
    waits for the health checks' next clean run (`sunk-hc: verify: `: a new member's first
    run, or a member the operator handed back) is no failure: the operator's drain it
    replaced has ended, and a check that then fails starts an episode of its own."""
    state = slurm_state(record)
    if state == "down":
        return DOWN
    if state in ("drained", "draining"):
        return None if hc.handed_over(record) else DRAIN
    return None


@dataclass(frozen=True)
class Episode:
    """A node out of use: `kind` (drain or down) since `since` (epoch seconds), under a
    reason written by `owner`."""

    kind: str
    owner: str
    since: float


@dataclass(frozen=True)
class Ended:
    node: str
    episode: Episode
    seconds: float


@dataclass(frozen=True)
class Change:
    """What happened between two listings."""

    open: Mapping[str, Episode]
    started: tuple[tuple[str, Episode], ...] = ()
    ended: tuple[Ended, ...] = ()


def advance(before: Mapping[str, Episode] | None, nodes: Mapping[str, SlurmNode], now: float) -> Change:
    """The episodes after a listing of `nodes` taken at `now`, given those open before it
    (None: this is the first listing; what is out of use then is open but did not start
    between listings, so it is not counted as a failure).

    An episode starts when a node goes from in use to drain or down, or from one to the
    other (a drained node that stops answering is a new failure); it ends when the node is
    back in use, or changes kind. A node no longer listed (its member was removed) ends
    nothing: it never came back, and its time would not be a repair time. An episode seen
    to start starts at `now` (a poll interval late at most); one open at the first listing
    at Slurm's time of the reason's change when it has one (a reason kept from an earlier
    drain would date a later one too early, so it is trusted only there)."""
    first = before is None
    previous = before or {}
    opened: dict[str, Episode] = {}
    started: list[tuple[str, Episode]] = []
    ended: list[Ended] = []
    for name, record in nodes.items():
        kind = out_of_use(record)
        was = previous.get(name)
        if was is not None and was.kind != kind:
            ended.append(Ended(name, was, max(0.0, now - was.since)))
            was = None
        if kind is None:
            continue
        owner = reason_owner(record.reason)
        if was is not None:
            opened[name] = Episode(kind, owner, was.since)  # the reason may have changed hands
            continue
        since = float(record.reason_changed_at) if first and record.reason_changed_at else now
        episode = Episode(kind, owner, min(since, now))
        opened[name] = episode
        if not first:
            started.append((name, episode))
    return Change(opened, tuple(started), tuple(ended))
