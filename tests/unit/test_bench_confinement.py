"""bench.confinement reads its run's output: the rate, and when Slurm started and ended each job."""

from __future__ import annotations

import math

from bench.confinement import parse_run

OUTPUT = """elapsed 10.0
job 1 2026-11-30T09:00:00 2026-11-30T09:00:01 2026-11-30T09:00:03
job 2 2026-11-30T09:00:00 2026-11-30T09:00:05 2026-11-30T09:00:06
job 3 2026-11-30T09:00:00 2026-11-30T09:00:03 2026-11-30T09:00:07
"""


def test_issue55_the_rate_is_jobs_over_the_seconds_from_first_submission_to_an_empty_queue() -> None:
    assert parse_run(OUTPUT, 50).rate == 5.0


def test_issue55_waiting_and_running_are_the_medians_of_slurms_own_times() -> None:
    """Catches start and end read from the wrong columns (waited 3 s, ran 2 s here)."""
    run = parse_run(OUTPUT, 3)
    assert (run.waited, run.ran) == (3.0, 2.0)


def test_issue55_a_job_slurm_gave_no_start_time_is_left_out() -> None:
    run = parse_run("elapsed 1.0\njob 9 2026-11-30T09:00:00 N/A N/A\n", 1)
    assert math.isnan(run.waited) and math.isnan(run.ran)
