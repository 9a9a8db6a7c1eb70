"""slurmctld and its queue: the main and backfill schedulers' cycles and queues, the RPC agent
and slurmdbd queues, server threads, jobs submitted, started and ended, and the health of
the operator's listing of Slurm.

slurmctld keeps its cycle times in microseconds; the panels divide by 1e6 so every time on
every sunk dashboard reads in seconds. The job counters are gauges that Slurm resets (at
midnight, or `sdiag -r`): rate() treats the drop as a counter reset, which is what it is.
"""

from __future__ import annotations

from sunk_dev.dashboards.kit import Dashboard, graph, new_dashboard, q, row, sel

UID = "sunk-slurm-controller"
MICROSECONDS = "1e6"  # slurmctld keeps cycle times in µs


def _one(metric: str) -> str:
    """The cluster's one series of `metric`, whichever target serves it."""
    return f"max({sel(metric)})"


def _seconds(metric: str) -> str:
    return f"{_one(metric)} / {MICROSECONDS}"


def _per_minute(metric: str) -> str:
    return f"60 * max(rate({sel(metric)}[$__rate_interval]))"


def dashboard() -> Dashboard:
    return (
        new_dashboard(
            UID,
            "sunk / Slurm controller and queue",
            "slurmctld's schedulers, queues and threads, the jobs it takes in and lets go, and "
            "whether sunk's operator can list Slurm.",
        )
        .with_row(row("Schedulers"))
        .with_panel(
            graph(
                "Main scheduler cycle",
                "The main scheduler's last cycle and its mean since the statistics were reset, in "
                "seconds. Cycles of several seconds stall every RPC that waits for slurmctld's "
                "locks (sbatch and squeue hang): look at the queue length beside it and at "
                "SchedulerParameters such as default_queue_depth and max_sched_time.",
                "s",
                [
                    q(_seconds("slurm_schedule_cycle_last"), "last", "A"),
                    q(_seconds("slurm_sched_mean_cycle"), "mean", "B"),
                ],
                width=8,
            )
        )
        .with_panel(
            graph(
                "Backfill cycle",
                "The backfill scheduler's last cycle and its longest since the statistics were "
                "reset, in seconds. Long cycles are normal with deep queues; a last cycle close to "
                "bf_interval means backfill cannot keep up: lower bf_max_job_test or raise "
                "bf_interval.",
                "s",
                [
                    q(_seconds("slurm_bf_cycle_last"), "last", "A"),
                    q(_seconds("slurm_bf_cycle_max"), "longest", "B"),
                ],
                width=8,
            )
        )
        .with_panel(
            graph(
                "Since the last backfill cycle",
                "Seconds since the last backfill cycle ended (no line: none since slurmctld "
                "started). It should stay near bf_interval (30 s by default); a line that climbs "
                "means backfill is stuck or slurmctld is too busy to run it, and jobs that could "
                "start early wait.",
                "s",
                [q(f"time() - ({_one('slurm_bf_when_last_cycle')} > 0)", "since last backfill")],
                width=8,
            )
        )
        .with_panel(
            graph(
                "Scheduler queue lengths",
                "Jobs the main scheduler's and the backfill scheduler's last cycles looked at. A "
                "backfill queue far longer than the main one is the usual picture; both growing "
                "with cycle times means the queue outgrows the schedulers' budget.",
                "short",
                [
                    q(_one("slurm_schedule_queue_len"), "main", "A"),
                    q(_one("slurm_bf_queue_len"), "backfill", "B"),
                ],
            )
        )
        .with_panel(
            graph(
                "Backfill running",
                "1 while a backfill cycle runs. Always 1 means cycles run back to back (see the "
                "backfill cycle panel); always 0 with jobs pending means backfill is not running "
                "(SchedulerType, or slurmctld too busy).",
                "short",
                [q(_one("slurm_bf_active"), "active")],
            )
        )
        .with_row(row("Queues and threads"))
        .with_panel(
            graph(
                "RPC agent queue",
                "RPCs slurmctld has queued to send to nodes, and the agent threads sending them. A "
                "queue that grows and stays means nodes that do not answer (see Nodes out of use on "
                "the Cluster dashboard) or a network problem between slurmctld and slurmd.",
                "short",
                [
                    q(_one("slurm_agent_queue_size"), "queued RPCs", "A"),
                    q(_one("slurm_agent_cnt"), "agent threads", "B"),
                ],
                width=8,
            )
        )
        .with_panel(
            graph(
                "slurmdbd queue",
                "Messages slurmctld holds for slurmdbd (job starts and ends, node events). It grows "
                "while slurmdbd or its database is down or slow; past MaxDBDMsgs slurmctld drops "
                "them and accounting is lost: check the accounting Pod and MariaDB.",
                "short",
                [q(_one("slurm_slurmdbd_queue_size"), "messages")],
                width=8,
            )
        )
        .with_panel(
            graph(
                "Server threads",
                "slurmctld threads serving RPCs now. It nears its limit (256) when clients flood "
                "slurmctld, often a script calling squeue in a loop, or when a slow lock holder "
                "(a long scheduler cycle) keeps threads waiting.",
                "short",
                [q(_one("slurm_server_thread_cnt"), "threads")],
                width=8,
            )
        )
        .with_row(row("Jobs"))
        .with_panel(
            graph(
                "Jobs submitted, started and ended",
                "Jobs per minute that slurmctld accepted, started, completed, had cancelled and saw "
                "fail. Failures rising with starts flat point at nodes (prolog errors, a bad image): "
                "see node failures on the Cluster dashboard; submissions far above starts build "
                "the queue.",
                "cpm",
                [
                    q(_per_minute(f"slurm_sdiag_jobs_{kind}"), kind, ref)
                    for kind, ref in (
                        ("submitted", "A"),
                        ("started", "B"),
                        ("completed", "C"),
                        ("canceled", "D"),
                        ("failed", "E"),
                    )
                ],
            )
        )
        .with_panel(
            graph(
                "Jobs by state",
                "Jobs slurmctld holds by state: pending, running, completing, and those that ended "
                "badly and are still remembered (MinJobAge). Completing jobs that stay mean nodes "
                "that cannot end jobs (their epilog, or a process that will not die).",
                "short",
                [
                    q(_one(f"slurm_jobs_{state}"), state, ref)
                    for state, ref in (
                        ("pending", "A"),
                        ("running", "B"),
                        ("completing", "C"),
                        ("failed", "D"),
                        ("node_failed", "E"),
                        ("outofmemory", "F"),
                        ("timeout", "G"),
                    )
                ],
            )
        )
        .with_row(row("sunk's listing of Slurm"))
        .with_panel(
            graph(
                "Listing answered",
                "1 when the operator's last listing of each kind (nodes, partitions, jobs, diag) "
                "answered and is recent, else 0. At 0 the Slurm panels go blank rather than show "
                "zeros: check slurmrestd and slurmctld, and the operator's log for the error.",
                "short",
                [q(f"max by (collector) ({sel('sunk_slurm_collector_up')})", "{{collector}}")],
                width=8,
                minimum=None,
            )
        )
        .with_panel(
            graph(
                "Listing errors",
                "Failed listings of Slurm per kind in each interval. A steady rate means the "
                "operator cannot read Slurm (slurmrestd down, a token refused, a version it does not "
                "speak); the operator's log says which.",
                "short",
                [
                    q(
                        "sum by (collector) "
                        f"(increase({sel('sunk_slurm_collector_errors_total')}[$__rate_interval]))",
                        "{{collector}}",
                    )
                ],
                width=8,
            )
        )
        .with_panel(
            graph(
                "Listing duration",
                "How long the operator's last listing of Slurm took, all four calls. Growing towards "
                "the poll interval (5 s) means slurmrestd or slurmctld answers slowly: compare with "
                "the scheduler cycle above.",
                "s",
                [q(_one("sunk_slurm_collection_duration_seconds"), "listing")],
                width=8,
            )
        )
    )
