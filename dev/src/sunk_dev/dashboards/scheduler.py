"""sunk's Pod scheduler: Pods waiting by queue, scheduling attempts by result, how long a Pod
takes from creation to binding, and the Pods whose placeholder job Slurm keeps pending.

The first three panels read kube-scheduler's own metric names, which sunk's scheduler also
serves, so a person who knows Kubernetes' scheduler dashboards reads these the same way; the
rest are sunk's own families, which say why Slurm keeps a Pod waiting.
"""

from __future__ import annotations

from sunk_dev.dashboards.kit import (
    Dashboard,
    graph,
    histogram_heatmap,
    new_dashboard,
    q,
    row,
    sel,
)

UID = "sunk-pod-scheduler"
POD_CONTROLLERS = 'controller=~"pods|slurm-nodes"'


def dashboard() -> Dashboard:
    return (
        new_dashboard(
            UID,
            "sunk / Pod scheduler",
            "sunk's Pod scheduler: Pods waiting, attempts, time to binding, and Pods Slurm keeps pending.",
        )
        .with_row(row("Pods waiting"))
        .with_panel(
            graph(
                "Pending Pods by queue",
                "Pods the scheduler has yet to place: active (queued for a pass), backoff (waiting "
                "before their next pass, after a failure or a check due later), unschedulable (their "
                "placeholder job is pending in Slurm). Unschedulable Pods wait for Slurm, see the "
                "reasons beside; a backoff queue that does not drain means passes keep failing "
                "(the attempts panel).",
                "short",
                [q(f"max by (queue) ({sel('scheduler_pending_pods')})", "{{queue}}")],
                stack=True,
            )
        )
        .with_panel(
            graph(
                "Pods pending in Slurm, by reason",
                "Pods whose placeholder job Slurm keeps pending, by Slurm's reason. Resources or "
                "Priority: the partition is full, see the Cluster dashboard's capacity; "
                "ReqNodeNotAvail or BadConstraints: the Pod asks for nodes or features the cluster "
                "does not offer, fix the Pod's request.",
                "short",
                [q(f"max by (reason) ({sel('sunk_pods_pending_in_slurm')})", "{{reason}}")],
                stack=True,
            )
        )
        .with_row(row("Attempts and latency"))
        .with_panel(
            graph(
                "Scheduling attempts by result",
                "Attempts per second by result: scheduled (bound), unschedulable (refused by "
                "policy or Slurm, or Slurm's placement did not suit the Pod), error (the pass "
                "failed). A steady error rate means the scheduler cannot reach the API server or "
                "slurmrestd: read its log.",
                "ops",
                [
                    q(
                        "sum by (result) "
                        f"(rate({sel('scheduler_schedule_attempts_total')}[$__rate_interval]))",
                        "{{result}}",
                    )
                ],
                stack=True,
            )
        )
        .with_panel(
            graph(
                "Pod creation to binding",
                "The median and 99th percentile time from a Pod's creation to its binding (Pods "
                "bound in each interval; kube-scheduler's SLI). It includes time the Pod's job "
                "waited in Slurm's queue, so it rises with a busy cluster; a p50 that rises with "
                "the cluster idle means the scheduler itself is slow.",
                "s",
                [
                    q(
                        f"histogram_quantile({quantile}, sum by (le) "
                        f"(rate({sel('scheduler_pod_scheduling_sli_duration_seconds_bucket')}"
                        "[$__rate_interval])))",
                        label,
                        ref,
                    )
                    for quantile, label, ref in ((0.5, "p50", "A"), (0.99, "p99", "B"))
                ],
            )
        )
        .with_panel(
            histogram_heatmap(
                "Pod creation to binding, every Pod",
                "Every bound Pod's time from creation to binding (sunk's own histogram), as a "
                "heatmap: each column is an interval, each cell the Pods bound within that time. "
                "A band that moves up means Pods wait longer; two bands usually mean two kinds of "
                "Pod, those that find room at once and those that wait for Slurm.",
                q(
                    "sum by (le) "
                    f"(increase({sel('sunk_pod_create_to_bound_seconds_bucket')}[$__rate_interval]))"
                ),
            )
        )
        .with_panel(
            graph(
                "Controller passes by result",
                "Passes per second of the scheduler's Pod and Slurm-node controllers, by result. "
                "Errors are retried with back-off; a steady error rate on pods means Pods are not "
                "being placed: the scheduler's log names them.",
                "ops",
                [
                    q(
                        "sum by (controller, result) "
                        f"(rate({sel('sunk_reconcile_total', POD_CONTROLLERS)}[$__rate_interval]))",
                        "{{controller}} {{result}}",
                    )
                ],
            )
        )
    )
