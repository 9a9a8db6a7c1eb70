"""The NodeSets as the operator last saw them, as Prometheus metrics: sizes, members by
Slurm state, drains and replacements under way, and how long one has not been Ready or
not up to date.

One writer: the NodeSet controller records what each pass computed (`Observed`, the status
it wrote or would have written) and this Collector reads those records when scraped, so
nothing else sets these series, a NodeSet's series go when it does, and a scrape costs one
look per NodeSet. Nothing here exists in Slurm or the peers' operators: a roll-out held by
a running job, or a drain that never ends, shows as a number that grows.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from sunk.operator.nodeset.spec import NodeSet

Json = dict[str, Any]
# A member's Slurm state as the status counts it (sunk.operator.nodeset.view.slurm_state).
MEMBER_STATES = ("idle", "allocated", "mixed", "draining", "drained", "down", "unknown", "unregistered")
DRAINING = "Draining"  # a removal's phase while its node drains (sunk.operator.nodeset.removal.Step)


@dataclass(frozen=True)
class Observed:
    """What one pass of the controller found for a NodeSet: the parsed NodeSet (None when
    invalid), how many members it should have, and the status that pass computed."""

    nodeset: NodeSet | None
    wanted: int
    status: Json


def seconds_since(stamp: str, now: float) -> float:
    """Seconds from an RFC 3339 time ("2026-01-01T00:00:00Z") to `now` (epoch seconds)."""
    try:
        then = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
    return max(0.0, now - then)


def _gauge(name: str, helptext: str, *labels: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, helptext, labels=list(labels or ("nodeset",)))


class NodeSetMetrics(Collector):
    """`observed`: the controller's records by key ("namespace/name"); `present`: the keys
    of the NodeSets the cache holds now (a record outliving its NodeSet is not served)."""

    def __init__(
        self,
        observed: Mapping[str, Observed],
        present: Callable[[], Collection[str]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.observed = observed
        self.present = present
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        now = self.clock()
        present = set(self.present())
        desired = _gauge("sunk_nodeset_replicas_desired", "Members the NodeSet should have")
        ready = _gauge("sunk_nodeset_replicas_ready", "Members whose Pod is Ready")
        current = _gauge("sunk_nodeset_replicas_up_to_date", "Members made from the current template")
        maximum = _gauge("sunk_nodeset_replicas_max", "Most members demand mode may grow the NodeSet to")
        members = _gauge("sunk_nodeset_members", "Members by their Slurm state", "nodeset", "state")
        drains = _gauge("sunk_nodeset_drains_in_progress", "Leaving members whose Slurm node is draining")
        leaving = _gauge(
            "sunk_nodeset_replacements_in_progress",
            "Members on their way out (draining, waiting for jobs, or being deleted)",
        )
        not_ready = _gauge(
            "sunk_nodeset_not_ready_seconds", "Seconds since the NodeSet was last Ready (0: Ready)"
        )
        stale = _gauge(
            "sunk_nodeset_not_up_to_date_seconds",
            "Seconds since every member last ran the current template (0: up to date)",
        )
        partitions = _gauge(
            "sunk_nodeset_partition",
            "1 for each partition the NodeSet's members join",
            "nodeset",
            "partition",
        )
        for key, seen in sorted(self.observed.items()):
            if key not in present:
                continue
            name = key.rsplit("/", 1)[-1]
            status = seen.status
            desired.add_metric([name], seen.wanted)
            ready.add_metric([name], status.get("ready") or 0)
            current.add_metric([name], status.get("updated") or 0)
            states = Counter(str(m.get("state")) for m in status.get("members") or ())
            for state in MEMBER_STATES:
                members.add_metric([name, state], states[state])
            removals = status.get("removals") or ()
            drains.add_metric([name], sum(1 for r in removals if r.get("phase") == DRAINING))
            leaving.add_metric([name], len(removals))
            conditions = {c.get("type"): c for c in status.get("conditions") or ()}
            for kind, family in (("Ready", not_ready), ("UpToDate", stale)):
                condition = conditions.get(kind)
                if condition is not None:
                    fine = condition.get("status") == "True"
                    since = str(condition.get("lastTransitionTime") or "")
                    family.add_metric([name], 0 if fine else seconds_since(since, now))
            if seen.nodeset is not None:
                if seen.nodeset.demand is not None:
                    maximum.add_metric([name], seen.nodeset.demand.max_replicas)
                for partition in seen.nodeset.partitions:
                    partitions.add_metric([name, partition], 1)
        yield from (desired, ready, current, maximum, members, drains, leaving, not_ready, stale, partitions)
