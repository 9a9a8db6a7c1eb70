"""The benchmark's per-Pod timeline (issue #55): Slurm's stages read from its daemons' logs,
the watch's marks on the same clock, and the gaps between consecutive stages."""

from __future__ import annotations

from datetime import datetime

import pytest
from bench.observe import Gap, slurm_log_marks, timeline_gaps
from bench.run_report import POD_CHAIN, pod_marks
from bench.trace_report import durations, pod_rows, read_trace


def at(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "[2026-11-30T08:01:03.120] _slurm_rpc_submit_batch_job: JobId=7 InitPrio=4294901759 usec=654",
            {7: {"submitted": at("2026-11-30T08:01:03.120")}},
        ),
        (
            "[2026-11-30T08:01:03.250] sched: Allocate JobId=7 NodeList=n3 #CPUs=1 Partition=batch",
            {7: {"started": at("2026-11-30T08:01:03.250")}},
        ),
        (
            "[2026-11-30T08:01:04.001] sched/backfill: _start_job: Started JobId=12 in batch on n1",
            {12: {"started": at("2026-11-30T08:01:04.001")}},
        ),
        (
            "[2026-11-30T08:01:03.400] Launching batch job 7 for UID 0",
            {7: {"launched": at("2026-11-30T08:01:03.400")}},
        ),
        (
            "[2026-11-30T08:01:03.900] _update_job: setting extra to : started for JobId=7",
            {7: {"marked": at("2026-11-30T08:01:03.900")}},
        ),
        (  # Slurm 22.05 carries the mark in the comment, after what the field held
            "[2026-11-30T08:01:03.900] _update_job: setting comment to base: started for JobId=7",
            {7: {"marked": at("2026-11-30T08:01:03.900")}},
        ),
        # another update of the field is no started mark
        ("[2026-11-30T08:01:03.900] _update_job: setting extra to other for JobId=7", {}),
        # a line without Slurm's time stamp, or of no stage, says nothing
        ("sched: Allocate JobId=7 NodeList=n3 #CPUs=1 Partition=batch", {}),
        ("[2026-11-30T08:01:03.900] _job_complete: JobId=7 done", {}),
    ],
)
def test_each_stage_is_read_from_its_log_line(line: str, expected: dict[int, dict[str, float]]) -> None:
    assert slurm_log_marks([line]) == expected


def test_the_first_line_of_a_stage_counts_and_only_the_jobs_asked_for() -> None:
    lines = [
        "[2026-11-30T08:01:03.250] sched: Allocate JobId=7 NodeList=n3 #CPUs=1 Partition=batch",
        "[2026-11-30T08:01:09.000] sched: Allocate JobId=7 NodeList=n4 #CPUs=1 Partition=batch",  # requeued
        "[2026-11-30T08:01:03.300] sched: Allocate JobId=8 NodeList=n4 #CPUs=1 Partition=batch",
    ]
    assert slurm_log_marks(lines, {7}) == {7: {"started": at("2026-11-30T08:01:03.250")}}


@pytest.mark.parametrize(
    ("marks", "chain", "extra", "expected"),
    [
        (  # consecutive gaps, median and p99 over the items
            {"a": {"x": 0.0, "y": 1.0, "z": 1.5}, "b": {"x": 0.0, "y": 3.0, "z": 3.1}},
            ("x", "y", "z"),
            (),
            [Gap("x", "y", 2, 3.0, 3.0, 0), Gap("y", "z", 2, 0.5, 0.5, 0)],
        ),
        (  # an item missing a stage counts only in the gaps it has both ends of
            {"a": {"x": 0.0, "y": 1.0, "z": 2.0}, "b": {"x": 0.0, "z": 5.0}},
            ("x", "y", "z"),
            (("x", "z"),),
            [Gap("x", "y", 1, 1.0, 1.0, 0), Gap("y", "z", 1, 1.0, 1.0, 0), Gap("x", "z", 2, 5.0, 5.0, 0)],
        ),
        (  # a later stage reached first is counted as reversed
            {"a": {"x": 2.0, "y": 1.0}, "b": {"x": 0.0, "y": 1.0}},
            ("x", "y"),
            (),
            [Gap("x", "y", 2, 1.0, 1.0, 1)],
        ),
    ],
)
def test_timeline_gaps(
    marks: dict[str, dict[str, float]],
    chain: tuple[str, ...],
    extra: tuple[tuple[str, str], ...],
    expected: list[Gap],
) -> None:
    assert timeline_gaps(marks, chain, extra) == expected


def test_a_pods_marks_join_the_watch_and_its_jobs_slurm_stages_on_one_clock() -> None:
    wall_minus_monotonic = 1_000_000.0
    marks = pod_marks(
        created={"p0": 10.0, "p1": 10.1},
        seen={"p0": {"submitted": 12.0, "bound": 14.0, "running": 14.5}, "p1": {}},
        job_ids={"p0": 70001},
        slurm={70001: {"submitted": 1_000_011.0, "started": 1_000_012.5}, 70002: {"started": 1.0}},
        wall_minus_monotonic=wall_minus_monotonic,
    )
    assert marks == {
        "p0": {
            "created": 10.0,
            "job ID on Pod": 12.0,
            "bound": 14.0,
            "running": 14.5,
            "submitted": 11.0,
            "started": 12.5,
        },
        "p1": {"created": 10.1},  # not submitted yet: nothing but its creation
    }
    assert [g.count for g in timeline_gaps(marks, POD_CHAIN)] == [1, 1, 0, 0, 0, 1]


TRACE = [
    "100.0000 queue bench-ours-100/p0 add",
    "100.0100 queue bench-ours-100/p0 get",
    "100.0200 slurm POST:/job/submit start",
    "100.2200 slurm POST:/job/submit end",
    "101.0000 hook_started bench-ours-100/p0:50000000 start",
    "101.0100 slurm GET:/job/50000000 start",
    "101.1100 slurm GET:/job/50000000 end",
    "101.2000 queue bench-ours-100/p0 get",
    "101.3000 kube POST:/api/v1/namespaces/bench-ours-100/pods/p0/binding start",
    "101.4000 kube POST:/api/v1/namespaces/bench-ours-100/pods/p0/binding end",
    "101.5000 queue sn-001 add",  # a Slurm node's key: not a Pod's
]


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("add", [100.0]),
        ("get", [100.01, 101.2]),
        ("hook_started start", [101.0]),
        ("POST/binding start", [101.3]),
        ("POST/binding end", [101.4]),
    ],
)
def test_a_trace_gives_each_pods_steps(kind: str, expected: list[float]) -> None:
    trace = read_trace(TRACE)
    assert trace.pods["p0"].steps[kind] == pytest.approx(expected)
    assert trace.pods["p0"].job_id == 50000000
    assert set(trace.pods) == {"p0"}


def test_a_pods_steps_land_on_the_runs_clock_through_its_binding() -> None:
    # The watch saw p0 bound 0.05 s after its binding call ended, 1.45 s into the phase.
    marks = {"p0": {"created": 0.0, "marked": 0.9, "bound": 1.45}}
    [row] = pod_rows(read_trace(TRACE), marks)
    assert row["hook arrives"] == pytest.approx(1.05)
    assert (row["read start"], row["read end"]) == pytest.approx((1.06, 1.16))
    assert row["bind pass start"] == pytest.approx(1.25)  # the pass that bound, not the first


def test_request_durations_pair_each_end_with_the_oldest_start_of_its_request() -> None:
    spans = durations(read_trace(TRACE))
    assert spans == {"POST:/job/submit": pytest.approx([0.2]), "GET:/job/N": pytest.approx([0.1])}
