"""The operator's Slurm metrics (sunk.operator.metrics.slurm_metrics), built from Slurm answers
recorded on 24.11 and fed through the poller as in production."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path

from prometheus_client import CollectorRegistry

from sunk.metrics import REGISTRY
from sunk.operator.app import SlurmPoller
from sunk.operator.metrics.census import count_jobs
from sunk.operator.metrics.slurm_metrics import SlurmMetrics, install
from sunk.operator.nodeset.view import SlurmView
from sunk.slurm.client import make_dialect
from sunk.slurm.diag import parse_diag
from sunk.slurm.models import SlurmJob, SlurmNode
from tests.fakes.slurm import FakeSlurm
from tests.unit.test_people import operator_config

RECORDED = Path(__file__).parent / "samples" / "slurm-24.11.5-4" / "v0.0.42"
DIALECT = make_dialect("v0.0.42")
NOW = 1795327000.0


def body(name: str) -> dict[str, object]:
    data: dict[str, object] = json.loads((RECORDED / f"{name}.json").read_text())["body"]
    return data


def recorded_nodes() -> dict[str, SlurmNode]:
    nodes = body("nodes")["nodes"]
    assert isinstance(nodes, list)
    return {n.name: n for n in (DIALECT.parse_node(raw) for raw in nodes)}


def recorded_jobs() -> list[SlurmJob]:
    return [DIALECT.parse_job(body(name)["jobs"][0]) for name in ("job-pending", "job-running")]  # type: ignore[index]


def job(job_id: int, state: str, partition: str = "batch", reason: str = "None", **kw: object) -> SlurmJob:
    plain = SlurmJob(job_id, f"j{job_id}", state, reason, (), "", 0, 0, partition, 60, 1)
    return replace(plain, **kw)  # type: ignore[arg-type]


def view(
    nodes: Mapping[str, SlurmNode], jobs: list[SlurmJob], partitions: tuple[str, ...] = ("batch", "high")
) -> SlurmView:
    return SlurmView(dict(nodes), frozenset(partitions), {}, listed_at=1.0, census=count_jobs(jobs))


class Scrape:
    """A collector registered alone, read as Prometheus would read it."""

    def __init__(self, metrics: SlurmMetrics) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(metrics)

    def value(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, labels)

    def names(self) -> set[str]:
        return {family.name for family in self.registry.collect()}


def listed(metrics: SlurmMetrics, v: SlurmView, *, diag: bool = True) -> Scrape:
    answered = {"nodes": True, "partitions": True, "jobs": True, "diag": diag}
    metrics.listed(v, parse_diag(body("diag")) if diag else None, answered, 0.02)
    return Scrape(metrics)


def metrics(**kw: object) -> SlurmMetrics:
    return SlurmMetrics(clock=lambda: NOW, **kw)  # type: ignore[arg-type]


def test_recorded_nodes_are_counted_under_slurms_native_names() -> None:
    scrape = listed(metrics(), view(recorded_nodes(), recorded_jobs()))
    assert scrape.value("slurm_nodes") == 4
    assert scrape.value("slurm_nodes_idle") == 3  # sn-002, sn-003 and the drained sn-004
    assert scrape.value("slurm_nodes_mixed") == 1
    assert scrape.value("slurm_nodes_drain") == scrape.value("slurm_nodes_drained") == 1
    assert scrape.value("slurm_nodes_noresp") == 1
    assert scrape.value("slurm_node_cpus_alloc", node="sn-001") == 1
    assert scrape.value("slurm_node_cpus_idle", node="sn-001") == 7
    assert scrape.value("slurm_node_gpus", node="sn-001") == 4
    assert scrape.value("slurm_node_gpus_alloc", node="sn-001") == 1


def test_node_memory_is_served_in_bytes_not_slurms_mb() -> None:
    """Catches RealMemory (MB) passed on under a _bytes name, as Slurm's endpoint does (measured
    on 26.05.5: tests/unit/test_slurmctld_native_metrics.py)."""
    scrape = listed(metrics(), view(recorded_nodes(), []))
    assert scrape.value("slurm_node_memory_bytes", node="sn-001") == 16000 * 1024 * 1024
    assert scrape.value("slurm_node_memory_alloc_bytes", node="sn-001") == 256 * 1024 * 1024


def test_partitions_sum_their_nodes_and_count_their_jobs() -> None:
    jobs = [*recorded_jobs(), job(7, "RUNNING", "high", allocated="cpu=2,gres/gpu=3")]
    scrape = listed(metrics(), view(recorded_nodes(), jobs))
    assert scrape.value("slurm_partition_nodes", partition="high") == 4
    assert scrape.value("slurm_partition_cpus", partition="batch") == 32
    assert scrape.value("slurm_partition_nodes_cpus_alloc", partition="batch") == 1
    assert scrape.value("slurm_partition_nodes_cpus_idle", partition="batch") == 31
    assert scrape.value("slurm_partition_gpus", partition="batch") == 16
    assert scrape.value("slurm_partition_jobs_pending", partition="batch") == 1
    assert scrape.value("slurm_partition_jobs_running", partition="batch") == 1
    assert scrape.value("slurm_partition_jobs_gpus_alloc", partition="high") == 3
    assert scrape.value("slurm_jobs_gpus_alloc") == 3


def test_jobs_are_counted_by_state_with_slurms_words() -> None:
    """Catches NODE_FAIL or CANCELLED served under a name dashboards do not query."""
    jobs = [job(1, "PENDING", priority=0), job(2, "CANCELLED"), job(3, "NODE_FAIL"), *recorded_jobs()]
    scrape = listed(metrics(), view(recorded_nodes(), jobs))
    assert scrape.value("slurm_jobs") == 5
    assert scrape.value("slurm_jobs_pending") == 2
    assert scrape.value("slurm_jobs_hold") == 1
    assert scrape.value("slurm_jobs_cancelled") == 1
    assert scrape.value("slurm_jobs_node_failed") == 1
    assert scrape.value("slurm_jobs_running") == 1


def test_the_scheduler_statistics_come_from_diag_in_microseconds() -> None:
    scrape = listed(metrics(), view(recorded_nodes(), []))
    stats = body("diag")["statistics"]
    assert isinstance(stats, dict)
    assert scrape.value("slurm_schedule_cycle_last") == stats["schedule_cycle_last"]
    assert scrape.value("slurm_sched_mean_cycle") == stats["schedule_cycle_mean"]
    assert scrape.value("slurm_server_thread_cnt") == stats["server_thread_count"]
    assert scrape.value("slurm_bf_active") == 0


def test_pending_jobs_are_counted_by_a_bounded_set_of_reasons() -> None:
    """Catches a label value per reason Slurm invents (unbounded series), or one per host list."""
    jobs = [
        job(1, "PENDING", reason="Resources"),
        job(2, "PENDING", reason="ReqNodeNotAvail, UnavailableNodes:sn-004"),
        job(3, "PENDING", reason="SomethingNew"),
        job(4, "PENDING", reason="AnotherNewOne"),
    ]
    scrape = listed(metrics(), view(recorded_nodes(), jobs))
    assert scrape.value("sunk_slurm_jobs_pending", partition="batch", reason="Resources") == 1
    assert scrape.value("sunk_slurm_jobs_pending", partition="batch", reason="ReqNodeNotAvail") == 1
    assert scrape.value("sunk_slurm_jobs_pending", partition="batch", reason="Other") == 2


def test_the_oldest_pending_job_age_is_per_partition() -> None:
    """Catches the age of the newest job (or a running one) reported as the oldest."""
    jobs = [
        job(1, "PENDING", submit_time=int(NOW) - 600),
        job(2, "PENDING", submit_time=int(NOW) - 60),
        job(3, "RUNNING", submit_time=int(NOW) - 9000),
        job(4, "PENDING", "high", submit_time=int(NOW) - 5),
    ]
    scrape = listed(metrics(), view(recorded_nodes(), jobs))
    assert scrape.value("sunk_slurm_oldest_pending_job_age_seconds", partition="batch") == 600
    assert scrape.value("sunk_slurm_oldest_pending_job_age_seconds", partition="high") == 5


def test_each_node_has_one_info_series_with_state_reason_owner_and_nodeset() -> None:
    nodes = recorded_nodes()
    nodes["sn-002"] = replace(nodes["sn-002"], flags=("DRAIN",), reason="sunk: NodeSet gpu is scaled in")
    scrape = listed(metrics(membership=lambda: {"sn-002": "gpu"}), view(nodes, []))
    labels = {"node": "sn-002", "nodeset": "gpu", "state": "drained"}
    assert (
        scrape.value(
            "sunk_slurm_node_info", **labels, reason="sunk: NodeSet gpu is scaled in", reason_owner="operator"
        )
        == 1
    )
    assert (
        scrape.value(
            "sunk_slurm_node_info",
            node="sn-004",
            nodeset="",
            state="down",
            reason="recorded drain",
            reason_owner="admin",
        )
        == 1
    )
    assert scrape.value("sunk_slurm_node_partition", node="sn-001", partition="high") == 1


def test_when_slurm_does_not_answer_its_gauges_are_absent_not_zero() -> None:
    """Catches a dead slurmctld shown as an empty, healthy cluster."""
    m = metrics()
    m.listed(SlurmView(problem="refused"), None, {"nodes": False}, 15.0)
    scrape = Scrape(m)
    assert not {n for n in scrape.names() if n.startswith("slurm_")}
    assert scrape.value("sunk_slurm_node_info", node="sn-001") is None
    assert scrape.value("sunk_slurm_collector_up", collector="nodes") == 0
    assert scrape.value("sunk_slurm_collector_up", collector="jobs") == 0
    assert scrape.value("sunk_slurm_collector_errors_total", collector="nodes") == 1
    assert scrape.value("sunk_slurm_collector_errors_total", collector="jobs") == 0


def test_a_failed_diag_costs_only_the_scheduler_families() -> None:
    scrape = listed(metrics(), view(recorded_nodes(), []), diag=False)
    assert scrape.value("slurm_nodes") == 4
    assert scrape.value("slurm_schedule_cycle_last") is None
    assert scrape.value("sunk_slurm_collector_up", collector="diag") == 0
    assert scrape.value("sunk_slurm_collector_up", collector="nodes") == 1


def test_with_slurms_own_endpoint_only_sunks_families_are_served() -> None:
    """Catches slurm_* served twice (by slurmctld and by the operator) on 25.11+."""
    scrape = listed(metrics(native=False), view(recorded_nodes(), recorded_jobs()))
    assert not {n for n in scrape.names() if n.startswith("slurm_")}
    assert (
        scrape.value(
            "sunk_slurm_node_info", node="sn-001", nodeset="", state="mixed", reason="", reason_owner="none"
        )
        == 1
    )


def test_a_replica_that_never_listed_serves_no_collector_health() -> None:
    """Catches every follower replica reporting the collector down (a false alert)."""
    scrape = Scrape(metrics())
    assert scrape.value("sunk_slurm_collector_up", collector="nodes") is None
    assert not {n for n in scrape.names() if n.startswith("slurm_")}


def test_a_listing_older_than_the_stale_limit_is_served_as_no_answer() -> None:
    """Catches a stuck poller's last numbers served for ever as current."""
    clock = [NOW]
    m = SlurmMetrics(clock=lambda: clock[0], stale_s=60)
    listed(m, view(recorded_nodes(), []))
    clock[0] += 61
    scrape = Scrape(m)
    assert scrape.value("slurm_nodes") is None
    assert scrape.value("sunk_slurm_collector_up", collector="nodes") == 0


class Untouchable(Mapping[str, tuple[SlurmJob, ...]]):
    """A job map that fails when read: a scrape must never walk the jobs."""

    def __getitem__(self, key: str) -> tuple[SlurmJob, ...]:
        raise AssertionError("a scrape read the job listing")

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("a scrape walked the job listing")

    def __len__(self) -> int:
        raise AssertionError("a scrape counted the job listing")


def test_a_scrape_reads_the_listings_counts_never_the_jobs() -> None:
    """Catches a scrape whose cost grows with the queue (counting jobs per scrape)."""
    v = replace(view(recorded_nodes(), [job(i, "PENDING") for i in range(1000)]), jobs=Untouchable())
    scrape = listed(metrics(), v)
    assert scrape.value("slurm_jobs_pending") == 1000


def test_every_owners_duration_series_is_served_at_zero_before_its_first_drain_or_down() -> None:
    """Catches a duration histogram whose series first appears with its first observation:
    Prometheus's increase() over it then misses that observation, and the Cluster
    dashboard's "How long nodes stay out" stayed empty until a second drain."""
    scrape = listed(metrics(), view(recorded_nodes(), []))
    for family in ("sunk_slurm_node_drain_duration_seconds", "sunk_slurm_node_down_duration_seconds"):
        for owner in ("operator", "health-check", "slurm", "admin", "none"):
            assert scrape.value(f"{family}_count", reason_owner=owner) == 0, (family, owner)


def test_a_drain_seen_by_the_poller_counts_one_failure_and_its_end_a_duration() -> None:
    clock = [NOW]
    m = SlurmMetrics(clock=lambda: clock[0], membership=lambda: {"sn-002": "gpu"})
    nodes = recorded_nodes()
    listed(m, view(nodes, []))
    clock[0] += 10
    listed(m, view({**nodes, "sn-002": replace(nodes["sn-002"], flags=("DRAIN",), reason="bad DIMM")}, []))
    clock[0] += 10
    listed(m, view({**nodes, "sn-002": replace(nodes["sn-002"], flags=("DRAIN",), reason="bad DIMM")}, []))
    clock[0] += 300
    scrape = listed(m, view(nodes, []))
    assert scrape.value("sunk_slurm_node_failures_total", nodeset="gpu", reason_owner="admin") == 1
    assert scrape.value("sunk_slurm_node_drain_duration_seconds_count", reason_owner="admin") == 1
    assert scrape.value("sunk_slurm_node_drain_duration_seconds_sum", reason_owner="admin") == 310


# -- through the poller -----------------------------------------------------------------------


def poll(slurm: FakeSlurm, m: SlurmMetrics) -> SlurmPoller:
    poller = SlurmPoller(slurm, 5.0, lambda: None, m)
    asyncio.run(poller.poll_once())
    return poller


def test_a_failed_diag_never_makes_the_poller_view_unknown() -> None:
    """Catches a /diag error taking the NodeSets' Slurm view down with it (no scale, no drain)."""
    slurm = FakeSlurm()
    slurm.add_node("a1")
    slurm.fail("diag")
    m = metrics()
    poller = poll(slurm, m)
    assert poller.view.known
    assert Scrape(m).value("sunk_slurm_collector_up", collector="diag") == 0
    assert Scrape(m).value("slurm_nodes") == 1


def test_the_poller_counts_its_listing_once_and_feeds_the_collector() -> None:
    slurm = FakeSlurm()
    slurm.add_node("a1")
    slurm.queue_job(reason="Priority")
    m = metrics()
    poller = poll(slurm, m)
    assert poller.view.census is not None and poller.view.census.pending == {"batch": 1}
    assert Scrape(m).value("sunk_slurm_jobs_pending", partition="batch", reason="Priority") == 1
    assert Scrape(m).value("slurm_server_thread_cnt") == 1


def test_a_listing_that_fails_midway_counts_one_error_and_what_was_not_asked_is_down() -> None:
    """Catches the failing call blamed on the wrong collector, or the calls never made
    counted as answered."""
    slurm = FakeSlurm()
    slurm.fail("partitions")
    m = metrics()
    poller = poll(slurm, m)
    scrape = Scrape(m)
    assert not poller.view.known
    assert not {n for n in scrape.names() if n.startswith("slurm_")}
    assert scrape.value("sunk_slurm_collector_up", collector="nodes") == 1
    assert scrape.value("sunk_slurm_collector_up", collector="partitions") == 0
    assert scrape.value("sunk_slurm_collector_up", collector="jobs") == 0
    assert scrape.value("sunk_slurm_collector_errors_total", collector="partitions") == 1
    assert scrape.value("sunk_slurm_collector_errors_total", collector="jobs") == 0


def test_a_replica_that_stops_listing_forgets_what_it_listed() -> None:
    """Catches an ex-leader serving its last listing (and a collector up) for ever."""
    slurm = FakeSlurm()
    slurm.add_node("a1")
    m = metrics()
    poller = poll(slurm, m)
    poller.reset()
    scrape = Scrape(m)
    assert scrape.value("slurm_nodes") is None
    assert scrape.value("sunk_slurm_collector_up", collector="nodes") is None


def test_the_operator_serves_slurms_names_unless_told_slurmctld_does() -> None:
    """Catches --slurm-native-metrics defaulting on (no slurm_* at all on 24.11) or ignored."""
    assert operator_config().slurm_native_metrics is False
    assert operator_config("--slurm-native-metrics=true").slurm_native_metrics is True


def test_an_operator_built_again_replaces_its_collector_on_metrics() -> None:
    """Catches an operator rebuilt in one process serving every family twice (or failing)."""
    first, second = metrics(), metrics()
    nodes = recorded_nodes()
    listed(first, view(nodes, []))
    listed(second, view({"sn-001": nodes["sn-001"]}, []))
    install(first, "test")
    install(second, "test")
    try:
        served = [
            sample.value
            for family in REGISTRY.collect()
            for sample in family.samples
            if sample.name == "slurm_nodes"
        ]
        assert served == [1]  # the second's listing, once
    finally:
        REGISTRY.unregister(second)
