"""Pictures of the chart's dashboards, taken in a headless browser from a real Prometheus.

Grafana is not packaged for Debian, so the pictures come from the next best thing a person
could open: Prometheus's own graph page (Debian's, the dev cluster's `sunk dev prometheus`),
running each panel's queries with the dashboard's variables filled in. One picture per
dashboard: a page of ours lays the panels out as Grafana's grid does (rows as headings, each
panel as wide as its grid width) and titles each panel, whose body is an iframe of the graph
page: a graph for Grafana's graphs, heatmaps and gauges (a panel's several queries drawn
together, each series labelled `legend` with its query's legend text), the console's table
for Grafana's tables (one table per query, as Grafana fetches them).

The page and the graph pages are served together by a small proxy in front of Prometheus, on
one origin, so that the page can read how tall each graph page grew and the proxy can hide the
graph page's own controls (the navigation bar, the query box, the buttons). Chromium renders it
twice: once to read the page's height (`--dump-dom`), once to take the picture at that height.

`sunk dev dashboard-pictures` runs it against the dev cluster; the pure parts (what each
panel becomes, the URLs, the page) are unit tested.
"""

from __future__ import annotations

import html
import http.server
import json
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx

from sunk_dev.dashboards import reading
from sunk_dev.errors import DevClusterError

Json = dict[str, Any]
GRAPH_PAGE = "/classic/graph"  # Debian's Prometheus serves its classic pages under /classic
PAGES = "/__pictures/"  # the proxy's own pages; every other path goes to Prometheus
WIDTH = 1280  # the browser window's width, in pixels
TIMEOUT = 300  # seconds for one Chromium run (about 45 s each on a busy 2-core machine)
VIRTUAL_BUDGET = 600_000  # ms of the page's own clock (chromium_argv)
# What a person would have picked at the top of the dashboard, besides namespace and nodeset;
# $__range is the picture's range, set by `variables`.
GRAFANA_VARIABLES = {"__rate_interval": "1m", "__interval": "15s", "datasource": "prometheus"}
# Grafana panels drawn as the console's table rather than as a graph.
TABLES = frozenset({"table"})

# Hidden on each graph page: everything a person uses to edit the query, not to read it.
GRAPH_PAGE_STYLE = """<style id="sunk-pictures">
body { padding-top: 0 !important; }
nav.navbar, .query-history, #add_graph, .expression_input, .eval_stats, .spinner, .form-inline,
a[name=remove], .nav-tabs, .graph_container > .clearfix, .console > .clearfix
  { display: none !important; }
.container-fluid { padding: 0 4px; }
.graph_wrapper { margin-top: 0; }
.tab-pane { border: none; padding: 0; }
.graph { min-height: 0; height: 230px; left: 30px; }
.graph_area { margin: 4px 0 4px 6px; }
.legend { margin: 0 0 0 36px; font-size: 11px; }
.console_table { font-size: 12px; margin-bottom: 0; }
.alert { margin: 4px 0; padding: 4px 8px; }
</style>"""

# The page's script: wait until every graph page has its answer (the query's statistics are
# written once its request completes), size each iframe to its content, then say how tall
# the whole page is, for the screenshot.
PAGE_SCRIPT = """
function answered(frame) {
  const doc = frame.contentDocument;
  if (!doc || doc.readyState !== "complete") return false;
  const wrappers = doc.querySelectorAll(".graph_wrapper");
  return wrappers.length > 0 && Array.from(wrappers).every(
    w => w.querySelector(".eval_stats").textContent.trim() !== ""
      || w.querySelector(".error").textContent.trim() !== "");
}
function poll() {
  const frames = Array.from(document.querySelectorAll("iframe"));
  if (!frames.every(answered)) { setTimeout(poll, 250); return; }
  setTimeout(() => {
    for (const frame of frames) {
      frame.style.height = frame.contentDocument.documentElement.scrollHeight + "px";
    }
    document.body.dataset.height = document.documentElement.scrollHeight;
    document.title = "answered";
  }, 500);
}
poll();
"""

PAGE_STYLE = """
body { font-family: "DejaVu Sans", Arial, sans-serif; margin: 12px; background: #f4f5f5;
  color: #202226; }
h1 { font-size: 20px; margin: 0 0 2px 0; }
.about { font-size: 12px; color: #555; margin-bottom: 8px; }
h2 { font-size: 15px; margin: 14px 0 6px 0; padding-bottom: 2px; border-bottom: 1px solid #ccc; }
.grid { display: grid; grid-template-columns: repeat(24, 1fr); gap: 8px; }
.panel { background: #fff; border: 1px solid #d8d9da; border-radius: 3px; min-width: 0; }
.title { font-size: 13px; font-weight: bold; padding: 5px 8px 3px 8px; }
iframe { border: 0; width: 100%; height: 60px; display: block; }  /* grows to its page */
"""


@dataclass(frozen=True)
class Graph:
    """One graph (or console table) on a graph page: the query and how it is shown."""

    expr: str
    table: bool = False
    stacked: bool = False


@dataclass(frozen=True)
class Panel:
    title: str
    width: int  # of Grafana's 24 grid columns
    graphs: tuple[Graph, ...]


@dataclass(frozen=True)
class Row:
    title: str  # "" for panels above the first row
    panels: tuple[Panel, ...]


def variables(namespace: str, nodeset: str, range_: str) -> dict[str, str]:
    """What Grafana would put in place of the dashboards' variables, for a picture of the
    release in `namespace` (and its NodeSet `nodeset`) over the last `range_`."""
    return dict(GRAFANA_VARIABLES, namespace=namespace, nodeset=nodeset, __range=range_)


def legend_text(target: Json) -> str:
    """A target's legend without its `{{label}}` parts (those labels show anyway)."""
    text = re.sub(r"\{\{[^}]*\}\}", " ", str(target.get("legendFormat") or ""))
    return " ".join(text.split()).strip(" ,;:-")


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def graphs(panel: Json, values: Mapping[str, str]) -> tuple[Graph, ...]:
    """What the graph page shows for `panel`: one console table per query of a table; for
    anything else one graph of all its queries, each series of a panel with several labelled
    `legend` by its query (its legend text, else its refId), so that Prometheus tells them
    apart and none hides another (`or` keeps only the first of two equal label sets)."""
    targets = [t for t in panel.get("targets") or [] if t.get("expr")]
    exprs = [reading.substituted(str(t["expr"]), values) for t in targets]
    if not exprs:
        return ()
    if panel.get("type") in TABLES:
        return tuple(Graph(expr, table=True) for expr in exprs)
    stacking = ((panel.get("fieldConfig") or {}).get("defaults") or {}).get("custom") or {}
    stacked = (stacking.get("stacking") or {}).get("mode") in ("normal", "percent")
    if len(exprs) == 1:
        return (Graph(exprs[0], stacked=stacked),)
    names = [legend_text(t) or str(t.get("refId")) for t in targets]
    if len(set(names)) < len(names):
        names = [str(t.get("refId")) for t in targets]
    parts = [
        f'label_replace({expr}, "legend", {_quoted(name)}, "", "")'
        for expr, name in zip(exprs, names, strict=True)
    ]
    return (Graph(" or ".join(parts), stacked=stacked),)


def rows(dashboard: Json, values: Mapping[str, str]) -> list[Row]:
    """The dashboard's panels under their rows, in the dashboard's order (a collapsed row's
    panels under it as well); rows whose panels show nothing are left out."""
    found: list[tuple[str, list[Panel]]] = [("", [])]
    for item in dashboard.get("panels") or []:
        if item.get("type") == "row":
            found.append((str(item.get("title") or ""), []))
            inner = item.get("panels") or []
        else:
            inner = [item]
        for panel in inner:
            shown = graphs(panel, values)
            if shown:
                width = int((panel.get("gridPos") or {}).get("w") or 24)
                found[-1][1].append(Panel(str(panel.get("title") or ""), max(1, min(24, width)), shown))
    return [Row(title, tuple(panels)) for title, panels in found if panels]


def graph_path(shown: Sequence[Graph], range_: str) -> str:
    """The graph page's path with `shown` as its graphs g0, g1, ... over the last `range_`."""
    params: list[tuple[str, str]] = []
    for index, graph in enumerate(shown):
        prefix = f"g{index}."
        params += [(prefix + "expr", graph.expr), (prefix + "tab", "1" if graph.table else "0")]
        params += [(prefix + "range_input", range_)]
        if graph.stacked:
            params.append((prefix + "stacked", "1"))
    return f"{GRAPH_PAGE}?{urlencode(params)}"


def page(dashboard: Json, found: Sequence[Row], about: str, range_: str) -> str:
    """The HTML page of one dashboard's picture: its title, `about` (where the data came
    from), and every row's panels, titled, each an iframe of the graph page."""
    parts = [
        "<!DOCTYPE html>",
        '<html><head><meta charset="utf-8">',
        f"<title>{html.escape(str(dashboard.get('title') or ''))}</title>",
        f"<style>{PAGE_STYLE}</style></head><body>",
        f"<h1>{html.escape(str(dashboard.get('title') or ''))}</h1>",
        f'<div class="about">{html.escape(about)}</div>',
    ]
    for row in found:
        if row.title:
            parts.append(f"<h2>{html.escape(row.title)}</h2>")
        parts.append('<div class="grid">')
        for panel in row.panels:
            src = html.escape(graph_path(panel.graphs, range_), quote=True)
            parts += [
                f'<div class="panel" style="grid-column: span {panel.width}">',
                f'<div class="title">{html.escape(panel.title)}</div>',
                f'<iframe src="{src}" scrolling="no"></iframe>',
                "</div>",
            ]
        parts.append("</div>")
    parts.append(f"<script>{PAGE_SCRIPT}</script></body></html>")
    return "\n".join(parts) + "\n"


def with_style(text: str) -> str:
    """A graph page with its controls hidden (GRAPH_PAGE_STYLE before its `</head>`)."""
    head = text.find("</head>")
    if head < 0:
        return text
    return text[:head] + GRAPH_PAGE_STYLE + text[head:]


def page_height(dom: str) -> int | None:
    """The height the page gave itself once every graph page answered (None: it never did)."""
    found = re.search(r'<body[^>]*\sdata-height="(\d+)"', dom)
    return int(found.group(1)) if found else None


def file_name(dashboard: Json) -> str:
    return f"dashboard-{dashboard.get('uid')}.png"


# -- taking them ----------------------------------------------------------------------------------


@contextmanager
def serving(prometheus: str, pages: Mapping[str, str]) -> Iterator[str]:
    """A proxy on 127.0.0.1 (a free port) serving `pages` under PAGES and everything else
    from `prometheus`, graph pages with their controls hidden; yields its base URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith(PAGES):
                text = pages.get(self.path[len(PAGES) :])
                body = (text or "no such page").encode()
                self._answer(200 if text else 404, "text/html; charset=utf-8", body)
                return
            try:
                reply = client.get(prometheus + self.path)
            except httpx.HTTPError as err:
                self._answer(502, "text/plain", str(err).encode())
                return
            kind = reply.headers.get("content-type", "application/octet-stream")
            body = reply.content
            if self.path.split("?")[0] == GRAPH_PAGE and kind.startswith("text/html"):
                body = with_style(reply.text).encode()
            cache = self.path.startswith("/classic/static/")  # each iframe loads them all
            self._answer(reply.status_code, kind, body, cache)

        def _answer(self, status: int, kind: str, body: bytes, cache: bool = False) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            if cache:
                self.send_header("Cache-Control", "max-age=3600")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    client = httpx.Client(timeout=60)  # one for all: a client each costs a TLS context
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        client.close()


def chromium_argv(browser: Path, profile: Path, width: int, height: int) -> list[str]:
    """Headless Chromium, with a throwaway profile, that dumps or shoots once the page's own
    clock has run VIRTUAL_BUDGET ms. That clock races through timers and does not wait for an
    iframe still queued for a connection (with 60 s, a busy machine's pictures had graph
    pages not yet loaded); once the page has said it is answered nothing more is scheduled,
    so the rest of the budget passes at once."""
    return [
        str(browser),
        "--headless",
        "--no-sandbox",  # as root it refuses to start otherwise
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
        f"--virtual-time-budget={VIRTUAL_BUDGET}",
    ]


def shoot(browser: Path, url: str, out: Path, width: int = WIDTH) -> None:
    """Write `out`, a PNG of the page at `url` as tall as the page made itself."""
    with tempfile.TemporaryDirectory(prefix="sunk-pictures-") as profile:
        argv = chromium_argv(browser, Path(profile), width, 1000)
        dumped = subprocess.run([*argv, "--dump-dom", url], capture_output=True, text=True, timeout=TIMEOUT)
        height = page_height(dumped.stdout)
        if height is None:
            raise DevClusterError(
                f"the page at {url} never had every panel's answer (chromium: "
                f"{dumped.stderr.strip().splitlines()[-1:] or dumped.returncode})"
            )
        argv = chromium_argv(browser, Path(profile), width, height)
        shot = subprocess.run(
            [*argv, f"--screenshot={out}", url], capture_output=True, text=True, timeout=180
        )
        if shot.returncode != 0 or not out.is_file():
            raise DevClusterError(f"chromium took no picture of {url}: {shot.stderr.strip()[-500:]}")


def take(
    prometheus: str,
    dashboards: Sequence[Json],
    out: Path,
    browser: Path,
    *,
    namespace: str,
    nodeset: str,
    range_: str,
    about: str,
) -> list[Path]:
    """One PNG per dashboard in `out`, from `prometheus`; their paths."""
    pages = {}
    values = variables(namespace, nodeset, range_)
    for dashboard in dashboards:
        pages[f"{dashboard.get('uid')}.html"] = page(dashboard, rows(dashboard, values), about, range_)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with serving(prometheus, pages) as base:
        for dashboard in dashboards:
            path = out / file_name(dashboard)
            shoot(browser, f"{base}{PAGES}{dashboard.get('uid')}.html", path)
            written.append(path)
    return written


def load(directory: Path) -> list[Json]:
    """The chart's dashboards, as their JSON files hold them."""
    return [json.loads(path.read_text()) for path in sorted(directory.glob("*.json"))]


def browser_path() -> Path | None:
    found = shutil.which("chromium")
    return Path(found) if found else None


def prometheus_version(base: str) -> str:
    try:
        return str(httpx.get(f"{base}/api/v1/status/buildinfo", timeout=10).json()["data"]["version"])
    except (httpx.HTTPError, ValueError, KeyError):
        return "?"


def about(namespace: str, range_: str, version: str, when: str) -> str:
    """The line under each picture's title: what it shows, and from what."""
    return (
        f"The release in namespace {namespace}, the last {range_} up to {when}. Each panel is "
        f"Prometheus {version}'s own graph page running the panel's queries (Grafana is not "
        "packaged for Debian): a panel's several queries share one graph, told apart by `legend`."
    )
