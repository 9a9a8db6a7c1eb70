"""One NodeSet: its members by Slurm state, its size against what it should be, the roll-outs
and drains under way and how long it has been not Ready or not up to date, and the NodeSet
controller's own passes.

This is the dashboard for "is the operator stuck?": a roll-out held by a running job, a
drain that never ends or a controller that keeps failing shows as a number that grows, which
no peer's dashboards can show because no peer exports the operator's work.
"""

from __future__ import annotations

from sunk_dev.dashboards.kit import (
    Dashboard,
    graph,
    label_variable,
    new_dashboard,
    node_table,
    q,
    row,
    sel,
)

UID = "sunk-nodeset"
THIS = 'nodeset="$nodeset"'
CONTROLLER = 'controller="nodesets"'


def _one(metric: str) -> str:
    """The NodeSet's series, whichever operator replica serves it."""
    return f"max({sel(metric, THIS)})"


def dashboard() -> Dashboard:
    return (
        new_dashboard(
            UID,
            "sunk / NodeSet",
            "One NodeSet's members, roll-outs and drains, and the operator's work on NodeSets.",
        )
        .with_variable(
            label_variable(
                "nodeset",
                "NodeSet",
                'label_values(sunk_nodeset_replicas_desired{namespace="$namespace"}, nodeset)',
                "The NodeSet shown (its name; the operator serves one series set per NodeSet)",
            )
        )
        .with_row(row("Members"))
        .with_panel(
            graph(
                "Members by Slurm state",
                "The NodeSet's members by the state of their Slurm node; unregistered members have a "
                "Pod but no Slurm node yet (slurmd starting), unknown ones a state Slurm did not "
                "report. Unregistered members that stay so for minutes mean slurmd cannot register: "
                "read the member Pod's log. Down or drained members are listed below with their "
                "reasons.",
                "short",
                [
                    q(
                        f"max by (state) ({sel('sunk_nodeset_members', THIS)})",
                        "{{state}}",
                    )
                ],
                stack=True,
            )
        )
        .with_panel(
            graph(
                "Size: desired, ready, up to date",
                "Members the NodeSet should have (its replicas, what demand mode chose, or every "
                "qualifying Node), members whose Pod is Ready, and members made from the current "
                "template, with demand mode's maximum when it has one. Ready below desired for long "
                "means Pods that do not start (kubectl get pods, events); up to date below ready "
                "means a roll-out under way, held back while members run jobs.",
                "short",
                [
                    q(_one("sunk_nodeset_replicas_desired"), "desired", "A"),
                    q(_one("sunk_nodeset_replicas_ready"), "ready", "B"),
                    q(_one("sunk_nodeset_replicas_up_to_date"), "up to date", "C"),
                    q(_one("sunk_nodeset_replicas_max"), "demand maximum", "D"),
                ],
            )
        )
        .with_panel(
            node_table(
                "Members out of use",
                "The NodeSet's down, drained or draining Slurm nodes, with who wrote the reason, the "
                "reason and how long they have been so (within the time range). Operator-owned "
                "drains are members being replaced: they end when the jobs on them end. Others need "
                "a person: see the Cluster dashboard's table for the whole cluster.",
                'nodeset="$nodeset"',
            )
        )
        .with_row(row("Roll-outs and drains"))
        .with_panel(
            graph(
                "Drains and replacements in progress",
                "Members on their way out for any reason (scale-in, a roll-out, a cordoned or unfit "
                "Node), and among them those whose Slurm node the operator is draining while jobs "
                "still run. A drain that stays for hours means a long job holds the member: find it "
                "with `squeue -w <node>`; replacements that stay without drains mean Pods that do "
                "not go away (finalizers, a stuck kubelet).",
                "short",
                [
                    q(_one("sunk_nodeset_replacements_in_progress"), "replacements", "A"),
                    q(_one("sunk_nodeset_drains_in_progress"), "drains", "B"),
                ],
            )
        )
        .with_panel(
            graph(
                "Time not Ready, not up to date",
                "Seconds since the NodeSet's Ready condition turned False, and since a member "
                "stopped running the current template (0: Ready, up to date). A line that climbs "
                "past your roll-out window means a wedged roll-out: read `kubectl describe nodeset` "
                "for the conditions' messages and the drains panel for what holds it.",
                "s",
                [
                    q(_one("sunk_nodeset_not_ready_seconds"), "not Ready", "A"),
                    q(_one("sunk_nodeset_not_up_to_date_seconds"), "not up to date", "B"),
                ],
            )
        )
        .with_panel(
            graph(
                "Jobs waiting in its partitions, by reason",
                "Pending jobs of the partitions this NodeSet's members join, by Slurm's reason. Jobs "
                "waiting for Resources while the NodeSet is at its demand maximum (size panel) will "
                "wait until jobs end: raise maxReplicas or add a NodeSet.",
                "short",
                [
                    q(
                        f"sum by (reason) ({sel('sunk_slurm_jobs_pending')} * on (partition) "
                        f"group_left max by (partition) ({sel('sunk_nodeset_partition', THIS)}))",
                        "{{reason}}",
                    )
                ],
                stack=True,
                width=24,
            )
        )
        .with_row(row("The NodeSet controller (all NodeSets)"))
        .with_panel(
            graph(
                "Passes by result",
                "The operator's NodeSet controller passes per second, succeeded and failed, for all "
                "NodeSets together. Errors are retried with back-off; a steady error rate means a "
                "pass that cannot succeed: the operator's log names the NodeSet and the cause.",
                "ops",
                [
                    q(
                        "sum by (result) "
                        f"(rate({sel('sunk_reconcile_total', CONTROLLER)}[$__rate_interval]))",
                        "{{result}}",
                    )
                ],
                stack=True,
                width=8,
            )
        )
        .with_panel(
            graph(
                "Pass duration",
                "How long a NodeSet controller pass takes, median and 99th percentile. Passes that "
                "grow towards tens of seconds slow every roll-out and drain: look for a slow "
                "Kubernetes API server or slurmrestd (the operator's sunk_slurm_api_* metrics).",
                "s",
                [
                    q(
                        f"histogram_quantile({quantile}, sum by (le) "
                        f"(rate({sel('sunk_reconcile_duration_seconds_bucket', CONTROLLER)}"
                        "[$__rate_interval])))",
                        label,
                        ref,
                    )
                    for quantile, label, ref in ((0.5, "p50", "A"), (0.99, "p99", "B"))
                ],
                width=8,
            )
        )
        .with_panel(
            graph(
                "Since the last successful pass",
                "Seconds since the NodeSet controller last finished a pass without error. It "
                "resets with each change and every few seconds while work is under way; one that "
                "climbs while NodeSets or their Pods change means the controller is stuck: check "
                "that an operator replica holds the Lease and read its log.",
                "s",
                [
                    q(
                        f"time() - max({sel('sunk_reconcile_last_success_timestamp_seconds', CONTROLLER)})",
                        "since last success",
                    )
                ],
                width=8,
            )
        )
    )
