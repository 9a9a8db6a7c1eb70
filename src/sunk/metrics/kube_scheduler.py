"""kube-scheduler's metric names for sunk's Pod scheduler, kept beside sunk's own.

Dashboards and alerts written for Kubernetes' scheduler (the kubernetes-mixin's, most
clusters' own) read these three families; with the same names and label values they work
for Pods sunk places too, and sunk's own families keep the detail they cannot hold.

How sunk's states map (docs/operations.md, Metrics):
- scheduler_pending_pods{queue}: `active` is Pods queued for a scheduling pass; `backoff`,
  Pods waiting out a delay before their next pass (after a failed pass, or a check due
  later); `unschedulable`, Pods whose placeholder job Slurm holds pending (no room yet).
  `gated` is not reported: sunk does not keep Pods with scheduling gates in a queue of its own.
- scheduler_schedule_attempts_total{result}: `scheduled` when a Pod is bound;
  `unschedulable` when it is refused (policy, Slurm rejecting its job) or Slurm's placement
  does not suit it (a new job is submitted); `error` when a pass fails. Submitting and
  adopting a job are steps, not results, and count only in sunk_schedule_attempts_total.
- scheduler_pod_scheduling_sli_duration_seconds: from the Pod's creation to its binding,
  without kube-scheduler's `attempts` label (sunk does not count attempts per Pod).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from sunk.metrics import ATTEMPTS, CREATE_TO_BOUND, REGISTRY

QUEUES = ("active", "backoff", "unschedulable")
RESULTS = ("scheduled", "unschedulable", "error")
# sunk's step results (sunk_schedule_attempts_total) that are kube-scheduler attempt results.
KUBE_RESULT = {
    "bound": "scheduled",
    "refused": "unschedulable",
    "rejected_by_slurm": "unschedulable",
    "placement_rejected": "unschedulable",
    "error": "error",
}

PENDING_PODS = Gauge(
    "scheduler_pending_pods",
    "Pods waiting to be placed, by queue: active (queued for a pass), backoff (waiting before the "
    "next pass), unschedulable (their Slurm job is pending)",
    ["queue"],
    registry=REGISTRY,
)
SCHEDULE_ATTEMPTS = Counter(
    "scheduler_schedule_attempts_total",
    "Scheduling attempts, by result: scheduled (bound), unschedulable (refused, or Slurm's "
    "placement did not suit the Pod), error (the pass failed)",
    ["result"],
    registry=REGISTRY,
)
SLI_DURATION = Histogram(
    "scheduler_pod_scheduling_sli_duration_seconds",
    "Time from a Pod's creation to its binding",
    buckets=tuple(0.01 * 2**i for i in range(20)),
    registry=REGISTRY,
)
for _queue in QUEUES:
    PENDING_PODS.labels(_queue)
for _result in RESULTS:
    SCHEDULE_ATTEMPTS.labels(_result)


def attempt(result: str, count: int = 1) -> None:
    """Count a step of sunk's (sunk_schedule_attempts_total), and the kube-scheduler attempt
    result it stands for, if any."""
    ATTEMPTS.labels(result).inc(count)
    kube = KUBE_RESULT.get(result)
    if kube is not None:
        SCHEDULE_ATTEMPTS.labels(kube).inc(count)


def bound_after(seconds: float) -> None:
    """A Pod bound `seconds` after it was created: both histograms observe it."""
    CREATE_TO_BOUND.observe(seconds)
    SLI_DURATION.observe(seconds)


def pending_pods(*, active: int, backoff: int, unschedulable: int) -> None:
    PENDING_PODS.labels("active").set(active)
    PENDING_PODS.labels("backoff").set(backoff)
    PENDING_PODS.labels("unschedulable").set(unschedulable)
