"""The dashboard pictures' pure parts (sunk_dev.dashboards.pictures): what each panel becomes
on Prometheus's graph page, the page's URLs, and the page a picture is taken of. Taking the
pictures needs the dev cluster, its Prometheus and Chromium (`sunk dev dashboard-pictures`)."""

from __future__ import annotations

import html
import re
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
import yaml

from sunk_dev import prereqs
from sunk_dev.cli import dev_parser, run_dev
from sunk_dev.dashboards import chart_dashboards_dir, pictures, reading
from sunk_dev.dashboards.pictures import Graph, Panel, Row
from sunk_dev.errors import DevClusterError
from sunk_dev.layout import cache_dir
from sunk_dev.promtool import apt_available, ensure_promtool

Json = dict[str, Any]
VALUES = pictures.variables("shots", "compute", "45m")


def timeseries(*targets: Json, stacking: str | None = None, w: int = 12) -> Json:
    custom = {"stacking": {"mode": stacking}} if stacking else {}
    return {
        "type": "timeseries",
        "title": "CPUs",
        "gridPos": {"w": w},
        "fieldConfig": {"defaults": {"custom": custom}},
        "targets": list(targets),
    }


def target(ref: str, expr: str, legend: str | None = None) -> Json:
    found = {"refId": ref, "expr": expr}
    if legend is not None:
        found["legendFormat"] = legend
    return found


def params(path: str) -> dict[str, str]:
    parts = urlsplit(path)
    assert parts.path == "/classic/graph"
    return dict(parse_qsl(parts.query))


def test_a_panels_queries_share_one_graph_each_labelled_by_its_legend() -> None:
    panel = timeseries(
        target("A", 'max by (partition) (alloc{namespace="$namespace"})', "{{partition}} allocated"),
        target("B", 'max by (partition) (total{namespace="$namespace"})', "{{partition}} total"),
    )
    [graph] = pictures.graphs(panel, VALUES)
    assert graph == Graph(
        'label_replace(max by (partition) (alloc{namespace="shots"}), "legend", "allocated", "", "")'
        ' or label_replace(max by (partition) (total{namespace="shots"}), "legend", "total", "", "")'
    )


def test_a_single_query_is_drawn_as_it_is_and_stacked_when_grafana_stacks_it() -> None:
    panel = timeseries(
        target("A", 'count by (state) (x{namespace="$namespace"})', "{{state}}"), stacking="normal"
    )
    assert pictures.graphs(panel, VALUES) == (Graph('count by (state) (x{namespace="shots"})', stacked=True),)
    panel = timeseries(target("A", "x"), stacking="none")
    assert pictures.graphs(panel, VALUES) == (Graph("x"),)


def test_legends_alike_or_empty_fall_back_to_the_queries_refids() -> None:
    panel = timeseries(target("A", "a", "{{node}}"), target("B", "b", "{{node}}"))
    [graph] = pictures.graphs(panel, VALUES)
    assert '"legend", "A"' in graph.expr and '"legend", "B"' in graph.expr


def test_a_legends_punctuation_and_quotes_are_kept_safe() -> None:
    assert pictures.legend_text({"legendFormat": "drained, {{reason_owner}}"}) == "drained"
    panel = timeseries(target("A", "a", 'say "hi"'), target("B", "b", "bye"))
    [graph] = pictures.graphs(panel, VALUES)
    assert r'"legend", "say \"hi\""' in graph.expr


def test_a_table_is_one_console_table_per_query_over_the_pictures_range() -> None:
    panel = {
        "type": "table",
        "title": "Nodes out of use",
        "targets": [target("A", "up"), target("B", "min_over_time(up[$__range:1m])")],
    }
    assert pictures.graphs(panel, VALUES) == (
        Graph("up", table=True),
        Graph("min_over_time(up[45m:1m])", table=True),
    )


def test_rows_keep_the_dashboards_order_widths_and_collapsed_panels() -> None:
    dashboard = {
        "panels": [
            timeseries(target("A", "top")),
            {"type": "row", "title": "Nodes", "panels": []},
            timeseries(target("A", "a"), w=8),
            {"type": "row", "title": "Empty", "panels": []},
            {"type": "row", "title": "Folded", "collapsed": True, "panels": [timeseries(target("A", "f"))]},
            {"type": "text", "title": "no queries"},
        ]
    }
    found = pictures.rows(dashboard, VALUES)
    assert [(r.title, [(p.width, p.graphs[0].expr) for p in r.panels]) for r in found] == [
        ("", [(12, "top")]),
        ("Nodes", [(8, "a")]),
        ("Folded", [(12, "f")]),
    ]


def test_the_graph_page_url_carries_every_graph_its_tab_range_and_stacking() -> None:
    path = pictures.graph_path([Graph('a{x="1"} or b', stacked=True), Graph("c", table=True)], "45m")
    assert params(path) == {
        "g0.expr": 'a{x="1"} or b',
        "g0.tab": "0",
        "g0.range_input": "45m",
        "g0.stacked": "1",
        "g1.expr": "c",
        "g1.tab": "1",
        "g1.range_input": "45m",
    }


def test_the_page_titles_the_dashboard_and_each_panel_above_its_graph_page() -> None:
    found = [
        Row("", (Panel("Top <1>", 24, (Graph("x"),)),)),
        Row(
            "Nodes & more",
            (Panel("Left", 12, (Graph("y", stacked=True),)), Panel("Right", 12, (Graph("z"),))),
        ),
    ]
    text = pictures.page({"title": "sunk / Cluster"}, found, "from here", "30m")
    assert "<h1>sunk / Cluster</h1>" in text and "from here" in text
    assert "<h2>Nodes &amp; more</h2>" in text and "Top &lt;1&gt;" in text
    titles = re.findall(r'<div class="title">([^<]*)</div>', text)
    sources = [html.unescape(s) for s in re.findall(r'<iframe src="([^"]*)"', text)]
    spans = re.findall(r"grid-column: span (\d+)", text)
    assert titles == ["Top &lt;1&gt;", "Left", "Right"] and spans == ["24", "12", "12"]
    assert [params(s)["g0.expr"] for s in sources] == ["x", "y", "z"]
    assert params(sources[1])["g0.stacked"] == "1"


def test_the_graph_pages_controls_are_hidden_inside_its_head() -> None:
    styled = pictures.with_style("<html><head><title>x</title></head><body></body></html>")
    assert styled.index('id="sunk-pictures"') < styled.index("</head>")
    assert "nav.navbar" in styled
    assert pictures.with_style("no head") == "no head"


def test_the_pages_height_is_read_only_once_every_graph_page_answered() -> None:
    assert pictures.page_height('<html><body data-height="2376"><h1>') == 2376
    assert pictures.page_height("<html><body><h1>") is None


def test_every_panel_of_the_charts_dashboards_is_in_its_picture() -> None:
    for dashboard in pictures.load(chart_dashboards_dir()):
        shown = [p.title for row in pictures.rows(dashboard, VALUES) for p in row.panels]
        with_queries = [p["title"] for p in reading.panels(dashboard) if p.get("targets")]
        assert shown == with_queries, dashboard["uid"]
        text = pictures.page(dashboard, pictures.rows(dashboard, VALUES), "", "45m")
        assert len(re.findall("<iframe ", text)) == len(shown)
        assert "$" not in html.unescape(text.split("<script>")[0]), "a variable left unfilled"
    assert pictures.file_name({"uid": "sunk-cluster"}) == "dashboard-sunk-cluster.png"


@pytest.fixture(scope="module")
def promtool() -> Path:
    if not apt_available():
        pytest.skip("promtool comes from Debian's prometheus package and this machine has no apt")
    return ensure_promtool(cache_dir() / "promtool.log")


def test_every_expression_the_pictures_run_parses_as_promql(promtool: Path, tmp_path: Path) -> None:
    """The combined expressions (label_replace ... or ...) are ours, not the dashboards'."""
    exprs = [
        graph.expr
        for dashboard in pictures.load(chart_dashboards_dir())
        for row in pictures.rows(dashboard, VALUES)
        for panel in row.panels
        for graph in panel.graphs
    ]
    rules = [{"record": f"sunk_picture:graph_{n}", "expr": expr} for n, expr in enumerate(exprs)]
    path = tmp_path / "pictures.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "pictures", "rules": rules}]}))
    result = subprocess.run([str(promtool), "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(exprs)} rules found" in result.stdout


def test_the_command_refuses_a_range_prometheus_would_not_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SUNK_DEV_DIR", str(tmp_path))  # never this machine's running cluster
    with pytest.raises(DevClusterError, match="--range takes a Prometheus duration"):
        run_dev(dev_parser().parse_args(["dashboard-pictures", "--range", "half an hour"]))


def test_without_root_the_browser_is_not_installed_but_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(
        prereqs.shutil, "which", lambda name: "/usr/bin/apt-get" if name == "apt-get" else None
    )
    monkeypatch.setattr(prereqs.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(prereqs, "apt_install", lambda *a: pytest.fail("installed without root"))
    with pytest.raises(DevClusterError, match="apt-get install --no-install-recommends chromium libjs-d3"):
        prereqs.ensure_browser(tmp_path / "log", ("libjs-d3",))
