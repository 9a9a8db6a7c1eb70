"""The cluster at a glance: nodes by state and the ones out of use, capacity allocated per
partition, the queue, and node failures with how long nodes stay out.

It answers the first question of anyone paged about a Slurm cluster, "are nodes failing and
are jobs waiting because of it?", from the operator's sunk_slurm_* families (which say who
took a node out) and Slurm's own slurm_* names (the same on 24.11 and on 25.11+, where
slurmctld serves them).
"""

from __future__ import annotations

from sunk_dev.dashboards.kit import (
    Dashboard,
    gauge_bars,
    graph,
    new_dashboard,
    node_table,
    q,
    row,
    sel,
)

UID = "sunk-cluster"


def _by_partition(metric: str) -> str:
    """One series per partition, whichever target serves it (the operator or slurmctld)."""
    return f"max by (partition) ({sel(metric)})"


def dashboard() -> Dashboard:
    return (
        new_dashboard(
            UID,
            "sunk / Cluster",
            "Slurm's nodes, capacity and queue for one sunk release, and how its nodes fail.",
        )
        .with_row(row("Nodes"))
        .with_panel(
            graph(
                "Nodes by state",
                "Slurm nodes counted by state as sinfo counts it (idle, allocated, mixed, draining, "
                "drained, down, unknown). A growing down or drained band means nodes are leaving "
                "service: read the table below for the reasons. Unknown nodes usually mean slurmctld "
                "has not heard from them since it started.",
                "short",
                [
                    q(
                        f"count by (state) (max by (node, state) ({sel('sunk_slurm_node_info')}))",
                        "{{state}}",
                    )
                ],
                stack=True,
            )
        )
        .with_panel(
            graph(
                "Node failures",
                "Nodes that went into DRAIN or DOWN in the past hour, by NodeSet and by who wrote the "
                "reason (operator: sunk's own drains while replacing members; health-check; slurm: "
                "Slurm itself, e.g. Not responding; admin: a person or another tool; none: no "
                "reason). Failures owned by slurm or none on many nodes at once point at the fabric, "
                "storage or slurmctld rather than at the nodes; an admin band is planned work.",
                "short",
                [
                    q(
                        "sum by (nodeset, reason_owner) "
                        f"(increase({sel('sunk_slurm_node_failures_total')}[1h]))",
                        "{{nodeset}} {{reason_owner}}",
                    )
                ],
                stack=True,
            )
        )
        .with_panel(
            node_table(
                "Nodes out of use",
                "Every down, drained or draining node: its NodeSet, state, who wrote the reason, the "
                "reason, and how long it has had this state and reason (counted within the "
                "dashboard's time range: a node out for longer shows the range's length; widen the "
                "range to see more). A reason owned by none or slurm needs a look at the node "
                "(kubectl describe its Pod, slurmd's log); operator-owned drains end on their own "
                "when the member's jobs finish; admin drains are someone's decision: ask before "
                "resuming.",
            )
        )
        .with_panel(
            graph(
                "How long nodes stay out (median over a day)",
                "The median time a node stayed drained, and stayed down, before it came back, by who "
                "wrote the reason, over the past day's returns (a node removed while out is not "
                "counted). Long operator drains mean members wait for long jobs before they are "
                "replaced; long slurm or none downs mean nobody is looking after failed nodes.",
                "s",
                [
                    q(
                        "histogram_quantile(0.5, sum by (le, reason_owner) "
                        f"(increase({sel('sunk_slurm_node_drain_duration_seconds_bucket')}[1d])))",
                        "drained, {{reason_owner}}",
                        "A",
                    ),
                    q(
                        "histogram_quantile(0.5, sum by (le, reason_owner) "
                        f"(increase({sel('sunk_slurm_node_down_duration_seconds_bucket')}[1d])))",
                        "down, {{reason_owner}}",
                        "B",
                    ),
                ],
                width=24,
            )
        )
        .with_row(row("Capacity"))
        .with_panel(
            graph(
                "CPUs allocated and total, per partition",
                "CPUs of each partition's nodes held by jobs, against all its nodes' CPUs. "
                "Allocated pinned at the total while jobs wait (Queue below) means the partition is "
                "full: grow its NodeSet or check its demand maximum. A total that drops means nodes "
                "left the partition.",
                "short",
                [
                    q(_by_partition("slurm_partition_nodes_cpus_alloc"), "{{partition}} allocated", "A"),
                    q(_by_partition("slurm_partition_cpus"), "{{partition}} total", "B"),
                ],
            )
        )
        .with_panel(
            graph(
                "GPUs allocated and total, per partition",
                "GPUs held by each partition's running jobs, against the GPUs of its nodes. GPUs "
                "idle while GPU jobs wait point at jobs asking for more than one node offers, or at "
                "drained GPU nodes (table above).",
                "short",
                [
                    q(_by_partition("slurm_partition_jobs_gpus_alloc"), "{{partition}} allocated", "A"),
                    q(_by_partition("slurm_partition_gpus"), "{{partition}} total", "B"),
                ],
            )
        )
        .with_panel(
            gauge_bars(
                "Allocated now, per partition",
                "The share of each partition's CPUs and GPUs that jobs hold now. Near 100% with jobs "
                "waiting: the partition needs more nodes. Low while jobs wait for Resources: the "
                "waiting jobs ask for a shape the free capacity does not have.",
                "percent",
                [
                    q(
                        f"100 * {_by_partition('slurm_partition_nodes_cpus_alloc')} "
                        f"/ ({_by_partition('slurm_partition_cpus')} > 0)",
                        "{{partition}} CPUs",
                        "A",
                    ),
                    q(
                        f"100 * {_by_partition('slurm_partition_jobs_gpus_alloc')} "
                        f"/ ({_by_partition('slurm_partition_gpus')} > 0)",
                        "{{partition}} GPUs",
                        "B",
                    ),
                ],
            )
        )
        .with_panel(
            graph(
                "Jobs running and pending, per partition",
                "Jobs running and pending in each partition (a job pending in several partitions "
                "counts in each). Pending growing while running stays flat means the partition "
                "does not keep up: see the reasons below.",
                "short",
                [
                    q(_by_partition("slurm_partition_jobs_running"), "{{partition}} running", "A"),
                    q(_by_partition("slurm_partition_jobs_pending"), "{{partition}} pending", "B"),
                ],
            )
        )
        .with_row(row("Queue"))
        .with_panel(
            graph(
                "Pending jobs by reason",
                "Pending jobs by Slurm's pending reason, all partitions together. Resources and "
                "Priority are a busy cluster; ReqNodeNotAvail, NodeDown, PartitionDown or "
                "BadConstraints mean jobs that cannot start until someone acts (a drained node they "
                "asked for, a partition set down, a feature no node has). Other gathers every "
                "reason outside the common set.",
                "short",
                [q(f"sum by (reason) ({sel('sunk_slurm_jobs_pending')})", "{{reason}}")],
                stack=True,
            )
        )
        .with_panel(
            graph(
                "Oldest pending job, per partition",
                "How long the oldest pending job of each partition has waited since submission "
                "(no line: nothing waits). A line that only climbs means a job that will never "
                "start as asked: find it with `squeue -p <partition> -t PD --sort=V` and read its "
                "reason.",
                "s",
                [
                    q(
                        f"max by (partition) ({sel('sunk_slurm_oldest_pending_job_age_seconds')})",
                        "{{partition}}",
                    )
                ],
            )
        )
    )
