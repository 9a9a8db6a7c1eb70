"""R7 checks, config errors and structured logs: the operator-facing pure parts."""

from __future__ import annotations

import argparse
import json
import logging

import pytest

from sunk.flags import parse_duration
from sunk.logs import JsonFormatter
from sunk.scheduler import config
from sunk.scheduler.app import pod_field_selector
from sunk.scheduler.decide.submission import static_cpu_problem
from sunk.slurm.scontrol import memory_oversubscription_warning


def guaranteed(cpu: str) -> dict[str, object]:
    return {
        "status": {"qosClass": "Guaranteed"},
        "spec": {"containers": [{"resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
    }


def test_r7_2_guaranteed_pods_with_whole_cpus_are_flagged() -> None:
    assert "static CPU manager" in (static_cpu_problem(guaranteed("4")) or "")


def test_r7_2_fractional_cpus_or_burstable_pods_are_fine() -> None:
    assert static_cpu_problem(guaranteed("3500m")) is None
    burstable = guaranteed("4")
    burstable["status"] = {"qosClass": "Burstable"}
    assert static_cpu_problem(burstable) is None


@pytest.mark.parametrize("select", ["CR_Core_Memory", "CR_CPU_Memory", "CR_Socket_Memory,OTHER_CONS_RES"])
def test_r7_3_memory_as_a_consumable_resource_is_fine(select: str) -> None:
    assert memory_oversubscription_warning(select) is None


@pytest.mark.parametrize("select", ["CR_Core", "CR_CPU", ""])
def test_r7_3_memory_oversubscription_is_warned_about(select: str) -> None:
    assert "memory is not a consumable resource" in (memory_oversubscription_warning(select) or "")


def parse(*argv: str) -> config.Config:
    parser = argparse.ArgumentParser()
    config.add_arguments(parser)
    return config.from_arguments(parser.parse_args(list(argv)))


def test_r1_2_flags_have_the_reference_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SUNK_SLURM_KILL_WAIT", "SUNK_HOOKS_SECRET", "SUNK_WATCH_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    cfg = parse(
        "--scheduler-name=s",
        "--slurm-api-base=http://x",
        "--slurm-auth-token=t",
        "--hooks-insecure-http=true",
    )
    assert cfg.slurm_kill_wait_s == 30
    assert cfg.hooks_bind == ("0.0.0.0", 8000)
    assert cfg.metrics_bind == ("0.0.0.0", 8080)
    assert cfg.health_bind == ("0.0.0.0", 8081)
    assert cfg.watch_namespaces == ()


BASE = (
    "--scheduler-name=s",
    "--slurm-api-base=http://x",
    "--slurm-auth-token=t",
    "--hooks-insecure-http=true",
)


def test_issue38_pods_of_ignored_namespaces_are_left_out_of_the_watch() -> None:
    """Catches --ignore-namespace being read but not reaching the Pod informer's selector."""
    cfg = parse(*BASE, "--ignore-namespace=slurm, keys")
    assert cfg.ignore_namespaces == ("slurm", "keys")
    selector = pod_field_selector(cfg)
    assert selector == "spec.schedulerName=s,metadata.namespace!=slurm,metadata.namespace!=keys"


def test_issue38_a_namespace_both_watched_and_ignored_is_refused() -> None:
    with pytest.raises(ValueError, match="both name slurm"):
        parse(*BASE, "--watch-namespace=apps,slurm", "--ignore-namespace=slurm")


def test_r1_2_the_token_never_appears_in_the_config_repr() -> None:
    cfg = parse(
        "--scheduler-name=s",
        "--slurm-api-base=http://x",
        "--slurm-auth-token=s3cret-token",
        "--hooks-insecure-http=true",
    )
    assert "s3cret-token" not in repr(cfg)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--slurm-api-base=http://x", "--slurm-auth-token=t"], "--scheduler-name is required"),
        (["--scheduler-name=s", "--slurm-auth-token=t"], "--slurm-api-base is required"),
        (
            [
                "--scheduler-name=s",
                "--slurm-api-base=http://x",
                "--slurm-auth-token=t",
                "--slurm-kill-wait=soon",
            ],
            "not a duration",
        ),
        (
            [
                "--scheduler-name=s",
                "--slurm-api-base=http://x",
                "--slurm-auth-token=t",
                "--components=everything",
            ],
            "--components",
        ),
        (
            ["--scheduler-name=s", "--slurm-api-base=http://x", "--slurm-auth-token=t"],
            "the hooks API serves TLS: give --hooks-tls-cert-file and --hooks-tls-key-file",
        ),
        (
            [
                "--scheduler-name=s",
                "--slurm-api-base=http://x",
                "--slurm-auth-token=t",
                "--hooks-tls-cert-file=/c",
            ],
            "go together",
        ),
        (
            [
                "--scheduler-name=s",
                "--slurm-api-base=http://x",
                "--slurm-auth-token=t",
                "--hooks-insecure-http=true",
                "--leader-elect=yes",
            ],
            "--leader-elect must be true or false, not 'yes'",
        ),
    ],
)
def test_r1_2_bad_flags_say_what_to_fix(
    argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("SUNK_SCHEDULER_NAME", "SUNK_SLURM_API_BASE", "SUNK_SLURM_AUTH_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ValueError, match=message):
        parse(*argv)


@pytest.mark.parametrize(("text", "seconds"), [("30s", 30), ("1m30s", 90), ("500ms", 0.5), ("45", 45)])
def test_r1_2_kill_wait_takes_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_r8_1_json_logs_are_one_object_per_line() -> None:
    record = logging.LogRecord("sunk.x", logging.WARNING, __file__, 1, "bound %s", ("ns/p",), None)
    entry = json.loads(JsonFormatter().format(record))
    assert entry["level"] == "warning" and entry["msg"] == "bound ns/p" and entry["logger"] == "sunk.x"


def test_r8_2_a_listing_older_than_a_submit_does_not_forget_the_job() -> None:

    from sunk.scheduler.jobs import JobIndex
    from sunk.scheduler.translate import PodRef, job_name, pod_of_job_name
    from tests.fakes.clock import FakeClock

    clock = FakeClock()
    index = JobIndex(lambda j: pod_of_job_name(j.name, "sunk"), clock)
    ref = PodRef("ns", "p", "uid-1")
    listed_at = clock.monotonic()  # the listing is requested first…
    index.expect_submitted(ref, 7, job_name(ref, "sunk"), "")  # …the submit lands before its answer…
    index.replace([], listed_at)  # …which does not contain the job yet
    found = index.get(7)
    assert found is not None and found[1].pending
    index.replace([], clock.monotonic())  # a listing requested later is authoritative
    assert index.get(7) is None


def test_r9_1_a_cancelled_gang_counts_as_cancelled_until_the_next_listing() -> None:

    from sunk.scheduler.jobs import JobIndex
    from sunk.scheduler.translate import PodRef, job_name, pod_of_job_name
    from sunk.slurm.models import SlurmJob
    from tests.fakes.clock import FakeClock

    clock = FakeClock()
    index = JobIndex(lambda j: pod_of_job_name(j.name, "sunk"), clock)
    refs = [PodRef("ns", f"m{i}", f"uid-{i}") for i in range(2)]
    jobs = [
        SlurmJob(5 + i, job_name(r, "sunk"), "PENDING", "None", (), "", 0, 0, "b", None, None, het_job_id=5)
        for i, r in enumerate(refs)
    ]
    index.replace(jobs, clock.monotonic())
    index.expect_cancelled(5)
    assert [index.get(j.job_id)[1].state for j in jobs] == ["CANCELLED", "CANCELLED"]  # type: ignore[index]
    index.expect_excluded(5, ("sn-1",))
    assert index.get(5)[1].excluded_nodes == ("sn-1",)  # type: ignore[index]


def test_r8_2_jobs_are_found_by_pod_name_across_listings_and_records() -> None:

    from sunk.scheduler.jobs import JobIndex
    from sunk.scheduler.translate import PodRef, job_name, pod_of_job_name
    from sunk.slurm.models import SlurmJob
    from tests.fakes.clock import FakeClock

    def job(job_id: int, ref: PodRef) -> SlurmJob:
        return SlurmJob(job_id, job_name(ref, "sunk"), "RUNNING", "None", (), "", 0, 0, "batch", None, None)

    clock = FakeClock()
    index = JobIndex(lambda j: pod_of_job_name(j.name, "sunk"), clock)
    old, new = PodRef("ns", "web", "uid-old"), PodRef("ns", "web", "uid-new")
    index.replace([job(1, old), job(2, PodRef("ns", "other", "u"))], clock.monotonic())
    index.observe(new, job(3, new))
    assert sorted(j.job_id for _, j in index.for_key("ns", "web")) == [1, 3]
    index.replace([job(3, new)], clock.monotonic())
    assert [j.job_id for _, j in index.for_key("ns", "web")] == [3]
    assert index.for_key("ns", "other") == []


def test_r8_2_a_listing_older_than_a_read_does_not_take_a_job_back_to_pending() -> None:
    """A listing requested before a job started, answered late, must not replace the read
    that saw it RUNNING: the bound Pod would look requeued and lose its job."""
    from dataclasses import replace

    from sunk.scheduler.jobs import JobIndex
    from sunk.scheduler.translate import PodRef, job_name, pod_of_job_name
    from sunk.slurm.models import SlurmJob
    from tests.fakes.clock import FakeClock

    clock = FakeClock()
    index = JobIndex(lambda j: pod_of_job_name(j.name, "sunk"), clock)
    ref = PodRef("ns", "p", "uid-1")
    pending = SlurmJob(7, job_name(ref, "sunk"), "PENDING", "None", (), "", 0, 0, "batch", None, None)
    listed_at = clock.monotonic()  # the listing is requested while the job still waits…
    index.observe(
        ref, replace(pending, state="RUNNING", nodes=("sn-1",), started=True)
    )  # …a read sees it run…
    index.replace([pending], listed_at)  # …and the old listing arrives
    found = index.get(7)
    assert found is not None and found[1].state == "RUNNING"


def test_r8_2_a_reused_job_id_leaves_its_old_pods_key() -> None:
    """slurmctld restarted without its state hands job ID 40 to another Pod: the old Pod's
    key must no longer list it, or cleaning up the old Pod would cancel the new Pod's job."""

    from sunk.scheduler.jobs import JobIndex
    from sunk.scheduler.translate import PodRef, job_name, pod_of_job_name
    from sunk.slurm.models import SlurmJob
    from tests.fakes.clock import FakeClock

    def job(ref: PodRef) -> SlurmJob:
        return SlurmJob(40, job_name(ref, "sunk"), "RUNNING", "None", (), "", 0, 0, "batch", None, None)

    clock = FakeClock()
    index = JobIndex(lambda j: pod_of_job_name(j.name, "sunk"), clock)
    old, new = PodRef("ns", "old", "uid-old"), PodRef("ns", "new", "uid-new")
    index.replace([job(old)], clock.monotonic())
    index.observe(new, job(new))
    assert index.for_key("ns", "old") == []
    assert [r for r, _ in index.for_key("ns", "new")] == [new]
