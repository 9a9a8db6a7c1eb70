"""Prometheus metrics and the health probes (R8.1)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry()

ATTEMPTS = Counter(
    "sunk_schedule_attempts_total",
    "Scheduling steps taken, by result",
    ["result"],
    registry=REGISTRY,
)
CREATE_TO_BOUND = Histogram(
    "sunk_pod_create_to_bound_seconds",
    "Time from Pod creation to its binding",
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800),
    registry=REGISTRY,
)
SUBMIT_TO_STARTED = Histogram(
    "sunk_job_submit_to_started_seconds",
    "Time from placeholder job submission until its script marked it started",
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800),
    registry=REGISTRY,
)
SLURM_LATENCY = Histogram(
    "sunk_slurm_api_request_seconds",
    "slurmrestd request latency, by endpoint",
    ["endpoint"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
    registry=REGISTRY,
)
SLURM_ERRORS = Counter(
    "sunk_slurm_api_errors_total",
    "slurmrestd requests that failed, by endpoint and kind",
    ["endpoint", "kind"],
    registry=REGISTRY,
)
PACKING = Counter(
    "sunk_pack_placements_total",
    "--placement=pack: jobs submitted leaving idle nodes out (packed), and packed jobs given "
    "them back after waiting (widened)",
    ["result"],
    registry=REGISTRY,
)
QUEUE_DEPTH = Gauge("sunk_queue_depth", "Pods waiting in the work queue", registry=REGISTRY)
PENDING_IN_SLURM = Gauge(
    "sunk_pods_pending_in_slurm",
    "Pods whose placeholder job is pending, by Slurm's reason",
    ["reason"],
    registry=REGISTRY,
)
HOOK_CALLS = Counter("sunk_hook_calls_total", "Hooks API calls, by outcome", ["outcome"], registry=REGISTRY)
HOOK_TERMINATING_WAIT = Histogram(
    "sunk_hook_terminating_wait_seconds",
    "Placeholders' terminating calls, by answer (gone, terminating, not_its_pod, not_leader, error): "
    "how long the job had been asking for its Pod to go when it got this answer",
    ["answer"],
    buckets=(0.1, 0.5, 1, 2, 5, 10, 15, 20, 30, 60, 120, 600),
    registry=REGISTRY,
)
LEADER = Gauge("sunk_leader", "1 while this replica holds the leader Lease", registry=REGISTRY)
TASK_RESTARTS = Counter(
    "sunk_task_restarts_total",
    "Background tasks (pollers, informers, workers) that failed or returned and were started again",
    ["task"],
    registry=REGISTRY,
)
# Every controller's passes, counted by the runtime's worker loop (sunk.runtime.controller):
# a controller that keeps failing, or has not succeeded for long while work waits, is stuck.
RECONCILES = Counter(
    "sunk_reconcile_total",
    "Controller passes, by controller and result (success, error)",
    ["controller", "result"],
    registry=REGISTRY,
)
RECONCILE_SECONDS = Histogram(
    "sunk_reconcile_duration_seconds",
    "How long a controller's pass took, by controller",
    ["controller"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
RECONCILE_LAST_SUCCESS = Gauge(
    "sunk_reconcile_last_success_timestamp_seconds",
    "When a controller's last pass succeeded, epoch seconds",
    ["controller"],
    registry=REGISTRY,
)
