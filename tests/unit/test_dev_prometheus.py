"""Issue #50: the dev cluster's Prometheus, which the e2e runs every dashboard query and
alert against: what it scrapes (Services annotated for it, found through the cluster's own
credentials), what it evaluates (the chart's rules), and a real server from Debian's package
started, reloaded and stopped by PID, on 127.0.0.1 only."""

from __future__ import annotations

import http.server
import json
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sunk_dev import procs, prometheus, prometheus_sd
from sunk_dev.cli import dev_parser, run_dev
from sunk_dev.cluster import STOP_ORDER, DevCluster
from sunk_dev.errors import DevClusterError
from sunk_dev.layout import Layout, Ports
from sunk_dev.promtool import apt_available

Labels = dict[str, str]
SERVICE_NAME = "kubernetes.io/service-name"


# -- what it scrapes ----------------------------------------------------------------------------


def relabel(rules: list[dict[str, Any]], labels: Labels) -> Labels | None:
    """Prometheus's relabelling (`keep` and `replace`, its defaults: regex (.*), separator
    ';', replacement $1, anchored regexes) applied to a discovered target; None: dropped."""
    labels = dict(labels)
    for rule in rules:
        joined = ";".join(labels.get(name, "") for name in rule.get("source_labels", []))
        match = re.fullmatch(rule.get("regex", "(.*)"), joined)
        action = rule.get("action", "replace")
        if action == "keep":
            if match is None:
                return None
        elif action == "replace":
            if match is not None:
                replacement = re.sub(r"\$(\d+)", r"\\g<\1>", rule.get("replacement", "$1"))
                labels[rule["target_label"]] = match.expand(replacement)
        else:
            raise AssertionError(f"this test knows no relabel action {action}")
    return labels


def service(name: str, annotations: Labels, namespace: str = "obs") -> dict[str, Any]:
    keys = {f"prometheus.io/{key}": value for key, value in annotations.items()}
    return {"metadata": {"name": name, "namespace": namespace, "annotations": keys, "labels": {"app": name}}}


def endpoint_slice(
    name: str, addresses: list[str], port: int = 8080, namespace: str = "obs", ready: bool = True
) -> dict[str, Any]:
    """The EndpointSlice Kubernetes keeps for Service `name`, one Pod per address."""
    return {
        "metadata": {"name": f"{name}-x1", "namespace": namespace, "labels": {SERVICE_NAME: name}},
        "addressType": "IPv4",
        "endpoints": [
            {
                "addresses": [address],
                "conditions": {"ready": ready},
                "nodeName": "real-1",
                "targetRef": {"kind": "Pod", "name": f"{name}-{i}"},
            }
            for i, address in enumerate(addresses)
        ],
        "ports": [{"name": "metrics", "port": port, "protocol": "TCP"}],
    }


def scraped(services: list[dict[str, Any]], slices: list[dict[str, Any]]) -> list[Labels]:
    """What Prometheus scrapes, as the dev config makes it of what discovery finds: each
    target's visible labels plus where it is scraped."""
    rules = prometheus.scrape_job(Path("/targets.json"))["relabel_configs"]
    found = []
    for group in prometheus_sd.target_groups(services, slices):
        [address] = group["targets"]
        kept = relabel(rules, {"__address__": address, "__metrics_path__": "/metrics", **group["labels"]})
        if kept is not None:
            visible = {k: v for k, v in kept.items() if not k.startswith("__")}
            found.append({**visible, "address": kept["__address__"], "path": kept["__metrics_path__"]})
    return found


CHART_ANNOTATIONS = {"scrape": "true", "port": "8080", "path": "/metrics"}


def test_an_annotated_service_is_scraped_at_its_port_and_path_with_namespace_and_service() -> None:
    annotated = service("slurm-operator-metrics", {"scrape": "true", "port": "9100", "path": "/m"})
    targets = scraped([annotated], [endpoint_slice("slurm-operator-metrics", ["10.64.1.7"], port=8080)])
    assert targets == [
        {"namespace": "obs", "service": "slurm-operator-metrics", "address": "10.64.1.7:9100", "path": "/m"}
    ]


def test_every_endpoint_of_an_annotated_service_is_a_target() -> None:
    """Every operator replica is scraped (the standby ones serve no Slurm families)."""
    annotated = service("slurm-operator-metrics", CHART_ANNOTATIONS)
    slices = [endpoint_slice("slurm-operator-metrics", ["10.64.1.7", "10.64.2.9"])]
    assert sorted(t["address"] for t in scraped([annotated], slices)) == ["10.64.1.7:8080", "10.64.2.9:8080"]


@pytest.mark.parametrize("annotations", [{}, {"scrape": "false", "port": "8080"}, {"port": "8080"}])
def test_a_service_not_annotated_scrape_true_is_dropped(annotations: Labels) -> None:
    assert (
        scraped(
            [service("slurm-controller", annotations)], [endpoint_slice("slurm-controller", ["10.64.1.3"])]
        )
        == []
    )


def test_endpoints_of_a_service_discovery_did_not_list_are_not_targets() -> None:
    assert scraped([], [endpoint_slice("gone", ["10.64.1.3"])]) == []


def test_a_service_in_another_namespace_is_labelled_with_its_own() -> None:
    annotated = service("slurm-sunk-scheduler-metrics", CHART_ANNOTATIONS, namespace="plat")
    slices = [endpoint_slice("slurm-sunk-scheduler-metrics", ["10.64.3.4"], namespace="plat")]
    [target] = scraped([annotated], slices)
    assert (target["namespace"], target["service"]) == ("plat", "slurm-sunk-scheduler-metrics")


def test_targets_get_no_node_or_pod_label_that_would_rename_the_operators_own() -> None:
    """The operator's series carry `node` (a Slurm node): a target label of that name would
    turn it into exported_node and every node alert would select nothing."""
    annotated = service("slurm-operator-metrics", CHART_ANNOTATIONS)
    [target] = scraped([annotated], [endpoint_slice("slurm-operator-metrics", ["10.64.1.7"])])
    assert not {"node", "pod"} & set(target)


def test_discovered_labels_are_named_as_prometheus_kubernetes_discovery_names_them() -> None:
    """So the relabelling is the one a cluster's Prometheus runs on its own discovery."""
    annotated = service("m", {"scrape": "true"})
    [group] = prometheus_sd.target_groups([annotated], [endpoint_slice("m", ["10.64.1.7"])])
    assert group["labels"]["__meta_kubernetes_service_annotation_prometheus_io_scrape"] == "true"
    assert group["labels"]["__meta_kubernetes_service_annotationpresent_prometheus_io_scrape"] == "true"
    assert group["labels"]["__meta_kubernetes_service_label_app"] == "m"
    assert group["labels"]["__meta_kubernetes_pod_name"] == "m-0"


def test_prometheus_reads_the_targets_discovery_writes(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    [sd] = prometheus.config(layout, rules=False)["scrape_configs"][0]["file_sd_configs"]
    assert sd["files"] == [str(prometheus_sd.targets_file(layout))]
    assert prometheus_sd.targets_file(layout).is_relative_to(tmp_path)


def test_discovery_rewrites_the_targets_file_only_when_they_change(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    groups = prometheus_sd.target_groups(
        [service("m", CHART_ANNOTATIONS)], [endpoint_slice("m", ["10.64.1.7"])]
    )
    assert prometheus_sd.write(path, groups) is True
    assert prometheus_sd.write(path, groups) is False
    assert json.loads(path.read_text()) == groups
    assert prometheus_sd.write(path, []) is True


def test_it_scrapes_and_evaluates_every_5_seconds(tmp_path: Path) -> None:
    settings = prometheus.config(Layout(tmp_path), rules=True)["global"]
    assert (settings["scrape_interval"], settings["evaluation_interval"]) == ("5s", "5s")


def test_the_rule_file_is_evaluated_only_when_one_is_given(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    assert prometheus.config(layout, rules=True)["rule_files"] == [
        str(tmp_path / "prometheus" / "rules.yaml")
    ]
    assert prometheus.config(layout, rules=False)["rule_files"] == []


def test_it_listens_on_127_0_0_1_at_the_layouts_port_which_moves_with_the_offset(tmp_path: Path) -> None:
    layout = Layout(tmp_path, Ports().shifted(1000))
    listen = [a for a in prometheus.argv(layout, Path("/pkg")) if a.startswith("--web.listen-address=")]
    assert listen == [f"--web.listen-address=127.0.0.1:{Ports().prometheus + 1000}"]
    assert prometheus.url(layout) == f"http://127.0.0.1:{Ports().prometheus + 1000}"


def test_its_tsdb_is_under_the_run_directory(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    assert f"--storage.tsdb.path={tmp_path / 'prometheus' / 'data'}" in prometheus.argv(layout, Path("/p"))


def test_sunk_dev_down_stops_it_before_the_api_server_it_watches() -> None:
    assert STOP_ORDER.index("prometheus") < STOP_ORDER.index("kube-apiserver")
    assert STOP_ORDER.index("prometheus-sd") < STOP_ORDER.index("kube-apiserver")


# -- a real server ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def layout(tmp_path: Path) -> Iterator[Layout]:
    """A run directory whose Prometheus port is free, and no API server: discovery finds
    nothing, as on a cluster with no annotated Service."""
    if not apt_available():
        pytest.skip(
            "the Prometheus server comes from Debian's prometheus package, and this machine has no apt"
        )
    here = Layout(tmp_path / "dev", Ports().shifted(free_port() - Ports().prometheus))
    try:
        yield here
    finally:
        prometheus.stop(here)  # by the PID file it wrote, whatever the test did


def rule_file(path: Path, alert: str) -> Path:
    """A rule file with one alert that fires at once."""
    groups = {"groups": [{"name": "t", "rules": [{"alert": alert, "expr": "vector(1)", "for": "0s"}]}]}
    path.write_text(yaml.safe_dump(groups))
    return path


def listening(port: int) -> set[str]:
    """The local addresses (hex, as the kernel writes them) listening on TCP `port`."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.rpartition(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


def test_a_real_prometheus_starts_answers_and_listens_on_loopback_only(layout: Layout) -> None:
    base = prometheus.ensure_running(layout, None)
    assert base == prometheus.url(layout)
    assert prometheus.query(base, "vector(1)")[0]["value"][1] == "1"
    assert listening(layout.ports.prometheus) == {"0100007F"}  # 127.0.0.1, and nothing else
    assert (layout.logs / "prometheus.log").exists()  # its log, in the run directory


def test_starting_it_again_keeps_the_running_one(layout: Layout) -> None:
    prometheus.ensure_running(layout, None)
    first = procs.load(layout.pids, prometheus.PROCESS)
    prometheus.ensure_running(layout, None)
    assert procs.load(layout.pids, prometheus.PROCESS) == first
    assert first is not None and first.alive()


def test_new_rules_are_loaded_by_a_reload_not_a_restart(layout: Layout, tmp_path: Path) -> None:
    base = prometheus.ensure_running(layout, rule_file(tmp_path / "a.yaml", "First"))
    before = procs.load(layout.pids, prometheus.PROCESS)
    prometheus.ensure_running(layout, rule_file(tmp_path / "b.yaml", "Second"))
    assert procs.load(layout.pids, prometheus.PROCESS) == before
    names = {r["name"] for g in prometheus.rule_groups(base) for r in g["rules"]}
    assert names == {"Second"}


def test_an_alert_whose_condition_holds_is_listed_firing(layout: Layout, tmp_path: Path) -> None:
    base = prometheus.ensure_running(layout, rule_file(tmp_path / "r.yaml", "AlwaysOn"))
    procs.wait_until(
        lambda: any(
            a["labels"]["alertname"] == "AlwaysOn" and a["state"] == "firing" for a in prometheus.alerts(base)
        ),
        timeout=30,
        what="the alert to fire",
    )


def test_rules_prometheus_refuses_fail_the_reload_with_its_message(layout: Layout, tmp_path: Path) -> None:
    prometheus.ensure_running(layout, None)
    broken = tmp_path / "broken.yaml"
    broken.write_text("groups: [{name: t, rules: [{alert: X, expr: 'sum(('}]}]\n")
    with pytest.raises(DevClusterError, match="refused the new configuration or rules"):
        prometheus.ensure_running(layout, broken)


def test_a_query_prometheus_cannot_parse_raises_with_its_message(layout: Layout) -> None:
    base = prometheus.ensure_running(layout, None)
    with pytest.raises(DevClusterError, match="parse error"):
        prometheus.query(base, "sum((")


def test_sunk_dev_down_stops_it_by_its_pid(layout: Layout) -> None:
    prometheus.ensure_running(layout, None)
    running = procs.load(layout.pids, prometheus.PROCESS)
    assert running is not None and running.alive()
    discovery = procs.load(layout.pids, prometheus_sd.PROCESS)
    assert discovery is not None and discovery.alive()
    assert {"prometheus", "prometheus-sd"} <= set(DevCluster(layout).down())
    assert not running.alive() and not discovery.alive()
    assert procs.tracked(layout.pids) == []


def test_discovery_without_an_api_server_keeps_trying_and_says_why(layout: Layout) -> None:
    prometheus.ensure_running(layout, None)
    log = layout.logs / "prometheus-sd.log"
    procs.wait_until(
        lambda: "discovery failed" in log.read_text(), timeout=30, what="discovery to log its failure"
    )
    discovery = procs.load(layout.pids, prometheus_sd.PROCESS)
    assert discovery is not None and discovery.alive()
    assert json.loads(prometheus_sd.targets_file(layout).read_text()) == []


# -- `sunk dev prometheus` ------------------------------------------------------------------------


@pytest.mark.parametrize("rules", ["slurm-prometheus-rules", "slurm/", "/x", "a/b/c"])
def test_sunk_dev_prometheus_refuses_rules_that_name_no_namespace_and_configmap(
    rules: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SUNK_DEV_DIR", str(tmp_path))  # never this machine's running cluster
    with pytest.raises(DevClusterError, match="--rules takes NAMESPACE/CONFIGMAP"):
        run_dev(dev_parser().parse_args(["prometheus", "--rules", rules]))


def test_missing_graph_page_scripts_are_noticed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Debian's web pages link their scripts from libjs packages unpacking does not bring."""
    static = tmp_path / "pkg" / "usr" / "share" / "prometheus" / "web" / "static"
    static.mkdir(parents=True)
    (tmp_path / "there").mkdir()
    (static / "jquery").symlink_to(tmp_path / "there")
    monkeypatch.setattr(prometheus, "ensure_unpacked", lambda _log: tmp_path / "pkg")
    layout = Layout(tmp_path / "dev")
    assert prometheus.missing_web_assets(layout) is False
    (static / "d3").symlink_to("/nonexistent/javascript/d3")
    assert prometheus.missing_web_assets(layout) is True


def test_the_packages_relative_links_reach_the_hosts_scripts_once_linked(tmp_path: Path) -> None:
    """Debian's links are relative (../../../javascript/d3): unpacked into the cache they lead
    into the tree's own usr/share. Catches a graph page left without its scripts after the
    libjs packages are installed on the host."""
    package = tmp_path / "pkg"
    static = package / "usr" / "share" / "prometheus" / "web" / "static"
    static.mkdir(parents=True)
    (static / "d3").symlink_to("../../../javascript/d3")
    host = tmp_path / "host-share"
    (host / "javascript" / "d3").mkdir(parents=True)
    assert not (static / "d3").exists()
    prometheus.link_web_assets(package, host)
    assert (static / "d3").is_dir()
    assert not (package / "usr" / "share" / "fonts-glyphicons").is_symlink()  # the host has none
    prometheus.link_web_assets(package, host)  # again: nothing to do, no error


class Exporter(http.server.BaseHTTPRequestHandler):
    """A metrics endpoint at /custom only, whose series has a `node` label of its own."""

    def do_GET(self) -> None:
        body = b'sunk_e2e_probe{node="sn-1"} 1\n' if self.path == "/custom" else b""
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def exporter() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Exporter)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def eventually(probe: Any, what: str, timeout: float = 40) -> Any:
    """The first truthy value of `probe` (Prometheus scrapes every 5 s)."""
    found: list[Any] = []

    def ready() -> bool:
        found[:] = [probe()]
        return bool(found[0])

    procs.wait_until(ready, timeout=timeout, what=what, interval=0.5)
    return found[0]


def test_a_real_prometheus_scrapes_an_annotated_service_at_its_port_and_path_only(
    layout: Layout, exporter: int
) -> None:
    """The relabelling as Prometheus itself runs it: the endpoint's own port (1) is replaced
    by the annotated one, the path is the annotated one, the target is labelled with its
    namespace and Service, the series keeps its own `node`, and an unannotated Service
    with the same endpoint is not scraped."""
    base = prometheus.ensure_running(layout, None)
    annotated = service("probe-metrics", {"scrape": "true", "port": str(exporter), "path": "/custom"})
    plain = service("probe-plain", {"port": str(exporter), "path": "/custom"})
    slices = [endpoint_slice(name, ["127.0.0.1"], port=1) for name in ("probe-metrics", "probe-plain")]
    prometheus_sd.write(
        prometheus_sd.targets_file(layout), prometheus_sd.target_groups([annotated, plain], slices)
    )
    series = eventually(lambda: prometheus.query(base, "sunk_e2e_probe"), what="the probe's series scraped")
    [labels] = [s["metric"] for s in series]
    assert {k: labels[k] for k in ("namespace", "service", "node")} == {
        "namespace": "obs",
        "service": "probe-metrics",
        "node": "sn-1",
    }
    assert labels["instance"] == f"127.0.0.1:{exporter}"
    assert {t["labels"]["service"] for t in prometheus.targets(base)} == {"probe-metrics"}


def test_discovery_lists_every_service_and_endpointslice_of_the_cluster() -> None:
    class Kube:
        def __init__(self) -> None:
            self.asked: list[str] = []

        def get(self, path: str) -> dict[str, Any]:
            self.asked.append(path)
            if path == "/api/v1/services":
                return {"items": [service("m", CHART_ANNOTATIONS)]}
            return {"items": [endpoint_slice("m", ["10.64.1.7"])]}

    kube = Kube()
    groups = prometheus_sd.discover(kube)  # type: ignore[arg-type]
    assert kube.asked == ["/api/v1/services", "/apis/discovery.k8s.io/v1/endpointslices"]
    assert [g["targets"] for g in groups] == [["10.64.1.7:8080"]]
