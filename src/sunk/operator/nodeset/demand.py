"""Demand mode: a NodeSet sized from Slurm's queue, without an outside autoscaler.

Each pass looks at the jobs waiting in the NodeSet's partitions and at how long each
member has been idle, and decides the size the NodeSet should have; that size is kept in
`status.demand.replicas` (so a restarted operator goes on from it) and read back as the
NodeSet's replicas, so growing and shrinking take the same paths as a `kubectl scale`:
new members as usual, leaving ones through sunk.operator.nodeset.removal, job-safely.

It grows by one member per waiting job, and only when every member it has asked for is
registered and none is idle (an idle member will get a waiting job without help, and a
member still starting is already on its way), so it never overshoots while the new
slurmds register. It shrinks by the members idle for longer than `idleAfter`, only while
no job waits.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sunk.operator.nodeset.removal import busy
from sunk.operator.nodeset.spec import NodeSet
from sunk.slurm.models import SlurmJob, SlurmNode

Json = dict[str, Any]
# Why a pending job waits when more nodes would let it start.
WAITING_REASONS = frozenset({"Resources", "Priority"})
GROWING = "ScalingUp"
SHRINKING = "ScalingDown"


def waiting_by_partition(jobs: list[SlurmJob]) -> dict[str, tuple[SlurmJob, ...]]:
    """Partition → its jobs that wait for resources (a job may name several partitions)."""
    waiting: dict[str, list[SlurmJob]] = {}
    for job in jobs:
        if job.pending and job.reason in WAITING_REASONS:
            for partition in filter(None, job.partition.split(",")):
                waiting.setdefault(partition, []).append(job)
    return {p: tuple(js) for p, js in waiting.items()}


@dataclass
class Decision:
    replicas: int
    status: Json
    events: list[tuple[str, str]] = field(default_factory=list)  # (reason, note)


def decide(
    nodeset: NodeSet,
    members: list[Json],
    records: Mapping[str, SlurmNode],
    jobs: Mapping[str, tuple[SlurmJob, ...]],
    waiting: Mapping[str, tuple[SlurmJob, ...]],
    previous: Json,
    now: dt.datetime,
) -> Decision:
    """`previous`: the last status.demand; `members`: the NodeSet's Pods, by Slurm node name
    in their `sunk.coreweave.com/slurm-node` label."""
    assert nodeset.demand is not None and nodeset.demand_wanted is not None
    demand, wanted = nodeset.demand, nodeset.demand_wanted
    live = [p for p in members if not (p.get("metadata") or {}).get("deletionTimestamp")]
    names = [str((p["metadata"].get("labels") or {}).get("sunk.coreweave.com/slurm-node", "")) for p in live]
    idle = [
        n
        for n in names
        if (r := records.get(n)) is not None and not r.drained and not busy(r, jobs.get(n, ()))
    ]
    registered = all(n in records for n in names)

    # A list, not a map: the status is merge-patched, and a map would keep the entries of
    # members that stopped being idle (or left), making them look idle for ever.
    before = {
        e.get("slurmNode"): e.get("since") for e in previous.get("idleSince") or [] if isinstance(e, dict)
    }
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    idle_since = {n: str(before.get(n) or stamp) for n in idle}
    seen = {j.job_id: j for p in nodeset.partitions for j in waiting.get(p, ())}
    queued = len(seen)

    decision = Decision(wanted, {})
    if queued and not idle and registered and len(live) >= wanted and wanted < demand.max_replicas:
        decision.replicas = min(demand.max_replicas, wanted + queued)
        decision.events.append(
            (
                GROWING,
                f"{queued} jobs wait for resources in {', '.join(nodeset.partitions)}: growing from "
                f"{wanted} to {decision.replicas} members (maxReplicas {demand.max_replicas})",
            )
        )
    elif not queued:
        long_idle = [n for n, since in idle_since.items() if _age_s(since, now) >= demand.idle_after_s]
        target = max(demand.min_replicas, wanted - len(long_idle))
        if target < wanted:
            decision.replicas = target
            decision.events.append(
                (
                    SHRINKING,
                    f"{len(long_idle)} members idle for {demand.idle_after_s} s or more and no job "
                    f"waits: shrinking from {wanted} to {target} (minReplicas {demand.min_replicas})",
                )
            )
    decision.status = {
        "replicas": decision.replicas,
        "waitingJobs": queued,
        "idleSince": [{"slurmNode": n, "since": since} for n, since in sorted(idle_since.items())],
        "lastScaleTime": stamp if decision.events else previous.get("lastScaleTime", ""),
    }
    return decision


def _age_s(since: str, now: dt.datetime) -> float:
    try:
        then = dt.datetime.strptime(since, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return 0.0
    return (now - then).total_seconds()
