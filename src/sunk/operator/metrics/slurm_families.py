"""Slurm's state under the names of Slurm's own metrics endpoint (slurmctld's
`metrics/openmetrics`, 25.11 and later), built from the operator's last listing.

Dashboards written for that endpoint then work unchanged on releases without it. All are
gauges, as Slurm serves them, with two deliberate differences from the endpoint: memory is
in true bytes (Slurm's counts are MB, which its endpoint passes on under the `_bytes` name:
measured on 26.05.5, tests/unit/test_slurmctld_native_metrics.py), and only what one listing
of nodes, partitions and jobs holds is served.
Built per scrape from the listing's counts: the cost follows nodes and partitions, never jobs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from sunk.operator.metrics.census import STATE_WORDS, JobCensus
from sunk.operator.nodeset.removal import busy
from sunk.operator.nodeset.view import SlurmView
from sunk.slurm.diag import SlurmDiag
from sunk.slurm.models import SlurmNode, gres_is

MIB = 1024 * 1024  # Slurm's "MB" of memory is 2^20 bytes
NODE_STATES = ("idle", "alloc", "mixed", "down", "drain", "drained", "draining", "noresp", "fail", "maint")
JOB_STATES = ("hold", *STATE_WORDS.values())


def node_words(record: SlurmNode) -> set[str]:
    """The slurm_nodes_<word> totals this node counts in: its base state (idle, alloc,
    mixed, down) and each flag the totals count (drain and then drained or draining,
    noresp, fail, maint)."""
    flags = {f.upper() for f in record.flags}
    base = record.state.lower()
    words = {"alloc" if base == "allocated" else base}
    if record.drained:
        words |= {"drain", "draining" if busy(record) else "drained"}
    if "NOT_RESPONDING" in flags:
        words.add("noresp")
    if flags & {"FAIL", "FAILING"}:
        words.add("fail")
    if "MAINT" in flags:
        words.add("maint")
    return words


def gpus(pairs: tuple[tuple[str, int], ...]) -> int:
    return sum(n for key, n in pairs if gres_is(key, "gpu"))


def node_families(nodes: dict[str, SlurmNode]) -> Iterator[Metric]:
    totals: Counter[str] = Counter()
    per_node = {
        name: GaugeMetricFamily(f"slurm_node_{name}", helptext, labels=["node"])
        for name, helptext in (
            ("cpus", "CPUs of the node"),
            ("cpus_alloc", "CPUs of the node allocated to jobs"),
            ("cpus_idle", "CPUs of the node not allocated"),
            ("memory_bytes", "Memory of the node (RealMemory), bytes"),
            ("memory_alloc_bytes", "Memory of the node allocated to jobs, bytes"),
            ("gpus", "GPUs of the node"),
            ("gpus_alloc", "GPUs of the node allocated to jobs"),
        )
    }
    for name, record in sorted(nodes.items()):
        totals.update(node_words(record))
        values = {
            "cpus": record.cpus,
            "cpus_alloc": record.alloc_cpus,
            "cpus_idle": max(0, record.cpus - record.alloc_cpus),
            "memory_bytes": record.memory_mib * MIB,
            "memory_alloc_bytes": record.alloc_memory_mib * MIB,
            "gpus": gpus(record.gres),
            "gpus_alloc": gpus(record.gres_used),
        }
        for key, family in per_node.items():
            family.add_metric([name], values[key])
    yield GaugeMetricFamily("slurm_nodes", "Slurm nodes", value=len(nodes))
    for word in NODE_STATES:
        yield GaugeMetricFamily(f"slurm_nodes_{word}", f"Slurm nodes counted as {word}", value=totals[word])
    yield from per_node.values()


def partition_families(view: SlurmView, census: JobCensus | None) -> Iterator[Metric]:
    names = sorted(view.partitions or ())
    nodes: Counter[str] = Counter()
    cpus: Counter[str] = Counter()
    alloc: Counter[str] = Counter()
    gpu_total: Counter[str] = Counter()
    for record in (view.nodes or {}).values():
        for partition in record.partitions:
            nodes[partition] += 1
            cpus[partition] += record.cpus
            alloc[partition] += record.alloc_cpus
            gpu_total[partition] += gpus(record.gres)
    rows: list[tuple[str, str, Counter[str]]] = [
        ("nodes", "Nodes in the partition", nodes),
        ("cpus", "CPUs of the partition's nodes", cpus),
        ("nodes_cpus_alloc", "CPUs of the partition's nodes allocated to jobs", alloc),
        ("nodes_cpus_idle", "CPUs of the partition's nodes not allocated", cpus - alloc),
        ("gpus", "GPUs of the partition's nodes", gpu_total),
    ]
    if census is not None:
        rows += [
            ("jobs_pending", "Jobs pending in the partition", Counter(census.pending)),
            ("jobs_running", "Jobs running in the partition", Counter(census.running)),
            ("jobs_gpus_alloc", "GPUs allocated to the partition's running jobs", Counter(census.gpus)),
        ]
    yield GaugeMetricFamily("slurm_partitions", "Slurm partitions", value=len(names))
    for suffix, helptext, values in rows:
        family = GaugeMetricFamily(f"slurm_partition_{suffix}", helptext, labels=["partition"])
        for partition in names:
            family.add_metric([partition], values[partition])
        yield family


def job_families(census: JobCensus) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "slurm_jobs", "Jobs slurmctld holds (pending, running and recently ended)", value=census.total
    )
    for word in JOB_STATES:
        yield GaugeMetricFamily(
            f"slurm_jobs_{word}", f"Jobs in state {word}", value=census.states.get(word, 0)
        )
    yield GaugeMetricFamily(
        "slurm_jobs_gpus_alloc", "GPUs allocated to running jobs", value=sum(census.gpus.values())
    )


def scheduler_families(diag: SlurmDiag) -> Iterator[Metric]:
    """sdiag's numbers; cycle times in microseconds, as Slurm's endpoint serves them."""
    rows = (
        ("slurm_schedule_cycle_last", "Last main scheduling cycle, microseconds", diag.schedule_cycle_last),
        ("slurm_schedule_cycle_max", "Longest main scheduling cycle, microseconds", diag.schedule_cycle_max),
        ("slurm_sched_mean_cycle", "Mean main scheduling cycle, microseconds", diag.schedule_cycle_mean),
        (
            "slurm_schedule_queue_len",
            "Jobs the main scheduler's last cycle looked at",
            diag.schedule_queue_length,
        ),
        ("slurm_bf_active", "1 while a backfill cycle runs", int(diag.bf_active)),
        ("slurm_bf_cycle_last", "Last backfill cycle, microseconds", diag.bf_cycle_last),
        ("slurm_bf_cycle_max", "Longest backfill cycle, microseconds", diag.bf_cycle_max),
        ("slurm_bf_queue_len", "Jobs the last backfill cycle looked at", diag.bf_queue_len),
        (
            "slurm_bf_when_last_cycle",
            "When the last backfill cycle ended, epoch seconds",
            diag.bf_when_last_cycle,
        ),
        ("slurm_agent_queue_size", "Outgoing RPCs slurmctld has queued", diag.agent_queue_size),
        ("slurm_agent_cnt", "slurmctld agent threads", diag.agent_count),
        ("slurm_slurmdbd_queue_size", "Messages queued for slurmdbd", diag.dbd_agent_queue_size),
        ("slurm_server_thread_cnt", "slurmctld threads serving RPCs", diag.server_thread_count),
        ("slurm_sdiag_jobs_submitted", "Jobs submitted since the statistics were reset", diag.jobs_submitted),
        ("slurm_sdiag_jobs_started", "Jobs started since the statistics were reset", diag.jobs_started),
        ("slurm_sdiag_jobs_completed", "Jobs completed since the statistics were reset", diag.jobs_completed),
        ("slurm_sdiag_jobs_canceled", "Jobs cancelled since the statistics were reset", diag.jobs_canceled),
        ("slurm_sdiag_jobs_failed", "Jobs failed since the statistics were reset", diag.jobs_failed),
    )
    for name, helptext, value in rows:
        yield GaugeMetricFamily(name, helptext, value=value)


def native_families(view: SlurmView, diag: SlurmDiag | None) -> Iterator[Metric]:
    """Every slurm_* family the listing allows: none of the node, partition and job ones
    while Slurm's listing is unknown (absent, never zeros), none of the scheduler's without
    a /diag answer."""
    if view.known and view.nodes is not None:
        yield from node_families(dict(view.nodes))
        yield from partition_families(view, view.census)
        if view.census is not None:
            yield from job_families(view.census)
    if diag is not None:
        yield from scheduler_families(diag)
