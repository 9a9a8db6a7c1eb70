"""The operator's Slurm metrics: one Collector that the poller feeds after each listing and
a scrape reads, so a scrape never asks Slurm anything.

It serves Slurm's state under Slurm's native names (sunk.operator.metrics.slurm_families) unless
slurmctld serves them itself (`--slurm-native-metrics`), and always what Slurm's endpoint
lacks, under `sunk_slurm_`: one info series per node with its state, reason and who wrote
the reason, partition membership, pending jobs by reason, the oldest pending job's age,
drain and down episodes (sunk.operator.metrics.episodes) and the collector's own health. While
Slurm does not answer, the Slurm families are absent, never zeros, and
`sunk_slurm_collector_up` says 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from sunk.metrics import REGISTRY
from sunk.operator.metrics import episodes as e
from sunk.operator.metrics.slurm_families import native_families
from sunk.operator.nodeset.view import SlurmView, slurm_state
from sunk.slurm.diag import SlurmDiag

# What one listing asks Slurm, in the order the poller asks.
COLLECTORS = ("nodes", "partitions", "jobs", "diag")
# Drains and downs last from seconds (a restart) to days (a part to replace).
EPISODE_BUCKETS = (60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 3 * 86400, 7 * 86400)
REASON_LIMIT = 120  # characters of a reason kept as a label value


class SlurmMetrics(Collector):
    """`native`: serve the slurm_* families (off when slurmctld serves them itself);
    `membership`: Slurm node name → its NodeSet, for the node's labels; `clock`: epoch
    seconds (the episodes' and ages' time); `stale_s`: a listing older than this is as if
    Slurm had not answered."""

    def __init__(
        self,
        *,
        native: bool = True,
        membership: Callable[[], Mapping[str, str]] = dict,
        clock: Callable[[], float] = time.time,
        stale_s: float = 60.0,
    ) -> None:
        self.native = native
        self.membership = membership
        self.clock = clock
        self.stale_s = stale_s
        self.view = SlurmView()
        self.diag: SlurmDiag | None = None
        self.answered: dict[str, bool] = {}  # empty: this process has not listed (a follower)
        self.listed_at = 0.0  # clock() of the last listing
        self.seconds = 0.0  # how long it took
        self.open: dict[str, e.Episode] | None = None
        self.errors = Counter(
            "sunk_slurm_collector_errors",
            "Slurm listings that failed, by what was asked (nodes, partitions, jobs, diag)",
            ["collector"],
            registry=None,
        )
        for name in COLLECTORS:
            self.errors.labels(name)
        self.failures = Counter(
            "sunk_slurm_node_failures",
            "Slurm nodes that went into DRAIN or DOWN, by NodeSet and who wrote the reason",
            ["nodeset", "reason_owner"],
            registry=None,
        )
        self.drains = Histogram(
            "sunk_slurm_node_drain_duration_seconds",
            "How long Slurm nodes stayed drained, observed when they return, by who drained them",
            ["reason_owner"],
            buckets=EPISODE_BUCKETS,
            registry=None,
        )
        self.downs = Histogram(
            "sunk_slurm_node_down_duration_seconds",
            "How long Slurm nodes stayed down, observed when they return, by who wrote the reason",
            ["reason_owner"],
            buckets=EPISODE_BUCKETS,
            registry=None,
        )
        # Every owner's series from the start, at zero: increase() over a series that first
        # appears at its first observation misses that observation (a dashboard showed no
        # drain duration until the second drain).
        for owner in e.OWNERS:
            self.drains.labels(owner)
            self.downs.labels(owner)

    # -- written by the poller ------------------------------------------------------------------
    def listed(
        self, view: SlurmView, diag: SlurmDiag | None, answered: Mapping[str, bool], seconds: float
    ) -> None:
        """One listing ended: `answered` says which calls answered (a call not made because
        an earlier one failed did not)."""
        now = self.clock()
        for name in COLLECTORS:
            ok = answered.get(name, False)
            self.answered[name] = ok
            if name in answered and not ok:
                self.errors.labels(name).inc()
        self.view, self.diag, self.listed_at, self.seconds = view, diag, now, seconds
        if view.known and view.nodes is not None:
            self._count(e.advance(self.open, view.nodes, now))

    def _count(self, change: e.Change) -> None:
        members = self.membership()
        for node, episode in change.started:
            self.failures.labels(members.get(node, ""), episode.owner).inc()
        for ended in change.ended:
            histogram = self.drains if ended.episode.kind == e.DRAIN else self.downs
            histogram.labels(ended.episode.owner).observe(ended.seconds)
        self.open = dict(change.open)

    def forget(self) -> None:
        """This replica stopped listing (a new term, or the Lease lost): what it listed is no
        longer kept up to date, so none of it is served. Counters and histograms stay."""
        self.view, self.diag, self.answered, self.open = SlurmView(), None, {}, None

    # -- read by a scrape -----------------------------------------------------------------------
    def collect(self) -> Iterator[Metric]:
        fresh = bool(self.answered) and self.clock() - self.listed_at <= self.stale_s
        view = self.view if fresh else SlurmView()
        diag = self.diag if fresh else None
        if self.answered:
            up = GaugeMetricFamily(
                "sunk_slurm_collector_up",
                "1 when the last Slurm listing of this kind answered (and is recent), else 0",
                labels=["collector"],
            )
            for name in COLLECTORS:
                up.add_metric([name], int(fresh and self.answered.get(name, False)))
            yield up
            yield GaugeMetricFamily(
                "sunk_slurm_collection_duration_seconds",
                "How long the last Slurm listing took (nodes, partitions, jobs and diag)",
                value=self.seconds,
            )
        yield from self.errors.collect()
        yield from self.failures.collect()
        yield from self.drains.collect()
        yield from self.downs.collect()
        if self.native:
            yield from native_families(view, diag)
        if view.known:
            yield from self._nodes(view)
            yield from self._jobs(view)

    def _nodes(self, view: SlurmView) -> Iterator[Metric]:
        members = self.membership()
        info = GaugeMetricFamily(
            "sunk_slurm_node_info",
            "One series per Slurm node: its NodeSet (empty: none), state as sinfo counts it, "
            "reason, and who wrote the reason (operator, health-check, slurm, admin, none)",
            labels=["node", "nodeset", "state", "reason", "reason_owner"],
        )
        partitions = GaugeMetricFamily(
            "sunk_slurm_node_partition",
            "1 for each partition a Slurm node is in",
            labels=["node", "partition"],
        )
        for name, record in sorted((view.nodes or {}).items()):
            reason = record.reason.strip()[:REASON_LIMIT]
            info.add_metric(
                [name, members.get(name, ""), slurm_state(record), reason, e.reason_owner(reason)], 1
            )
            for partition in record.partitions:
                partitions.add_metric([name, partition], 1)
        yield info
        yield partitions

    def _jobs(self, view: SlurmView) -> Iterator[Metric]:
        census = view.census
        if census is None:
            return
        pending = GaugeMetricFamily(
            "sunk_slurm_jobs_pending",
            "Pending jobs by partition and reason (Slurm's common reasons by name, the rest as Other)",
            labels=["partition", "reason"],
        )
        for (partition, reason), count in sorted(census.reasons.items()):
            pending.add_metric([partition, reason], count)
        yield pending
        oldest = GaugeMetricFamily(
            "sunk_slurm_oldest_pending_job_age_seconds",
            "Age of the partition's oldest pending job (since its submission), seconds",
            labels=["partition"],
        )
        now = self.clock()
        for partition, submitted in sorted(census.oldest_pending.items()):
            oldest.add_metric([partition], max(0.0, now - submitted))
        yield oldest


_installed: dict[str, Collector] = {}


def install(collector: Collector, name: str = "slurm") -> None:
    """Serve `collector` on the process's /metrics, in place of the one installed before
    under `name` (an operator built again in the same process must not register its
    families twice)."""
    previous = _installed.pop(name, None)
    if previous is not None:
        REGISTRY.unregister(previous)
    REGISTRY.register(collector)
    _installed[name] = collector
