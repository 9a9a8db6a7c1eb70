"""Issue #50: every query on sunk's dashboards is PromQL that Prometheus parses, uses only
variables its dashboard defines, and reads only metrics the docs list.

Parsing: promtool (Debian's prometheus package, unpacked by sunk_dev.promtool) checks a rule
file holding one recording rule per panel query, with Grafana's variables replaced by the
values Grafana would put there. `promtool check rules` runs Prometheus's own parser on each
expression, offline, with no server and no data, which is all a syntax check needs.

Names: a metric renamed in the code and the docs, but not on a dashboard, would leave a
panel silently empty; here it breaks the build. The documented names are read from
docs/operations.md's Metrics section and docs/operator-guide.md's (the Pod scheduler's),
whose tables shorten a family's siblings to their tails (`slurm_nodes_idle`, `_alloc`)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sunk.metrics import REGISTRY, kube_scheduler
from sunk.operator.nodeset.nodeset_metrics import NodeSetMetrics
from sunk_dev.dashboards import reading
from sunk_dev.dashboards.reading import Query, metric_names, queries, variable_selectors
from sunk_dev.layout import cache_dir
from sunk_dev.promtool import apt_available, ensure_promtool
from tests.unit.test_slurm_metrics import listed, metrics, recorded_jobs, recorded_nodes, view

Json = dict[str, Any]
ROOT = Path(__file__).resolve().parents[2]
DIR = ROOT / "charts" / "slurm" / "dashboards"
METRICS_DOCS = (ROOT / "docs" / "operations.md", ROOT / "docs" / "operator-guide.md")
# What Grafana puts in place of its own variables and the dashboards' (values of the kind
# Grafana would use: a duration for the intervals and range, a name for the labels).
GRAFANA = {"__rate_interval": "2m", "__interval": "1m", "__range": "6h"}
EXAMPLES = {"namespace": "team", "nodeset": "cpus", "datasource": "prometheus"}
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


def committed() -> dict[str, Json]:
    return {path.name: json.loads(path.read_text()) for path in sorted(DIR.glob("*.json"))}


def all_queries() -> list[Query]:
    return [query for dashboard in committed().values() for query in queries(dashboard)]


def substituted(expr: str) -> str:
    """`expr` as Grafana sends it to Prometheus, with the example variable values."""
    return reading.substituted(expr, {**GRAFANA, **EXAMPLES})


def rule_file(found: list[Query]) -> str:
    """One recording rule per query, one group per dashboard."""
    groups: dict[str, list[Json]] = {}
    for number, query in enumerate(found):
        rules = groups.setdefault(query.dashboard, [])
        rules.append(
            {
                "record": f"sunk_dashboard:query_{number}",
                "expr": substituted(query.expr),
                "labels": {"panel": query.panel, "ref": query.ref},
            }
        )
    return yaml.safe_dump({"groups": [{"name": name, "rules": rules} for name, rules in groups.items()]})


def check_rules(promtool: Path, text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(text)
    return subprocess.run([str(promtool), "check", "rules", str(path)], capture_output=True, text=True)


# -- the documented names ---------------------------------------------------------------------


def metrics_section(text: str) -> str:
    """The document's '## Metrics...' section, up to the next '## ' heading."""
    start = re.search(r"^## Metrics.*$", text, re.MULTILINE)
    assert start is not None, "no '## Metrics' section"
    end = re.search(r"^## ", text[start.end() :], re.MULTILINE)
    return text[start.end() : start.end() + end.start()] if end else text[start.end() :]


def expand(base: str, tail: str) -> str:
    """A sibling written as its tail: `_alloc` after `slurm_nodes_idle` is slurm_nodes_alloc;
    `_cpus_alloc` after `slurm_node_cpus` is slurm_node_cpus_alloc; `_jobs_running` after
    `slurm_partition_jobs_pending` is slurm_partition_jobs_running. The tail replaces the
    base from the last place its first word stands in it, else the base's last word."""
    first = tail.split("_")[1]
    words = base.split("_")
    cut = max((i for i, word in enumerate(words) if word == first), default=len(words) - 1)
    return "_".join(words[:cut]) + tail


def documented_names(text: str) -> set[str]:
    """Every metric name the tables of the text's Metrics section list."""
    names: set[str] = set()
    for line in metrics_section(text).splitlines():
        if not line.startswith("|"):
            continue
        cells = line.strip("|").split("|")
        tokens = [re.sub(r"\{.*\}", "", t) for t in re.findall(r"`([^`]+)`", cells[0])]
        words = [w for cell in cells[1:] for w in re.findall(r"`(\w+)`", cell)]
        base = ""
        for token in tokens:
            if token.startswith("_") and base:
                names.add(expand(base, token))
            elif re.fullmatch(r"[a-z_:]+<\w+>", token):
                names |= {token.split("<")[0] + word for word in words}
            elif re.fullmatch(r"[a-z][a-z0-9_:]*", token):
                base = token
                names.add(token)
    return names


def documented() -> set[str]:
    return set().union(*(documented_names(path.read_text()) for path in METRICS_DOCS))


def is_documented(name: str, known: set[str]) -> bool:
    return name in known or any(name == base + tail for base in known for tail in HISTOGRAM_SERIES)


def served() -> set[str]:
    """The series names sunk's own code serves: the operator's Slurm collector fed recorded
    Slurm answers, its NodeSet collector, and the process registry both components share
    (kube-scheduler's names included)."""
    assert kube_scheduler.QUEUES  # its families are registered on import
    slurm = listed(metrics(), view(recorded_nodes(), recorded_jobs())).registry
    families = [*slurm.collect(), *NodeSetMetrics({}, set).collect(), *REGISTRY.collect()]
    names = set()
    for family in families:
        suffixes = {"counter": ("_total",), "histogram": HISTOGRAM_SERIES}.get(family.type, ("",))
        names |= {family.name + suffix for suffix in suffixes}
    return names


# -- the tests ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def promtool() -> Path:
    if not apt_available():
        pytest.skip("promtool comes from Debian's prometheus package and this machine has no apt")
    return ensure_promtool(cache_dir() / "promtool.log")


def test_every_panel_query_parses_as_promql(promtool: Path, tmp_path: Path) -> None:
    found = all_queries()
    assert len(found) >= 40
    result = check_rules(promtool, rule_file(found), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(found)} rules found" in result.stdout


def test_the_check_refuses_a_query_prometheus_cannot_parse(promtool: Path, tmp_path: Path) -> None:
    broken = Query(
        "sunk-cluster", "Nodes by state", "A", 'count by (state) (sunk_slurm_node_info{namespace="x"}'
    )
    result = check_rules(promtool, rule_file([broken]), tmp_path)
    assert result.returncode != 0
    assert "unclosed left parenthesis" in result.stdout + result.stderr


def test_every_variable_a_query_uses_is_defined_by_its_dashboard() -> None:
    for name, dashboard in committed().items():
        defined = {v["name"] for v in dashboard["templating"]["list"]}
        for query in queries(dashboard):
            used = set(reading.VARIABLE.findall(query.expr)) - set(GRAFANA)
            assert used <= defined, (name, query.panel, used - defined)


def test_every_variable_is_replaced_before_parsing() -> None:
    for query in all_queries():
        assert "$" not in substituted(query.expr), query


def test_every_metric_a_panel_reads_is_documented() -> None:
    known = documented()
    for query in all_queries():
        missing = {n for n in metric_names(query.expr) if not is_documented(n, known)}
        assert not missing, f"{query.dashboard} / {query.panel}: {sorted(missing)} not in the docs' Metrics"


def test_every_metric_a_panel_reads_is_one_sunks_code_serves() -> None:
    """The docs could lag a rename in the code; the code is what Prometheus will scrape."""
    serves = served()
    for query in all_queries():
        missing = metric_names(query.expr) - serves
        assert not missing, f"{query.dashboard} / {query.panel}: {sorted(missing)} served by no collector"


def test_every_metric_a_variable_reads_is_documented() -> None:
    known = documented()
    for name, dashboard in committed().items():
        for selector in variable_selectors(dashboard):
            assert metric_names(selector) and all(is_documented(n, known) for n in metric_names(selector)), (
                name,
                selector,
            )


def test_every_query_reads_some_metric() -> None:
    for query in all_queries():
        assert metric_names(query.expr), query


# -- the readers these checks rest on -----------------------------------------------------------


def test_the_name_reader_skips_functions_labels_strings_ranges_and_numbers() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, reason) (rate(a_seconds_bucket{x="y}", z=~"b|c"}[5m]))) '
        "/ 1e6 * on (partition) group_left max by (partition) (b_total offset 5m) > bool 0 "
        "or time() - c[1h:1m]"
    )
    assert metric_names(expr) == {"a_seconds_bucket", "b_total", "c"}


def test_the_docs_reader_expands_the_tables_tails_and_state_lists() -> None:
    known = documented()
    for name in (
        "slurm_nodes_alloc",
        "slurm_node_cpus_alloc",
        "slurm_partition_cpus",
        "slurm_partition_nodes_cpus_idle",
        "slurm_partition_jobs_running",
        "slurm_bf_cycle_max",
        "slurm_sdiag_jobs_failed",
        "slurm_jobs_outofmemory",
        "sunk_slurm_node_failures_total",
        "scheduler_pending_pods",
    ):
        assert name in known, name


def test_the_docs_reader_knows_no_name_the_docs_do_not_list() -> None:
    known = documented()
    assert "slurm_nodes_powering_up" not in known
    assert "slurm_bf_mean_cycle" not in known
    assert not is_documented("sunk_slurm_node_info_bucket", {"sunk_slurm_node_infos"})
