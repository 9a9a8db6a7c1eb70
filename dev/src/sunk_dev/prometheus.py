"""A real Prometheus for the dev cluster: Debian's server, scraping the chart's metrics
Services the way a cluster's own Prometheus would, and evaluating the chart's alert rules.

The dashboards and alerts are written for a Prometheus that finds its targets by itself, so
this one does too: every endpoint of every Service, kept only when its Service is annotated
`prometheus.io/scrape: "true"` and scraped at the port and path its annotations name (the
prometheus-community chart's `kubernetes-service-endpoints` job), with the `namespace` and
`service` labels the rules select by. Debian builds Prometheus without Kubernetes discovery,
so `prometheus_sd` lists the endpoints into a file with the labels that discovery would give
them, and the relabelling here is the one a cluster's Prometheus runs on its own discovery.
The targets are Pod addresses on the real Nodes' bridge, which the host routes to.

It is started on demand (`sunk dev prometheus`, the e2e tests), not by `sunk dev up`: most
runs never look at it. It listens on 127.0.0.1 only, keeps its configuration, targets, TSDB
and log in the run directory, scrapes and evaluates every 5 s so tests see a change within
seconds, and is stopped by PID with the rest of the cluster by `sunk dev down`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import httpx
import yaml

from sunk_dev import procs, prometheus_sd
from sunk_dev.errors import DevClusterError
from sunk_dev.kubeapi import AdminKube
from sunk_dev.layout import HOST, Layout
from sunk_dev.promtool import ensure_unpacked

PROCESS = "prometheus"
# What Debian 12's package depends on for its web pages: their scripts, styles and fonts are
# links into these packages, which unpacking the package alone does not bring.
WEB_PACKAGES = (
    "fonts-glyphicons-halflings",
    "libjs-bootstrap4",
    "libjs-eonasdan-bootstrap-datetimepicker",
    "libjs-jquery",
    "libjs-jquery-hotkeys",
    "libjs-moment",
    "libjs-moment-timezone",
    "libjs-mustache",
    "libjs-popper.js",
    "libjs-rickshaw",
)
# The host's /usr/share folders those links lead into (scripts and styles; the icon font).
LINKED_SHARES = ("javascript", "fonts-glyphicons")
INTERVAL = "5s"
RULES_KEY = "sunk-alerts.yaml"  # the key of the chart's <fullname>-prometheus-rules ConfigMap
Json = dict[str, Any]


def prometheus_dir(layout: Layout) -> Path:
    return layout.root / "prometheus"


def url(layout: Layout) -> str:
    return f"http://{HOST}:{layout.ports.prometheus}"


def config_file(layout: Layout) -> Path:
    return prometheus_dir(layout) / "prometheus.yml"


def rules_file(layout: Layout) -> Path:
    """Where the rules it evaluates are kept: a copy, so the caller's file may go."""
    return prometheus_dir(layout) / "rules.yaml"


def annotation(name: str) -> str:
    """The discovery label of a Service annotation `prometheus.io/<name>`."""
    return f"__meta_kubernetes_service_annotation_prometheus_io_{name}"


def scrape_job(targets: Path) -> Json:
    """Service endpoints annotated for scraping, at the annotated port and path: the
    prometheus-community chart's job, reading `prometheus_sd`'s file of discovered endpoints
    where that chart's Prometheus asks the API server itself."""
    return {
        "job_name": "kubernetes-service-endpoints",
        "file_sd_configs": [{"files": [str(targets)], "refresh_interval": INTERVAL}],
        "relabel_configs": [
            {"source_labels": [annotation("scrape")], "regex": "true", "action": "keep"},
            {"source_labels": [annotation("path")], "regex": "(.+)", "target_label": "__metrics_path__"},
            {
                "source_labels": ["__address__", annotation("port")],
                "regex": r"([^:]+)(?::\d+)?;(\d+)",
                "replacement": "$1:$2",
                "target_label": "__address__",
            },
            # What the chart's rules select by. Never `node` or `pod`: the operator's series
            # carry a `node` label of their own (a Slurm node), which this would rename.
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
        ],
    }


def config(layout: Layout, rules: bool) -> Json:
    """Prometheus's configuration for this cluster; `rules`: evaluate `rules_file`."""
    return {
        "global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL, "scrape_timeout": INTERVAL},
        "rule_files": [str(rules_file(layout))] if rules else [],
        "scrape_configs": [scrape_job(prometheus_sd.targets_file(layout))],
    }


def argv(layout: Layout, package: Path) -> list[str]:
    """The server's command line: 127.0.0.1 only, state in the run directory, the package's
    own web assets (its default paths are those of an installed package), and /-/reload
    enabled so new rules need no restart."""
    here = prometheus_dir(layout)
    web = package / "usr" / "share" / "prometheus" / "web"
    consoles = package / "etc" / "prometheus"
    return [
        str(package / "usr" / "bin" / "prometheus"),
        f"--config.file={config_file(layout)}",
        f"--storage.tsdb.path={here / 'data'}",
        "--storage.tsdb.retention.time=1d",
        f"--web.listen-address={HOST}:{layout.ports.prometheus}",
        "--web.enable-lifecycle",
        f"--web.local-assets={web}",
        f"--web.console.templates={consoles / 'consoles'}",
        f"--web.console.libraries={consoles / 'console_libraries'}",
    ]


def ensure_running(layout: Layout, rules: Path | None) -> str:
    """Start Prometheus and its discovery for this cluster, or bring the running one's
    configuration and rules up to date (a reload, when either changed); returns its URL."""
    here = prometheus_dir(layout)
    here.mkdir(parents=True, exist_ok=True)
    rules_changed = _write(rules_file(layout), rules.read_text() if rules is not None else None)
    config_changed = _write(config_file(layout), yaml.safe_dump(config(layout, rules is not None)))
    _ensure_discovery(layout)
    base = url(layout)
    running = procs.load(layout.pids, PROCESS)
    if running is not None and running.alive():
        if rules_changed or config_changed:
            reload(base)
        return base
    package = ensure_unpacked(layout.logs / "prometheus-package.log")
    link_web_assets(package)
    proc = procs.spawn(PROCESS, argv(layout, package), layout.pids, layout.logs)
    procs.wait_until(
        lambda: ready(base),
        timeout=60,
        interval=0.2,
        what=f"Prometheus to answer at {base}",
        watch=[proc],
        log_dir=layout.logs,
    )
    return base


def _ensure_discovery(layout: Layout) -> None:
    """`prometheus_sd`'s process, started unless it runs; until its first pass the targets
    file is an empty list (Prometheus reads a missing file as an error)."""
    targets = prometheus_sd.targets_file(layout)
    if not targets.exists():
        prometheus_sd.write(targets, [])
    running = procs.load(layout.pids, prometheus_sd.PROCESS)
    if running is not None and running.alive():
        return
    # Its Layout.default() is this one: the run directory and port offset by environment.
    env = dict(os.environ, SUNK_DEV_DIR=str(layout.root), SUNK_DEV_PORT_OFFSET=str(layout.ports.offset))
    command = [sys.executable, "-m", "sunk_dev.prometheus_sd"]
    procs.spawn(prometheus_sd.PROCESS, command, layout.pids, layout.logs, env=env)


def missing_web_assets(layout: Layout) -> bool:
    """Whether the web pages' scripts are missing (links into WEB_PACKAGES that lead nowhere):
    the API, and so the tests, work without them; the graph page does not."""
    package = ensure_unpacked(layout.logs / "prometheus-package.log")
    link_web_assets(package)
    static = package / "usr/share/prometheus/web/static"
    return any(path.is_symlink() and not path.exists() for path in static.rglob("*"))


def link_web_assets(package: Path, host_share: Path = Path("/usr/share")) -> None:
    """Debian's web pages reach their scripts by relative links (`static/d3` is
    `../../../javascript/d3`), which in the unpacked tree lead into its own usr/share, where
    nothing is: link those folders to the host's, where the WEB_PACKAGES put them. A folder
    the host lacks is left unlinked (`missing_web_assets` then says so)."""
    for name in LINKED_SHARES:
        link, there = package / "usr" / "share" / name, host_share / name
        if there.is_dir() and not link.exists() and not link.is_symlink():
            link.symlink_to(there)


def stop(layout: Layout) -> list[str]:
    """Stop this cluster's Prometheus and its discovery (by their PID files); the names of
    those that were recorded."""
    stopped = []
    for name in (PROCESS, prometheus_sd.PROCESS):
        running = procs.load(layout.pids, name)
        if running is not None:
            procs.stop(running, layout.pids)
            stopped.append(name)
    return stopped


def _write(path: Path, text: str | None) -> bool:
    """Make `path` hold `text` (None: no file); whether that changed anything."""
    try:
        before: str | None = path.read_text()
    except FileNotFoundError:
        before = None
    if before == text:
        return False
    if text is None:
        path.unlink()
    else:
        path.write_text(text)
    return True


def ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/-/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def reload(base: str) -> None:
    """Have Prometheus read its configuration and rules again; its refusal, word for word."""
    reply = httpx.post(f"{base}/-/reload", timeout=30)
    if reply.status_code != 200:
        raise DevClusterError(f"Prometheus refused the new configuration or rules: {reply.text.strip()}")


def _api(base: str, path: str, **params: str) -> Any:
    reply = httpx.get(f"{base}/api/v1/{path}", params=params, timeout=30)
    try:
        body = reply.json()
    except ValueError:
        raise DevClusterError(
            f"Prometheus answered {path} with HTTP {reply.status_code}: {reply.text}"
        ) from None
    if body.get("status") != "success":
        raise DevClusterError(f"Prometheus refused {path} {params}: {body.get('error') or body}")
    return body["data"]


def query(base: str, promql: str) -> list[Json]:
    """An instant query's result: one entry per series ({"metric": labels, "value": [t, v]});
    an expression Prometheus cannot parse raises with its own message."""
    data = _api(base, "query", query=promql)
    if data.get("resultType") == "scalar":
        return [{"metric": {}, "value": data["result"]}]
    result: list[Json] = data["result"]
    return result


def alerts(base: str) -> list[Json]:
    """Every alert now pending or firing: labels, annotations, `state`, `activeAt`."""
    found: list[Json] = _api(base, "alerts")["alerts"]
    return found


def rule_groups(base: str) -> list[Json]:
    """The rule groups it evaluates, each rule with its name, state and health."""
    found: list[Json] = _api(base, "rules")["groups"]
    return found


def targets(base: str) -> list[Json]:
    """The active scrape targets: labels, `health` (up, down, unknown), `lastError`."""
    found: list[Json] = _api(base, "targets", state="active")["activeTargets"]
    return found


def fetch_rules(layout: Layout, namespace: str, configmap: str) -> Path:
    """The chart's rendered rule file (`metrics.rules.configMap: true`) read from its
    ConfigMap in the cluster and written beside Prometheus's files, for `ensure_running`."""
    admin = AdminKube(layout)
    try:
        found = admin.find(f"/api/v1/namespaces/{namespace}/configmaps/{configmap}")
    finally:
        admin.close()
    text = ((found or {}).get("data") or {}).get(RULES_KEY)
    if not text:
        raise DevClusterError(
            f"no {RULES_KEY} in ConfigMap {namespace}/{configmap}: install the chart with "
            "metrics.rules.configMap=true"
        )
    path = prometheus_dir(layout) / f"fetched-{namespace}-{configmap}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
