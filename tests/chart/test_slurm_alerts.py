"""Issue #50: the alert rules the chart ships, run by promtool against input series.

Each alert has a case that fires and cases that must stay quiet: the near misses a careless
expression would page on. The rules are the chart's own render (default thresholds), fed to
`promtool test rules` with their annotations left out (promtool compares annotations as
text; those are checked by `promtool check rules` and the runbook tests below)."""

from __future__ import annotations

import functools
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from sunk_dev.layout import cache_dir
from sunk_dev.promtool import apt_available, ensure_promtool
from tests.chart.conftest import render_chart
from tests.chart.test_slurm_chart import named, of_kind

Obj = dict[str, Any]
DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
NS = 'namespace="team"'
RULES_CONFIGMAP = ("metrics.rules.configMap=true",)
NATIVE = ("controller.image.tag=25.11",)


@pytest.fixture(scope="session")
def promtool() -> Path:
    if not apt_available():
        pytest.skip("promtool comes from Debian's prometheus package and this machine has no apt")
    return ensure_promtool(cache_dir() / "promtool.log")


@functools.cache
def _rule_file(helm: Path, chart: Path, sets: tuple[str, ...]) -> str:
    """The ConfigMap's plain rule file (one render per distinct input in this module)."""
    objects = render_chart(helm, chart, *RULES_CONFIGMAP, *sets)
    text: str = named(objects, "ConfigMap", "r1-prometheus-rules")["data"]["sunk-alerts.yaml"]
    return text


def rule_groups(helm: Path, chart: Path, *sets: str) -> list[Obj]:
    """The rule groups of the ConfigMap's plain rule file."""
    groups: list[Obj] = yaml.safe_load(_rule_file(helm, chart, sets))["groups"]
    return groups


def alerts(groups: list[Obj]) -> dict[str, Obj]:
    return {rule["alert"]: rule for group in groups for rule in group["rules"]}


@dataclass
class Scenario:
    """Input series (promtool's expanding notation, one sample a minute) and, per minute of
    evaluation, the label sets of the alert expected to fire (beside alertname)."""

    series: dict[str, str]
    expect: dict[int, list[dict[str, str]]]
    interval: str = "1m"


@dataclass
class Case:
    alert: str
    scenarios: list[Scenario]
    sets: tuple[str, ...] = field(default_factory=tuple)


def s(name: str, **labels: str) -> str:
    """A series in the release's namespace."""
    inner = ", ".join([NS, *(f'{k}="{v}"' for k, v in labels.items())])
    return f"{name}{{{inner}}}"


def info(node: str, state: str, owner: str, nodeset: str = "cpus", reason: str = "r") -> str:
    return s(
        "sunk_slurm_node_info", node=node, nodeset=nodeset, state=state, reason=reason, reason_owner=owner
    )


def node_labels(series: str) -> dict[str, str]:
    """The labels the series carries (an empty value is no label at all, in Prometheus too)."""
    return {k: v for k, v in re.findall(r'(\w+)="([^"]*)"', series) if v}


CRIT = {"namespace": "team", "severity": "critical"}
WARN = {"namespace": "team", "severity": "warning"}
DOWN = info("n1", "down", "slurm", reason="Not responding")
DRAINED_NONE = info("n1", "drained", "none", reason="")
OP_DRAINED = info("n1", "drained", "operator", reason="sunk: replacing")


def fleet(drained: int, members: int, nodeset: str = "cpus") -> dict[str, str]:
    """`members` nodes of a NodeSet, the first `drained` of them drained by a health check."""
    return {
        info(
            f"{nodeset}-{i}",
            "drained" if i < drained else "idle",
            "health-check" if i < drained else "none",
            nodeset,
        ): "1x20"
        for i in range(members)
    }


def at_max(desired: int, maximum: int | None, nodeset: str = "h100") -> dict[str, str]:
    series = {
        s("sunk_nodeset_partition", nodeset=nodeset, partition="gpu"): "1x30",
        s("sunk_nodeset_replicas_desired", nodeset=nodeset): f"{desired}x30",
    }
    if maximum is not None:
        series[s("sunk_nodeset_replicas_max", nodeset=nodeset)] = f"{maximum}x30"
    return series


PENDING_GPU = {s("sunk_slurm_jobs_pending", partition="gpu", reason="Resources"): "4x30"}
GPU_WAITING = {**WARN, "partition": "gpu"}

CASES = [
    Case(
        "SlurmctldDown",
        [
            # Before 25.11 the operator serves Slurm's state: every collector failing is the signal.
            Scenario(
                {
                    s("sunk_slurm_collector_up", collector="nodes"): "0x10",
                    s("sunk_slurm_collector_up", collector="jobs"): "0x10",
                },
                {1: [], 3: [CRIT]},
            ),
            # So is the operator's own scrape failing.
            Scenario({s("up", service="r1-operator-metrics"): "0x10"}, {1: [], 3: [CRIT]}),
            # One collector failing is that collector's problem (SunkMetricsCollectorErrors).
            Scenario(
                {
                    s("sunk_slurm_collector_up", collector="nodes"): "0x10",
                    s("sunk_slurm_collector_up", collector="jobs"): "1x10",
                },
                {5: []},
            ),
            # Another release's operator is not ours.
            Scenario({'up{namespace="other", service="r1-operator-metrics"}': "0x10"}, {5: []}),
        ],
    ),
    Case(
        "SlurmctldDown",
        [
            Scenario({s("up", service="r1-controller", endpoint="slurmctld"): "0x10"}, {1: [], 3: [CRIT]}),
            # slurmctld answers while sunk cannot reach Slurm: slurmrestd's fault, not slurmctld's.
            Scenario(
                {
                    s("up", service="r1-controller"): "1x10",
                    s("sunk_slurm_collector_up", collector="nodes"): "0x10",
                },
                {5: []},
            ),
        ],
        NATIVE,
    ),
    Case(
        "SlurmrestdUnreachable",
        [
            Scenario(
                {s("kube_deployment_status_replicas_available", deployment="r1-restapi"): "0x10"},
                {4: [], 6: [CRIT]},
            ),
            Scenario(
                {s("kube_deployment_status_replicas_available", deployment="r1-restapi"): "1x10"}, {8: []}
            ),
            Scenario(
                {s("kube_deployment_status_replicas_available", deployment="r1-login"): "0x10"}, {8: []}
            ),
        ],
    ),
    Case(
        "SlurmrestdUnreachable",
        [
            Scenario(
                {
                    s("up", service="r1-controller"): "1x10",
                    s("sunk_slurm_collector_up", collector="nodes"): "0x10",
                },
                {4: [], 6: [CRIT]},
            ),
            # slurmctld itself down: that is SlurmctldDown's page, not this one.
            Scenario(
                {
                    s("up", service="r1-controller"): "0x10",
                    s("sunk_slurm_collector_up", collector="nodes"): "0x10",
                },
                {8: []},
            ),
        ],
        NATIVE,
    ),
    Case(
        "SlurmdbdQueueBacklog",
        [
            Scenario({s("slurm_slurmdbd_queue_size"): "101x10"}, {4: [], 6: [WARN]}),
            Scenario({s("slurm_slurmdbd_queue_size"): "100x10"}, {8: []}),
        ],
    ),
    Case(
        "SlurmAgentQueueBacklog",
        [
            Scenario({s("slurm_agent_queue_size"): "150x15"}, {9: [], 11: [WARN]}),
            Scenario({s("slurm_agent_queue_size"): "100x15"}, {12: []}),
        ],
    ),
    Case(
        "SlurmSchedulerCycleSlow",
        [
            Scenario({s("slurm_schedule_cycle_last"): "6000000x10"}, {4: [], 6: [WARN]}),
            # Microseconds: 4 s is below the 5 s threshold.
            Scenario({s("slurm_schedule_cycle_last"): "4000000x10"}, {8: []}),
        ],
    ),
    Case(
        "SlurmBackfillStalled",
        [
            # Last cycle at t=60 s: stale (over 10 min) from 11 min, firing 5 min later.
            Scenario(
                {s("slurm_bf_when_last_cycle"): "60x25", s("slurm_jobs_pending"): "3x25"},
                {12: [], 18: [WARN]},
            ),
            # Nothing waits: backfill has nothing to do.
            Scenario({s("slurm_bf_when_last_cycle"): "60x25", s("slurm_jobs_pending"): "0x25"}, {20: []}),
            # Cycles keep coming.
            Scenario({s("slurm_bf_when_last_cycle"): "0+60x25", s("slurm_jobs_pending"): "3x25"}, {20: []}),
        ],
    ),
    Case(
        "SlurmNodeDownUnknownReason",
        [
            Scenario({DOWN: "1x15"}, {9: [], 11: [{**WARN, **node_labels(DOWN)}]}),
            # An administrator (or the operator, or a health check) said why.
            Scenario({info("n1", "down", "admin", reason="PSU swap"): "1x15"}, {12: []}),
            Scenario({info("n1", "drained", "slurm"): "1x15"}, {12: []}),
        ],
    ),
    Case(
        "SlurmNodeDrainedNoReason",
        [
            Scenario({DRAINED_NONE: "1x15"}, {9: [], 11: [{**WARN, **node_labels(DRAINED_NONE)}]}),
            Scenario({info("n1", "draining", "health-check"): "1x15"}, {12: []}),
            Scenario({info("n1", "down", "none"): "1x15"}, {12: []}),
        ],
    ),
    Case(
        "SlurmNodeDrainedTooLong",
        [
            # draining, then drained (a new series): one drain, counted from its start.
            Scenario(
                {
                    info("n1", "draining", "admin"): "1x120 stale",
                    info("n1", "drained", "admin"): "_x60 1x1500",
                },
                {1439: [], 1441: [{**WARN, "node": "n1", "nodeset": "cpus"}]},
            ),
            Scenario(
                {info("n1", "drained", "admin"): "1x1300 stale", info("n1", "idle", "none"): "_x1300 1x200"},
                {1450: []},
            ),
        ],
    ),
    Case(
        "SlurmJobsWaitingAtMaxSize",
        [
            Scenario({**PENDING_GPU, **at_max(8, 8)}, {14: [], 16: [GPU_WAITING]}),
            # Another NodeSet of the partition may still grow.
            Scenario({**PENDING_GPU, **at_max(8, 8), **at_max(2, 4, "a100")}, {20: []}),
            # No maximum known: nothing to say.
            Scenario({**PENDING_GPU, **at_max(8, None)}, {20: []}),
            # Waiting for something else than nodes.
            Scenario(
                {s("sunk_slurm_jobs_pending", partition="gpu", reason="Priority"): "4x30", **at_max(8, 8)},
                {20: []},
            ),
        ],
    ),
    Case(
        "SunkHealthCheckFailingFleetWide",
        [
            Scenario(fleet(2, 10), {4: [], 6: [{**CRIT, "nodeset": "cpus"}]}),
            # 10 % is not more than 10 %.
            Scenario(fleet(1, 10), {8: []}),
            # Half of a two-node NodeSet is one node: a node problem.
            Scenario(fleet(1, 2), {8: []}),
        ],
    ),
    Case(
        "SunkNodeSetNotReady",
        [
            Scenario(
                {s("sunk_nodeset_not_ready_seconds", nodeset="cpus"): "0+60x30"},
                {15: [], 16: [{**WARN, "nodeset": "cpus"}]},
            ),
            Scenario({s("sunk_nodeset_not_ready_seconds", nodeset="cpus"): "0x30"}, {25: []}),
        ],
    ),
    Case(
        "SunkNodeSetNotUpToDate",
        [
            Scenario(
                {s("sunk_nodeset_not_up_to_date_seconds", nodeset="cpus"): "0+60x70"},
                {60: [], 61: [{**WARN, "nodeset": "cpus"}]},
            ),
        ],
    ),
    Case(
        "SunkDrainWithoutReplacement",
        [
            Scenario(
                {OP_DRAINED: "1x40", s("sunk_nodeset_replacements_in_progress", nodeset="cpus"): "0x40"},
                {29: [], 31: [{**WARN, "node": "n1", "nodeset": "cpus"}]},
            ),
            # A replacement is under way.
            Scenario(
                {OP_DRAINED: "1x40", s("sunk_nodeset_replacements_in_progress", nodeset="cpus"): "1x40"},
                {35: []},
            ),
            # Jobs still run on it: the drain is waiting for them, as it should.
            Scenario({info("n1", "draining", "operator"): "1x40"}, {35: []}),
        ],
    ),
    Case(
        "SunkReconcileErrors",
        [
            Scenario(
                {s("sunk_reconcile_total", controller="nodeset", result="error"): "0+1x30"},
                {10: [], 17: [{**WARN, "controller": "nodeset"}]},
            ),
            Scenario(
                {
                    s("sunk_reconcile_total", controller="nodeset", result="error"): "0x30",
                    s("sunk_reconcile_total", controller="nodeset", result="success"): "0+1x30",
                },
                {20: []},
            ),
        ],
    ),
    Case(
        "SunkReconcileStalled",
        [
            Scenario(
                {
                    s("sunk_reconcile_last_success_timestamp_seconds", controller="nodeset"): "0x30",
                    s("sunk_nodeset_not_up_to_date_seconds", nodeset="cpus"): "30x30",
                },
                {14: [], 16: [{**CRIT, "controller": "nodeset"}]},
            ),
            # Nothing to do: an idle operator is not a stalled one.
            Scenario(
                {
                    s("sunk_reconcile_last_success_timestamp_seconds", controller="nodeset"): "0x30",
                    s("sunk_nodeset_not_up_to_date_seconds", nodeset="cpus"): "0x30",
                    s("sunk_nodeset_not_ready_seconds", nodeset="cpus"): "0x30",
                },
                {20: []},
            ),
            # Passes keep succeeding while the roll-out goes on.
            Scenario(
                {
                    s("sunk_reconcile_last_success_timestamp_seconds", controller="nodeset"): "0+60x30",
                    s("sunk_nodeset_not_up_to_date_seconds", nodeset="cpus"): "30x30",
                },
                {20: []},
            ),
        ],
    ),
    Case(
        "SunkSlurmConfigNotApplied",
        [
            # Seen at minute 5 and never applied: 15 minutes later it fires.
            Scenario(
                {s("sunk_slurm_config_unapplied_since_timestamp_seconds", pod="ctl-0"): "0x4 300x30"},
                {20: [], 21: [WARN]},
            ),
            # Applied after a few minutes (back to 0): a change taking its time is no alert.
            Scenario(
                {s("sunk_slurm_config_unapplied_since_timestamp_seconds", pod="ctl-0"): "300x12 0x20"},
                {25: []},
            ),
        ],
    ),
    Case(
        "SunkMetricsCollectorErrors",
        [
            Scenario(
                {s("sunk_slurm_collector_errors_total", collector="jobs"): "0+2x20"},
                {8: [], 12: [{**WARN, "collector": "jobs"}]},
            ),
            Scenario({s("sunk_slurm_collector_errors_total", collector="jobs"): "3x20"}, {15: []}),
        ],
    ),
]


def _without_annotations(groups: list[Obj]) -> list[Obj]:
    return [
        {**g, "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in g["rules"]]}
        for g in groups
    ]


def _unit_test(case: Case) -> Obj:
    return {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": scenario.interval,
                "input_series": [{"series": k, "values": v} for k, v in scenario.series.items()],
                "alert_rule_test": [
                    {
                        "eval_time": f"{minute}m",
                        "alertname": case.alert,
                        "exp_alerts": [{"exp_labels": labels} for labels in expected],
                    }
                    for minute, expected in scenario.expect.items()
                ],
            }
            for scenario in case.scenarios
        ],
    }


def _case_id(case: Case) -> str:
    return case.alert + ("-native" if case.sets else "")


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_issue50_promtool_each_alert_fires_and_stays_quiet_as_specified(
    helm: Path, slurm_chart: Path, promtool: Path, tmp_path: Path, case: Case
) -> None:
    (tmp_path / "rules.yaml").write_text(
        yaml.safe_dump({"groups": _without_annotations(rule_groups(helm, slurm_chart, *case.sets))})
    )
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(_unit_test(case)))
    result = subprocess.run(
        [str(promtool), "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_issue50_every_alert_has_a_promtool_case(helm: Path, slurm_chart: Path) -> None:
    """A rule added without a test, or a test left for a rule that went, fails here."""
    assert set(alerts(rule_groups(helm, slurm_chart))) == {case.alert for case in CASES}


@pytest.mark.parametrize("sets", [(), NATIVE], ids=["operator-serves-slurm", "slurmctld-serves-slurm"])
def test_issue50_promtool_check_rules_accepts_the_rendered_file(
    helm: Path, slurm_chart: Path, promtool: Path, tmp_path: Path, sets: tuple[str, ...]
) -> None:
    """The plain rule file, annotations and all, as a Prometheus would load it."""
    objects = render_chart(helm, slurm_chart, *RULES_CONFIGMAP, *sets)
    (tmp_path / "rules.yaml").write_text(
        named(objects, "ConfigMap", "r1-prometheus-rules")["data"]["sunk-alerts.yaml"]
    )
    result = subprocess.run(
        [str(promtool), "check", "rules", "rules.yaml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


# -- what each rule carries ------------------------------------------------------------------


def test_issue50_every_rule_has_severity_summary_description_and_a_runbook(
    helm: Path, slurm_chart: Path
) -> None:
    for name, rule in alerts(rule_groups(helm, slurm_chart)).items():
        assert rule["labels"]["severity"] in ("critical", "warning"), name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
        assert rule["annotations"]["runbook_url"] == (
            f"https://github.com/coreweave/sunk/blob/main/docs/operations.md#{name.lower()}"
        )


def test_issue50_every_runbook_anchor_is_a_heading_in_operations_md(helm: Path, slurm_chart: Path) -> None:
    headings = {
        line.lstrip("#").strip().lower() for line in DOCS.read_text().splitlines() if line.startswith("### ")
    }
    assert {name for name in alerts(rule_groups(helm, slurm_chart)) if name.lower() not in headings} == set()


def test_issue50_the_runbook_base_url_is_a_value(helm: Path, slurm_chart: Path) -> None:
    groups = rule_groups(helm, slurm_chart, "metrics.rules.runbookBaseURL=https://wiki.example.org/slurm")
    assert (
        alerts(groups)["SlurmctldDown"]["annotations"]["runbook_url"]
        == "https://wiki.example.org/slurm#slurmctlddown"
    )


def test_issue50_thresholds_come_from_values(helm: Path, slurm_chart: Path) -> None:
    groups = rule_groups(
        helm,
        slurm_chart,
        "metrics.rules.alerts.SlurmdbdQueueBacklog.messages=250",
        "metrics.rules.alerts.SlurmdbdQueueBacklog.for=20m",
        "metrics.rules.alerts.SunkNodeSetNotReady.after=1h30m",
    )
    dbd = alerts(groups)["SlurmdbdQueueBacklog"]
    assert dbd["expr"].endswith("> 250") and dbd["for"] == "20m"
    assert alerts(groups)["SunkNodeSetNotReady"]["expr"].endswith("> 5400")


def test_issue50_the_prometheusrule_holds_the_same_rules_as_the_configmap(
    helm: Path, slurm_chart: Path
) -> None:
    api = ("monitoring.coreos.com/v1/PrometheusRule",)
    objects = render_chart(
        helm, slurm_chart, *RULES_CONFIGMAP, "metrics.prometheusRule.enabled=true", api_versions=api
    )
    [rule] = of_kind(objects, "PrometheusRule")
    assert rule["spec"]["groups"] == rule_groups(helm, slurm_chart)


def test_issue50_without_the_crd_no_prometheusrule_renders(helm: Path, slurm_chart: Path) -> None:
    assert (
        of_kind(render_chart(helm, slurm_chart, "metrics.prometheusRule.enabled=true"), "PrometheusRule")
        == []
    )


# -- thresholds that do not parse fail the render, naming the value ---------------------------


@pytest.mark.parametrize(
    ("item", "said"),
    [
        ("metrics.rules.alerts.SlurmctldDown.for=10x", 'metrics.rules.alerts.SlurmctldDown.for is "10x"'),
        (
            "metrics.rules.alerts.SunkNodeSetNotReady.after=soon",
            'metrics.rules.alerts.SunkNodeSetNotReady.after is "soon"',
        ),
        (
            "metrics.rules.alerts.SlurmdbdQueueBacklog.messages=-5",
            'metrics.rules.alerts.SlurmdbdQueueBacklog.messages is "-5"',
        ),
        (
            "metrics.rules.alerts.SunkHealthCheckFailingFleetWide.percent=150",
            "SunkHealthCheckFailingFleetWide.percent is 150",
        ),
        (
            "metrics.rules.runbookBaseURL=docs/operations.md",
            'metrics.rules.runbookBaseURL is "docs/operations.md"',
        ),
    ],
)
def test_issue50_a_threshold_that_does_not_parse_fails_the_render_naming_it(
    helm: Path, slurm_chart: Path, item: str, said: str
) -> None:
    with pytest.raises(subprocess.CalledProcessError) as failed:
        render_chart(helm, slurm_chart, item)
    assert said in str(failed.value.stderr)
