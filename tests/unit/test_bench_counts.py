"""The benchmark's per-Pod call counts (issue #55): a count the scheduler's metrics did not
give (a machine a thousand ending jobs keep busy) means no figure, never a wrong one."""

from __future__ import annotations

from bench.scheduler_metrics import calls_per_pod


def test_calls_per_pod_are_what_was_spent_between_the_two_counts() -> None:
    assert calls_per_pod({"GET /jobs": 2.0}, {"GET /jobs": 12.0, "POST /job/submit": 100.0}, 100) == {
        "POST /job/submit": 1.0,
        "GET /jobs": 0.1,
    }


def test_a_count_that_could_not_be_read_gives_no_figures_rather_than_the_whole_total() -> None:
    """The bug this catches: the count before a phase lost, and every call the scheduler
    ever made reported as made in that phase."""
    assert calls_per_pod(None, {"hook terminating_wait": 11540.0}, 1000) == {}
    assert calls_per_pod({"hook started": 1000.0}, None, 1000) == {}
