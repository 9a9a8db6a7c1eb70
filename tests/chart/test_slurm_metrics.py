"""Issue #50: what a Prometheus user expects from the chart. Scrape annotations, a
ServiceMonitor only where the Prometheus operator's CRDs exist, and Slurm's own endpoint in
slurmctld (25.11+) switched on with slurm.conf, the operator and the scrape in step."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.chart.conftest import CHART, render_chart
from tests.chart.test_slurm_chart import ON, conf_value, container, named, of_kind

Obj = dict[str, Any]
MONITORING = ("monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PrometheusRule")
SCRAPE = {"prometheus.io/scrape": "true", "prometheus.io/port": "8080", "prometheus.io/path": "/metrics"}
LEAVES = ["/metrics/jobs", "/metrics/nodes", "/metrics/partitions", "/metrics/scheduler"]


def _render(chart: Path, helm: Path, *sets: str, crds: bool = False, values: Obj | None = None) -> list[Obj]:
    return render_chart(helm, chart, *sets, values=values, api_versions=MONITORING if crds else ())


def _monitors_on(tag: str = "24.11", *sets: str) -> tuple[str, ...]:
    return ("metrics.serviceMonitor.enabled=true", f"controller.image.tag={tag}", *sets)


def _native(objects: list[Obj]) -> bool:
    """Whether all three parts agree that slurmctld serves the metrics; fails if they differ."""
    conf = conf_value(objects, "MetricsType") == "metrics/openmetrics"
    args = container(named(objects, "Deployment", "r1-operator"), "operator")["args"]
    assert f"--slurm-native-metrics={str(conf).lower()}" in args, f"slurm.conf: {conf}, operator: {args}"
    return conf


def _fails(chart: Path, helm: Path, *sets: str) -> str:
    with pytest.raises(subprocess.CalledProcessError) as failed:
        _render(chart, helm, *sets)
    return str(failed.value.stderr)


# -- scrape annotations ---------------------------------------------------------------------


def test_issue50_the_operator_has_a_metrics_service_annotated_for_prometheus(
    helm: Path, slurm_chart: Path
) -> None:
    service = named(_render(slurm_chart, helm), "Service", "r1-operator-metrics")
    assert service["metadata"]["annotations"] == SCRAPE
    assert service["spec"]["selector"] == {
        "app.kubernetes.io/name": "sunk-operator",
        "app.kubernetes.io/instance": "r1",
    }
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 8080, "targetPort": "metrics"}]


def test_issue50_annotations_false_leaves_the_services_unannotated(helm: Path, slurm_chart: Path) -> None:
    objects = _render(
        slurm_chart, helm, *ON, "metrics.annotations=false", "scheduler.metrics.annotations=false"
    )
    for name in ("r1-operator-metrics", "r1-sunk-scheduler-metrics"):
        assert "annotations" not in named(objects, "Service", name)["metadata"], name


def test_issue50_the_schedulers_metrics_service_is_annotated_with_its_port(
    helm: Path, slurm_chart: Path
) -> None:
    objects = _render(slurm_chart, helm, *ON, "scheduler.scheduler.ports.metrics=9090")
    assert named(objects, "Service", "r1-sunk-scheduler-metrics")["metadata"]["annotations"] == {
        **SCRAPE,
        "prometheus.io/port": "9090",
    }


# -- ServiceMonitor and PrometheusRule, only with the CRDs ----------------------------------


def test_issue50_without_the_prometheus_operators_crds_nothing_of_theirs_renders(
    helm: Path, slurm_chart: Path
) -> None:
    """Switched on where the CRDs are missing: no error, no object the API server would refuse."""
    sets = (
        *_monitors_on("25.11"),
        *ON,
        "metrics.prometheusRule.enabled=true",
        "scheduler.metrics.serviceMonitor.enabled=true",
    )
    objects = _render(slurm_chart, helm, *sets)
    assert [o["kind"] for o in objects if o["apiVersion"].startswith("monitoring.coreos.com")] == []


def test_issue50_the_operators_servicemonitor_carries_the_labels_and_interval(
    helm: Path, slurm_chart: Path
) -> None:
    objects = _render(
        slurm_chart,
        helm,
        *_monitors_on(),
        "metrics.serviceMonitor.labels.release=kube-prometheus",
        "metrics.serviceMonitor.interval=15s",
        crds=True,
    )
    monitor = named(objects, "ServiceMonitor", "r1-operator")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["team"]}
    assert (
        monitor["spec"]["selector"]["matchLabels"]
        == named(objects, "Service", "r1-operator-metrics")["spec"]["selector"]
    )
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s"}]


def test_issue50_servicemonitor_off_renders_none_even_with_the_crds(helm: Path, slurm_chart: Path) -> None:
    assert (
        of_kind(_render(slurm_chart, helm, "controller.image.tag=25.11", crds=True), "ServiceMonitor") == []
    )


def test_issue50_the_scheduler_subchart_has_its_own_servicemonitor(helm: Path, slurm_chart: Path) -> None:
    objects = _render(slurm_chart, helm, *ON, "scheduler.metrics.serviceMonitor.enabled=true", crds=True)
    [monitor] = of_kind(objects, "ServiceMonitor")
    assert monitor["metadata"]["name"] == "r1-sunk-scheduler"
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s"}]


def test_issue50_the_scheduler_chart_alone_renders_its_servicemonitor_only_with_the_crd(helm: Path) -> None:
    sets = ("scheduler.scope.namespaces=tenants", "metrics.serviceMonitor.enabled=true")
    assert of_kind(render_chart(helm, CHART, *sets), "ServiceMonitor") == []
    [monitor] = of_kind(render_chart(helm, CHART, *sets, api_versions=MONITORING), "ServiceMonitor")
    assert monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == "sunk-scheduler"


# -- slurmctld's own endpoint (25.11+) ------------------------------------------------------


@pytest.mark.parametrize(
    ("tag", "native"),
    [
        ("24.11", False),
        ("25.05", False),
        ("25.11", True),
        ("25.11.2", True),
        ("26.05-ubuntu24.04", True),
        ("v26.05", True),
        ("latest", False),
        ("", False),
    ],
)
def test_issue50_auto_turns_slurmctlds_metrics_on_from_slurm_25_11(
    helm: Path, slurm_chart: Path, tag: str, native: bool
) -> None:
    """Slurm before 25.11 has no metrics plugin and slurmctld stops on a MetricsType it lacks."""
    assert _native(_render(slurm_chart, helm, f"controller.image.tag={tag}")) is native


@pytest.mark.parametrize(("enabled", "tag", "native"), [("true", "24.11", True), ("false", "25.11", False)])
def test_issue50_an_explicit_setting_overrides_the_tag(
    helm: Path, slurm_chart: Path, enabled: str, tag: str, native: bool
) -> None:
    """A custom image's tag may say nothing about its Slurm: true and false are taken as said."""
    objects = _render(
        slurm_chart, helm, f"metrics.slurmctld.enabled={enabled}", f"controller.image.tag={tag}"
    )
    assert _native(objects) is native


def test_issue50_slurmctld_is_scraped_at_its_four_leaves_never_the_index(
    helm: Path, slurm_chart: Path
) -> None:
    objects = _render(slurm_chart, helm, *_monitors_on("25.11"), crds=True)
    monitor = named(objects, "ServiceMonitor", "r1-slurmctld")
    assert (
        monitor["spec"]["selector"]["matchLabels"]
        == named(objects, "Service", "r1-controller")["spec"]["selector"]
    )
    assert monitor["spec"]["endpoints"] == [
        {"port": "slurmctld", "path": p, "interval": "60s"} for p in LEAVES
    ]


def test_issue50_per_user_series_only_when_asked(helm: Path, slurm_chart: Path) -> None:
    objects = _render(slurm_chart, helm, *_monitors_on("25.11", "metrics.slurmctld.perUser=true"), crds=True)
    paths = [e["path"] for e in named(objects, "ServiceMonitor", "r1-slurmctld")["spec"]["endpoints"]]
    assert paths == [*LEAVES, "/metrics/jobs-users-accts"]


def test_issue50_before_25_11_slurmctld_gets_no_servicemonitor(helm: Path, slurm_chart: Path) -> None:
    monitors = of_kind(_render(slurm_chart, helm, *_monitors_on("24.11"), crds=True), "ServiceMonitor")
    assert sorted(m["metadata"]["name"] for m in monitors) == ["r1-config", "r1-operator"]


def test_issue50_the_config_sidecars_metrics_are_scraped_where_it_serves_them(
    helm: Path, slurm_chart: Path
) -> None:
    """Catches: the apply-config metrics (a configuration Slurm does not run) behind a port
    the sidecar does not open, a Service selecting another Pod, or no ServiceMonitor."""
    objects = _render(slurm_chart, helm, *_monitors_on("24.11"), crds=True)
    sidecar = container(named(objects, "StatefulSet", "r1-controller"), "apply-config")
    assert "--metrics-port=8082" in sidecar["args"]
    assert {"name": "config-metrics", "containerPort": 8082} in sidecar["ports"]
    service = named(objects, "Service", "r1-config-metrics")
    assert service["metadata"]["annotations"]["prometheus.io/port"] == "8082"
    [port] = service["spec"]["ports"]
    assert port == {"name": "config-metrics", "port": 8082, "targetPort": "config-metrics"}
    pod_labels = named(objects, "StatefulSet", "r1-controller")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    [endpoint] = named(objects, "ServiceMonitor", "r1-config")["spec"]["endpoints"]
    assert endpoint["port"] == "config-metrics"


@pytest.mark.parametrize("key", ["MetricsType", "metricstype"])
def test_issue50_extraconf_cannot_set_metricstype(helm: Path, slurm_chart: Path, key: str) -> None:
    """Set behind the chart's back, slurm.conf and the operator would disagree on who serves slurm_*."""
    assert f"slurm.extraConf.{key}" in _fails(slurm_chart, helm, f"slurm.extraConf.{key}=metrics/openmetrics")


def test_issue50_an_unknown_slurmctld_setting_fails_naming_it(helm: Path, slurm_chart: Path) -> None:
    assert 'metrics.slurmctld.enabled is "yes"' in _fails(slurm_chart, helm, "metrics.slurmctld.enabled=yes")


def test_issue50_a_scrape_interval_that_does_not_parse_fails_naming_it(helm: Path, slurm_chart: Path) -> None:
    assert 'metrics.slurmctld.interval is "1min"' in _fails(
        slurm_chart, helm, "metrics.slurmctld.interval=1min"
    )


# -- NetworkPolicy: Prometheus may reach slurmctld's port when asked ------------------------

PROMETHEUS = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}


def _slurmctld_rules(objects: list[Obj]) -> list[Obj]:
    rules: list[Obj] = named(objects, "NetworkPolicy", "r1-slurmctld")["spec"]["ingress"]
    return rules


def test_issue50_metrics_allowfrom_lets_prometheus_reach_slurmctlds_port(
    helm: Path, slurm_chart: Path
) -> None:
    values = {"controller": {"image": {"tag": "25.11"}}, "metrics": {"allowFrom": [PROMETHEUS]}}
    rules = _slurmctld_rules(_render(slurm_chart, helm, values=values))
    assert {"from": [PROMETHEUS], "ports": [{"port": 6817, "protocol": "TCP"}]} in rules
    assert len(rules) == 3  # Slurm's nodes and clients, the config sidecar's metrics, Prometheus


def test_issue50_allowfrom_opens_nothing_while_slurmctld_serves_no_metrics(
    helm: Path, slurm_chart: Path
) -> None:
    values = {"controller": {"image": {"tag": "24.11"}}, "metrics": {"allowFrom": [PROMETHEUS]}}
    rules = _slurmctld_rules(_render(slurm_chart, helm, values=values))
    assert [r["ports"] for r in rules if "from" in r] == [[{"port": 6817, "protocol": "TCP"}]]
    assert {"ports": [{"port": 8082, "protocol": "TCP"}]} in rules  # the config sidecar's metrics
