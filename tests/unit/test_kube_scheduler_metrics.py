"""Issue #50: the Pod scheduler also speaks kube-scheduler's metric names, so dashboards and
alerts written for Kubernetes' scheduler read Pods sunk places, beside sunk's own families."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import generate_latest

from sunk.metrics import REGISTRY
from sunk.metrics import kube_scheduler as ks
from sunk.runtime.queue import WorkQueue


def _value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _kube_attempts(result: str) -> float:
    return _value("scheduler_schedule_attempts_total", result=result)


def test_issue50_the_three_kube_scheduler_families_are_served_from_the_start() -> None:
    """A dashboard's query finds its series (at zero) before the first Pod comes."""
    text = generate_latest(REGISTRY).decode()
    for queue in ("active", "backoff", "unschedulable"):
        assert f'scheduler_pending_pods{{queue="{queue}"}}' in text
    for result in ("scheduled", "unschedulable", "error"):
        assert f'scheduler_schedule_attempts_total{{result="{result}"}}' in text
    assert "scheduler_pod_scheduling_sli_duration_seconds_bucket" in text


def test_issue50_a_bound_pod_is_a_scheduled_attempt_and_still_sunks_bound_step() -> None:
    scheduled, bound = _kube_attempts("scheduled"), _value("sunk_schedule_attempts_total", result="bound")
    ks.attempt("bound")
    assert _kube_attempts("scheduled") == scheduled + 1
    assert _value("sunk_schedule_attempts_total", result="bound") == bound + 1


@pytest.mark.parametrize("step", ["refused", "rejected_by_slurm", "placement_rejected"])
def test_issue50_a_pod_slurm_or_the_policy_will_not_place_is_unschedulable(step: str) -> None:
    before = _kube_attempts("unschedulable")
    ks.attempt(step)
    assert _kube_attempts("unschedulable") == before + 1


def test_issue50_a_failed_pass_is_an_error_attempt() -> None:
    before = _kube_attempts("error")
    ks.attempt("error")
    assert _kube_attempts("error") == before + 1


@pytest.mark.parametrize("step", ["submitted", "adopted", "readopted"])
def test_issue50_steps_that_are_not_results_count_only_in_sunks_family(step: str) -> None:
    kube = {r: _kube_attempts(r) for r in ks.RESULTS}
    sunk = _value("sunk_schedule_attempts_total", result=step)
    ks.attempt(step, 3)
    assert {r: _kube_attempts(r) for r in ks.RESULTS} == kube
    assert _value("sunk_schedule_attempts_total", result=step) == sunk + 3


def test_issue50_creation_to_binding_is_observed_in_both_histograms() -> None:
    sli = _value("scheduler_pod_scheduling_sli_duration_seconds_count")
    ours = _value("sunk_pod_create_to_bound_seconds_count")
    under_a_second = _value("scheduler_pod_scheduling_sli_duration_seconds_bucket", le="1.28")
    ks.bound_after(0.9)
    assert _value("scheduler_pod_scheduling_sli_duration_seconds_count") == sli + 1
    assert _value("sunk_pod_create_to_bound_seconds_count") == ours + 1
    assert _value("scheduler_pod_scheduling_sli_duration_seconds_bucket", le="1.28") == under_a_second + 1


def test_issue50_pending_pods_are_set_per_queue_and_gated_is_not_reported() -> None:
    ks.pending_pods(active=4, backoff=2, unschedulable=7)
    assert {q: _value("scheduler_pending_pods", queue=q) for q in ("active", "backoff", "unschedulable")} == {
        "active": 4.0,
        "backoff": 2.0,
        "unschedulable": 7.0,
    }
    assert REGISTRY.get_sample_value("scheduler_pending_pods", {"queue": "gated"}) is None


async def test_issue50_a_key_waiting_out_its_backoff_counts_as_waiting_not_queued() -> None:
    """The backoff queue: keys retried after a failure, until their delay is over."""
    queue = WorkQueue(base_delay=0.01)
    queue.add("a")
    assert (len(queue), queue.waiting()) == (1, 0)
    key = await queue.get()
    queue.done(key)
    queue.retry(key)
    assert (len(queue), queue.waiting()) == (0, 1)
    await asyncio.sleep(0.05)
    assert (len(queue), queue.waiting()) == (1, 0)
